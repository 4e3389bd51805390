// Sends requests through the TypeScript SDK's toolrefFetch() with the platform's fetch (so
// edits ride the receiver's channel where it tells of one: client_sdk/js/src/channel), one
// line of stdin a request, one line of stdout its record, for tests/integration/
// test_js_channel.py. The answer is read piece by piece as the app would read a stream.
//
//   stdin:  {"url": "...", "body": "<JSON text>", "headers": {...}}
//   stdout: {"status": 200, "answer": "<the answer's text>", "pieces": <reads that gave bytes>,
//            "info": <toolrefFetch's ExchangeInfo>, "reports": [<channel report lines>]}
import { createInterface } from "node:readline";
import { reportChannelsTo, toolrefFetch } from "../../client_sdk/js/dist/index.js";

const reports = [];
reportChannelsTo((line) => reports.push(line));
let info = null;
const send = toolrefFetch({ onExchange: (exchange) => (info = exchange) });

for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const { url, body, headers } = JSON.parse(line);
  info = null;
  let record;
  try {
    const response = await send(url, { method: "POST", body, headers });
    const reader = response.body.getReader();
    const parts = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (value.length) parts.push(Buffer.from(value));
    }
    const answer = Buffer.concat(parts).toString();
    record = { status: response.status, answer, pieces: parts.length, info, reports: reports.splice(0) };
  } catch (error) {
    record = { error: `${error?.name}: ${error?.message} (${error?.cause?.message ?? ""})`, reports: reports.splice(0) };
  }
  process.stdout.write(JSON.stringify(record) + "\n");
}
