// withToolRef against unusual input and a registry that refuses (review: the JS backend),
// each beside what ToolRefMiddleware does for the same input (client_sdk/toolref/receiving:
// restoring.py, hydrator.py). The registry is an in-process fetch, so each test says
// exactly what the registry answered; the tests marked "found in review" failed before
// their fix.
import { describe, expect, it } from "vitest";
import { MEDIA_TYPE, refOf, toolrefFetch, withToolRef } from "../src/index.js";

const REF = refOf({ name: "t", args: 1, result: 2 });
const FULL = '{"messages":[{"role":"user","parts":[{"type":"text","text":"hi"}]}]}';
/** As Python's `json.dumps` writes it (`, ` and `: `): a protocol-2 client of the Python SDK. */
const SPACED = `{"messages": [{"role": "assistant", "parts": [{"type": "tool-t", "toolCallId": "c", "state": "output-available", "toolRef": "${REF}"}]}]}`;
const encoder = new TextEncoder();

type Fetch = typeof fetch;

/** A registry answering `/v1/capabilities` 404 (this SDK's version of edits is told) and every
 * other call with `answer` (the request's path and body given). */
function registry(answer: (path: string, body: string) => Response): { fetch: Fetch; calls: string[] } {
  const calls: string[] = [];
  const fetch = (async (input: RequestInfo | URL, init?: RequestInit) => {
    const path = new URL(String(input)).pathname;
    if (path === "/v1/capabilities") return new Response("", { status: 404 });
    calls.push(path);
    const body = init?.body;
    return answer(path, typeof body === "string" ? body : body instanceof Uint8Array ? new TextDecoder().decode(body) : "");
  }) as Fetch;
  return { fetch, calls };
}

function problemAnswer(status: number, slug: string): Response {
  return new Response(JSON.stringify({ type: `urn:toolref:problem:${slug}`, title: slug, status, detail: slug }), {
    status,
    headers: { "content-type": "application/problem+json" },
  });
}

/** A hydrate answer: the messages' text as sent (nothing to fill). */
function echoHydrate(_: string, body: string): Response {
  const messages = body.slice('{"messages":'.length, body.lastIndexOf(',"mode":'));
  return new Response(`{"messages":${messages},"toolReferences":{}}`, { headers: { "content-type": "application/json" } });
}

function recording(): { handle: (request: Request) => Promise<Response>; seen: { body: Uint8Array; headers: Headers }[] } {
  const seen: { body: Uint8Array; headers: Headers }[] = [];
  return {
    seen,
    handle: async (request: Request) => {
      seen.push({ body: new Uint8Array(await request.arrayBuffer()), headers: request.headers });
      return new Response("ok", { headers: { "content-type": "text/plain" } });
    },
  };
}

function protocol2(body: string | Uint8Array, contentType = "application/json"): Request {
  return new Request("http://app.test/api/chat", {
    method: "POST",
    headers: { "Toolref-Protocol": "2", "Content-Type": contentType },
    body: body as BodyInit,
  });
}

describe("withToolRef: an edit over maxBodyBytes", () => {
  it("found in review: is a 415 (the client sends the request whole, for the app's own limits), as ToolRefMiddleware answers it", async () => {
    const app = recording();
    const { fetch, calls } = registry(() => new Response("", { status: 500 }));
    const handle = withToolRef(app.handle, { registry: "http://registry.test", fetch, maxBodyBytes: 64 });
    const edit = new Request("http://app.test/api/chat", { method: "POST", headers: { "Content-Type": MEDIA_TYPE }, body: "x".repeat(65) });
    const answer = await handle(edit);
    expect(answer.status).toBe(415);
    const problem = (await answer.json()) as { type: string; detail: string };
    expect(problem.type).toBe("urn:toolref:problem:unsupported-media-type");
    expect(problem.detail).toMatch(/over the limit of 64 bytes \(maxBodyBytes\)/);
    expect(problem.detail).toMatch(/send the request as it is/);
    expect(calls).toEqual([]); // the registry never asked
    expect(app.seen).toHaveLength(0);
  });

  it("found in review: a toolrefFetch client's turn whose edit is too large reaches the app, sent as it is", async () => {
    const app = recording();
    const { fetch } = registry(() => new Response("", { status: 500 }));
    const handle = withToolRef(app.handle, { registry: "http://registry.test", fetch, maxBodyBytes: 256 });
    const send = toolrefFetch({ fetch: ((input: RequestInfo | URL, init?: RequestInit) => handle(new Request(input, init))) as Fetch });
    const text = (n: number) => Array.from({ length: 40 }, (_, k) => ((k * 7919 + n * 104729) % 1000003).toString(36)).join(" ");
    const body = (turns: number) => JSON.stringify({ messages: Array.from({ length: turns }, (_, n) => ({ role: "user", content: text(n) })) });
    const first = await send("http://app.test/api/hostile-1", { method: "POST", headers: { "content-type": "application/json" }, body: body(1) });
    expect(first.status).toBe(200);
    expect(first.headers.get("Toolref-Edits")).not.toBeNull(); // edits from the next turn
    const second = await send("http://app.test/api/hostile-1", { method: "POST", headers: { "content-type": "application/json" }, body: body(4) });
    expect(second.status).toBe(200);
    expect(await second.text()).toBe("ok");
    expect(new TextDecoder().decode(app.seen.at(-1)!.body)).toBe(body(4));
  });
});

describe("withToolRef: protocol 2 with the registry refusing or gone (ToolRefMiddleware's hydrator)", () => {
  it("found in review: a marker written with spaces (`\"toolRef\": \"tr_...\"`) is a missing ref when the registry is down, never passed to the app unfilled", async () => {
    const app = recording();
    const down = (async () => {
      throw new TypeError("fetch failed");
    }) as Fetch;
    const handle = withToolRef(app.handle, { registry: "http://registry.test", fetch: down });
    const answer = await handle(protocol2(SPACED));
    expect(answer.status).toBe(409);
    const problem = (await answer.json()) as { type: string; missingRefs: string[] };
    expect(problem.type).toBe("urn:toolref:problem:missing-refs");
    expect(problem.missingRefs).toEqual([REF]);
    expect(app.seen).toHaveLength(0);
  });

  it("found in review: a registry over its quota (429) is the registry unavailable: full payloads reach the app as protocol 1, markers are missing refs", async () => {
    const app = recording();
    const { fetch } = registry(() => problemAnswer(429, "quota-exceeded"));
    const handle = withToolRef(app.handle, { registry: "http://registry.test", fetch });
    const passed = await handle(protocol2(FULL));
    expect(passed.status).toBe(200);
    expect(passed.headers.get("Toolref-Protocol")).toBe("1");
    expect(new TextDecoder().decode(app.seen[0]!.body)).toBe(FULL);
    const refused = await handle(protocol2(SPACED));
    expect(refused.status).toBe(409);
    expect(((await refused.json()) as { missingRefs: string[] }).missingRefs).toEqual([REF]);
    expect(app.seen).toHaveLength(1);
  });

  it("found in review: a body the registry refuses (400, 413, 422) with no marker in it reaches the app as protocol 1; with one, the refusal is the client's", async () => {
    for (const [status, slug] of [[400, "bad-request"], [413, "body-too-large"], [422, "validation-failed"]] as const) {
      const app = recording();
      const { fetch } = registry(() => problemAnswer(status, slug));
      const handle = withToolRef(app.handle, { registry: "http://registry.test", fetch });
      const passed = await handle(protocol2(FULL));
      expect(passed.status).toBe(200);
      expect(passed.headers.get("Toolref-Protocol")).toBe("1");
      expect(new TextDecoder().decode(app.seen[0]!.body)).toBe(FULL);
      const refused = await handle(protocol2(SPACED));
      expect(refused.status).toBe(status);
      expect(((await refused.json()) as { type: string }).type).toBe(`urn:toolref:problem:${slug}`);
      expect(app.seen).toHaveLength(1);
    }
  });
});

describe("withToolRef: protocol-2 bodies reach the app byte for byte", () => {
  it("found in review: a body that is not UTF-8 (a lone surrogate as CESU bytes), or opens with a BOM, is the client's bytes, not re-encoded", async () => {
    const head = encoder.encode('{"messages":[{"role":"user","content":"');
    const tail = encoder.encode('"}]}');
    const cesu = new Uint8Array([...head, 0xed, 0xa0, 0x80, 0xff, ...tail]); // invalid UTF-8
    const bom = new Uint8Array([0xef, 0xbb, 0xbf, ...encoder.encode(FULL)]);
    for (const body of [cesu, bom]) {
      const app = recording();
      const { fetch } = registry(echoHydrate);
      const answer = await withToolRef(app.handle, { registry: "http://registry.test", fetch })(protocol2(body));
      expect(answer.status).toBe(200);
      expect([...app.seen[0]!.body]).toEqual([...body]);
    }
  });

  it("found in review: the client's Content-Type reaches the app as sent; a body of another media type is not hydrated", async () => {
    const app = recording();
    const { fetch, calls } = registry(echoHydrate);
    const handle = withToolRef(app.handle, { registry: "http://registry.test", fetch });
    await handle(protocol2(FULL, "application/json; charset=utf-8"));
    expect(app.seen[0]!.headers.get("content-type")).toBe("application/json; charset=utf-8");
    expect(calls).toHaveLength(1);
    const form = "--b\r\nContent-Disposition: form-data; name=\"messages\"\r\n\r\n[]\r\n--b--\r\n";
    await handle(protocol2(form, "multipart/form-data; boundary=b"));
    expect(app.seen[1]!.headers.get("content-type")).toBe("multipart/form-data; boundary=b");
    expect(new TextDecoder().decode(app.seen[1]!.body)).toBe(form);
    const text = await handle(protocol2(FULL, "text/plain"));
    expect(text.status).toBe(200);
    expect(app.seen[2]!.headers.get("content-type")).toBe("text/plain");
    expect(calls).toHaveLength(1); // only the JSON body was hydrated
  });

  it("unusual JSON (`__proto__`, huge numbers, escapes, non-ASCII, whitespace between members) is spliced, never rewritten", async () => {
    const body = `{ "__proto__" : {"x":1} ,\n "n": 1e400, "big": 123456789012345678901234567890,\t"messages" : [ {"role":"user","content":"\\ud800 é 😀 \\u0000"} ,\n {"role":"user","content":[1.0,-0.0]} ] , "messages2": 1 }`;
    const app = recording();
    const { fetch } = registry(echoHydrate);
    const answer = await withToolRef(app.handle, { registry: "http://registry.test", fetch })(protocol2(body));
    expect(answer.status).toBe(200);
    expect(answer.headers.get("Toolref-Protocol")).toBe("2");
    expect(new TextDecoder().decode(app.seen[0]!.body)).toBe(body);
  });
});

describe("withToolRef: an edit's restored request and its answer", () => {
  /** A registry applying every edit to `body` (segment 0: `content-type: application/json`). */
  function applying(body: Uint8Array): Fetch {
    return registry((path) => {
      if (path.startsWith("/v1/answers/")) return new Response(null, { status: 204 });
      const head = encoder.encode("content-type: application/json\r\n\r\n");
      return new Response(new Uint8Array([...head, ...body]), {
        headers: { "content-type": "application/vnd.toolref.request", "Toolref-History": "tb_aaaaaaaaaaaaaaaaaaaaaaaaaa" },
      });
    }).fetch;
  }

  it("found in review: an edit restoring a body over maxInflatedBytes is a 415 (the client sends it whole), as ToolRefMiddleware's limit; within it, the app gets it", async () => {
    const body = encoder.encode(`{"messages":["${"x".repeat(2000)}"]}`);
    for (const [limit, status] of [[1000, 415], [body.length, 200]] as const) {
      const app = recording();
      const handle = withToolRef(app.handle, { registry: "http://registry.test", fetch: applying(body), maxInflatedBytes: limit });
      const edit = new Request("http://app.test/api/chat", { method: "POST", headers: { "Content-Type": MEDIA_TYPE }, body: "edit" });
      const answer = await handle(edit);
      expect(answer.status).toBe(status);
      expect(app.seen).toHaveLength(status === 200 ? 1 : 0);
      if (status === 415) expect(((await answer.json()) as { detail: string }).detail).toContain("maxInflatedBytes");
    }
  });

  it("the app gets the restored body byte for byte (invalid UTF-8, a BOM, `__proto__`)", async () => {
    const body = new Uint8Array([0xef, 0xbb, 0xbf, ...encoder.encode('{"__proto__":1,"messages":["'), 0xed, 0xa0, 0x80, ...encoder.encode('"]}')]);
    const app = recording();
    const handle = withToolRef(app.handle, { registry: "http://registry.test", fetch: applying(body) });
    const edit = new Request("http://app.test/api/chat", { method: "POST", headers: { "Content-Type": MEDIA_TYPE }, body: "edit" });
    const answer = await handle(edit);
    expect(answer.status).toBe(200);
    expect([...app.seen[0]!.body]).toEqual([...body]);
    expect(app.seen[0]!.headers.get("content-length")).toBe(String(body.length));
  });

  it("a streamed answer (an LLM API's, kept when whole) reaches the client piece by piece: its first bytes before the handler wrote the rest", async () => {
    let release = (): void => undefined;
    const rest = new Promise<void>((done) => (release = done));
    const handler = async (): Promise<Response> =>
      new Response(
        new ReadableStream<Uint8Array>({
          async start(controller) {
            controller.enqueue(encoder.encode('data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'));
            await rest;
            controller.enqueue(encoder.encode("data: [DONE]\n\n"));
            controller.close();
          },
        }),
        { headers: { "content-type": "text/event-stream" } },
      );
    const handle = withToolRef(handler, { registry: "http://registry.test", fetch: applying(encoder.encode(FULL)) });
    const edit = new Request("http://app.test/v1/chat/completions", { method: "POST", headers: { "Content-Type": MEDIA_TYPE }, body: "edit" });
    const answer = await handle(edit);
    const reader = answer.body!.getReader();
    const first = await reader.read(); // before `release`: a buffered answer never gets here
    expect(new TextDecoder().decode(first.value)).toContain('"content":"a"');
    release();
    let tail = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      tail += new TextDecoder().decode(value);
    }
    expect(tail).toBe("data: [DONE]\n\n");
  });
  it("found in review: a Toolref-Protocol that is no version (0x2, 2.0, 2e0, repeated) is not the backend's: the app sees the request as it came, as ToolRefMiddleware's speaks_refs has it", async () => {
    for (const value of ["0x2", "2.0", "2e0", " +2", "2, 2", "0b10", "1234567890"]) {
      const app = recording();
      const { fetch, calls } = registry(echoHydrate);
      const handle = withToolRef(app.handle, { registry: "http://registry.test", fetch });
      const request = new Request("http://app.test/api/chat", {
        method: "POST",
        headers: { "Toolref-Protocol": value, "Content-Type": "application/json" },
        body: SPACED,
      });
      const answer = await handle(request);
      expect(answer.status).toBe(200);
      expect(calls).toEqual([]); // no hydrate: before, Number() read 0x2, 2.0, 2e0 as 2
      expect(new TextDecoder().decode(app.seen[0]!.body)).toBe(SPACED);
      expect(app.seen[0]!.headers.get("Toolref-Protocol")).toBe(value.trim());
    }
  });
  it("found in review: a protocol-2 body with its messages under `input` (Responses) or `contents` (Gemini) is hydrated without `messagesKey`, as ToolRefMiddleware reads it", async () => {
    for (const key of ["input", "contents"]) {
      const app = recording();
      const sent: string[] = [];
      const { fetch, calls } = registry((path, body) => {
        sent.push(body);
        return echoHydrate(path, body);
      });
      const handle = withToolRef(app.handle, { registry: "http://registry.test", fetch });
      const body = SPACED.replace('{"messages":', `{"model": "m", "${key}":`);
      const answer = await handle(protocol2(body));
      expect(answer.status).toBe(200);
      expect(calls).toEqual(["/v1/messages:hydrate"]); // before: the handler got the markers
      expect(sent[0]!.startsWith('{"messages":[{"role": "assistant"')).toBe(true);
      expect(new TextDecoder().decode(app.seen[0]!.body)).toBe(body);
    }
  });
});
