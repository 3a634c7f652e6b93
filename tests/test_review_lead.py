"""#54, what a team lead asks for: progress per reviewer (`review progress`, the page's team panel), `review list --by
reviewer`, agreement per class and per nuisance kind with the confusion table of the two reviewers' decisions (CLI,
page, card), the disagreements exported for a second opinion (CSV, Label Studio) and imported back as adjudications.
Every figure is checked against a tally made here from the decisions the test made."""

import csv
import json
import random
from collections import Counter, defaultdict

import pytest

from .conftest import owner_session, run_cli
from .test_review_web import _db, _workspace


def _decide_at_random(ws, double: bool, seed: int = 54):
    """Three reviewers decide through the page's routes (the owner's session, each under their name): ana and ben
    most images, cleo some after them; a few relabels, flags and an undo. The decisions made, in order."""
    from gensets.curation import review_state, routes

    rs = review_state.ReviewState(ws, double=double, keep_open=True)
    rs.keep_mode()
    made = []
    try:
        client = owner_session(routes.create_app(rs, allowed_hosts={"localhost"}).test_client(), rs)
        keys = [it["key"] for it in client.get("/api/items?status=all").get_json()["items"]]
        rng = random.Random(seed)
        for who, share in (("ana", 0.9), ("ben", 0.8), ("cleo", 0.2)):
            for key in keys:
                if rng.random() > share:
                    continue
                action = rng.choice(["accept", "accept", "reject", "relabel"])
                body = {"key": key, "action": action, "reviewer": who}
                if action == "relabel":
                    body["label"] = rng.choice(["teapot", "mug"])
                r = client.post("/api/decide", json=body)
                if r.status_code == 400 and action == "relabel":  # a relabel to the image's own class: accept
                    body = {"key": key, "action": "accept", "reviewer": who}
                    r = client.post("/api/decide", json=body)
                assert r.status_code == 200, r.get_json()
                made.append((who, key, r.get_json()["status"], r.get_json()["label"]))
                if who != "cleo" and rng.random() < 0.1:  # (cleo's last decision is the one she undoes)
                    assert client.post("/api/decide", json={"key": key, "action": "flag", "flagged": True,
                                                            "reviewer": who}).status_code == 200
                    made.append((who, key, "flag", None))
        r = client.post("/api/undo", json={"reviewer": "cleo", "n": 1})  # cleo takes her last decision back
        undone = r.get_json()["items"][0]
        made.append(("cleo", undone["key"], "undo", None))
        team = client.get("/api/team").get_json()
    finally:
        rs.close()
    return made, team


def _tally(ws, made):
    """Per reviewer, from the decisions made: their latest decision per image (an undo restores the one before),
    flags; per image the order of the reviewers' first decisions."""
    latest, flagged, order, history = {}, defaultdict(set), defaultdict(list), defaultdict(list)
    for who, key, status, label in made:
        if status == "flag":
            flagged[who].add(key)
            continue
        if status == "undo":
            history[who, key].pop()
            if history[who, key]:
                latest[who, key] = history[who, key][-1]
            else:
                del latest[who, key]
                order[key].remove(who)
            continue
        history[who, key].append((status, label))
        latest[who, key] = (status, label)
        if who not in order[key]:
            order[key].append(who)
    return latest, flagged, order


def test_progress_and_agreement_equal_a_tally_of_the_decisions(reference, tmp_path):
    from sklearn.metrics import cohen_kappa_score

    ws = _workspace(reference, tmp_path)
    made, team = _decide_at_random(ws, double=True)
    latest, flagged, order = _tally(ws, made)
    con = _db(ws)
    facts = {k: (lb, cfg) for k, lb, cfg in con.execute("SELECT key, label, config FROM samples").fetchall()}
    con.close()

    # progress per reviewer: the CLI's JSON and the page's team panel
    progress = json.loads(run_cli("review", "progress", ws, "--json", check=0).stdout)
    assert progress["reviewers"] == team["progress"]["reviewers"]
    by = {p["reviewer"]: p for p in progress["reviewers"]}
    for who in ("ana", "ben", "cleo"):
        mine = {k: s for (w, k), s in latest.items() if w == who}
        counts = Counter(s for s, _ in mine.values())
        assert by[who]["decided"] == len(mine)
        assert (by[who]["accepted"], by[who]["rejected"], by[who]["relabeled"]) == \
            (counts["accepted"], counts["rejected"], counts["relabeled"])
        assert by[who]["flagged"] == len({k for k in flagged[who] if k in mine})
        assert by[who]["decisions"] == sum(w == who for w, *_ in made)  # flags and undos are decisions too
    assert by["cleo"]["undos"] == 1 and by["ana"]["undos"] == 0
    text = run_cli("review", "progress", ws, check=0)
    rows = {line.split("\t")[0]: line.split("\t") for line in text.stdout.splitlines()[1:]}
    assert rows["ana"][1] == str(by["ana"]["decided"]) and "42 image(s) in the review queue" in text.stderr

    # agreement of the first two reviewers: overall, per class, per nuisance kind, with the confusion table
    def cat(s, lb):
        return f"relabeled:{lb}" if s == "relabeled" else s

    pairs = {k: (cat(*latest[o[0], k]), cat(*latest[o[1], k])) for k, o in order.items() if len(o) >= 2}
    a = json.loads(run_cli("review", "agreement", ws, "--json", check=0).stdout)
    assert a["items"] == len(pairs) > 10
    labels = sorted({c for p in pairs.values() for c in p})
    assert a["confusion"]["labels"] == labels
    assert a["confusion"]["counts"] == [[sum(p == (x, y) for p in pairs.values()) for y in labels] for x in labels]
    for name, column in (("by_class", 0), ("by_nuisance", 1)):
        groups = defaultdict(list)
        for k, p in pairs.items():
            groups[facts[k][column]].append(p)
        assert sorted(a[name]) == sorted(groups)
        for g, ps in groups.items():
            got = a[name][g]
            assert got["items"] == len(ps)
            assert got["observed_agreement"] == pytest.approx(sum(x == y for x, y in ps) / len(ps), abs=1e-4)
            want = cohen_kappa_score([x for x, _ in ps], [y for _, y in ps]) if len({c for p in ps for c in p}) > 1 \
                else None
            assert got["kappa"] == (None if want is None or want != want else pytest.approx(want, abs=1e-4)), g
            mine = sorted({c for p in ps for c in p})
            assert got["confusion"]["counts"] == [[sum(p == (x, y) for p in ps) for y in mine] for x in mine]
    assert team["agreement"]["by_class"] == a["by_class"] and team["agreement"]["confusion"] == a["confusion"]
    text = run_cli("review", "agreement", ws, check=0).stdout
    assert "per class:" in text and "per nuisance kind:" in text and "confusion table" in text

    # review list --by reviewer: each reviewer's latest decision per image, as made
    listed = json.loads(run_cli("review", "list", ws, "--by", "reviewer", "--json", check=0).stdout)
    assert {(r["reviewer"], r["key"]): (r["status"], r["review_label"]) for r in listed} == \
        {wk: (s, lb if s == "relabeled" else None) for wk, (s, lb) in latest.items()}
    assert [r["reviewer"] for r in listed] == sorted(r["reviewer"] for r in listed)

    # the card: agreement per class and per nuisance kind, and the two reviewers' decisions
    run_cli("finalize", ws, "--include-pending", check=0)
    card = (ws / "dataset" / "README.md").read_text()
    assert "Agreement of the two reviewers per class:" in card and "per nuisance kind:" in card
    for g, s in a["by_class"].items():
        assert f"| {g} | {s['items']} | {s['observed_agreement']} |" in card
    assert "The two reviewers' decisions (rows: the first reviewer's, columns: the second's):" in card
    first = a["confusion"]
    assert f"| {first['labels'][0]} | " + " | ".join(map(str, first["counts"][0])) + " |" in card


def test_single_review_progress_and_the_card_say_nothing_of_agreement(reference, tmp_path):
    ws = _workspace(reference, tmp_path)
    made, team = _decide_at_random(ws, double=False, seed=7)
    totals = team["progress"]["totals"]
    con = _db(ws)
    statuses = Counter(s for (s,) in con.execute("SELECT status FROM reviews").fetchall())
    con.close()
    assert totals == {"images": 42, **{s: statuses[s] for s in ("pending", "accepted", "rejected", "relabeled")}}
    run_cli("finalize", ws, "--include-pending", check=0)
    assert "Agreement of the two reviewers" not in (ws / "dataset" / "README.md").read_text()


def test_disagreements_exported_for_a_second_opinion_and_imported_back(reference, tmp_path):
    ws = _workspace(reference, tmp_path)
    made, _ = _decide_at_random(ws, double=True, seed=3)
    latest, _, order = _tally(ws, made)

    def cat(s, lb):
        return f"relabeled:{lb}" if s == "relabeled" else s

    agreement = json.loads(run_cli("review", "agreement", ws, "--json", check=0).stdout)
    con = _db(ws)
    from gensets.curation import review

    verdicts = review.verdicts(con)
    con.close()
    disputed = sorted(k for k, v in verdicts.items() if v[0] == "disputed")
    assert disputed and set(disputed) <= {d["key"] for d in agreement["disagreements"]}
    f = tmp_path / "disputes.csv"
    r = run_cli("review", "export", ws, "--format", "csv", "--file", f, "--status", "disputed", check=0)
    assert f"{len(disputed)} sample(s)" in r.stdout
    rows = list(csv.DictReader(f.open()))
    assert sorted(r["key"] for r in rows) == disputed and list(rows[0]) == ["key", "status", "label", "reviewer",
                                                                             "note", "disagreement"]
    for row in rows:
        assert row["status"] == "pending" and row["reviewer"] == ""
        for who in order[row["key"]]:
            status, label = latest[who, row["key"]]
            assert f"{who}: {status}" + (f" -> {label}" if status == "relabeled" else "") in row["disagreement"]
    # a second opinion: erin decides each (as cleo did where she adjudicated: later reviewers settle it together)
    want = {}
    for row in rows:
        status, label = latest.get(("cleo", row["key"]), ("rejected", None))
        want[row["key"]] = status
        row.update(status=status, label=label if status == "relabeled" else "", reviewer="erin")
    with f.open("w", newline="") as out:
        w = csv.DictWriter(out, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    r = run_cli("review", "import", ws, "--format", "csv", "--file", f, check=0)
    assert f"{len(rows)} decision(s) recorded" in r.stdout
    listed = {r["key"]: r for r in json.loads(run_cli("review", "list", ws, "--status", "all", "--json",
                                                       check=0).stdout)}
    assert all(listed[k]["status"] == want[k] and "erin" in listed[k]["reviewer"] for k in disputed)
    assert run_cli("review", "export", ws, "--format", "csv", "--file", f, "--status", "disputed",
                   check=0).stdout.strip().endswith(": 0 sample(s)")
    # Label Studio: the same images' tasks show the reviewers' decisions
    cut = tmp_path / "again"
    ws2 = _workspace(reference, cut)
    made, _ = _decide_at_random(ws2, double=True, seed=3)
    tasks = tmp_path / "tasks.json"
    run_cli("review", "export", ws2, "--format", "label-studio", "--file", tasks, "--status", "disputed",
            "--images", "url", "--base-url", "http://127.0.0.1:1", check=0)
    got = json.loads(tasks.read_text())
    assert sorted(t["data"]["key"] for t in got) == disputed and all(t["data"]["disagreement"] for t in got)
    assert '<Text name="disagreement" value="$disagreement"/>' in (tmp_path / "tasks.json.label_config.xml").read_text()
    single = _workspace(reference, tmp_path / "single")
    r = run_cli("review", "export", single, "--format", "csv", "--file", f, "--status", "disputed")
    assert r.returncode == 2 and "double review" in r.stderr and len(r.stderr.strip().splitlines()) == 1
