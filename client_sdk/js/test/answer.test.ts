// The answer a stream makes (edits/answer.ts) against the bytes client_sdk/toolref/edits/answer.py
// makes of the same stream (computed by running it), fed whole and in pieces that cut lines and
// characters; the streams that make none; tapFor's choice; answerId.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { AnswerTap, ID_LENGTH, MAX_ANSWER, MAX_STREAM, answerId, tapFor } from "../src/edits/answer.js";
import { readAnswer } from "../src/manager.js";

const ANTHROPIC =
  'event: message_start\n' +
  'data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude","usage":{"input_tokens":10,"output_tokens":1}}}\n\n' +
  'event: content_block_start\n' +
  'data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}\n\n' +
  'event: content_block_delta\r\n' +
  'data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me think"}}\r\n\r\n' +
  'data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" about it."}}\n\n' +
  'data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCkYIARgC"}}\n\n' +
  'data: {"type":"content_block_stop","index":0}\n\n' +
  'event: ping\n' +
  'data: {"type": "ping"}\n\n' +
  'data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}\n\n' +
  'data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hello, "}}\n\n' +
  'data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"wörld 😀\\n\\"quoted\\" \\u0001"}}\n\n' +
  'data: {"type":"content_block_stop","index":1}\n\n' +
  'data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}}\n\n' +
  'data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}\n\n' +
  'data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\\"city\\": \\"Par"}}\n\n' +
  'data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"is\\", \\"days\\": 3}"}}\n\n' +
  'data: {"type":"content_block_stop","index":2}\n\n' +
  'data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":42}}\n\n' +
  'data: {"type":"message_stop"}\n\n';

// Python: AnswerTap("anthropic"), ANTHROPIC fed, .answer.decode()
const ANTHROPIC_ANSWER =
  '{"role":"assistant","content":[{"type":"thinking","thinking":"Let me think about it.","signature":"EqQBCkYIARgC"},' +
  '{"type":"text","text":"Hello, wörld 😀\\n\\"quoted\\" \\u0001"},' +
  '{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{"city":"Paris","days":3}}]}\n' +
  '{"city": "Paris", "days": 3}';

const CHAT =
  'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n' +
  'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"I\'ll check "}}]}\n\n' +
  'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"the weather ☀."}}]}\n\n' +
  'data: {"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}\n\n' +
  'data: {"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"city\\":"}}]}}]}\n\n' +
  'data: {"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":" \\"Paris\\"}"}}]}}]}\n\n' +
  'data: {"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_","arguments":""}}]}}]}\n\n' +
  'data: {"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"name":"time","arguments":"{}"}}]}}]}\n\n' +
  'data: {"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n' +
  'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9}}\n\n' +
  'data: [DONE]\n\n';

// Python: AnswerTap("openai-chat"), CHAT fed, .answer.decode()
const CHAT_ANSWER =
  '{"role":"assistant","content":"I\'ll check the weather ☀.","tool_calls":[' +
  '{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\\"city\\": \\"Paris\\"}"}},' +
  '{"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{}"}}]}\n' +
  '{"city": "Paris"}\n' +
  "{}";

const encoder = new TextEncoder();
const bytes = (text: string): Uint8Array => encoder.encode(text);
const text = (data: Uint8Array | null): string | null => (data === null ? null : new TextDecoder().decode(data));
const hex = (data: Uint8Array | null): string | null => (data === null ? null : Buffer.from(data).toString("hex"));

/** `stream` fed in pieces of `step` bytes: the tap, and the offsets of the pieces whose feed said true. */
function fed(format: string, stream: Uint8Array | string, step = Infinity): { tap: AnswerTap; ended: number[] } {
  const data = typeof stream === "string" ? bytes(stream) : stream;
  const tap = new AnswerTap(format);
  const ended: number[] = [];
  const size = Math.min(step, data.length || 1);
  for (let at = 0; at < data.length; at += size) if (tap.feed(data.subarray(at, at + size))) ended.push(at);
  return { tap, ended };
}

/** An Anthropic stream of one tool_use block whose input streams as `partial` (one piece). */
function toolStream(partial: string): string {
  const delta = { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: partial } };
  return (
    'data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}\n\n' +
    `data: ${JSON.stringify(delta)}\n\n` +
    'data: {"type":"message_stop"}\n\n'
  );
}

describe("AnswerTap: Python's bytes", () => {
  it("assembles an Anthropic answer (thinking, text, tool_use) fed whole, by 7 bytes, by 1 byte", () => {
    expect(bytes(ANTHROPIC).length).toBe(1763); // the stream Python read
    for (const [step, end] of [
      [Infinity, 0],
      [7, 1757],
      [1, 1762],
    ] as const) {
      const { tap, ended } = fed("anthropic", ANTHROPIC, step);
      expect(ended).toEqual([end]);
      expect(tap.done).toBe(true);
      expect(tap.failed).toBe(false);
      expect(text(tap.answer)).toBe(ANTHROPIC_ANSWER);
    }
  });

  it("assembles an OpenAI Chat answer (content, two tool calls) fed whole, by 7 bytes, by 1 byte", () => {
    expect(bytes(CHAT).length).toBe(1132);
    for (const [step, end] of [
      [Infinity, 0],
      [7, 1127],
      [1, 1131],
    ] as const) {
      const { tap, ended } = fed("openai-chat", CHAT, step);
      expect(ended).toEqual([end]);
      expect(text(tap.answer)).toBe(CHAT_ANSWER);
    }
  });

  it("writes a tool input as Python's json does: keys in order, a key twice, floats, big integers, NaN", () => {
    const partial = '{"b": 1.0, "10": [1e16, 0.00001, 12345678901234567890, -0], "a": NaN, "b": 2}';
    const { tap } = fed("anthropic", toolStream(partial));
    expect(text(tap.answer)).toBe(
      '{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f",' +
        '"input":{"b":2,"10":[1e+16,1e-05,12345678901234567890,0],"a":NaN}}]}\n' +
        partial,
    );
  });

  it("writes a lone surrogate as surrogatepass does", () => {
    const stream =
      'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n' +
      'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\\ud800b"}}\n\n' +
      'data: {"type":"message_stop"}\n\n';
    expect(hex(fed("anthropic", stream).tap.answer)).toBe(
      "7b22726f6c65223a22617373697374616e74222c22636f6e74656e74223a5b7b2274797065223a2274657874222c2274657874223a2261eda08062227d5d7d",
    );
  });

  it("reads an empty input as {} and a whitespace one too, as Python's strip() does", () => {
    for (const partial of ["", " \n", "\u00a0\u3000\u001c"]) {
      const answer = text(fed("anthropic", toolStream(partial)).tap.answer);
      expect(answer).toBe(`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}\n${partial}`);
    }
    expect(fed("anthropic", toolStream("\ufeff{}")).tap.answer).toBeNull(); // json.loads: unexpected BOM
  });
});

describe("AnswerTap: no answer", () => {
  it("for a stream cut before its end event", () => {
    const cut = ANTHROPIC.slice(0, ANTHROPIC.indexOf('data: {"type":"message_stop"}'));
    const { tap, ended } = fed("anthropic", cut, 100);
    expect(ended).toEqual([]);
    expect([tap.done, tap.failed, tap.answer]).toEqual([false, false, null]);
    const chat = fed("openai-chat", CHAT.replace("data: [DONE]\n\n", ""));
    expect([chat.tap.done, chat.tap.answer]).toEqual([false, null]);
  });

  it("for an error event", () => {
    const error = 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n';
    const { tap, ended } = fed("anthropic", ANTHROPIC.replace('data: {"type":"message_stop"}', error));
    expect(ended).toEqual([]);
    expect([tap.failed, tap.answer]).toEqual([true, null]);
    const chat = fed("openai-chat", CHAT.replace("data: [DONE]", 'data: {"error":{"message":"boom"}}\n\ndata: [DONE]'));
    expect([chat.tap.failed, chat.tap.answer]).toEqual([true, null]);
  });

  it("for an event that is not a JSON object", () => {
    for (const data of ["{", "[1]", "[DONE]"]) {
      const { tap } = fed("anthropic", ANTHROPIC.replace('data: {"type": "ping"}', `data: ${data}`));
      expect([tap.failed, tap.answer]).toEqual([true, null]);
    }
  });

  it("for bytes after the end; whitespace after it is fine", () => {
    const ok = fed("anthropic", ANTHROPIC);
    expect(ok.tap.feed(bytes(" \r\n\t"))).toBe(false);
    expect(text(ok.tap.answer)).toBe(ANTHROPIC_ANSWER);
    expect(ok.tap.feed(bytes('data: {"type":"ping"}\n\n'))).toBe(false);
    expect([ok.tap.done, ok.tap.failed, ok.tap.answer]).toEqual([true, true, null]);
    const chat = fed("openai-chat", CHAT);
    chat.tap.feed(bytes("data: [DONE]\n\n"));
    expect(chat.tap.answer).toBeNull();
  });

  it("for a stream longer than MAX_STREAM; one as long is read", () => {
    const head = bytes(ANTHROPIC.slice(0, ANTHROPIC.indexOf('data: {"type":"message_stop"}')));
    const end = bytes('data: {"type":"message_stop"}\n\n');
    for (const extra of [0, 1]) {
      const padding = new Uint8Array(MAX_STREAM - head.length - end.length + extra).fill(0x0a); // empty lines
      const tap = new AnswerTap("anthropic");
      expect([tap.feed(head), tap.feed(padding), tap.feed(end)]).toEqual([false, false, !extra]);
      expect(text(tap.answer)).toBe(extra ? null : ANTHROPIC_ANSWER);
      expect(tap.failed).toBe(!!extra);
    }
  });

  it("for an answer longer than MAX_ANSWER, though the stream ended whole", () => {
    const long = "x".repeat(MAX_ANSWER);
    const stream =
      'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n' +
      `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"${long}"}}\n\n` +
      'data: {"type":"message_stop"}\n\n';
    const { tap, ended } = fed("anthropic", stream, 4096);
    expect(ended.length).toBe(0); // given up once its text passed MAX_ANSWER (review: answer taps' memory)
    expect([tap.done, tap.failed, tap.answer]).toEqual([false, true, null]);
    // text the answer escapes counts once: held within MAX_ANSWER, read to the end, then none
    const quoted = stream.replace(long, '\\"'.repeat(MAX_ANSWER / 2));
    const escaped = fed("anthropic", quoted, 4096);
    expect(escaped.ended.length).toBe(1);
    expect([escaped.tap.done, escaped.tap.failed, escaped.tap.answer]).toEqual([true, false, null]);
  });

  it("for an integer longer than Python reads (4300 digits)", () => {
    expect(fed("anthropic", toolStream(`[${"9".repeat(4300)}]`)).tap.answer).not.toBeNull();
    expect(fed("anthropic", toolStream(`[${"9".repeat(4301)}]`)).tap.answer).toBeNull();
  });
});

describe("tapFor", () => {
  const stream: [string, string][] = [["Content-Type", "Text/Event-Stream; charset=utf-8"]];

  it("taps a 200 event stream of Anthropic Messages or OpenAI Chat, as it is", () => {
    expect(tapFor("/v1/messages", 200, stream)).toBeInstanceOf(AnswerTap);
    expect(tapFor("/llm/claude/v1/messages/", 200, [...stream, ["content-encoding", " identity "]])).toBeInstanceOf(AnswerTap);
    const chat = tapFor("/v1/chat/completions", 200, new Headers({ "content-type": "text/event-stream" }));
    expect(chat).not.toBeNull();
    chat?.feed(bytes(CHAT));
    expect(text(chat?.answer ?? null)).toBe(CHAT_ANSWER);
  });

  it("taps nothing else", () => {
    expect(tapFor("/v1/messages", 400, stream)).toBeNull();
    expect(tapFor("/v1/messages", 200, [...stream, ["Content-Encoding", "gzip"]])).toBeNull();
    expect(tapFor("/v1/messages", 200, [["content-type", "application/json"]])).toBeNull();
    expect(tapFor("/v1/messages", 200, [])).toBeNull();
    expect(tapFor("/v1/models", 200, stream)).toBeNull();
    expect(tapFor("/v1/responses", 400, stream)).toBeNull();
    expect(tapFor("/v1beta/models/g:streamGenerateContent", 400, stream)).toBeNull();
    expect(tapFor("/v1beta/models/g:countTokens", 200, stream)).toBeNull();
  });

  it("taps Gemini streams, as Python's tap_for: a receiver always, a sender from version 6 (SINCE)", () => {
    // before, no JS endpoint was Gemini's: withToolRef, answering `Toolref-Edits: 6`, kept no
    // Gemini answer, and a Python sender's edit naming one was refused every turn
    const gemini = tapFor("/llm/gemini/v1beta/models/gemini-2.5-pro:streamGenerateContent", 200, stream);
    expect(gemini).toBeInstanceOf(AnswerTap);
    expect(tapFor("/v1beta/models/g:generateContent/", 200, stream)).toBeInstanceOf(AnswerTap);
    const chunk = (parts: unknown[], finish?: string) =>
      `data: ${JSON.stringify({ candidates: [{ content: { role: "model", parts }, ...(finish ? { finishReason: finish } : {}) }] })}\r\n\r\n`;
    expect(gemini?.feed(bytes(chunk([{ text: "Reading é😀 " }]) + chunk([{ text: "now." }, { functionCall: { name: "read", args: { path: "a.py" } } }], "STOP")))).toBe(true);
    expect(text(gemini?.answer ?? null)).toBe(
      '{"role":"model","parts":[{"text":"Reading é😀 now."},{"functionCall":{"name":"read","args":{"path":"a.py"}}}]}',
    );
    expect(tapFor("/v1beta/models/g:streamGenerateContent", 200, stream, 5)).toBeNull();
    expect(tapFor("/v1beta/models/g:streamGenerateContent", 200, stream, 6)).toBeInstanceOf(AnswerTap);
  });

  it("taps a Responses answer for a sender only where its receiver reads edits of version 6 (Python's SINCE)", () => {
    // a receiver of version 5 keeps no Responses answer: a dictionary of one would be refused every turn
    expect(tapFor("/v1/responses", 200, stream, 5)).toBeNull();
    expect(tapFor("/v1/responses", 200, stream, 6)).toBeInstanceOf(AnswerTap);
    expect(tapFor("/v1/responses", 200, stream)).toBeInstanceOf(AnswerTap); // a receiver's own
    expect(tapFor("/v1/messages", 200, stream, 3)).toBeInstanceOf(AnswerTap);
    expect(tapFor("/v1/chat/completions", 200, stream, 5)).toBeInstanceOf(AnswerTap);
  });

  it("taps OpenAI Responses streams", () => {
    expect(tapFor("/v1/responses", 200, stream)).not.toBeNull();
    expect(tapFor("/v1/responses", 200, [["content-type", "application/json"]])).toBeNull();
  });
});

describe("answerId", () => {
  it("is Python's answer_id: SHA-256 hex, cut", async () => {
    expect(await answerId(bytes("toolref"))).toBe("2bcd25d4a908b46a");
    expect(await answerId(bytes(ANTHROPIC_ANSWER))).toBe("1cb96acf8e925eb4");
    expect((await answerId(new Uint8Array())).length).toBe(ID_LENGTH);
  });
});

// The stream's edges (review: answer tap edges): the same streams and answer bytes as
// tests/unit/edits/test_answer.py's EDGE_CASES, so relay or SDK and gateway make the same bytes.
describe("AnswerTap: the stream's edges, as Python reads them, at every cut", () => {
  const CHAT_EDGE =
    'data: {"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,' +
    '"id":"call_1","type":"function","function":{"name":"run","arguments":""}}]}}]}\n\n' +
    'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":' +
    '{"arguments":"{\\"a\\": 1}"}}]}}]}\n\n' +
    "data: [DONE]\n\n";
  const CHAT_EDGE_ANSWER =
    '{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",' +
    '"function":{"name":"run","arguments":"{\\"a\\": 1}"}}]}\n{"a": 1}';
  const ANTHROPIC_EDGE =
    "event: content_block_start\r" +
    'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\r\r' +
    "event: content_block_delta\r" +
    'data: {"type":"content_block_delta","index":0,\r\n' +
    'data: "delta":{"type":"text_delta","text":"h\\u00e9"}}\n\r' +
    'data: {"type":"message_stop"}\r\n\r\n';
  const ANTHROPIC_EDGE_ANSWER = '{"role":"assistant","content":[{"type":"text","text":"hé"}]}';
  const BOM = "\ufeff"; // EF BB BF once encoded
  const RUNS = "\n\r\n\r\r: keep-alive\r\n:\n\n"; // blank and comment lines, stepped over unread
  const ANTHROPIC_RUNS =
    RUNS +
    ANTHROPIC_EDGE.replace('"index":0,\r\n', '"index":0,\r\n: within an event\revent: x\n').replace(
      'data: {"type":"message_stop"}',
      RUNS + 'data: {"type":"message_stop"}',
    );
  const cases: [string, string, string, string][] = [
    ["a BOM before the first event", "openai-chat", BOM + CHAT_EDGE, CHAT_EDGE_ANSWER],
    ["CR-only line ends", "openai-chat", CHAT_EDGE.replaceAll("\n", "\r"), CHAT_EDGE_ANSWER],
    ["a BOM and CRLF", "openai-chat", BOM + CHAT_EDGE.replaceAll("\n", "\r\n"), CHAT_EDGE_ANSWER],
    ["CR, LF, CRLF and LF CR mixed", "anthropic", ANTHROPIC_EDGE, ANTHROPIC_EDGE_ANSWER],
    ["a BOM and mixed line ends", "anthropic", BOM + ANTHROPIC_EDGE, ANTHROPIC_EDGE_ANSWER],
    ["blank and comment runs", "anthropic", ANTHROPIC_RUNS, ANTHROPIC_EDGE_ANSWER],
    ["a BOM, blank and comment runs", "anthropic", BOM + ANTHROPIC_RUNS, ANTHROPIC_EDGE_ANSWER],
    ["blank and comment runs between chat events", "openai-chat", RUNS + CHAT_EDGE.replaceAll("\n\n", "\n" + RUNS), CHAT_EDGE_ANSWER],
  ];

  /** The answer as relay, SDK and gateway take it: when `feed` says it ended (at most once). */
  function taken(format: string, pieces: Uint8Array[]): string | null {
    const tap = new AnswerTap(format);
    const answers: (string | null)[] = [];
    for (const piece of pieces) if (tap.feed(piece)) answers.push(text(tap.answer));
    expect(answers.length).toBeLessThanOrEqual(1);
    return answers[0] ?? null;
  }

  /** `data` whole, byte by byte, and in two pieces at every byte (an empty one between). */
  function cuts(data: Uint8Array): Uint8Array[][] {
    const out = [[data], Array.from(data, (_, n) => data.subarray(n, n + 1))];
    for (let n = 0; n <= data.length; n++) out.push([data.subarray(0, n), new Uint8Array(), data.subarray(n)]);
    return out;
  }

  it.each(cases)("%s", (_, format, stream, expected) => {
    const data = bytes(stream);
    if (stream.startsWith(BOM)) expect(Array.from(data.subarray(0, 3))).toEqual([0xef, 0xbb, 0xbf]);
    for (const pieces of cuts(data)) expect([pieces.map((p) => p.length), taken(format, pieces)]).toEqual([pieces.map((p) => p.length), expected]);
  });

  it("counts only the bytes up to the end event's line against MAX_STREAM", () => {
    const chat = bytes(CHAT_EDGE);
    const data = new Uint8Array(MAX_STREAM + 10).fill(0x0a); // blank lines after the end, past the limit
    data.set(chat);
    const end = chat.length;
    for (const pieces of [[data], [data.subarray(0, end), data.subarray(end)], [data.subarray(0, end - 1), data.subarray(end - 1)]])
      expect(taken("openai-chat", pieces)).toBe(CHAT_EDGE_ANSWER);
    // the end line ended by the CR of a CRLF at the limit's last byte: read; one byte later, not
    const endLine = bytes(CHAT_EDGE.replaceAll("\n", "\r\n"));
    for (const [extra, expected] of [
      [0, CHAT_EDGE_ANSWER],
      [1, null],
    ] as const) {
      const padding = new Uint8Array(MAX_STREAM - endLine.length + 1 + extra).fill(0x2d); // a comment line
      padding[0] = 0x3a;
      padding[padding.length - 1] = 0x0a;
      const whole = new Uint8Array(padding.length + endLine.length);
      whole.set(padding);
      whole.set(endLine, padding.length);
      const at = whole.length - 1; // the last LF, past the limit
      for (const pieces of [[whole], [whole.subarray(0, at), whole.subarray(at)], [padding, endLine]])
        expect(taken("openai-chat", pieces)).toBe(expected);
    }
  });
});

// --- what a tap holds (review: answer taps' memory) ---------------------------------------------
// The same streams and give-up points as tests/unit/edits/test_answer.py ("what a tap holds"): both
// sides give up at the same event, so they still agree on every answer.
describe("AnswerTap: what a tap holds", () => {
  const sse = (data: unknown): string => `data: ${JSON.stringify(data)}\n\n`;
  const TEXT_START = sse({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } });
  const textDelta = (text: string): string => sse({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text } });

  /** The bytes of the strings and byte arrays reachable from `value` (a tap's held deltas). */
  function heldBytes(value: unknown, seen = new Set<unknown>()): number {
    if (typeof value === "string") return value.length;
    if (value === null || typeof value !== "object" || seen.has(value)) return 0;
    seen.add(value);
    if (value instanceof Uint8Array) return value.byteLength;
    let sum = 0;
    const members = value instanceof Map ? [...value.keys(), ...value.values()] : Object.values(value);
    for (const member of members) sum += heldBytes(member, seen);
    return sum;
  }

  it("gives up once what it holds can only make an answer over MAX_ANSWER, its memory dropped", () => {
    const delta = bytes(textDelta("x".repeat(1000)));
    const tap = new AnswerTap("anthropic");
    tap.feed(bytes(TEXT_START));
    for (let n = 0; n < 262; n++) tap.feed(delta);
    expect(tap.failed).toBe(false); // 262,000 bytes of text: it may yet make an answer
    tap.feed(delta);
    expect(tap.failed).toBe(true); // 263,000: it cannot
    const long = new AnswerTap("anthropic");
    long.feed(bytes(TEXT_START));
    let fed = 0;
    while (fed < MAX_STREAM - 2 * delta.length) {
      long.feed(delta);
      fed += delta.length;
    }
    expect(long.failed).toBe(true);
    expect(heldBytes(long)).toBeLessThan(64 << 10); // ~8 MiB of text held to the end before
  });

  it("counts a chat call's arguments twice, and every call", () => {
    const event = bytes(sse({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: "y".repeat(1000) } }] } }] }));
    const tap = new AnswerTap("openai-chat");
    for (let n = 0; n < 131; n++) tap.feed(event);
    expect(tap.failed).toBe(false);
    tap.feed(event);
    expect(tap.failed).toBe(true);
    const calls = new AnswerTap("openai-chat");
    for (let n = 0; n < 4444; n++) {
      expect(calls.failed).toBe(false);
      calls.feed(bytes(sse({ choices: [{ delta: { tool_calls: [{ index: n }] } }] })));
    }
    expect(calls.failed).toBe(true);
  });

  it.each([
    ["anthropic", "2a9fc8712b103d7c872967ed19999088555e7c6279990e19672632df426c2d59"],
    ["openai-chat", "37c13c731f7ee285b4f3d38b442f7da870aa98a4088156d8c1875e1279df9f4a"],
  ])("still makes a %s answer of exactly MAX_ANSWER bytes (Python's), and none of one more", (format, sha) => {
    const pieces = ['say "hi"\n', "\u0001\u00e9\u{1f600}", "\ud800", "z".repeat(1000)];
    const answer = (fill: number): Uint8Array | null => {
      const parts = [...pieces, "w".repeat(fill)];
      const stream =
        format === "anthropic"
          ? TEXT_START + parts.map(textDelta).join("") + sse({ type: "message_stop" })
          : parts.map((content) => sse({ choices: [{ delta: { content } }] })).join("") + "data: [DONE]\n\n";
      return fed(format, stream).tap.answer;
    };
    const made = answer(0) as Uint8Array;
    const full = answer(MAX_ANSWER - made.length) as Uint8Array;
    expect(full.length).toBe(MAX_ANSWER);
    expect(createHash("sha256").update(full).digest("hex")).toBe(sha);
    expect(answer(MAX_ANSWER - made.length + 1)).toBeNull();
  });

  it("counts a block that starts whole as it holds it, and gives up where Python does", () => {
    const results = [{ type: "web_search_result", url: "u", encrypted_content: "e".repeat(60_000) }];
    const block = bytes(sse({ type: "content_block_start", index: 0, content_block: { type: "web_search_tool_result", tool_use_id: "s", content: results } }));
    const at = (index: number): Uint8Array => bytes(new TextDecoder().decode(block).replace('"index":0', `"index":${index}`));
    const tap = new AnswerTap("anthropic");
    for (let index = 0; index < 4; index++) tap.feed(at(index));
    expect(tap.failed).toBe(false); // 4 blocks of 60,000 bytes: it may yet make an answer
    tap.feed(at(4));
    expect(tap.failed).toBe(true); // 5: it cannot (each counted 3 bytes before)
    const long = new AnswerTap("anthropic");
    const text = (index: number): Uint8Array => bytes(sse({ type: "content_block_start", index, content_block: { type: "text", text: "x".repeat(60_000) } }));
    for (let index = 0; index < 120; index++) long.feed(text(index));
    expect(long.failed).toBe(true);
    expect(heldBytes(long)).toBeLessThan(256 << 10); // ~7.2 MB of blocks held to the end before
  });

  it("joins a block's deltas as Python does: across a block started again, fields in Python's order", () => {
    const start = (block: unknown): string => sse({ type: "content_block_start", index: 0, content_block: block });
    const delta = (d: unknown): string => sse({ type: "content_block_delta", index: 0, delta: d });
    const stop = sse({ type: "message_stop" });
    const again = start({ type: "text", text: "" }) + textDelta("a") + start({ type: "text", text: "P" }) + textDelta("b") + stop;
    expect(text(fed("anthropic", again).tap.answer)).toBe('{"role":"assistant","content":[{"type":"text","text":"Pab"}]}');
    const order = start({ type: "thinking" }) + delta({ type: "signature_delta", signature: "s" }) + delta({ type: "thinking_delta", thinking: "t" }) + stop;
    expect(text(fed("anthropic", order).tap.answer)).toBe('{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"}]}');
  });
});

// Streams of every call shape each tap reads, and shapes it gives up on, with the answer Python
// makes of each (tests/js_answer_vectors.py, written into vectors.json): the same bytes here.
describe("AnswerTap: answer vectors (Python's bytes for every call shape)", () => {
  interface AnswerVector {
    name: string;
    format: string;
    stream: string;
    answer: string | null;
  }
  const { answers } = JSON.parse(readFileSync(new URL("./vectors.json", import.meta.url), "utf8")) as { answers: AnswerVector[] };
  it("holds the call shapes", () => {
    expect(answers.some((vector) => vector.name.includes("custom") && vector.answer !== null)).toBe(true);
  });
  for (const vector of answers) {
    it(`${vector.name} (fed whole, by 5 bytes)`, () => {
      const data = Buffer.from(vector.stream, "hex");
      for (const step of [Infinity, 5]) expect(hex(fed(vector.format, new Uint8Array(data), step).tap.answer)).toBe(vector.answer);
    });
  }
});

// Replicas rolled one by one (or one rolled back): the sender learnt 6, but this answer came
// from a receiver saying 5 (`Toolref-Edits`), which kept none of a Responses answer: tapped,
// the next turn would name an answer no one holds (a dictionary-mismatch and a resend, every turn).
describe("readAnswer: the answer's own Toolref-Edits", () => {
  const { answers } = JSON.parse(readFileSync(new URL("./vectors.json", import.meta.url), "utf8")) as {
    answers: { format: string; stream: string; answer: string | null }[];
  };
  const whole = answers.find((vector) => vector.format === "openai-responses" && vector.answer !== null)!;
  for (const [said, tapped] of [["5", false], ["6", true], [null, true]] as const) {
    it(`a sender of 6 taps a Responses answer saying ${String(said)}: ${tapped}`, async () => {
      const headers = new Headers({ "content-type": "text/event-stream" });
      if (said !== null) headers.set("toolref-edits", said);
      const told: (Uint8Array | null)[] = [];
      const response = new Response(new Uint8Array(Buffer.from(whole.stream, "hex")), { status: 200, headers });
      await readAnswer(response, "/v1/responses", (answer) => told.push(answer), 6).arrayBuffer();
      expect(told.length > 0).toBe(tapped);
    });
  }
});
