"""Shards: deterministic and atomic writing, manifests, safe reading, verification."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import random
import tarfile
from pathlib import Path

import pytest
from PIL import Image

from gensets.errors import DataError, GensetsError
from gensets.images import encode_image
from gensets.shards import (
    Manifest,
    ShardInfo,
    clean_temp,
    index_shard,
    iter_shard,
    read_members,
    sha256_file,
    verify,
    write_json_atomic,
    write_shard,
)


def make_image(seed: int, size: int = 32) -> Image.Image:
    rng = random.Random(seed)
    return Image.frombytes("RGB", (size, size), bytes(rng.randrange(256) for _ in range(size * size * 3)))


def make_samples(n: int = 6, start: int = 0) -> list[dict]:
    return [
        {
            "__key__": f"s{i:05d}",
            "webp": encode_image(make_image(i)),
            "cls": i % 3,
            "json": {"prompt": f"a photo of thing {i}", "seed": i, "note": "é"},
            "txt": f"caption {i}",
        }
        for i in range(start, start + n)
    ]


def no_temp(folder: Path) -> bool:
    return not [p for p in folder.rglob(".*") if ".tmp-" in p.name]


def problems(root) -> list[str]:
    return [str(p) for p in verify(root)]


# ---------------------------------------------------------------- encoding and writing


def test_encode_image_is_deterministic_and_drops_metadata():
    img = make_image(1)
    tagged = img.copy()
    exif = Image.Exif()
    exif[0x0131] = "some software 1.0"  # Software tag
    tagged.info["exif"] = exif.tobytes()
    tagged.info["icc_profile"] = b"not really a profile"
    for fmt in ("webp", "png", "jpg"):
        data = encode_image(img, fmt)
        assert data == encode_image(img, fmt) == encode_image(tagged, fmt)
        assert b"some software" not in data and b"not really" not in data
        with Image.open(io.BytesIO(data)) as im:
            assert im.size == (32, 32) and im.mode == "RGB"
    assert encode_image(img, "jpeg") == encode_image(img, "jpg")
    lossless = encode_image(img, "webp", quality=100)
    assert Image.open(io.BytesIO(lossless)).tobytes() == img.tobytes()
    assert encode_image(img.convert("RGBA"), "png") == encode_image(img, "png")
    with pytest.raises(ValueError, match="gif"):
        encode_image(img, "gif")


def test_same_samples_in_any_order_give_identical_bytes(tmp_path):
    samples = make_samples()
    infos = []
    for i, order in enumerate(
        [samples, samples[::-1], random.Random(3).sample(samples, len(samples)), samples]
    ):
        infos.append(write_shard(tmp_path / f"{i}.tar", order))
    blobs = {(tmp_path / f"{i}.tar").read_bytes() for i in range(4)}
    assert len(blobs) == 1
    info = infos[0]
    assert isinstance(info, ShardInfo) and info.n == len(samples)
    assert info.path == str(tmp_path / "0.tar")
    assert info.sha256 == sha256_file(tmp_path / "0.tar") == infos[3].sha256
    assert info.nbytes == (tmp_path / "0.tar").stat().st_size
    assert info.to_dict() == {"path": info.path, "sha256": info.sha256, "n": info.n, "nbytes": info.nbytes}
    with tarfile.open(tmp_path / "0.tar") as tf:
        members = tf.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names) and names[:4] == ["s00000.cls", "s00000.json", "s00000.txt", "s00000.webp"]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) for m in members} == {
        (0, 0, 0, "gensets", "gensets", 0o444)
    }
    assert no_temp(tmp_path)


def as_bytes(v) -> bytes:
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return str(v).encode() if isinstance(v, (int, str)) else v


@pytest.mark.parametrize("mtime", [0, 1_700_000_000])
def test_bytes_equal_webdataset_tarwriter(tmp_path, mtime):
    import webdataset as wds

    samples = make_samples(3)
    samples += [
        {"__key__": "clé-ünïcode", "txt": "pax header path"},
        {"__key__": "k" * 120, "txt": "name over 100 bytes", "cls": 1},
        {"__key__": "empty", "txt": b""},
        {"__key__": "block", "bin": bytes(512)},
    ]
    ours = write_shard(tmp_path / "ours.tar", samples[::-1], mtime=mtime)
    with open(tmp_path / "raw.tar", "wb") as f:
        with wds.TarWriter(f, user="gensets", group="gensets", encoder=False, mtime=mtime) as tw:
            for s in sorted(samples, key=lambda s: s["__key__"]):
                tw.write({k: v if k == "__key__" else as_bytes(v) for k, v in s.items()})
    assert (tmp_path / "ours.tar").read_bytes() == (tmp_path / "raw.tar").read_bytes()
    assert ours.n == len(samples)
    assert [s["__key__"] for s in iter_shard(tmp_path / "ours.tar")] == sorted(s["__key__"] for s in samples)


def test_field_encodings(tmp_path):
    write_shard(
        tmp_path / "a.tar",
        [{"__key__": "k", "json": {"b": 1, "a": "é"}, "cls": 7, "txt": "hé", "bin": b"\0"}],
    )
    (sample,) = iter_shard(tmp_path / "a.tar")
    assert sample == {
        "__key__": "k",
        "json": '{"a":"é","b":1}'.encode(),
        "cls": b"7",
        "txt": "hé".encode(),
        "bin": b"\0",
    }


@pytest.mark.parametrize("key", ["a.b", "a/b", "", "x.webp"])
def test_bad_keys_are_rejected(tmp_path, key):
    with pytest.raises(ValueError, match="bad sample key"):
        write_shard(tmp_path / "a.tar", [{"__key__": "ok", "txt": "x"}, {"__key__": key, "txt": "x"}])
    assert list(tmp_path.iterdir()) == []


def test_duplicate_keys_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="duplicate sample key 'k'"):
        write_shard(tmp_path / "a.tar", [{"__key__": "k", "txt": "x"}, {"__key__": "k", "txt": "y"}])
    assert list(tmp_path.iterdir()) == []


def test_failing_generator_leaves_no_file(tmp_path):
    def gen():
        yield from make_samples(2)
        raise RuntimeError("generation crashed")

    with pytest.raises(RuntimeError, match="generation crashed"):
        write_shard(tmp_path / "a.tar", gen())
    assert list(tmp_path.iterdir()) == []


def test_failure_while_writing_removes_temp_and_keeps_old_shard(tmp_path, monkeypatch):
    target = tmp_path / "a.tar"
    old = write_shard(target, make_samples(2))

    def broken_fsync(fd):
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk on fire"):
        write_shard(target, make_samples(3))
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar"]
    assert sha256_file(target) == old.sha256


# ---------------------------------------------------------------- reading back


def test_webdataset_reads_the_shard(tmp_path):
    import webdataset as wds

    samples = make_samples(5)
    write_shard(tmp_path / "a.tar", samples[::-1])
    got = list(wds.WebDataset(str(tmp_path / "a.tar"), shardshuffle=False))
    assert [s["__key__"] for s in got] == [s["__key__"] for s in samples]
    for g, s in zip(got, samples, strict=True):
        assert g["webp"] == s["webp"] and g["cls"] == str(s["cls"]).encode()
        assert json.loads(g["json"]) == s["json"]
    assert [
        {k: v for k, v in s.items() if not k.startswith("__")} for s in iter_shard(tmp_path / "a.tar")
    ] == [{k: v for k, v in g.items() if not k.startswith("__")} for g in got]


def test_datasets_reads_the_shard(tmp_path, monkeypatch):
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import datasets

    samples = make_samples(5)
    write_shard(tmp_path / "test.tar", samples)
    ds = datasets.load_dataset(
        "webdataset",
        data_files={"test": str(tmp_path / "test.tar")},
        split="test",
        cache_dir=str(tmp_path / "cache"),
    )
    assert len(ds) == 5
    assert ds[2]["__key__"] == "s00002" and ds[2]["cls"] == 2 and ds[2]["txt"] == "caption 2"
    assert ds[2]["json"] == samples[2]["json"]
    assert ds[2]["webp"].tobytes() == Image.open(io.BytesIO(samples[2]["webp"])).convert("RGB").tobytes()


def evil_tar(path: Path, name: str = "../x") -> None:
    with tarfile.open(path, "w") as tf:
        for member, data in [("good.txt", b"fine"), (name, b"evil")]:
            ti = tarfile.TarInfo(member)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))


def read_by_index(path):
    """A shard read the way evaluation workers read it: its index, then each sample's members by offset."""
    return [read_members(path, e) for e in index_shard(path)]


READERS = pytest.mark.parametrize("read", [iter_shard, read_by_index], ids=["stream", "index"])


def test_index_reads_what_the_stream_reads(tmp_path):
    samples = make_samples(7)
    write_shard(tmp_path / "a.tar", samples)
    streamed = list(iter_shard(tmp_path / "a.tar"))
    assert read_by_index(tmp_path / "a.tar") == streamed and len(streamed) == 7
    entry = index_shard(tmp_path / "a.tar")[3]
    assert entry["__key__"] == streamed[3]["__key__"] and set(entry) == set(streamed[3])
    offset, size = entry["webp"]  # a member's bytes lie where the index says, in the file itself
    assert (tmp_path / "a.tar").read_bytes()[offset:offset + size] == streamed[3]["webp"]


@READERS
@pytest.mark.parametrize("name", ["../x", "a/../../x.txt", "/etc/x.txt"])
def test_reader_refuses_unsafe_members(tmp_path, name, read):
    evil_tar(tmp_path / "evil.tar", name)
    with pytest.raises(DataError, match=f"evil.tar: {name}: "):
        list(read(tmp_path / "evil.tar"))
    assert not (tmp_path.parent / "x").exists()


@READERS
def test_reader_refuses_links_and_truncation(tmp_path, read):
    with tarfile.open(tmp_path / "link.tar", "w") as tf:
        ti = tarfile.TarInfo("k.txt")
        ti.type, ti.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(ti)
    with pytest.raises(DataError, match="link.tar: k.txt: link member"):
        list(read(tmp_path / "link.tar"))
    data = write_shard(tmp_path / "a.tar", make_samples(3)) and (tmp_path / "a.tar").read_bytes()
    (tmp_path / "cut.tar").write_bytes(data[:-10240])  # cut exactly between members
    with pytest.raises(DataError, match="cut.tar: truncated or corrupt tar"):
        list(read(tmp_path / "cut.tar"))
    (tmp_path / "mid.tar").write_bytes(data[:len(data) // 2])  # cut inside a member
    with pytest.raises(DataError, match="mid.tar: truncated or corrupt tar"):
        list(read(tmp_path / "mid.tar"))
    assert problems(tmp_path / "cut.tar") == [
        f"{tmp_path / 'cut.tar'}: truncated or corrupt tar (no end-of-archive marker)"
    ]


def test_a_shard_that_changed_after_indexing_is_one_line(tmp_path):
    write_shard(tmp_path / "a.tar", make_samples(3))
    index = index_shard(tmp_path / "a.tar")
    (tmp_path / "a.tar").write_bytes((tmp_path / "a.tar").read_bytes()[:index[2]["webp"][0] + 5])
    with pytest.raises(DataError, match=r"a.tar: s00002.webp: truncated \(the shard changed while read\)"):
        read_members(tmp_path / "a.tar", index[2])


# ---------------------------------------------------------------- manifests


def test_manifest_rows_done_and_torn_last_line(tmp_path):
    m = Manifest(tmp_path / "candidates" / "manifest.jsonl")
    assert m.rows() == [] and m.done() == set()
    m.append({"unit": "u1", "shard": "a.tar", "n": 3})
    m.append({"unit": "u2", "shard": "b.tar", "n": 1})
    with open(m.path, "ab") as f:
        f.write(b'{"unit": "u3", "sha')  # killed mid-line
    assert [r["unit"] for r in m.rows()] == ["u1", "u2"]
    assert m.done() == {"u1", "u2"}
    m.append({"unit": "u3"})  # cuts the torn line off first
    assert m.done() == {"u1", "u2", "u3"}
    assert m.path.read_bytes().count(b"\n") == 3

    lines = m.path.read_bytes().split(b"\n")
    lines[1] = b"{not json"
    m.path.write_bytes(b"\n".join(lines))
    with pytest.raises(DataError, match=r"manifest.jsonl: line 2: malformed"):
        m.rows()


def _append_many(path: str, tag: str, count: int) -> None:
    m = Manifest(path)
    for i in range(count):
        m.append({"unit": f"{tag}-{i}", "payload": "x" * (i % 50)})


def test_concurrent_appends_all_survive(tmp_path):
    path = str(tmp_path / "manifest.jsonl")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(path, tag, 200)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    rows = Manifest(path).rows()
    assert len(rows) == 400
    assert Manifest(path).done() == {f"{t}-{i}" for t in "ab" for i in range(200)}


def test_write_json_atomic_and_clean_temp(tmp_path):
    write_json_atomic(tmp_path / "manifest.json", {"b": [1], "a": "é"})
    assert json.loads((tmp_path / "manifest.json").read_text("utf-8")) == {"a": "é", "b": [1]}
    assert (tmp_path / "manifest.json").read_text("utf-8").index('"a"') < (
        tmp_path / "manifest.json"
    ).read_text("utf-8").index('"b"')
    (tmp_path / "sub").mkdir()
    leftovers = [tmp_path / ".manifest.json.tmp-123", tmp_path / "sub" / ".test-00000.tar.tmp-9"]
    for p in leftovers:
        p.write_bytes(b"partial")
    (tmp_path / "keep.tar").write_bytes(b"")
    assert sorted(clean_temp(tmp_path)) == sorted(leftovers)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["keep.tar", "manifest.json", "sub"]


# ---------------------------------------------------------------- verify


def good_folder(root: Path) -> Path:
    """dataset/manifest.json (nested "shards" lists) + candidates/manifest.jsonl."""
    ds = root / "dataset"
    (ds / "cfg").mkdir(parents=True)
    infos = [write_shard(ds / "cfg" / f"test-{i:05d}.tar", make_samples(4, start=4 * i)) for i in range(2)]
    entries = [{"path": f"cfg/test-{i:05d}.tar", "sha256": x.sha256, "n": x.n} for i, x in enumerate(infos)]
    write_json_atomic(ds / "manifest.json", {"name": "demo", "configs": [{"name": "cfg", "shards": entries}]})
    cand = root / "candidates"
    cand.mkdir()
    m = Manifest(cand / "manifest.jsonl")
    for u in range(2):
        x = write_shard(cand / f"unit-{u}.tar", make_samples(3, start=10 * u))
        m.append({"unit": f"u{u}", "shard": f"unit-{u}.tar", "sha256": x.sha256, "n": x.n})
    m.append({"unit": "u9", "status": "skipped"})  # rows without a shard are fine
    return root


def test_verify_good_folder(tmp_path):
    good_folder(tmp_path)
    assert verify(tmp_path) == []
    assert verify(tmp_path / "dataset" / "cfg" / "test-00001.tar") == []


def test_verify_missing_root_is_usage_error(tmp_path):
    with pytest.raises(GensetsError) as e:
        verify(tmp_path / "nope")
    assert e.value.exit_code == 2


def test_verify_truncated_shard(tmp_path):
    good_folder(tmp_path)
    shard = tmp_path / "dataset" / "cfg" / "test-00000.tar"
    cut = _member(shard, "s00002.webp").offset_data + 100  # inside an image
    shard.write_bytes(shard.read_bytes()[:cut])
    sha = sha256_file(shard)
    want = json.loads((tmp_path / "dataset" / "manifest.json").read_text())["configs"][0]["shards"][0][
        "sha256"
    ]
    man = tmp_path / "dataset" / "manifest.json"
    got = problems(tmp_path)
    assert got == [
        f"{shard}: sha256 {sha} differs from {want} in {man}",
        f"{shard}: truncated or corrupt tar (ReadError: unexpected end of data)",
    ]


def _member(shard: Path, name: str) -> tarfile.TarInfo:
    with tarfile.open(shard) as tf:
        return tf.getmember(name)


def test_verify_flipped_byte_in_image(tmp_path):
    good_folder(tmp_path)
    shard = tmp_path / "candidates" / "unit-1.tar"
    info = _member(shard, "s00011.webp")
    data = bytearray(shard.read_bytes())
    data[info.offset_data + info.size // 2] ^= 0x01  # inside the VP8 payload: still decodes
    shard.write_bytes(bytes(data))
    man = tmp_path / "candidates" / "manifest.jsonl"
    want = Manifest(man).rows()[1]["sha256"]
    assert problems(tmp_path) == [f"{shard}: sha256 {sha256_file(shard)} differs from {want} in {man}"]


def test_verify_member_escaping_the_folder(tmp_path):
    evil_tar(tmp_path / "evil.tar", "../x")
    assert problems(tmp_path) == [f"{tmp_path / 'evil.tar'}: ../x: member path contains '..'"]


def test_verify_decodes_every_member(tmp_path):
    samples = make_samples(3)
    samples[1]["webp"] = samples[1]["webp"][:40]  # a cut image
    samples[2]["png"] = b"\x89PNG\r\n\x1a\n garbage"
    samples[0]["xyz"] = b"?"
    samples[0]["cls"] = "seven"
    samples[2]["json"] = "{not json"
    info = write_shard(tmp_path / "a.tar", samples)
    Manifest(tmp_path / "manifest.jsonl").append({"shard": "a.tar", "sha256": info.sha256, "n": 3})
    got = problems(tmp_path)
    shard = tmp_path / "a.tar"
    assert (
        got[0]
        == f"{shard}: s00000.cls: cannot decode: ValueError: invalid literal for int() with base 10: 'seven'"
    )
    assert got[1] == f"{shard}: s00000.xyz: no decoder for .xyz"
    assert got[2].startswith(f"{shard}: s00001.webp: cannot decode: ")
    assert got[3].startswith(f"{shard}: s00002.json: cannot decode: JSONDecodeError: ")
    assert got[4].startswith(f"{shard}: s00002.png: cannot decode: ")
    assert len(got) == 5 and all("\n" not in g for g in got)


def test_verify_decompression_bomb_is_a_problem(tmp_path, monkeypatch):
    write_shard(tmp_path / "a.tar", make_samples(1))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    (got,) = problems(tmp_path)
    assert got.startswith(f"{tmp_path / 'a.tar'}: s00000.webp: cannot decode: Decompression")


def test_verify_manifest_consistency(tmp_path):
    good_folder(tmp_path)
    cand = tmp_path / "candidates"
    (cand / "unit-0.tar").unlink()
    write_shard(cand / "stray.tar", make_samples(1))
    (cand / ".unit-2.tar.tmp-4242").write_bytes(b"partial")
    m = Manifest(cand / "manifest.jsonl")
    rows = m.rows()
    m.append({**rows[1], "n": 99})  # a later row for the same shard replaces the earlier one
    assert problems(tmp_path) == [
        f"{cand / '.unit-2.tar.tmp-4242'}: leftover temp file from a killed writer",
        f"{cand / 'stray.tar'}: not listed in any manifest",
        f"{cand / 'unit-0.tar'}: listed in {cand / 'manifest.jsonl'} but missing",
        f"{cand / 'unit-1.tar'}: 3 samples, {cand / 'manifest.jsonl'} says 99",
    ]


def test_verify_reports_a_malformed_manifest(tmp_path):
    (tmp_path / "manifest.json").write_text("{oops")
    (got,) = problems(tmp_path)
    assert got.startswith(f"{tmp_path / 'manifest.json'}: not valid JSON")


def test_verify_stray_shard_in_a_config_folder(tmp_path):
    """dataset/manifest.json governs dataset/<config>/: a tar it does not list would load via the card glob."""
    from tests.conftest import run_cli

    good_folder(tmp_path)
    stray = tmp_path / "dataset" / "cfg" / "test-00002.tar"
    write_shard(stray, make_samples(1))
    p = run_cli("verify", tmp_path, check=1)
    assert p.stdout.splitlines() == [f"{stray}: not listed in any manifest"]
    assert p.stderr == f"{tmp_path}: 1 problem(s)\n"


def test_verify_tar_outside_any_manifest_folder_is_fine(tmp_path):
    good_folder(tmp_path)
    (tmp_path / "other").mkdir()
    write_shard(tmp_path / "other" / "loose.tar", make_samples(1))
    assert verify(tmp_path) == []


@pytest.mark.parametrize("rel", ["../x.tar", "/abs/x.tar", "cfg/../../x.tar"])
def test_verify_manifest_path_leaving_its_folder(tmp_path, rel):
    ds = tmp_path / "dataset"
    ds.mkdir()
    info = write_shard(tmp_path / "x.tar", make_samples(1))
    write_json_atomic(ds / "manifest.json", {"shards": [{"path": rel, "sha256": info.sha256, "n": 1}]})
    assert problems(tmp_path) == [f"{ds / 'manifest.json'}: shard path {rel!r} leaves {ds}"]
