// BackIntel run viewer: how one trial is drawn, and the text-only DOM helpers the page uses.
// Every string from a run becomes a text node (textContent): nothing from the data is ever
// parsed as HTML.
"use strict";

window.BackIntelTrial = (function () {
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

  function renderReviews(reviews) {
    // a person's overrides (reviews.jsonl), oldest first; the recorded outcome stays above
    return section(
      "Reviewed by a person",
      el("p", "muted", "recorded outcome: " + reviews[0].original + "; reports use the review only with --with-reviews"),
      table("reviews", ["time", "author", "from", "to", "reason"], reviews.map((r) => [r.time, r.author, r.previous, r.effective, r.reason])),
    );
  }

  function renderTrial(t) {
    return el(
      "div",
      "trial",
      el("h2", "", t.case + " · trial " + t.trial + " ", badge(t.outcome), t.reviewed ? el("span", "badge reviewed", "reviewed: " + t.reviewed) : null),
      el("p", "muted", t.nodeid + " · " + t.split + " · level " + t.level + " · " + t.family + " · " + t.store),
      t.reviews && t.reviews.length ? renderReviews(t.reviews) : null,
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


  return { add, el, fmt, cost, badge, pre, table, cell, section, renderTrial };
})();
