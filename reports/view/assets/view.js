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

  // ---- DOM helpers: text only -------------------------------------------------------------
  function add(parent, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) {
      child.forEach((c) => add(parent, c));
    } else if (child instanceof Node) {
      parent.appendChild(child);
    } else {
      parent.appendChild(document.createTextNode(String(child)));
    }
  }

  function el(tag, cls, ...children) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    add(node, children);
    return node;
  }

  function $(id) {
    return document.getElementById(id);
  }

  function fmt(value, digits) {
    if (value === null || value === undefined) return "—";
    if (typeof value === "number") return digits === undefined ? String(value) : value.toFixed(digits);
    return String(value);
  }

  function cost(value) {
    return value === null || value === undefined ? "unknown" : "$" + value.toFixed(4);
  }

  function badge(text) {
    return el("span", "badge " + String(text).replace(/[^a-z_]/gi, ""), text);
  }

  function pre(text, cls) {
    return el("pre", cls || "", text);
  }

  function table(cls, head, rows) {
    const t = el("table", cls);
    const tr = el("tr");
    head.forEach((h) => add(tr, el("th", "", h)));
    add(t, el("thead", "", tr));
    const body = el("tbody");
    rows.forEach((cells) => {
      const row = el("tr");
      cells.forEach((c) => add(row, c instanceof Node && c.tagName === "TD" ? c : el("td", "", c)));
      add(body, row);
    });
    add(t, body);
    return t;
  }

  function cell(cls, content) {
    return el("td", cls, content);
  }

  function section(title, ...children) {
    return el("section", "", el("h3", "", title), ...children);
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
      fact("pass rate (passed / attempted)", rate),
      fact("failed", h.failed),
      fact("blocked", h.blocked),
      fact("not run", h.not_run),
      fact("median latency", h.latency_median_s === null ? "n/a" : h.latency_median_s.toFixed(2) + " s"),
      fact("tokens in / out", h.input_tokens + " / " + h.output_tokens),
      fact("cost", cost(h.cost_usd)),
    ]);
    $("charts-box").hidden = !index.charts.length;
    index.charts.forEach((c) => {
      const img = document.createElement("img");
      img.alt = c.title;
      img.src = c.src;
      add($("charts"), el("figure", "", img));
    });
  }

  // ---- trial list (virtual: only the rows in view are in the DOM) -------------------------
  const COLUMNS = [
    ["case", (r) => r.case],
    ["trial", (r) => r.trial],
    ["outcome", (r) => badge(r.outcome)],
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

  // ---- one trial --------------------------------------------------------------------------
  function renderAnswer(a) {
    if (!a) return el("p", "muted", "no answer (the analyst returned nothing, or never ran)");
    const parts = [el("p", "", "status: ", el("b", "status", a.status))];
    if (a.raw) parts.push(pre(a.raw));
    if (a.metrics.length) {
      parts.push(
        table(
          "answer-metrics",
          ["metric", "value", "unit"],
          a.metrics.map((m) => [m.name, pre(m.value), m.unit]),
        ),
      );
    }
    if (a.method) parts.push(el("h4", "", "method"), pre(a.method, "method"));
    if (a.caveats.length) parts.push(el("h4", "", "caveats"), el("ul", "caveats", a.caveats.map((c) => el("li", "", c))));
    if (a.missing.length) parts.push(el("h4", "", "missing"), el("ul", "missing", a.missing.map((m) => el("li", "", m))));
    if (a.explanation) parts.push(el("h4", "", "explanation"), pre(a.explanation, "explanation"));
    return parts;
  }

  function renderChecks(checks) {
    if (!checks.length) return el("p", "muted", "no metric was checked");
    return table(
      "checks",
      ["metric", "kind", "expected", "reported", "tolerance", "value", "evidence", "verdict", "detail"],
      checks.map((c) => [
        cell("metric", c.name),
        cell("kind", c.kind),
        cell("expected", pre(c.expected)),
        cell("reported", pre(c.reported)),
        cell("tolerance", fmt(c.tolerance)),
        cell("value-ok", badge(c.value_ok ? "ok" : "fail")),
        cell("evidence-ok", badge(c.evidence_ok ? "ok" : "fail")),
        cell("verdict", badge(c.verdict)),
        cell("detail", c.detail),
      ]),
    );
  }

  function renderProbes(probes) {
    if (!probes.length) return el("p", "muted", "not run on a data probe");
    return table(
      "probes",
      ["probe", "values there", "the data gives", "followed the data", "error / skipped"],
      probes.map((p) => [
        fmt(p.probe),
        pre(p.values),
        pre(p.expected),
        Object.keys(p.followed).map((m) => el("div", "", m + ": ", badge(p.followed[m] ? "ok" : "fail"))),
        p.error || p.skipped,
      ]),
    );
  }

  function renderEvidence(items) {
    if (!items.length) return el("p", "muted", "no evidence");
    return items.map((e) =>
      el(
        "div",
        "evidence",
        el("h4", "", "evidence " + e.id + " (" + e.kind + ") ", badge(e.accepted ? "accepted" : "not accepted")),
        el("p", "", "cites: " + e.cited.join(", ")),
        pre(e.code, "code"),
        e.error ? el("p", "error", "error: " + e.error) : null,
        el("p", "", "ran: " + (e.ran ? "yes" : "no") + "; values it reproduced:"),
        pre(e.values, "values"),
        table(
          "evidence-metrics",
          ["metric", "reproduced", "why"],
          e.metrics.map((m) => [m.name, badge(m.reproduced ? "ok" : "fail"), m.why]),
        ),
        renderProbes(e.probes),
      ),
    );
  }

  function renderRefusal(r) {
    if (!r) return null;
    return section(
      "Refusal verdict",
      el("p", "", "refused: " + (r.refused ? "yes" : "no") + "; must not invent: " + r.forbidden_metric),
      table(
        "concepts",
        ["concept (synonyms that count)", "named in missing"],
        (r.concepts || []).map((c) => [c.synonyms.join(" / "), badge(c.named ? "named" : "not named")]),
      ),
    );
  }

  function renderJudge(j) {
    if (!j) return null;
    return section(
      "Judge",
      el("p", "", badge("uncalibrated"), " the judge's scores were never calibrated against human labels; they never decide correctness"),
      table("judge", ["field", "value"], Object.keys(j.fields).map((k) => [k, pre(j.fields[k])])),
    );
  }

  function renderUsage(t) {
    const u = t.usage || {};
    return section(
      "Usage, cost, latency",
      table(
        "usage",
        ["requests", "input tokens", "output tokens", "tool calls", "cost", "latency", "provider retries"],
        [[fmt(u.requests), fmt(u.input_tokens), fmt(u.output_tokens), fmt(u.tool_calls), cost(t.cost_usd), fmt(t.latency_s, 3) + " s", String(t.retries.length)]],
      ),
      t.retries.map((r) => pre(r)),
      t.warnings.map((w) => el("p", "banner", w)),
    );
  }

  function renderTranscript(entries) {
    if (!entries.length) return el("p", "muted", "no transcript was recorded");
    return el(
      "ol",
      "transcript",
      entries.map((e) => el("li", e.kind, el("b", "", e.title), pre(e.text))),
    );
  }

  function renderTrial(t) {
    return el(
      "div",
      "trial",
      el("h2", "", t.case + " · trial " + t.trial + " ", badge(t.outcome)),
      el("p", "muted", t.nodeid + " · " + t.split + " · level " + t.level + " · " + t.family + " · " + t.store),
      section("Question", pre(t.question, "question")),
      t.reasons.length
        ? section("Why", el("ul", "reasons", t.reasons.map((r) => el("li", "", badge(r.outcome), " ", r.metric ? r.metric + ": " : "", r.message))))
        : null,
      section("Answer", renderAnswer(t.answer)),
      section("Checks", renderChecks(t.checks)),
      section("Evidence", renderEvidence(t.evidence)),
      renderRefusal(t.refusal),
      renderJudge(t.judge),
      renderUsage(t),
      t.analyst_error ? section("Analyst error", pre(t.analyst_error, "error")) : null,
      section("Transcript", renderTranscript(t.transcript)),
    );
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
            el("h3", "", "suite " + s.stats.split + " ", badge(verdictOf(s.stats))),
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
