// BackIntel run viewer. Every string from a run is put on the page as text (textContent,
// text nodes): nothing from the data is ever parsed as HTML. Data arrives through
// BACKINTEL.load(name, json) from the files in data/ (script tags: no server, no network).
"use strict";

(function () {
  const ROW_H = 28;
  const FILTERS = ["outcome", "split", "level", "family", "store"];
  const state = {
    index: null,
    rows: [],
    shown: [],
    chunks: {},
    waiting: {},
    open: null,
  };

  const { add, el, fmt, cost, badge, table, cell, renderTrial } = window.BackIntelTrial;

  function $(id) {
    return document.getElementById(id);
  }

  // ---- data loading -----------------------------------------------------------------------
  function loadChunk(name, done) {
    if (state.chunks[name]) {
      done(state.chunks[name]);
      return;
    }
    const queue = (state.waiting[name] = state.waiting[name] || []);
    queue.push(done);
    if (queue.length > 1) return;
    const script = document.createElement("script");
    script.src = "data/" + name + ".js";
    script.onerror = () => {
      $("status").textContent = "Could not load data/" + name + ".js";
    };
    document.body.appendChild(script);
  }

  function withTrial(prefix, n, done) {
    const size = state.index.chunk_size;
    loadChunk(prefix + "-" + Math.floor(n / size), (chunk) => done(chunk[n % size]));
  }

  window.BACKINTEL = {
    load(name, data) {
      if (name === "index") {
        start(data);
        return;
      }
      state.chunks[name] = data;
      const queue = state.waiting[name] || [];
      delete state.waiting[name];
      queue.forEach((done) => done(data));
    },
  };

  // ---- header -----------------------------------------------------------------------------
  function fact(label, value) {
    return el("div", "fact", el("b", "", value), label);
  }

  function reviewedMark(outcome) {
    // a person's override (reviews.jsonl): short in the list, spelled out on hover
    const mark = el("span", "badge reviewed", "✎ " + outcome);
    mark.title = "reviewed by a person: " + outcome + " (the recorded outcome follows)";
    return mark;
  }

  function renderHeader(index) {
    const h = index.headline;
    $("title").textContent = "Run " + h.run_id + " — " + h.analyst + (h.model ? " / " + h.model : "");
    document.title = "BackIntel " + h.run_id;
    h.banners.forEach((b) => add($("banners"), el("div", "banner", b)));
    h.warnings.forEach((w) => add($("banners"), el("div", "banner", "warning: " + w)));
    const rate = h.pass_rate === null ? "n/a" : (100 * h.pass_rate).toFixed(1) + "%";
    add($("headline"), [
      fact("trials", h.trials),
      fact("attempted", h.attempted),
      fact("passed", h.passed),
      fact("pass rate (passed / attempted)", rate + (h.pass_rate_interval ? " " + h.pass_rate_interval : "")),
      fact("failed", h.failed),
      fact("blocked", h.blocked),
      fact("not run", h.not_run),
      fact("median latency", h.latency_median_s === null ? "n/a" : h.latency_median_s.toFixed(2) + " s"),
      fact("tokens in / out", h.input_tokens + " / " + h.output_tokens),
      fact("cost", cost(h.cost_usd)),
    ]);
    if (h.rates && h.rates.length) {
      const table = el("table", "rates");
      table.id = "rates";
      add(table, el("tr", "", el("th", "", "figure"), el("th", "", "estimate"), el("th", "", "95% interval (method)")));
      h.rates.forEach(([label, value, ci]) => add(table, el("tr", "", el("td", "", label), el("td", "n", value), el("td", "", ci))));
      add($("headline"), el("details", "rates", el("summary", "", "every rate with its interval"), table));
    }
    renderLeaderboard(index.leaderboard);
    $("charts-box").hidden = !index.charts.length;
    index.charts.forEach((c) => {
      const img = document.createElement("img");
      img.alt = c.title;
      img.src = c.src;
      add($("charts"), el("figure", "", img));
    });
  }

  // A model matrix's leaderboard: pass rate with its interval and method, ranks tied where
  // the paired difference to the rank above holds 0.
  function renderLeaderboard(board) {
    const box = $("leaderboard");
    box.hidden = !board;
    if (!board) return;
    add(box, el("h2", "", "Leaderboard — matrix " + board.matrix_id));
    const head = ["rank", "model", "pass rate", "95% interval", "method", "passed / attempted",
      "blocked", "tokens", "cost", "latency p50", "paired difference to the rank above"];
    add(box, table("leaderboard", head, board.rows.map((r) => [r.rank, r.model, r.rate,
      r.interval, r.method, r.passed, r.blocked, r.tokens, r.cost, r.p50, r.paired])));
  }

  // ---- trial list (virtual: only the rows in view are in the DOM) -------------------------
  const COLUMNS = [
    ["case", (r) => r.case],
    ["trial", (r) => r.trial],
    ["outcome", (r) => (r.reviewed ? el("span", "", reviewedMark(r.reviewed), " ", badge(r.outcome)) : badge(r.outcome))],
    ["split", (r) => r.split],
    ["level", (r) => r.level],
    ["family", (r) => r.family],
    ["store", (r) => r.store],
    ["latency s", (r) => fmt(r.latency_s, 2)],
    ["tokens", (r) => fmt(r.tokens)],
    ["cost", (r) => (r.cost_usd === null ? "unknown" : r.cost_usd.toFixed(4))],
  ];

  function setupFilters() {
    FILTERS.forEach((key) => {
      const select = $("f-" + key);
      const counts = {};
      state.rows.forEach((r) => (counts[r[key]] = (counts[r[key]] || 0) + 1));
      const all = el("option", "", "all (" + state.rows.length + ")");
      all.value = "";
      add(select, all);
      Object.keys(counts)
        .sort()
        .forEach((value) => {
          const option = el("option", "", value + " (" + counts[value] + ")");
          option.value = value;
          add(select, option);
        });
      select.addEventListener("change", applyFilters);
    });
    $("f-text").addEventListener("input", applyFilters);
    $("f-sort").addEventListener("change", applyFilters);
    COLUMNS.forEach(([name]) => add($("list-head"), el("span", "", name)));
    $("list").addEventListener("scroll", renderRows);
  }

  function applyFilters() {
    const want = {};
    FILTERS.forEach((key) => (want[key] = $("f-" + key).value));
    const text = $("f-text").value.trim().toLowerCase();
    let shown = state.rows.filter(
      (r) => FILTERS.every((k) => !want[k] || r[k] === want[k]) && (!text || r.hay.includes(text)),
    );
    const sort = $("f-sort").value;
    if (sort) {
      const [key, dir] = sort.split(":");
      const sign = dir === "desc" ? -1 : 1;
      shown = shown.slice().sort((a, b) => {
        const x = a[key];
        const y = b[key];
        if (x === null && y === null) return a.n - b.n;
        if (x === null) return 1;
        if (y === null) return -1;
        return sign * (x - y) || a.n - b.n;
      });
    }
    state.shown = shown;
    $("count").textContent = shown.length + " of " + state.rows.length + " trials";
    $("list-inner").style.height = shown.length * ROW_H + "px";
    $("list").scrollTop = 0;
    renderRows();
  }

  function renderRows() {
    const list = $("list");
    const first = Math.max(0, Math.floor(list.scrollTop / ROW_H) - 5);
    const last = Math.min(state.shown.length, first + Math.ceil(list.clientHeight / ROW_H) + 10);
    const nodes = [];
    for (let i = first; i < last; i++) {
      const r = state.shown[i];
      const row = el("div", "row" + (state.open === r.n ? " open" : ""));
      row.style.top = i * ROW_H + "px";
      row.dataset.n = String(r.n);
      row.setAttribute("role", "button");
      COLUMNS.forEach(([name, get]) => add(row, el("span", "c-" + name.split(" ")[0], get(r))));
      row.addEventListener("click", () => openTrial(r.n));
      nodes.push(row);
    }
    $("list-inner").replaceChildren(...nodes);
  }

  function openTrial(n) {
    state.open = n;
    renderRows();
    $("detail").replaceChildren(el("p", "muted", "loading…"));
    withTrial("run", n, (t) => {
      if (state.open === n) $("detail").replaceChildren(renderTrial(t));
    });
  }

  // ---- comparison -------------------------------------------------------------------------
  function statValue(v) {
    if (v === null || v === undefined) return "n/a";
    if (Array.isArray(v)) return v.length ? el("ul", "", v.map((x) => el("li", "", typeof x === "object" ? JSON.stringify(x) : String(x)))) : "none";
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }

  function verdictOf(result) {
    if ("verdict" in result) return String(result.verdict);
    if ("accepted" in result) return result.accepted ? "ACCEPT" : "REJECT";
    return "";
  }

  function renderComparison(c) {
    const box = $("compare");
    const parts = [el("h2", "", "Baseline " + c.baseline_id + " → candidate " + c.candidate_id)];
    [["baseline", state.index.baseline && state.index.baseline.headline], ["candidate", state.index.headline]].forEach(([role, h]) => {
      if (!h) return;
      const rate = h.pass_rate === null ? "n/a" : (100 * h.pass_rate).toFixed(1) + "%";
      parts.push(el("p", "run-line " + role, role + " " + h.run_id + ": " + h.passed + " of " + h.attempted + " attempted trials passed (" + rate + "), " + h.blocked + " blocked, " + h.not_run + " not run" + (h.banners.length ? " [" + h.banners.join("; ") + "]" : "")));
    });
    if (c.refused) {
      parts.push(el("p", "error refused", "comparison refused: " + c.refused));
      box.replaceChildren(...parts);
      return;
    }
    parts.push(el("p", "decision", "decision: ", badge(verdictOf(c.result))));
    const changes = new Set();
    c.suites.forEach((s) => s.cases.forEach((k) => changes.add(k.change)));
    const select = el("select", "");
    select.id = "f-change";
    const all = el("option", "", "all");
    all.value = "";
    add(select, all);
    [...changes].sort().forEach((ch) => {
      const o = el("option", "", ch);
      o.value = ch;
      add(select, o);
    });
    parts.push(el("label", "", "change ", select));
    const suites = el("div", "suites");
    const draw = () => {
      suites.replaceChildren(
        ...c.suites.map((s) =>
          el(
            "div",
            "suite",
            el("h3", "", "suite " + (s.stats.split || s.stats.suite) + " ", badge(verdictOf(s.stats))),
            el("p", "counts", Object.keys(s.counts).sort().map((k) => k + " " + s.counts[k]).join(", ")),
            table(
              "pairs",
              ["case", "change", "baseline", "candidate", ""],
              s.cases
                .filter((k) => !select.value || k.change === select.value)
                .map((k) => {
                  const button = el("button", "pair-open", "side by side");
                  button.type = "button";
                  button.addEventListener("click", () => openPair(k));
                  return [cell("case", k.case), cell("change", badge(k.change)), k.baseline.outcomes.join(", "), k.candidate.outcomes.join(", "), button];
                }),
            ),
            table("stats", ["statistic", "value"], Object.keys(s.stats).map((k) => [k, statValue(s.stats[k])])),
          ),
        ),
      );
    };
    select.addEventListener("change", draw);
    draw();
    parts.push(suites);
    box.replaceChildren(...parts);
  }

  function openPair(k) {
    const pane = $("pair");
    const count = Math.max(k.baseline_trials.length, k.candidate_trials.length);
    const grid = el("div", "side");
    pane.replaceChildren(el("h2", "", k.case + ": " + k.change), grid);
    for (let i = 0; i < count; i++) {
      const left = el("div", "baseline", el("h3", "", "baseline"));
      const right = el("div", "candidate", el("h3", "", "candidate"));
      add(grid, [left, right]);
      [["baseline", k.baseline_trials[i], left], ["run", k.candidate_trials[i], right]].forEach(([prefix, n, box]) => {
        if (n === undefined) {
          add(box, el("p", "muted", "no such trial"));
          return;
        }
        withTrial(prefix, n, (t) => add(box, renderTrial(t)));
      });
    }
    pane.scrollIntoView();
  }

  // ---- tabs and start ---------------------------------------------------------------------
  function showTab(which) {
    $("tab-trials").classList.toggle("active", which === "trials");
    $("tab-compare").classList.toggle("active", which === "compare");
    $("trials-view").hidden = which !== "trials";
    $("compare-view").hidden = which !== "compare";
  }

  function start(index) {
    state.index = index;
    state.rows = index.rows.map((r) => {
      r.hay = (r.case + " " + (index.questions[r.case] || "")).toLowerCase();
      return r;
    });
    renderHeader(index);
    setupFilters();
    applyFilters();
    $("tab-trials").addEventListener("click", () => showTab("trials"));
    if (index.comparison) {
      $("tab-compare").hidden = false;
      $("tab-compare").addEventListener("click", () => showTab("compare"));
      renderComparison(index.comparison);
    }
    $("status").textContent = "";
    document.body.dataset.ready = "yes";
  }
})();
