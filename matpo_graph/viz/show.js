// Rollout browser. Model text is untrusted: every string reaches the page through textContent,
// never innerHTML. Tree bodies are parsed and drawn only when a tree is opened.
(function () {
  "use strict";
  var t0 = performance.now();
  var TEXT_CAP = 4000;

  function $(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function add(parent) {
    for (var i = 1; i < arguments.length; i++) if (arguments[i]) parent.appendChild(arguments[i]);
    return parent;
  }
  function isNum(x) { return typeof x === "number" && isFinite(x); }
  function fmt(x, d) { return isNum(x) ? x.toFixed(d === undefined ? 3 : d) : "n/a"; }
  function signed(x) { return isNum(x) ? (x > 0 ? "+" : "") + x.toFixed(3) : "n/a"; }
  function fact(label, value) {
    var f = el("span", "fact"); add(f, document.createTextNode(label + " "), el("b", null, value)); return f;
  }
  function badge(text, cls) { return el("span", "badge" + (cls ? " " + cls : ""), text); }
  function json(v) {
    try { var s = JSON.stringify(v); return s.length > 100 ? JSON.stringify(v, null, 1) : s; } catch (e) { return String(v); }
  }

  // Long text: show the first TEXT_CAP characters, with a button for the rest.
  function textBlock(text, cls) {
    var wrap = el("div", "textblock");
    var s = text === null || text === undefined ? "" : String(text);
    var pre = el("pre", cls, s.length > TEXT_CAP ? s.slice(0, TEXT_CAP) + " …" : s);
    add(wrap, pre);
    if (s.length > TEXT_CAP) {
      var b = el("button", "toggle more", "show all " + s.length + " characters");
      b.addEventListener("click", function () { pre.textContent = s; b.remove(); });
      add(wrap, b);
    }
    return wrap;
  }

  var S = JSON.parse($("matpo-summary").textContent);
  var bodies = new Map();
  function treeBody(i) {
    if (!bodies.has(i)) bodies.set(i, JSON.parse($("matpo-tree-" + i).textContent));
    return bodies.get(i);
  }
  var state = { depth: Math.min(1, S.max_depth), roles: new Set(S.roles), onlyFlagged: false, query: "" };
  var maxAbsAdv = 0, maxReward = 0;
  S.trees.forEach(function (t) {
    if (isNum(t.adv)) maxAbsAdv = Math.max(maxAbsAdv, Math.abs(t.adv));
    if (isNum(t.reward)) maxReward = Math.max(maxReward, t.reward);
  });
  maxAbsAdv = maxAbsAdv || 1; maxReward = Math.max(maxReward, 1);

  // ---------- header: source, credit, metrics, plots ----------
  function renderHeader() {
    var h = $("top");
    var title = "Rollouts" + (S.step !== null ? " · step " + S.step : "");
    add(h, el("h1", null, title), el("div", "muted", S.source));
    var nTraj = 0, trained = 0, rs = [];
    S.trees.forEach(function (t) { nTraj += t.n_traj; trained += t.trained; if (isNum(t.reward)) rs.push(t.reward); });
    var mean = rs.length ? rs.reduce(function (a, b) { return a + b; }, 0) / rs.length : null;
    add(h, add(el("div", "facts"), fact("trees", S.trees.length), fact("groups", S.groups.length),
      fact("trajectories", nTraj), fact("trained tokens", trained), fact("mean reward", fmt(mean)),
      fact("roles", S.roles.join(", ") || "none")));
    var note = el("div", "credit-note" + (S.credit.status === "missing" ? " credit-missing" : ""), "Credit: " + S.credit.note);
    note.id = "credit-status"; note.dataset.status = S.credit.status;
    add(h, note);
    if (S.steps.length > 1) add(h, el("div", "muted", "steps with rollouts in this run: " + S.steps.join(", ")));
    if (S.metrics) {
      var d = add(el("details", "panel"), el("summary", null, "Metrics of this step"));
      var tb = el("table", "metrics");
      Object.keys(S.metrics).sort().forEach(function (k) {
        var v = S.metrics[k];
        add(tb, add(el("tr"), el("td", null, k), el("td", null, isNum(v) ? (Number.isInteger(v) ? v : v.toPrecision(5)) : json(v))));
      });
      add(d, tb); add(h, d);
    }
    if (S.plots.length) {
      var p = add(el("details", "panel"), el("summary", null, "Training plots (" + S.plots.length + ")"));
      p.id = "plots";
      var box = el("div", "plots");
      S.plots.forEach(function (pl) {
        var img = el("img"); img.alt = pl.name; img.src = pl.src; img.loading = "lazy";
        add(box, add(el("figure"), img, el("figcaption", null, pl.name)));
      });
      add(p, box); add(h, p);
    }
  }

  // ---------- controls ----------
  function renderControls() {
    var c = $("controls");
    var q = el("input"); q.type = "search"; q.placeholder = "filter: question, answer, tree or group id"; q.id = "filter";
    q.addEventListener("input", function () { state.query = q.value.trim().toLowerCase(); applyFilter(); });
    var flag = el("input"); flag.type = "checkbox"; flag.id = "only-flagged";
    flag.addEventListener("change", function () { state.onlyFlagged = flag.checked; applyFilter(); });
    add(c, q, add(el("label"), flag, document.createTextNode(" only trees with invalid calls or tool errors")));
    var sel = el("select"); sel.id = "open-depth";
    for (var d = -1; d <= S.max_depth; d++) {
      var o = el("option", null, d < 0 ? "none" : "≤ " + d); o.value = String(d); if (d === state.depth) o.selected = true; add(sel, o);
    }
    sel.addEventListener("change", function () { state.depth = Number(sel.value); reapplyOpen(); });
    add(c, add(el("label", null, "open trajectories of depth "), sel));
    var roles = el("span"); roles.id = "open-roles"; add(roles, document.createTextNode("and roles:"));
    S.roles.forEach(function (r) {
      var cb = el("input"); cb.type = "checkbox"; cb.checked = true; cb.value = r;
      cb.addEventListener("change", function () { if (cb.checked) state.roles.add(r); else state.roles.delete(r); reapplyOpen(); });
      add(roles, add(el("label"), document.createTextNode(" "), cb, document.createTextNode(" " + r)));
    });
    add(c, roles);
    var collapse = el("button", "toggle", "close all trees"); collapse.id = "close-all";
    collapse.addEventListener("click", function () {
      document.querySelectorAll("button.tree-toggle[aria-expanded=true]").forEach(function (b) { b.click(); });
    });
    add(c, collapse);
  }

  // ---------- groups: how rewards became advantages ----------
  function bar(value, kind) {
    var b = el("div", "bar"), f = el("div", "fill " + kind);
    if (kind === "rew") {
      f.style.width = (isNum(value) ? Math.max(0, value) / maxReward * 100 : 0) + "%";
    } else {
      add(b, el("div", "zero"));
      var w = isNum(value) ? Math.min(1, Math.abs(value) / maxAbsAdv) * 50 : 0;
      f.style.width = w + "%";
      f.style.left = value < 0 ? (50 - w) + "%" : "50%";
    }
    return add(b, f);
  }

  function formula() {
    if (S.credit.status === "missing") return "advantages: n/a (" + S.credit.note + ")";
    if (S.strategy && S.strategy !== "broadcast")
      return "credit strategy " + S.strategy + " (" + S.normalization + "): each trajectory shows its own advantage";
    var pre = S.normalization ? "" : "MATPO: ";
    if (S.normalization === "mean_only") return "A = r − mean(r of group), broadcast to every trajectory of the tree";
    var eps = isNum(S.epsilon) ? S.epsilon : "ε";
    return pre + "A = (r − mean) / (std + " + eps + "), std unbiased over the group's root rewards; A is broadcast to every trajectory of the tree";
  }

  function answerCell(a) {
    var td = el("td", "answer", a === null ? "—" : a);
    if (a !== null) td.title = a;
    return td;
  }

  var rowsByTree = [];
  function renderGroups() {
    var main = $("groups");
    var f = formula();
    S.groups.forEach(function (g) {
      var sec = el("section", "group"); sec.dataset.groupId = g.id;
      add(sec, add(el("div", "group-head"), el("h2", null, "group " + g.id), fact("G", g.n),
        fact("mean reward", fmt(g.mean)), fact("std", fmt(g.std)),
        g.n === 1 ? badge("single member: no group signal", "error") :
          g.std === 0 ? badge("equal rewards: no learning signal", "error") : null));
      add(sec, el("div", "question", g.question));
      if (g.answers && g.answers.length) add(sec, el("div", "muted", "gold: " + g.answers.join(" | ")));
      add(sec, el("div", "formula", f));
      var tbl = el("table", "credit"), head = el("tr");
      ["", "tree", "reward", "r − mean", "advantage", "advantage bar", "reward bar", "trajectories (get A)", "trained tok", "root end", "answer"].forEach(function (x) { add(head, el("th", null, x)); });
      add(tbl, add(el("thead"), head));
      var tbody = el("tbody");
      g.trees.forEach(function (i) {
        var t = S.trees[i];
        var tr = el("tr", "tree-row"); tr.dataset.treeId = t.id; tr.dataset.index = String(i);
        var btn = el("button", "toggle tree-toggle", "open"); btn.setAttribute("aria-expanded", "false");
        var label = el("td", null, t.id);
        if (t.invalid) add(label, badge(t.invalid + " invalid", "invalid"));
        if (t.errors) add(label, badge(t.errors + " tool errors", "error"));
        var diff = isNum(t.reward) && isNum(g.mean) ? t.reward - g.mean : null;
        var adv = el("td", "num adv " + (isNum(t.adv) ? (t.adv > 0 ? "pos" : t.adv < 0 ? "neg" : "") : ""), signed(t.adv));
        adv.dataset.adv = isNum(t.adv) ? String(t.adv) : "n/a";
        add(tr, add(el("td"), btn), label, el("td", "num reward", fmt(t.reward)), el("td", "num", signed(diff)), adv,
          add(el("td"), bar(t.adv, t.adv < 0 ? "neg" : "pos")), add(el("td"), bar(t.reward, "rew")),
          el("td", "num", t.n_traj + " (depth " + t.depth + ")"), el("td", "num", t.trained + " / " + t.tokens),
          el("td", null, t.term || ""), answerCell(t.answer));
        var slotRow = el("tr", "tree-slot"); slotRow.hidden = true;
        var slot = el("td"); slot.colSpan = 11; add(slotRow, slot);
        btn.addEventListener("click", function () { toggleTree(i, btn, slotRow, slot); });
        add(tbody, tr, slotRow);
        rowsByTree[i] = { row: tr, slot: slotRow };
      });
      add(sec, add(tbl, tbody));
      add(main, sec);
      g._section = sec;
    });
  }

  function toggleTree(i, btn, slotRow, slot) {
    var open = btn.getAttribute("aria-expanded") !== "true";
    btn.setAttribute("aria-expanded", String(open));
    btn.textContent = open ? "close" : "open";
    slotRow.hidden = !open;
    if (open && !slot.firstChild) add(slot, renderTree(treeBody(i)));
  }

  function applyFilter() {
    S.groups.forEach(function (g) {
      var any = false;
      g.trees.forEach(function (i) {
        var t = S.trees[i];
        var hay = (g.id + "\n" + t.id + "\n" + g.question + "\n" + (g.answers || []).join("\n") + "\n" + (t.answer || "")).toLowerCase();
        var ok = (!state.query || hay.indexOf(state.query) >= 0) && (!state.onlyFlagged || t.invalid > 0 || t.errors > 0);
        rowsByTree[i].row.hidden = !ok;
        if (!ok) rowsByTree[i].slot.hidden = true;
        else rowsByTree[i].slot.hidden = rowsByTree[i].row.querySelector("button").getAttribute("aria-expanded") !== "true";
        any = any || ok;
      });
      g._section.hidden = !any;
    });
  }

  // ---------- one tree ----------
  function renderTree(b) {
    var box = el("div", "tree"); box.dataset.treeId = b.id;
    var head = el("div", "tree-head");
    add(head, el("b", null, "tree " + b.id));
    if (b.reward) {
      add(head, fact("reward", fmt(b.reward.total)), fact("accuracy", fmt(b.reward.accuracy)), fact("format", fmt(b.reward.format)),
        fact("answer", b.reward.answer === null ? "none" : b.reward.answer));
      if (b.reward.judge_fallback) add(head, badge("judge fell back to a local scorer", "error"));
    } else add(head, fact("reward", "n/a"));
    add(head, fact("seconds", fmt(b.sec, 1)));
    add(box, head);
    if (!b.trajs.length) { add(box, el("div", "empty", "no trajectories")); return box; }
    var byId = new Map(), kids = new Map();
    b.trajs.forEach(function (t) {
      byId.set(t.id, t);
      if (t.parent !== null) { if (!kids.has(t.parent)) kids.set(t.parent, []); kids.get(t.parent).push(t); }
    });
    add(box, trajNode(b.trajs[0], { byId: byId, kids: kids, reward: b.reward ? b.reward.total : null }));
    return box;
  }

  function wantOpen(t) { return t.depth <= state.depth && state.roles.has(t.role); }

  function trajNode(t, ctx) {
    var node = el("div", "traj d" + Math.min(t.depth, 3));
    node.dataset.trajId = t.id; node.dataset.role = t.role; node.dataset.depth = String(t.depth);
    node.dataset.adv = isNum(t.adv) ? String(t.adv) : "n/a";
    node.dataset.trained = String(t.trained); node.dataset.tokens = String(t.tokens);
    node._traj = t; node._ctx = ctx;
    var head = el("div", "traj-head");
    var caret = el("span", "caret", "▸");
    add(head, caret, el("span", "role", t.role), el("span", "muted", "#" + t.id + " · depth " + t.depth),
      fact("end", t.term), fact("reward", fmt(ctx.reward)), fact("advantage", signed(t.adv)), fact("trained", t.trained + " / " + t.tokens + " tok"),
      fact("format", fmt(t.fmt, 2)), fact("turns", t.turns.length));
    var nInvalid = 0, nErr = 0;
    t.turns.forEach(function (u) { u.calls.forEach(function (c) { if (!c.valid || c.kind === "invalid") nInvalid++; else if (c.error) nErr++; }); });
    if (nInvalid) add(head, badge(nInvalid + " invalid", "invalid"));
    if (nErr) add(head, badge(nErr + " tool errors", "error"));
    var bodyBox = el("div", "traj-body"); bodyBox.hidden = true;
    node._caret = caret; node._body = bodyBox;
    head.addEventListener("click", function () { setOpen(node, !node.classList.contains("open")); });
    add(node, head, bodyBox);
    if (wantOpen(t)) setOpen(node, true);
    return node;
  }

  function setOpen(node, open) {
    node.classList.toggle("open", open);
    node._caret.textContent = open ? "▾" : "▸";
    node._body.hidden = !open;
    if (open && !node._body.firstChild) renderTrajBody(node._body, node._traj, node._ctx);
  }

  function reapplyOpen() {
    document.querySelectorAll(".traj").forEach(function (n) { setOpen(n, wantOpen(n._traj)); });
  }

  function maskStrip(t) {
    var wrap = el("div", "mask-wrap"), strip = el("div", "mask");
    var total = t.tokens || 1, runs = t.mask.slice(0, 2000);
    runs.forEach(function (r) {
      var s = el("span", "m" + r[0]); s.style.width = (r[1] / total * 100) + "%";
      s.title = (r[0] ? "trained: " : "not trained: ") + r[1] + " tokens"; add(strip, s);
    });
    var nTrainedMsgs = t.msgs.filter(function (m) { return m[2]; }).length;
    var legend = el("div", "legend");
    add(legend, document.createTextNode("loss mask:"), el("i", "m1"), document.createTextNode("trained " + t.trained),
      el("i", "m0"), document.createTextNode("not trained " + (t.tokens - t.trained)),
      document.createTextNode(" · " + t.tokens + " tokens, prompt " + t.prompt + " · " + nTrainedMsgs + " of " + t.msgs.length + " messages trained"));
    return add(wrap, strip, legend);
  }

  function renderTrajBody(box, t, ctx) {
    if (t.error) add(box, add(el("div", "traj-error"), el("div", "errtext", t.error)));
    if (t.task && Object.keys(t.task).length) add(box, el("div", "label muted", "called with"), textBlock(json(t.task), "task"));
    add(box, maskStrip(t));
    // The k-th generated assistant message belongs to the k-th turn; its flag says whether that text is trained.
    var gen = t.msgs.filter(function (m) { return m[0] === "assistant" && (m[1] === "generated" || m[2]); });
    var placed = new Set();
    t.turns.forEach(function (u, k) {
      var turn = el("div", "turn");
      var trained = gen.length === t.turns.length ? !!gen[k][2] : t.trained > 0;
      add(turn, el("div", "turn-head", "turn " + u.i + " · " + u.purpose + " · " + u.n + " tokens · finish " + u.finish +
        " · " + (trained ? "trained" : "not trained")));
      var tb = textBlock(u.text, "gen " + (trained ? "trained" : "untrained"));
      tb.dataset.trained = trained ? "1" : "0";
      add(turn, tb);
      u.calls.forEach(function (c) { add(turn, callBox(c, ctx, placed)); });
      add(box, turn);
    });
    if (!t.turns.length) add(box, el("div", "empty", "no model turns"));
    var rest = (ctx.kids.get(t.id) || []).filter(function (c) { return !placed.has(c.id); });
    if (rest.length) {
      var other = add(el("div", "children"), el("div", "label muted", "children not linked to a call"));
      rest.forEach(function (c) { add(other, trajNode(c, ctx)); });
      add(box, other);
    }
    if (t.final) add(box, add(el("div", "final"), el("div", "label muted", t.parent === null ? "final answer" : "returned to the parent"), textBlock(t.final, "final-text")));
    var ctxBox = add(el("details", "panel msgs"), el("summary", null, "context: " + t.msgs.length + " messages"));
    ctxBox.addEventListener("toggle", function () {
      if (!ctxBox.open || ctxBox.dataset.done) return;
      ctxBox.dataset.done = "1";
      t.msgs.forEach(function (m) {
        var row = el("div", "msg" + (m[2] ? " trained" : "")); row.dataset.trained = String(m[2]);
        var h = add(el("div", "msg-head", m[0] + " · " + m[1]));
        if (m[2]) add(h, badge("trained", "trained"));
        add(row, h, textBlock(messageText(t, m)));
        add(ctxBox, row);
      });
    });
    add(box, ctxBox);
  }

  // A message that repeats a turn's text or a call's result points at it instead of holding a copy.
  function messageText(t, m) {
    if (m[3] !== null || !m[4]) return m[3];
    var u = t.turns[m[4][0]];
    return m[4].length === 1 ? u.text : u.calls[m[4][1]].result;
  }

  function callBox(c, ctx, placed) {
    var bad = !c.valid || c.kind === "invalid";
    var box = el("div", "call" + (bad ? " invalid" : c.error ? " failed" : ""));
    box.dataset.call = c.name; box.dataset.valid = bad ? "0" : "1";
    var head = el("div", "call-head");
    add(head, el("span", "name", c.name), badge(c.kind));
    if (bad) add(head, badge("invalid call", "invalid"));
    else if (c.error) add(head, badge("failed", "error"));
    add(head, el("span", "muted", " " + fmt(c.sec, 2) + " s"));
    add(box, head);
    if (c.error) add(box, el("div", "errtext", c.error));
    if (c.args !== null) add(box, el("div", "label", "arguments"), textBlock(json(c.args), "args"));
    else if (c.raw) add(box, el("div", "label", "raw call (arguments did not parse)"), textBlock(c.raw, "raw"));
    if (c.child && ctx.byId.has(c.child)) {
      placed.add(c.child);
      add(box, add(el("div", "children"), trajNode(ctx.byId.get(c.child), ctx)));
    }
    if (c.result) add(box, el("div", "label", c.child ? "summary returned" : "result"), textBlock(c.result, "result"));
    return box;
  }

  renderHeader();
  renderControls();
  renderGroups();
  window.__matpoShow = { parseAndRenderMs: performance.now() - t0, openTree: function (id) {
    var row = document.querySelector('tr.tree-row[data-tree-id="' + CSS.escape(id) + '"] button.tree-toggle');
    if (row && row.getAttribute("aria-expanded") !== "true") row.click();
    return !!row;
  } };
  document.body.dataset.ready = "1";
})();
