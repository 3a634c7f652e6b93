"""Exit codes a script can rely on (gensets.errors.EXIT_CODES, the README's table): 2 fix the command, 1 the data
or a step failed, 3 fix the environment and retry, 4 retry once the other process ends, 130 interrupted."""

import shutil

from gensets.errors import EXIT_CODES

from .conftest import ROOT, SMALL, SMOKE, run_cli


def one_line(r, code: int, *needles: str) -> str:
    err = r.stderr.strip()
    assert r.returncode == code, (r.returncode, r.stderr)
    lines = err.splitlines()
    assert "Traceback" not in err and (len(lines) == 1 or lines[0].startswith("usage:")), err  # argparse: usage first
    assert lines[-1].startswith("gensets"), err
    for n in needles:
        assert n in err, (n, err)
    return err


def test_the_table_is_in_the_help_and_the_readme():
    out = run_cli("--help", check=0).stdout
    readme = (ROOT / "README.md").read_text()
    for code, what in EXIT_CODES.items():
        assert f"  {code:<4} {what}" in out
        assert f"| {code} |" in readme


def test_each_class_of_failure_has_its_code(small, tmp_path):
    # 2 usage: argparse's own errors, a malformed config, an unknown model spec, a missing workspace
    one_line(run_cli("build"), 2, "the following arguments are required")
    bad = tmp_path / "bad.yaml"
    bad.write_text("builder: imagenet-d\nseed: [1\n")
    one_line(run_cli("build", bad, "--out", tmp_path / "w"), 2, str(bad))
    one_line(run_cli("eval", small, "--model", "nokind:x", "--db", tmp_path / "r.duckdb"), 2, "unknown kind")
    one_line(run_cli("verify", tmp_path / "nowhere"), 2, "nowhere")
    # 1 data: a shard whose bytes are not the manifest's
    ws = tmp_path / "ws"
    shutil.copytree(small, ws)
    shard = sorted((ws / "dataset").rglob("*.tar"))[0]
    data = bytearray(shard.read_bytes())
    data[700] ^= 0xFF
    shard.write_bytes(bytes(data))
    r = run_cli("verify", ws)  # verify lists every problem, then a summary line
    assert r.returncode == 1 and shard.name in r.stdout + r.stderr and "Traceback" not in r.stderr, r.stderr
    # 3 environment: a Hub model offline and not cached; publishing offline
    one_line(run_cli("eval", small, "--model", "timm:resnet50.a1_in1k", "--db", tmp_path / "r.duckdb"), 3,
             "not available", "offline")
    one_line(run_cli("publish", small, "--repo", "org/name"), 3, "offline")
    # 4 busy: another process holds the workspace's lock
    from gensets.workspace import Workspace

    with Workspace(ws).lock("build"):
        one_line(run_cli("finalize", ws), 4, "another gensets build", "is running on this workspace")
        one_line(run_cli("build", SMOKE, "--out", ws, "--quiet", *SMALL), 4, "another gensets build")


def test_a_misspelt_name_gets_the_closest_ones(tmp_path):
    """'did you mean' for class names, config keys, model kinds and names; errors name the user's input, not a
    file inside the package."""
    from gensets.errors import did_you_mean

    assert did_you_mean("backpak", ["backpack", "bag", "mug"]) == " (did you mean 'backpack'?)"
    assert did_you_mean("zebra", ["backpack", "mug"]) == ""
    cases = [(("--set", "classes=[backpak]"), "unknown class 'backpak' (did you mean 'backpack'?)"),
             (("--set", "filtr.top_k=2"), "filtr: unknown key (did you mean 'filter'?)"),
             (("--set", "generator.model=tiny:sdd"), "unknown tiny model 'sdd' (did you mean 'sd'?)"),
             (("--set", "generator.model=diffuser:x/y"), "unknown kind 'diffuser' (did you mean 'diffusers'?)")]
    for args, want in cases:
        r = run_cli("build", SMOKE, "--out", tmp_path / "ws", *args)
        err = one_line(r, 2, want)
        assert "gensets/data" not in err and "site-packages" not in err, err


def test_each_model_loaded_is_announced(small, tmp_path):
    """A line per model as it starts loading (on a terminal; GENSETS_ANNOUNCE=always here): spec and source."""
    r = run_cli("eval", small, "--model", "tiny:resnet", "--db", tmp_path / "r.duckdb", "--quiet",
                env={"GENSETS_ANNOUNCE": "always"}, check=0)
    lines = [line for line in r.stderr.splitlines() if line.startswith("loading ")]
    assert len(lines) == 1 and lines[0].startswith("loading tiny:resnet: from built locally ("), r.stderr
    quiet = run_cli("eval", small, "--model", "tiny:resnet", "--db", tmp_path / "r2.duckdb", "--quiet", check=0)
    assert "loading " not in quiet.stderr  # not a terminal: nothing


