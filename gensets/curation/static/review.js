// gensets review page. The HTML is a shell with nothing of the review in it: this script exchanges the link in the
// address (?token=...) for a session of the server's run (POST /api/session), keeps it in this tab's sessionStorage
// (the browser gives it to this origin only, never to another port of the host, as it would a cookie), takes the
// token out of the address, and sends the session in the X-Gensets-Session header of every request: the page's
// data (GET /api/page), its images (fetched, shown as blobs), decisions.
// Then: selection, keyboard shortcuts and decisions (POST /api/decide, saved at once, one after another: a key
// pressed while a decision is being saved waits its turn, and each is saved or answered with a message); ranges
// (POST /api/bulk), comments, an image's history (GET /api/history), undo (POST /api/undo: a new decision, never a
// deletion), zoom, the keys overlay, references; in double review an adjudicator's disputes (both decisions, 1 / 2
// settle one) and a lead's team panel (GET /api/team).
// Team work: every decision carries the version of the image it was made on; a newer decision by someone else
// answers 409 (shown with who made it) and the next key press on that image overrides it knowingly. The page polls
// GET /api/changes (which also renews the images handed to it) and shows others' decisions, counts included; a
// poll or a decision refused (a restart, a revoked or expired link, the server gone) shows a banner saying which and
// what to do.
(() => {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const STORE = "gensets-session";
  const params = new URLSearchParams(location.search);
  let auth = null; // {session, csrf, reviewer, role}

  // ---- refusals: what ended, and what to do (the server's 401 names the reason)
  const owner = () => auth && auth.role === "owner";
  const WHY = {
    restarted: () => owner()
      ? "The review server was restarted: this page's session ended. Open the new address `gensets review serve` printed (its link changed); every saved decision is kept."
      : "The review server was restarted: this page's session ended. Open your personal link again to go on; every saved decision is kept.",
    revoked: () => "Your link was revoked: this page saves nothing more. Ask whoever runs the review for a new one.",
    expired: () => "Your link expired: this page saves nothing more. Ask whoever runs the review for a new one.",
    ended: () => "This page's session ended (unused for an hour): open your link again.",
    link: () => "This page has no session: open your link again.",
    unknown: () => "This link is unknown, expired or revoked: ask whoever runs the review for a new one.",
    gone: () => "The review server does not answer (stopped, or restarting): nothing is saved until it answers again.",
  };
  let refusedFor = null;
  function banner(reason, text) {
    refusedFor = reason;
    $("banner-text").textContent = text || (WHY[reason] || WHY.link)();
    $("banner").hidden = false;
    document.body.dataset.refused = reason;
  }
  function unbanner() { if (refusedFor === "gone") { $("banner").hidden = true; refusedFor = null; delete document.body.dataset.refused; } }
  const ended = () => refusedFor && refusedFor !== "gone";

  async function fail(res) {
    const body = await res.json().catch(() => ({ error: res.statusText }));
    const e = Object.assign(new Error(body.error || res.statusText), { status: res.status, body });
    if (res.status === 401) banner(body.reason || "link");
    return e;
  }
  const headers = (extra = {}) => ({ "X-Gensets-Session": auth.session, ...extra });
  async function get(path) {
    const res = await fetch(path, { headers: headers() });
    if (!res.ok) throw await fail(res);
    return res.json();
  }
  async function post(path, body) {
    const res = await fetch(path, {
      method: "POST", headers: headers({ "Content-Type": "application/json", "X-CSRF-Token": auth.csrf }),
      body: JSON.stringify({ reviewer: reviewer(), ...body }),
    });
    if (!res.ok) throw await fail(res);
    return res.json();
  }

  async function signIn() {
    const link = params.get("token");
    if (link !== null) {
      params.delete("token"); // out of the address (and of this tab's history entry) at once
      history.replaceState(null, "", location.pathname + (params.toString() ? "?" + params : ""));
      const res = await fetch("/api/session", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ token: link }) });
      const out = await res.json().catch(() => ({ error: res.statusText }));
      if (!res.ok) { $("signin-why").textContent = out.error || res.statusText; return null; }
      sessionStorage.setItem(STORE, JSON.stringify(out));
    }
    try { return JSON.parse(sessionStorage.getItem(STORE) || "null"); } catch (e) { return null; }
  }

  // ---- images: fetched with the session, shown as blobs (an <img src> could not send it)
  const blobs = new Map(); // url -> Promise of an object URL
  const waiting = [];
  let fetching = 0;
  function blob(url) {
    if (!blobs.has(url)) blobs.set(url, new Promise((resolve) => { waiting.push({ url, resolve }); pumpImages(); }));
    return blobs.get(url);
  }
  function pumpImages() {
    while (fetching < 6 && waiting.length) {
      const { url, resolve } = waiting.shift();
      fetching += 1;
      fetch(url, { headers: headers() }).then(async (res) => {
        if (!res.ok) { if (res.status === 401) await fail(res); resolve(""); return; }
        resolve(URL.createObjectURL(await res.blob()));
      }).catch(() => resolve("")).finally(() => { fetching -= 1; pumpImages(); });
    }
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  let toastTimer;
  function toast(text, bad = false) {
    const t = $("toast");
    t.textContent = text;
    t.className = "show" + (bad ? " bad" : "");
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => (t.className = ""), bad ? 4000 : 1600);
  }

  const reviewerInput = $("reviewer");
  const reviewer = () => reviewerInput.value.trim();
  const form = $("filters");

  // ---- the page: everything the shell shows, from GET /api/page
  let items = [], cards = [], double = false, lead = false, todoView = false, cursor = null, pollMs = 2000;
  let undoMax = 1, bulkMax = 1, references = false;

  function option(select, value, text, chosen) {
    const o = el("option", "", text);
    o.value = value;
    o.selected = value === chosen;
    select.append(o);
  }

  function render(p) {
    double = p.double; lead = p.lead; undoMax = p.undo_max; bulkMax = p.bulk_max; pollMs = p.poll_ms || 2000;
    references = p.references; todoView = p.filters.status === "todo" && p.leased;
    cursor = p.cursor;
    items = p.items;
    document.title = `Review · ${p.title}`;
    $("title").textContent = p.title;
    $("title").title = p.workspace;
    $("mode").hidden = !double;
    document.body.dataset.double = double ? "1" : "0";
    document.body.dataset.view = todoView ? "todo" : "";
    document.querySelectorAll(".double").forEach((e) => (e.hidden = !double));
    document.querySelectorAll(".lead").forEach((e) => (e.hidden = !lead || (e.classList.contains("disputed") && !double)));
    // the reviewer: a personal link's (read-only), else the name in the address or the last one used here
    reviewerInput.value = p.reviewer;
    if (p.signed_in) {
      reviewerInput.readOnly = true;
      reviewerInput.dataset.signedIn = "1";
      $("reviewer-label").title = "you review as the reviewer of your personal link";
    } else {
      reviewerInput.name = "reviewer";
    }
    $("role").textContent = p.role;
    $("role").title = { owner: "you run this review page: you may also settle disagreements",
      adjudicator: "you may also settle disagreements of double review",
      reviewer: "you review; an adjudicator settles disagreements" }[p.role] || "";
    const f = p.filters;
    $("f-class").replaceChildren();
    option($("f-class"), "", "all classes", f.class);
    for (const [name, n] of p.classes) option($("f-class"), name, `${name} (${n})`, f.class);
    $("f-config").replaceChildren();
    option($("f-config"), "", "all kinds", f.config);
    for (const [name, n] of p.configs) option($("f-config"), name, `${name} (${n})`, f.config);
    $("f-status").replaceChildren();
    const label = { todo: "to review", flagged: "several objects" };
    for (const s of p.statuses) option($("f-status"), s, label[s] || s, f.status);
    $("sort").replaceChildren();
    for (const [s, text] of Object.entries(p.sorts)) option($("sort"), s, text, f.sort);
    $("showing").textContent = `${p.matching} image${p.matching === 1 ? "" : "s"}`
      + (items.length && (p.before !== null || p.after !== null) ? ` · ${items.length} shown` : "");
    const pager = $("pager");
    pager.replaceChildren();
    for (const [name, id, text, title] of [["before", "prev", "‹ prev", "previous page (p)"], ["after", "next", "next ›", "next page (n)"]]) {
      if (p[name] === null || p[name] === undefined) continue;
      const b = el("button", "link", text);
      Object.assign(b, { type: "submit", name, value: p[name], id, title });
      pager.append(b);
    }
    $("class-list").replaceChildren(...p.class_names.map((c) => { const o = el("option"); o.value = c; return o; }));
    $("instructions-text").replaceChildren(...p.instructions.map((t) => el("p", "", t)));
    updateCounts(p.counts);
    updateMe(p.me);
    // the cards
    const grid = $("grid");
    grid.replaceChildren();
    cards = items.map((it, i) => {
      const c = el("article", "card");
      c.dataset.i = i;
      c.dataset.key = it.key;
      const thumb = el("div", "thumb"), img = el("img");
      img.alt = it.label;
      img.decoding = "async";
      thumb.append(img);
      const cap = el("div", "cap"), cls = el("div", "cls");
      cls.append(el("span", "orig", it.label), el("span", "new"));
      cap.append(cls, el("div", "nuis", `${it.config} · ${it.nuisance}`));
      if (it.surrogates.length && it.failures !== null && it.failures !== undefined) {
        const s = el("div", "sur1");
        s.title = "how many surrogates fail; the most confident surrogate's first guess and its score";
        s.append(el("span", "fails", `${it.failures}/${it.surrogates.length} fail`));
        if (it.top1_name) s.append(" ", el("span", "top1", `${it.confidence.toFixed(2)} ${it.top1_name}`));
        cap.append(s);
      }
      const flag = el("span", "flagmark", "⚑ several");
      flag.title = "several objects";
      c.append(thumb, cap, el("span", "badge"), flag);
      grid.append(c);
      return c;
    });
    cards.forEach((c, i) => { updateCard(i); showImage(i); });
    const empty = $("empty");
    empty.hidden = items.length > 0;
    const c = p.counts;
    empty.textContent = "Nothing to show with these filters. " + (f.status === "todo" && c.todo
      ? `The ${c.todo} image${c.todo === 1 ? "" : "s"} left to review are on other reviewers' pages; this page draws them if they come free.`
      : f.status === "todo" ? "All done here 🎉" : "");
  }

  function showImage(i) {
    const img = cards[i].querySelector("img"), key = items[i].key;
    blob(`/image/${encodeURIComponent(key)}`).then((u) => {
      if (!u) return;
      img.src = u;
      const mark = () => { if (img.naturalWidth && img.naturalWidth < 160) img.classList.add("small"); };
      img.complete ? mark() : img.addEventListener("load", mark, { once: true });
      if (i === sel) renderDetail();
    });
  }

  // ---- selection and the detail pane
  let sel = -1;
  function renderDetail() {
    const it = items[sel];
    if (!it) return;
    const img = $("d-img"), src = cards[sel].querySelector("img").src;
    if (img.getAttribute("src") !== src) { if (src) img.src = src; else img.removeAttribute("src"); }
    img.alt = it.label;
    $("d-class").textContent = it.label;
    $("d-new").textContent = it.status === "relabeled" ? " → " + it.review_label : "";
    $("d-nuisance").textContent = `${it.config}: ${it.nuisance}`;
    $("d-prompt").textContent = it.prompt || "";
    $("d-seed").textContent = it.seed ?? "";
    $("d-key").textContent = it.key;
    $("d-status").textContent = it.status + (it.flagged ? " · several objects" : "")
      + (double ? (it.dispute ? " · disputed" : ` · ${it.n} reviewer(s) so far`) : "");
    if (!$("zoom").hidden) showZoom();
    showReferences(it.label);
    $("b-flag").setAttribute("aria-pressed", String(!!it.flagged));
    $("d-comment").textContent = it.comment || "";
    $("d-extra").replaceChildren(...(it.extra || []).flatMap((x) => {
      const dd = el("dd", "", x.value);
      if (x.image) { // a neighbour in this workspace (the audit's near-duplicate): shown beside its key
        const im = el("img", "neighbour");
        im.alt = x.image;
        blob(`/image/${encodeURIComponent(x.image)}`).then((u) => { if (u) im.src = u; });
        dd.append(im);
      }
      return [el("dt", "", x.name), dd];
    }));
    showConflict(it);
    showDispute(it);
    showHistory();
    const n = it.surrogates.length;
    $("d-failures").textContent = it.failures == null ? "" : `· ${it.failures} of ${n} fail`;
    const box = $("d-surrogates");
    box.replaceChildren();
    for (const s of it.surrogates) {
      const d = el("div", "sur");
      const head = el("div", "sur-head");
      head.append(el("span", "", s.model), el("span", s.hit ? "hit" : "miss", s.hit ? "correct" : "fails"));
      const ol = el("ol");
      s.top5.forEach((p, r) => {
        const li = el("li", p.target ? "target" : "");
        li.title = p.target ? "one of the class's ImageNet ids" : "";
        li.append(el("span", "rank", r + 1), el("span", "name", p.name), el("span", "score", p.score.toFixed(3)));
        ol.append(li);
      });
      d.append(head, ol);
      box.append(d);
    }
  }

  function select(i, scroll = true) {
    if (!cards.length) return;
    i = Math.max(0, Math.min(cards.length - 1, i));
    if (sel >= 0 && cards[sel]) cards[sel].classList.remove("sel");
    sel = i;
    cards[sel].classList.add("sel");
    if (scroll) cards[sel].scrollIntoView({ block: "nearest" });
    closeRelabel();
    renderDetail();
  }

  // a newer decision by someone else on the selected image (a 409, or learnt by polling): who, what, when
  function showConflict(it) {
    const box = $("d-conflict"), c = it && it.conflict;
    box.hidden = !c;
    box.textContent = c ? `${c.by} decided this image meanwhile: ${c.status}${c.status === "relabeled" && c.label ? " → " + c.label : ""}`
      + (c.time ? ` (${c.time})` : "") + ". Decide again to override it (logged as an override)." : "";
  }

  // double review, an adjudicator's page: the reviewers' decisions on a disputed image, side by side
  function showDispute(it) {
    const box = $("d-dispute"), d = it && it.dispute;
    box.hidden = !d;
    $("d-dispute-list").replaceChildren(...(d || []).map((x) => el("li", "",
      `${x.reviewer}: ${x.status}${x.label ? " → " + x.label : ""}${x.note ? " · " + x.note : ""}`)));
  }

  function updateCard(i) {
    const it = items[i], c = cards[i];
    c.className = `card status-${it.status}${it.flagged ? " flagged" : ""}${it.conflict ? " conflict" : ""}`
      + `${it.dispute ? " disputed" : ""}${i === sel ? " sel" : ""}${c.classList.contains("picked") ? " picked" : ""}`
      + `${it.saving ? " saving" : ""}`;
    c.querySelector(".badge").textContent = it.saving ? "saving…" : it.status + (it.conflict ? " · " + it.conflict.by : "")
      + (it.dispute && it.status === "pending" ? " · disputed" : "");
    c.querySelector(".new").textContent = it.status === "relabeled" ? " → " + it.review_label : "";
  }

  function updateMe(me) {
    if (!me) return;
    $("me-session").textContent = me.session;
    $("me-decided").textContent = me.decided;
    $("me-rate").textContent = me.rate == null ? "–" : Math.round(me.rate);
  }

  function updateCounts(c) {
    for (const k of ["pending", "accepted", "rejected", "relabeled", "flagged", "total", "double_reviewed", "disputed"]) {
      const e = $("n-" + k);
      if (e && c[k] !== undefined) e.textContent = c[k];
    }
    const total = c.total || 1;
    for (const k of ["accepted", "relabeled", "rejected"]) {
      document.querySelector(".seg." + k).style.width = (100 * c[k]) / total + "%";
    }
    $("bar").title = `decided ${c.total - c.pending} of ${c.total}`;
    if (double) refreshKappa();
  }

  async function refreshKappa() {
    try {
      const a = await get("/api/agreement");
      $("kappa").textContent = a.kappa == null ? "–" : a.kappa.toFixed(2) + ` (${a.items})`;
    } catch (e) { /* the count stays as it was */ }
  }

  // an image's new state (a decision, a bulk decision, an undo) on the page, where it is shown
  function apply(state) {
    const i = items.findIndex((it) => it.key === state.key);
    if (i < 0) return -1;
    const it = items[i];
    const decided = (s) => s !== "pending" && s !== "below-quality";
    if (double && decided(state.status) !== decided(it.status)) it.n += decided(state.status) ? 1 : -1;
    it.status = state.status;
    it.review_label = state.status === "relabeled" ? state.label : it.label;
    it.flagged = state.flagged;
    if (state.comment !== undefined) it.comment = state.comment;
    if (state.version !== undefined) { it.version = state.version; it.conflict = null; } // one's own decision now
    if (it.dispute && decided(state.status)) it.dispute = null; // settled (or one's own change of mind): the poll says
    updateCard(i);
    return i;
  }

  // ---- saving: one request at a time, in the order the keys were pressed; each saved, or answered with a message
  const JOBS_MAX = 20;
  const jobs = [];
  let working = false;
  function enqueue(what, run) {
    if (ended()) { toast("not saved: " + (WHY[refusedFor] || WHY.link)(), true); return false; }
    if (jobs.length >= JOBS_MAX) { toast(`${jobs.length} actions are still waiting to be saved: this key was not taken`, true); return false; }
    if (working || jobs.length) toast(`${what}: waits for the decision being saved`);
    jobs.push(run);
    pumpJobs();
    return true;
  }
  async function pumpJobs() {
    if (working) return;
    working = true;
    try {
      while (jobs.length) {
        const run = jobs.shift();
        try { await run(); } catch (e) {
          if (e.status === 401) { // the session ended: nothing more can be saved
            const left = jobs.length;
            jobs.length = 0;
            toast(`not saved${left ? ` (nor the ${left} after it)` : ""}: ${e.message}`, true);
          }
        }
      }
    } finally { working = false; }
  }
  const nameFirst = () => { if (reviewer()) return true; toast("enter your name in Reviewer first", true); reviewerInput.focus(); return false; };

  const verbs = { accept: "accepted", reject: "rejected", relabel: "relabeled" };
  // one decision on image i: its version and conflict read when it is sent (after the decisions before it)
  async function save(i, action, extra) {
    const it = items[i];
    const t0 = performance.now();
    it.saving = true;
    updateCard(i);
    try {
      const out = await post("/api/decide", { key: it.key, action, version: it.version, override: !!it.conflict, ...extra });
      const ms = Math.round(performance.now() - t0);
      it.saving = false;
      apply({ ...out, key: it.key });
      if (i === sel) renderDetail();
      updateCounts(out.counts);
      updateMe(out.me);
      undoSizes.push(1);
      document.body.dataset.lastMs = ms;
      const what = action === "flag" ? (out.flagged ? "flagged: several objects" : "flag removed")
        : action === "comment" ? "comment" : verbs[action] + (action === "relabel" ? " → " + out.label : "");
      toast(`${what}${out.override ? " (override)" : ""} · saved (${ms} ms)`);
      if (todoView && !items.some((x) => x.status === "pending")) toast(`${what} · saved · all done on this page: n draws the next images`);
      return out;
    } catch (e) {
      it.saving = false;
      updateCard(i);
      if (e.status === 409) { (e.body.newest || []).forEach((c) => newer(c, true)); select(i); }
      toast(`${it.key}: ${e.message}`, true);
      throw e;
    }
  }
  // a key press: the decision waits its turn; accept and reject move on to the next image at once
  function decide(action, extra = {}, advance = false) {
    const i = sel;
    if (!items[i] || !nameFirst()) return;
    const taken = enqueue(verbs[action] || action, () => save(i, action, extra));
    if (taken && advance && i === sel && i < cards.length - 1) select(i + 1);
  }

  const box = $("relabel-box"), input = $("relabel-input");
  function openRelabel() {
    if (!items[sel]) return;
    box.hidden = false;
    $("relabel-error").textContent = "";
    input.value = "";
    input.focus();
  }
  function closeRelabel() { box.hidden = true; }
  function confirmRelabel() {
    const label = input.value.trim();
    if (!label) { $("relabel-error").textContent = "type or pick a class"; return; }
    const i = sel;
    if (!nameFirst()) return;
    enqueue("relabel", async () => {
      try {
        await save(i, "relabel", { label });
        if (sel === i) { closeRelabel(); if (i < cards.length - 1) select(i + 1); }
      } catch (e) {
        if (sel === i) { box.hidden = false; $("relabel-error").textContent = e.message; }
        throw e;
      }
    });
  }

  // ---- ranges: shift-click from the selected image, x for one more; A / R decide them in one request
  const picked = new Set(); // indices of the range selected for a bulk decision
  const undoSizes = []; // how many decisions each of this page's actions made: z takes the last one back whole
  function showPicked() {
    cards.forEach((c, i) => c.classList.toggle("picked", picked.has(i)));
    const n = picked.size;
    $("picked").textContent = n ? `${n} selected · Esc clears` : "range: shift-click, x";
    $("b-bulk-accept").disabled = $("b-bulk-reject").disabled = !n;
  }
  function pickRange(i) {
    const from = sel < 0 ? i : sel;
    for (let j = Math.min(from, i); j <= Math.max(from, i); j++) picked.add(j);
    showPicked();
  }
  function togglePick(i) {
    if (i < 0) return;
    picked.has(i) ? picked.delete(i) : picked.add(i);
    showPicked();
  }
  function bulk(action, indices, what) {
    if (!indices.length) { toast(what === "page" ? "nothing left to decide on this page" : "select images first", true); return; }
    if (indices.length > bulkMax) { toast(`at most ${bulkMax} images at once`, true); return; }
    if (!nameFirst()) return;
    picked.clear();
    showPicked();
    enqueue(`${indices.length} ${verbs[action]}`, async () => {
      try {
        const keys = indices.map((i) => items[i].key);
        const versions = Object.fromEntries(indices.map((i) => [items[i].key, items[i].version]));
        const out = await post("/api/bulk", { keys, action, versions });
        out.items.forEach(apply);
        updateCounts(out.counts);
        updateMe(out.me);
        undoSizes.push(out.items.length);
        renderDetail();
        toast(`${out.items.length} ${verbs[action]} · saved · z takes them back`);
      } catch (e) {
        if (e.status === 409) { (e.body.newest || []).forEach((c) => newer(c, true)); renderDetail(); }
        toast(e.message, true);
        throw e;
      }
    });
  }
  const pickedList = () => Array.from(picked).sort((a, b) => a - b);
  const undecided = () => items.map((it, i) => (it.status === "pending" ? i : -1)).filter((i) => i >= 0);
  $("b-bulk-accept").addEventListener("click", () => bulk("accept", pickedList()));
  $("b-bulk-reject").addEventListener("click", () => bulk("reject", pickedList()));
  $("b-page-accept").addEventListener("click", () => bulk("accept", undecided(), "page"));

  // ---- undo: the reviewer's last action taken back by new decisions (the server logs them)
  function undo() {
    if (!nameFirst()) return;
    enqueue("undo", async () => {
      try {
        const n = Math.min(undoSizes.pop() || 1, undoMax);
        const out = await post("/api/undo", { n });
        if (!out.items.length) { toast("nothing left to undo"); return; }
        let last = -1;
        out.items.forEach((s) => { const i = apply(s); if (i >= 0) last = i; });
        updateCounts(out.counts);
        updateMe(out.me);
        if (last >= 0 && !jobs.length) select(last); else renderDetail();
        const off = out.items.length - out.items.filter((s) => items.some((it) => it.key === s.key)).length;
        toast(`undone: ${out.items.length} decision${out.items.length > 1 ? "s" : ""}` + (off ? ` (${off} on another page)` : ""));
      } catch (e) { toast(e.message, true); throw e; }
    });
  }
  $("b-undo").addEventListener("click", () => undo());

  // ---- zoom: the image at full resolution (1:1), + / - scale it, drag or scroll to pan
  let scale = 1;
  const zoomImg = $("zoom-img"), pane = $("zoom-pane");
  function showZoom() {
    const it = items[sel];
    if (!it) return;
    const src = cards[sel].querySelector("img").src;
    if (zoomImg.dataset.key !== it.key && src) { zoomImg.dataset.key = it.key; zoomImg.src = src; }
    const w = zoomImg.naturalWidth, h = zoomImg.naturalHeight;
    if (w) { zoomImg.style.width = w * scale + "px"; zoomImg.style.height = h * scale + "px"; }
    $("zoom-scale").textContent = `${Math.round(scale * 100)}%` + (w ? ` of ${w}×${h}` : "");
  }
  zoomImg.addEventListener("load", showZoom);
  function openZoom() { if (!items[sel]) return; scale = 1; $("zoom").hidden = false; showZoom(); }
  function closeZoom() { $("zoom").hidden = true; }
  function rescale(f) {
    const cx = pane.scrollLeft + pane.clientWidth / 2, cy = pane.scrollTop + pane.clientHeight / 2;
    const next = Math.max(0.25, Math.min(16, scale * f));
    const r = next / scale;
    scale = next;
    showZoom();
    pane.scrollLeft = cx * r - pane.clientWidth / 2;
    pane.scrollTop = cy * r - pane.clientHeight / 2;
  }
  $("d-img").addEventListener("click", openZoom);
  $("zoom-close").addEventListener("click", closeZoom);
  let drag = null;
  pane.addEventListener("pointerdown", (e) => {
    drag = { x: e.clientX, y: e.clientY, left: pane.scrollLeft, top: pane.scrollTop };
    pane.setPointerCapture(e.pointerId);
    pane.classList.add("dragging");
  });
  pane.addEventListener("pointermove", (e) => {
    if (!drag) return;
    pane.scrollLeft = drag.left - (e.clientX - drag.x);
    pane.scrollTop = drag.top - (e.clientY - drag.y);
  });
  const endDrag = () => { drag = null; pane.classList.remove("dragging"); };
  pane.addEventListener("pointerup", endDrag);
  pane.addEventListener("pointercancel", endDrag);

  // ---- the keys overlay, the team panel
  const help = $("help"), team = $("team");
  const toggleHelp = (on = help.hidden) => { help.hidden = !on; };
  $("b-help").addEventListener("click", () => toggleHelp(true));
  $("help-close").addEventListener("click", () => toggleHelp(false));
  function cell(tag, text) { return el(tag, "", text === null || text === undefined ? "" : String(text)); }
  function tableOf(head, rows) {
    const t = el("table");
    const tr = el("tr");
    head.forEach((h) => tr.append(cell("th", h)));
    t.append(tr, ...rows.map((r) => { const row = el("tr"); r.forEach((c) => row.append(cell("td", c))); return row; }));
    return t;
  }
  async function showTeam() {
    if (!lead) return;
    team.hidden = false;
    try {
      const t = await get("/api/team");
      const cols = ["reviewer", "decided", "accepted", "rejected", "relabeled", "flagged", "decisions", "undos", "rate", "leased", "last"];
      $("team-progress").replaceChildren(...tableOf(["reviewer", "decided", "accepted", "rejected", "relabeled", "several objects",
        "decisions", "undos", "per hour", "handed out now", "latest"], t.progress.reviewers.map((p) => cols.map((c) => p[c]))).childNodes);
      const tot = t.progress.totals;
      $("team-totals").textContent = `${tot.images} images: ` + Object.entries(tot).filter(([k, n]) => k !== "images" && n)
        .map(([k, n]) => `${n} ${k.replace("_", " ")}`).join(", ");
      const a = t.agreement, box = $("team-agreement");
      box.replaceChildren();
      if (!a.items) { box.append(el("p", "muted", "Agreement: no image decided by two reviewers yet.")); return; }
      box.append(el("h3", "", `Agreement of the first two reviewers: ${a.items} images, observed ${a.observed_agreement}, κ ${a.kappa ?? "undefined"}`));
      for (const [name, title] of [["by_class", "class"], ["by_nuisance", "nuisance kind"]]) {
        box.append(tableOf([title, "images", "agreement", "κ"], Object.entries(a[name]).map(([g, s]) => [g, s.items, s.observed_agreement, s.kappa ?? "–"])));
      }
      box.append(el("p", "muted", "The two reviewers' decisions (rows: the first reviewer's, columns: the second's):"));
      box.append(tableOf(["", ...a.confusion.labels], a.confusion.labels.map((lb, i) => [lb, ...a.confusion.counts[i]])));
    } catch (e) { $("team-totals").textContent = e.message; }
  }
  $("b-team").addEventListener("click", showTeam);
  $("team-close").addEventListener("click", () => (team.hidden = true));

  // ---- pages
  const goPage = (id) => {
    // the work view, every image on it decided: the next ones are the first the queue still has for this reviewer
    if (id === "next" && todoView && !items.some((it) => it.status === "pending")) { form.submit(); return; }
    const b = $(id); if (b) b.click(); else toast(id === "next" ? "this is the last page" : "this is the first page");
  };

  // ---- others' decisions: an image's newest state (from /api/changes or a 409) on the page
  function newer(c, stale = false) {
    const i = items.findIndex((it) => it.key === c.key);
    if (i < 0) return;
    const it = items[i];
    if (it.saving) return; // its own answer follows
    if (double) { // blind: one's own decisions, how many reviewers decided (a lead: whether it is still disputed)
      it.n = c.n;
      if (c.version !== undefined) it.version = c.version;
      if ("dispute" in c) it.dispute = c.dispute;
      if (it.status !== c.status) { it.status = c.status; it.review_label = c.status === "relabeled" ? c.label : it.label; it.flagged = c.flagged; }
    } else if (c.by === reviewer() || c.status === "pending" && !stale) { // one's own (another tab, a command), or undone
      Object.assign(it, { status: c.status, review_label: c.label || it.label, flagged: c.flagged, version: c.version, conflict: null });
    } else { // someone else's: shown; the page has seen it, so the next decision on it overrides it knowingly
      Object.assign(it, { status: c.status, review_label: c.label || it.label, flagged: c.flagged, conflict: c, version: c.version });
    }
    updateCard(i);
    if (i === sel) renderDetail();
  }

  let lastTodo = null, lastCounts = null, misses = 0, timer = null;
  const emptySince = Date.now();
  async function poll() {
    if (ended()) { clearInterval(timer); return; }
    let res;
    try {
      const q = new URLSearchParams({ reviewer: reviewer() });
      if (cursor !== null) q.set("since", cursor);
      res = await fetch("/api/changes?" + q, { headers: headers() });
    } catch (e) { // no answer at all: the server stopped, or is restarting
      if (++misses >= 2) banner("gone");
      return;
    }
    misses = 0;
    unbanner();
    if (!res.ok) { await fail(res); return; }
    const ch = await res.json();
    if (ch.reload) { location.reload(); return; }
    cursor = ch.cursor;
    ch.items.forEach((c) => newer(c));
    const counts = JSON.stringify(ch.counts);
    if (counts !== lastCounts) { lastCounts = counts; updateCounts(ch.counts); }
    // a work view with nothing on it: the next images, once others' decisions free some (or every 30 s)
    if (todoView && !cards.length && ch.counts.todo > 0
        && ((lastTodo !== null && ch.counts.todo !== lastTodo) || Date.now() - emptySince > 30000)) form.submit();
    lastTodo = ch.counts.todo;
  }

  // ---- real images of the class (review.references in the config)
  const refs = {};
  async function showReferences(label) {
    if (!references) return;
    const box = $("d-refs"), row = box.querySelector(".refs");
    box.dataset.class = label;
    try {
      refs[label] = refs[label] || (await get("/api/references?" + new URLSearchParams({ class: label })));
    } catch (e) { refs[label] = []; }
    if (box.dataset.class !== label) return; // another image was selected meanwhile
    const urls = await Promise.all(refs[label].map(blob));
    if (box.dataset.class !== label) return;
    row.replaceChildren(...urls.map((src) => { const im = el("img"); im.src = src; im.alt = label; return im; }));
    box.hidden = !urls.length;
  }
  $("relabel-go").addEventListener("click", confirmRelabel);
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") { e.preventDefault(); confirmRelabel(); }
    if (e.key === "Escape") { e.preventDefault(); closeRelabel(); }
    e.stopPropagation();
  });

  function comment() {
    const i = sel;
    if (!items[i]) return;
    const text = prompt("Comment on this image (empty: none)", items[i].comment || "");
    if (text !== null && nameFirst()) enqueue("comment", () => save(i, "comment", { comment: text }));
  }
  // the selected image's history (every decision on it; in double review the reviewer's own, an adjudicator's all)
  async function showHistory() {
    const it = items[sel], list = $("d-history-list");
    if (!it || !$("d-history").open) return;
    try {
      const h = await get("/api/history?" + new URLSearchParams({ key: it.key, reviewer: reviewer() }));
      if (items[sel] !== it) return;
      list.replaceChildren(...(h.history || []).map((d) => el("li", d.undone ? "muted" : "",
        `${d.time} ${d.reviewer}: ${d.status}${d.label ? " → " + d.label : ""}` + (d.undoes != null ? " (undo)" : "")
        + (d.overrides ? ` (over ${d.overrides})` : "") + (d.note ? ` · ${d.note}` : ""))));
    } catch (e) { list.replaceChildren(); }
  }
  $("d-history").addEventListener("toggle", showHistory);

  // a disputed image settled with one reviewer's decision (1: the first, 2: the second)
  function settle(n) {
    const it = items[sel], d = it && it.dispute && it.dispute[n - 1];
    if (!d) { toast(it && it.dispute ? `no decision ${n} on this image` : "1 / 2 settle a disputed image (an adjudicator's)", true); return; }
    const action = { accepted: "accept", rejected: "reject", relabeled: "relabel" }[d.status];
    decide(action, action === "relabel" ? { label: d.label } : {}, true);
  }

  const act = (a) => (a === "relabel" ? openRelabel() : a === "comment" ? comment() : a === "flag"
    ? decide("flag", { flagged: !items[sel]?.flagged }) : decide(a, {}, true));
  document.querySelectorAll(".actions button").forEach((b) => b.addEventListener("click", () => act(b.dataset.action)));
  $("d-img").addEventListener("load", (e) => e.target.classList.toggle("small", e.target.naturalWidth < 256));

  function columns() {
    if (!cards.length) return 1;
    const top = cards[0].offsetTop;
    const n = cards.findIndex((c) => c.offsetTop !== top);
    return n === -1 ? cards.length : n;
  }

  function keys(e) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (["INPUT", "SELECT", "TEXTAREA"].includes(e.target.tagName)) return;
    if (!help.hidden || !team.hidden) { // an overlay takes ? and Esc only
      if (e.key === "?" || e.key === "Escape") { e.preventDefault(); toggleHelp(false); team.hidden = true; }
      return;
    }
    const zoomed = !$("zoom").hidden;
    const k = {
      a: () => act("accept"), r: () => act("reject"), l: () => act("relabel"), s: () => act("flag"), c: () => act("comment"),
      1: () => settle(1), 2: () => settle(2), t: () => showTeam(),
      j: () => select(sel + 1), ArrowRight: () => select(sel + 1),
      k: () => select(sel - 1), ArrowLeft: () => select(sel - 1),
      ArrowDown: () => select(sel + columns()), ArrowUp: () => select(sel - columns()),
      z: () => undo(), x: () => togglePick(sel),
      A: () => bulk("accept", pickedList()), R: () => bulk("reject", pickedList()), P: () => bulk("accept", undecided(), "page"),
      n: () => goPage("next"), PageDown: () => goPage("next"), p: () => goPage("prev"), PageUp: () => goPage("prev"),
      "+": () => (zoomed ? rescale(2) : openZoom()), "=": () => (zoomed ? rescale(2) : openZoom()),
      "-": () => zoomed && rescale(0.5), "?": () => toggleHelp(true),
      Escape: () => { if (zoomed) closeZoom(); else if (!box.hidden) closeRelabel(); else { picked.clear(); showPicked(); } },
    };
    if (zoomed && ["ArrowDown", "ArrowUp", "ArrowLeft", "ArrowRight", "PageDown", "PageUp"].includes(e.key)) return; // pans
    if (k[e.key]) { e.preventDefault(); k[e.key](); }
  }

  async function start() {
    auth = await signIn();
    if (!auth) return; // the shell says how to get a link
    // the reviewer's name on the owner's page: the address's, else the last one used in this browser
    const stored = localStorage.getItem("gensets-reviewer");
    if (auth.reviewer === null && !params.get("reviewer") && stored) {
      params.set("reviewer", stored);
      history.replaceState(null, "", location.pathname + "?" + params);
    }
    let p;
    try { p = await get("/api/page?" + params); } catch (e) {
      if (e.status === 401) { document.body.className = "out"; $("signin-why").textContent = e.message; $("banner").hidden = true; return; }
      document.body.className = "";
      banner("error", e.message);
      return;
    }
    document.body.className = "";
    render(p);
    if (!p.signed_in) reviewerInput.addEventListener("change", () => {
      localStorage.setItem("gensets-reviewer", reviewer());
      if (double) form.submit(); // each reviewer sees their own decisions
    });
    form.querySelectorAll("select").forEach((s) => s.addEventListener("change", () => form.submit()));
    cards.forEach((c, i) => c.addEventListener("click", (e) => {
      if (e.shiftKey) { e.preventDefault(); pickRange(i); }
      else if (e.ctrlKey || e.metaKey) togglePick(i);
      select(i, false);
    }));
    document.addEventListener("keydown", keys);
    select(0, false);
    timer = setInterval(poll, pollMs);
    document.body.dataset.ready = "1";
  }
  start();
  window.gensetsReview = { get items() { return items; }, select, decide, undo, bulk, poll }; // for tests and the console
})();
