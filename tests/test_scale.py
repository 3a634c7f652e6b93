"""Scale (#18): the shape of each step, without timing it.

The review page's tables agree with a full scan of the decisions (the page's code before #18, kept here as the
reference) after any sequence of decisions; a page and a decision run the same statements at any size and each
touches at most two row groups (DuckDB's own profiler says so); the page is served without opening a candidate
shard; ingest gives the same rows in any batch size as a plain read of the shards; finalize holds one shard of
images; the card's sample picks equal the greedy choice over every sample; a build with nothing to do, finalize,
card and review never import torch.
"""

import importlib.util
import json
import random
import shutil
import subprocess
import sys
import tracemalloc
from collections import Counter

import pytest

from .conftest import HANG, ROOT, SMOKE, owner_session

ROW_GROUP = 122_880  # DuckDB's rows per row group


def _copy(reference, tmp_path, name="ws"):
    ws = tmp_path / name
    shutil.copytree(reference, ws)
    return ws


# ------------------------------------------------------------------------------------------ the reference
# The review page before #18: every queue row fetched, then filtered, counted and sliced in Python (each reviewer's
# latest decision as it is, its NULL note included: arg_max_null; #54 item 10 was arg_max's passing NULLs over).
OLD_ROWS = """
    WITH latest AS (
        SELECT key, reviewer, arg_max_null(status, seq) AS status, arg_max_null(label, seq) AS label,
               arg_max_null(note, seq) AS note
        FROM (SELECT *, rowid AS seq FROM review_log) GROUP BY key, reviewer),
         nrev AS (SELECT key, count(*) AS n FROM latest WHERE status <> 'pending' GROUP BY key)
    SELECT s.key, s.config, s.label, s.nuisance, r.status, r.label AS review_label, r.note,
           m.status AS my_status, m.label AS my_label, m.note AS my_note, coalesce(n.n, 0) AS n
    FROM reviews r JOIN samples s USING (key)
    LEFT JOIN latest m ON m.key = r.key AND m.reviewer = ?
    LEFT JOIN nrev n ON n.key = r.key
    ORDER BY s.config, s.label, s.key"""


def _flag(note):
    return bool(note) and "several objects" in [p.strip() for p in note.split(";")]


def old_rows(con, reviewer, double):
    cur = con.execute(OLD_ROWS, [reviewer])
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    for r in rows:
        if double:
            mine = r["my_status"] not in (None, "pending")
            below = r["status"] == "below-quality"
            r["status"] = r["my_status"] if mine else "below-quality" if below else "pending"
            r["review_label"] = r["my_label"] if mine else r["label"]
            r["note"] = r["my_note"]
            r["todo"] = not mine and not below and r["n"] < 2
        else:
            r["todo"] = r["status"] == "pending"
        r["flagged"] = _flag(r["note"])
    return rows


def old_counts(rows):
    c = Counter(r["status"] for r in rows)
    out = {s: c.get(s, 0) for s in ("pending", "accepted", "rejected", "relabeled")}
    out.update(total=len(rows), flagged=sum(r["flagged"] for r in rows), todo=sum(r["todo"] for r in rows),
               double_reviewed=sum(r["n"] >= 2 for r in rows))
    return out


def old_shown(rows, label, config, status):
    return [r for r in rows if (not label or r["label"] == label) and (not config or r["config"] == config)
            and (status == "all" or (r["todo"] if status == "todo" else
                                     r["flagged"] if status == "flagged" else r["status"] == status))]


def _derived(con):
    """The page's tables, comparable: queue in page order, the rest as sorted lists / non-zero counts."""
    return (con.execute("SELECT * FROM queue ORDER BY pos").fetchall(),
            sorted(con.execute("SELECT * FROM review_latest").fetchall(), key=str),
            {tuple(r[:4]): r[4] for r in con.execute("SELECT * FROM queue_counts").fetchall() if r[4]})


def _check_views(con, reviewers):
    from gensets.curation import queue

    fields = ("key", "status", "review_label", "flagged", "todo", "n")
    for double in (False, True):
        for who in reviewers:
            rows = old_rows(con, who, double)
            for label, config, view in [(None, None, v) for v in queue.VIEWS] + [("mug", None, "all"),
                                                                                   (None, "texture", "todo")]:
                want = old_shown(rows, label, config, view)
                s = queue.summary(con, who, double, label=label, config=config, view=view)
                assert s["counts"] == old_counts(rows), (who, double)
                assert s["matching"] == len(want), (who, double, label, config, view)
                assert s["classes"] == sorted(Counter(r["label"] for r in rows).items())
                assert s["configs"] == sorted(Counter(r["config"] for r in rows).items())
                pages, after = [], None
                while True:  # forward with the cursors, then back from the end
                    p = queue.page(con, who, double, label=label, config=config, view=view, after=after, size=7)
                    pages.append(p)
                    if p["after"] is None:
                        break
                    after = p["after"]
                got = [tuple(it[f] for f in fields) for p in pages for it in p["items"]]
                assert got == [tuple(r[f] for f in fields) for r in want], (who, double, label, config, view)
                back, before = [], pages[-1]["before"]
                while before is not None:
                    p = queue.page(con, who, double, label=label, config=config, view=view, before=before, size=7)
                    back.insert(0, p["items"])
                    before = p["before"]
                assert back == [p["items"] for p in pages[:-1]]


@pytest.mark.slow
def test_page_tables_agree_with_a_full_scan_after_any_decisions(reference, tmp_path):
    """Random decisions (accept, reject, relabel, flag, pending, batches with a key twice) by three reviewers, with
    images below quality: after every few, counts, filter options, matching numbers and every page walked by cursor (forward and back),
    in single and double review, equal the old full scan; the tables kept by refresh equal a rebuild."""
    from gensets.curation import queue, review, review_state

    ws = _copy(reference, tmp_path)
    rs = review_state.ReviewState(ws, reviewer="ana", keep_open=True)
    con = rs.con
    rng = random.Random(0)
    every = [k for (k,) in con.execute("SELECT key FROM reviews ORDER BY key").fetchall()]
    keys = every[::3]  # 14 images decided; 5 images below quality (out of the queue), 2 of them decided later
    con.execute("UPDATE reviews SET status = 'below-quality' WHERE list_contains(?, key)", [every[:5]])
    queue.rebuild(con)
    reviewers = ["ana", "ben", "cleo"]
    try:
        for step in range(40):
            rs.double = step >= 20  # the same tables serve both modes
            key, who = rng.choice(keys), rng.choice(reviewers)
            action = rng.choice(["accept", "reject", "relabel", "flag", "flag", "pending", "batch"])
            if action == "flag":
                try:
                    rs.decide(key, "flag", who, flagged=rng.random() < 0.7)
                except Exception as e:  # double review: decide first, then flag; below quality: decide first
                    assert "first" in str(e) or "below-quality" in str(e)
            elif action == "pending":
                review.decide(con, [key], "pending", reviewer=who, note=rng.choice([None, "several objects "]))
            elif action == "batch":  # one transaction, the same image twice
                other = rng.choice(keys)
                review.record(con, [(key, "accepted", None, who, "several objects; ok"),
                                    (other, "relabeled", "teapot", "cleo", None),
                                    (key, "rejected", None, "ben", None)])
            else:
                rs.decide(key, action, who, label="teapot" if action == "relabel" else None)
            if step % 5 == 4:
                _check_views(con, [*reviewers, "nobody"])
                kept = _derived(con)
                queue.rebuild(con)
                assert _derived(con) == kept
        assert con.execute("SELECT count(DISTINCT reviewer) FROM review_log").fetchone()[0] == 3
    finally:
        rs.close()


def test_decisions_on_distinct_images_write_what_one_statement_each_wrote(reference, tmp_path):
    """`review accept --all-pending` and every batch of distinct images take two statements; the reviews and the
    log they write equal the per-decision statements of before #18 (run here, by hand, on a copy), log order
    included: accept, relabel, reject, pending and a note, across two reviewers."""
    import datetime as dt

    from gensets.curation import review, state

    a, b = _copy(reference, tmp_path, "a"), _copy(reference, tmp_path, "b")
    con_a, con_b = state.connect(a / "state.duckdb"), state.connect(b / "state.duckdb")
    keys = [k for (k,) in con_a.execute("SELECT key FROM reviews ORDER BY key DESC").fetchall()][:6]
    decisions = [(keys[0], "accepted", None, "ana", None), (keys[1], "relabeled", "teapot", "ana", "unsure"),
                 (keys[2], "rejected", None, "ben", None), (keys[3], "pending", None, "ben", "later"),
                 (keys[4], "relabeled", "teapot", "ben", None), (keys[5], "accepted", "ignored", "ana", None)]
    review.record(con_a, decisions)
    now = con_a.execute("SELECT max(time) FROM reviews").fetchone()[0]
    assert now is not None and now > dt.datetime(2026, 1, 1)
    for key, status, label, reviewer, note in decisions:  # the old statements, one decision at a time
        sample_label = con_b.execute("SELECT label FROM samples WHERE key = ?", [key]).fetchone()[0]
        con_b.execute("UPDATE reviews SET status = ?, label = ?, reviewer = ?, time = ?, note = ? WHERE key = ?",
                      [status, label if status == "relabeled" else sample_label, reviewer, now, note, key])
        con_b.execute("INSERT INTO review_log SELECT key, status, label, reviewer, time, note FROM reviews "
                      "WHERE key = ?", [key])
    for q in ("SELECT * FROM reviews ORDER BY key", "SELECT * FROM review_log ORDER BY rowid"):
        assert con_a.execute(q).fetchall() == con_b.execute(q).fetchall()
    assert [r[0] for r in con_a.execute("SELECT key FROM review_log ORDER BY rowid").fetchall()][-6:] == keys
    con_a.close()
    con_b.close()


# ------------------------------------------------------------------------------------------ cost per request
def _inflate(ws, n: int) -> None:
    """``n`` more images in the queue of workspace ``ws`` (no shards: the page and decisions never read them),
    a third of them decided twice, and the page's tables rebuilt."""
    from gensets.curation import queue, state

    con = state.connect(ws / "state.duckdb")
    try:
        con.execute(f"""INSERT INTO samples SELECT 'zz_' || lpad(i::VARCHAR, 7, '0'), 'u', 'none.tar',
                        ['background', 'texture', 'material'][i % 3 + 1], ['backpack', 'chair', 'mug'][i % 7 % 3 + 1],
                        0, 'x', 'a photo', i, 2, true, '{{}}' FROM range({n}) t(i)""")
        con.execute(f"INSERT INTO reviews SELECT 'zz_' || lpad(i::VARCHAR, 7, '0'), 'pending', 'mug', NULL, NULL, "
                    f"NULL FROM range({n}) t(i)")
        con.execute(f"""INSERT INTO review_log SELECT 'zz_' || lpad(i::VARCHAR, 7, '0'), 'accepted', 'mug',
                        ['zed', 'yan'][i % 2 + 1], TIMESTAMP '2026-01-01', NULL FROM range({n // 3}) t(i)""")
        queue.rebuild(con)
        con.execute("CHECKPOINT")
    finally:
        con.close()


def _profiled(capfd, rs, fn) -> list[dict]:
    """What DuckDB's profiler says (on stderr) of every statement ``fn`` runs on the server's connection; checked
    against DuckDB's query log, so that no statement goes unprofiled."""
    con = rs.con
    # one thread: with several, the threads left over scan row groups ahead of a LIMIT that has already been met,
    # as many as the machine lets them (a quiet machine scans more): what a query needs is what one thread reads
    con.execute("SET threads = 1")
    con.execute("CALL enable_logging('QueryLog')")
    con.execute("PRAGMA enable_profiling='json'")
    con.execute("SET profiling_coverage='ALL'")
    con.execute("CALL truncate_duckdb_logs()")
    capfd.readouterr()
    fn()
    con.execute("PRAGMA disable_profiling")
    logged = [m for (m,) in con.execute("SELECT message FROM duckdb_logs WHERE type = 'QueryLog'").fetchall()
              if "disable_profiling" not in m]
    con.execute("CALL disable_logging()")
    err, docs, i = capfd.readouterr().err, [], 0
    dec = json.JSONDecoder()
    while (i := err.find("{", i)) >= 0:
        doc, i = dec.raw_decode(err, i)
        if "query" in doc and "disable_profiling" not in doc["query"]["sql"]:
            docs.append(doc["query"])
    assert [d["sql"] for d in docs] == logged
    return docs


def test_a_page_and_a_decision_cost_the_same_at_any_size(reference, tmp_path, capfd):
    """The same statements for a page deep in the queue and for a decision with 42 images and with 600,000, and
    at 600,000 (five row groups) none of them scans more than two row groups of any table."""
    from gensets.curation import review_state, routes

    small, big = _copy(reference, tmp_path, "small"), _copy(reference, tmp_path, "big")
    _inflate(big, 600_000)
    seen = {}
    for name, ws in (("small", small), ("big", big)):
        rs = review_state.ReviewState(ws, reviewer="ana", keep_open=True)
        try:
            # the owner's session and its CSRF token, sent with the POST
            client = owner_session(routes.create_app(rs, allowed_hosts={"localhost"}).test_client(), rs)
            after = client.get("/api/counts").get_json()["total"] // 2  # a page in the middle of the queue
            key = client.get("/api/items").get_json()["items"][0]["key"]
            page = _profiled(capfd, rs, lambda: client.get(f"/api/items?status=all&after={after}"))  # noqa: B023
            decide = _profiled(capfd, rs, lambda: client.post(  # noqa: B023
                "/api/decide", json={"key": key, "action": "accept"}))  # noqa: B023
            seen[name] = (page, decide)
        finally:
            rs.close()
    for (small_q, big_q) in zip(seen["small"], seen["big"], strict=True):
        assert [q["sql"] for q in small_q] == [q["sql"] for q in big_q]  # the same statements, as many
        assert 2 <= len(big_q) <= 30  # a decision: its checks, the writes, its lease released, the counts
        worst = max(big_q, key=lambda q: q["total_rows_scanned"])
        assert worst["total_rows_scanned"] <= 2 * ROW_GROUP, worst["sql"]
    total = seen["big"][0][0]["total_row_groups_to_scan"]  # the page's own query: the queue has 5 row groups
    assert total >= 5


def test_serving_reads_no_candidate_shard(reference, tmp_path):
    """The page renders with candidates/ moved away (so neither starting nor a page opens a shard); an image is
    read when asked for. A database from before the page's tables and the image index is brought up to date
    at start, and its images are found in their shards' headers."""
    from gensets.curation import review_state, routes, state

    ws = _copy(reference, tmp_path)
    away = tmp_path / "away"
    shutil.move(ws / "candidates", away)
    rs = review_state.ReviewState(ws, reviewer="ana", keep_open=True)
    try:
        client = owner_session(routes.create_app(rs, allowed_hosts={"localhost"}).test_client(), rs)
        page = client.get("/api/page?status=all").get_json()
        assert len(page["items"]) == 42 and all(it["prompt"].startswith("a photo of a") for it in page["items"])
        key = client.get("/api/items").get_json()["items"][0]["key"]
        r = client.get(f"/image/{key}")
        assert r.status_code == 400 and "candidates" in r.get_json()["error"]  # one line naming the file
        shutil.move(away, ws / "candidates")
        r = client.get(f"/image/{key}")
        assert r.status_code == 200 and r.data[:2] == b"\xff\xd8" and client.get("/image/nope").status_code == 404
        want = next(d["jpg"] for sh in (ws / "candidates").glob("*.tar") for d in _iter(sh) if d["__key__"] == key)
        assert r.data == want
    finally:
        rs.close()
    con = state.connect(ws / "state.duckdb")  # as a database from before #18
    for table in ("queue", "review_latest", "queue_counts"):
        con.execute(f"DROP TABLE {table}")
    con.execute("DELETE FROM images")
    con.execute("DELETE FROM settings")
    con.close()
    rs = review_state.ReviewState(ws, reviewer="ana", keep_open=True)
    try:
        client = owner_session(routes.create_app(rs, allowed_hosts={"localhost"}).test_client(), rs)
        assert client.get("/api/counts").get_json()["pending"] == 42
        assert client.get(f"/image/{key}").data == want
    finally:
        rs.close()


def _iter(path):
    from gensets.shards import iter_shard

    return iter_shard(path)


# ------------------------------------------------------------------------------------------ ingest
def test_ingest_rows_equal_a_plain_read_of_the_shards_in_any_batch_size(reference, tmp_path, monkeypatch):
    """state.duckdb's rows from ingest (json and cls read by offset, Arrow batches) equal those worked out here
    from every sample of every shard read whole (iter_shard + Sample.from_wds), batch size 5 or the default;
    each recorded image offset holds the image's bytes. (Rows compare as sets: DuckDB's INSERT OR IGNORE does
    not keep the order of its input, in one batch or many.)"""
    from gensets.builders.ingest import ingest
    from gensets.curation import state
    from gensets.records import Sample
    from gensets.shards import Manifest
    from gensets.workspace import Workspace

    tables = ("units", "samples", "surrogate_predictions", "reviews", "skipped", "images")
    got = {}
    for batch in (5, state.BATCH):
        ws = _copy(reference, tmp_path, f"b{batch}")
        (ws / "state.duckdb").unlink()
        monkeypatch.setattr(state, "BATCH", batch)
        assert ingest(Workspace(ws)) == 42
        con = state.connect(ws / "state.duckdb", read_only=True)
        got[batch] = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in tables}
        con.close()
    assert got[5] == got[state.BATCH]
    rows = got[5]
    units = sorted({r["unit"]: r for r in Manifest(ws / "candidates" / "manifest.jsonl").rows()}.items())
    samples, preds, images = [], [], []
    for unit, row in units:
        for d in _iter(ws / "candidates" / row["shard"]):
            s = Sample.from_wds(d)
            m = s.meta
            samples.append((s.key, unit, row["shard"], m["config"], m["label"], s.cls, m["nuisance"], m["prompt"],
                            m["seed"], m["surrogate_failures"], m["kept"], json.dumps(m, sort_keys=True)))
            preds += [(s.key, p["model"], i + 1, c, sc, p["hit"]) for p in m["surrogates"]
                      for i, (c, sc) in enumerate(zip(p["top5"], p["scores"], strict=True))]
            images.append((s.key, s.image))
    assert rows["samples"] == sorted(samples) and rows["surrogate_predictions"] == sorted(preds)
    assert [r[0] for r in rows["units"]] == [u for u, _ in units] and len(rows["reviews"]) == 42
    for (key, image), (key2, shard, offset, size, ext) in zip(sorted(images), rows["images"], strict=True):
        data = (ws / "candidates" / shard).read_bytes()[offset: offset + size]
        assert (key, ext, data) == (key2, "jpg", image)


def test_index_reads_plain_and_pax_tars_like_iter_shard(tmp_path):
    """Headers the writer packs itself (read by the fast path) and PAX ones (non-ASCII and long names: read by
    tarfile) give the samples iter_shard gives; a cut tar is one DataError naming the file."""
    from gensets.errors import DataError
    from gensets.shards import iter_index, iter_shard, write_shard

    rows = [{"__key__": k, "jpg": bytes([i]) * (100 + i), "cls": i, "json": {"k": k}}
            for i, k in enumerate(["a", "b_é", "c" * 120])]
    for name, subset in (("plain", rows[:1]), ("pax", rows)):
        path = tmp_path / f"{name}.tar"
        write_shard(path, subset)
        whole = list(iter_shard(path))
        index = list(iter_index(path))
        assert [{k: d[k] for k in ("__key__", "json", "cls")} for d in whole] == \
            [{k: d[k] for k in ("__key__", "json", "cls")} for d in index]
        data = path.read_bytes()
        for d, i in zip(whole, index, strict=True):
            offset, size = i["__members__"]["jpg"]
            assert data[offset: offset + size] == d["jpg"] and "jpg" not in i
        cut = tmp_path / f"{name}-cut.tar"
        cut.write_bytes(data[:700])
        with pytest.raises(DataError, match=f"{cut}"):
            list(iter_index(cut))


# ------------------------------------------------------------------------------------------ finalize, card
def _scale():
    spec = importlib.util.spec_from_file_location("scale", ROOT / "benchmarks" / "scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _finalize_peaks(reference, tmp_path, sizes, **options) -> dict:
    """Python's peak memory (tracemalloc) of finalize over clones of ``reference`` of each of ``sizes`` images."""
    from gensets.builders.finalize import finalize
    from gensets.builders.ingest import ingest
    from gensets.workspace import Workspace

    scale = _scale()
    spaces = {n: tmp_path / f"ws-{n}" for n in sizes}
    for n, ws in spaces.items():
        assert scale.clone_workspace(reference, ws, n) == n
        ingest(Workspace(ws))
    finalize(spaces[sizes[0]], include_pending=True, **options)  # imports and caches: outside the measurement
    peaks = {}
    for n, ws in spaces.items():
        tracemalloc.start()
        finalize(ws, include_pending=True, **options)
        peaks[n] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peaks, spaces


@pytest.mark.slow
def test_finalize_holds_one_shard_of_images(reference, tmp_path):
    """Finalize's shards over 1,500 images take no more Python memory at its peak than over 300 (tracemalloc), though
    the 1,200 more images alone weigh several MB: one output shard (16) of them is in memory at a time. (The audit
    stage, which holds a few numbers per image, is measured on its own below.)"""
    peaks, spaces = _finalize_peaks(reference, tmp_path, (300, 1500), audit=None)
    small, big = spaces[300], spaces[1500]
    peaks = {small: peaks[300], big: peaks[1500]}
    extra = sum(p.stat().st_size for p in (big / "dataset").glob("*/*.tar")) - \
        sum(p.stat().st_size for p in (small / "dataset").glob("*/*.tar"))
    assert extra > 8_000_000  # what holding every image would add
    assert peaks[big] - peaks[small] < 1_500_000, (peaks[small], peaks[big])
    manifest = json.loads((big / "dataset" / "manifest.json").read_text())
    assert sum(manifest["counts"].values()) == 1500 and len(manifest["shards"]) > 90


@pytest.mark.slow
def test_finalize_with_its_audit_holds_no_image_nor_pair_matrix_that_grows(reference, tmp_path):
    """With the audit (on by default; here every image has dozens of exact copies, its worst case): from 1,500 to
    3,000 images the peak grows by the audit's per-image numbers (fingerprints, neighbours: under 2 KB an image),
    not by the images (about 9 KB an image) nor by a pair matrix (the search's blocks are capped at
    search.CHUNK_BYTES, which both sizes reach)."""
    from gensets.audit import search

    peaks, spaces = _finalize_peaks(reference, tmp_path, (1500, 3000))
    extra = sum(p.stat().st_size for p in (spaces[3000] / "dataset").glob("*/*.tar")) - \
        sum(p.stat().st_size for p in (spaces[1500] / "dataset").glob("*/*.tar"))
    assert extra > 1500 * 8_000  # what holding the images would add
    assert 1500 * 1500 * search.HAMMING_PAIR_BYTES > search.CHUNK_BYTES  # both sizes search in capped blocks
    print(f"finalize with its audit, peak: {peaks}")
    assert peaks[3000] - peaks[1500] < 1500 * 2_000, peaks
    manifest = json.loads((spaces[3000] / "dataset" / "manifest.json").read_text())
    assert manifest["audit"]["pairs"]["total"] > 0  # the audit ran, and found the copies


def test_card_picks_equal_the_greedy_choice_over_every_sample():
    """figures.pick_samples keeps the n smallest keys of each (class, nuisance) and chooses among them: the same
    picks as the greedy choice over every sample (written out here), on random sets with many repeats."""
    from types import SimpleNamespace

    from gensets.cards.figures import pick_samples

    def greedy(samples, n):  # the card's choice before #18, over all samples
        rest = sorted(samples, key=lambda s: s.key)
        picked, classes, nuisances = [], set(), set()
        while rest and len(picked) < n:
            i, best = max(enumerate(rest), key=lambda t: (2 * (t[1].meta["label"] not in classes)
                                                          + (t[1].meta.get("nuisance") not in nuisances), -t[0]))
            del rest[i]
            picked.append(best)
            classes.add(best.meta["label"])
            nuisances.add(best.meta.get("nuisance"))
        return picked

    rng = random.Random(0)
    for trial in range(200):
        n = rng.randint(1, 6)
        samples = [SimpleNamespace(key=f"k{rng.randrange(10**6):06d}_{i}",
                                   meta={"label": rng.choice("abc"[: rng.randint(1, 3)]),
                                         "nuisance": rng.choice([None, "x", "y"])})
                   for i in range(rng.randint(0, 40))]
        rng.shuffle(samples)
        assert [s.key for s in pick_samples(iter(samples), n)] == [s.key for s in greedy(samples, n)], trial


# ------------------------------------------------------------------------------------------ imports
def test_build_with_nothing_to_do_finalize_card_and_review_never_import_torch(reference, tmp_path):
    ws = _copy(reference, tmp_path)
    code = ("import sys\nfrom gensets.cli import main\n"
            f"for args in (['build', {str(SMOKE)!r}, '--out', {str(ws)!r}, '--quiet'], ['finalize', {str(ws)!r}],"
            f" ['card', {str(ws)!r}], ['review', 'list', {str(ws)!r}]):\n"
            "    assert main(args) == 0, args\n"
            "    print(args[0], 'torch' in sys.modules, 'diffusers' in sys.modules, file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=HANG)
    assert r.returncode == 0, r.stderr
    assert "0 run here" in r.stdout
    lines = [line for line in r.stderr.splitlines() if line.endswith(("True", "False"))]
    assert lines == [f"{c} False False" for c in ("build", "finalize", "card", "review")]
