// hetsched dashboard: pages of jobs and tasks from /api/*, live figures from /api/events (SSE).
// Nothing here reloads the page or fetches a whole job: tasks come a page at a time.
"use strict";

const MAX_POINTS = 600;       // samples kept per chart (5 minutes at 2 per second)
const JOB_PAGE = 20;
const TASK_PAGE = 100;
const FINAL = new Set(["completed", "failed", "cancelled"]);

const $ = (id) => document.getElementById(id);
// The page's Content-Security-Policy forbids inline style attributes: widths travel as data-w and
// are applied through the CSSOM, which it allows.
function applyWidths(root) { root.querySelectorAll("[data-w]").forEach((e) => { e.style.width = e.dataset.w; }); }
// Makes `el`'s children what the HTML `html` describes while keeping every element whose tag
// stays in its place: text and attributes change in place, only a different element is replaced.
// The live lists re-render twice a second, and a click whose press landed on an element that a
// re-render then replaced is lost (the browser clicks only where press and release share an
// element), so rows and cards are patched this way rather than rewritten. `style` is left alone:
// applyWidths sets it from data-w.
function morph(el, html) {
  const t = document.createElement("template");
  t.innerHTML = html;
  morphChildren(el, t.content);
}
function morphChildren(el, from) {
  const want = [...from.childNodes];
  while (el.childNodes.length > want.length) el.lastChild.remove();
  want.forEach((w, i) => {
    const have = el.childNodes[i];
    if (!have) { el.appendChild(w); return; }
    if (have.nodeType !== w.nodeType || have.nodeName !== w.nodeName) { el.replaceChild(w, have); return; }
    if (w.nodeType === Node.TEXT_NODE) { if (have.data !== w.data) have.data = w.data; return; }
    if (w.nodeType !== Node.ELEMENT_NODE) { el.replaceChild(w, have); return; }
    for (const a of [...have.attributes]) if (a.name !== "style" && !w.hasAttribute(a.name)) have.removeAttribute(a.name);
    for (const a of w.attributes) if (have.getAttribute(a.name) !== a.value) have.setAttribute(a.name, a.value);
    morphChildren(have, w);
  });
}
// Puts `elems` as `parent`'s children in that order, moving only those not already in place (a
// moved element leaves the page for an instant: a press on it would be lost), and removes the rest.
function placeInOrder(parent, elems) {
  elems.forEach((e, i) => { if (parent.children[i] !== e) parent.insertBefore(e, parent.children[i] || null); });
  while (parent.children.length > elems.length) parent.lastElementChild.remove();
}
// "1 task", "2 tasks": the words of the CLI's messages (hetsched_core::text::count).
const count = (n, noun) => `${n} ${noun}${n === 1 ? "" : "s"}`;
// How many run, and of those how many wait in their agent's queue (`prefetch`): `5 (3 queued)`.
const runningText = (c) => {
  // Of the running: waiting in their agent's queue, or fetching their inputs (workflows).
  const notes = [[c.queued, "queued"], [c.fetching, "fetching"]].filter(([n]) => n).map(([n, w]) => `${n} ${w}`);
  return `${c.running || 0}` + (notes.length ? ` (${notes.join(", ")})` : "");
};
// The characters the CLI's text output escapes (hetsched_core::text::escaped): control characters
// but "\n" and invisible formatting ones — a bidi override in a name (`job\u{202e}txt.exe`) would
// make it read `jobexe.txt`, and HTML escaping leaves it as it is (a <bdi> would only keep it from
// reordering what is around it). The server writes the class into the brackets below as it serves
// this script, from that one list (dashboard::app_js), so the set is not copied here.
const ESCAPED = /[__ESCAPED__]/gu;
// A string the server sent, as the page shows it: those characters as the CLI writes them.
const shown = (s) => String(s ?? "").replace(ESCAPED, (c) => ({ "\t": "\\t", "\r": "\\r" }[c] || `\\u{${c.codePointAt(0).toString(16)}}`));
// The same, HTML-escaped: every string of the server's put into innerHTML goes through it.
const esc = (s) => shown(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

// Who the page is signed in as (`/api/me`): the read-only token reads no task output, so its
// page offers no output links (they would answer 403). Until the answer comes, links are shown.
let me = null;
const meLoaded = Promise.resolve().then(() => api("/api/me")).then((m) => { me = m; }, (e) => console.error(e));
const NO_OUTPUT = "the read-only token reads no task output: sign in with the client token or your own";
// A task's or chunk's output cell: its stdout and stderr links (`link(stream)`), or why there are none.
// What an output link's tab shows, said on hover: `/api/log` answers the output as it is, so a
// stream the task printed nothing on opens an empty tab (as `hetsched log` prints nothing), and a
// long one its last MiB (the server says so in its X-Hetsched-Truncated header).
const OUTPUT_HOVER = "the last MiB of this stream; an empty tab: the task printed nothing on this stream";
const outputLinks = (link) => (me && me.reads_output === false ? `<span title="${esc(NO_OUTPUT)}">-</span>` : `${link("stdout")} ${link("stderr")}`);

async function api(path) {
  const r = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  if (r.status === 401) { location.href = "/login"; throw new Error("signed out"); }
  if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`);
  return r.json();
}

function human(ns) {
  if (!ns) return "-";
  const s = ns / 1e9;
  if (s < 1) return `${Math.round(s * 1000)}ms`;
  if (s < 60) return `${s.toFixed(1)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${Math.floor(s % 60)}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

// Bytes as KiB, MiB or GiB ("-" for 0: not sampled).
function bytes(n) {
  if (!n) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

// ---------------------------------------------------------------- charts

function chartOpts(el, series, yLabel) {
  const w = Math.max(300, el.parentElement.clientWidth - 24);
  return {
    width: w, height: 200, title: "",
    scales: { x: { time: true } },
    axes: [{}, { label: yLabel, size: 50 }],
    series: [{}].concat(series),
    legend: { live: false },
  };
}

const palette = ["#2f7de1", "#2a9d5b", "#d64545", "#b58b00", "#8e44ad", "#16a085", "#e67e22", "#7f8c8d"];

const charts = {
  states: null, rates: null, load: null, gpu: null,
  data: { t: [], pending: [], running: [], succeeded: [], failed: [], cancelled: [], dispatch: [], complete: [] },
  nodeNames: [], load: null, loadData: [], gpuData: [],
};

function initCharts() {
  charts.states = new uPlot(chartOpts($("chart-states"), [
    { label: "pending", stroke: "#9aa3b2" },
    { label: "running", stroke: "#2f7de1" },
    { label: "succeeded", stroke: "#2a9d5b" },
    { label: "failed", stroke: "#d64545" },
    // Cancelled tasks leave the pending or running line: drawn, the lines add up to every task.
    { label: "cancelled", stroke: "#b58b00" },
  ], "tasks"), [[], [], [], [], [], []], $("chart-states"));
  charts.rates = new uPlot(chartOpts($("chart-rates"), [
    { label: "dispatched/s", stroke: "#2f7de1" },
    { label: "completed/s", stroke: "#2a9d5b" },
  ], "tasks/s"), [[], [], []], $("chart-rates"));
  // The per-node charts take their place at once, with no node yet: built only at the first
  // update, they pushed everything below them down as the page loaded, under a pointer about
  // to click a job.
  perNodeChart("load", $("chart-load"), [], "tasks");
  perNodeChart("gpu", $("chart-gpu"), [], "%");
}

// A legend entry, clicked, hides its line (uPlot's own toggle; clicked again, shows it). The
// per-node charts are built again when a node comes or goes: the nodes a person hid stay hidden.
function perNodeChart(key, el, names, yLabel) {
  const hidden = new Set(charts[key] ? charts[key].series.slice(1).filter((s) => !s.show).map((s) => s.label) : []);
  if (charts[key]) charts[key].destroy();
  el.innerHTML = "";
  charts[key] = new uPlot(chartOpts(el, names.map((n, i) => ({ label: n, stroke: palette[i % palette.length], show: !hidden.has(n) })), yLabel),
    [[]].concat(names.map(() => [])), el);
}

function push(arr, v) { arr.push(v); if (arr.length > MAX_POINTS) arr.shift(); }

let last = null;
function onTick(ev) {
  const d = charts.data;
  const c = ev.counts || {};
  const done = (c.succeeded || 0) + (c.failed || 0) + (c.cancelled || 0);
  live(done);
  push(d.t, ev.t);
  for (const k of ["pending", "running", "succeeded", "failed", "cancelled"]) push(d[k], c[k] || 0);
  if (last) {
    const dt = Math.max(1e-3, ev.t - last.t);
    push(d.dispatch, Math.max(0, (ev.dispatched - last.dispatched) / dt));
    push(d.complete, Math.max(0, (done - last.done) / dt));
  } else { push(d.dispatch, 0); push(d.complete, 0); }
  last = { t: ev.t, dispatched: ev.dispatched, done };
  charts.states.setData([d.t, d.pending, d.running, d.succeeded, d.failed, d.cancelled]);
  charts.rates.setData([d.t, d.dispatch, d.complete]);

  const names = (ev.nodes || []).map((n) => n.name);
  if (names.join("\n") !== charts.nodeNames.join("\n")) {
    charts.nodeNames = names;
    charts.loadT = []; charts.loadData = names.map(() => []); charts.gpuData = names.map(() => []);
    if (names.length) {
      perNodeChart("load", $("chart-load"), names, "tasks");
      perNodeChart("gpu", $("chart-gpu"), names, "%");
    }
  }
  if (names.length) {
    push(charts.loadT, ev.t);
    ev.nodes.forEach((n, i) => { push(charts.loadData[i], n.running); push(charts.gpuData[i], n.gpu_util); });
    charts.load.setData([charts.loadT].concat(charts.loadData));
    charts.gpu.setData([charts.loadT].concat(charts.gpuData));
  }

  for (const k of ["pending", "running", "succeeded", "failed", "cancelled"]) $(`count-${k}`).textContent = c[k] || 0;
  // The running divisible loads' units, which the task counts leave out: shown while there are some.
  const u = ev.units || { jobs: 0, done: 0, units: 0 };
  $("units-pill").hidden = !u.jobs;
  $("count-units").textContent = `${u.done}/${u.units}`;
  $("units-pill").title = `units of the ${count(u.jobs, "running divisible load")}: done of all (each job's row counts its own; hetsched job N lists its rounds)`;
  renderNodes(ev.nodes || [], ev.nodes_left || 0);
  updateJobs(ev.jobs || []);
}

// ---------------------------------------------------------------- live marker (tests read it)

const liveState = { events: 0, firstDone: null, lastDone: null };
function live(done) {
  liveState.events += 1;
  if (liveState.firstDone === null) liveState.firstDone = done;
  liveState.lastDone = done;
  const el = $("live");
  el.textContent = `live · ${liveState.events} updates`;
  el.dataset.events = liveState.events;
  el.dataset.firstDone = liveState.firstDone;
  el.dataset.lastDone = liveState.lastDone;
}

// ---------------------------------------------------------------- nodes

// A node's time left (its agent's `--time-limit`), as `hetsched nodes` writes it: `45s`, `12m 5s`, `3h 20m`.
function timeLeft(ms) {
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

// A node's state in the words of `hetsched nodes`' alive column (lower case).
function nodeState(n) {
  const drained = n.drained ? `drained${n.drain_reason ? `: ${n.drain_reason}` : ""}` : "";
  if (n.left) return `left (${n.left})`;
  if (!n.alive && n.returning_ms != null) return `not back since the server's restart (dead in ${human(n.returning_ms * 1e6)})`;
  if (!n.alive) return drained ? `dead, ${drained}` : "dead";
  if (n.draining) return "shutting down";
  if (n.stopping) return "stopping (hetsched node stop)";
  if (drained) return drained;
  return n.held_for ? `alive, held for ${n.held_for}` : "alive";
}

// A node card's lines (HTML): what the card shows of `n`, a node of the event stream.
function nodeCard(n) {
  const usedCores = n.cores - n.free_cores, usedGpus = n.gpus - n.free_gpus;
  const flags = (n.left ? `<span class="badge" title="its agent left: hetsched nodes --all lists it">left (${esc(n.left)})</span>` : !n.alive ? (n.returning_ms != null ? '<span class="badge" title="restored at the server\'s restart; its agent has not come back yet">not back yet</span>' : '<span class="badge">dead</span>') : "") + (n.drained ? `<span class="badge" title="${esc(n.drain_reason)}">drained${n.drain_reason ? ": " + esc(n.drain_reason) : ""}</span>` : "") + (n.draining && n.alive ? '<span class="badge">shutting down</span>' : "");
  return `<div class="name">${esc(n.name)}${flags}</div>`
    + `<div>cores ${usedCores}/${n.cores} in use · ${n.running} running</div>`
    + `<div class="meter"><span data-w="${n.cores ? (100 * usedCores / n.cores) : 0}%"></span></div>`
    + (n.gpus ? `<div>GPUs ${usedGpus}/${n.gpus} in use${n.gpu_util === null ? "" : ` · ${Math.round(n.gpu_util)}% busy`}</div>`
      + `<div class="meter gpu"><span data-w="${100 * usedGpus / n.gpus}%"></span></div>` : "<div>no GPUs</div>")
    + (n.alive && n.time_left_ms != null ? `<div title="until its agent's time limit stops its tasks">${esc(timeLeft(n.time_left_ms))} left</div>` : "")
    + ((n.attributes || []).length ? `<div class="attrs" title="what jobs may require">${(n.attributes || []).map(esc).join(" · ")}</div>` : "")
    + (n.held_for ? `<div class="held" title="held whole for a multi-node task">held for ${esc(n.held_for)}</div>` : "");
}

// Racks and node cards by name, patched in place at every update (see morph): a click on a
// card opens that node's detail even while the cards change under the pointer.
// `live`: the last update's nodes. The nodes whose agents left are counted in every update
// (`leftCount`) and shown only while the box "show the N nodes that left" is ticked, as
// `hetsched nodes --all` lists them: then `left` holds them, asked of `/api/nodes?all=1` when
// the box is ticked, when their number changes and every LEFT_POLL_MS.
const LEFT_POLL_MS = 5000;
const nodesView = { racks: new Map(), cards: new Map(), selected: null, seq: 0, live: [], left: [], leftCount: 0, leftAsked: 0, showLeft: false };

// A node of `/api/nodes` as the cards read it (the event stream's shape).
function nodeOfApi(n) {
  return {
    name: n.name, rack: n.rack, alive: n.alive, running: n.running, cores: n.cores, free_cores: n.free_cores,
    gpus: (n.accelerators || []).length, free_gpus: n.free_gpus, drained: n.drained, drain_reason: n.drain_reason, draining: n.draining, gpu_util: null,
    attributes: n.attributes || [], time_left_ms: n.time_left_ms, held_for: n.held_for, left: n.left, stopping: n.stopping,
    returning_ms: n.returning_ms,
  };
}

async function loadLeft() {
  nodesView.leftAsked = Date.now();
  const all = await api("/api/nodes?all=1");
  nodesView.left = all.filter((n) => n.left).map(nodeOfApi);
  renderNodes(nodesView.live, nodesView.leftCount);
}

function renderNodes(live, leftCount = nodesView.leftCount) {
  nodesView.live = live;
  if (leftCount !== nodesView.leftCount) { nodesView.leftCount = leftCount; nodesView.leftAsked = 0; }
  if (!leftCount) nodesView.left = [];
  $("nodes-left-filter").hidden = !leftCount;
  $("nodes-left-count").textContent = count(leftCount, "node");
  if (nodesView.showLeft && leftCount && Date.now() - nodesView.leftAsked > LEFT_POLL_MS) loadLeft().catch((e) => console.error(e));
  const left = nodesView.showLeft ? nodesView.left : [];
  const nodes = live.concat(left);
  const racks = new Map();
  for (const n of nodes) { if (!racks.has(n.rack)) racks.set(n.rack, []); racks.get(n.rack).push(n); }
  const root = $("nodes");
  if (!nodes.length) {
    nodesView.racks.clear(); nodesView.cards.clear();
    root.innerHTML = leftCount ? `<p>No agent is registered now: ${esc(count(leftCount, "node"))} left.</p>` : "<p>No agent has registered yet.</p>";
    return;
  }
  root.querySelector(":scope > p")?.remove();
  const rackDivs = [], seen = new Set();
  for (const [rack, ns] of [...racks.entries()].sort()) {
    let div = nodesView.racks.get(rack);
    if (!div) {
      div = document.createElement("div");
      div.className = "rack";
      div.innerHTML = `<h3>rack ${esc(rack)}</h3><div class="nodes"></div>`;
      nodesView.racks.set(rack, div);
    }
    rackDivs.push(div);
    const cards = ns.map((n) => {
      seen.add(n.name);
      let card = nodesView.cards.get(n.name);
      if (!card) {
        card = document.createElement("div");
        card.dataset.node = n.name;
        card.title = "click: this node's detail";
        nodesView.cards.set(n.name, card);
      }
      card.className = `node clickable${n.alive ? "" : " dead"}${n.left ? " left" : ""}${n.name === nodesView.selected ? " selected" : ""}`;
      morph(card, nodeCard(n));
      return card;
    });
    placeInOrder(div.querySelector(".nodes"), cards);
  }
  for (const [rack, div] of nodesView.racks) if (!racks.has(rack)) { div.remove(); nodesView.racks.delete(rack); }
  for (const name of [...nodesView.cards.keys()]) if (!seen.has(name)) nodesView.cards.delete(name);
  placeInOrder(root, rackDivs);
  applyWidths(root);
  // The open detail's state line follows the live figures.
  const open = nodes.find((n) => n.name === nodesView.selected);
  if (open) $("node-title").textContent = `Node ${shown(open.name)} — ${shown(nodeState(open))}`;
}

// One node's detail (`/api/nodes`' record of it, the JSON of `hetsched nodes --output json`):
// its state in the words of `hetsched nodes`, and its figures.
function renderNodeDetail(n) {
  const rows = [
    ["rack", esc(n.rack)],
    ["cores", `${n.cores - n.free_cores}/${n.cores} in use`],
    ["running", `${n.running}${n.queued ? ` (${n.queued} queued)` : ""}`],
    ["memory", `${bytes(n.memory_bytes)}${n.available_memory_bytes ? ` (${bytes(n.available_memory_bytes)} available)` : ""}`],
    ["GPUs", (n.accelerators || []).length
      ? `${(n.accelerators || []).length - n.free_gpus}/${(n.accelerators || []).length} in use: ${(n.accelerators || []).map((a) => esc(a.kind)).join(", ")}` : "none"],
    ["attributes", esc((n.attributes || []).join(", ") || "-")],
    // Heard within the millisecond: "1ms ago" (human writes 0 as "-").
    // A dead node's: when it was last heard, if the server knows (kept across a restart).
    ["last heartbeat", n.alive || n.last_heard_ms ? `${human(Math.max(1, n.last_seen_ms) * 1e6)} ago` : "-"],
    ["time left", n.alive && n.time_left_ms != null ? esc(timeLeft(n.time_left_ms)) : "-"],
    ["disk free", n.disk_free_bytes != null ? `${bytes(n.disk_free_bytes)}${n.min_free_disk ? ` (floor ${bytes(n.min_free_disk)})` : ""}` : "-"],
    ["backed off", esc((n.backed_off || []).map((b) => `${b.app} (job ${b.job_id}, ${count(b.failures, "start failure")})`).join("; ") || "-")],
    ["version", esc(n.version || "-")],
  ];
  $("node-title").textContent = `Node ${shown(n.name)} — ${shown(nodeState(n))}`;
  $("node-figures").querySelector("tbody").innerHTML = rows.map(([k, v]) => `<tr data-figure="${esc(k)}"><th>${k}</th><td>${v}</td></tr>`).join("");
  $("node-detail").dataset.node = n.name;
  $("node-detail").hidden = false;
}

async function selectNode(name) {
  nodesView.selected = name;
  for (const [n, card] of nodesView.cards) card.classList.toggle("selected", n === name);
  const seq = ++nodesView.seq;
  const n = (await api("/api/nodes?all=1")).find((x) => x.name === name);
  // Another card was clicked meanwhile: its answer is the one to show.
  if (seq !== nodesView.seq) return;
  if (n) renderNodeDetail(n);
  else { $("node-title").textContent = `Node ${shown(name)} — no longer known to the server`; $("node-detail").hidden = false; }
}

$("nodes-left").addEventListener("change", (e) => {
  nodesView.showLeft = e.target.checked;
  nodesView.leftAsked = 0;
  renderNodes(nodesView.live);
});

$("nodes").addEventListener("click", (e) => {
  const card = e.target.closest(".node[data-node]");
  if (card) selectNode(card.dataset.node).catch((err) => console.error(err));
});

// ---------------------------------------------------------------- jobs

// The rows of the page shown, by job id: kept across refreshes and patched in place (see morph),
// so a row under the pointer survives a refresh and keeps its selection. `seq` orders the
// refreshes: an answer that a later refresh overtook is dropped.
const jobsView = { from: null, total: 0, shown: new Map(), selected: null, seq: 0 };

function bar(j) {
  const c = j.counts || {}, t = Math.max(1, j.tasks);
  const w = (x) => `${(100 * (x || 0) / t).toFixed(2)}%`;
  return `<div class="bar" title="${(c.succeeded || 0) + (c.failed || 0) + (c.cancelled || 0)}/${j.tasks} done"><span class="s" data-w="${w(c.succeeded)}"></span><span class="f" data-w="${w(c.failed)}"></span><span class="c" data-w="${w(c.cancelled)}"></span><span class="r" data-w="${w(c.running)}"></span></div>`;
}

// A job held by `hetsched hold` shows as `held`; one that waits for the jobs it runs after
// (`submit --after`) as `waiting`; one whose begin time (`submit --begin`) has not come as
// `deferred` (its pending reason says when).
function shownState(j) {
  // Ended, with stopped tasks whose processes may still run (their SIGTERM handlers): a wait
  // on it has not returned yet.
  if (j.stopping > 0 && j.state !== "pending" && j.state !== "running") {
    return `${j.state} (stopping ${j.stopping})`;
  }
  const why = j.held ? "held" : j.waiting ? "waiting" : j.deferred ? "deferred" : "";
  // Tasks that run go on: such a job runs, its pending tasks held, waiting or deferred.
  return !why ? j.state : j.state === "running" ? `running (${why})` : why;
}

// Why a job's pending tasks wait (`pending_reason`), where its shown state does not say it: a
// held job's says nothing more, but a waiting one's names the jobs it waits for (`waiting for
// job 6`, as `hetsched jobs`' pending because), which `waiting` alone does not.
function pendingBecause(j) {
  return j.held ? "" : j.pending_reason || "";
}

function jobRow(j) {
  const c = j.counts || {};
  // The state as `hetsched jobs` writes it (`running (held)`); coloured by its first word.
  const state = shownState(j), st = state.split(" ")[0];
  // Whose it is, once users submit (the admin's jobs show no owner).
  const owner = j.owner && j.owner !== "admin" ? ` <span class="owner">(${esc(j.owner)})</span>` : "";
  return `<td>${j.id}</td><td>${esc(j.name)}${owner}</td><td class="state-${esc(st)}" title="${esc(pendingBecause(j))}">${esc(state)}</td><td>${bar(j)}</td>
    <td>${c.pending || 0}</td><td>${runningText(c)}</td><td>${c.succeeded || 0}</td><td>${c.failed || 0}</td><td>${c.cancelled || 0}</td>`;
}

// The row of job `j`: the one shown, patched, or a new one.
function jobRowOf(j) {
  let tr = jobsView.shown.get(j.id);
  if (!tr) {
    tr = document.createElement("tr");
    tr.className = "clickable"; tr.dataset.job = j.id;
    tr.addEventListener("click", () => selectJob(j.id));
  }
  morph(tr, jobRow(j)); applyWidths(tr);
  return tr;
}

async function loadJobs() {
  const seq = ++jobsView.seq;
  const head = await api("/api/jobs?cursor=1&limit=1");
  if (seq !== jobsView.seq) return;
  jobsView.total = head.total;
  if (jobsView.from === null || jobsView.from > jobsView.total) jobsView.from = Math.max(1, jobsView.total - JOB_PAGE + 1);
  const page = jobsView.total ? await api(`/api/jobs?cursor=${jobsView.from}&limit=${JOB_PAGE}`) : { jobs: [] };
  if (seq !== jobsView.seq) return;
  const rows = page.jobs.reverse().map(jobRowOf);
  jobsView.shown = new Map(rows.map((tr) => [Number(tr.dataset.job), tr]));
  placeInOrder($("jobs").querySelector("tbody"), rows);
  // Ids run 1 to `total` (jobs ever submitted); purged ones are not listed.
  const purged = head.purged ? ` (${head.purged} purged)` : "";
  $("jobs-where").textContent = jobsView.total ? `jobs ${jobsView.from}–${Math.min(jobsView.total, jobsView.from + JOB_PAGE - 1)} of ${jobsView.total}${purged}` : "no jobs yet";
  // Nothing newer than the newest page, nothing older than job 1: those buttons would do nothing.
  $("jobs-prev").disabled = jobsView.from + JOB_PAGE > jobsView.total;
  $("jobs-next").disabled = jobsView.from === 1;
  if (jobsView.selected === null && jobsView.total) selectJob(jobsView.total);
  markSelected();
}

function updateJobs(jobs) {
  let newer = false;
  for (const j of jobs) {
    if (jobsView.shown.has(j.id)) jobRowOf(j);
    if (j.id > jobsView.total) newer = true;
    if (j.id === jobsView.selected) updateJobTitle(j);
  }
  markSelected();
  // A new job: on the newest page, fetch that page (not the whole list).
  if (newer && jobsView.from + JOB_PAGE > jobsView.total) { jobsView.from = null; loadJobs(); }
}

function markSelected() {
  for (const [id, tr] of jobsView.shown) tr.classList.toggle("selected", id === jobsView.selected);
}

$("jobs-prev").addEventListener("click", () => { jobsView.from = Math.min(Math.max(1, jobsView.total - JOB_PAGE + 1), jobsView.from + JOB_PAGE); loadJobs(); });
$("jobs-next").addEventListener("click", () => { jobsView.from = Math.max(1, jobsView.from - JOB_PAGE); loadJobs(); });

// ---------------------------------------------------------------- a job's tasks

const tasksView = { job: null, cursors: ["0"], next: "0", state: "all", jobState: "", timer: null, seq: 0, chunks: null };

// What a job of each kind counts, in the words of `hetsched job N` (`8 instances`, `200 units`).
const JOB_UNIT = { workflow: "instance", divisible: "unit" };

function updateJobTitle(j) {
  const c = j.counts || {};
  tasksView.jobState = j.state;
  const why = pendingBecause(j);
  $("job-title").textContent = `Job ${j.id} — ${shown(j.name)} — ${shown(shownState(j))}: ${count(j.tasks, JOB_UNIT[j.kind] || "task")}, ${c.succeeded || 0} succeeded, ${c.failed || 0} failed${c.cancelled ? `, ${c.cancelled} cancelled` : ""}, ${c.running || 0} running${c.queued ? ` (${c.queued} queued)` : ""}, ${c.pending || 0} pending`
    + (why ? ` — pending because: ${shown(why)}` : "");
}

// What a job's applications are and ask for: variants, `requires`, `priority`, `max_running`, time limit, measured use;
// a divisible load's plan or a workflow's balancer above them.
function renderJobDetail(j) {
  updateJobTitle(j);
  const ms = (x) => (x ? human(x * 1e6) : "-");
  $("apps").querySelector("tbody").innerHTML = (j.apps || []).map((a) => {
    const c = a.counts || {};
    // Of a workflow task's pending instances, those whose inputs are made (`ready`, as `hetsched
    // job N`'s column): they wait for a node, the others for their producers.
    const variants = [a.has_cpu ? "cpu" : "", a.has_gpu ? "gpu" : ""].filter(Boolean).join(", ") || "-";
    const mean = [a.has_cpu ? `cpu ${ms(a.mean_cpu_ms)}` : "", a.has_gpu ? `gpu ${ms(a.mean_gpu_ms)}` : ""].filter(Boolean).join(" · ") || "-";
    // One figure when the variants agree (or one has none), as `hetsched job` writes it.
    const cl = a.cpu_time_limit_ms || 0, gl = a.gpu_time_limit_ms || 0;
    const limit = !cl && !gl ? "none" : cl === gl || !gl ? ms(cl) : !cl ? ms(gl) : `cpu ${ms(cl)} · gpu ${ms(gl)}`;
    return `<tr data-app="${esc(a.name)}"><td>${esc(a.name)}</td><td>${a.tasks}</td><td>${c.pending || 0}${a.ready ? ` (${a.ready} ready)` : ""}</td><td>${runningText(c)}</td>
      <td>${c.succeeded || 0}</td><td>${c.failed || 0}</td><td>${c.cancelled || 0}</td><td>${variants}</td>
      <td class="requires">${esc((a.requires || []).join(", ") || "-")}</td><td class="priority">${a.priority || 0}</td><td class="max-running">${a.max_running || "no limit"}</td><td class="time-limit">${limit}</td>
      <td>${mean}</td><td>${ms(a.cpu_ms)}</td><td>${bytes(a.max_rss_bytes)}</td><td class="gpu-mem">${bytes(a.max_gpu_memory_bytes)}</td></tr>`;
  }).join("");
  let kind = "";
  const d = j.divisible;
  if (d) {
    kind = `divisible load <b>${esc(d.name)}</b> (${esc(d.algo)}): ${d.units_done}/${d.units} units, ${count(d.rounds, "round")}`
      + ((d.requires || []).length ? ` · on nodes with <span class="requires">${esc(d.requires.join(", "))}</span>` : "")
      + (d.message ? ` · ${esc(d.message)}` : "");
    // Who computes it and how fast, as `hetsched job N`'s table of agents: the planner sizes
    // each agent's chunks by its measured speed and memory.
    const workers = (d.workers || []).map((w) => `<tr data-worker="${esc(w.name)}"><td>${esc(w.name)}</td>`
      + `<td class="num">${(Number(w.speed) || 0).toFixed(1)}</td><td class="num">${w.memory_units ? w.memory_units : "unlimited"}</td>`
      + `<td class="num">${w.units_done}</td><td class="num">${w.chunks_done}</td><td>${w.alive ? "yes" : "no"}</td></tr>`).join("");
    if (workers) {
      kind += `<table id="divisible-workers"><thead><tr><th>agent</th><th title="measured">speed (units/s)</th><th title="the most units a chunk holds on it">memory (units)</th>`
        + `<th>units</th><th>chunks</th><th>alive</th></tr></thead><tbody>${workers}</tbody></table>`;
    }
  } else if (j.balancer) {
    kind = `workflow balanced by <b>${esc(j.balancer)}</b>: its launch node sent ${j.launch_sent} and received ${j.launch_received} messages`;
  }
  $("job-kind").innerHTML = kind;
  // A workflow's pending instances are `waiting` or `ready` (`hetsched tasks --state`), never
  // `pending`: the filter offers those states for a workflow only, and a job of another kind
  // opened with one of them chosen lists all its tasks.
  const workflow = j.kind === "workflow";
  for (const o of $("task-state").querySelectorAll(".workflow-state")) o.hidden = !workflow;
  if (!workflow && (tasksView.state === "waiting" || tasksView.state === "ready")) {
    tasksView.state = "all";
    $("task-state").value = "all";
  }
  // Only a divisible job's chunks can be `lost` (their agent died) or `undelivered`: offered for
  // such a job only.
  for (const o of $("task-state").querySelectorAll(".chunk-state")) o.hidden = !j.divisible;
  if (!j.divisible && (tasksView.state === "lost" || tasksView.state === "undelivered")) {
    tasksView.state = "all";
    $("task-state").value = "all";
  }
  // A divisible job runs chunks, not tasks: the tasks table lists them, and it has no
  // applications to show.
  tasksView.chunks = d ? (d.chunks || []) : null;
  $("apps").hidden = !!d;
}

// A chunk's state in the words of the task-state filter.
const CHUNK_STATE = { out: "running", done: "succeeded", stopped: "cancelled" };

// A divisible job's chunks in the tasks table, newest first (the last TASK_PAGE the state filter
// keeps), each with links to its stdout and stderr (`hetsched log JOB CHUNK`).
function renderChunks() {
  const all = tasksView.chunks.map((c) => ({ ...c, shown: CHUNK_STATE[c.state] || c.state }));
  const kept = all.filter((c) => tasksView.state === "all" || c.shown === tasksView.state);
  const rows = kept.slice(-TASK_PAGE).reverse();
  $("tasks").querySelector("tbody").innerHTML = rows.map((c) => {
    const log = (s) => `<a href="/api/log?job=${tasksView.job}&task=${c.chunk}&stream=${s}" target="_blank" rel="noopener" title="${esc(OUTPUT_HOVER)}">${s}</a>`;
    return `<tr data-chunk="${c.chunk}"><td>chunk ${c.chunk}</td><td>round ${c.round}</td><td>units ${c.start}..${c.end}</td>
      <td class="state-${esc(c.shown)}">${esc(c.shown)}</td><td>1</td><td>${esc(c.worker || "-")}</td><td>-</td><td>-</td><td>-</td>
      <td>${c.compute_s ? human(c.compute_s * 1e9) : "-"}</td><td>-</td><td>-</td><td>${outputLinks(log)}</td><td class="msg"></td></tr>`;
  }).join("");
  $("tasks-where").textContent = `${count(rows.length, "chunk")} shown of ${kept.length}${kept.length < all.length ? ` (${all.length} in the job)` : ""}, newest first`;
  for (const b of ["tasks-prev", "tasks-first", "tasks-next"]) $(b).disabled = true;
}

async function loadJobDetail() {
  const id = tasksView.job;
  const j = await api(`/api/job?id=${id}`);
  if (id === tasksView.job) renderJobDetail(j);
}

async function selectJob(id) {
  jobsView.selected = id;
  markSelected();
  tasksView.job = id; tasksView.cursors = ["0"];
  $("job-detail").hidden = false;
  await loadJobDetail();
  loadTasks();
}

// A task's attempt, with how many failed and how many were preempted (as `hetsched tasks`).
function attemptCell(t) {
  const notes = [[t.failed_attempts, "failed"], [t.preemptions, "preempted"]]
    .filter(([n]) => n > 0).map(([n, what]) => `${n} ${what}`);
  return notes.length ? `${t.attempt} (${notes.join(", ")})` : `${t.attempt}`;
}

// How long a workflow instance's inputs took to fetch before its program started (`fetch_ms`,
// as `hetsched tasks`' fetch column): "-" for none, or not known yet while it still fetches.
function fetchTime(t) {
  const ms = Number(t.fetch_ms || 0);
  return ms > 0 ? human(ms * 1e6) : "-";
}

// How long a task ran, or has run so far while it runs (by this browser's clock).
// A task's state with why its latest attempt ended without success, as `hetsched tasks` shows
// it: `failed (time_limit)`, `failed (signal SEGV)`, `pending (preempted)`.
function stateWithReason(t, state) {
  if (t.fetching || !t.reason) return state;
  if (t.reason === "signal" && t.signal) return `${state} (signal ${t.signal})`;
  return `${state} (${t.reason})`;
}

function runTime(t) {
  if (t.finished_ns) return human(t.finished_ns - t.started_ns);
  if (t.queued) return "queued";
  if (t.state === "running" && t.started_ns) return human(Math.max(0, Date.now() * 1e6 - t.started_ns));
  return "-";
}

async function loadTasks() {
  await meLoaded;
  const cursor = tasksView.cursors[tasksView.cursors.length - 1];
  const seq = ++tasksView.seq;
  clearTimeout(tasksView.timer);
  if (tasksView.chunks) {
    renderChunks();
    if (!FINAL.has(tasksView.jobState)) {
      tasksView.timer = setTimeout(() => { loadJobDetail().then(loadTasks).catch((e) => console.error(e)); }, 2000);
    }
    return;
  }
  const page = await api(`/api/tasks?job=${tasksView.job}&cursor=${cursor}&limit=${TASK_PAGE}&state=${encodeURIComponent(tasksView.state)}`);
  // A later request (another page, filter or job, or the refresh timer) went out meanwhile: its
  // answer is the one to show, whichever comes back first.
  if (seq !== tasksView.seq) return;
  // Ids and cursors as strings: a workflow's are past what a JavaScript number holds exactly.
  tasksView.next = page.next_cursor_text;
  const body = $("tasks").querySelector("tbody");
  body.innerHTML = page.tasks.map((t) => {
    // A running multi-node task: its first node, how many more, and all of them on hover.
    const more = (t.nodes || []).length > 1
      ? `<span class="nodes" title="${esc(t.nodes.join(", "))}"> (+${t.nodes.length - 1})</span>` : "";
    const log = (s) => `<a href="/api/log?job=${t.job_id}&task=${t.id_text}&stream=${s}" target="_blank" rel="noopener" title="${esc(OUTPUT_HOVER)}">${s}</a>`;
    // Running on its node, its inputs still being fetched (a workflow instance): its program
    // has not started, as `hetsched tasks` says.
    const state = t.fetching ? "fetching" : t.state;
    return `<tr data-task="${t.id_text}"><td>${t.id_text}</td><td>${esc(t.app)}</td><td>${t.index}</td><td class="state-${esc(state)}">${esc(stateWithReason(t, state))}</td>
      <td>${attemptCell(t)}</td><td>${esc(t.node || "-")}${more}</td><td>${esc(t.variant || "-")}</td>
      <td>${esc((t.devices || []).join(",") || "-")}</td><td>${fetchTime(t)}</td><td>${runTime(t)}</td>
      <td>${t.usage ? human((t.usage.cpu_user_ms + t.usage.cpu_system_ms) * 1e6) : "-"}</td><td>${t.usage ? bytes(t.usage.max_rss_bytes) : "-"}</td>
      <td class="gpu-mem">${t.usage ? bytes(t.usage.max_gpu_memory_bytes) : "-"}</td>
      <td class="output">${t.attempt > 0 ? outputLinks(log) : "-"}</td><td class="msg">${esc(t.message)}</td></tr>`;
  }).join("");
  const n = tasksView.cursors.length;
  $("tasks-where").textContent = `page ${n} · ${count(page.tasks.length, "task")} shown of ${page.total} in the job`;
  $("tasks-prev").disabled = n === 1;
  $("tasks-first").disabled = n === 1;
  $("tasks-next").disabled = !page.next_cursor;
  clearTimeout(tasksView.timer);
  // While the job runs, refresh this page only.
  if (!FINAL.has(tasksView.jobState)) {
    tasksView.timer = setTimeout(() => { loadJobDetail().catch((e) => console.error(e)); loadTasks(); }, 2000);
  }
}

$("task-state").addEventListener("change", (e) => { tasksView.state = e.target.value; tasksView.cursors = ["0"]; loadTasks(); });
$("tasks-next").addEventListener("click", () => { if (tasksView.next && tasksView.next !== "0") { tasksView.cursors.push(tasksView.next); loadTasks(); } });
$("tasks-prev").addEventListener("click", () => { if (tasksView.cursors.length > 1) { tasksView.cursors.pop(); loadTasks(); } });
$("tasks-first").addEventListener("click", () => { tasksView.cursors = ["0"]; loadTasks(); });

// ---------------------------------------------------------------- automatic allocation

// The server's [[allocation]] queues (shown only when it has some), looked at every 10 s.
function renderAllocations(queues) {
  $("allocations-section").hidden = queues.length === 0;
  $("allocations").innerHTML = queues.map((q) => {
    const agents = (a) => (a.agents || []).length ? ` <span class="agents" title="${esc(a.agents.join(", "))}">${count(a.agents.length, "agent")}</span>` : "";
    const list = (q.allocations || []).map((a) => `${esc(a.id)} <span class="badge">${esc(a.state.toLowerCase())}</span>${agents(a)}`).join(" · ") || "none";
    const failing = q.error ? `<div class="error" title="the last look at the batch system failed">${esc(q.error)}</div>` : "";
    const paused = q.paused ? ` <span class="badge paused" title="hetsched allocations --resume ${esc(q.name)}">paused</span>` : "";
    return `<div class="queue" data-queue="${esc(q.name)}"><b>${esc(q.name)}</b>${paused} (${esc(q.manager)}, ${count(q.nodes, "node")} per allocation, at most ${q.max_allocations}): ${list} · ${q.submitted} submitted${failing}</div>`;
  }).join("");
}
// Polled only when the server has queues, and not in a `#events=N` snapshot (whose network
// must go idle).
let allocationPoll = null;
function loadAllocations() {
  return api("/api/allocations").then((queues) => {
    renderAllocations(queues);
    if (queues.length && !allocationPoll && !stopAfter) allocationPoll = setInterval(loadAllocations, 10000);
  }).catch((e) => console.error(e));
}

// ---------------------------------------------------------------- users and their accounts

// Days the panel's accounts cover (`/api/usage`'s default: the last 7, today included).
const USAGE_DAYS = 7;
// Hours as `hetsched usage` writes them: two decimals, three significant digits below 0.01 (a
// short span's few core-seconds read `0.00169`, not `0.00`), `<0.0001` below a ten-thousandth.
const hours = (x) => {
  const h = Number(x) || 0;
  if (h <= 0 || h >= 0.01 || !Number.isFinite(h)) return h.toFixed(2);
  if (h < 1e-4) return "<0.0001";
  return h.toFixed(Math.min(6, Math.max(2, 2 - Math.floor(Math.log10(h)))));
};
const percent = (f) => (f === null || f === undefined ? "-" : `${(100 * f).toFixed(1)} %`);
const capOf = (n, show) => (n === null || n === undefined ? "-" : show(n));

// One row: a user of `/api/users` (or null: an owner the accounts name that is no user now, as a
// removed one) and its accounts over the span (or null: it held nothing then).
function userRow(name, u, acc, totalCoreSeconds) {
  const fair = (f, digits) => (f === null || f === undefined ? "-" : (f / 3600).toFixed(digits));
  const cls = u && u.admin ? "admin" : u ? "" : "gone";
  const title = u && u.admin ? "the admin's own jobs: what the nodes hold outside every user's" : u ? "" : "no user of this name now";
  const share = acc && totalCoreSeconds > 0 ? percent(acc.core_seconds / totalCoreSeconds) : "-";
  const cell = (c, v) => `<td class="num ${c}">${v}</td>`;
  return `<tr data-user="${esc(name)}" class="${cls}"><td title="${esc(title)}">${esc(name)}</td>`
    + cell("shares", u ? u.shares : "-")
    + cell("max-cores", u ? capOf(u.max_cores, String) : "-")
    + cell("max-memory", u ? capOf(u.max_memory_bytes, bytes) : "-")
    + cell("max-gpus", u ? capOf(u.max_gpus, String) : "-")
    + cell("cores", u ? u.cores : "-")
    + cell("memory", u ? bytes(u.memory_bytes) : "-")
    + cell("gpus", u ? u.gpus : "-")
    + cell("fair-usage", u ? fair(u.fair_usage, 3) : "-")
    + cell("fair-per-share", u ? fair(u.fair_usage_per_share, 3) : "-")
    + cell("pending-jobs", u ? u.pending_jobs : "-")
    + cell("running-jobs", u ? u.running_jobs : "-")
    + cell("core-hours", acc ? esc(hours(acc.core_hours)) : "-")
    + cell("gpu-hours", acc ? esc(hours(acc.gpu_hours)) : "-")
    + cell("memory-gib-hours", acc ? esc(hours(acc.memory_gib_hours)) : "-")
    + cell("core-share", share) + "</tr>";
}

function renderUsers(users, usage) {
  const accounts = new Map((usage.users || []).map((a) => [a.user, a]));
  const total = usage.total || {}, cap = usage.capacity || {}, util = usage.utilisation || {};
  const names = users.users.map((u) => u.name);
  // Owners the accounts name that are no user now (removed): their rows too.
  for (const a of usage.users || []) if (!names.includes(a.user)) names.push(a.user);
  const byName = new Map(users.users.map((u) => [u.name, u]));
  // A user sees its own row only (the admin's is listed to the admin): its share of itself says nothing.
  const everyOwner = users.users.some((u) => u.admin);
  const rows = names.map((n) => userRow(n, byName.get(n) || null, accounts.get(n) || null, everyOwner ? total.core_seconds : 0));
  rows.push(`<tr class="total"><td>total</td>${"<td></td>".repeat(11)}<td class="num">${esc(hours(total.core_hours))}</td><td class="num">${esc(hours(total.gpu_hours))}</td><td class="num">${esc(hours(total.memory_gib_hours))}</td><td></td></tr>`);
  $("users").querySelector("tbody").innerHTML = rows.join("");
  $("usage-span").textContent = `accounts ${usage.since} – ${usage.until} (UTC)`;
  $("usage-summary").textContent = `Last ${USAGE_DAYS} days: the live nodes offered ${hours(cap.core_hours)} core-hours, ${hours(cap.gpu_hours)} GPU-hours and ${hours(cap.memory_gib_hours)} memory GiB-hours; running work used ${percent(util.cores)} of the cores, ${percent(util.gpus)} of the GPUs and ${percent(util.memory)} of the memory.`
    + (users.fair_share ? ` Fair share is on (half-life ${human(users.fair_share.half_life_s * 1e9)}).` : " Fair share is off.");
  $("usage-summary").dataset.loaded = "1";
}

// The users (`/api/users`) and their accounts over the last 7 days (`/api/usage`), looked at every
// 10 s — not in a `#events=N` snapshot (whose network must go idle).
let usersPoll = null;
function loadUsers() {
  return Promise.all([api("/api/users"), api(`/api/usage?since=${USAGE_DAYS - 1}d&until=today`)])
    .then(([users, usage]) => renderUsers(users, usage))
    .catch((e) => console.error(e))
    .finally(() => { if (!usersPoll && !stopAfter) usersPoll = setInterval(loadUsers, 10000); });
}

// ---------------------------------------------------------------- stream topologies

// Tuples/s: whole numbers from 100 on, one decimal below.
const perS = (x) => { const v = Number(x) || 0; return v >= 100 ? Math.round(v).toString() : v.toFixed(1); };
// A latency in µs, as µs, ms or s.
function micros(us) {
  if (us < 1000) return `${us} µs`;
  if (us < 1e6) return `${(us / 1000).toFixed(1)} ms`;
  return `${(us / 1e6).toFixed(2)} s`;
}
// A worker's links to the other workers: TLS on a cluster that runs it, else plain TCP
// (authenticated by the worker key, not encrypted); "-" until it reports.
const links = (w) => (w.encrypted === true ? "tls" : w.encrypted === false ? "tcp" : "-");
// Workers their agents cannot start: `start_error` says why, as the agent said it.
const cannotStart = (t) => (t.workers || []).filter((w) => w.start_error);
// A topology with executors its workers gave up on (a multi-lang program that kept ending):
// they pass no tuple, whatever the state says. In the words of `hetsched topology show` and
// `list` (`running, degraded: sink#0 given up`); empty when none was given up on.
const degradedText = (t) => (t.degraded ? `degraded: ${(t.executors_given_up || []).map(shown).join(" ")} given up` : "");
const GIVEN_UP_HELP = "executors whose program ended too often to be started again (more than 5 restarts in 5 minutes): they pass no tuple";

// `shown`: the rows by topology name, kept across refreshes and patched in place (see morph), as
// the jobs' are, so a row pressed as the list refreshes is the one released and the click counts.
const topoView = { selected: null, seq: 0, shown: new Map() };

// A row of the Topologies table: `/api/topologies`' document of one topology (the JSON of
// `hetsched topology list --output json`).
function topologyRow(t) {
  const workers = t.workers || [];
  const failing = cannotStart(t);
  const badge = failing.length
    ? ` <span class="badge cannot-start" title="${esc(failing.map((w) => `worker ${w.worker} on ${w.node}: ${w.start_error}`).join("\n"))}">${failing.length} cannot start</span>` : "";
  const draining = t.workers_draining
    ? ` <span class="badge" title="workers of an earlier placement handing their executors' state over">+${t.workers_draining} draining</span>` : "";
  const moves = t.reschedules || [];
  const latency = t.latency_count ? `${micros(t.latency_p50_us)} / ${micros(t.latency_p99_us)}` : "-";
  const cell = (c, v, title) => `<td class="num ${c}"${title ? ` title="${esc(title)}"` : ""}>${v}</td>`;
  const degraded = t.degraded ? `, <span class="badge degraded" title="${esc(GIVEN_UP_HELP)}">${esc(degradedText(t))}</span>` : "";
  return `<td class="name">${esc(t.name)}</td><td class="owner">${esc(t.owner)}</td><td class="state state-${esc(t.state)}">${esc(t.state)}${degraded}</td><td class="placer">${esc(t.placer)}</td>`
    + cell("generation", t.generation)
    + `<td class="workers">${t.workers_running}/${workers.length}${draining}${badge}</td>`
    + cell("nodes-used", t.nodes_used, `of ${count(t.nodes_alive, "live node")}`)
    + cell("throughput", perS(t.throughput_tuples_per_s))
    + cell("inter-node", perS(t.inter_node_tuples_per_s))
    + cell("latency", latency)
    + cell("reschedules", moves.length, moves.slice(-5).map((r) => r.cause).join(", "));
}

// The Topologies panel, shown when the server has any (killed ones stay listed, as in
// `hetsched topology list`).
function renderTopologies(list) {
  $("topologies-section").hidden = list.length === 0;
  const rows = list.map((t) => {
    let tr = topoView.shown.get(t.name);
    if (!tr) {
      tr = document.createElement("tr");
      tr.className = "clickable"; tr.dataset.topology = t.name;
      tr.addEventListener("click", () => selectTopology(t.name));
    }
    morph(tr, topologyRow(t));
    tr.classList.toggle("selected", t.name === topoView.selected);
    return tr;
  });
  topoView.shown = new Map(rows.map((tr) => [tr.dataset.topology, tr]));
  placeInOrder($("topologies").querySelector("tbody"), rows);
  $("topologies").dataset.loaded = "1";
  if (topoView.selected !== null && !list.some((t) => t.name === topoView.selected)) {
    topoView.selected = null;
    $("topology-detail").hidden = true;
  }
}

// One topology (`/api/topology?name=`, the JSON of `hetsched topology show --output json`): its
// workers — where each runs, its links, the connections it refused, and why its agent cannot
// start it when it cannot — and its executors' rates.
function renderTopology(t) {
  const workers = t.workers || [];
  const degraded = t.degraded ? `, ${degradedText(t)}` : "";
  $("topology-title").textContent = `Topology ${shown(t.name)} (${shown(t.owner)}) — ${shown(t.state)}${degraded}, ${shown(t.placer)}, generation ${t.generation}: `
    + `${t.workers_running}/${count(workers.length, "worker")} running on ${count(t.nodes_used, "node")}, ${perS(t.throughput_tuples_per_s)} tuples/s from its spouts`;
  const moves = t.reschedules || [];
  $("topology-reschedules").textContent = moves.length
    ? `${moves.length} reschedule(s), latest first: ` + moves.slice(-5).reverse().map((r) =>
      `${shown(r.cause)} at ${new Date(r.at_ns / 1e6).toLocaleTimeString()} → generation ${r.generation} on ${r.nodes} node(s), gain ${(100 * r.gain).toFixed(0)} %`).join(" · ")
    : "never rescheduled";
  const status = (w) => (w.start_error
    ? `<td class="start-error" title="why its agent cannot start it (hetsched topology show)">cannot start: ${esc(w.start_error)}</td>`
    : `<td class="status">${t.state !== "running" ? "stopped" : w.pid ? "running" : "starting"}</td>`);
  $("topology-workers").querySelector("tbody").innerHTML = workers.map((w) =>
    `<tr data-worker="${w.worker}" class="${w.start_error ? "cannot-start" : ""}"><td>${w.worker}</td><td class="worker-node">${esc(w.node)}</td>`
    + `<td class="num">${w.process}</td><td class="num pid">${w.pid ?? "-"}</td><td class="addr">${esc(w.addr || "-")}</td>`
    + `<td class="links">${links(w)}</td><td class="num refused">${w.refused_connections ?? "-"}</td>`
    + `<td class="msg">${esc((w.executors || []).join(", "))}</td>${status(w)}</tr>`).join("")
    || `<tr><td colspan="9">not placed yet: no live node may run it</td></tr>`;
  // A multi-lang executor's program restarts, and `failed` once its worker gave up on it (as
  // `hetsched topology show`'s table); why its program last ended on hover.
  const executorState = (e) => (e.gave_up
    ? `<td class="executor-state" title="${esc(e.ended || "")}">failed</td>`
    : `<td class="executor-state"${e.ended ? ` title="program last ended: ${esc(e.ended)}"` : ""}>-</td>`);
  $("topology-executors").querySelector("tbody").innerHTML = (t.executors || []).map((e) =>
    `<tr data-executor="${esc(e.executor)}" class="${e.gave_up ? "given-up" : ""}"><td>${esc(e.executor)}</td><td>${esc(e.node || "-")}</td>`
    + `<td class="num">${e.running_in_worker ?? "-"}</td><td class="num">${e.pid ?? "-"}</td>`
    + `<td class="num received">${perS(e.received_per_s)}</td><td class="num emitted">${perS(e.emitted_per_s)}</td>`
    + `<td class="num cpu">${(Number(e.cpu_percent) || 0).toFixed(0)} %</td>`
    + `<td class="num restarts">${e.restarts ?? "-"}</td>${executorState(e)}</tr>`).join("");
  $("topology-detail").dataset.topology = t.name;
  $("topology-detail").hidden = false;
}

async function loadTopology() {
  const name = topoView.selected;
  if (name === null) return;
  const seq = ++topoView.seq;
  const t = await api(`/api/topology?name=${encodeURIComponent(name)}`);
  // Another topology was clicked meanwhile: its answer is the one to show.
  if (seq === topoView.seq && name === topoView.selected) renderTopology(t);
}

function selectTopology(name) {
  topoView.selected = name;
  for (const tr of $("topologies").querySelectorAll("tbody tr")) tr.classList.toggle("selected", tr.dataset.topology === name);
  loadTopology().catch((e) => console.error(e));
}

// The topologies (and the one clicked), looked at every 5 s — not in a `#events=N` snapshot
// (whose network must go idle).
let topologiesPoll = null;
function loadTopologies() {
  return api("/api/topologies")
    .then((list) => { renderTopologies(list); return loadTopology(); })
    .catch((e) => console.error(e))
    .finally(() => { if (!topologiesPoll && !stopAfter) topologiesPoll = setInterval(loadTopologies, 5000); });
}

// ---------------------------------------------------------------- start

// The page's first answers fill in sections above the jobs table (the node cards, the Users
// panel's rows, the allocation and topology panels shown once they have something): drawn as
// they came, they pushed the table down the page under a pointer about to click a job, which
// then clicked another. So `<main>` is out of sight from the start (class `loading`, app.css:
// laid out, not drawn, not clickable) until the first answer of everything asked for here —
// jobs, nodes, allocations, users, topologies and the event stream's first update — has been
// rendered or has failed, and is then shown once. Reserving the space instead cannot work: how
// many users, queues and nodes there are is known only from the answers. Later changes (a new
// user, a topology submitted minutes later) may still move the table, as they must. A server
// too slow to answer them all within LOAD_WAIT_MS still gets its page shown.
const LOAD_WAIT_MS = 10000;
const loaded = [];

initCharts();
loaded.push(loadJobs().catch((e) => console.error(e)));
// The nodes at once, before the first update; an update that came first is newer, so it stays.
// Those whose agents left are counted, as the updates count them.
loaded.push(api("/api/nodes?all=1").then((all) => {
  if (liveState.events) return;
  const nodes = all.map(nodeOfApi);
  nodesView.left = nodes.filter((n) => n.left);
  renderNodes(nodes.filter((n) => !n.left), nodesView.left.length);
}).catch((e) => console.error(e)));
// `#events=N` in the address: stop listening after N updates (headless snapshots and tests need the
// page's network to go idle; a person never needs it).
const stopAfter = parseInt((location.hash.match(/events=(\d+)/) || [])[1] || "0", 10);
loaded.push(loadAllocations(), loadUsers(), loadTopologies());
const events = new EventSource("/api/events");
events.addEventListener("tick", (m) => {
  try { onTick(JSON.parse(m.data)); } catch (e) { console.error(e); }
  if (stopAfter && liveState.events >= stopAfter) { events.close(); $("live").dataset.closed = "1"; $("live").textContent += " (stopped)"; }
});
events.onerror = () => { $("live").textContent = "reconnecting…"; };
// After the listener above: the first update is rendered when this settles. A stream refused
// (429 past its bound) or cut settles it too.
loaded.push(new Promise((settle) => { events.addEventListener("tick", settle, { once: true }); events.addEventListener("error", settle, { once: true }); }));
Promise.race([Promise.allSettled(loaded), new Promise((settle) => setTimeout(settle, LOAD_WAIT_MS))])
  .then(() => document.querySelector("main").classList.remove("loading"));
