// A page on one origin sends a conversation to chat backends on others, in Debian's Chromium
// (playwright-core): once with the page's own fetch, once with toolrefFetch. The SDK is
// bundled from client_sdk/js/src with esbuild (the web-chat demo's node_modules, --modules),
// so the page runs the source under test. Besides the Python backends the plan names, it
// serves `withToolRef` backends (Node) behind the CORS settings docs/js.md gives for Hono
// and Express. tests/browser/test_cross_origin.py runs it.
//
//   node page.mjs --plan plan.json --out record.json --work DIR --modules examples/web-chat
//
// plan.json: {pagePort, registry, turns, backends: {name: chat URL},
//   jsBackends: {name: {origin, allowHeaders, exposeHeaders}}}

import { readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { createRequire } from "node:module";
import { join, resolve } from "node:path";
import { Readable } from "node:stream";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: {
    plan: { type: "string" }, out: { type: "string" }, work: { type: "string" }, modules: { type: "string" },
    chromium: { type: "string", default: process.env.CHROMIUM ?? "/usr/bin/chromium" },
  },
});
if (!values.plan || !values.out || !values.work || !values.modules) {
  console.error("usage: page.mjs --plan FILE --out FILE --work DIR --modules DIR");
  process.exit(2);
}
const modules = createRequire(join(resolve(values.modules), "package.json"));
const { chromium } = modules("playwright-core");
const esbuild = modules("esbuild");
const plan = JSON.parse(readFileSync(values.plan, "utf8"));
const entry = resolve(import.meta.dirname, "../../../client_sdk/js/src/index.ts");
const sdk = join(values.work, "sdk.js");
await esbuild.build({ entryPoints: [entry], bundle: true, format: "esm", platform: "browser", outfile: sdk, logLevel: "warning" });
const nodeSdk = join(values.work, "sdk-node.mjs");
await esbuild.build({ entryPoints: [entry], bundle: true, format: "esm", platform: "node", outfile: nodeSdk, logLevel: "warning" });
const { withToolRef } = await import(pathToFileURL(nodeSdk).href);

/** Serve `handle` (a Request => Response function) on 127.0.0.1; its base URL. */
async function serve(handle, port = 0) {
  const server = createServer(async (req, res) => {
    const body = req.method === "GET" || req.method === "HEAD" || req.method === "OPTIONS" ? undefined : Readable.toWeb(req);
    const request = new Request(`http://${req.headers.host}${req.url}`, { method: req.method, headers: req.headers, body, duplex: "half" });
    const answer = await handle(request);
    res.writeHead(answer.status, [...answer.headers]);
    if (answer.body) for await (const chunk of answer.body) res.write(chunk);
    res.end();
  });
  await new Promise((done) => server.listen(port, "127.0.0.1", done));
  servers.push(server);
  return `http://127.0.0.1:${server.address().port}`;
}
const servers = [];

const PAGE = `<!doctype html><title>cross-origin</title><script type="module">import * as toolref from "/sdk.js"; window.toolref = toolref;</script>`;
const page = await serve(async (request) => {
  const path = new URL(request.url).pathname;
  if (path === "/sdk.js") return new Response(readFileSync(sdk), { headers: { "content-type": "text/javascript" } });
  if (path === "/") return new Response(PAGE, { headers: { "content-type": "text/html" } });
  return new Response("not here", { status: 404 });
}, plan.pagePort);

/** CORS as Hono's `cors({ origin, allowMethods, allowHeaders, exposeHeaders })` (and Express's
 * `cors()`) answer it: a preflight naming the allowed headers, every answer the exposed ones. */
function withCors(handle, { origin, allowHeaders, exposeHeaders }) {
  return async (request) => {
    if (request.method === "OPTIONS") {
      return new Response(null, { status: 204, headers: {
        "access-control-allow-origin": origin, "access-control-allow-methods": "POST",
        "access-control-allow-headers": allowHeaders.join(","), vary: "Origin",
      } });
    }
    const answer = await handle(request);
    const headers = new Headers(answer.headers);
    headers.set("access-control-allow-origin", origin);
    headers.set("vary", "Origin");
    if (exposeHeaders.length) headers.set("access-control-expose-headers", exposeHeaders.join(","));
    return new Response(answer.body, { status: answer.status, statusText: answer.statusText, headers });
  };
}

const chat = async (request) => {
  const { messages } = await request.json();
  return Response.json({ messages: messages.length });
};
const backends = { ...plan.backends };
for (const [name, cors] of Object.entries(plan.jsBackends ?? {})) {
  backends[name] = (await serve(withCors(withToolRef(chat, { registry: plan.registry }), cors))) + "/api/chat";
}

const browser = await chromium.launch({ executablePath: values.chromium, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
const record = { page, backends, runs: {} };
try {
  for (const [name, url] of Object.entries(backends)) {
    record.runs[name] = {};
    for (const mode of ["plain", "toolref"]) {
      const tab = await browser.newPage();
      const seen = { requests: [], failed: [], console: [], pageErrors: [] };
      tab.on("request", (r) => {
        if (r.url() === url) seen.requests.push({ method: r.method(), headers: r.headers(), bytes: r.postDataBuffer()?.length ?? 0 });
      });
      tab.on("requestfailed", (r) => seen.failed.push(`${r.method()} ${r.url()}: ${r.failure()?.errorText}`));
      tab.on("console", (m) => { if (m.type() === "error" || m.type() === "warning") seen.console.push(m.text()); });
      tab.on("pageerror", (e) => seen.pageErrors.push(String(e)));
      await tab.goto(page + "/", { waitUntil: "load" });
      await tab.waitForFunction(() => window.toolref !== undefined, null, { timeout: 10000 });
      const turns = await tab.evaluate(async ({ url, mode, turns }) => {
        const infos = [];
        const send = mode === "plain" ? fetch : window.toolref.toolrefFetch({ onExchange: (info) => infos.push(info) });
        const messages = [];
        const out = [];
        for (let turn = 1; turn <= turns; turn++) {
          messages.push({ role: "user", content: `turn ${turn}: read the file` });
          const row = { turn };
          try {
            const answer = await send(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ messages }) });
            row.status = answer.status;
            row.answer = await answer.text();
            row.headers = [...answer.headers.keys()].filter((name) => name.startsWith("toolref-")).sort();
          } catch (error) {
            row.error = String(error);
          }
          row.info = infos[turn - 1] ?? null;
          out.push(row);
          messages.push({ role: "assistant", content: `answer ${turn}`, tool: { name: "read", result: `line ${turn} of the file\n`.repeat(300) } });
        }
        return out;
      }, { url, mode, turns: plan.turns });
      record.runs[name][mode] = { turns, ...seen };
      await tab.close();
    }
  }
} finally {
  await browser.close();
  for (const server of servers) server.close();
  writeFileSync(values.out, JSON.stringify(record, null, 2));
}
