// What a channel's turn holds is given back when its caller is done with it
// (src/channel/link.ts, transport.ts): an answer the app drops unread (collected, as undici
// cancels a collected Response's body) is cancelled at its receiver (`{"c":1}`), its slot on
// the channel freed, while one whose body is still being read is not; and a caller whose
// signal aborts while the channel connects fails at once with its AbortError, the connecting
// socket dropped once no turn waits for it (no back-off: the next turn connects anew), kept
// while another turn still waits.
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterEach, describe, expect, it } from "vitest";
import { pythonJson, readVarint, varint } from "../src/channel/frames.js";
import { ChannelTransport } from "../src/channel/transport.js";
import { accepting, serve, serverFrame, servers, type Peer } from "./channel-peer.js";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

afterEach(() => {
  for (const server of servers.splice(0)) server.close();
});

const concat = (...parts: Uint8Array[]): Buffer => Buffer.concat(parts.map((part) => Buffer.from(part)));
const head = (stream: number, status: number): Buffer => concat(varint(stream), Uint8Array.of(0), new TextEncoder().encode(pythonJson({ s: status, h: [] })));
const piece = (stream: number, data: string): Buffer => concat(varint(stream), Uint8Array.of(1), new TextEncoder().encode(data));
const end = (stream: number): Buffer => concat(varint(stream), Uint8Array.of(2));
const say = (peer: Peer, data: Uint8Array): boolean => peer.socket.write(serverFrame(2, data));
const EDIT: [string, string][] = [["content-type", "application/vnd.toolref.edit"]];

function turnOf(payload: Buffer): { stream: number; meta: string } {
  const [stream, at] = readVarint(payload, 0)!;
  const [size, from] = readVarint(payload, at)!;
  return { stream, meta: payload.subarray(from, from + size).toString() };
}

function transportTo(url: string, reports: string[] = []): ChannelTransport {
  const where = new URL(url);
  return new ChannelTransport(where.origin, where.pathname, [], { report: (line) => reports.push(line) });
}

/** The key of the upgrade `request`, to answer it later. */
const keyOf = (request: string): string => /sec-websocket-key: (.*)/i.exec(request)![1]!.trim();

describe("a turn's hold on its channel", () => {
  it("cancels an answer its caller dropped unread, and frees its slot", async () => {
    const server = await serve(accepting("Toolref-Channel-Window: 65536\r\n"));
    const transport = transportTo(server.url);
    const peer = await (async () => {
      const asking = transport.send("/v1/x", EDIT, Uint8Array.of(1));
      const peer = await server.peer;
      await peer.next();
      say(peer, head(0, 200));
      say(peer, piece(0, "unread"));
      expect((await asking)!.status).toBe(200); // the app looks at the status, never the body
      return peer;
    })();
    expect(transport.busy).toBe(true);
    await expect.poll(() => (gc(), transport.busy)).toBe(false); // collected: the turn is over
    expect(turnOf((await peer.next()).payload)).toEqual({ stream: 0, meta: '{"c":1}' });
    transport.retire();
  });

  it("leaves alone an answer whose body is still read after its Response was dropped", async () => {
    const server = await serve(accepting());
    const transport = transportTo(server.url);
    const asking = transport.send("/v1/x", EDIT, Uint8Array.of(1));
    const peer = await server.peer;
    await peer.next();
    say(peer, head(0, 200));
    const reader = await (async () => (await asking)!.body!.getReader())(); // the Response itself dropped
    for (let round = 0; round < 5; round++) {
      gc();
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    say(peer, piece(0, "still read"));
    say(peer, end(0));
    expect(new TextDecoder().decode((await reader.read()).value!)).toBe("still read");
    expect((await reader.read()).done).toBe(true);
    const next = transport.send("/v1/x", EDIT, Uint8Array.of(2));
    expect(turnOf((await peer.next()).payload)).toEqual({ stream: 1, meta: "" }); // no cancel came before it
    say(peer, head(1, 204));
    say(peer, end(1));
    expect((await next)!.status).toBe(204);
    transport.retire();
  });
});

describe("a caller leaving while the channel connects", () => {
  it("fails at once with its AbortError and drops the connection no turn waits for", async () => {
    let upgrades = 0;
    const server = await serve((key) => (upgrades++ ? accepting()(key) : "")); // the first never answered
    const reports: string[] = [];
    const transport = transportTo(server.url, reports);
    const leaving = new AbortController();
    const left = transport.send("/v1/x", EDIT, Uint8Array.of(1), leaving.signal);
    const first = await server.peer;
    const dropped = new Promise((resolve) => first.socket.once("close", resolve));
    leaving.abort();
    await expect(left).rejects.toMatchObject({ name: "AbortError" });
    await dropped; // the connecting socket is not left open
    const next = transport.send("/v1/x", EDIT, Uint8Array.of(2)); // no back-off: a new channel
    const second = await server.peerAt(1);
    expect(turnOf((await second.next()).payload).stream).toBe(0);
    say(second, head(0, 204));
    say(second, end(0));
    expect((await next)!.status).toBe(204);
    expect(reports).toEqual([]);
    transport.retire();
  });

  it("keeps connecting for another turn still waiting, which then rides it", async () => {
    const server = await serve(() => ""); // answered below, after the first caller left
    const transport = transportTo(server.url);
    const leaving = new AbortController();
    const left = transport.send("/v1/x", EDIT, Uint8Array.of(1), leaving.signal);
    const staying = transport.send("/v1/x", EDIT, Uint8Array.of(2));
    const peer = await server.peer;
    leaving.abort();
    await expect(left).rejects.toMatchObject({ name: "AbortError" });
    peer.socket.write(accepting()(keyOf(peer.request)));
    const turn = (await peer.next()).payload;
    expect([turnOf(turn).stream, turn[turn.length - 1]]).toEqual([0, 2]); // only the turn that stayed
    say(peer, head(0, 204));
    say(peer, end(0));
    expect((await staying)!.status).toBe(204);
    expect(server.count()).toBe(1);
    transport.retire();
  });
});
