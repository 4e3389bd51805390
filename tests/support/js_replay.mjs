// Replays request bodies through the TypeScript SDK's toolrefFetch (client_sdk/js/dist, as
// built by `make test`), one line of stdin a request, one line of stdout its record, so
// that a Python test can send the very bodies its own SDK sent and compare
// (tests/integration/test_js_parity.py). A request waits for its line: the test can change
// the registry (flush it, say) between two requests.
//
//   node tests/support/js_replay.mjs
//   stdin:  {"url": "http://127.0.0.1:8750/llm/up/v1/chat/completions", "body": "<JSON text>",
//            "headers": {...}, "origin": "http://127.0.0.1:8751" (optional: where its attempts
//            really go, as a load balancer in front of replicas would send them)}
//   stdout: {"status": 200, "attempts": [{"bytes": 412, "history": "?1", "encoding": "gzip"|"zstd",
//                                          "continues": "th_..." or null}],
//            "info": <toolrefFetch's ExchangeInfo>, "answer": <bytes of the answer>}
import { createInterface } from "node:readline";
import { gunzipSync } from "node:zlib";
import { toolrefFetch } from "../../client_sdk/js/dist/index.js";

const attempts = [];
let info = null;

function size(body) {
  if (body === undefined || body === null) return 0;
  if (typeof body === "string") return Buffer.byteLength(body);
  return body.byteLength;
}

/** The history an attempt continues, or null: named in the Toolref-History header (a zstd
 * body, compressed against it) or in the body's `historyRef` (plain or gzip). */
function continues(body, encoding, history) {
  if (encoding === "zstd") return history?.startsWith("th_") ? history : null;
  let bytes = typeof body === "string" ? Buffer.from(body) : Buffer.from(body);
  if (encoding === "gzip") bytes = gunzipSync(bytes);
  const value = JSON.parse(bytes.toString("utf8"));
  return typeof value.historyRef === "string" ? value.historyRef : null;
}

let origin = null; // the line's "origin": where its attempts go (a replica behind one URL)

/** The real fetch, noting each attempt's body size and headers as toolref sent them. */
async function wire(input, init = {}) {
  if (origin !== null) {
    const url = new URL(String(input instanceof Request ? input.url : input));
    input = origin + url.pathname + url.search;
  }
  const headers = new Headers(init.headers);
  const encoding = headers.get("content-encoding");
  attempts.push({
    bytes: size(init.body),
    history: headers.get("toolref-history"),
    dictionary: headers.get("toolref-dictionary"),
    encoding,
    continues: continues(init.body, encoding, headers.get("toolref-history")),
  });
  return fetch(input, init);
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
  process.stdout.write(
    JSON.stringify({ status: response.status, attempts: [...attempts], info, answer: answer.length }) + "\n",
  );
}
