// A channel's turns (src/channel/link.ts, transport.ts) against a receiver written here over
// node:net: the turn's frame carries the edit's bytes exactly; the answer streams piece by
// piece as its frames come; a `busy` answer, a drained close before the turn was read, an
// oversized body and a refused upgrade each leave the turn to HTTP (null), nothing done with
// it; a channel broken after the turn went fails it as a dropped connection does (never sent
// twice) and backs off; the caller leaving cancels the stream; windows are granted back as
// the body is read, and a receiver sending past its window loses the channel; turns waiting a
// read timeout with no frame come drop the channel.
import { afterEach, describe, expect, it } from "vitest";
import { BUSY, DRAINED, FrameSender, MAX_FRAME_BYTES, pythonJson, readVarint, varint } from "../src/channel/frames.js";
import { ChannelTransport } from "../src/channel/transport.js";
import { accepting, serve, serverFrame, servers, type Peer } from "./channel-peer.js";

afterEach(() => {
  for (const server of servers.splice(0)) server.close();
});

const text = (data: Uint8Array): string => new TextDecoder().decode(data);
const concat = (...parts: Uint8Array[]): Buffer => Buffer.concat(parts.map((part) => Buffer.from(part)));

/** A turn frame as the receiver reads it. */
function turnOf(payload: Buffer): { stream: number; meta: string; body: Buffer } {
  const [stream, at] = readVarint(payload, 0)!;
  const [size, from] = readVarint(payload, at)!;
  return { stream, meta: payload.subarray(from, from + size).toString(), body: payload.subarray(from + size) };
}

const head = (stream: number, status: number, headers: [string, string][] = []): Buffer =>
  concat(varint(stream), Uint8Array.of(0), new TextEncoder().encode(pythonJson({ s: status, h: headers })));
const piece = (stream: number, data: string | Uint8Array): Buffer => concat(varint(stream), Uint8Array.of(1), typeof data === "string" ? new TextEncoder().encode(data) : data);
const end = (stream: number): Buffer => concat(varint(stream), Uint8Array.of(2));

/** Write a server message (a binary frame) to the peer. */
const say = (peer: Peer, data: Uint8Array, opcode = 2): boolean => peer.socket.write(serverFrame(opcode, data));

async function channel(extra = ""): Promise<{ transport: ChannelTransport; reports: string[]; server: Awaited<ReturnType<typeof serve>> }> {
  const server = await serve(accepting(extra));
  const reports: string[] = [];
  const where = new URL(server.url);
  const transport = new ChannelTransport(where.origin, where.pathname, [["toolref-key", "tk_1"]], { report: (line) => reports.push(line) });
  return { transport, reports, server };
}

const EDIT: [string, string][] = [["content-type", "application/vnd.toolref.edit"]];

describe("a channel's turns", () => {
  it("carries the edit's bytes exactly and streams the answer as its pieces come", async () => {
    const { transport, server } = await channel();
    const body = Uint8Array.from({ length: 1000 }, (_, index) => index & 0xff);
    const answering = transport.send("/v1/chat/completions", EDIT, body);
    const peer = await server.peer;
    expect(peer.request).toMatch(/\r\ntoolref-key: tk_1(\r\n|$)/);
    const turn = turnOf((await peer.next()).payload);
    expect(turn.stream).toBe(0);
    expect(JSON.parse(turn.meta)).toEqual({ p: "/v1/chat/completions", h: EDIT });
    expect(Buffer.compare(turn.body, Buffer.from(body))).toBe(0);
    say(peer, head(0, 200, [["content-type", "text/event-stream"], ["toolref-edits", "6"]]));
    say(peer, piece(0, "data: one\n\n"));
    const response = (await answering)!;
    expect([response.status, response.headers.get("toolref-edits")]).toEqual([200, "6"]);
    const reader = response.body!.getReader();
    expect(text((await reader.read()).value!)).toBe("data: one\n\n"); // before the rest was sent
    say(peer, piece(0, "data: two\n\n"));
    say(peer, end(0));
    expect(text((await reader.read()).value!)).toBe("data: two\n\n");
    expect((await reader.read()).done).toBe(true);
    // the next turn, like the one before, goes with an empty meta on the same channel
    const next = transport.send("/v1/chat/completions", EDIT, Uint8Array.of(7));
    expect(turnOf((await peer.next()).payload)).toMatchObject({ stream: 1, meta: "" });
    say(peer, head(1, 204));
    say(peer, end(1));
    expect((await next)!.status).toBe(204);
    expect(server.count()).toBe(1);
    transport.retire();
  });

  it("leaves to HTTP a turn answered busy, one too large, and one a drained close did not read", async () => {
    const { transport, server, reports } = await channel();
    const busy = transport.send("/v1/x", EDIT, Uint8Array.of(1));
    const peer = await server.peer;
    await peer.next();
    say(peer, head(0, 503, [BUSY as [string, string]]));
    say(peer, end(0));
    expect(await busy).toBeNull();
    expect(await transport.send("/v1/x", EDIT, new Uint8Array(MAX_FRAME_BYTES + 1))).toBeNull();
    const unread = transport.send("/v1/x", EDIT, Uint8Array.of(2));
    await peer.next();
    const [code, reason] = DRAINED;
    say(peer, concat(Uint8Array.of(code >> 8, code & 0xff), new TextEncoder().encode(reason)), 8);
    expect(await unread).toBeNull(); // never read: the caller sends it over HTTP
    const again = transport.send("/v1/x", EDIT, Uint8Array.of(3)); // a new channel at once
    const second = await server.peerAt(1);
    expect(turnOf((await second.next()).payload).body[0]).toBe(3);
    say(second, head(0, 200));
    say(second, end(0));
    expect((await again)!.status).toBe(200);
    expect(reports).toEqual([]); // neither close counted as the channel failing
    transport.retire();
  });

  it("fails a turn the channel broke under after it went, then backs off to HTTP", async () => {
    const { transport, server, reports } = await channel();
    const written = transport.send("/v1/x", EDIT, Uint8Array.of(1));
    const peer = await server.peer;
    await peer.next();
    peer.socket.destroy(); // no close frame: the turn may have been served
    await expect(written).rejects.toThrow(TypeError);
    expect(await transport.send("/v1/x", EDIT, Uint8Array.of(2))).toBeNull();
    expect(reports).toHaveLength(1);
    expect(reports[0]).toMatch(/closed before any answer came on it; turns go over HTTP, the channel is tried again in \d+s/);
    expect(await transport.send("/v1/x", EDIT, Uint8Array.of(3))).toBeNull(); // within the wait: not tried
    expect(server.count()).toBe(1);
  });

  it("reports a refused upgrade, naming its problem, and sends nothing on it", async () => {
    const body = '{"type":"urn:toolref:problem:quota-exceeded","quota":"channels\\n"}';
    const server = await serve(() => `HTTP/1.1 429 Too Many Requests\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
    const reports: string[] = [];
    const where = new URL(server.url);
    const transport = new ChannelTransport(where.origin, where.pathname, [], { report: (line) => reports.push(line) });
    expect(await transport.send("/v1/x", EDIT, Uint8Array.of(1))).toBeNull();
    expect(reports).toHaveLength(1);
    expect(reports[0]).toContain("(the upgrade was answered 429: quota-exceeded);"); // a quota that is no token is not told
  });

  it("tells the receiver when its caller left, before or during the answer", async () => {
    const { transport, server } = await channel();
    const leaving = new AbortController();
    const left = transport.send("/v1/x", EDIT, Uint8Array.of(1), leaving.signal);
    const peer = await server.peer;
    await peer.next();
    leaving.abort();
    await expect(left).rejects.toMatchObject({ name: "AbortError" });
    expect(turnOf((await peer.next()).payload)).toEqual({ stream: 0, meta: '{"c":1}', body: Buffer.alloc(0) });
    const reading = transport.send("/v1/x", EDIT, Uint8Array.of(2));
    await peer.next();
    say(peer, head(1, 200));
    const response = (await reading)!;
    await response.body!.cancel();
    expect(turnOf((await peer.next()).payload)).toMatchObject({ stream: 1, meta: '{"c":1}' });
    transport.retire();
  });

  it("grants a window back as the body is read, and drops a receiver that sends past it", async () => {
    const { transport, server } = await channel("Toolref-Channel-Window: 65536\r\n");
    const asking = transport.send("/v1/x", EDIT, Uint8Array.of(1));
    const peer = await server.peer;
    expect(peer.request.toLowerCase()).toContain("toolref-channel-window: 1048576");
    await peer.next();
    say(peer, head(0, 200));
    say(peer, piece(0, new Uint8Array(40_000)));
    const reader = (await asking)!.body!.getReader();
    expect((await reader.read()).value!.length).toBe(40_000);
    expect(Buffer.from(turnOf((await peer.next()).payload).meta).toString()).toBe('{"w":40000}');
    say(peer, piece(0, new Uint8Array(65_536)));
    say(peer, piece(0, new Uint8Array(1))); // 65,537 beyond what was granted back
    expect((await reader.read()).value!.length).toBe(65_536);
    await expect(reader.read()).rejects.toThrow(TypeError); // the channel dropped
  });

  it("drops a channel on which turns waited a read timeout with no frame come", async () => {
    const server = await serve(accepting());
    const where = new URL(server.url);
    const reports: string[] = [];
    const transport = new ChannelTransport(where.origin, where.pathname, [], { report: (line) => reports.push(line), readTimeoutMs: 100 });
    const silent = transport.send("/v1/x", EDIT, Uint8Array.of(1)); // never answered
    await (await server.peer).next();
    await expect(silent).rejects.toThrow(TypeError);
    expect(await transport.send("/v1/x", EDIT, Uint8Array.of(2))).toBeNull(); // it failed: HTTP a while
    expect(reports).toHaveLength(1);
    // an answer begun, then silent: its reader fails rather than waiting for ever
    const second = await serve(accepting());
    const slow = new ChannelTransport(new URL(second.url).origin, "/v1/channel", [], { report: () => undefined, readTimeoutMs: 100 });
    const begun = slow.send("/v1/x", EDIT, Uint8Array.of(3));
    const peer = await second.peer;
    await peer.next();
    say(peer, head(0, 200));
    await expect((await begun)!.text()).rejects.toThrow(TypeError);
  });

  it("drops a channel that answers with a text message", async () => {
    const { transport, server } = await channel();
    const asking = transport.send("/v1/x", EDIT, Uint8Array.of(1));
    const peer = await server.peer;
    await peer.next();
    say(peer, new TextEncoder().encode("hello"), 1);
    await expect(asking).rejects.toThrow(TypeError);
  });
});

describe("frame memory", () => {
  it("sends the headers again only when they change", () => {
    const sender = new FrameSender();
    const metas = [EDIT, EDIT, [...EDIT, ["authorization", "Bearer 2"]] as [string, string][]].map((headers, stream) => turnOf(Buffer.from(sender.turn(stream, "/v1/x", headers, Uint8Array.of(9)))).meta);
    expect(metas).toEqual([pythonJson({ p: "/v1/x", h: EDIT }), "", pythonJson({ h: [...EDIT, ["authorization", "Bearer 2"]] })]);
  });
});
