// The channel's WebSocket client (src/channel/websocket.ts, upgrade.ts) against a server
// written here over node:net, byte by byte as RFC 6455 has it: the upgrade (key checked, no
// Origin, no extension offered, one answered refused), masked client frames, fragmented and
// split server frames, pings answered, the close handshake, the message limit, and refusals
// read with their bodies.
import { afterEach, describe, expect, it } from "vitest";
import { accepting, serve, serverFrame, servers } from "./channel-peer.js";
import { acceptFor, connect, dechunked } from "../src/channel/upgrade.js";
import { Refusal, Unreachable, clientFrame, type Closed, type WebSocketClient } from "../src/channel/websocket.js";

afterEach(() => {
  for (const server of servers.splice(0)) server.close();
});

function listening(client: WebSocketClient): { messages: Uint8Array[]; closed: Promise<Closed> } {
  const messages: Uint8Array[] = [];
  let done!: (closed: Closed) => void;
  const closed = new Promise<Closed>((resolve) => (done = resolve));
  client.listen({ message: (data) => messages.push(Uint8Array.from(data)), closed: (found) => done(found) });
  return { messages, closed };
}

const options = { maxMessage: 1 << 20, connectTimeoutMs: 5000 };

describe("the channel's WebSocket client", () => {
  it("upgrades with a checked key and the caller's headers, no Origin and no extension", async () => {
    const { url, peer } = await serve(accepting("Toolref-Channel-Window: 1048576\r\n"));
    const client = await connect(url, [["Toolref-Key", "tk_1"]], options);
    const { request } = await peer;
    expect(request.split("\r\n")[0]).toBe("GET /v1/channel?x=1 HTTP/1.1");
    expect(request).toMatch(/\r\nUpgrade: websocket\r\n/);
    expect(request).toMatch(/\r\nSec-WebSocket-Version: 13\r\n/);
    expect(request).toMatch(/\r\nToolref-Key: tk_1(\r\n|$)/);
    expect(request.toLowerCase()).not.toMatch(/origin:|sec-websocket-extensions:/);
    expect(client.accepted).toContainEqual(["toolref-channel-window", "1048576"]);
    client.abort();
  });

  it("sends masked binary frames the server unmasks to the same bytes, every length form", async () => {
    const { url, peer } = await serve(accepting());
    const client = await connect(url, [], options);
    listening(client);
    const { next } = await peer;
    for (const size of [0, 5, 125, 126, 65535, 65536, 200_003]) {
      const data = Uint8Array.from({ length: size }, (_, index) => (index * 31 + size) & 0xff);
      await client.send(data);
      const frame = await next();
      expect([frame.fin, frame.opcode, frame.masked]).toEqual([true, 2, true]);
      expect(Buffer.compare(frame.payload, Buffer.from(data))).toBe(0);
    }
    client.abort();
  });

  it("assembles a fragmented message that arrives a byte at a time, and answers a ping", async () => {
    const { url, peer } = await serve(accepting());
    const client = await connect(url, [], options);
    const { messages } = listening(client);
    const { socket, next } = await peer;
    const wire = Buffer.concat([
      serverFrame(2, Buffer.from("hello, "), false),
      serverFrame(9, Buffer.from("are you there")),
      serverFrame(0, Buffer.alloc(0), false),
      serverFrame(0, Buffer.from("world")),
      serverFrame(2, Buffer.alloc(300, 7)),
    ]);
    for (const byte of wire) socket.write(Buffer.from([byte]));
    const pong = await next();
    expect([pong.opcode, pong.masked, pong.payload.toString()]).toEqual([10, true, "are you there"]);
    await expect.poll(() => messages.length).toBe(2);
    expect(Buffer.from(messages[0]!).toString()).toBe("hello, world");
    expect(Buffer.compare(Buffer.from(messages[1]!), Buffer.alloc(300, 7))).toBe(0);
    client.abort();
  });

  it("answers the server's close with its code and reports code and reason", async () => {
    const { url, peer } = await serve(accepting());
    const client = await connect(url, [], options);
    const { closed } = listening(client);
    const { socket, next } = await peer;
    const reason = Buffer.from("toolref: every turn read was answered");
    socket.write(serverFrame(8, Buffer.concat([Buffer.from([0x03, 0xf4]), reason])));
    expect(await closed).toEqual({ code: 1012, reason: reason.toString(), byUs: false });
    const answer = await next();
    expect([answer.opcode, answer.payload.readUInt16BE(0)]).toEqual([8, 1012]);
    expect(client.open).toBe(false);
    expect(await client.send(Uint8Array.of(1))).toBe(false); // nothing goes out once closed
  });

  it("fails 1002 on a close code no peer may send, 1007 on a reason that is no UTF-8", async () => {
    const bad = [999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535].map((code) => [code, Buffer.alloc(0), 1002] as const);
    for (const [code, reason, expected] of [...bad, [1000, Buffer.from([0x6f, 0xc3, 0x28]), 1007] as const]) {
      const { url, peer } = await serve(accepting());
      const client = await connect(url, [], options);
      const { closed } = listening(client);
      const { socket, next } = await peer;
      socket.write(serverFrame(8, Buffer.concat([Buffer.from([code >> 8, code & 0xff]), reason])));
      expect(await closed).toMatchObject({ code: expected, byUs: true });
      const answer = await next();
      expect([answer.opcode, answer.payload.readUInt16BE(0)]).toEqual([8, expected]);
    }
    for (const code of [1000, 1003, 1007, 1012, 1014, 3000, 4999]) {
      const { url, peer } = await serve(accepting());
      const client = await connect(url, [], options);
      const { closed } = listening(client);
      (await peer).socket.write(serverFrame(8, Buffer.concat([Buffer.from([code >> 8, code & 0xff]), Buffer.from("été")])));
      expect(await closed).toEqual({ code, reason: "été", byUs: false });
    }
  });

  it("cuts a long close reason between characters, so the peer reads it as UTF-8", async () => {
    const { url, peer } = await serve(accepting());
    const client = await connect(url, [], options);
    listening(client);
    client.close(1000, "é".repeat(70)); // 140 bytes: past the 123 a close frame carries
    const frame = await (await peer).next();
    expect(frame.opcode).toBe(8);
    expect(new TextDecoder("utf-8", { fatal: true }).decode(frame.payload.subarray(2))).toBe("é".repeat(61));
    client.abort();
  });

  it("sends its close frame after what it queued before failing the connection", async () => {
    const { url, peer } = await serve(accepting());
    const client = await connect(url, [], options);
    const { closed } = listening(client);
    const { socket, next } = await peer;
    socket.pause(); // the receiver reads nothing for now: what the client sends queues
    const big = new Uint8Array(24 << 20).fill(7);
    const written = client.send(big);
    socket.write(Buffer.from([0x82, 0x81, 1, 2, 3, 4, 5])); // a masked server frame: 1002
    expect((await closed).code).toBe(1002);
    const ended = new Promise<string>((resolve) => socket.once("close", () => setImmediate(() => resolve("the connection ended"))));
    socket.resume();
    const frames = [];
    for (let at = 0; at < 2; at++) frames.push(await Promise.race([next(), ended])); // the close answers no more
    expect(frames.map((frame) => (typeof frame === "string" ? frame : [frame.opcode, frame.payload.length]))).toEqual([
      [2, big.length],
      [8, 2 + "a reserved bit set, or a masked frame from the server".length],
    ]); // its close frame not dropped with the socket before it left
    expect(await written).toBe(true);
    expect(await ended).toBe("the connection ended"); // and the connection then closed
  });

  it("closes 1009 on a message over its limit, as its header says, before holding it", async () => {
    const { url, peer } = await serve(accepting());
    const client = await connect(url, [], { ...options, maxMessage: 1000 });
    const { closed } = listening(client);
    const { socket, next } = await peer;
    socket.write(serverFrame(2, Buffer.alloc(600), false).subarray(0, 610));
    socket.write(serverFrame(0, Buffer.alloc(600)).subarray(0, 4)); // only the head: 1200 declared
    expect((await closed).code).toBe(1009);
    const answer = await next();
    expect([answer.opcode, answer.payload.readUInt16BE(0)]).toEqual([8, 1009]);
  });

  it("closes 1009 on a message in over 1024 frames, empty ones too, before holding more", async () => {
    const { url, peer } = await serve(accepting());
    const client = await connect(url, [], options);
    const { closed, messages } = listening(client);
    const { socket, next } = await peer;
    // 2 bytes a frame on the wire, no payload: the message limit never counts one
    const endless = Array.from({ length: 1024 }, () => serverFrame(0, Buffer.alloc(0), false));
    socket.write(Buffer.concat([serverFrame(2, Buffer.alloc(0), false), ...endless, serverFrame(9, Buffer.from("there?"))]));
    const answer = await next();
    expect([answer.opcode, answer.payload.readUInt16BE(0)]).toEqual([8, 1009]); // not the pong
    expect((await closed).code).toBe(1009);
    expect(messages).toEqual([]);
  });

  it("closes 1002 on a masked server frame or a reserved bit", async () => {
    for (const bad of [Buffer.from([0x82, 0x81, 1, 2, 3, 4, 5]), Buffer.from([0xc2, 0x00])]) {
      const { url, peer } = await serve(accepting());
      const client = await connect(url, [], options);
      const { closed } = listening(client);
      (await peer).socket.write(bad);
      expect(await closed).toMatchObject({ code: 1002, byUs: true });
    }
  });

  it("refuses a 101 with a wrong accept or an extension none was offered", async () => {
    for (const answer of [(key: string) => accepting()(key + "x"), accepting("Sec-WebSocket-Extensions: permessage-deflate\r\n")]) {
      const { url } = await serve(answer);
      await expect(connect(url, [], options)).rejects.toBeInstanceOf(Unreachable);
    }
  });

  it("reports a refused upgrade with its status, headers and body (sized or chunked)", async () => {
    const problem = '{"type":"urn:toolref:problem:quota-exceeded","quota":"channels"}';
    const sized = `HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/problem+json\r\ncontent-length: ${problem.length}\r\n\r\n${problem}`;
    const chunked = `HTTP/1.1 401 Unauthorized\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n`;
    for (const [answer, status, body] of [
      [sized, 429, problem],
      [chunked, 401, "hello world"],
      ["HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n", 404, ""],
    ] as const) {
      const { url } = await serve(() => answer);
      const refused = await connect(url, [], options).catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(Refusal);
      expect([(refused as Refusal).status, Buffer.from((refused as Refusal).body).toString()]).toEqual([status, body]);
    }
  });

  it("gives up on an upgrade never answered, and on a receiver not listening", async () => {
    const { url } = await serve(() => "");
    await expect(connect(url, [], { ...options, connectTimeoutMs: 100 })).rejects.toBeInstanceOf(Unreachable);
    const closedPort = await serve(accepting());
    servers.pop()!.close();
    await new Promise((resolve) => setTimeout(resolve, 10));
    await expect(connect(closedPort.url, [], options)).rejects.toBeInstanceOf(Unreachable);
  });

  it("computes RFC 6455's accept, masks with the key given, and de-chunks", () => {
    expect(acceptFor("dGhlIHNhbXBsZSBub25jZQ==")).toBe("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="); // RFC 6455 1.3
    const frame = clientFrame(2, Uint8Array.from([1, 2, 3, 4, 5]), Uint8Array.from([0x37, 0xfa, 0x21, 0x3d]));
    expect(Buffer.from(frame).toString("hex")).toBe("828537fa213d" + "36f8223932"); // 1^37 2^fa 3^21 4^3d 5^37
    expect(Buffer.from(dechunked(Buffer.from("3\r\nabc\r\n0\r\n\r\n"))).toString()).toBe("abc");
  });
});
