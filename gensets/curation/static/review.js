// gensets review page: selection, keyboard shortcuts and decisions (POST /api/decide, saved at once).
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
    $("b-flag").setAttribute("aria-pressed", String(!!it.flagged));
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

  function updateCard(i) {
    const it = items[i], c = cards[i];
    c.className = `card status-${it.status}${it.flagged ? " flagged" : ""}${i === sel ? " sel" : ""}`;
    c.querySelector(".badge").textContent = it.status;
    c.querySelector(".new").textContent = it.status === "relabeled" ? " → " + it.review_label : "";
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
    try {
      const res = await fetch("/api/decide", {
        method: "POST", headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
        body: JSON.stringify({ key: it.key, action, reviewer: reviewer(), ...extra }),
      });
      const out = await res.json().catch(() => ({ error: res.statusText }));
      if (!res.ok) throw new Error(out.error || res.statusText);
      const ms = Math.round(performance.now() - t0);
      if (double && it.status === "pending" && out.status !== "pending") it.n += 1;
      it.status = out.status;
      it.review_label = out.status === "relabeled" ? out.label : it.label;
      it.flagged = out.flagged;
      updateCard(sel);
      updateCounts(out.counts);
      document.body.dataset.lastMs = ms;
      const what = action === "flag" ? (out.flagged ? "flagged: several objects" : "flag removed")
        : verbs[action] + (action === "relabel" ? " → " + out.label : "");
      toast(`${what} · saved (${ms} ms)`);
      if (action === "flag") renderDetail(); else if (sel < cards.length - 1) select(sel + 1); else renderDetail();
    } catch (e) {
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
  $("relabel-go").addEventListener("click", confirmRelabel);
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") { e.preventDefault(); confirmRelabel(); }
    if (e.key === "Escape") { e.preventDefault(); closeRelabel(); }
    e.stopPropagation();
  });

  const act = (a) => (a === "relabel" ? openRelabel() : a === "flag"
    ? safe(decide("flag", { flagged: !items[sel]?.flagged })) : safe(decide(a)));
  document.querySelectorAll(".actions button").forEach((b) => b.addEventListener("click", () => act(b.dataset.action)));
  cards.forEach((c, i) => c.addEventListener("click", () => select(i, false)));
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
    const keys = {
      a: () => act("accept"), r: () => act("reject"), l: () => act("relabel"), s: () => act("flag"),
      j: () => select(sel + 1), ArrowRight: () => select(sel + 1),
      k: () => select(sel - 1), ArrowLeft: () => select(sel - 1),
      ArrowDown: () => select(sel + columns()), ArrowUp: () => select(sel - columns()),
      Escape: closeRelabel,
    };
    if (keys[e.key]) { e.preventDefault(); keys[e.key](); }
  });

  select(0, false);
  if (double) refreshKappa();
  window.gensetsReview = { items, select, decide }; // for tests and the console
})();
