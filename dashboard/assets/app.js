// Koord-Queue dashboard: draws the view the server streams for the open page
// (server-sent events from /api/live). Every text from the cluster goes in
// through textContent, never as HTML.
"use strict";

const $main = document.getElementById("main");
const $live = document.getElementById("live");
const $problems = document.getElementById("problems");
let source = null;      // the open EventSource
let page = null;        // { kind, params, skeleton, last }
const expanded = new Set();   // quota names whose subtree is open
const shownChildren = new Map(); // quota name -> children shown (paging a wide tree)
const CHILDREN_PAGE = 50;
const PALETTE = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#000000", "#9e4f87"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "text") node.textContent = v;
    // Through the CSSOM: the page's policy forbids inline style attributes.
    else if (k === "style") node.style.cssText = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// `parent`'s children become `children`, leaving out the absent ones.
function put(parent, children) {
  parent.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children.flat(Infinity)) if (c) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function amounts(map) {
  const entries = Object.entries(map || {});
  return entries.length ? entries.map(([k, v]) => `${k} ${v}`).join(", ") : "–";
}

function ago(iso) {
  if (!iso) return "";
  const s = Math.round((Date.now() - Date.parse(iso)) / 1000);
  if (Number.isNaN(s)) return iso;
  const future = s < 0, a = Math.abs(s);
  const text = a < 60 ? `${a}s` : a < 3600 ? `${Math.floor(a / 60)}m` : a < 86400 ? `${Math.floor(a / 3600)}h ${Math.floor((a % 3600) / 60)}m` : `${Math.floor(a / 86400)}d`;
  return future ? `in ${text}` : `${text} ago`;
}

function when(iso) {
  return iso ? el("time", { datetime: iso, title: iso }, ago(iso)) : el("span", { class: "muted" }, "–");
}

function unitLink(ns, name) {
  return el("a", { href: `#/unit/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`, "data-unit": `${ns}/${name}` }, name);
}

function queueLink(name) {
  return el("a", { href: `#/queue/${encodeURIComponent(name)}`, "data-queue-link": name }, name);
}

function bar(percent, borrowing) {
  const p = percent === null || percent === undefined ? null : Math.max(0, Math.min(100, percent));
  const cls = "bar" + (p !== null && p >= 100 ? " full" : borrowing ? " borrowing" : "");
  const label = p === null ? "no max" : `${Math.round(percent)}% of max`;
  return el("span", { class: cls, role: "img", "aria-label": label, title: label },
    el("span", { style: `width:${p === null ? 0 : p}%` }));
}

// ---- routing -------------------------------------------------------------

function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query || "");
  if (parts[0] === "queue" && parts[1]) return { kind: "queue", params: { view: "queue", name: parts[1], page: params.get("page") || "0", q: params.get("q") || "" } };
  if (parts[0] === "unit" && parts[2]) return { kind: "unit", params: { view: "unit", namespace: parts[1], name: parts[2] } };
  if (parts[0] === "history") return { kind: "history", params: { view: "history" } };
  return { kind: "overview", params: { view: "overview" } };
}

function open() {
  const r = route();
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === r.kind) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  const skeleton = SKELETONS[r.kind](r.params);
  $main.replaceChildren(skeleton.root);
  page = { kind: r.kind, params: r.params, skeleton, last: null };
  document.body.dataset.view = r.kind;
  document.body.dataset.ready = "false";
  delete document.body.dataset.firstDrawMs;
  connect(r.params);
}

function connect(params) {
  if (source) source.close();
  const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v !== undefined));
  source = new EventSource(`/api/live?${query}`);
  $live.textContent = "connecting…";
  source.addEventListener("view", (e) => {
    const view = JSON.parse(e.data);
    if (!page || view.view !== page.kind) return;
    page.last = view;
    draw();
    const now = new Date();
    $live.textContent = `Live · updated ${now.toLocaleTimeString()}`;
    $live.classList.remove("stale");
    document.body.dataset.ready = "true";
    // When the page first showed figures, in ms since the document's time
    // origin: after a full navigation, its load time as a person sees it
    // (the page-load benchmark reads it; polling for `ready` would add its
    // own interval).
    if (!document.body.dataset.firstDrawMs) document.body.dataset.firstDrawMs = String(Math.round(performance.now()));
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  });
  source.addEventListener("problem", (e) => showProblems([e.data]));
  source.addEventListener("signed-out", () => { location.href = "/signin"; });
  source.onerror = () => { $live.textContent = "reconnecting…"; $live.classList.add("stale"); };
}

function draw() {
  if (!page || !page.last) return;
  showProblems(page.last.problems || []);
  page.skeleton.draw(page.last);
}

function showProblems(list) {
  $problems.hidden = list.length === 0;
  $problems.replaceChildren(...list.map((p) => el("div", {}, p)));
}

// ---- overview ------------------------------------------------------------

function card(key, label) {
  const value = el("div", { class: "value", "data-figure": key }, "…");
  const sub = el("div", { class: "sub", "data-figure-sub": key });
  return { node: el("div", { class: "card" }, el("div", { class: "label" }, label), value, sub), value, sub };
}

const SKELETONS = {
  overview() {
    const cards = { capacity: card("capacity", "Root capacity"), used: card("used", "Used"), waiting: card("waiting", "Waiting units"), quotas: card("quotas", "Quotas") };
    const search = el("input", { type: "search", placeholder: "Find a quota…", "aria-label": "Find a quota", id: "quota-search" });
    const expandAll = el("button", { type: "button", onclick: () => { for (const q of page.last.quotas) expanded.add(q.name); draw(); } }, "Expand all");
    const collapseAll = el("button", { type: "button", onclick: () => { expanded.clear(); draw(); } }, "Collapse all");
    const tree = el("div", { class: "tree", id: "quota-tree", role: "tree", "aria-label": "Quota tree" });
    const busiest = el("tbody");
    search.addEventListener("input", () => draw());
    const root = el("section", {},
      el("h1", {}, "Overview"),
      el("div", { class: "cards" }, Object.values(cards).map((c) => c.node)),
      el("h2", {}, "Busiest queues"),
      el("table", { id: "busiest" }, el("thead", {}, el("tr", {}, el("th", {}, "Queue"), el("th", { class: "num" }, "Waiting"), el("th", { class: "num" }, "Admitted"), el("th", {}, "Used of max"))), busiest),
      el("h2", {}, "Quota tree"),
      el("div", { class: "controls" }, search, expandAll, collapseAll,
        el("span", { class: "muted" }, "Bars: used against max; striped: borrowing beyond min; red: at max.")),
      tree);
    return {
      root,
      draw(v) {
        const cap = v.capacity;
        cards.capacity.value.textContent = cap ? amounts(cap) : "not visible to you";
        cards.capacity.sub.textContent = cap ? "allocatable of the nodes" : "you may not list nodes";
        cards.used.value.textContent = amounts(v.used);
        cards.used.sub.textContent = v.usedOfCapacity != null ? `${Math.round(v.usedOfCapacity)}% of capacity` : "held by the top quotas";
        cards.waiting.value.textContent = String(v.waiting);
        cards.waiting.sub.textContent = v.clusterWide ? "in the whole cluster" : "in your namespaces";
        cards.quotas.value.textContent = String(v.quotaCount);
        cards.quotas.sub.textContent = v.clusterWide ? "in the cluster" : "serving your namespaces";
        busiest.replaceChildren(...(v.busiest.length ? v.busiest.map((b) => el("tr", { "data-busy": b.queue },
          el("td", {}, queueLink(b.queue)), el("td", { class: "num" }, b.pending), el("td", { class: "num" }, b.admitted),
          el("td", {}, bar(b.usedOfMax, false), b.usedOfMax != null ? `${Math.round(b.usedOfMax)}%` : ""))) :
          [el("tr", {}, el("td", { colspan: 4, class: "muted" }, "No queue holds or waits for anything."))]));
        drawTree(tree, v.quotas, search.value.trim().toLowerCase());
      },
    };
  },

  queue(params) {
    const search = el("input", { type: "search", placeholder: "Find a unit, job, namespace or reason…", "aria-label": "Find in the backlog", id: "backlog-search", value: params.q || "" });
    let timer = null;
    search.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => { location.hash = `#/queue/${encodeURIComponent(params.name)}?q=${encodeURIComponent(search.value)}`; }, 400);
    });
    const prev = el("button", { type: "button", id: "prev" }, "← Previous");
    const next = el("button", { type: "button", id: "next" }, "Next →");
    const where = el("span", { id: "page-info", "aria-live": "polite" });
    const go = (d) => { const p = Math.max(0, Number(params.page || 0) + d); location.hash = `#/queue/${encodeURIComponent(params.name)}?page=${p}${params.q ? `&q=${encodeURIComponent(params.q)}` : ""}`; };
    prev.addEventListener("click", () => go(-1));
    next.addEventListener("click", () => go(1));
    const quota = el("div", { class: "cards" });
    const head = el("tr");
    const backlog = el("tbody");
    const admitted = el("tbody");
    const admittedNote = el("p", { class: "muted" });
    const root = el("section", {},
      el("h1", {}, "Queue ", el("code", { id: "queue-name" }, params.name)),
      quota,
      el("h2", {}, "Backlog, in serving order"),
      el("div", { class: "controls" }, search, prev, where, next),
      el("table", { id: "backlog" }, el("thead", {}, head), backlog),
      el("h2", {}, "Admitted and running"),
      admittedNote,
      el("table", { id: "admitted" }, el("thead", {}, el("tr", {}, el("th", {}, "Unit"), el("th", {}, "Namespace"), el("th", {}, "Job"), el("th", {}, "Phase"), el("th", {}, "Released"), el("th", {}, "Requests"))), admitted));
    return {
      root,
      draw(v) {
        const q = v.quota;
        quota.replaceChildren(...(q ? [
          ["Used", amounts(q.used)], ["Min (effective)", amounts(q.effectiveMin)], ["Max", amounts(q.max)],
          ["Borrowed", amounts(q.borrowed)], ["Lent", amounts(q.lent)], ["Waiting / admitted", `${q.pending} / ${q.admitted}`],
        ].map(([l, val]) => el("div", { class: "card" }, el("div", { class: "label" }, l), el("div", { class: "value", "data-quota-figure": l }, val))) :
          [el("p", { class: "muted" }, "The quota of this queue is not visible to you.")]));
        const estimates = v.backlog.some((u) => u.estimatedStart);
        put(head, [...["Position", "Unit", "Namespace", "Job", "Priority", "Requests", "Why it waits", "Waiting since"].map((h, i) => el("th", { class: i === 0 || i === 4 ? "num" : null }, h)),
          estimates ? el("th", {}, "Estimated start") : null]);
        backlog.replaceChildren(...(v.backlog.length ? v.backlog.map((u) => el("tr", { "data-row": `${u.metadata.namespace}/${u.metadata.name}` },
          el("td", { class: "num", "data-position": "" }, u.position != null ? u.position : "–"),
          el("td", {}, unitLink(u.metadata.namespace, u.metadata.name)),
          el("td", {}, u.metadata.namespace),
          el("td", {}, u.job ? `${u.job.kind}/${u.job.name}` : "–"),
          el("td", { class: "num" }, u.priority),
          el("td", {}, amounts(u.requests)),
          el("td", {}, el("span", { class: "reason", "data-reason": u.reason.type }, u.reason.type), " ", el("span", { class: "muted" }, u.reason.message)),
          el("td", {}, when(u.waitingSince)),
          estimates ? el("td", { "data-estimate": "" }, u.estimatedStart ? when(u.estimatedStart) : "–") : null)) :
          [el("tr", {}, el("td", { colspan: 8, class: "muted" }, v.search ? "No waiting unit matches." : "Nothing waits in this queue."))]));
        const pages = Math.max(1, Math.ceil(v.total / v.size));
        where.textContent = `${v.total} waiting · page ${v.page + 1} of ${pages}`;
        where.dataset.total = String(v.total);
        prev.disabled = v.page <= 0;
        next.disabled = v.page + 1 >= pages;
        admittedNote.textContent = v.admittedTotal > v.admitted.length ? `${v.admitted.length} of ${v.admittedTotal} shown, the latest released first.` : `${v.admittedTotal} unit(s).`;
        admitted.replaceChildren(...v.admitted.map((u) => el("tr", { "data-admitted": `${u.namespace}/${u.name}` },
          el("td", {}, unitLink(u.namespace, u.name)), el("td", {}, u.namespace), el("td", {}, u.job || "–"),
          el("td", {}, u.phase || "–"), el("td", {}, when(u.releasedAt)), el("td", {}, amounts(u.requests)))));
      },
    };
  },

  unit(params) {
    const facts = el("dl", { class: "facts", id: "unit-facts" });
    const path = el("div", { class: "path", id: "quota-path" });
    const timeline = el("ol", { class: "timeline", id: "timeline" });
    const events = el("tbody");
    const root = el("section", {},
      el("h1", {}, "Unit ", el("code", {}, `${params.namespace}/${params.name}`)),
      facts,
      el("h2", {}, "Charged to"), path,
      el("h2", {}, "Timeline"), timeline,
      el("h2", {}, "Events"),
      el("table", { id: "events" }, el("thead", {}, el("tr", {}, el("th", {}, "When"), el("th", {}, "Type"), el("th", {}, "Reason"), el("th", {}, "Object"), el("th", {}, "Message"))), events));
    return {
      root,
      draw(v) {
        const p = v.pending || {};
        const rows = [
          ["Phase", v.phase || "not adopted yet", "phase"],
          ["Queue", queueLink(v.queue), "queue"],
          ["Job", v.job && v.job.name ? `${v.job.kind || ""}/${v.job.name}` : "–", "job"],
          ["Priority", v.priority, "priority"],
          ["Requests", amounts(v.requests), "requests"],
          ["Why it waits", p.reason ? el("span", {}, el("span", { class: "reason", "data-reason": p.reason.type }, p.reason.type), " ", p.reason.message) : (v.message || "–"), "reason"],
          ["Position", p.position != null ? String(p.position) : "–", "position"],
          ["Waiting since", p.waitingSince ? when(p.waitingSince) : "–", "since"],
        ];
        if (p.estimatedStart) rows.push(["Estimated start", when(p.estimatedStart), "estimate"]);
        facts.replaceChildren(...rows.flatMap(([k, val, key]) => [el("dt", {}, k), el("dd", { "data-fact": key }, val)]));
        put(path, (v.quotaPath.length ? v.quotaPath.flatMap((q, i) => [
          i ? el("span", { "aria-hidden": "true" }, "→") : null,
          el("span", { class: "step", "data-path": q.name }, el("b", {}, q.name), ` used ${amounts(q.used)} of max ${amounts(q.max)}`),
        ]) : [el("span", { class: "muted" }, "The quota is not visible to you.")]));
        // In time order (the server's strings may differ in their fractions).
        const steps = [...v.timeline].sort((a, b) => (Date.parse(a.time) || 0) - (Date.parse(b.time) || 0));
        timeline.replaceChildren(...steps.map((s) => el("li", {}, el("b", {}, s.what), " ", when(s.time), el("div", { class: "muted" }, s.detail || ""))));
        const evs = [...v.events].sort((a, b) => (Date.parse(a.time) || 0) - (Date.parse(b.time) || 0));
        events.replaceChildren(...(evs.length ? evs.map((e) => el("tr", {}, el("td", {}, when(e.time)), el("td", {}, e.type || ""), el("td", {}, e.reason || ""), el("td", {}, e.object), el("td", {}, e.message || ""))) :
          [el("tr", {}, el("td", { colspan: 5, class: "muted" }, "No Events."))]));
      },
    };
  },

  history() {
    const quotaSelect = el("select", { id: "history-quota", "aria-label": "Quota" });
    const resourceSelect = el("select", { id: "history-resource", "aria-label": "Resource" }, el("option", { value: "cpu" }, "cpu"), el("option", { value: "memory" }, "memory"));
    quotaSelect.addEventListener("change", () => draw());
    resourceSelect.addEventListener("change", () => draw());
    const charts = el("div", { class: "charts", id: "charts" });
    const note = el("p", { class: "muted", id: "history-note" });
    const root = el("section", {}, el("h1", {}, "History"), note,
      el("div", { class: "controls" }, el("label", { for: "history-quota" }, "Quota"), quotaSelect, el("label", { for: "history-resource" }, "Resource"), resourceSelect),
      charts);
    return {
      root,
      draw(v) {
        const h = v.history;
        const samples = (h && h.items) || [];
        note.textContent = samples.length ? `${samples.length} samples, one every ${h.intervalSeconds || 60}s, kept by the scheduler for the last ${Math.round((h.retentionSeconds || 0) / 3600)}h. Prometheus keeps longer.` : "No samples yet.";
        const names = [...new Set(samples.flatMap((s) => (s.quotas || []).map((q) => q.name)))].sort();
        const chosen = quotaSelect.value && names.includes(quotaSelect.value) ? quotaSelect.value : names[0];
        quotaSelect.replaceChildren(...names.map((n) => el("option", { value: n, selected: n === chosen }, n)));
        const res = resourceSelect.value || "cpu";
        const t = (s) => Date.parse(s.time);
        const quotaSeries = ["used", "min", "max"].map((f, i) => ({
          name: f, dash: i === 0 ? null : i === 1 ? "6 3" : "2 3",
          // The history's amounts are integers: millicores for cpu.
          points: samples.map((s) => { const q = (s.quotas || []).find((x) => x.name === chosen); return [t(s), q && q[f] && q[f][res] != null ? Number(q[f][res]) / (res === "cpu" ? 1000 : 1) : null]; }),
        }));
        const perQueue = (pick) => {
          const queues = [...new Set(samples.flatMap((s) => (s.queues || []).map((q) => q.name)))];
          const last = samples[samples.length - 1] || { queues: [] };
          const weight = (n) => { const q = (last.queues || []).find((x) => x.name === n); return q ? pick(q) || 0 : 0; };
          return queues.sort((a, b) => weight(b) - weight(a)).slice(0, 8).map((n) => ({
            name: n, points: samples.map((s) => { const q = (s.queues || []).find((x) => x.name === n); return [t(s), q ? pick(q) : null]; }),
          }));
        };
        const totals = ["reclaimed", "preempted"].map((f, i) => ({ name: f, dash: i ? "6 3" : null,
          points: samples.map((s) => [t(s), (s.queues || []).reduce((a, q) => a + (q[f] || 0), 0)]) }));
        charts.replaceChildren(
          chart(`Quota ${chosen || ""}: ${res} used against min and max`, quotaSeries, res === "cpu" ? "cores" : "bytes", "quota"),
          chart("Waiting units per queue", perQueue((q) => q.pending), "units", "pending"),
          chart("Time to release, p90 per queue", perQueue((q) => q.releaseSeconds ? q.releaseSeconds.p90 : null), "seconds", "release"),
          chart("Reclaims and preemptions per sample", totals, "units", "reclaims"));
      },
    };
  },
};

// ---- the quota tree -------------------------------------------------------

function drawTree(container, quotas, search) {
  const byName = new Map(quotas.map((q) => [q.name, q]));
  const children = new Map();
  const tops = [];
  for (const q of quotas) {
    if (q.parent && byName.has(q.parent)) {
      if (!children.has(q.parent)) children.set(q.parent, []);
      children.get(q.parent).push(q);
    } else tops.push(q);
  }
  // Searching shows the matches and their ancestors, opened.
  let visible = null;
  if (search) {
    visible = new Set();
    for (const q of quotas) {
      if (!q.name.toLowerCase().includes(search)) continue;
      let at = q;
      while (at && !visible.has(at.name)) { visible.add(at.name); at = at.parent ? byName.get(at.parent) : null; }
    }
  }
  const node = (q, depth) => {
    const kids = (children.get(q.name) || []).filter((c) => !visible || visible.has(c.name));
    const borrowing = Object.keys(q.borrowed || {}).length > 0;
    const line = [
      el("span", { class: "qname" }, q.name),
      bar(q.usedOfMax, borrowing),
      el("span", { class: "figs" },
        "used ", el("b", { "data-fig": "used" }, amounts(q.used)),
        " · min ", el("b", {}, amounts(q.effectiveMin)),
        " · max ", el("b", { "data-fig": "max" }, amounts(q.max)),
        borrowing ? [" · borrowed ", el("b", {}, amounts(q.borrowed))] : null,
        Object.keys(q.lent || {}).length ? [" · lent ", el("b", {}, amounts(q.lent))] : null,
        q.fairShareWeight ? [" · fair-share weight ", el("b", {}, q.fairShareWeight)] : null,
        q.isParent ? null : [" · ", el("span", { "data-fig": "pending" }, `${q.pending} waiting`), ", ", `${q.admitted} admitted `, queueLink(q.name)]),
    ];
    if (!kids.length) return el("div", { class: "leaf", role: "treeitem", "data-quota": q.name }, line);
    const isOpen = visible ? true : expanded.has(q.name) || depth === 0 && !expanded.has(`-${q.name}`);
    const details = el("details", { open: isOpen, role: "treeitem", "data-quota": q.name },
      el("summary", {}, line, el("span", { class: "tag" }, `${kids.length} ${kids.length === 1 ? "child" : "children"}`)));
    details.addEventListener("toggle", () => {
      if (details.open) { expanded.add(q.name); expanded.delete(`-${q.name}`); }
      else { expanded.delete(q.name); expanded.add(`-${q.name}`); }
    });
    if (isOpen) {
      const limit = shownChildren.get(q.name) || CHILDREN_PAGE;
      details.append(...kids.slice(0, limit).map((c) => node(c, depth + 1)));
      if (kids.length > limit) {
        details.append(el("button", { type: "button", class: "more", onclick: () => { shownChildren.set(q.name, limit + CHILDREN_PAGE); draw(); } },
          `Show ${Math.min(CHILDREN_PAGE, kids.length - limit)} more of ${kids.length - limit}`));
      }
    }
    return details;
  };
  const shownTops = tops.filter((q) => !visible || visible.has(q.name));
  // The top level pages like any other (a flat tree of 1,000 quotas).
  const topLimit = shownChildren.get("") || CHILDREN_PAGE;
  const more = shownTops.length > topLimit ? el("button", { type: "button", class: "more", onclick: () => { shownChildren.set("", topLimit + CHILDREN_PAGE); draw(); } },
    `Show ${Math.min(CHILDREN_PAGE, shownTops.length - topLimit)} more of ${shownTops.length - topLimit}`) : null;
  put(container, shownTops.length ? [shownTops.slice(0, topLimit).map((q) => node(q, 0)), more] : [el("p", { class: "muted" }, search ? "No quota matches." : "No quota is visible to you.")]);
}

// ---- charts: inline SVG ---------------------------------------------------

function chart(title, series, unit, key) {
  const W = 560, H = 220, L = 48, R = 10, T = 10, B = 28;
  const points = series.flatMap((s) => s.points.filter((p) => p[1] !== null && p[1] !== undefined));
  const box = el("div", { class: "chart", "data-chart": key }, el("h3", {}, title));
  if (!points.length) { box.append(el("p", { class: "muted" }, "No data.")); return box; }
  // The time axis spans every sample, with or without a value.
  const xs = series.flatMap((s) => s.points.map((p) => p[0])).filter((x) => !Number.isNaN(x)), ys = points.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1), y1 = Math.max(...ys, 1) * 1.1;
  const X = (x) => L + (x - x0) / (x1 - x0) * (W - L - R), Y = (y) => H - B - y / y1 * (H - T - B);
  const fmt = (y) => (y >= 1e9 ? `${(y / 2 ** 30).toFixed(1)}Gi` : y >= 1e6 ? `${(y / 2 ** 20).toFixed(0)}Mi` : Number.isInteger(y) ? String(y) : y.toFixed(1));
  const grid = [0, 0.25, 0.5, 0.75, 1].map((f) => [
    svg("line", { x1: L, x2: W - R, y1: Y(y1 * f), y2: Y(y1 * f), stroke: "#c9ccd1" }),
    svg("text", { x: L - 4, y: Y(y1 * f) + 4, "text-anchor": "end" }, fmt(y1 * f)),
  ]);
  const time = (x) => new Date(x).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  const axis = [svg("text", { x: L, y: H - 8 }, time(x0)), svg("text", { x: W - R, y: H - 8, "text-anchor": "end" }, time(x1)),
    svg("text", { x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle" }, unit)];
  const lines = series.map((s, i) => {
    let d = "", pen = false;
    for (const [x, y] of s.points) {
      if (y === null || y === undefined) { pen = false; continue; }
      d += `${pen ? "L" : "M"}${X(x).toFixed(1)},${Y(y).toFixed(1)}`;
      pen = true;
    }
    const colour = PALETTE[i % PALETTE.length];
    const attrs = { d, fill: "none", stroke: colour, "stroke-width": 2 };
    if (s.dash) attrs["stroke-dasharray"] = s.dash;
    // Few samples (a young scheduler): each is marked, so that a lone point shows.
    const shown = s.points.filter((p) => p[1] !== null && p[1] !== undefined);
    const dots = shown.length <= 30 ? shown.map(([x, y]) => svg("circle", { cx: X(x).toFixed(1), cy: Y(y).toFixed(1), r: 3 + (series.length - i) * 0.8, fill: colour })) : [];
    return [svg("path", attrs, svg("title", {}, s.name)), dots];
  });
  box.append(svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title }, grid, axis, lines),
    el("div", { class: "legend" }, series.map((s, i) => el("span", {}, el("i", { style: `border-color:${PALETTE[i % PALETTE.length]};border-top-style:${s.dash ? "dashed" : "solid"}` }), s.name))));
  return box;
}

// ---- start ----------------------------------------------------------------

fetch("/api/me").then((r) => (r.status === 401 ? (location.href = "/signin") : r.json())).then((me) => {
  if (me && me.user) document.getElementById("who").textContent = me.user;
}).catch(() => {});
window.addEventListener("hashchange", open);
// The live stream is closed when the page goes: a browser allows six
// connections to one host over HTTP/1.1, and streams of pages left behind
// (kept in its back/forward cache) would hold them until the next pages
// wait for a slot. Coming back opens it again.
window.addEventListener("pagehide", () => { if (source) { source.close(); source = null; } });
window.addEventListener("pageshow", (e) => { if (e.persisted) open(); });
// Relative times ("3m ago") age between two pushes.
setInterval(draw, 15000);
open();
