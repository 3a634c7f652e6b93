"""The review page's tools (issue 27): undo, zoom, the keys overlay, page keys, range decisions, the surrogates on
the tiles and the sort orders, instructions and reference images, per-reviewer counts, the 800 px layout; in
headless Chromium, with every decision read back from state.duckdb. And undo on the library side: review list,
double review's verdicts and finalize see the restored state."""

import io
import json
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from .conftest import HTTP_WAIT, run_cli
from .test_review_web import _browser, _db, _keys, _playwright, _workspace, goto, ready

PAGE = 20  # --page-size of the page tests: the 42 images of the smoke build fill three pages


def _orders(ws: Path) -> tuple[dict, dict, dict]:
    """The page orders computed here from samples and surrogate_predictions (not from the page's tables): keys in
    page order (config, class, key), by most surrogates failing, by most confident surrogate; and per key its
    failures and its most confident surrogate's first guess (ImageNet index, score)."""
    con = _db(ws)
    rows = con.execute("SELECT s.key, s.config, s.label, s.surrogate_failures FROM samples s JOIN reviews USING (key)"
                       ).fetchall()
    preds = con.execute("SELECT key, rank, class_index, score FROM surrogate_predictions").fetchall()
    con.close()
    best = {}
    for key, rank, idx, score in preds:
        if rank == 1 and (key not in best or score > best[key][1]):
            best[key] = (idx, score)
    page = [r[0] for r in sorted(rows, key=lambda r: (r[1], r[2], r[0]))]
    pos = {k: i for i, k in enumerate(page)}
    fails = {r[0]: r[3] for r in rows}
    orders = {"page": page, "failures": sorted(page, key=lambda k: (-fails[k], pos[k])),
              "confidence": sorted(page, key=lambda k: (-best[k][1], pos[k]))}
    return orders, fails, best


def _post(s, path: str, payload, csrf: bool = True) -> tuple[int, dict]:
    return s.post(payload, csrf=csrf, path=path)


def _png(color, size=32) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (size, size), color).save(out, "PNG")
    return out.getvalue()


def _until(check, timeout: float = 10.0) -> None:
    """Wait for ``check()`` to be true (a poll: the page's CSP forbids Playwright's wait_for_function)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _inside(box, width, height) -> bool:
    return box is not None and box["x"] >= 0 and box["y"] >= 0 and box["x"] + box["width"] <= width \
        and box["y"] + box["height"] <= height


def test_review_page_tools_in_headless_chromium(reference, tmp_path, server_factory):
    """One browser session: the 800x600 layout, tiles, page keys and sort, the keys overlay, zoom, undo (key and
    button), per-reviewer counts, a shift-click range accepted in one request and undone whole, the page accepted,
    instructions (escaped) and reference images of the class; then the log in state.duckdb."""
    from PIL import Image

    from gensets.labels.imagenet import imagenet_names

    sync_api = _playwright()
    ws = _workspace(reference, tmp_path)
    refs = tmp_path / "refs"
    (refs / "backpack").mkdir(parents=True)
    for i, color in enumerate(["red", "blue"]):
        (refs / "backpack" / f"{i}.png").write_bytes(_png(color))
    (refs / "backpack" / "notes.txt").write_text("not an image")
    cfg = yaml.safe_load((ws / "config.yaml").read_text())
    cfg["review"] = {"instructions": ["Accept <img src=x id=injected> when it is plainly one.", "Second paragraph."],
                     "references": str(refs)}
    (ws / "config.yaml").write_text(yaml.safe_dump(cfg))
    orders, fails, best = _orders(ws)
    names = imagenet_names()
    s = server_factory(ws, "--reviewer", "ana", "--page-size", str(PAGE), "--hand-out", str(PAGE))
    W, H = 800, 600
    posts = []
    with sync_api.sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": W, "height": H})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: posts.append(r.url.rsplit("/", 1)[-1]) if r.method == "POST" else None)
        cards = page.locator("#grid .card")

        def keys_shown():
            return [cards.nth(i).get_attribute("data-key") for i in range(cards.count())]

        # sort, validated by the server, and the page keys n / p in that order
        goto(page, s.link("status=all"))
        assert keys_shown() == orders["page"][:PAGE]
        for sort in ("failures", "confidence"):
            with page.expect_navigation():
                page.select_option("#sort", sort)
            ready(page)
            assert f"sort={sort}" in page.url and keys_shown() == orders[sort][:PAGE]
        with page.expect_navigation():
            page.keyboard.press("n")
        ready(page)
        assert keys_shown() == orders["confidence"][PAGE:2 * PAGE]
        with page.expect_navigation():
            page.keyboard.press("PageDown")
        ready(page)
        assert keys_shown() == orders["confidence"][2 * PAGE:]
        assert page.locator("#next").count() == 0
        with page.expect_navigation():
            page.keyboard.press("p")
        ready(page)
        assert keys_shown() == orders["confidence"][PAGE:2 * PAGE]
        with pytest.raises(urllib.error.HTTPError) as e:
            s.opener.open(s.url + "api/items?sort=random", timeout=HTTP_WAIT)
        assert e.value.code == 400 and "random" in json.loads(e.value.read())["error"]

        # each tile: how many surrogates fail, the most confident one's first guess and score
        for i in (0, 7):
            key = cards.nth(i).get_attribute("data-key")
            idx, score = best[key]
            assert cards.nth(i).locator(".sur1").inner_text() == f"{fails[key]}/3 fail {score:.2f} {names[idx]}"

        # the 800x600 layout: the image and the buttons in view, the page itself does not scroll, the list does
        goto(page, s.url)
        keys = keys_shown()
        assert keys == orders["page"][:PAGE]
        for _ in range(15):
            page.keyboard.press("j")
        assert page.locator("#d-key").inner_text() == keys[15]
        for sel in ("#d-img", "#b-accept", "#b-reject", "#b-relabel", "#b-flag", "#b-undo", "#b-help",
                    "#grid .card.sel"):
            assert _inside(page.locator(sel).bounding_box(), W, H), sel
        assert page.evaluate("() => [window.scrollY, document.documentElement.scrollHeight]") == [0, H]
        shot = Image.open(io.BytesIO(page.screenshot())).convert("RGB")
        assert shot.size == (W, H)
        # the detail image in the screenshot is the selected image (and not another one)
        box = page.locator("#d-img").bounding_box()
        seen = shot.crop((round(box["x"]), round(box["y"]), round(box["x"] + box["width"]),
                          round(box["y"] + box["height"]))).resize((64, 64), Image.BOX)

        def image(key):
            with s.opener.open(s.url + f"image/{key}", timeout=HTTP_WAIT) as r:
                return Image.open(io.BytesIO(r.read())).convert("RGB").resize((64, 64), Image.BOX)

        def distance(a, b):  # mean absolute difference of the pixel values
            import numpy as np

            return float(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float)).mean())

        own, other = distance(seen, image(keys[15])), distance(seen, image(keys[3]))
        print(f"screenshot's detail image vs the image: {own:.1f}, vs another image: {other:.1f} (of 255)")
        assert own < 15 and own < other / 3

        # the keys overlay: ? opens it, keys do nothing under it, Esc closes it
        page.keyboard.press("?")
        assert page.locator("#help").is_visible() and "undo your last decision" in page.locator("#help").inner_text()
        assert _inside(page.locator("#help .help-box").bounding_box(), W, H)
        page.keyboard.press("a")
        page.keyboard.press("Escape")
        assert not page.locator("#help").is_visible()
        assert page.locator("#n-accepted").inner_text() == "0"

        # zoom: click opens the image at full resolution; + doubles it, then it pans by dragging
        cards.nth(0).click()
        page.locator("#d-img").click()
        zoom = page.locator("#zoom-img")
        assert page.locator("#zoom").is_visible()
        _until(lambda: zoom.evaluate("e => e.complete && e.naturalWidth"))
        assert zoom.evaluate("e => e.naturalWidth") == 64
        assert zoom.bounding_box()["width"] == 64
        for _ in range(4):
            page.keyboard.press("+")
        assert zoom.bounding_box()["width"] == 1024 and "1600% of 64×64" in page.locator("#zoom-scale").inner_text()
        pane = page.locator("#zoom-pane")
        before = pane.evaluate("e => [e.scrollLeft, e.scrollTop]")
        page.mouse.move(400, 300)
        page.mouse.down()
        page.mouse.move(460, 340, steps=5)
        page.mouse.up()
        after = pane.evaluate("e => [e.scrollLeft, e.scrollTop]")
        assert before[0] - after[0] == pytest.approx(60, abs=2) and before[1] - after[1] == pytest.approx(40, abs=2)
        page.keyboard.press("-")
        assert zoom.bounding_box()["width"] == 512
        page.keyboard.press("Escape")
        assert not page.locator("#zoom").is_visible()
        page.keyboard.press("+")  # + opens it too
        assert page.locator("#zoom").is_visible()
        page.keyboard.press("Escape")

        # undo: z takes the accept back (a new decision), the button the reject after it
        def card(key):
            return page.locator(f'#grid .card[data-key="{key}"]')

        page.keyboard.press("a")
        card(keys[0]).and_(page.locator(".status-accepted")).wait_for()
        assert page.locator("#d-key").inner_text() == keys[1]
        page.keyboard.press("z")
        card(keys[0]).and_(page.locator(".status-pending")).wait_for()
        assert page.locator("#d-key").inner_text() == keys[0]  # the undone image is selected again
        page.keyboard.press("r")
        card(keys[0]).and_(page.locator(".status-rejected")).wait_for()
        page.locator("#b-undo").click()
        card(keys[0]).and_(page.locator(".status-pending")).wait_for()
        assert page.locator("#n-rejected").inner_text() == "0" and page.locator("#n-pending").inner_text() == "42"
        # per-reviewer counts: two decisions this session (undos are none), a rate, and none of them stands
        assert page.locator("#me-session").inner_text() == "2" and page.locator("#me-decided").inner_text() == "0"
        assert float(page.locator("#me-rate").inner_text()) == 120  # 2 in less than the minute it is counted over

        # a range: shift-click from the selected image, accepted with A in one request; z takes it back whole
        cards.nth(2).click()
        cards.nth(6).click(modifiers=["Shift"])
        assert page.locator("#grid .card.picked").count() == 5 and "5 selected" in page.locator("#picked").inner_text()
        posts.clear()
        page.keyboard.press("A")
        for k in keys[2:7]:
            card(k).and_(page.locator(".status-accepted")).wait_for()
        assert posts == ["bulk"] and page.locator("#n-accepted").inner_text() == "5"
        assert page.locator("#grid .card.picked").count() == 0
        page.keyboard.press("z")
        for k in keys[2:7]:
            card(k).and_(page.locator(".status-pending")).wait_for()
        assert posts == ["bulk", "undo"] and page.locator("#n-accepted").inner_text() == "0"
        # x adds one image to a range; Esc clears it
        page.keyboard.press("x")
        assert page.locator("#grid .card.picked").count() == 1
        page.keyboard.press("Escape")
        assert page.locator("#grid .card.picked").count() == 0
        # the page's images not decided yet, accepted at once
        cards.nth(1).click()
        page.keyboard.press("r")
        card(keys[1]).and_(page.locator(".status-rejected")).wait_for()
        page.locator("#b-page-accept").click()
        card(keys[-1]).and_(page.locator(".status-accepted")).wait_for()
        assert page.locator("#n-accepted").inner_text() == str(PAGE - 1)
        assert page.locator("#n-rejected").inner_text() == "1"
        assert page.locator("#me-decided").inner_text() == str(PAGE)
        assert page.locator("#me-session").inner_text() == str(2 + 5 + 1 + PAGE - 1)

        # instructions from the config, as text; real images of the class where the folder has them
        text = page.locator("#instructions").inner_text()
        assert "Accept <img src=x id=injected> when it is plainly one." in text and "Second paragraph." in text
        assert page.locator("#injected").count() == 0
        backpack = next(i for i, k in enumerate(keys) if "_backpack_" in k)
        chair = next(i for i, k in enumerate(keys) if "_chair_" in k)
        cards.nth(backpack).click()
        page.locator("#d-refs .refs img").nth(1).wait_for()
        assert page.locator("#d-refs").is_visible() and page.locator("#d-refs .refs img").count() == 2
        for i in range(2):
            img = page.locator("#d-refs .refs img").nth(i)
            _until(lambda img=img: img.evaluate("e => e.complete && e.naturalWidth"))
            assert img.evaluate("e => e.naturalWidth") == 32
        cards.nth(chair).click()
        page.locator("#d-refs").wait_for(state="hidden")

        # at 1440x900 the footer covers nothing: the detail pane ends above it
        page.set_viewport_size({"width": 1440, "height": 900})
        detail, footer = page.locator("#detail").bounding_box(), page.locator("footer").bounding_box()
        assert detail["y"] + detail["height"] <= footer["y"] and _inside(footer, 1440, 900)
        assert errors == []
        browser.close()
    s.stop()

    con = _db(ws)
    log = con.execute("SELECT rowid, key, status, reviewer FROM review_log ORDER BY rowid").fetchall()
    undos = con.execute("SELECT undo_seq, undone_seq FROM review_undo ORDER BY undo_seq").fetchall()
    reviews = dict(con.execute("SELECT key, status FROM reviews").fetchall())
    con.close()
    assert {r[3] for r in log} == {"ana"}
    assert [(k, st) for _, k, st, _ in log] == [
        (keys[0], "accepted"), (keys[0], "pending"), (keys[0], "rejected"), (keys[0], "pending"),
        *((k, "accepted") for k in keys[2:7]), *((k, "pending") for k in reversed(keys[2:7])),
        (keys[1], "rejected"), *((k, "accepted") for k in keys if k != keys[1])]
    seqs = [r[0] for r in log]
    assert undos == [(seqs[1], seqs[0]), (seqs[3], seqs[2]),
                     *((seqs[9 + i], seqs[8 - i]) for i in range(5))]  # each undo names the row it took back
    assert {k for k, st in reviews.items() if st == "accepted"} == set(keys) - {keys[1]}
    assert reviews[keys[1]] == "rejected" and sum(st == "pending" for st in reviews.values()) == 42 - PAGE


def test_bulk_and_undo_over_http(reference, tmp_path, server_factory):
    """A range is all or none, bounded, CSRF-protected; an undo takes back the asker's own decisions only."""
    ws = _workspace(reference, tmp_path)
    s = server_factory(ws, "--reviewer", "ana")
    keys = _keys(s)
    code, out = _post(s, "api/bulk", {"keys": [keys[0], "nope", keys[1]], "action": "accept"})
    assert code == 400 and "nope" in out["error"] and "nothing was saved" in out["error"]
    for payload in ({"keys": keys[:1] * 501, "action": "accept"}, {"keys": [], "action": "accept"},
                    {"keys": keys[0], "action": "accept"}, {"keys": keys[:2], "action": "relabel"}):
        code, out = _post(s, "api/bulk", payload)
        assert code == 400, payload
    assert _post(s, "api/bulk", {"keys": keys[:2], "action": "accept"}, csrf=False)[0] == 403
    assert _post(s, "api/undo", {}, csrf=False)[0] == 403
    assert s.get("/api/counts")["accepted"] == 0  # nothing of the above was saved
    code, out = _post(s, "api/bulk", {"keys": keys[:3], "action": "reject", "reviewer": "ana"})
    assert code == 200 and out["counts"]["rejected"] == 3 and out["me"]["session"] == out["me"]["decided"] == 3
    assert [it["status"] for it in out["items"]] == ["rejected"] * 3
    code, out = _post(s, "api/undo", {"reviewer": "ben", "n": 3})
    assert code == 200 and out["items"] == []  # ben has nothing to undo, and ana's decisions stand
    assert s.get("/api/counts")["rejected"] == 3
    for bad in (0, 501, "2", True):
        assert _post(s, "api/undo", {"reviewer": "ana", "n": bad})[0] == 400
    code, out = _post(s, "api/undo", {"reviewer": "ana", "n": 2})
    assert code == 200 and [it["key"] for it in out["items"]] == [keys[2], keys[1]]
    assert out["counts"]["rejected"] == 1 and out["me"]["session"] == 3 and out["me"]["decided"] == 1
    assert s.get("/api/items?reviewer=ben")["me"] == {"decided": 0, "session": 0, "rate": None}
    s.stop()
    con = _db(ws)
    log = con.execute("SELECT key, status, reviewer FROM review_log ORDER BY rowid").fetchall()
    con.close()
    assert log == [(k, "rejected", "ana") for k in keys[:3]] + [(keys[2], "pending", "ana"), (keys[1], "pending", "ana")]


def _published(ws: Path) -> set[str]:
    return {Path(m).stem for tar in (ws / "dataset").glob("*/*.tar") for m in tarfile.open(tar).getnames()
            if m.endswith(".json")}


def test_undo_is_a_new_decision_that_finalize_and_double_review_see(reference, tmp_path):
    from gensets.curation import review, state

    ws = _workspace(reference, tmp_path)
    con = state.connect(ws / "state.duckdb")
    keys = [r[0] for r in con.execute("SELECT key FROM reviews ORDER BY key").fetchall()]
    review.decide(con, [keys[0]], "accepted", reviewer="ana")
    review.decide(con, [keys[1]], "accepted", reviewer="ana")
    review.decide(con, [keys[2]], "relabeled", label="teapot", reviewer="ana")
    review.decide(con, [keys[3]], "accepted", reviewer="ana")
    review.decide(con, [keys[3]], "rejected", reviewer="ana", note="several objects")
    review.decide(con, [keys[1]], "rejected", reviewer="ben")
    rows = con.execute("SELECT count(*) FROM review_log").fetchall()[0][0]
    # single review: the image's state before the decision comes back; ben's later decision on keys[1] stands
    assert review.undo(con, "ana") == [(keys[3], "accepted", None, None)]
    assert review.undo(con, "ana", 3) == [(keys[3], "pending", None, None), (keys[2], "pending", None, None),
                                          (keys[0], "pending", None, None)]
    assert review.undo(con, "ana") == []  # keys[1]: ben decided it since
    assert review.undo(con, "ben", 5) == [(keys[1], "accepted", None, None)]  # ana's accept, before ben's reject
    assert review.undo(con, "ana") == []
    assert con.execute("SELECT count(*) FROM review_log").fetchall()[0][0] == rows + 5  # logged, nothing deleted
    review.decide(con, [keys[4]], "accepted", reviewer="ana")
    assert [r["key"] for r in review.list_queue(con, status="accepted")] == [keys[1], keys[4]]
    assert review.list_queue(con, status="rejected") == [] and review.list_queue(con, status="relabeled") == []
    with pytest.raises(Exception, match="1 to 1000"):
        review.undo(con, "ana", 0)
    con.close()
    run_cli("finalize", ws, check=0)
    assert _published(ws) == {keys[1], keys[4]}

    # double review: each reviewer's own previous decision comes back, and the verdicts follow
    con = state.connect(ws / "state.duckdb")
    review.set_double(con)
    for who in ("ana", "ben"):
        review.decide(con, [keys[5]], "accepted", reviewer=who)
    review.decide(con, [keys[6]], "rejected", reviewer="ana")
    review.decide(con, [keys[6]], "accepted", reviewer="ana")
    review.decide(con, [keys[6]], "accepted", reviewer="ben")
    assert review.verdicts(con)[keys[5]][0] == "accepted" and review.verdicts(con)[keys[6]][0] == "accepted"
    # ana's own previous decision on keys[6] comes back, whatever ben decided after it
    assert review.undo(con, "ana") == [(keys[6], "rejected", None, None)]
    assert review.verdicts(con)[keys[6]][0] == "disputed"  # ana rejects, ben accepts
    assert review.undo(con, "ana", 2) == [(keys[6], "pending", None, None), (keys[5], "pending", None, None)]
    verdicts = review.verdicts(con)
    assert verdicts[keys[5]][0] == verdicts[keys[6]][0] == "pending"  # ben alone decided each
    assert not {keys[5], keys[6]} & {r["key"] for r in review.list_outcomes(con, status="accepted")}
    con.close()
