// toolrefFetch's channel option (src/fetch.ts, src/channel/channels.ts): an answer that says
// `Toolref-Edits` and names `Toolref-Channel` sends the endpoint's next edit as a frame on
// that channel (with `channel: true` beside a fetch of the app's own; by default only with
// the platform's fetch), the frame carrying the edit's bytes and the headers an edit carries
// over HTTP; an answer naming no channel any more sends the next edit over HTTP; a misused
// option fails loudly.
import { afterEach, describe, expect, it, vi } from "vitest";
import { readVarint, varint, pythonJson } from "../src/channel/frames.js";
import { UsageError, forgetSharedState, toolrefFetch } from "../src/index.js";
import { accepting, serve, serverFrame, servers } from "./channel-peer.js";

afterEach(() => {
  forgetSharedState();
  for (const server of servers.splice(0)) server.close();
});

const system = { role: "system", content: "You are terse. " + "Context line ".repeat(200) };
const body = (turns: number): string =>
  JSON.stringify({ model: "m", messages: [system, ...Array.from({ length: turns }, (_, n) => ({ role: n % 2 ? "assistant" : "user", content: `turn ${n} ${"z".repeat(80)}` }))] });

describe("toolrefFetch over a channel", () => {
  it("sends an edit on the channel its endpoint's answer named, and learns when it names none", async () => {
    const server = await serve(accepting());
    const origin = new URL(server.url).origin;
    const url = origin + "/v1/chat/completions";
    const sent: { edit: boolean }[] = [];
    let named: string | null = "/v1/channel";
    const wire = async (_input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
      const type = new Headers(init?.headers).get("content-type");
      sent.push({ edit: type === "application/vnd.toolref.edit" });
      const headers: Record<string, string> = { "toolref-edits": "6", "content-type": "application/json" };
      if (named !== null) headers["toolref-channel"] = named;
      return new Response("{}", { status: 200, headers });
    };
    const send = toolrefFetch({ fetch: wire, channel: true });
    const headers = { "content-type": "application/json", authorization: "Bearer sk-1" };
    expect((await send(url, { method: "POST", body: body(1), headers })).status).toBe(200);
    expect(sent).toEqual([{ edit: false }]); // the offer, over HTTP

    const answering = send(url, { method: "POST", body: body(3), headers });
    const peer = await server.peer;
    expect(peer.request).toMatch(/\r\nauthorization: Bearer sk-1(\r\n|$)/); // the caller's credentials
    const payload = (await peer.next()).payload;
    const [stream, at] = readVarint(payload, 0)!;
    const [size, from] = readVarint(payload, at)!;
    const meta = JSON.parse(payload.subarray(from, from + size).toString()) as { p: string; h: [string, string][] };
    expect(meta.p).toBe("/v1/chat/completions");
    expect(meta.h).toEqual([["authorization", "Bearer sk-1"], ["content-type", "application/vnd.toolref.edit"]]);
    expect(payload[from + size]).toBeGreaterThanOrEqual(1); // an edit's version byte leads its body
    const answer = pythonJson({ s: 200, h: [["toolref-edits", "6"], ["toolref-channel", "/v1/channel"], ["content-type", "application/json"]] });
    peer.socket.write(serverFrame(2, Buffer.concat([Buffer.from(varint(stream)), Buffer.of(0), Buffer.from(answer)])));
    peer.socket.write(serverFrame(2, Buffer.concat([Buffer.from(varint(stream)), Buffer.of(1), Buffer.from('{"ok":1}')])));
    peer.socket.write(serverFrame(2, Buffer.concat([Buffer.from(varint(stream)), Buffer.of(2)])));
    const response = await answering;
    expect([response.status, await response.text()]).toEqual([200, '{"ok":1}']);
    expect(sent).toHaveLength(1); // nothing more over HTTP

    named = null; // the next answer, over HTTP, names no channel: the one after goes over HTTP too
    const dropped = Buffer.concat([Buffer.from(varint(stream + 1)), Buffer.of(0), Buffer.from(pythonJson({ s: 200, h: [["toolref-edits", "6"]] }))]);
    const third = send(url, { method: "POST", body: body(5), headers });
    await peer.next();
    peer.socket.write(serverFrame(2, dropped));
    peer.socket.write(serverFrame(2, Buffer.concat([Buffer.from(varint(stream + 1)), Buffer.of(2)])));
    await (await third).text();
    await (await send(url, { method: "POST", body: body(7), headers })).text();
    expect(sent).toEqual([{ edit: false }, { edit: true }]);
  });

  it("cancels an edit's answer the app dropped unread, and fails an edit aborted while the channel connects", async () => {
    const { setFlagsFromString } = await import("node:v8");
    const { runInNewContext } = await import("node:vm");
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    let upgrades = 0;
    const server = await serve((key) => (upgrades++ ? "" : accepting()(key))); // the second never answered
    const url = new URL(server.url).origin + "/v1/chat/completions";
    const sent: string[] = [];
    const wire = async (_input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
      sent.push(new Headers(init?.headers).get("content-type") ?? "");
      return new Response("{}", { status: 200, headers: { "toolref-edits": "6", "toolref-channel": "/v1/channel" } });
    };
    const send = toolrefFetch({ fetch: wire, channel: true });
    const headers = { "content-type": "application/json" };
    await (await send(url, { method: "POST", body: body(1), headers })).text();
    const peer = await (async () => {
      const answering = send(url, { method: "POST", body: body(3), headers });
      const peer = await server.peer;
      const [stream] = readVarint((await peer.next()).payload, 0)!;
      peer.socket.write(serverFrame(2, Buffer.concat([Buffer.from(varint(stream)), Buffer.of(0), Buffer.from(pythonJson({ s: 200, h: [["toolref-edits", "6"]] }))])));
      peer.socket.write(serverFrame(2, Buffer.concat([Buffer.from(varint(stream)), Buffer.of(1), Buffer.from("unread")])));
      expect((await answering).status).toBe(200); // its body never read
      return peer;
    })();
    let cancelled = "";
    const cancel = peer.next().then((frame) => (cancelled = frame.payload.subarray(2).toString()));
    await expect.poll(() => (gc(), cancelled)).toBe('{"c":1}'); // collected: cancelled at the receiver
    await cancel;

    forgetSharedState(); // a new channel, whose upgrade is never answered
    await (await send(url, { method: "POST", body: body(1), headers })).text();
    const leaving = new AbortController();
    const left = send(url, { method: "POST", body: body(3), headers, signal: leaving.signal });
    await server.peerAt(1);
    leaving.abort();
    await expect(left).rejects.toMatchObject({ name: "AbortError" });
    expect(sent).toEqual(["application/json", "application/json"]); // the aborted edit not sent over HTTP
  });

  it("leaves the channel alone beside a fetch of the app's own unless asked", async () => {
    const server = await serve(accepting());
    const url = new URL(server.url).origin + "/v1/chat/completions";
    const sent: string[] = [];
    const wire = async (_input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
      sent.push(new Headers(init?.headers).get("content-type") ?? "");
      return new Response("{}", { status: 200, headers: { "toolref-edits": "6", "toolref-channel": "/v1/channel" } });
    };
    const send = toolrefFetch({ fetch: wire });
    for (const turns of [1, 3, 5]) await (await send(url, { method: "POST", body: body(turns), headers: { "content-type": "application/json" } })).text();
    expect(sent).toEqual(["application/json", "application/vnd.toolref.edit", "application/vnd.toolref.edit"]);
    expect(server.count()).toBe(0);
  });

  it("leaves the channel alone by default where the platform's fetch goes through a proxy", async () => {
    const server = await serve(() => "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n");
    const url = new URL(server.url).origin + "/v1/chat/completions";
    const sent: string[] = [];
    const wire = async (_input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
      sent.push(new Headers(init?.headers).get("content-type") ?? "");
      return new Response("{}", { status: 200, headers: { "toolref-edits": "6", "toolref-channel": "/v1/channel" } });
    };
    const slot = Symbol.for("undici.globalDispatcher.1"); // undici's setGlobalDispatcher(new ProxyAgent(...))
    const global = globalThis as unknown as Record<symbol, unknown>;
    const before = global[slot];
    global[slot] = new (class ProxyAgent {})();
    vi.stubGlobal("fetch", wire);
    try {
      const send = toolrefFetch();
      for (const turns of [1, 3, 5]) await (await send(url, { method: "POST", body: body(turns), headers: { "content-type": "application/json" } })).text();
    } finally {
      global[slot] = before;
      vi.unstubAllGlobals();
    }
    expect(sent).toEqual(["application/json", "application/vnd.toolref.edit", "application/vnd.toolref.edit"]);
    expect(server.count()).toBe(0); // no upgrade went past the proxy
  });

  it("fails loudly on a channel option that is no boolean", () => {
    expect(() => toolrefFetch({ channel: "yes" as unknown as boolean })).toThrow(UsageError);
    expect(() => toolrefFetch({ chanel: true } as unknown as { channel: boolean })).toThrow(/channel/);
  });
});
