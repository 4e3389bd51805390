// A channel turn's read timeout (src/channel/link.ts), as Python's `channel_link` and as
// undici's per request: a turn waiting its read timeout for its next frame ends alone (its
// receiver told `{"c":1}`), whatever other turns' frames come meanwhile; when no frame came
// on the channel for any turn in that time the channel is suspect: with another turn's
// answer still coming (its reader paused) it is retired, that answer read on to its end and
// the next turn opening a new channel, else dropped. The clock is the test's own.
import { afterEach, describe, expect, it } from "vitest";
import { pythonJson, readVarint, varint } from "../src/channel/frames.js";
import { ChannelTransport } from "../src/channel/transport.js";
import { accepting, serve, serverFrame, servers, type Peer } from "./channel-peer.js";

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

async function channel(): Promise<{ transport: ChannelTransport; reports: string[]; server: Awaited<ReturnType<typeof serve>>; at: (ms: number) => void }> {
  const server = await serve(accepting());
  const reports: string[] = [];
  let now = 0;
  const where = new URL(server.url);
  const transport = new ChannelTransport(where.origin, where.pathname, [], { report: (line) => reports.push(line), readTimeoutMs: 100, clock: () => now });
  return { transport, reports, server, at: (ms) => (now = ms) };
}

/** Whether `promise` rejected (polled: it settles at the watchdog's next tick). */
function settled(promise: Promise<unknown>): () => unknown {
  let found: unknown = "pending";
  promise.then(
    () => (found = "answered"),
    (error: unknown) => (found = error),
  );
  return () => found;
}

describe("a channel turn's read timeout", () => {
  it("ends a turn waiting its timeout though other turns' frames keep coming", async () => {
    const { transport, server, at } = await channel();
    const hung = settled(transport.send("/v1/x", EDIT, Uint8Array.of(1))); // never answered
    const peer = await server.peer;
    await peer.next();
    const live = transport.send("/v1/x", EDIT, Uint8Array.of(2));
    await peer.next();
    say(peer, head(1, 200));
    const reader = (await live)!.body!.getReader();
    for (const ms of [60, 120, 180, 240]) {
      at(ms);
      say(peer, piece(1, "x"));
      expect(new TextDecoder().decode((await reader.read()).value!)).toBe("x");
    }
    await expect.poll(hung).toBeInstanceOf(TypeError); // as undici's headers timeout
    expect(turnOf((await peer.next()).payload)).toEqual({ stream: 0, meta: '{"c":1}' });
    say(peer, end(1)); // the other turn's answer, and the channel, go on
    expect((await reader.read()).done).toBe(true);
    const next = transport.send("/v1/x", EDIT, Uint8Array.of(3));
    expect(turnOf((await peer.next()).payload).stream).toBe(2);
    say(peer, head(2, 204));
    say(peer, end(2));
    expect((await next)!.status).toBe(204);
    expect(server.count()).toBe(1);
    transport.retire();
  });

  it("retires a quiet channel whose other answer is still coming, that answer read to its end", async () => {
    const { transport, server, reports, at } = await channel();
    const live = transport.send("/v1/x", EDIT, Uint8Array.of(1));
    const peer = await server.peer;
    await peer.next();
    say(peer, head(0, 200));
    const paused = (await live)!; // its reader reads nothing for a while
    const hung = settled(transport.send("/v1/x", EDIT, Uint8Array.of(2)));
    await peer.next();
    at(150); // no frame for any turn since the second began waiting
    await expect.poll(hung).toBeInstanceOf(TypeError);
    expect(turnOf((await peer.next()).payload)).toEqual({ stream: 1, meta: '{"c":1}' });
    say(peer, piece(0, "a"));
    say(peer, piece(0, "b"));
    say(peer, end(0));
    expect(await paused.text()).toBe("ab"); // not failed with the turn that timed out
    expect((await peer.next()).opcode).toBe(8); // closed once its last answer ended
    const next = transport.send("/v1/x", EDIT, Uint8Array.of(3)); // a new channel, at once
    const second = await server.peerAt(1);
    expect(turnOf((await second.next()).payload).stream).toBe(0);
    say(second, head(0, 204));
    say(second, end(0));
    expect((await next)!.status).toBe(204);
    expect(reports).toEqual([]); // retired, not failed: no back-off
    transport.retire();
  });
});
