"""The audit (gensets.audit): the hashes against hand-computed values and imagededup's own code, the searches against
every pair, and end to end on builds with planted copies: `gensets audit` finds every planted pair at the default
thresholds and no other; finalize records them (json.audit, manifest, card section and figure), drops exactly one
image of each group with --drop near-duplicates; GenBench's contamination check against its test set runs by default;
a killed-and-resumed build audits as an uninterrupted one; a second audit decodes and embeds nothing."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gensets.audit import check, hashes, search
from gensets.audit.run import audit

from .conftest import HANG, run_cli
from .planted import plant

ROOT = Path(__file__).resolve().parents[1]
PLANTED = {"exact": 1, "jpeg": 1, "flip": 1, "resize": 1, "overlay": 1, "jitter": 1}  # what hashes catch
CONFIG = """builder: recognition
name: recognition-audit
pretty_name: Recognition with planted copies (gensets audit test)
categories: [clock, rabbit]
generate:
  - name: sd-2-steps
    images_per_category: 2
    generator: {model: tiny:sd, steps: 2, width: 64, height: 64}
imports:
  - path: planted
    source: planted
image: {format: jpg, quality: 90}
unit_size: 4
"""


# ------------------------------------------------------------------ the hashes, one pure function each

def _dct_ii(x: np.ndarray) -> np.ndarray:
    """The unnormalised 2-D DCT-II from its definition (2 sum x cos(pi k (2n+1) / 2N)), no FFT library."""
    n = x.shape[0]
    k = np.arange(n)[:, None]
    basis = 2 * np.cos(np.pi * k * (2 * np.arange(n)[None, :] + 1) / (2 * n))
    return basis @ x @ basis.T


def test_dhash_and_phash_against_hand_computed_bits():
    # dHash: a row rising left to right sets all its 8 bits; a falling row none
    rows = np.array([[i for i in range(9)] if r % 2 == 0 else [9 - i for i in range(9)] for r in range(8)])
    assert hashes.dhash(rows) == int("".join("11111111" if r % 2 == 0 else "00000000" for r in range(8)), 2)
    # pHash: bits are coefficient >= median of the 63 coefficients beyond the DC term, by the DCT's definition
    rng = np.random.default_rng(3)
    for _ in range(20):
        x = rng.integers(0, 256, (32, 32)).astype(float)
        coef = _dct_ii(x)[:8, :8].reshape(-1)
        want = int("".join("1" if c >= np.median(coef[1:]) else "0" for c in coef), 2)
        assert hashes.phash(x) == want
    assert hashes.hamming(0b1011, 0b0001) == 2
    assert list(hashes.hamming(np.array([0, 2**64 - 1], np.uint64), np.uint64(0))) == [0, 64]


def test_pixel_digest_is_the_pixels_not_the_bytes():
    im = Image.fromarray(np.random.default_rng(0).integers(0, 256, (20, 30, 3), dtype=np.uint8))
    png, webp = io.BytesIO(), io.BytesIO()
    im.save(png, "PNG")
    im.save(webp, "WEBP", lossless=True)
    a, b = (hashes.pixel_digest(Image.open(io.BytesIO(f.getvalue()))) for f in (png, webp))
    assert png.getvalue() != webp.getvalue() and a == b
    changed = im.copy()
    changed.putpixel((0, 0), (1, 2, 3) if im.getpixel((0, 0)) != (1, 2, 3) else (4, 5, 6))
    assert hashes.pixel_digest(changed) != a


def test_hashes_equal_imagededups_own(tmp_path):
    from . import imagededup_env as env

    try:
        python = env.ensure_env()
    except env.Unavailable as e:
        pytest.skip(str(e))
    pairs = plant(tmp_path, 12, {"jpeg": 2, "flip": 2, "crop": 2, "resize": 2})
    files = sorted({p for pair in pairs for p in pair[:2]} | {f"clock/base-{i:04d}.png" for i in range(0, 12, 2)})
    theirs = env.imagededup_hashes(python, [str(tmp_path / f) for f in files])
    for f in files:
        fp = hashes.fingerprints(Image.open(tmp_path / f))
        assert (f"{fp['phash']:016x}", f"{fp['dhash']:016x}") == theirs[str(tmp_path / f)], f


# ------------------------------------------------------------------ the searches against every pair

def test_block_search_equals_every_pair(monkeypatch):
    rng = np.random.default_rng(1)
    items = rng.integers(0, 2**62, 3000, dtype=np.int64).astype(np.uint64) << np.uint64(2)
    queries = items.copy()
    for i in range(0, 3000, 5):  # near copies 0-10 bits away
        for b in rng.choice(64, rng.integers(0, 11), replace=False):
            queries[i] ^= np.uint64(1) << np.uint64(int(b))
    mirrors = rng.integers(0, 2**62, 3000, dtype=np.int64).astype(np.uint64)
    items[7] = items[11]  # a tie: the smallest index wins
    for same, qs in ((False, [queries, mirrors]), (True, [items])):
        monkeypatch.setattr(search, "BRUTE_PAIRS", 10**12)
        pairs = search.nearest_hamming(qs, items, 10, same=same)
        monkeypatch.setattr(search, "BRUTE_PAIRS", 0)
        blocks = search.nearest_hamming(qs, items, 10, same=same)
        assert (pairs[0] == blocks[0]).all() and (pairs[1] == blocks[1]).all()
        # and both against the definition, query by query
        d = np.min([np.bitwise_count(q[:, None] ^ items[None, :]) for q in qs], axis=0).astype(int)
        if same:
            np.fill_diagonal(d, 99)
        best = d.min(axis=1)
        want = np.where(best <= 10, d.argmin(axis=1), -1)
        assert (pairs[0] == want).all()
    assert pairs[0][11] == 7 and pairs[0][7] == 11


def test_cosine_search_is_the_largest_dot_product():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    idx, sim, how = search.nearest_cosine(x, x, same=True)
    s = x @ x.T
    np.fill_diagonal(s, -np.inf)
    assert how == "exact" and (idx == s.argmax(1)).all() and np.allclose(sim, s.max(1))


# ------------------------------------------------------------------ where the features are computed

class _TwoRanks:
    """Two ranks of ``accelerate launch`` as two threads: ``gather`` is accelerate's gather_object (every rank's
    items, in rank order, on every rank), here through shared slots and a barrier."""

    def __init__(self):
        import threading

        self.slots, self.barrier = [None, None], threading.Barrier(2)

    def rank(self, r: int):
        from gensets.models.device import Dist

        group = self

        class Rank(Dist):
            def gather(self, items):
                group.slots[r] = list(items)
                group.barrier.wait()
                out = [x for part in group.slots for x in part]
                group.barrier.wait()
                return out

        return Rank(r, 2)


def test_chunks_on_a_pool_or_two_ranks_give_the_in_process_features(tmp_path, monkeypatch):
    """The audit's features computed on a pool's worker (the EmbedWorker a Ray actor is, run here) and by two ranks
    each computing its share of the chunks (rank 1 reads only its chunks' images) equal the in-process ones: the
    same fingerprints, the same embeddings, the same neighbours."""
    import threading

    from gensets.audit import features
    from gensets.audit.features import Cache, EmbedWorker, extract
    from gensets.audit.sources import ImageSet, open_set
    from gensets.builders import backends
    from gensets.models.embedder import load_embedder

    monkeypatch.setattr(features, "BATCH", 3)  # 13 images: 5 chunks in 3 windows of 2
    monkeypatch.setattr(features, "WINDOW", 2)
    plant(tmp_path / "imgs", 10, {"jpeg": 2, "flip": 1})
    s = open_set(str(tmp_path / "imgs"), "self")
    embedder = load_embedder("tiny:resnet")
    one = extract(s, Cache(tmp_path / "one.duckdb"), embedder)
    pooled = extract(s, Cache(tmp_path / "pool.duckdb"), embedder,
                     pool=backends.pool("local", ("tiny:resnet", False), worker=EmbedWorker))
    group, out, read = _TwoRanks(), {}, {0: [], 1: []}

    def rank(r):
        mine = ImageSet(s.name, s.source, s.keys, s.configs, lambda i: read[r].append(i) or s.read(i))
        out[r] = extract(mine, Cache(tmp_path / f"rank{r}.duckdb"), embedder, dist=group.rank(r))

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out[1] is None and sorted(read[0]) == list(range(13))  # rank 0 reads every image (its sha256)
    assert read[1] == [3, 4, 5, 9, 10, 11]  # rank 1: chunks 1 and 3 (windows: chunks 0-1, 2-3, 4)
    o = check.Options(model="tiny:resnet", cosine=0.99)
    want = check.find(s.keys, s.configs, one, [], o)
    assert one.counts == {"images": 13, "decoded": 13, "hashed": 13, "embedded": 13, "cached": 0, "workers": 1}
    assert out[0].counts == {**one.counts, "workers": 2}
    for f in (pooled, out[0]):
        assert {**f.counts, "workers": 1} == one.counts and f.exact == one.exact
        assert all((f.hashes[k] == one.hashes[k]).all() for k in one.hashes)
        assert np.allclose(f.embeddings, one.embeddings, atol=1e-6, rtol=0)
        got = check.find(s.keys, s.configs, f, [], o)
        assert [[(e["method"], e["key"], e["hamming"]) for e in n] for n in got.neighbours] == \
            [[(e["method"], e["key"], e["hamming"]) for e in n] for n in want.neighbours]
        assert np.allclose([e["cosine"] or 0 for n in got.neighbours for e in n],
                           [e["cosine"] or 0 for n in want.neighbours for e in n], atol=1e-6)
    assert any(e["method"] == "embedding" for n in want.neighbours for e in n)


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """139 images with planted copies and a reference of 70 (3 and 2 chunks of 64), audited in one process with
    an embedding, each image's neighbours in a results database."""
    root = tmp_path_factory.mktemp("many")
    plant(root / "imgs", 130, {"jpeg": 3, "flip": 3, "resize": 3})
    plant(root / "ref", 70, {}, seed=7)
    args = ("audit", root / "imgs", "--against", f"ref={root / 'ref'}", "--embedding", "tiny:resnet", "--json")
    one = json.loads(run_cli(*args, "--db", root / "one.duckdb", env={"GENSETS_CACHE": str(root / "c-one")},
                             check=0).stdout)
    assert one["features"]["embedded"] == one["features"]["images"] == 139 and one["features"]["workers"] == 1
    return root, args, _audit_rows(root / "one.duckdb")


def _audit_rows(db: Path) -> list[tuple]:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT key, reference, method, neighbour, hamming, duplicate, cosine FROM audit "
                           "ORDER BY key, reference, method").fetchall()
    finally:
        con.close()


def _same_audit(db: Path, want: list[tuple]) -> None:
    """The same neighbours by every method, the same distances, cosines within float tolerance (thread counts)."""
    got = _audit_rows(db)
    assert [r[:6] for r in got] == [r[:6] for r in want]
    assert np.allclose([r[6] or 0 for r in got], [r[6] or 0 for r in want], atol=1e-5, rtol=0)
    assert sum(r[2] == "embedding" and r[5] for r in want)  # planted copies found by the embedding too


@pytest.mark.slow
def test_two_processes_under_accelerate_audit_as_one(many):
    """accelerate launch --multi_gpu with 2 CPU processes (gloo): each computes its share of the chunks, process 0
    gathers, caches and searches: every image's neighbours equal the one-process audit's."""
    root, args, want = many
    accelerate = Path(sys.executable).with_name("accelerate")
    p = subprocess.run(
        [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
         "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "gensets.cli", *map(str, args),
         "--db", str(root / "two.duckdb")],
        cwd=ROOT, capture_output=True, text=True, timeout=HANG, env={**os.environ, "GENSETS_CACHE": str(root / "c-2")})
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)  # process 0 alone prints
    assert out["features"]["embedded"] == 139 and out["features"]["workers"] == 2
    _same_audit(root / "two.duckdb", want)


@pytest.mark.slow
def test_ray_workers_audit_as_one_process(many):
    """--backend ray on a local cluster of 2 workers (started and stopped by the audit, on 127.0.0.1): the chunks the
    cache lacks go to the workers; every image's neighbours equal the one-process audit's."""
    root, args, want = many
    r = run_cli(*args, "--db", root / "ray.duckdb", "--backend", "ray", "--workers", "2",
                env={"GENSETS_CACHE": str(root / "c-ray")}, check=0)
    out = json.loads(r.stdout)
    assert out["features"]["embedded"] == 139 and out["features"]["workers"] == 2
    _same_audit(root / "ray.duckdb", want)
    # again: everything from the cache, no cluster started
    again = json.loads(run_cli(*args, "--backend", "ray", env={"GENSETS_CACHE": str(root / "c-ray")}, check=0).stdout)
    assert again["features"]["cached"] == 139 and again["features"]["workers"] == 0


# ------------------------------------------------------------------ end to end

@pytest.fixture(scope="module")
def planted_build(tmp_path_factory):
    """A recognition build of 4 generated images and imported images with planted copies, finalized."""
    root = tmp_path_factory.mktemp("audit")
    pairs = plant(root / "planted", 10, PLANTED)
    (root / "config.yaml").write_text(CONFIG)
    ws = root / "ws"
    run_cli("build", root / "config.yaml", "--out", ws, "--quiet", check=0)
    run_cli("finalize", ws, "--include-pending", "--json", check=0)
    return root, ws, pairs


def _keys_of(ws: Path) -> dict[str, str]:
    """original_path (the planted file) -> sample key, from the published shards."""
    out = {}
    for tar in sorted((ws / "dataset").rglob("*.tar")):
        with tarfile.open(tar) as t:
            for m in t.getmembers():
                if m.name.endswith(".json"):
                    meta = json.loads(t.extractfile(m).read())
                    out[meta.get("original_path") or meta["key"]] = meta["key"]
    return out


def _metas(ws: Path) -> dict[str, dict]:
    out = {}
    for tar in sorted((ws / "dataset").rglob("*.tar")):
        with tarfile.open(tar) as t:
            for m in t.getmembers():
                if m.name.endswith(".json"):
                    meta = json.loads(t.extractfile(m).read())
                    out[meta["key"]] = meta
    return out


def test_finalize_and_audit_find_every_planted_pair_and_no_other(planted_build):
    root, ws, pairs = planted_build
    keys = _keys_of(ws)
    planted = {frozenset((keys[a], keys[b])) for a, b, _ in pairs}
    manifest = json.loads((ws / "dataset" / "manifest.json").read_text())
    found = {frozenset((p["key"], p["neighbour"])) for p in manifest["audit"]["pairs"]["closest"]}
    assert manifest["audit"]["pairs"]["total"] == len(planted) <= 8  # all of them shown
    assert found == planted
    metas = _metas(ws)
    flagged = {k for k, m in metas.items() if m["audit"]["flagged"]}
    assert flagged == set().union(*planted)
    # the card: its section, the figure beside it, and the field declared
    card = (ws / "dataset" / "README.md").read_text()
    assert "## Duplicates and contamination" in card and "![The closest pairs" in card
    assert (ws / "dataset" / "figures" / "duplicates.png").is_file()
    assert "`json.audit.neighbours[].hamming`" in card and "name: audit" in card
    before = {p: p.read_bytes() for p in (ws / "dataset" / "README.md", ws / "dataset" / "figures" / "duplicates.png")}
    run_cli("card", ws, check=0)  # gensets card renders the section from the manifest: the same bytes
    assert {p: p.read_bytes() for p in before} == before
    # gensets audit of the workspace: the same pairs; the review page's neighbours in state.duckdb
    r = json.loads(run_cli("audit", ws, "--json", check=0).stdout)
    assert {frozenset((p["key"], p["neighbour"])) for p in r["pairs"]["all"]} == planted
    import duckdb

    con = duckdb.connect(str(ws / "state.duckdb"), read_only=True)
    rows = con.execute("SELECT DISTINCT key FROM audit_neighbours WHERE duplicate").fetchall()
    con.close()
    assert {k for (k,) in rows} == flagged


def test_a_second_audit_decodes_and_embeds_nothing_and_the_results_database_holds_it(planted_build, tmp_path):
    root, ws, pairs = planted_build
    args = ["audit", ws, "--embedding", "tiny:resnet", "--cosine-threshold", "0.9999", "--json"]
    first = json.loads(run_cli(*args, "--db", tmp_path / "r.duckdb", check=0).stdout)
    again = json.loads(run_cli(*args, "--against", f"copy={root / 'planted'}", check=0).stdout)
    n = first["features"]["images"]
    assert first["features"]["embedded"] in (0, n)  # 0: an earlier test's run filled the cache
    assert again["features"]["embedded"] == 0 and again["features"]["hashed"] == 0
    assert again["features"]["cached"] == n
    assert first["embedding"]["spec"] == "tiny:resnet" and first["thresholds"]["embedding"]["cosine_at_least"] == 0.9999
    # against the planted folder itself: every imported image is a (JPEG re-encoded) copy of its file, no generated one
    copies = {r["config"]: r for r in again["counts"] if r["reference"] == "copy"}
    assert copies["planted"]["flagged"] == copies["planted"]["images"] == 10 + len(PLANTED)
    assert copies["sd_2_steps"]["flagged"] == 0 and copies["sd_2_steps"]["images"] == 4
    import duckdb

    con = duckdb.connect(str(tmp_path / "r.duckdb"), read_only=True)
    got = con.execute("SELECT count(DISTINCT key), count(*) FILTER (WHERE method = 'embedding') FROM audit").fetchone()
    con.close()
    assert got == (n, n)  # every image has its nearest embedding neighbour


def test_drop_near_duplicates_removes_exactly_one_image_of_each_group(planted_build):
    root, ws, pairs = planted_build
    before = json.loads((ws / "dataset" / "manifest.json").read_text())["counts"]
    r = json.loads(run_cli("finalize", ws, "--include-pending", "--drop", "near-duplicates", "--json", check=0).stdout)
    keys = _keys_of(ws)
    manifest = json.loads((ws / "dataset" / "manifest.json").read_text())
    groups = manifest["audit"]["dropped"]["groups"]
    assert len(groups) == len(pairs) and all(len(g["dropped"]) == 1 for g in groups)  # each base copied once
    assert sum(before.values()) - sum(r["counts"].values()) == len(pairs) == r["audit"]["dropped"]
    published = set(_metas(ws))
    for g in groups:  # the first by key stays (no image was reviewed), the other is gone
        assert g["kept"] in published and not set(g["dropped"]) & published and g["why"] == "first by key"
        assert g["kept"] == min([g["kept"], *g["dropped"]])
    assert manifest["audit"]["pairs"]["total"] == 0  # among the images that stay
    assert "Near-duplicates left out" in (ws / "dataset" / "README.md").read_text()
    assert set(keys.values()) == published
    run_cli("finalize", ws, "--include-pending", check=0)  # as before, for the other tests


def test_finalize_takes_the_backend_options(planted_build, tmp_path):
    root, ws, pairs = planted_build
    r = run_cli("finalize", ws, "--include-pending", "--workers", "2")
    assert r.returncode == 2 and r.stderr.strip() == "gensets: error: --workers is an option of --backend ray"


@pytest.mark.slow
def test_finalize_on_ray_workers_records_the_audit_of_one_process(planted_build, tmp_path):
    """finalize --backend ray with an empty feature cache: the images are hashed on the Ray workers, and the
    manifest's audit is the one-process finalize's."""
    root, ws, pairs = planted_build
    copy = tmp_path / "ws"
    shutil.copytree(ws, copy)
    before = json.loads((ws / "dataset" / "manifest.json").read_text())["audit"]
    run_cli("finalize", copy, "--include-pending", "--backend", "ray", "--workers", "2",
            env={"GENSETS_CACHE": str(tmp_path / "cache")}, check=0)
    assert json.loads((copy / "dataset" / "manifest.json").read_text())["audit"] == before


def test_a_killed_and_resumed_build_audits_as_an_uninterrupted_one(planted_build, tmp_path):
    root, ws, pairs = planted_build
    (tmp_path / "planted").symlink_to(root / "planted")
    (tmp_path / "config.yaml").write_text(CONFIG)
    units = [json.loads(line)["unit"] for line in (ws / "candidates" / "manifest.jsonl").read_text().splitlines()]
    again = tmp_path / "ws"
    killed = run_cli("build", tmp_path / "config.yaml", "--out", again, "--quiet",
                     env={"GENSETS_TEST_EXIT_UNIT": f"{units[len(units) // 2]}:{tmp_path / 'killed'}"})
    assert killed.returncode != 0 and (tmp_path / "killed").exists()
    run_cli("build", tmp_path / "config.yaml", "--out", again, "--quiet", check=0)
    run_cli("finalize", again, "--include-pending", check=0)
    a, b = (json.loads((w / "dataset" / "manifest.json").read_text())["audit"] for w in (ws, again))
    assert a == b and _metas(ws) == _metas(again)


def test_genbench_checks_its_test_set_by_default_and_flags_a_planted_copy(tmp_path):
    refs = tmp_path / "refs"
    shutil.copytree(ROOT / "configs" / "genbench.smoke-refs", refs)
    ws = tmp_path / "ws"
    run_cli("build", ROOT / "configs" / "genbench.smoke.yaml", "--out", ws, "--quiet", "--set",
            f"test_set=folder:{refs}", check=0)
    r = json.loads(run_cli("finalize", ws, "--include-pending", "--json", check=0).stdout)
    assert r["audit"]["pairs"]["test"] == 0 and not r["audit"]["skipped"]  # checked, and nothing copied
    # a test image that is a (re-encoded, resized) copy of a generated one: the pair is the same either way round
    tar = sorted((ws / "dataset").rglob("*.tar"))[0]
    with tarfile.open(tar) as t:
        member = next(m for m in t.getmembers() if m.name.endswith(".jpg"))
        key = member.name.rsplit(".", 1)[0]
        img = Image.open(io.BytesIO(t.extractfile(member).read())).convert("RGB")
    img.resize((48, 48), Image.Resampling.BICUBIC).save(refs / "cat" / "copied.png")
    r = json.loads(run_cli("finalize", ws, "--include-pending", "--json", check=0).stdout)
    manifest = json.loads((ws / "dataset" / "manifest.json").read_text())
    test_pairs = [p for p in manifest["audit"]["pairs"]["closest"] if p["reference"] == "test"]
    assert r["audit"]["pairs"]["test"] == 1 and test_pairs[0]["key"] == key
    assert test_pairs[0]["neighbour"] == "cat/copied.png"
    assert "| `test` |" in (ws / "dataset" / "README.md").read_text()


def test_a_frozen_smoke_configs_test_set_is_found_wherever_finalize_runs(tmp_path, monkeypatch):
    """A workspace's frozen config has no folder of its own: the packaged smoke config's relative test set
    (folder:genbench.smoke-refs) is gensets' packaged copy, from any working folder."""
    from gensets.audit.sources import config_bases, open_set
    from gensets.workspace import load_build_config

    _, cfg = load_build_config(ROOT / "configs" / "genbench.smoke.yaml")
    monkeypatch.chdir(tmp_path)
    frozen = type("Frozen", (), {"base_dir": Path(".")})()
    for c in (cfg, frozen):
        s = open_set("folder:genbench.smoke-refs", "test", config_bases(c))
        assert sorted(s.keys) == sorted(p.relative_to(ROOT / "configs" / "genbench.smoke-refs").as_posix()
                                        for p in (ROOT / "configs" / "genbench.smoke-refs").rglob("*.png"))


def test_sscd_torchscript_embedder_and_its_threshold(tmp_path):
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, stride=4)

        def forward(self, x):
            return self.conv(x).mean(dim=(2, 3))

    torch.manual_seed(0)
    path = tmp_path / "sscd_tiny.torchscript.pt"
    torch.jit.script(Tiny()).save(str(path))
    plant(tmp_path / "imgs", 6, {"jpeg": 1})
    refused = run_cli("audit", tmp_path / "imgs", "--embedding", f"sscd:{path}")
    assert refused.returncode != 0 and "--allow-pickle" in refused.stderr and "Traceback" not in refused.stderr
    o = check.Options(model=f"sscd:{path}", allow_pickle=True)
    done = audit(str(tmp_path / "imgs"), [], o)
    assert done.summary["thresholds"]["embedding"]["cosine_at_least"] == 0.5
    assert "Somepalli" in done.summary["thresholds"]["embedding"]["source"]
    assert all(any(e["method"] == "embedding" for e in n) for n in done.result.neighbours)


def test_bad_input_is_one_line(tmp_path):
    p = run_cli("audit", tmp_path / "nothing")
    assert p.returncode != 0 and p.stderr.strip().count("\n") == 0 and "no such folder" in p.stderr
    p = run_cli("audit", tmp_path, "--phash-threshold", "99")
    assert p.returncode != 0 and "--phash-threshold" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("audit", tmp_path, "--workers", "2")
    assert p.returncode == 2 and p.stderr.strip() == "gensets: error: --workers is an option of --backend ray"


def test_the_review_page_shows_a_flagged_images_neighbour(planted_build, tmp_path):
    """After an audit of the workspace, the review page's detail of a flagged image names each neighbour with its
    methods and distances, a neighbour within the workspace with its key to show its image; an image the audit
    did not flag has no such field."""
    from gensets.curation.review_state import ReviewState

    root, ws, pairs = planted_build
    copy = tmp_path / "ws"
    shutil.copytree(ws, copy)
    run_cli("audit", copy, "--quiet", check=0)
    keys = _keys_of(copy)
    planted = {frozenset((keys[a], keys[b])) for a, b, _ in pairs}
    rs = ReviewState(copy, keep_open=True)
    try:
        items = rs.page("", status="all")["items"]
        seen = {}
        for it in items:
            for x in it["extra"]:
                assert x["name"] == "near-duplicate of" and re.search(r" \((exact|phash|dhash) ", x["value"])
                seen.setdefault(it["key"], set()).add(x["image"])
        shown = {it["key"] for it in items}
        assert shown and seen  # the page shows flagged images
        for key, neighbours in seen.items():
            assert all(frozenset((key, n)) in planted for n in neighbours)
        assert {k for pair in planted for k in pair if k in shown} == set(seen)
        img, mime = rs.image(next(iter(next(iter(seen.values())))))  # the neighbour's image is served
        assert img and mime.startswith("image/")
    finally:
        rs.close()
