// Drives the demo page in Debian's Chromium (playwright-core) through a scripted conversation
// and reports what the browser saw: tests/browser/test_web_chat.py and loadtests/web_chat.py
// run it against a backend and registry they started.
//
//   node test/conversation.mjs --url http://127.0.0.1:8770/ --turns 30 --out run.json [--pause 15,16]
//
// Every request to /api/chat is read from the browser's own request events (postDataBuffer:
// the bytes the request put on the wire, whatever the page's code says it sent). After each
// turn it keeps the messages useChat holds (`window.chat.messages`, as JSON text) and the
// page's error, if any. Before each turn named in --pause it prints {"event":"pause","turn":n}
// and waits for a line on stdin, so the caller can restart the registry there.
// Progress is one JSON line per turn on stdout; the whole record goes to --out.

import { writeFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";

const { values } = parseArgs({
  options: {
    url: { type: "string" },
    turns: { type: "string", default: "30" },
    out: { type: "string" },
    pause: { type: "string", default: "" },
    chromium: { type: "string", default: process.env.CHROMIUM ?? "/usr/bin/chromium" },
    timeout: { type: "string", default: "30000" },
  },
});
if (!values.url || !values.out) {
  console.error("usage: conversation.mjs --url URL --out FILE [--turns N] [--pause 15,16]");
  process.exit(2);
}
const turns = Number(values.turns);
const pauses = new Set(values.pause.split(",").filter(Boolean).map(Number));
const timeout = Number(values.timeout);

const WORDS = ["cache", "history", "parser", "registry", "session", "digest", "stream"];
const PACKAGES = ["core", "api", "store", "wire", "util"];

// The user's text for turn n: commands the scripted model runs, and free questions.
export function prompt(n) {
  const word = WORDS[n % WORDS.length];
  const pkg = PACKAGES[n % PACKAGES.length];
  if (n % 3 === 0) return `read src/${pkg}/${word}.py`;
  if (n % 3 === 1) return `What does the ${word} code in ${pkg} do?`;
  return `search ${word}_${n} and list src/${pkg}`;
}

const lines = createInterface({ input: process.stdin });
const stdinLines = lines[Symbol.asyncIterator]();
const say = (record) => process.stdout.write(JSON.stringify(record) + "\n");

const browser = await chromium.launch({
  executablePath: values.chromium,
  headless: true,
  args: [
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-features=MediaRouter,OptimizationHints,Translate",
  ],
});
const record = { turns: [], pageErrors: [], consoleErrors: [], requests: [] };
let turn = 0;
try {
  const page = await browser.newPage();
  page.on("pageerror", (error) => record.pageErrors.push(String(error)));
  page.on("console", (message) => {
    if (message.type() === "error") record.consoleErrors.push(message.text());
  });
  const pending = [];
  page.on("request", (request) => {
    if (request.method() !== "POST" || !new URL(request.url()).pathname.endsWith("/api/chat")) return;
    const body = request.postDataBuffer();
    const headers = request.headers();
    const entry = {
      turn,
      wireBytes: body ? body.length : 0,
      contentType: headers["content-type"] ?? null,
      offer: headers["toolref-edits"] ?? null,
      status: null,
      streamedMs: null,
    };
    record.requests.push(entry);
    pending.push(
      request
        .response()
        .then(async (response) => {
          entry.status = response ? response.status() : null;
          const answer = response ? await response.allHeaders() : {};
          entry.answerEdits = answer["toolref-edits"] ?? null;
          entry.answerHistory = answer["toolref-history"] ?? null;
          if (response) await response.finished();
          const timing = request.timing(); // ms from the request's start
          if (timing.responseEnd > 0 && timing.responseStart > 0)
            entry.streamedMs = timing.responseEnd - timing.responseStart;
        })
        .catch((error) => (entry.failure = String(error))),
    );
  });
  await page.goto(values.url, { waitUntil: "networkidle" });
  record.ai = await page.evaluate(() => window.chat?.ai ?? null); // the AI SDK the page was built with
  const input = page.getByLabel("message");
  for (turn = 1; turn <= turns; turn++) {
    if (pauses.has(turn)) {
      say({ event: "pause", turn });
      const line = await stdinLines.next();
      if (line.done) throw new Error(`stdin closed while paused before turn ${turn}`);
    }
    const text = prompt(turn);
    await input.fill(text);
    await page.getByRole("button", { name: "Send" }).click();
    // Partial answers seen while streaming: the text grows in front of the user.
    let partials = 0;
    const started = Date.now();
    for (;;) {
      const state = await page.evaluate(() => {
        const chat = window.chat;
        if (!chat) return null;
        const last = chat.messages[chat.messages.length - 1];
        const said = last && last.role === "assistant"
          ? last.parts.filter((p) => p.type === "text").map((p) => p.text).join("")
          : "";
        return { status: chat.status, count: chat.messages.length, said, error: chat.error };
      });
      if (state && state.status === "streaming" && state.said.length > 0) partials += 1;
      if (state && state.count === 2 * turn && (state.status === "ready" || state.status === "error")) break;
      if (state && state.error) break;
      if (Date.now() - started > timeout) throw new Error(`turn ${turn} did not finish in ${timeout} ms`);
      await new Promise((resolve) => setTimeout(resolve, 15));
    }
    await Promise.all(pending.splice(0));
    const page_ = await page.evaluate(() => ({
      messages: JSON.stringify(window.chat.messages),
      status: window.chat.status,
      error: window.chat.error,
      shownError: document.querySelector(".error")?.textContent ?? null,
      exchanges: window.chat.turns,
    }));
    const requests = record.requests.filter((r) => r.turn === turn);
    const summary = {
      turn,
      prompt: text,
      status: page_.status,
      error: page_.error,
      shownError: page_.shownError,
      partials,
      requests: requests.length,
      wireBytes: requests.reduce((sum, r) => sum + r.wireBytes, 0),
      seconds: (Date.now() - started) / 1000,
    };
    say({ event: "turn", ...summary });
    record.turns.push({ ...summary, messages: page_.messages });
    record.pageTurns = page_.exchanges; // the page's own table (the SDK's onExchange counts)
    if (page_.error || page_.shownError) break;
  }
  await page.screenshot({ path: values.out.replace(/\.json$/, "") + ".png", fullPage: false });
} finally {
  writeFileSync(values.out, JSON.stringify(record));
  await browser.close();
  lines.close();
}
say({ event: "done", turns: record.turns.length });
