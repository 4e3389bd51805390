// A scripted LLM provider on a real local socket (node:http): Chat Completions, Responses
// and Messages, each streamed (server-sent events, as the official SDKs parse them) or not.
// It asks for one tool call when the conversation ends with the user's question, and
// answers in text once the tool's result is there. It keeps every body it received, as the
// gateway forwarded it, so a test can compare them with what the SDK built.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";

export interface Received {
  readonly path: string;
  readonly body: Record<string, unknown>;
  /** The body's exact text, and the request's headers, as the gateway forwarded them. */
  readonly raw: string;
  readonly headers: Record<string, string | string[] | undefined>;
}

type Message = Record<string, unknown>;

function lastIsQuestion(path: string, body: Record<string, unknown>): boolean {
  const list = (path.endsWith("/responses") ? body["input"] : body["messages"]) as Message[];
  const last = list.at(-1)!;
  if (path.endsWith("/responses")) return last["role"] === "user";
  if (path.endsWith("/messages")) return typeof last["content"] === "string";
  return last["role"] === "user";
}

/** Milliseconds between two events of a stream (0: all at once), and when the last was written. */
export const pacing = { gapMs: 0, lastWritten: 0 };

function sse(response: ServerResponse, events: [string | null, unknown][], done = false): void {
  response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  const lines = events.map(([name, data]) => (name ? `event: ${name}\n` : "") + `data: ${JSON.stringify(data)}\n\n`);
  if (done) lines.push("data: [DONE]\n\n");
  const write = (index: number): void => {
    if (index === lines.length - 1) {
      pacing.lastWritten = performance.now();
      response.end(lines[index]!);
      return;
    }
    response.write(lines[index]!);
    if (pacing.gapMs > 0) setTimeout(() => write(index + 1), pacing.gapMs);
    else write(index + 1);
  };
  write(0);
}

function json(response: ServerResponse, value: unknown): void {
  response.writeHead(200, { "content-type": "application/json" });
  response.end(JSON.stringify(value));
}

const usage = { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 };

function chat(response: ServerResponse, body: Record<string, unknown>, call: boolean, turn: number): void {
  const message = call
    ? { role: "assistant", content: null, tool_calls: [{ id: `call_${turn}`, type: "function", function: { name: "read_file", arguments: JSON.stringify({ path: `src/m${turn}.py` }) } }] }
    : { role: "assistant", content: `Read it (turn ${turn}).` };
  const finish = call ? "tool_calls" : "stop";
  const base = { id: `chatcmpl-${turn}`, created: 1, model: String(body["model"]) };
  if (body["stream"] !== true) {
    json(response, { ...base, object: "chat.completion", choices: [{ index: 0, message, finish_reason: finish, logprobs: null }], usage });
    return;
  }
  const chunk = (delta: unknown, finish_reason: string | null) => ({ ...base, object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason, logprobs: null }] });
  const deltas: unknown[] = call
    ? [{ role: "assistant", content: null, tool_calls: [{ index: 0, ...message.tool_calls![0], function: { name: "read_file", arguments: "" } }] }, { tool_calls: [{ index: 0, function: { arguments: message.tool_calls![0]!.function.arguments } }] }]
    : [{ role: "assistant", content: "" }, { content: message.content }];
  sse(response, [...deltas.map((delta): [null, unknown] => [null, chunk(delta, null)]), [null, chunk({}, finish)]], true);
}

function responses(response: ServerResponse, body: Record<string, unknown>, call: boolean, turn: number): void {
  const item = call
    ? { type: "function_call", id: `fc_${turn}`, call_id: `call_${turn}`, name: "read_file", arguments: JSON.stringify({ path: `src/m${turn}.py` }), status: "completed" }
    : { type: "message", id: `msg_${turn}`, role: "assistant", status: "completed", content: [{ type: "output_text", text: `Read it (turn ${turn}).`, annotations: [] }] };
  const done = {
    id: `resp_${turn}`,
    object: "response",
    created_at: 1,
    model: String(body["model"]),
    status: "completed",
    output: [item],
    parallel_tool_calls: true,
    tool_choice: "auto",
    tools: [],
    usage: { input_tokens: 1, output_tokens: 1, total_tokens: 2, input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } },
  };
  if (body["stream"] !== true) {
    json(response, done);
    return;
  }
  const events: [string, unknown][] = [
    ["response.created", { type: "response.created", sequence_number: 0, response: { ...done, status: "in_progress", output: [] } }],
    ["response.output_item.added", { type: "response.output_item.added", sequence_number: 1, output_index: 0, item }],
    ["response.output_item.done", { type: "response.output_item.done", sequence_number: 2, output_index: 0, item }],
    ["response.completed", { type: "response.completed", sequence_number: 3, response: done }],
  ];
  sse(response, events);
}

function messages(response: ServerResponse, body: Record<string, unknown>, call: boolean, turn: number): void {
  const block = call
    ? { type: "tool_use", id: `toolu_${turn}`, name: "read_file", input: { path: `src/m${turn}.py` } }
    : { type: "text", text: `Read it (turn ${turn}).` };
  const stop = call ? "tool_use" : "end_turn";
  const message = { id: `msg_${turn}`, type: "message", role: "assistant", model: String(body["model"]), stop_sequence: null, usage: { input_tokens: 1, output_tokens: 1 } };
  if (body["stream"] !== true) {
    json(response, { ...message, content: [block], stop_reason: stop });
    return;
  }
  const start = call ? { ...block, input: {} } : { type: "text", text: "" };
  const delta = call
    ? { type: "input_json_delta", partial_json: JSON.stringify((block as { input: unknown }).input) }
    : { type: "text_delta", text: (block as { text: string }).text };
  sse(response, [
    ["message_start", { type: "message_start", message: { ...message, content: [], stop_reason: null } }],
    ["content_block_start", { type: "content_block_start", index: 0, content_block: start }],
    ["content_block_delta", { type: "content_block_delta", index: 0, delta }],
    ["content_block_stop", { type: "content_block_stop", index: 0 }],
    ["message_delta", { type: "message_delta", delta: { stop_reason: stop, stop_sequence: null }, usage: { output_tokens: 1 } }],
    ["message_stop", { type: "message_stop" }],
  ]);
}

export class Provider {
  readonly received: Received[] = [];
  private server: Server | null = null;
  url = "";

  async start(): Promise<void> {
    const server = createServer((request, response) => void this.handle(request, response));
    await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
    const address = server.address();
    this.url = `http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`;
    this.server = server;
  }

  async stop(): Promise<void> {
    const server = this.server;
    this.server = null;
    if (server !== null) {
      server.closeAllConnections();
      await new Promise((done) => server.close(done));
    }
  }

  private async handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const path = new URL(request.url ?? "/", "http://x").pathname;
    const raw = Buffer.concat(chunks).toString("utf8");
    const body = JSON.parse(raw) as Record<string, unknown>;
    this.received.push({ path, body, raw, headers: request.headers });
    const call = lastIsQuestion(path, body);
    const turn = this.received.length;
    if (path.endsWith("/chat/completions")) chat(response, body, call, turn);
    else if (path.endsWith("/responses")) responses(response, body, call, turn);
    else if (path.endsWith("/messages")) messages(response, body, call, turn);
    else {
      response.writeHead(404);
      response.end();
    }
  }
}
