// The joulepool dashboard: polls GET /v1/dashboard with the token it is given
// and draws what comes back. It computes no figure: every number shown is one the API sent
// (exact µJ in each element's data-value), and the server decides what a token may see.
"use strict";

const TOKEN_KEY = "joulepool.token";
const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";
const COLOURS = { charged: "#2f6fb5", reserved: "#8fb8e6", guarantee: "#1d2330", limit: "#c23b3b" };
const PALETTE = ["#2f6fb5", "#d9822b", "#2b7a3d", "#8e44ad", "#c23b3b", "#16a2b8", "#7a6a2b", "#d63384"];

let chosenPeriod = null; // null: the current period, followed across a rollover
let timer = null;
let generation = 0;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    // Styles go through the CSSOM: the page's policy refuses style attributes.
    if (k === "style") node.style.cssText = String(v);
    else node.setAttribute(k, String(v));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}

function energy(uj) {
  // Display only: the exact figure is kept in data-value and in the tooltip.
  const j = uj / 1e6;
  const units = [["GJ", 1e9], ["MJ", 1e6], ["kJ", 1e3]];
  for (const [name, size] of units) {
    if (Math.abs(j) >= size) return `${(j / size).toLocaleString("en", { maximumFractionDigits: 3 })} ${name}`;
  }
  return `${j.toLocaleString("en", { maximumFractionDigits: 3 })} J`;
}

function utc(ms) {
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "");
}

function figure(field, value, words, kind) {
  const shown = value === undefined || value === null ? "none" : kind === "devices" ? String(value) : energy(value);
  const title = value === undefined || value === null ? "not set" : kind === "devices" ? `${value} devices` : `${value} µJ`;
  return el("span", { "data-field": field, "data-value": value ?? "", title, class: field.replace(/_uj$/, "") }, `${words} `, el("b", {}, shown));
}

function bar(figs, guarantee, limit) {
  const top = Math.max(1, guarantee, limit ?? 0, figs.committed_uj) * 1.08;
  const x = (v) => (v / top) * 1000;
  const box = svg("svg", { viewBox: "0 0 1000 34", preserveAspectRatio: "none", role: "img" });
  box.append(svg("rect", { x: 0, y: 8, width: 1000, height: 18, fill: "#eef0f4" }));
  box.append(svg("rect", { x: 0, y: 8, width: x(figs.charged_uj), height: 18, fill: COLOURS.charged, "data-bar": "charged" }));
  box.append(svg("rect", { x: x(figs.charged_uj), y: 8, width: x(figs.reserved_uj), height: 18, fill: COLOURS.reserved, "data-bar": "reserved" }));
  box.append(svg("rect", { x: x(guarantee) - 2, y: 2, width: 4, height: 30, fill: COLOURS.guarantee, "data-bar": "guarantee" }));
  if (limit !== undefined && limit !== null) {
    box.append(svg("rect", { x: x(limit) - 2, y: 2, width: 4, height: 30, fill: COLOURS.limit, "data-bar": "limit" }));
  }
  return box;
}

function drawEntitlements(data) {
  const host = document.getElementById("entitlements");
  const depth = {};
  const rows = [];
  for (const ent of data.entitlements) {
    depth[ent.id] = ent.parent !== undefined && ent.parent in depth ? depth[ent.parent] + 1 : 0;
    // An interior node's own usage counts only claims filed at it; its subtree's is the
    // figure a reader wants, and the API sends it beside (`subtree`).
    const figs = ent.subtree ?? ent.usage;
    const guarantee = ent.subtree ? ent.subtree.guarantee_uj : ent.guarantee_uj;
    const devices = ent.subtree ? ent.subtree.guarantee_devices : ent.guarantee_devices;
    const lent = data.lenders[ent.id];
    const name = el("div", { class: "name", style: `padding-left:${depth[ent.id] * 1.2}rem` }, ent.id,
      el("small", {}, ent.subtree ? "Σ subtree" : ent.parent ? `in ${ent.parent}` : "root"));
    const figures = el("div", { class: "figures" },
      figure("committed_uj", figs.committed_uj, "committed"),
      figure("guarantee_uj", guarantee, "guarantee"),
      figure("limit_uj", ent.subtree ? null : ent.limit_uj, "limit"),
      figure("charged_uj", figs.charged_uj, "charged"),
      figure("reserved_uj", figs.reserved_uj, "reserved"),
      figure("remaining_uj", figs.remaining_uj, "remaining"),
      figure("borrowed_uj", figs.borrowed_uj, "borrowed"),
      figure("held_devices", figs.held_devices, "devices held", "devices"),
      figure("guarantee_devices", devices, "of guaranteed", "devices"));
    if (lent !== undefined) {
      const words = lent.length
        ? `borrowing from the pooled surplus of ${lent.map((l) => `${l.id} (${energy(l.remaining_uj)} unspent)`).join(", ")}`
        : "borrowing from its siblings' pooled surplus";
      figures.append(el("span", { class: "lenders", "data-lenders": lent.map((l) => l.id).join(",") }, words));
    }
    rows.push(el("div", { class: "ent", "data-ent": ent.id, "data-source": ent.subtree ? "subtree" : "usage" },
      name, bar(figs, guarantee, ent.subtree ? null : ent.limit_uj), figures));
  }
  host.replaceChildren(...(rows.length ? rows : [el("p", { class: "empty" }, "no entitlement in this token's scope")]));
}

function drawTimeline(data) {
  const host = document.getElementById("timeline");
  const ids = Object.keys(data.timeline);
  if (!ids.length) {
    host.replaceChildren(el("p", { class: "empty" }, "no claim was admitted in this period"));
    return;
  }
  const firsts = ids.map((i) => data.timeline[i][0][0]);
  const start = data.period.start_ms ?? Math.min(...firsts);
  const end = data.period.end_ms !== null && data.period.end_ms < data.now_ms ? data.period.end_ms : data.now_ms;
  const lasts = ids.map((i) => data.timeline[i].at(-1)[0]);
  const right = Math.max(end, ...lasts, start + 1);
  const top = Math.max(1, ...ids.flatMap((i) => data.timeline[i].map((p) => p[1]))) * 1.1;
  const W = 1000, H = 240, L = 70, B = 22;
  const x = (ms) => L + ((ms - start) / (right - start)) * (W - L - 10);
  const y = (uj) => H - B - (uj / top) * (H - B - 10);
  const box = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img" });
  box.append(svg("line", { x1: L, y1: H - B, x2: W - 10, y2: H - B, class: "axis" }));
  box.append(svg("line", { x1: L, y1: 10, x2: L, y2: H - B, class: "axis" }));
  const label = (text, attrs) => { const t = svg("text", attrs); t.textContent = text; box.append(t); };
  label(energy(top), { x: 2, y: 16 });
  label("0", { x: L - 14, y: H - B });
  label(utc(start), { x: L, y: H - 4 });
  label(utc(right), { x: W - 150, y: H - 4 });
  const legend = el("p", { class: "legend" });
  ids.forEach((id, n) => {
    const colour = PALETTE[n % PALETTE.length];
    const points = data.timeline[id];
    // A step line: committed energy holds its value until the next entry moves it, and
    // holds the last one up to now (or the period's end).
    const path = [[x(start), y(0)]];
    let last = 0;
    for (const [at, uj] of points) {
      path.push([x(at), y(last)], [x(at), y(uj)]);
      last = uj;
    }
    path.push([x(right), y(last)]);
    box.append(svg("polyline", {
      points: path.map((p) => p.join(",")).join(" "), fill: "none", stroke: colour, "stroke-width": 2,
      "data-ent": id, "data-last": last, "vector-effect": "non-scaling-stroke",
    }));
    legend.append(el("span", { class: "swatch", style: `background:${colour}` }), `${id} ${energy(last)}`);
  });
  host.replaceChildren(box, legend);
}

function drawVerdicts(data) {
  const body = document.querySelector("#verdicts tbody");
  const rows = data.verdicts.map((v) => el("tr", { "data-claim": v.claim, "data-verdict": v.verdict },
    el("td", {}, utc(v.at_ms)), el("td", { class: "claim", title: v.claim }, v.claim), el("td", {}, v.entitlement || "(not in tree)"),
    el("td", { class: `verdict-${v.verdict}` }, v.verdict),
    el("td", {}, v.reason ?? "", v.period_end_ms ? ` (fits from ${utc(v.period_end_ms)})` : ""),
    el("td", {}, v.reserved ? `${energy(v.reserved.uj)} ${v.reserved.grade}` : ""),
    el("td", {}, v.borrowed_uj ? energy(v.borrowed_uj) : "")));
  body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 7, class: "empty" }, "no verdict since the service started"))]));
}

function drawEstimates(data) {
  const body = document.querySelector("#estimates tbody");
  const rows = data.estimates.map((e) => el("tr", { "data-class": e.class, "data-evidence": e.evidence },
    el("td", {}, e.class), el("td", {}, e.entitlement ?? "all"),
    el("td", {}, e.estimate ? `${energy(e.estimate.uj)} ${e.estimate.grade}` : `none: ${e.declined}`),
    el("td", {}, e.min_uj !== undefined ? energy(e.min_uj) : ""), el("td", {}, e.max_uj !== undefined ? energy(e.max_uj) : ""),
    el("td", {}, e.observations), el("td", {}, e.evidence)));
  body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 7, class: "empty" }, "no class declared yet"))]));
}

const UNKNOWN = "—";

function known(value, show) {
  // Unknown is not a value: a figure the API sent as null is shown as a dash, never 0.
  return value === undefined || value === null ? UNKNOWN : show(value);
}

function cell(field, value, shown) {
  return el("td", { "data-field": field, "data-value": value ?? "" }, shown);
}

function lastAct(live) {
  if (live.waiting) return `waiting for ${live.waiting.gpus} GPU in ${live.waiting.partition} since ${utc(live.waiting.since_ms)}`;
  if (live.last_act === undefined) return UNKNOWN;
  if (live.last_act === null) return "none";
  const a = live.last_act;
  return `${a.rule} ${a.kind} ${a.outcome}${a.reason ? ` (${a.reason})` : ""} ${utc(a.at_ms)}`;
}

function drawRunning(data) {
  const body = document.querySelector("#running tbody");
  const rows = data.running.map((c) => {
    const live = c.live;
    const job = live.job;
    const jobWords = job ? `${job.id}${job.user ? ` (${job.user})` : ""}${job.name ? ` ${job.name}` : ""}` : UNKNOWN;
    const idle = `${live.idle.verdict}${live.idle.reason ? ` (${live.idle.reason})` : ""}`;
    const units = known(live.units, (u) => `${u}${live.total !== null ? `/${live.total}` : ""} ${live.unit}`);
    return el("tr", { "data-claim": c.claim },
      el("td", { class: "claim", title: c.claim }, c.claim), el("td", {}, c.entitlement),
      cell("job", job ? job.id : null, jobWords),
      el("td", { title: `${c.reserved.uj} µJ` }, `${energy(c.reserved.uj)} ${c.reserved.grade}`),
      cell("energy_uj", live.energy_uj, known(live.energy_uj, (uj) => `${energy(uj)} ${live.grade}`)),
      cell("power_uw", live.power_uw, known(live.power_uw, (uw) => `${(uw / 1e6).toLocaleString("en", { maximumFractionDigits: 1 })} W`)),
      cell("idle", live.idle.verdict, idle),
      cell("units", live.units, units),
      cell("realised_cost", live.realised_cost, known(live.realised_cost, (q) => `${q} µJ/unit`)),
      cell("reservation_used_pct", live.reservation_used_pct, known(live.reservation_used_pct, (p) => `${p} %`)),
      cell("exhausts_at_ms", live.exhausts_at_ms, known(live.exhausts_at_ms, utc)),
      cell("last_act", live.last_act ? live.last_act.kind : null, lastAct(live)));
  });
  body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 12, class: "empty" }, "no claim running in this token's scope"))]));
  document.getElementById("running-more").textContent = data.running_more ? `(${data.running_more} more not listed)` : "";
}

function drawActions(data) {
  const body = document.querySelector("#actions tbody");
  if (data.recent_actions === null) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: 9, class: "empty" }, "this service keeps no action log")));
    return;
  }
  const rows = data.recent_actions.map((a) => el("tr", { "data-claim": a.claim, "data-kind": a.kind, "data-rule": a.rule ?? "over_reservation" },
    el("td", {}, utc(a.at_ms)), el("td", { class: "claim", title: a.claim }, a.claim), el("td", {}, a.entitlement),
    el("td", {}, a.job ?? UNKNOWN), el("td", {}, a.rule ?? "over_reservation"), el("td", {}, a.kind), el("td", {}, a.outcome),
    el("td", {}, a.reason ?? ""), el("td", {}, a.detail ?? "")));
  body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 9, class: "empty" }, "no act recorded"))]));
}

function drawLedger(data) {
  const host = document.getElementById("ledger");
  const l = data.ledger;
  if (!l) {
    host.replaceChildren(el("dt", {}, "ledger"), el("dd", { class: "empty" }, "its length and head count every team's work: operators only"));
    return;
  }
  const item = (k, v, attrs) => [el("dt", {}, k), el("dd", attrs || {}, v)];
  host.replaceChildren(
    ...item("length", l.length, { "data-field": "length" }),
    ...item("head", l.head_hex, { "data-field": "head_hex" }),
    ...item("attestation", l.attestation, { "data-field": "attestation" }),
    ...item("witnessed through", l.witnessed_through !== undefined ? `entry ${l.witnessed_through}` : "never witnessed", { "data-field": "witnessed_through" }),
    ...item("last witnessed", l.witnessed_at_ms !== undefined ? `${utc(l.witnessed_at_ms)} UTC by ${l.witness}` : "never", { "data-field": "witnessed_at_ms" }),
    ...item("last append", l.last_at_ms !== undefined ? `${utc(l.last_at_ms)} UTC` : "empty ledger"),
    ...item("steward", l.steward));
}

function drawPeriods(data) {
  const select = document.getElementById("period");
  const key = data.periods.map((p) => `${p.label}${p.current ? "*" : ""}`).join(",");
  // Rebuilt only when the list changes, so a list someone has open is not closed under them.
  if (select.dataset.key !== key) {
    const options = data.periods.map((p) => el("option", { value: p.current ? "" : p.label }, p.current ? `${p.label} (current)` : p.label));
    select.replaceChildren(...options);
    select.dataset.key = key;
  }
  select.value = chosenPeriod ?? "";
  const p = data.period;
  const bounds = p.start_ms === null ? "all time" : `${utc(p.start_ms)} to ${utc(p.end_ms)} UTC`;
  document.getElementById("period-words").textContent = `${p.label}: ${bounds}${p.current ? "" : " (past)"}`;
}

function status(text, error) {
  const node = document.getElementById("status");
  node.textContent = text;
  node.className = error ? "error" : "";
}

async function poll() {
  const mine = ++generation;
  clearTimeout(timer);
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) {
    status("give a token to see figures", false);
    return;
  }
  const query = chosenPeriod ? `?period=${encodeURIComponent(chosenPeriod)}` : "";
  try {
    const r = await fetch(`/v1/dashboard${query}`, { headers: { Authorization: `Bearer ${token}` }, cache: "no-store" });
    const body = await r.json();
    if (mine !== generation) return;
    if (!r.ok) {
      status(`${r.status} ${body.error}: ${body.detail}`, true);
      if (r.status === 401 || r.status === 403) {
        sessionStorage.removeItem(TOKEN_KEY);
        return;
      }
    } else {
      drawPeriods(body);
      drawEntitlements(body);
      drawTimeline(body);
      drawVerdicts(body);
      drawEstimates(body);
      drawRunning(body);
      drawActions(body);
      drawLedger(body);
      document.body.dataset.length = body.ledger ? body.ledger.length : "";
      document.body.dataset.updated = String(body.now_ms);
      status(`updated ${utc(body.now_ms)} UTC`, false);
    }
  } catch (err) {
    if (mine !== generation) return;
    status(`cannot reach the service: ${err.message}`, true);
  }
  timer = setTimeout(poll, POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("token");
    const token = input.value.trim();
    input.value = "";
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    poll();
  });
  document.getElementById("forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    for (const id of ["entitlements", "timeline", "ledger"]) document.getElementById(id).replaceChildren();
    document.getElementById("running-more").textContent = "";
    for (const id of ["verdicts", "estimates", "running", "actions"]) document.querySelector(`#${id} tbody`).replaceChildren();
    clearTimeout(timer);
    generation++;
    status("give a token to see figures", false);
  });
  document.getElementById("period").addEventListener("change", (event) => {
    chosenPeriod = event.target.value || null;
    poll();
  });
  poll();
});
