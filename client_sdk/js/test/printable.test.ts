// A peer's text in the SDK's console messages and error messages (review: peers' text shown):
// a receiver's `x-request-id`, a registry's redirect `Location`. Before, each was shown as it
// came: a hostile or broken receiver could write escape sequences (clearing the screen,
// moving the cursor, forging a line) and megabytes into an app's console, log or error. Now
// each is shown as Python's SDK shows it (`toolref.wire.redaction.printable`, at most 200
// characters): `printable` (src/shown.ts), held to Python's outputs by the shared vectors
// (tests/js_printable_vectors.py). And a warning names its endpoint by origin and path, as
// Python's `Sender` does (`target_of`): before, the answer's whole URL, query included (an
// API key in `?key=` printed in the console).
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it, vi } from "vitest";
import { MEDIA_TYPE, ToolReferenceManager, forgetSharedState, toolrefFetch } from "../src/index.js";
import { RegistryUnavailable, postBounded } from "../src/registry.js";
import { MOST_SHOWN, endpointShown, printable } from "../src/shown.js";

afterEach(() => {
  forgetSharedState();
  vi.restoreAllMocks();
});

interface Case {
  name: string;
  text: string;
  most: number;
  shown: string;
}

const cases = (JSON.parse(readFileSync(new URL("./vectors.json", import.meta.url), "utf8")) as { printable: Case[] }).printable;

describe("printable: a peer's text as Python's toolref.wire.redaction.printable shows it", () => {
  it("has the vectors, escapes and cuts among them", () => {
    expect(cases.length).toBeGreaterThan(40);
    expect(cases.some((item) => item.shown.includes("\\x1b"))).toBe(true);
    expect(cases.some((item) => item.shown.endsWith("more characters)"))).toBe(true);
  });

  for (const item of cases) {
    it(item.name, () => {
      expect(printable(item.text, item.most)).toBe(item.shown);
    });
  }

  it("keeps 200 characters unless told (what Python's SDK passes for each peer's value)", () => {
    const text = "\x1b" + "r".repeat(10_000);
    expect(MOST_SHOWN).toBe(200);
    expect(printable(text)).toBe(printable(text, 200));
    expect(printable(text)).toBe("\\x1b" + "r".repeat(199) + "... (9801 more characters)");
  });
});

const URL_ = "http://app.test/api/chat";
const HOSTILE_ID = "\x1b[2J\x1b[H\x1b]0;owned\x07" + "r".repeat(10_000);
const TOO_MANY = { type: "urn:toolref:problem:too-many-items", title: "too many items", status: 413, limit: 1 };
const MALFORMED = { type: "urn:toolref:problem:malformed-body", title: "malformed body", status: 400 };

function conversation(turns: number): string {
  const messages: unknown[] = [{ role: "user", content: `read a.py ${"x = 1\n".repeat(300)}` }];
  for (let turn = 0; turn < turns; turn++) {
    messages.push({ role: "assistant", content: `reading file ${turn}` });
    messages.push({ role: "user", content: `file ${turn}: ${`y = ${turn}\n`.repeat(200)}` });
  }
  return JSON.stringify({ messages });
}

/** A receiver of edits 6 that refuses every edit with `refusal` (its `x-request-id` the
 * hostile one), answered at `url` (a real fetch's `response.url`: query included). */
function refusing(refusal: object, url = ""): typeof fetch {
  return (async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const request = new Request(input, init);
    await request.arrayBuffer();
    const answer =
      request.headers.get("content-type") === MEDIA_TYPE
        ? new Response(JSON.stringify(refusal), {
            status: (refusal as { status: number }).status,
            headers: { "content-type": "application/problem+json", "x-request-id": HOSTILE_ID },
          })
        : new Response("{}", { headers: { "content-type": "application/json", "Toolref-Edits": "6" } });
    if (url) Object.defineProperty(answer, "url", { value: url });
    return answer;
  }) as typeof fetch;
}

async function warned(refusal: object, url = ""): Promise<string> {
  const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
  const send = toolrefFetch({ fetch: refusing(refusal, url), manager: new ToolReferenceManager() });
  for (let turn = 1; turn <= 2; turn++) {
    const answer = await send(URL_, { method: "POST", headers: { "content-type": "application/json" }, body: conversation(turn) });
    expect(answer.status).toBe(200); // the refused edit went again as it is, unseen
    await answer.text();
  }
  expect(warn).toHaveBeenCalledTimes(1);
  return String(warn.mock.calls[0]![0]);
}

function escapedAndCut(said: string): void {
  expect(said).not.toMatch(/[\x00-\x08\x0a-\x1f\x7f-\x9f]/);
  expect(said).toContain("request id \\x1b[2J\\x1b[H\\x1b]0;owned\\x07rrr");
  expect(said).toContain("... (9817 more characters)");
  expect(said.length).toBeLessThan(1_000);
}

describe("a receiver's request id in the SDK's warnings", () => {
  it("413 too-many-items: the warning shows it escaped and cut", async () => {
    const said = await warned(TOO_MANY);
    escapedAndCut(said);
    expect(said).toContain("/api/chat refused an edit of");
    expect(said).toContain("it takes a limit of 1 entries");
  });

  it("400 malformed-body: the warning shows it escaped and cut", async () => {
    const said = await warned(MALFORMED);
    escapedAndCut(said);
    expect(said).toContain("refused an edit written for edits version 6 as unreadable (400 malformed-body: no detail; request id ");
    expect(said).toContain("if the backend was not rolled back, report this with the request id");
  });

  it("names the endpoint by origin and path: not the query (an API key) nor the fragment", async () => {
    const said = await warned(TOO_MANY, "https://gw.test/v1beta/models/g:generateContent?key=AIzaSECRET#part");
    expect(said).toContain("toolref: https://gw.test/v1beta/models/g:generateContent refused an edit of");
    expect(said).not.toContain("SECRET");
    expect(said).not.toContain("#part");
  });
});

// Found in review (small message defects): Python named an endpoint `https://host:/path` (an
// empty port) where JS names `https://host/path`. Both now write the origin and the path alike.
describe("an endpoint in a warning: as Python's target_of names it", () => {
  const endpoints = (JSON.parse(readFileSync(new URL("./vectors.json", import.meta.url), "utf8")) as { shownEndpoints: { url: string; shown: string }[] }).shownEndpoints;

  it("has them, the scheme's own port among them", () => {
    expect(endpoints.length).toBeGreaterThan(10);
    expect(endpoints.some((item) => item.url.includes(":443/"))).toBe(true);
  });

  for (const item of endpoints) {
    it(item.url, () => {
      expect(endpointShown(item.url)).toBe(item.shown);
    });
  }
});

describe("a registry's redirect in RegistryUnavailable", () => {
  it("shows its Location escaped and cut", async () => {
    // A header holds bytes (latin1): ESC, and 0x9b, a CSI of its own on an 8-bit terminal.
    const location = "http://elsewhere.test/\x1b[2J\u009b31m" + "l".repeat(10_000);
    const redirecting = (async () => new Response(null, { status: 302, headers: { location } })) as typeof fetch;
    const failed = await postBounded(redirecting, "http://registry.test/v1/edits:apply", {}, "{}", { timeoutMs: 5000, maxAnswerBytes: 1 << 20, signal: null }).catch(
      (error: unknown) => error,
    );
    expect(failed).toBeInstanceOf(RegistryUnavailable);
    const message = (failed as Error).message;
    expect(message).toContain("the registry answered a redirect (302 to http://elsewhere.test/\\x1b[2J\\x9b31mlll");
    expect(message).toContain("more characters)), which is not followed: set options.registry to the registry's own URL");
    expect(message).not.toMatch(/[\x1b\x9b]/);
    expect(message.length).toBeLessThan(1_000);
  });
});
