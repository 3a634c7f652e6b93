"""Issue 45, item 1: the defect classes of the one door for writes, for every command that writes into an --out /
--output folder or file: (a) a symlink at a target is refused, the file it points to unchanged; (b) a user's non-empty
folder gensets did not make is refused, nothing written; (c) a failure midway publishes no part of the set. Each
answer is one line naming the path, a non-zero exit, no traceback."""

import os
import shutil
from pathlib import Path

import pytest

from gensets.output import MARKER, files
from gensets.registry import REPORTS
from gensets.reproduce import tables

from .conftest import run_cli
from .test_card import digest
from .test_hardening import one_line_error

# each registered report's argv (its inputs need not exist: the --out folder is refused before they are read)
REPORT_ARGS = {
    "failure-modes": ["WS"], "genbench": ["WS", "--clip", "tiny:clip"], "vqa": ["--db", "r.duckdb"],
    "recognition": ["--db", "r.duckdb"], "imagenet-d": ["--db", "r.duckdb"], "quality": ["--db", "r.duckdb"],
}


def _users_folder(tmp_path) -> tuple[Path, dict]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "reproduce.md").write_text("my notes\n")
    (home / "report.md").write_text("my report\n")
    return home, digest(home)


def _outside(tmp_path) -> Path:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("the user's own file\n")
    return secret


def test_every_report_kind_is_covered():
    assert set(REPORT_ARGS) == set(REPORTS.names())


# ---------------------------------------------------------------- (b) a user's non-empty folder
@pytest.mark.parametrize("kind", sorted(REPORT_ARGS))
def test_report_refuses_a_users_folder(kind, tmp_path):
    home, before = _users_folder(tmp_path)
    r = run_cli("report", kind, *[tmp_path / a if a in ("WS", "r.duckdb") else a for a in REPORT_ARGS[kind]],
                "--out", home)
    one_line_error(r, home, "gensets did not make", code=1)
    assert digest(home) == before


@pytest.mark.parametrize("table", sorted(tables()))
def test_reproduce_refuses_a_users_folder(table, tmp_path):
    home, before = _users_folder(tmp_path)
    r = run_cli("reproduce", table, "--smoke", "--out", home)
    one_line_error(r, home, "gensets did not make", code=1)
    assert digest(home) == before


def test_a_folder_gensets_made_is_reused_and_an_empty_one_taken(tmp_path):
    for root in (tmp_path / "new", tmp_path / "empty"):
        if root.name == "empty":
            root.mkdir()
        with files(root, "test") as out:
            out.write("a.txt", "1")
        with files(root, "test") as out:  # again: gensets made it
            out.write("a.txt", "2")
        assert (root / "a.txt").read_text() == "2" and (root / MARKER).read_text() == "test\n"
        assert sorted(p.name for p in root.iterdir()) == [MARKER, "a.txt"]  # no staging folder left


# ---------------------------------------------------------------- (a) a symlink at a target
@pytest.fixture(scope="module")
def evaluated(small, tmp_path_factory):
    """The small smoke workspace evaluated with one tiny model: an ImageNet-D results database."""
    db = tmp_path_factory.mktemp("door") / "r.duckdb"
    run_cli("eval", small, "--model", "tiny:resnet", "--db", db, "--quiet", check=0)
    return db


def test_report_never_writes_through_a_symlink_and_publishes_all_or_nothing(evaluated, tmp_path):
    out = tmp_path / "rep"
    run_cli("report", "imagenet-d", "--db", evaluated, "--out", out, check=0)
    before = digest(out)
    secret = _outside(tmp_path)
    for name in ("report.md", "report.json"):  # (a): the symlink is refused, neither followed nor replaced
        os.replace(out / name, tmp_path / "kept")
        (out / name).symlink_to(secret)
        r = run_cli("report", "imagenet-d", "--db", evaluated, "--out", out)
        one_line_error(r, out / name, "symlink", code=1)
        assert secret.read_text() == "the user's own file\n" and (out / name).is_symlink()
        (out / name).unlink()
        os.replace(tmp_path / "kept", out / name)
    # (c): report.json cannot be replaced (a folder there): report.md is not replaced either
    (out / "report.md").write_text("the last report\n")
    os.replace(out / "report.json", tmp_path / "kept")
    (out / "report.json").mkdir()
    r = run_cli("report", "imagenet-d", "--db", evaluated, "--out", out)
    one_line_error(r, out / "report.json", "folder", code=1)
    assert (out / "report.md").read_text() == "the last report\n"
    assert not [p for p in out.iterdir() if p.name.startswith(".gensets-stage")]
    (out / "report.json").rmdir()
    os.replace(tmp_path / "kept", out / "report.json")
    run_cli("report", "imagenet-d", "--db", evaluated, "--out", out, check=0)
    assert digest(out) == before


@pytest.mark.slow  # a smoke build of the table's own config
def test_reproduce_never_writes_through_a_symlink(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / MARKER).write_text("gensets reproduce imagenet-d-table\n")
    (out / "report").mkdir()
    (out / "report" / MARKER).write_text("gensets report imagenet-d\n")
    secret = _outside(tmp_path)
    (out / "report" / "report.md").symlink_to(secret)
    (out / "reproduce.md").symlink_to(secret)
    r = run_cli("reproduce", "imagenet-d-table", "--smoke", "--out", out, "--quiet")
    one_line_error(r, "symlink", code=1)
    assert secret.read_text() == "the user's own file\n"
    assert (out / "reproduce.md").is_symlink() and (out / "report" / "report.md").is_symlink()
    assert not (out / "reproduce.json").exists()  # the set: neither file


@pytest.mark.parametrize("command", [
    ["query", "--db", "{db}", "SELECT 1 AS x", "--output", "{target}"],
    ["leaderboard", "--db", "{db}", "--output", "{target}"],
])
def test_output_file_is_never_written_through_a_symlink(command, evaluated, tmp_path):
    secret = _outside(tmp_path)
    target = tmp_path / "o.txt"
    target.symlink_to(secret)
    r = run_cli(*[str(a).format(db=evaluated, target=target) for a in command])
    one_line_error(r, target, "symlink", code=1)
    assert secret.read_text() == "the user's own file\n" and target.is_symlink()


@pytest.mark.parametrize("fmt", ["csv", "label-studio"])
def test_review_export_is_never_written_through_a_symlink(fmt, small, tmp_path):
    secret = _outside(tmp_path)
    target = tmp_path / "export.json"
    target.symlink_to(secret)
    r = run_cli("review", "export", small, "--format", fmt, "--file", target)
    one_line_error(r, target, "symlink", code=1)
    assert secret.read_text() == "the user's own file\n" and target.is_symlink()


def _copy(small, tmp_path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(small, ws, symlinks=True)
    return ws


def test_card_never_writes_through_a_symlink_and_publishes_all_or_nothing(small, tmp_path):
    ws = _copy(small, tmp_path)
    secret = _outside(tmp_path)
    readme = ws / "dataset" / "README.md"
    card = readme.read_bytes()
    readme.unlink()
    readme.symlink_to(secret)
    r = run_cli("card", ws)
    one_line_error(r, readme, "symlink", code=1)
    assert secret.read_text() == "the user's own file\n" and readme.is_symlink()
    # (c): a figure that cannot be replaced (a folder there): README.md stays as it was
    readme.unlink()
    readme.write_bytes(b"the last card\n")
    grid = ws / "dataset" / "figures" / "samples.png"
    grid.unlink()
    grid.mkdir()
    r = run_cli("card", ws)
    one_line_error(r, grid, "folder", code=1)
    assert readme.read_bytes() == b"the last card\n"
    grid.rmdir()
    run_cli("card", ws, check=0)
    assert readme.read_bytes() == card


@pytest.mark.parametrize("command", [["finalize", "{ws}", "--include-pending"], ["verify", "{ws}", "--rebuild", "1"]])
def test_an_environment_record_symlinked_out_is_not_read(command, small, tmp_path):
    ws = _copy(small, tmp_path)
    secret = tmp_path / "outside" / "credentials.json"
    secret.parent.mkdir()
    secret.write_text('{"aws_secret_access_key": "hunter2"}\n')
    env = sorted((ws / "environments").glob("*.json"))[0]
    env.unlink()
    env.symlink_to(secret)
    before = digest(ws / "dataset")
    r = run_cli(*[a.format(ws=ws) for a in command])
    err = one_line_error(r, env.name, "out of", code=1)
    assert "hunter2" not in r.stdout + err
    assert digest(ws / "dataset") == before
