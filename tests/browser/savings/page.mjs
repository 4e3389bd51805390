// Reads the service's savings page in Debian's Chromium (playwright-core), as an operator
// would: the page asks for the metrics key, a wrong one is refused, the right one shows the
// tables and charts. Writes what the page showed to --out: each window's rows and bars, and
// the per-minute charts for each window and each choice of tenant and upstream (the exact
// numbers each mark holds in data-value, its size, the labels and ticks drawn); and a
// screenshot to --shot. tests/browser/test_savings_page.py runs it.
//
//   node page.mjs --url http://127.0.0.1:8750 --key KEY --wrong WRONG --out page.json --shot page.png

import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";

const { values } = parseArgs({
  options: {
    url: { type: "string" },
    key: { type: "string" },
    wrong: { type: "string" },
    out: { type: "string" },
    shot: { type: "string" },
    chromium: { type: "string", default: process.env.CHROMIUM ?? "/usr/bin/chromium" },
  },
});
if (!values.url || !values.key || !values.wrong || !values.out || !values.shot) {
  console.error("usage: page.mjs --url URL --key KEY --wrong KEY --out FILE --shot FILE.png");
  process.exit(2);
}

const browser = await chromium.launch({
  executablePath: values.chromium,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const record = { consoleErrors: [], pageErrors: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 640 } });
  page.on("console", (m) => { if (m.type() === "error") record.consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => record.pageErrors.push(String(e)));
  const answer = await page.goto(values.url + "/", { waitUntil: "load" });
  record.landedOn = new URL(page.url()).pathname;
  record.csp = (await answer.allHeaders())["content-security-policy"] ?? null;
  await page.waitForSelector("#ask:not([hidden])", { timeout: 10000 });
  record.askedFirst = true;
  record.askText = (await page.textContent("#ask-text")).replace(/\s+/g, " ").trim();
  await page.fill("#key", values.wrong);
  await page.press("#key", "Enter");
  await page.waitForSelector("#refused:not([hidden])", { timeout: 10000 });
  record.refused = await page.textContent("#refused");
  await page.fill("#key", values.key);
  await page.press("#key", "Enter");
  await page.waitForSelector("body[data-loaded=true]", { timeout: 10000 });
  record.windows = await page.evaluate(() => {
    const readBars = (svg) => svg && {
      ...svg.dataset,
      ticks: [...svg.querySelectorAll("text.tick")].map((t) => t.textContent),
      legend: [...svg.querySelectorAll("text.legend")].map((t) => t.textContent),
      marks: [...svg.querySelectorAll("rect[data-kind]")].map((r) => ({
        ...r.dataset, value: Number(r.dataset.value), width: Number(r.getAttribute("width")),
      })),
      labels: [...svg.querySelectorAll("text.value")].map((t) => ({ ...t.dataset, text: t.textContent })),
    };
    return [...document.querySelectorAll("section[data-window]")].map((section) => ({
      name: section.dataset.window,
      title: section.querySelector("h2").textContent,
      rows: [...section.querySelectorAll("tbody tr:not(.total)")].map((tr) => {
        const v = [...tr.querySelectorAll("td[data-value]")].map((td) => td.dataset.value);
        return {
          tenant: tr.dataset.tenant, upstream: tr.dataset.upstream,
          requests: Number(v[0]), resends: Number(v[1]), rawBytes: Number(v[2]),
          wireBytes: Number(v[3]), saved: Number(v[4]),
          shown: [...tr.querySelectorAll("td")].map((td) => td.textContent),
        };
      }),
      bars: readBars(section.querySelector("svg.bars")),
    }));
  });
  // Each window of the view over time, for all tenants and upstreams and for each one.
  const choices = await page.$$eval("#series option", (options) =>
    options.map((o) => ({ value: o.value, label: o.textContent })));
  record.overTime = [];
  for (const span of ["hour", "day"]) {
    for (const choice of choices) {
      await page.selectOption("#span", span);
      await page.selectOption("#series", choice.value);
      record.overTime.push({
        span, choice: choice.label,
        summary: await page.textContent("#time-summary"),
        panels: await page.$$eval("#time svg.chart", (panels) => panels.map((svg) => ({
          ...svg.dataset,
          title: svg.querySelector("title").textContent,
          ticks: [...svg.querySelectorAll("text.tick")].map((t) => t.textContent),
          axis: [...svg.querySelectorAll("text.axis")].map((t) => t.textContent),
          marks: [...svg.querySelectorAll("rect[data-kind]")].map((r) => ({
            kind: r.dataset.kind, minute: Number(r.dataset.minute), value: Number(r.dataset.value),
            height: Number(r.getAttribute("height")), tip: r.querySelector("title").textContent,
          })),
        }))),
      });
    }
  }
  await page.selectOption("#span", "hour");
  await page.selectOption("#series", choices[0].value);
  record.keyStored = await page.evaluate(() => sessionStorage.getItem("toolref-metrics-key") !== null);
  await page.screenshot({ path: values.shot, fullPage: true });
} finally {
  await browser.close();
  writeFileSync(values.out, JSON.stringify(record, null, 2));
}
