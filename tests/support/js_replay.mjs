// Replays request bodies through the TypeScript SDK's toolrefFetch (client_sdk/js/dist, as
// built by `make test`), one line of stdin a request, one line of stdout its record, so that
// a Python test can compare what JS sends with what Python's `Editor` makes of the same
// requests (tests/integration/test_js_parity.py). A request waits for its line: the test can
// change the registry (flush it, say) between two requests.
//
//   node tests/support/js_replay.mjs
//   stdin:  {"url": "http://127.0.0.1:8750/llm/up/v1/chat/completions", "body": "<JSON text>",
//            "headers": {...}, "origin": "http://127.0.0.1:8751" (optional: where its attempts
//            really go, as a load balancer in front of replicas would send them)}
//   stdout: {"status": 200, "info": <toolrefFetch's ExchangeInfo>, "answer": <bytes of the answer>,
//            "answerBody": "<base64 of the answer>", "answerType": <its content type>,
//            "zstd": <this node's zlib has zstd>,
//            "attempts": [{"bytes": 412, "body": "<base64>", "contentType": "...", "offer": "2"|null,
//                          "status": 200, "history": "tb_..."|null, "edits": "2"|null,
//                          "problem": "<problem+json text>"|null}]}
import { createInterface } from "node:readline";
import { platformZstd, toolrefFetch } from "../../client_sdk/js/dist/index.js";

const attempts = [];
let info = null;
let origin = null; // the line's "origin": where its attempts go (a replica behind one URL)

function bytesOf(body) {
  if (body === undefined || body === null) return Buffer.alloc(0);
  return typeof body === "string" ? Buffer.from(body) : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
}

/** The real fetch, noting each attempt as toolref sent it and what it was answered. */
async function wire(input, init = {}) {
  if (origin !== null) {
    const url = new URL(String(input instanceof Request ? input.url : input));
    input = origin + url.pathname + url.search;
  }
  const headers = new Headers(init.headers);
  const body = bytesOf(init.body);
  const attempt = {
    bytes: body.length,
    body: body.toString("base64"),
    contentType: headers.get("content-type"),
    offer: headers.get("toolref-edits"),
  };
  attempts.push(attempt);
  const response = await fetch(input, init);
  attempt.status = response.status;
  attempt.history = response.headers.get("toolref-history");
  attempt.edits = response.headers.get("toolref-edits");
  const problem = (response.headers.get("content-type") ?? "").startsWith("application/problem+json");
  attempt.problem = problem ? await response.clone().text() : null;
  return response;
}

const send = toolrefFetch({ fetch: wire, onExchange: (exchange) => (info = exchange) });

for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const { url, body, headers } = JSON.parse(line);
  origin = JSON.parse(line).origin ?? null;
  attempts.length = 0;
  info = null;
  const response = await send(url, { method: "POST", headers, body });
  const answer = new Uint8Array(await response.arrayBuffer());
  const record = {
    status: response.status,
    attempts: [...attempts],
    info,
    answer: answer.length,
    answerBody: Buffer.from(answer).toString("base64"),
    answerType: response.headers.get("content-type"),
    zstd: platformZstd() !== null,
  };
  process.stdout.write(JSON.stringify(record) + "\n");
}
