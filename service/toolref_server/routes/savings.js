// The savings page: asks for the metrics key when the service has one, reads /v1/savings, and
// shows per tenant and upstream, for the last hour and day, a table of the gateway's use and
// its bytes as bars (savings_charts.js), then per minute over the window chosen.
const DATA = "/v1/savings";
const KEY = "toolref-metrics-key";
const REFRESH_MS = 30000;
const LABELS = { hour: "Last hour", day: "Last day" };
const SPANS = { hour: 60, day: 24 * 60 };
const COLUMNS = ["requests", "resends", "raw", "wire", "saved", "raw / wire", "tokens saved"];
const ALL = "all";
let shown = null;  // the last answer drawn, redrawn when a choice changes

function cell(row, tag, text, value, cls) {
  const td = document.createElement(tag);
  td.textContent = text;
  if (value !== undefined) td.dataset.value = String(value);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function numbers(row) {
  const saved = row.rawBytes - row.wireBytes;
  const ratio = row.wireBytes > 0 ? row.rawBytes / row.wireBytes : null;
  return { ...row, saved, ratio };
}

function line(tbody, r, cls) {
  const tr = document.createElement("tr");
  if (cls) tr.className = cls;
  tr.dataset.tenant = r.tenant;
  tr.dataset.upstream = r.upstream;
  cell(tr, "td", r.tenant);
  cell(tr, "td", r.upstream);
  cell(tr, "td", count(r.requests), r.requests);
  cell(tr, "td", count(r.resends), r.resends);
  cell(tr, "td", bytes(r.rawBytes), r.rawBytes).title = count(r.rawBytes) + " bytes";
  cell(tr, "td", bytes(r.wireBytes), r.wireBytes).title = count(r.wireBytes) + " bytes";
  cell(tr, "td", bytes(r.saved), r.saved, "saved").title = count(r.saved) + " bytes";
  cell(tr, "td", r.ratio === null ? "–" : r.ratio.toFixed(1) + "×", r.ratio === null ? "" : r.ratio);
  // context editing: the model's input tokens saved (estimated), where it ran
  cell(tr, "td", count(r.tokensSaved || 0), r.tokensSaved || 0).title = "estimated input tokens";
  tbody.appendChild(tr);
}

function totals(rows, extra) {
  return numbers(rows.reduce((t, r) => ({
    ...t, requests: t.requests + r.requests, resends: t.resends + r.resends,
    rawBytes: t.rawBytes + r.rawBytes, wireBytes: t.wireBytes + r.wireBytes,
    tokensSaved: t.tokensSaved + (r.tokensSaved || 0),
  }), { ...extra, requests: 0, resends: 0, rawBytes: 0, wireBytes: 0, tokensSaved: 0 }));
}

function windowSection(w) {
  const section = document.createElement("section");
  section.dataset.window = w.name;
  const h2 = document.createElement("h2");
  h2.textContent = LABELS[w.name] || w.name;
  section.appendChild(h2);
  const rows = w.rows.map(numbers);
  const all = totals(rows, { tenant: "all", upstream: "all" });
  const summary = document.createElement("p");
  summary.className = "summary";
  if (rows.length === 0) {
    summary.textContent = "No gateway request in this window.";
  } else {
    const share = all.rawBytes > 0 ? Math.round(100 * all.saved / all.rawBytes) : 0;
    summary.append(count(all.requests) + " requests; ");
    const b = document.createElement("b");
    b.textContent = bytes(all.saved) + " saved (" + share + "%)";
    const tokens = all.tokensSaved > 0 ? "; ~" + count(all.tokensSaved) + " input tokens saved" : "";
    summary.append(b, " of " + bytes(all.rawBytes) + " raw; " + count(all.resends) + " resends" + tokens + ".");
  }
  section.appendChild(summary);
  if (rows.length > 0) {
    const table = document.createElement("table");
    const head = document.createElement("tr");
    for (const name of ["tenant", "upstream", ...COLUMNS]) cell(head, "th", name);
    const thead = document.createElement("thead");
    thead.appendChild(head);
    const tbody = document.createElement("tbody");
    for (const r of rows) line(tbody, r);
    if (rows.length > 1) line(tbody, all, "total");
    table.append(thead, tbody);
    section.append(table, bytesBars(rows));
  }
  return section;
}

// The per-minute points of the series chosen (one tenant and upstream, or all added up).
function chosen(doc, choice, from) {
  const byMinute = new Map();
  for (const s of doc.series) {
    if (choice !== ALL && choice !== JSON.stringify([s.tenant, s.upstream])) continue;
    for (const p of s.points) {
      if (p.minute < from) continue;
      const at = byMinute.get(p.minute) || { minute: p.minute, requests: 0, resends: 0, rawBytes: 0, wireBytes: 0 };
      for (const field of ["requests", "resends", "rawBytes", "wireBytes"]) at[field] += p[field];
      byMinute.set(p.minute, at);
    }
  }
  return [...byMinute.values()].sort((a, b) => a.minute - b.minute);
}

function overTime(doc) {
  const section = document.getElementById("time");
  section.hidden = false;
  const select = document.getElementById("series");
  const wanted = select.value || ALL;
  const options = [[ALL, "all tenants and upstreams"]];
  for (const s of doc.series) options.push([JSON.stringify([s.tenant, s.upstream]), s.tenant + " · " + s.upstream]);
  select.replaceChildren(...options.map(([value, text]) => {
    const option = document.createElement("option");
    option.value = value;
    option.textContent = text;
    return option;
  }));
  select.value = options.some(([value]) => value === wanted) ? wanted : ALL;
  const span = document.getElementById("span").value;
  const from = doc.minute - SPANS[span] + 1;
  const points = chosen(doc, select.value, from);
  const [bytesPanel, requestsPanel] = minutesCharts(points, from, doc.minute);
  for (const panel of [bytesPanel, requestsPanel]) {
    panel.dataset.window = span;
    panel.dataset.series = select.value;
  }
  document.getElementById("bytes-chart").replaceChildren(bytesPanel);
  document.getElementById("requests-chart").replaceChildren(requestsPanel);
  const all = totals(points, {});
  const label = select.options[select.selectedIndex].textContent;
  document.getElementById("time-summary").textContent = points.length === 0
    ? "No gateway request in the " + LABELS[span].toLowerCase() + " for " + label + "."
    : LABELS[span] + ", " + label + ": " + count(all.requests) + " requests in " +
      count(points.length) + (points.length === 1 ? " minute; " : " minutes; ") + bytes(all.rawBytes) + " raw, " +
      bytes(all.wireBytes) + " on the wire.";
}

function render(doc) {
  shown = doc;
  document.getElementById("windows").replaceChildren(...doc.windows.map(windowSection));
  overTime(doc);
  const when = new Date(doc.minute * 60000);
  document.getElementById("status").textContent =
    "updated " + new Date().toLocaleTimeString("en") + " · minute " + when.toISOString().slice(0, 16) + "Z";
  document.body.dataset.loaded = "true";
}

function ask(message) {
  document.getElementById("ask").hidden = false;
  const refused = document.getElementById("refused");
  refused.hidden = !message;
  refused.textContent = message || "";
  document.getElementById("status").textContent = "metrics key needed";
  document.getElementById("key").focus();
}

async function load() {
  const key = sessionStorage.getItem(KEY);
  const headers = key ? { Authorization: "Bearer " + key } : {};
  let answer;
  try {
    answer = await fetch(DATA, { headers, cache: "no-store" });
  } catch (e) {
    document.getElementById("status").textContent = "the service did not answer; retrying";
    return;
  }
  if (answer.status === 401) {
    sessionStorage.removeItem(KEY);
    let refusal = key ? "That is not this service's metrics key." : "";
    if (key && /^[0-9a-fA-F]{64}$/.test(key)) {
      refusal += " If you copied those 64 hex digits from TOOLREF_METRICS_KEY, that is the " +
        "key's SHA-256: enter the key itself.";
    }
    ask(refusal);
    return;
  }
  if (!answer.ok) {
    let detail = "HTTP " + answer.status;
    try { detail = (await answer.json()).detail || detail; } catch (e) { /* not JSON */ }
    if (answer.status === 403) {  // no metrics key configured, and this is not its machine
      const closed = document.getElementById("closed");
      closed.textContent = detail;
      closed.hidden = false;
      document.getElementById("status").textContent = "closed to this browser";
    } else {
      document.getElementById("status").textContent = detail;
    }
    return;
  }
  document.getElementById("ask").hidden = true;
  document.getElementById("closed").hidden = true;
  render(await answer.json());
}

document.getElementById("ask").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY, document.getElementById("key").value.trim());
  load();
});
for (const id of ["span", "series"]) {
  document.getElementById(id).addEventListener("change", () => { if (shown) overTime(shown); });
}
load();
setInterval(load, REFRESH_MS);
