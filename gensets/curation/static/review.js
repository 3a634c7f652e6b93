// gensets review page: selection, keyboard shortcuts and decisions (POST /api/decide, saved at once); ranges
// (POST /api/bulk), comments (POST /api/decide, action comment), an image's history (GET /api/history), undo (POST /api/undo: a new decision, never a deletion), zoom, the keys overlay, references.
// Team work: every decision carries the version of the image it was made on; a newer decision by someone else
// answers 409 (shown with who made it) and the next key press on that image overrides it knowingly. The page polls
// GET /api/changes (which also renews the leases of its images) and shows others' decisions, counts included.
(() => {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const items = JSON.parse($("items-data").textContent);
  const cards = Array.from(document.querySelectorAll(".card"));
  const double = document.body.dataset.double === "1";
  const reviewerInput = $("reviewer");
  const form = $("filters");
  let sel = -1;
  let busy = false;
  const picked = new Set(); // indices of the range selected for a bulk decision
  const undoSizes = []; // how many decisions each of this page's actions made: z takes the last one back whole
  const undoMax = Number(document.body.dataset.undoMax) || 1;
  const bulkMax = Number(document.body.dataset.bulkMax) || 1;
  const todoView = document.body.dataset.view === "todo"; // the work view: its images are leased to this reviewer
  const pollMs = Number(document.body.dataset.pollMs) || 2000;
  let cursor = document.body.dataset.cursor === "" ? null : Number(document.body.dataset.cursor);

  // every POST carries the session's CSRF token, which the server embedded in the page
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  // the reviewer's name: with a personal link, the link's (the field is read-only); else the URL wins, else the
  // last one used in this browser
  const signedIn = reviewerInput.dataset.signedIn === "1";
  const fromUrl = new URLSearchParams(location.search).get("reviewer");
  const stored = localStorage.getItem("gensets-reviewer");
  if (!signedIn && !fromUrl && stored && stored !== reviewerInput.value) {
    reviewerInput.value = stored;
    // blind double review: the page was rendered with the server's default reviewer's decisions; show this one's
    if (double) { document.body.hidden = true; form.submit(); return; }
  }
  const reviewer = () => reviewerInput.value.trim();
  if (!signedIn) reviewerInput.addEventListener("change", () => {
    localStorage.setItem("gensets-reviewer", reviewer());
    if (double) form.submit(); // each reviewer sees their own decisions
  });
  form.querySelectorAll("select").forEach((s) => s.addEventListener("change", () => form.submit()));

  let toastTimer;
  function toast(text, bad = false) {
    const t = $("toast");
    t.textContent = text;
    t.className = "show" + (bad ? " bad" : "");
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => (t.className = ""), bad ? 4000 : 1600);
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function renderDetail() {
    const it = items[sel];
    if (!it) return;
    const img = $("d-img");
    img.src = cards[sel].querySelector("img").src;
    img.alt = it.label;
    $("d-class").textContent = it.label;
    $("d-new").textContent = it.status === "relabeled" ? " → " + it.review_label : "";
    $("d-nuisance").textContent = `${it.config}: ${it.nuisance}`;
    $("d-prompt").textContent = it.prompt || "";
    $("d-seed").textContent = it.seed ?? "";
    $("d-key").textContent = it.key;
    $("d-status").textContent = it.status + (it.flagged ? " · several objects" : "") + (double ? ` · ${it.n} reviewer(s) so far` : "");
    if (!$("zoom").hidden) showZoom();
    showReferences(it.label);
    $("b-flag").setAttribute("aria-pressed", String(!!it.flagged));
    $("d-comment").textContent = it.comment || "";
    showConflict(it);
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
    if (sel >= 0) cards[sel].classList.remove("sel");
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

  function updateCard(i) {
    const it = items[i], c = cards[i];
    c.className = `card status-${it.status}${it.flagged ? " flagged" : ""}${it.conflict ? " conflict" : ""}${i === sel ? " sel" : ""}`;
    c.querySelector(".badge").textContent = it.status + (it.conflict ? " · " + it.conflict.by : "");
    c.querySelector(".new").textContent = it.status === "relabeled" ? " → " + it.review_label : "";
  }

  function updateMe(me) {
    if (!me) return;
    $("me-session").textContent = me.session;
    $("me-decided").textContent = me.decided;
    $("me-rate").textContent = me.rate == null ? "–" : Math.round(me.rate);
  }

  async function post(path, body) {
    const res = await fetch(path, {
      method: "POST", headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify({ reviewer: reviewer(), ...body }),
    });
    const out = await res.json().catch(() => ({ error: res.statusText }));
    if (!res.ok) throw Object.assign(new Error(out.error || res.statusText), { status: res.status, body: out });
    return out;
  }

  // an image's new state (from a bulk decision or an undo) on the page, where it is shown
  function apply(state) {
    const i = items.findIndex((it) => it.key === state.key);
    if (i < 0) return -1;
    const it = items[i];
    const decided = (s) => s !== "pending" && s !== "below-quality";
    if (double && decided(state.status) !== decided(it.status)) it.n += decided(state.status) ? 1 : -1;
    it.status = state.status;
    it.review_label = state.status === "relabeled" ? state.label : it.label;
    it.flagged = state.flagged;
    if (state.version !== undefined) { it.version = state.version; it.conflict = null; } // one's own decision now
    updateCard(i);
    return i;
  }

  function updateCounts(c) {
    for (const k of ["pending", "accepted", "rejected", "relabeled", "flagged", "total", "double_reviewed"]) {
      const e = $("n-" + k);
      if (e && c[k] !== undefined) e.textContent = c[k];
    }
    const total = c.total || 1;
    for (const k of ["accepted", "relabeled", "rejected"]) {
      document.querySelector(".seg." + k).style.width = (100 * c[k]) / total + "%";
    }
    if (double) refreshKappa();
  }

  async function refreshKappa() {
    try {
      const a = await (await fetch("/api/agreement")).json();
      $("kappa").textContent = a.kappa == null ? "–" : a.kappa.toFixed(2) + ` (${a.items})`;
    } catch (e) { /* the count stays as it was */ }
  }

  const verbs = { accept: "accepted", reject: "rejected", relabel: "relabeled" };
  async function decide(action, extra = {}) {
    const it = items[sel];
    if (!it || busy) return;
    if (!reviewer()) { toast("enter your name in Reviewer first", true); reviewerInput.focus(); return; }
    busy = true;
    const t0 = performance.now();
    const i = sel;
    try {
      const out = await post("/api/decide", { key: it.key, action, version: it.version, override: !!it.conflict, ...extra });
      const ms = Math.round(performance.now() - t0);
      if (double && it.status === "pending" && out.status !== "pending") it.n += 1;
      it.status = out.status;
      it.review_label = out.status === "relabeled" ? out.label : it.label;
      it.flagged = out.flagged;
      it.comment = out.comment;
      it.version = out.version;
      it.conflict = null;
      updateCard(sel);
      updateCounts(out.counts);
      updateMe(out.me);
      undoSizes.push(1);
      document.body.dataset.lastMs = ms;
      const what = action === "flag" ? (out.flagged ? "flagged: several objects" : "flag removed")
        : action === "comment" ? "comment" : verbs[action] + (action === "relabel" ? " → " + out.label : "");
      toast(`${what}${out.override ? " (override)" : ""} · saved (${ms} ms)`);
      if (action === "flag" || action === "comment") renderDetail(); else if (sel < cards.length - 1) select(sel + 1); else renderDetail();
      if (todoView && !items.some((x) => x.status === "pending")) toast(`${what} · saved · all done on this page: n draws the next images`);
    } catch (e) {
      if (e.status === 409) { (e.body.newest || []).forEach((c) => newer(c, true)); if (sel === i) renderDetail(); }
      toast(e.message, true);
      throw e;
    } finally {
      busy = false;
    }
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
  async function confirmRelabel() {
    const label = input.value.trim();
    if (!label) { $("relabel-error").textContent = "type or pick a class"; return; }
    try {
      await decide("relabel", { label });
      closeRelabel();
    } catch (e) {
      $("relabel-error").textContent = e.message;
    }
  }
  const safe = (p) => p.catch(() => {});

  // ---- ranges: shift-click from the selected image, x for one more; A / R decide them in one request
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
  async function bulk(action, indices, what) {
    if (busy) return;
    const keys = indices.map((i) => items[i].key);
    if (!keys.length) { toast(what === "page" ? "nothing left to decide on this page" : "select images first", true); return; }
    if (keys.length > bulkMax) { toast(`at most ${bulkMax} images at once`, true); return; }
    if (!reviewer()) { toast("enter your name in Reviewer first", true); reviewerInput.focus(); return; }
    busy = true;
    try {
      const versions = Object.fromEntries(indices.map((i) => [items[i].key, items[i].version]));
      const out = await post("/api/bulk", { keys, action, versions });
      out.items.forEach(apply);
      updateCounts(out.counts);
      updateMe(out.me);
      undoSizes.push(out.items.length);
      picked.clear();
      showPicked();
      renderDetail();
      toast(`${out.items.length} ${verbs[action]} · saved · z takes them back`);
    } catch (e) {
      if (e.status === 409) { (e.body.newest || []).forEach((c) => newer(c, true)); renderDetail(); }
      toast(e.message, true);
    } finally {
      busy = false;
    }
  }
  const pickedList = () => Array.from(picked).sort((a, b) => a - b);
  const undecided = () => items.map((it, i) => (it.status === "pending" ? i : -1)).filter((i) => i >= 0);
  $("b-bulk-accept").addEventListener("click", () => bulk("accept", pickedList()));
  $("b-bulk-reject").addEventListener("click", () => bulk("reject", pickedList()));
  $("b-page-accept").addEventListener("click", () => bulk("accept", undecided(), "page"));

  // ---- undo: the reviewer's last action taken back by new decisions (the server logs them)
  async function undo() {
    if (busy) return;
    if (!reviewer()) { toast("enter your name in Reviewer first", true); reviewerInput.focus(); return; }
    busy = true;
    try {
      const n = Math.min(undoSizes.pop() || 1, undoMax);
      const out = await post("/api/undo", { n });
      if (!out.items.length) { toast("nothing left to undo"); return; }
      let last = -1;
      out.items.forEach((s) => { const i = apply(s); if (i >= 0) last = i; });
      updateCounts(out.counts);
      updateMe(out.me);
      if (last >= 0) select(last); else renderDetail();
      const off = out.items.length - out.items.filter((s) => items.some((it) => it.key === s.key)).length;
      toast(`undone: ${out.items.length} decision${out.items.length > 1 ? "s" : ""}` + (off ? ` (${off} on another page)` : ""));
    } catch (e) {
      toast(e.message, true);
    } finally {
      busy = false;
    }
  }
  $("b-undo").addEventListener("click", () => undo());

  // ---- zoom: the image at full resolution (1:1), + / - scale it, drag or scroll to pan
  let scale = 1;
  const zoomImg = $("zoom-img"), pane = $("zoom-pane");
  function showZoom() {
    const it = items[sel];
    if (!it) return;
    if (zoomImg.dataset.key !== it.key) { zoomImg.dataset.key = it.key; zoomImg.src = cards[sel].querySelector("img").src; }
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

  // ---- the keys overlay
  const help = $("help");
  const toggleHelp = (on = help.hidden) => { help.hidden = !on; };
  $("b-help").addEventListener("click", () => toggleHelp(true));
  $("help-close").addEventListener("click", () => toggleHelp(false));

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
    if (double) { // blind: one's own decisions, and how many reviewers decided
      it.n = c.n;
      if (c.version !== undefined) it.version = c.version;
      if (it.status !== c.status) { it.status = c.status; it.review_label = c.status === "relabeled" ? c.label : it.label; it.flagged = c.flagged; }
    } else if (c.by === reviewer() || c.status === "pending" && !stale) { // one's own (another tab, a command), or undone
      Object.assign(it, { status: c.status, review_label: c.label || it.label, flagged: c.flagged, version: c.version, conflict: null });
    } else { // someone else's: shown; a decision on it is refused (409) once, then overrides it
      Object.assign(it, { status: c.status, review_label: c.label || it.label, flagged: c.flagged, conflict: c });
      if (stale) it.version = c.version; // the page has seen it now: the next decision overrides knowingly
    }
    updateCard(i);
    if (i === sel) renderDetail();
  }

  let lastTodo = null, lastCounts = null;
  const emptySince = Date.now();
  async function poll() {
    try {
      const q = new URLSearchParams({ reviewer: reviewer() });
      if (cursor !== null) q.set("since", cursor);
      const res = await fetch("/api/changes?" + q);
      if (!res.ok) return;
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
    } catch (e) { /* the next poll tries again */ }
  }
  setInterval(poll, pollMs);

  // ---- real images of the class (review.references in the config)
  const refs = {};
  async function showReferences(label) {
    if (document.body.dataset.references !== "1") return;
    const box = $("d-refs"), row = box.querySelector(".refs");
    box.dataset.class = label;
    try {
      refs[label] = refs[label] || (await (await fetch("/api/references?" + new URLSearchParams({ class: label }))).json());
    } catch (e) { refs[label] = []; }
    if (box.dataset.class !== label) return; // another image was selected meanwhile
    row.replaceChildren(...refs[label].map((src) => { const im = el("img"); im.src = src; im.alt = label; return im; }));
    box.hidden = !refs[label].length;
  }
  $("relabel-go").addEventListener("click", confirmRelabel);
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") { e.preventDefault(); confirmRelabel(); }
    if (e.key === "Escape") { e.preventDefault(); closeRelabel(); }
    e.stopPropagation();
  });

  function comment() {
    if (!items[sel]) return;
    const text = prompt("Comment on this image (empty: none)", items[sel].comment || "");
    if (text !== null) safe(decide("comment", { comment: text }));
  }
  // the selected image's history (every decision on it; in double review the reviewer's own), while shown
  async function showHistory() {
    const it = items[sel], list = $("d-history-list");
    if (!it || !$("d-history").open) return;
    try {
      const h = await (await fetch("/api/history?" + new URLSearchParams({ key: it.key, reviewer: reviewer() }))).json();
      if (items[sel] !== it) return;
      list.replaceChildren(...(h.history || []).map((d) => el("li", d.undone ? "muted" : "",
        `${d.time} ${d.reviewer}: ${d.status}${d.label ? " → " + d.label : ""}` + (d.undoes != null ? " (undo)" : "")
        + (d.overrides ? ` (over ${d.overrides})` : "") + (d.note ? ` · ${d.note}` : ""))));
    } catch (e) { list.replaceChildren(); }
  }
  $("d-history").addEventListener("toggle", showHistory);

  const act = (a) => (a === "relabel" ? openRelabel() : a === "comment" ? comment() : a === "flag"
    ? safe(decide("flag", { flagged: !items[sel]?.flagged })) : safe(decide(a)));
  document.querySelectorAll(".actions button").forEach((b) => b.addEventListener("click", () => act(b.dataset.action)));
  cards.forEach((c, i) => c.addEventListener("click", (e) => {
    if (e.shiftKey) { e.preventDefault(); pickRange(i); }
    else if (e.ctrlKey || e.metaKey) togglePick(i);
    select(i, false);
  }));
  cards.forEach((c) => {
    const img = c.querySelector("img");
    const mark = () => { if (img.naturalWidth && img.naturalWidth < 160) img.classList.add("small"); };
    img.complete ? mark() : img.addEventListener("load", mark);
  });
  $("d-img").addEventListener("load", (e) => e.target.classList.toggle("small", e.target.naturalWidth < 256));

  function columns() {
    if (!cards.length) return 1;
    const top = cards[0].offsetTop;
    const n = cards.findIndex((c) => c.offsetTop !== top);
    return n === -1 ? cards.length : n;
  }

  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (["INPUT", "SELECT", "TEXTAREA"].includes(e.target.tagName)) return;
    if (!help.hidden) { // the overlay takes ? and Esc only
      if (e.key === "?" || e.key === "Escape") { e.preventDefault(); toggleHelp(false); }
      return;
    }
    const zoomed = !$("zoom").hidden;
    const keys = {
      a: () => act("accept"), r: () => act("reject"), l: () => act("relabel"), s: () => act("flag"), c: () => act("comment"),
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
    if (keys[e.key]) { e.preventDefault(); keys[e.key](); }
  });

  select(0, false);
  if (double) refreshKappa();
  window.gensetsReview = { items, select, decide, undo, bulk, poll }; // for tests and the console
})();
