// Unit tests: canonical JSON edge cases, markers, the edits core's own rules, and withToolRef
// without a registry (no network).
import { describe, expect, it } from "vitest";
import {
  VERSION,
  CanonicalizationError,
  Editor,
  MEDIA_TYPE,
  base32,
  canonicalJson,
  cutBody,
  fromBase32,
  fromMarker,
  headerSegment,
  isRef,
  memberSpans,
  parseRequest,
  refOf,
  savingsValue,
  toMarker,
  varint,
  withToolRef,
  gzip,
  UsageError,
} from "../src/index.js";
import { BROTLI, BROTLI_BUDGET, pack, platformBrotli, platformCodec } from "../src/edits/isolated.js";
import { crc32 } from "../src/edits/window.js";
import { MAX_DEPTH } from "../src/canonical.js";
import { brotliDecompressSync } from "node:zlib";

describe("canonical JSON", () => {
  it("refuses NaN and infinities, saying what to send instead", () => {
    for (const value of [NaN, Infinity, -Infinity]) {
      expect(() => canonicalJson({ x: value })).toThrow(/finite number/);
    }
  });

  it("reads values as JSON.stringify does", () => {
    expect(canonicalJson({ b: undefined, a: [undefined, () => 1], d: new Date(0) })).toBe(
      '{"a":[null,null],"d":"1970-01-01T00:00:00.000Z"}',
    );
    expect(canonicalJson({ n: -0, big: 12345678901234567890n })).toBe('{"big":12345678901234567890,"n":0}');
  });

  it("refuses cycles and lone surrogates", () => {
    const cycle: Record<string, unknown> = {};
    cycle["self"] = cycle;
    expect(() => canonicalJson(cycle)).toThrow(CanonicalizationError);
    expect(() => canonicalJson("\ud800")).toThrow(/lone UTF-16 surrogate \(\\ud800\)/);
  });

  it("writes the holes of a sparse array as null, as JSON.stringify sends them", () => {
    for (const value of [[1, , 3], [, 2], new Array(3), { a: [, "x"] }]) {
      expect(canonicalJson(value)).toBe(JSON.stringify(value));
    }
  });

  it("nests MAX_DEPTH (1000) levels, as the Python SDK does, and refuses one more with a typed error", () => {
    let value: unknown = 1.5;
    let text = "1.5";
    for (let level = 0; level < MAX_DEPTH; level++) {
      value = level % 2 ? [value] : { k: value };
      text = level % 2 ? `[${text}]` : `{"k":${text}}`;
    }
    expect(MAX_DEPTH).toBe(1000);
    expect(canonicalJson(value)).toBe(text);
    expect(() => canonicalJson([value])).toThrow(CanonicalizationError);
    let deeper: unknown = 1;
    for (let level = 0; level < 5000; level++) deeper = [deeper]; // was a RangeError (stack)
    expect(() => canonicalJson(deeper)).toThrow(/nested too deeply/);
  });

  it("refuses a bigint of more than 4300 digits, as the Python SDK refuses the integer", () => {
    expect(canonicalJson(-(10n ** 4299n))).toBe(`-1${"0".repeat(4299)}`);
    expect(() => canonicalJson(10n ** 4300n)).toThrow(CanonicalizationError);
  });

  it("base32 is RFC 4648's, lowercase, unpadded", () => {
    const encoder = new TextEncoder();
    expect(base32(encoder.encode("foobar"))).toBe("mzxw6ytboi");
    expect(base32(encoder.encode("f"))).toBe("my");
    expect(new TextDecoder().decode(fromBase32("mzxw6ytboi"))).toBe("foobar");
  });
});

describe("refs and markers", () => {
  it("ref syntax", () => {
    const ref = refOf({ name: "t", args: {}, result: 1 });
    expect(isRef(ref)).toBe(true);
    expect(ref).toHaveLength(29);
    expect(isRef(ref.replace("tr_", "th_"))).toBe(false);
  });

  it("a result or args with no JSON form is refused, not dropped from the ref", () => {
    // Review (SDK misuse): JSON.stringify dropped them, so a missing result, or a function
    // given as one, made the same ref as each other: one of an invocation with no result.
    expect(() => refOf({ name: "t", args: {}, result: undefined })).toThrow(/t"'s result is undefined, which has no JSON form/);
    expect(() => refOf({ name: "t", args: {}, result: () => 1 })).toThrow(UsageError);
    expect(() => refOf({ name: "t", args: {}, result: () => 1 })).toThrow(/result is a function.*give its JSON value/);
    expect(() => refOf({ name: "t", result: "x" } as never)).toThrow(/args is undefined.*\{\} for no arguments/);
    expect(isRef(refOf({ name: "t", args: {}, result: null }))).toBe(true);
  });

  it("a marker keeps member order, listing it when the default would not restore it", () => {
    const part = { type: "tool-x", output: 2, toolCallId: "c", input: 1 };
    const marker = toMarker(part, ["input", "output"], "tr_x");
    expect(marker).toEqual({ type: "tool-x", toolRef: "tr_x", toolCallId: "c", toolRefOrder: ["type", "output", "toolCallId", "input"] });
    expect(JSON.stringify(fromMarker(marker, { input: 1, output: 2 }))).toBe(JSON.stringify(part));
    const plain = toMarker({ a: 1, input: 1, output: 2, z: 3 }, ["input", "output"], "tr_x");
    expect(Object.keys(plain)).toEqual(["a", "toolRef", "z"]);
  });

  it("memberSpans finds top-level members as written", () => {
    const text = ' { "a" : [1, {"x": "]}"}] , "b":1.0,"c":"\\"" } ';
    const spans = memberSpans(text)!;
    expect(spans.map((span) => [span.key, text.slice(span.valueStart, span.end)])).toEqual([
      ["a", '[1, {"x": "]}"}]'],
      ["b", "1.0"],
      ["c", '"\\""'],
    ]);
  });
});

describe("the edits core", () => {
  it("cuts any nesting depth without recursion (Python gives up near 1,000 levels)", () => {
    const deep = '{"messages":[' + "[".repeat(100_000) + "]".repeat(100_000) + "]}";
    const cut = cutBody(new TextEncoder().encode(deep), "messages");
    expect(cut?.segments.length).toBe(3);
    expect(cutBody(new TextEncoder().encode('{"messages":[' + "[".repeat(10) + "]}"), "messages")).toBeNull();
  });

  it("a message keeps its piece with a mark after a first id or after brackets", () => {
    const said = "said ".repeat(40);
    const messages = [
      `{"id":"m1"%s, "role":"user","content":"${said}"}`,
      `{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":"${said}"}]%s}]}`,
      `{"role":"assistant","content":[{"type":"tool_use","input":{"text":"${said}","n":[1,{}]}%s}]}`,
    ];
    const encoder = new TextEncoder();
    const decoder = new TextDecoder();
    for (const message of messages) {
      const pieces = [', "cache_control": {"type": "ephemeral"}', ""].map((mark) => {
        const body = encoder.encode(`{"model":"m","messages":[${message.replace("%s", mark)}]}`);
        const cut = cutBody(body, "messages")!;
        const joined = new Uint8Array(cut.segments.reduce((n, s) => n + s.length, 0));
        cut.segments.reduce((n, s) => (joined.set(s, n), n + s.length), 0);
        expect(joined).toEqual(body);
        return decoder.decode(cut.segments[cut.messages[0]!]);
      });
      expect(pieces[0]).toBe(pieces[1]);
      expect(pieces[0]).toContain(said);
      expect(pieces[0]).not.toContain("cache_control");
    }
  });

  it("segment 0: hop headers out, credentials name-only and apart", () => {
    const { segment, secrets } = headerSegment([
      ["Content-Type", "application/json"],
      ["Host", "x"],
      ["X-Api-Key", "k"],
      ["Accept", ""],
    ]);
    expect(new TextDecoder().decode(segment)).toBe("Content-Type: application/json\r\nX-Api-Key:\r\nAccept: \r\n");
    expect(secrets).toEqual([["X-Api-Key", "k"]]);
  });

  it("version 5: a segment alone as a brotli stream with its CRC-32, where smaller (isolated.py's kinds)", async () => {
    expect(crc32(new TextEncoder().encode("123456789"))).toBe(0xcbf43926); // CRC-32/ISO-HDLC's check value
    const brotli = platformBrotli();
    expect(brotli).not.toBeNull(); // Node's zlib has brotli in every supported version
    const words = "self return def import value items config request None result error raise".split(" ");
    const text = new TextEncoder().encode(
      Array.from({ length: 40 }, (_, n) => words.map((w, k) => `${w}${(n * 31 + k * 7) % 97}`).join(" ")).join("\n"),
    );
    const codec = platformCodec();
    const plain = await pack([text], codec);
    const packed = await pack([text], codec, {}, brotli);
    expect(packed.length).toBeLessThan(plain.length);
    expect(packed[0]).toBe(BROTLI);
    const [size, at] = packed[1]! < 0x80 ? [packed[1]!, 2] : [(packed[1]! & 0x7f) | (packed[2]! << 7), 3];
    const stream = packed.subarray(at, at + size);
    expect(new Uint8Array(brotliDecompressSync(stream))).toEqual(text);
    const crc = packed.subarray(at + size);
    expect(crc.length).toBe(4);
    expect(((crc[0]! << 24) | (crc[1]! << 16) | (crc[2]! << 8) | crc[3]!) >>> 0).toBe(crc32(text));
    const big = new Uint8Array(BROTLI_BUDGET + 1).fill(97);
    expect((await pack([big], codec, {}, brotli))[0]).not.toBe(BROTLI); // past the edit's budget: not tried
    // the budget is spent in order: a first segment that leaves less than the second's length
    const long = new Uint8Array(BROTLI_BUDGET - 100);
    for (let from = 0; from < long.length; from += text.length) long.set(text.subarray(0, long.length - from), from);
    const two = await pack([long, text], codec, {}, brotli);
    expect(two[0]).toBe(BROTLI);
    let offset = 1;
    let length = 0;
    for (let shift = 0; ; shift += 7) {
      const byte = two[offset++]!;
      length += (byte & 0x7f) * 2 ** shift;
      if (!(byte & 0x80)) break;
    }
    expect(two[offset + length + 4]).not.toBe(BROTLI); // the second record: zstd or gzip, not tried
    expect((await pack([text, text], codec, {}, brotli))[0]).toBe(BROTLI);
  });

  it("varints and the Toolref-Savings value are Python's", () => {
    expect([...varint(300)]).toEqual([0xac, 0x02]);
    expect([...varint(0)]).toEqual([0]);
    expect(savingsValue(5, 4)).toBe("raw=5, wire=4, ratio=1.2"); // 1.25 to even, as Python formats it
    expect(savingsValue(7, 4)).toBe("raw=7, wire=4, ratio=1.8");
    expect(savingsValue(100, 3)).toBe("raw=100, wire=3, ratio=33.3");
    expect(savingsValue(0, 0)).toBe("raw=0, wire=0, ratio=1.0");
  });

  it("an edit the editor gives up on is the app's answer: at most three resends, the last whole", async () => {
    const editor = new Editor(64, 64 << 20, null);
    const body = new TextEncoder().encode(JSON.stringify({ messages: [{ role: "user", content: "hello there ".repeat(20) }] }));
    let edit = (await editor.prepare([["content-type", "application/json"]], body, "messages"))!;
    expect(edit.headers[0]).toEqual(["Content-Type", MEDIA_TYPE]);
    const missing = { type: "urn:toolref:problem:missing-history" };
    for (const resends of [1, 2, 3]) {
      edit = (await editor.onMiss(edit, 409, missing))!;
      expect(edit.resends).toBe(resends);
    }
    expect(edit.whole).toBe(true);
    expect(await editor.onMiss(edit, 409, missing)).toBeNull();
    expect(await editor.onMiss({ ...edit, resends: 0 }, 500, { type: "urn:toolref:problem:unavailable" })).toBeNull();
  });

  it("the registry's answer to an edit: segment 0, an empty line, the body", () => {
    const data = new TextEncoder().encode("content-type: application/json\r\nauthorization:\r\n\r\n{\"a\":1}\r\n");
    expect(parseRequest(data)).toEqual({
      lines: [
        ["content-type", "application/json"],
        ["authorization", null],
      ],
      body: new TextEncoder().encode('{"a":1}\r\n'),
    });
    expect(parseRequest(new TextEncoder().encode("\r\n{}"))?.lines).toEqual([]);
    expect(parseRequest(new TextEncoder().encode("no colon\r\n\r\n{}"))).toBeNull();
  });
});

describe("withToolRef without a registry call", () => {
  const never = (async () => {
    throw new Error("the registry must not be called");
  }) as typeof fetch;
  const echo = async (request: Request) => new Response(await request.text());

  it("misuse fails loudly with the fix", () => {
    expect(() => withToolRef(echo, { registry: "localhost:8750" })).toThrow(/base URL such as "http:\/\/127.0.0.1:8750"/);
  });

  it("protocol-1 requests reach the handler untouched; with the offer, the answer says edits are read", async () => {
    const handle = withToolRef(echo, { registry: "http://registry.test", fetch: never });
    const answer = await handle(new Request("http://app.test/", { method: "POST", body: '{"messages":[1.0]}' }));
    expect(await answer.text()).toBe('{"messages":[1.0]}');
    expect(answer.headers.has("Toolref-Edits")).toBe(false);
    const seen: Headers[] = [];
    const app = withToolRef(async (request) => (seen.push(request.headers), new Response(await request.text())), { registry: "http://registry.test", fetch: never });
    const offered = await app(new Request("http://app.test/", { method: "POST", headers: { "Toolref-Edits": "2", "x-app": "1" }, body: '{"messages":[1.0]}' }));
    expect(await offered.text()).toBe('{"messages":[1.0]}');
    expect(offered.headers.get("Toolref-Edits")).toBe(String(VERSION));
    expect([...seen[0]!.keys()]).toEqual(["content-type", "x-app"]); // the offer is toolref's, not the app's
  });

  it("history refs are retired: 400 history-refs-retired naming the upgrade", async () => {
    const handle = withToolRef(echo, { registry: "http://registry.test", fetch: never });
    const headers = { "Toolref-Protocol": "2", "Content-Type": "application/json" };
    for (const [extra, body] of [
      [{ "Toolref-History": "?1" }, '{"messages":[]}'],
      [{ "Toolref-Checkpoint": "?1" }, '{"messages":[]}'],
      [{}, '{"historyRef":"th_aaaaaaaaaaaaaaaaaaaaaaaaaa","messages":[]}'],
    ] as const) {
      const answer = await handle(new Request("http://app.test/", { method: "POST", headers: { ...headers, ...extra }, body }));
      expect(answer.status).toBe(400);
      const problem = (await answer.json()) as { type: string; detail: string };
      expect(problem.type).toBe("urn:toolref:problem:history-refs-retired");
      expect(problem.detail).toMatch(/history refs were retired in toolref 0\.3, which sends each request as an edit; upgrade the client's toolref SDK/);
    }
  });

  it("an edit restored by a scripted registry: headers merged, credentials filled, or a 415 when they cannot be", async () => {
    const restored = (head: string) =>
      (async () =>
        new Response(head + '\r\n{"messages":[]}', {
          headers: { "content-type": "application/vnd.toolref.request", "Toolref-History": "tb_aaaaaaaaaaaaaaaaaaaaaaaaaa" },
        })) as typeof fetch;
    const seen: Request[] = [];
    const app = async (request: Request) => (seen.push(request), new Response("ok"));
    const edit = (headers: Record<string, string>) =>
      new Request("http://app.test/", { method: "POST", headers: { "Content-Type": MEDIA_TYPE, ...headers }, body: "edit bytes" });
    const segment = "content-type: application/json\r\nauthorization:\r\nx-app: 1\r\nuser-agent: OpenAI/JS 6\r\nhost: admin.internal\r\n";
    const ok = withToolRef(app, { registry: "http://registry.test", fetch: restored(segment) });
    const answer = await ok(edit({ authorization: "Bearer t", cookie: "c=1", "Toolref-Key": "k", "x-app": "2", "user-agent": "node" }));
    expect(answer.status).toBe(200);
    expect(Object.fromEntries(seen[0]!.headers)).toEqual({
      authorization: "Bearer t",
      "content-length": "15",
      "content-type": "application/json",
      cookie: "c=1",
      "x-app": "2", // the real one (a proxy in front may set it), not segment 0's
      "user-agent": "OpenAI/JS 6", // fetch's own default on the edit request: segment 0's
    }); // and no host from inside the body
    expect(await seen[0]!.text()).toBe('{"messages":[]}');
    expect(answer.headers.get("Toolref-History")).toBe("tb_aaaaaaaaaaaaaaaaaaaaaaaaaa");
    expect(answer.headers.get("Toolref-Savings")).toBe("raw=15, wire=10, ratio=1.5");
    const lacking = await ok(edit({}));
    expect(lacking.status).toBe(415); // the client sends the request whole
    expect(((await lacking.json()) as { detail: string }).detail).toMatch(/names the credential authorization/);
    const odd = await withToolRef(app, { registry: "http://registry.test", fetch: restored("bad name: 1\r\n") })(edit({}));
    expect(odd.status).toBe(415);
    expect(seen).toHaveLength(1);
  });

  it("an edit the registry cannot be asked about: 415, on which a client sends the request as it is", async () => {
    const handle = withToolRef(echo, { registry: "http://registry.test", fetch: never });
    const answer = await handle(new Request("http://app.test/", { method: "POST", headers: { "Content-Type": MEDIA_TYPE }, body: '{"v":2}\n' }));
    expect(answer.status).toBe(415);
    expect(answer.headers.get("Toolref-Edits")).toBeNull();
    expect(((await answer.json()) as { detail: string }).detail).toMatch(/cannot apply edits now \(the registry is unreachable/);
  });

  it("refuses bodies over the limits, before any work", async () => {
    const handle = withToolRef(echo, { registry: "http://registry.test", fetch: never, maxBodyBytes: 1000, maxInflatedBytes: 5000 });
    const headers = { "Toolref-Protocol": "2", "Content-Type": "application/json" };
    const big = JSON.stringify({ messages: [{ role: "user", content: "x".repeat(2000) }] });
    const tooBig = await handle(new Request("http://app.test/", { method: "POST", headers, body: big }));
    expect(tooBig.status).toBe(413);
    expect(((await tooBig.json()) as { type: string }).type).toBe("urn:toolref:problem:body-too-large");
    const bomb = await gzip(new TextEncoder().encode(JSON.stringify({ messages: [{ role: "user", content: "x".repeat(100_000) }] })));
    expect(bomb.length).toBeLessThan(1000);
    const inflated = await handle(
      new Request("http://app.test/", { method: "POST", headers: { ...headers, "Content-Encoding": "gzip" }, body: bomb as BodyInit }),
    );
    expect(inflated.status).toBe(413);
    expect(((await inflated.json()) as { type: string }).type).toBe("urn:toolref:problem:decompressed-too-large");
  });

  it("an unreachable registry: full payloads pass as protocol 1, refs get a 409 to resend", async () => {
    const handle = withToolRef(echo, { registry: "http://registry.test", fetch: never });
    const headers = { "Toolref-Protocol": "2", "Content-Type": "application/json" };
    const full = '{"messages":[{"role":"user","parts":[{"type":"text","text":"hi"}]}]}';
    const passed = await handle(new Request("http://app.test/", { method: "POST", headers, body: full }));
    expect(await passed.text()).toBe(full);
    expect(passed.headers.get("Toolref-Protocol")).toBe("1");
    const ref = refOf({ name: "t", args: 1, result: 2 });
    const marked = JSON.stringify({ messages: [{ role: "assistant", parts: [{ type: "tool-t", toolCallId: "c", state: "output-available", toolRef: ref }] }] });
    const refused = await handle(new Request("http://app.test/", { method: "POST", headers, body: marked }));
    expect(refused.status).toBe(409);
    expect(((await refused.json()) as { missingRefs: string[] }).missingRefs).toEqual([ref]);
  });
});
