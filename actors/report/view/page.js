// swerve view: the page's script. Everything it shows comes from the JSON blocks in this page
// (nothing is fetched), and every text of the run is put in as text, never as markup: an attempt's
// output is the policy's, and a policy may try to write a <script>.
"use strict";

const PAGE_ROWS = 50;
const parsed = {};

function data(name) {
  if (!(name in parsed)) {
    const block = document.getElementById("data-" + name);
    parsed[name] = block ? JSON.parse(block.textContent) : null;
  }
  return parsed[name];
}

const INDEX = data("index");

// h("td", {class: "num"}, "text", child, ...): an element; strings become text nodes.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function fmt(value, digits = 3) {
  if (value === undefined || value === null) return "–";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(digits);
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

function pct(value) {
  return value === undefined || value === null ? "–" : (100 * value).toFixed(1) + "%";
}

function outcome(name) {
  return h("span", {class: "outcome o-" + name}, name);
}

function go(hash) {
  location.hash = hash;
}

function query(hash) {
  const at = hash.indexOf("?");
  return new URLSearchParams(at < 0 ? "" : hash.slice(at + 1));
}

function withQuery(path, params) {
  const text = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined)).toString();
  return text ? path + "?" + text : path;
}

function pager(total, page, onPage) {
  const pages = Math.max(1, Math.ceil(total / PAGE_ROWS));
  return h("span", {class: "pager"},
    h("button", {id: "page-prev", disabled: page <= 0, onclick: () => onPage(page - 1)}, "‹ prev"),
    `page ${page + 1} of ${pages} (${total} rows)`,
    h("button", {id: "page-next", disabled: page >= pages - 1, onclick: () => onPage(page + 1)}, "next ›"));
}

function select(id, label, options, value, onChange) {
  return h("label", {}, label + " ",
    h("select", {id, onchange: (event) => onChange(event.target.value)},
      options.map(([v, text]) => h("option", {value: v, selected: v === value}, text))));
}

function search(id, placeholder, value, onChange) {
  return h("input", {id, type: "search", placeholder, value, onchange: (event) => onChange(event.target.value)});
}

// ---- overview --------------------------------------------------------------------------------

function overview() {
  const parts = [h("h1", {}, "run " + INDEX.run),
    h("p", {}, `stages: ${INDEX.stages.join(" → ")}; `, `${INDEX.steps.length} training steps recorded; `,
      INDEX.eval ? `${INDEX.eval.tasks.length} eval tasks` : "no eval")];
  if (INDEX.eval) parts.push(h("h2", {}, "eval"), figures());
  return [...parts, paired()];
}

// Each stage against the one before it, paired task by task (summary.json).
function paired() {
  const summary = INDEX.summary || {};
  const deltas = Object.entries(summary).filter(([key, value]) => key.includes("_minus_") && !key.endsWith("_by_family") && value);
  if (!deltas.length) return null;
  return [h("h2", {}, "paired differences (summary.json)"), h("table", {id: "paired"},
    h("tr", {}, ["", "delta", "95% interval", "better", "worse", "same"].map((t) => h("th", {}, t))),
    deltas.map(([key, d]) => h("tr", {}, h("td", {}, key), h("td", {class: "num"}, pct(d.delta)),
      h("td", {class: "num"}, `${pct(d.ci95_low)} … ${pct(d.ci95_high)}`), h("td", {class: "num better"}, d.better),
      h("td", {class: "num worse"}, d.worse), h("td", {class: "num"}, d.same))))];
}

function figures() {
  const ev = INDEX.eval;
  const families = [...new Set(ev.stages.flatMap((s) => Object.keys(ev.figures[s].per_family || {})))].sort();
  return h("table", {id: "eval-figures"},
    h("tr", {}, h("th", {}, "stage"), h("th", {}, "pass@1"), families.map((f) => h("th", {}, f)), h("th", {}, "tamper rate")),
    ev.stages.map((s) => h("tr", {}, h("td", {}, s), h("td", {class: "num"}, pct(ev.figures[s]["pass@1"])),
      families.map((f) => h("td", {class: "num"}, pct(((ev.figures[s].per_family || {})[f] || {})["pass@1"]))),
      h("td", {class: "num"}, pct(ev.figures[s].tamper_rate)))));
}

// ---- steps -----------------------------------------------------------------------------------

function steps(hash) {
  const q = query(hash);
  const stage = q.get("stage") || "";
  const page = Number(q.get("page") || 0);
  const rows = INDEX.steps.filter((s) => !stage || s.stage === stage);
  const stages = [...new Set(INDEX.steps.map((s) => s.stage))];
  const shown = rows.slice(page * PAGE_ROWS, (page + 1) * PAGE_ROWS);
  const names = ["reward_mean", "resolved_rate", "staleness_mean", "stale_token_fraction", "turns_mean", "step_time_s"];
  return [h("h1", {}, "training steps"),
    h("div", {class: "controls"},
      select("filter-stage", "stage", [["", "all"], ...stages.map((s) => [s, s])], stage,
        (v) => go(withQuery("#/steps", {stage: v}))),
      pager(rows.length, page, (p) => go(withQuery("#/steps", {stage, page: p})))),
    h("table", {id: "steps-table"},
      h("tr", {}, ["stage", "step", "version", "trajectories", "outcomes", ...names].map((t) => h("th", {}, t))),
      shown.map((s) => h("tr", {class: "link step-row", "data-chunk": s.chunk, onclick: () => go("#/step/" + s.chunk)},
        h("td", {}, s.stage), h("td", {class: "num"}, s.step), h("td", {class: "num"}, fmt(s.metrics.policy_version)),
        h("td", {class: "num"}, s.trained ? `${s.trajectories} of ${s.trained}` : s.trajectories),
        h("td", {}, Object.entries(s.outcomes).map(([o, n]) => [outcome(o), ` ${n} `])),
        names.map((n) => h("td", {class: "num"}, fmt(s.metrics[n])))))),
    rows.length ? null : h("p", {class: "muted"}, "no training steps in this run (an eval or SFT stage has none)")];
}

function stepOf(chunk) {
  return INDEX.steps.find((s) => s.chunk === chunk);
}

function trajLabel(t) {
  return `g${t.group_id}·m${t.member}${t.attempt ? "·a" + t.attempt : ""}`;
}

function step(hash) {
  const chunk = hash.split("/")[2].split("?")[0];
  const info = stepOf(chunk);
  const rows = data(chunk) || [];
  const q = query(hash);
  const want = q.get("outcome") || "";
  const text = q.get("q") || "";
  const shown = rows.map((t, i) => [t, i]).filter(([t]) => (!want || t.outcome === want) && (!text || t.task_id.includes(text)));
  const starts = rows.map((t) => t.started_s).filter((v) => v);
  const t0 = Math.min(...starts);
  const t1 = Math.max(...rows.map((t) => t.finished_s).filter((v) => v));
  const span = Math.max(t1 - t0, 1e-6);
  const lanes = h("div", {class: "lanes", id: "lanes"}, shown.map(([t, i]) => {
    const left = starts.length ? (100 * (t.started_s - t0)) / span : 0;
    const width = starts.length ? Math.max((100 * (t.finished_s - t.started_s)) / span, 0.5) : 100;
    const versions = t.versions.length ? "v" + t.versions.join(",") : "no tokens";
    return h("div", {class: "lane"},
      h("span", {class: "label"}, h("a", {href: `#/group/${chunk}/${t.group_id}`}, trajLabel(t)), " ", t.task_id),
      h("div", {class: "track"}, h("div", {class: "bar o-" + t.outcome, "data-traj": i, style: `left:${left}%;width:${width}%`,
        title: `${t.task_id} ${trajLabel(t)}: ${t.outcome}, reward ${fmt(t.reward)}, ${t.turns} turns, ` +
               `${versions}, staleness ${fmt(t.staleness)} at training, ${fmt(t.finished_s - t.started_s, 1)} s`,
        onclick: () => go(`#/traj/${chunk}/${i}`)},
        `${t.turns} turns · ${versions} · stale ${fmt(t.staleness)} · r ${fmt(t.reward, 2)}`)));
  }));
  const groups = [...new Set(rows.map((t) => t.group_id))];
  const outcomes = [...new Set(rows.map((t) => t.outcome))];
  return [h("h1", {}, `step ${info.step}` + (INDEX.stages.length > 1 ? ` (${info.stage})` : "")),
    h("table", {class: "kv", id: "step-metrics"}, Object.entries(info.metrics).map(([k, v]) => h("tr", {}, h("td", {}, k), h("td", {class: "num"}, fmt(v))))),
    h("h2", {}, `trajectories (${rows.length}${info.trained ? " of the " + info.trained + " trained" : ""}): start to end`),
    h("div", {class: "controls"},
      select("filter-outcome", "outcome", [["", "all"], ...outcomes.map((o) => [o, o])], want,
        (v) => go(withQuery("#/step/" + chunk, {outcome: v, q: text}))),
      search("filter-task", "task id", text, (v) => go(withQuery("#/step/" + chunk, {outcome: want, q: v})))),
    lanes,
    h("p", {class: "muted", id: "axis"}, starts.length ? `time runs left to right: 0 to ${fmt(span, 1)} s after the first of these started`
      : "no start and end times in this run's records"),
    h("h2", {}, "groups"),
    h("p", {}, groups.map((g) => [h("a", {class: "group-link", href: `#/group/${chunk}/${g}`}, `group ${g}`), " "]))];
}

// ---- a trajectory ----------------------------------------------------------------------------

const PALETTE = ["#cfe3ff", "#ffd9b3", "#d5f5d5", "#f2d0f5", "#fff1a8", "#c8f0ee", "#f8c8c8", "#e0e0e0"];

function versionColour(version, newest) {
  return PALETTE[Math.max(0, newest - version) % PALETTE.length];
}

function expandRuns(runs) {
  const out = [];
  for (const [value, count] of runs || []) for (let i = 0; i < count; i++) out.push(value);
  return out;
}

// Each reply's tokens: [{text, version, trained}], reply by reply.
function replies(t) {
  if (!t.tokens) return [];
  const versions = expandRuns(t.tokens.versions);
  const trained = expandRuns(t.tokens.trained);
  const out = [];
  let at = 0;
  for (const length of t.tokens.replies) {
    const reply = [];
    for (let i = at; i < at + length; i++) reply.push({text: t.tokens.text[i], id: t.tokens.ids[i], version: versions[i], trained: trained[i]});
    out.push(reply);
    at += length;
  }
  return out;
}

function tokenSpans(reply, t) {
  const newest = t.trained_version;
  return h("pre", {class: "tokens"}, reply.map((tok) => h("span", {
    class: "tok" + (tok.trained ? "" : " masked"), style: `background:${versionColour(tok.version, newest)}`,
    "data-version": tok.version, "data-trained": tok.trained,
    title: `token ${tok.id}: policy v${tok.version}, staleness ${newest - tok.version} at training` +
           (tok.trained ? "" : ", masked out of the loss")}, tok.text)));
}

function legend(t) {
  const seen = [...new Set(expandRuns(t.tokens ? t.tokens.versions : []))].sort((a, b) => a - b);
  if (!seen.length) return null;
  return h("p", {class: "legend", id: "legend"}, "generated under: ",
    seen.map((v) => h("span", {style: `background:${versionColour(v, t.trained_version)}`}, `v${v} (staleness ${t.trained_version - v})`)),
    h("span", {class: "tok masked"}, "masked out of the loss"), h("span", {class: "muted"}, "grey border: prompt and observations (not trained)"));
}

function conversation(t, withTokens) {
  const generated = withTokens ? replies(t) : [];
  const assistant = t.messages.filter((m) => m.role === "assistant").length;
  const aligned = generated.length === assistant;
  let reply = 0;
  const shown = t.messages.map((m) => {
    const body = m.role === "assistant" && aligned ? tokenSpans(generated[reply++], t) : h("pre", {}, messageText(m));
    return h("div", {class: "msg " + m.role}, h("div", {class: "role"}, m.role), body);
  });
  if (generated.length && !aligned) {
    shown.push(h("h2", {}, "generated tokens, reply by reply"),
      generated.map((r, i) => h("div", {class: "msg assistant"}, h("div", {class: "role"}, `reply ${i + 1}`), tokenSpans(r, t))));
  }
  return shown;
}

function messageText(m) {
  if (typeof m.content === "string") return m.content;
  if (Array.isArray(m.content)) return m.content.map((part) => part.text || JSON.stringify(part)).join("");
  return JSON.stringify(m.tool_calls || m.content);
}

function diff(patch) {
  if (!patch) return h("p", {class: "muted", id: "diff"}, "no change");
  return h("pre", {class: "diff", id: "diff"}, patch.split("\n").map((line) => h("div", {
    class: line.startsWith("diff --git") ? "file" : line.startsWith("@@") ? "hunk"
      : line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : ""}, line || " ")));
}

function verdict(t) {
  const rows = [["outcome", outcome(t.outcome)], ["reward", fmt(t.reward)]];
  if ("advantage" in t) rows.push(["advantage", fmt(t.advantage)], ["trained from", "v" + t.trained_version],
    ["staleness at training", fmt(t.staleness)]);
  if (t.versions) rows.push(["generated under", t.versions.map((v) => "v" + v).join(", ") || "–"]);
  rows.push(["turns", fmt(t.turns)]);
  if (t.started_s && t.finished_s) rows.push(["took", fmt(t.finished_s - t.started_s, 1) + " s"]);
  if (t.unresolved_reason) rows.push(["not graded by its tests", h("span", {class: "flag"}, t.unresolved_reason)]);
  for (const [path, why] of Object.entries(t.tampered || {})) rows.push(["protected path touched", h("span", {class: "flag"}, `${path}: ${why}`)]);
  for (const problem of t.grading_problems || []) rows.push(["grading", h("span", {class: "flag"}, problem)]);
  if (t.infra_source) rows.push(["infra error", h("span", {class: "flag"}, `${t.infra_source}: ${t.error}`)]);
  else if (t.error) rows.push(["error", t.error]);
  if (t.harness && Object.keys(t.harness).length) rows.push(["harness", JSON.stringify(t.harness)]);
  const tests = Object.entries(t.test_status || {});
  const hidden = Object.entries(t.hidden_status || {});
  return h("div", {id: "verdict"},
    h("table", {class: "kv"}, rows.map(([k, v]) => h("tr", {}, h("td", {}, k), h("td", {}, v)))),
    tests.length ? h("table", {id: "tests"}, h("tr", {}, h("th", {}, "test"), h("th", {}, "status")),
      tests.map(([id, status]) => h("tr", {}, h("td", {}, id), h("td", {class: status === "PASSED" ? "" : "flag"}, status)))) : null,
    hidden.length ? h("table", {id: "hidden"}, h("tr", {}, h("th", {}, "hidden case"), h("th", {}, "status")),
      hidden.map(([id, status]) => h("tr", {}, h("td", {}, id), h("td", {class: status === "PASSED" ? "" : "flag"}, status)))) : null);
}

function trajectory(hash) {
  const [, , chunk, index] = hash.split("/");
  const t = (data(chunk) || [])[Number(index)];
  if (!t) return [h("p", {}, "no such trajectory")];
  const info = stepOf(chunk);
  return [h("h1", {}, `${t.task_id} · ${trajLabel(t)}`),
    h("p", {}, h("a", {href: "#/step/" + chunk}, `step ${info.step}`), " · ", h("a", {href: `#/group/${chunk}/${t.group_id}`}, `group ${t.group_id}`)),
    h("h2", {}, "verdict"), verdict(t),
    h("h2", {}, "change"), diff(t.model_patch),
    h("h2", {}, "conversation"), legend(t), h("div", {id: "conversation"}, conversation(t, true))];
}

function group(hash) {
  const [, , chunk, id] = hash.split("/");
  const members = (data(chunk) || []).map((t, i) => [t, i]).filter(([t]) => String(t.group_id) === id)
    .sort(([a], [b]) => a.member - b.member);
  const info = stepOf(chunk);
  return [h("h1", {}, `group ${id} · ${members.length ? members[0][0].task_id : ""}`),
    h("p", {}, h("a", {href: "#/step/" + chunk}, `step ${info.step}`), `: ${members.length} members recorded`),
    h("div", {class: "cards", id: "group"}, members.map(([t, i]) => h("div", {class: "card member"},
      h("h2", {}, h("a", {href: `#/traj/${chunk}/${i}`}, trajLabel(t)), " ", outcome(t.outcome)),
      h("table", {class: "kv"}, [["reward", fmt(t.reward)], ["advantage", fmt(t.advantage)], ["turns", fmt(t.turns)],
        ["staleness", fmt(t.staleness)]].map(([k, v]) => h("tr", {}, h("td", {}, k), h("td", {class: "num " + k}, v)))),
      diff(t.model_patch))))];
}

// ---- eval ------------------------------------------------------------------------------------

function evalView(hash) {
  const ev = INDEX.eval;
  if (!ev) return [h("h1", {}, "eval"), h("p", {class: "muted"}, "this run has no eval")];
  const q = query(hash);
  const family = q.get("family") || "";
  const change = q.get("change") || "";
  const text = q.get("q") || "";
  const page = Number(q.get("page") || 0);
  const rows = ev.tasks.filter((t) => (!family || t.family === family) && (!change || t.change === change)
    && (!text || t.task_id.includes(text)));
  const families = [...new Set(ev.tasks.map((t) => t.family).filter((f) => f))].sort();
  const state = {family, change, q: text};
  const last = ev.stages[ev.stages.length - 1];
  const compared = `${last}_minus_${ev.stages[ev.stages.length - 2]}`;
  const familyDelta = family && ((INDEX.summary || {})[compared + "_by_family"] || {})[family];
  return [h("h1", {}, "eval: every task under every stage"), figures(), paired(),
    h("div", {class: "controls"},
      select("filter-family", "family", [["", "all"], ...families.map((f) => [f, f])], family,
        (v) => go(withQuery("#/eval", {...state, family: v}))),
      ev.stages.length > 1 ? select("filter-change", `after ${last}`, [["", "all"], ["better", "better"], ["worse", "worse"], ["same", "same"]],
        change, (v) => go(withQuery("#/eval", {...state, change: v}))) : null,
      search("filter-eval-task", "task id", text, (v) => go(withQuery("#/eval", {...state, q: v}))),
      pager(rows.length, page, (p) => go(withQuery("#/eval", {...state, page: p})))),
    familyDelta ? h("p", {id: "family-delta"}, `${compared} on ${family}, paired over its tasks: ${pct(familyDelta.delta)} ` +
      `[${pct(familyDelta.ci95_low)} … ${pct(familyDelta.ci95_high)}], ${familyDelta.better} better, ${familyDelta.worse} worse`) : null,
    h("table", {id: "eval-table"},
      h("tr", {}, h("th", {}, "task"), h("th", {}, "family"), h("th", {}, "stratum"), ev.stages.map((s) => h("th", {}, s)),
        ev.stages.length > 1 ? h("th", {}, `after ${last}`) : null),
      rows.slice(page * PAGE_ROWS, (page + 1) * PAGE_ROWS).map((t) => h("tr", {class: "link task-row", "data-task": t.task_id,
        onclick: () => go("#/task/" + encodeURIComponent(t.task_id))},
        h("td", {}, t.task_id), h("td", {}, t.family || "–"), h("td", {}, t.stratum || "–"),
        ev.stages.map((s) => h("td", {class: "num stage-" + s}, t.stages[s] ? `${t.stages[s].resolved}/${t.stages[s].scored}` : "–")),
        ev.stages.length > 1 ? h("td", {class: t.change || ""}, t.change || "–") : null)))];
}

function task(hash) {
  const id = decodeURIComponent(hash.split("/")[2]);
  const ev = INDEX.eval;
  const row = ev.tasks.find((t) => t.task_id === id);
  if (!row) return [h("p", {}, "no such task")];
  const attempts = (data(row.chunk) || {})[id] || {};
  return [h("h1", {}, `${id}` + (row.family ? ` (${row.family})` : "")),
    h("p", {}, h("a", {href: "#/eval"}, "all tasks"), row.change ? [" · after the last stage: ", h("span", {class: row.change}, row.change)] : null),
    h("div", {class: "cards", id: "compare"}, ev.stages.map((s) => h("div", {class: "card stage-column", "data-stage": s},
      h("h2", {}, s, " ", row.stages[s] ? `${row.stages[s].resolved}/${row.stages[s].scored} resolved` : ""),
      (attempts[s] || []).map((a) => h("details", {class: "attempt", open: true},
        h("summary", {}, `attempt ${a.member}${a.attempt ? "·" + a.attempt : ""} `, outcome(a.outcome), ` ${a.turns} turns`),
        verdict(a), h("h2", {}, "change"), diff(a.model_patch),
        h("details", {}, h("summary", {}, "conversation"), conversation(a, false)))))))];
}

// ---- routing ---------------------------------------------------------------------------------

const ROUTES = [["#/steps", steps], ["#/step/", step], ["#/traj/", trajectory], ["#/group/", group], ["#/eval", evalView],
  ["#/task/", task]];

function render() {
  const hash = location.hash || "#/";
  const route = ROUTES.find(([prefix]) => hash.startsWith(prefix));
  const main = document.getElementById("main");
  main.replaceChildren(...[route ? route[1](hash) : overview()].flat(2).filter((x) => x));
  document.getElementById("crumbs").textContent = hash.split("?")[0].slice(2);
  window.scrollTo(0, 0);
}

window.addEventListener("hashchange", render);
render();
