// The savings page's charts, drawn as inline SVG from numbers: no library, no request for
// anything (the page works offline). Every axis starts at 0 and is linear; every tick and
// every bar of a tenant and upstream says its value with its unit; each mark carries the
// exact number it stands for in data-value, which tests/browser/test_savings_page.py reads.
// savings.js draws the page with these; the service joins both into the page's one script.

const SVG_NS = "http://www.w3.org/2000/svg";
const WIDTH = 1000;  // viewBox units; the SVG is as wide as its section

// Sizes in binary units, as the relay and the demo print them (1 KiB = 1024 bytes).
const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

function bytes(n) {
  let i = 0, v = n;
  while (Math.abs(v) >= 1024 && i < UNITS.length - 1) { v /= 1024; i += 1; }
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 2 : 1)) + " " + UNITS[i];
}

// A tick's label: a round number in its unit (`250 KiB`, `1.5 MiB`).
function shortBytes(n) {
  let i = 0, v = n;
  while (Math.abs(v) >= 1024 && i < UNITS.length - 1) { v /= 1024; i += 1; }
  return String(Number(v.toPrecision(3))) + " " + UNITS[i];
}

// `ticks` of a byte axis, in whole steps of the largest binary unit that leaves at least
// `wanted` of them (so a tick reads `250 KiB`, not `244.1 KiB`).
function byteTicks(max, wanted) {
  let unit = 1;
  while (max / (unit * 1024) >= wanted && unit < 1024 ** 4) unit *= 1024;
  return ticks(max / unit, wanted).map((t) => t * unit);
}

function count(n) { return n.toLocaleString("en"); }

function el(tag, attrs, parent) {
  const made = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs || {})) made.setAttribute(name, String(value));
  if (parent) parent.appendChild(made);
  return made;
}

function label(parent, x, y, content, attrs) {
  const made = el("text", { x, y, ...attrs }, parent);
  made.textContent = content;
  return made;
}

// 0 up to a round maximum of at least `max`, in about `wanted` whole steps of 1, 2, 2.5 or 5
// x 10^k (2.5 from 25 up: bytes and requests are whole numbers).
function ticks(max, wanted) {
  const top = max > 0 ? max : 1;
  const rough = top / wanted;
  const power = Math.pow(10, Math.floor(Math.log10(rough)));
  const factors = power < 10 ? [1, 2, 5, 10] : [1, 2, 2.5, 5, 10];
  const step = Math.max(1, Math.round(power * factors.find((f) => power * f >= rough)));
  const steps = Math.ceil(top / step);
  return Array.from({ length: steps + 1 }, (_, i) => i * step);
}

function swatch(svg, x, y, cls, text) {
  el("rect", { x, y: y - 9, width: 12, height: 10, class: cls }, svg);
  return label(svg, x + 17, y, text, { class: "legend" });
}

// Per tenant and upstream of one window, a bar each for raw and wire bytes on one linear axis
// from 0; each bar labelled with its value. rows: [{tenant, upstream, rawBytes, wireBytes}].
function bytesBars(rows) {
  const left = 200, right = 96, top = 30, bar = 14, gap = 4, group = 2 * bar + gap + 14;
  const plot = WIDTH - left - right;
  const height = top + rows.length * group + 34;
  const svg = el("svg", { viewBox: `0 0 ${WIDTH} ${height}`, class: "chart bars", role: "img" });
  el("title", {}, svg).textContent = "Request bytes per tenant and upstream, raw and on the wire";
  const axis = byteTicks(Math.max(0, ...rows.flatMap((r) => [r.rawBytes, r.wireBytes])), 5);
  const max = axis[axis.length - 1];
  svg.dataset.max = String(max);
  svg.dataset.plotWidth = String(plot);
  const x = (v) => left + (plot * v) / max;
  swatch(svg, left, 16, "raw", "raw: as forwarded upstream");
  swatch(svg, left + 220, 16, "wire", "wire: as received (refs, histories, zstd)");
  const bottom = top + rows.length * group;
  for (const v of axis) {
    el("line", { x1: x(v), x2: x(v), y1: top - 4, y2: bottom, class: "grid" }, svg);
    label(svg, x(v), bottom + 16, shortBytes(v), { class: "tick", "text-anchor": "middle" });
  }
  label(svg, left + plot / 2, bottom + 31, "request bytes", { class: "axis", "text-anchor": "middle" });
  rows.forEach((r, i) => {
    const y = top + i * group;
    label(svg, left - 10, y + bar + gap / 2 + 4, r.tenant + " · " + r.upstream,
      { class: "name", "text-anchor": "end" });
    [["raw", r.rawBytes], ["wire", r.wireBytes]].forEach(([kind, value], k) => {
      const y0 = y + k * (bar + gap);
      const mark = el("rect", { x: left, y: y0, width: x(value) - left, height: bar, class: kind }, svg);
      Object.assign(mark.dataset, { kind, value: String(value), tenant: r.tenant, upstream: r.upstream });
      const shown = label(svg, x(value) + 6, y0 + bar - 3, bytes(value), { class: "value" });
      Object.assign(shown.dataset, { kind, tenant: r.tenant, upstream: r.upstream });
    });
  });
  return svg;
}

function clock(minute) { return new Date(minute * 60000).toISOString().slice(11, 16); }

// One panel of a per-minute chart: minutes `from`..`to` (inclusive) along x, `kinds` of
// each point as bars from 0 (the larger drawn first, so both show), a linear y axis.
// points: [{minute, rawBytes, wireBytes, requests}], minutes with traffic only.
function minutesPanel(points, from, to, kinds, format, title, height) {
  const left = 76, right = 16, top = kinds.length > 1 ? 28 : 12, bottom = 34;
  const plot = WIDTH - left - right, tall = height - top - bottom;
  const svg = el("svg", { viewBox: `0 0 ${WIDTH} ${height}`, class: "chart minutes", role: "img" });
  el("title", {}, svg).textContent = title;
  const span = to - from + 1, slot = plot / span;
  const axisOf = format === shortBytes ? byteTicks : ticks;
  const axis = axisOf(Math.max(0, ...points.flatMap((p) => kinds.map((k) => p[k.field]))), 4);
  const max = axis[axis.length - 1];
  Object.assign(svg.dataset, { from: String(from), to: String(to), max: String(max), plotHeight: String(tall) });
  const y = (v) => top + tall - (tall * v) / max;
  for (const v of axis) {
    el("line", { x1: left, x2: left + plot, y1: y(v), y2: y(v), class: "grid" }, svg);
    label(svg, left - 8, y(v) + 4, format(v), { class: "tick", "text-anchor": "end" });
  }
  const every = span <= 60 ? 10 : span <= 360 ? 60 : 180;  // minutes between time ticks
  for (let m = from; m <= to; m += 1) {
    if (m % every !== 0) continue;
    const x = left + (m - from + 0.5) * slot;
    el("line", { x1: x, x2: x, y1: top + tall, y2: top + tall + 4, class: "axisline" }, svg);
    label(svg, x, top + tall + 17, clock(m), { class: "tick", "text-anchor": "middle" });
  }
  label(svg, left + plot / 2, height - 3, "minute (UTC)", { class: "axis", "text-anchor": "middle" });
  if (kinds.length > 1) kinds.forEach((kind, i) => swatch(svg, left + 10 + 220 * i, 14, kind.name, kind.legend));
  el("line", { x1: left, x2: left + plot, y1: top + tall, y2: top + tall, class: "axisline" }, svg);
  const width = Math.max(1.5, slot * 0.8);
  for (const p of points) {
    if (p.minute < from || p.minute > to) continue;
    const x = left + (p.minute - from + 0.5) * slot - width / 2;
    const drawn = [...kinds].sort((a, b) => p[b.field] - p[a.field]);
    for (const kind of drawn) {
      const value = p[kind.field];
      if (value <= 0) continue;  // nothing to draw
      const mark = el("rect", { x, y: y(value), width, height: top + tall - y(value), class: kind.name }, svg);
      Object.assign(mark.dataset, { kind: kind.name, minute: String(p.minute), value: String(value) });
      el("title", {}, mark).textContent = clock(p.minute) + " UTC: " + kind.name + " " + format(value);
    }
  }
  return svg;
}

// The per-minute view of one series: request bytes (raw and wire) and requests.
function minutesCharts(points, from, to) {
  const bytesPanel = minutesPanel(points, from, to,
    [{ name: "raw", field: "rawBytes", legend: "raw: as forwarded upstream" },
      { name: "wire", field: "wireBytes", legend: "wire: as received" }],
    shortBytes, "Request bytes per minute, raw and on the wire", 246);
  const requestsPanel = minutesPanel(points, from, to, [{ name: "requests", field: "requests" }],
    count, "Gateway requests per minute", 150);
  return [bytesPanel, requestsPanel];
}
