// Compression of the JS SDK's request bodies, measured on a realistic conversation:
// gzip (CompressionStream, what the SDK uses) against zstd level 6 with the history as a
// raw-content dictionary (what the Python SDK uses), through @bokuweb/zstd-wasm.
//
//   npm run bench:compression            (after `npm ci`; builds dist/ first)
//
// The conversation: a coding assistant over 30 turns, each reading a real source file of
// this repository (the last 10 re-read earlier ones, edited), as AI SDK 5 UIMessages. Each
// turn's body is what the SDK sends with history refs: the messages after the history the
// server confirmed (the last assistant message with its tool output, and the new question).
//
// @bokuweb/zstd-wasm compresses against a raw-content dictionary but cannot set the checksum
// flag the server requires; this bench adds it by hand (RFC 8878: the flag bit and the low 4
// bytes of XXH64), and `--check` writes the frames for the Python side to verify.
import { createRequire } from "node:module";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { gzip, dictionary } from "../dist/index.js";

const require = createRequire(import.meta.url);
const zstd = require("@bokuweb/zstd-wasm");
const ROOT = new URL("../../../", import.meta.url);
const encoder = new TextEncoder();

const WINDOW = 128 << 10; // the Python SDK's COMPRESS_WINDOW
const LEVEL = 6; // its DICTIONARY_LEVEL

// --- XXH64 (for the frame checksum the library does not write) -------------------------
const P1 = 11400714785074694791n, P2 = 14029467366897019727n, P3 = 1609587929392839161n;
const P4 = 9650029242287828579n, P5 = 2870177450012600261n, M = (1n << 64n) - 1n;
const rotl = (x, r) => ((x << BigInt(r)) | (x >> BigInt(64 - r))) & M;
const round = (acc, lane) => (rotl((acc + lane * P2) & M, 31) * P1) & M;
const merge = (acc, v) => ((((acc ^ round(0n, v)) * P1) & M) + P4) & M;
function xxh64(data) {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const n = data.length;
  let i = 0, h;
  if (n >= 32) {
    let v1 = (P1 + P2) & M, v2 = P2, v3 = 0n, v4 = (M + 1n - P1) & M;
    for (; i + 32 <= n; i += 32) {
      v1 = round(v1, view.getBigUint64(i, true)); v2 = round(v2, view.getBigUint64(i + 8, true));
      v3 = round(v3, view.getBigUint64(i + 16, true)); v4 = round(v4, view.getBigUint64(i + 24, true));
    }
    h = (rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)) & M;
    h = merge(merge(merge(merge(h, v1), v2), v3), v4);
  } else h = P5;
  h = (h + BigInt(n)) & M;
  for (; i + 8 <= n; i += 8) h = ((rotl(h ^ round(0n, view.getBigUint64(i, true)), 27) * P1) & M) + P4 & M;
  if (i + 4 <= n) { h = (rotl(h ^ ((BigInt(view.getUint32(i, true)) * P1) & M), 23) * P2 + P3) & M; i += 4; }
  for (; i < n; i++) h = (rotl(h ^ ((BigInt(data[i]) * P5) & M), 11) * P1) & M;
  h ^= h >> 33n; h = (h * P2) & M; h ^= h >> 29n; h = (h * P3) & M; h ^= h >> 32n;
  return h;
}

/** One zstd frame against `dict`, with the checksum flag set and the checksum appended. */
function zstdWithChecksum(cctx, body, dict) {
  const frame = zstd.compressUsingDict(cctx, body, dict, LEVEL);
  const out = new Uint8Array(frame.length + 4);
  out.set(frame);
  out[4] |= 0x04; // Frame_Header_Descriptor: Content_Checksum_flag
  new DataView(out.buffer).setUint32(frame.length, Number(xxh64(body) & 0xffffffffn), true);
  return out;
}

// --- the conversation -------------------------------------------------------------------
const sources = readdirSync(new URL("client_sdk/toolref/", ROOT))
  .filter((name) => name.endsWith(".py"))
  .sort()
  .slice(0, 20)
  .map((name) => ({ path: `client_sdk/toolref/${name}`, text: readFileSync(new URL(`client_sdk/toolref/${name}`, ROOT), "utf8") }));

function assistant(turn) {
  const file = sources[turn % sources.length];
  const text = turn < sources.length ? file.text : file.text.replace(/return /, "return  # edited\n        ");
  return {
    id: `a${turn}`,
    role: "assistant",
    parts: [
      { type: "step-start" },
      { type: "tool-read_file", toolCallId: `call_${turn}`, state: "output-available", input: { path: file.path }, output: text },
      { type: "text", text: `Here is what ${file.path} does, in short: it keeps one concept per module.`, state: "done" },
    ],
  };
}

const question = (turn) => ({ id: `u${turn}`, role: "user", parts: [{ type: "text", text: `Now read ${sources[turn % sources.length].path} and explain it.` }] });

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

await zstd.init();
const cctx = zstd.createCCtx();
const messages = [];
const rows = [];
const frames = [];
for (let turn = 0; turn < 30; turn++) {
  if (turn > 0) messages.push(assistant(turn - 1));
  messages.push(question(turn));
  const newMessages = messages.slice(Math.max(0, messages.length - (turn > 0 ? 2 : 1)));
  const confirmed = messages.slice(0, messages.length - newMessages.length);
  const whole = encoder.encode(JSON.stringify({ id: "chat", messages, trigger: "submit-message" }));
  const body = encoder.encode(JSON.stringify({ id: "chat", historyRef: "th_x", messages: newMessages, trigger: "submit-message" }));
  let start = performance.now();
  const gz = await gzip(body);
  const gzipMs = performance.now() - start;
  const dict = dictionary(confirmed.map((m) => JSON.stringify(m)));
  start = performance.now();
  const window = dict.subarray(Math.max(0, dict.length - WINDOW));
  const zs = zstdWithChecksum(cctx, body, window);
  const zstdMs = performance.now() - start;
  frames.push({ body: Buffer.from(body).toString("base64"), dict: Buffer.from(dict).toString("base64"), frame: Buffer.from(zs).toString("base64") });
  rows.push({ turn, whole: whole.length, plain: body.length, gzip: gz.length, zstd: zs.length, gzipMs, zstdMs });
}
zstd.freeCCtx(cctx);

const sum = (key) => rows.reduce((total, row) => total + row[key], 0);
console.log("turn  whole-body  new-messages  gzip  zstd+dict");
for (const row of rows) console.log([row.turn, row.whole, row.plain, row.gzip, row.zstd].map((v) => String(v).padStart(10)).join(""));
console.log(`total bytes over 30 turns: whole ${sum("whole")}, history refs ${sum("plain")}, + gzip ${sum("gzip")}, + zstd with dictionary ${sum("zstd")}`);
console.log(`median time per body: gzip ${median(rows.map((r) => r.gzipMs)).toFixed(2)} ms, zstd with dictionary ${median(rows.map((r) => r.zstdMs)).toFixed(2)} ms`);
const wasm = readFileSync(new URL("web/zstd.wasm", new URL("..", `file://${require.resolve("@bokuweb/zstd-wasm")}`)));
console.log(`zstd wasm module: ${wasm.length} bytes (${(await gzip(wasm)).length} gzipped) to ship to the browser`);
if (process.argv.includes("--check")) {
  writeFileSync(process.argv[process.argv.indexOf("--check") + 1], JSON.stringify(frames));
  console.log("frames written for the Python check");
}
