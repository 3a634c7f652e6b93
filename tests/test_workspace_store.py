"""One workspace interface over storages: a local folder and every object store scheme are classes of one protocol
(gensets.store.WorkspaceStore), a workspace holds one and calls it, and gensets/workspace.py never asks which."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gensets.errors import GensetsError
from gensets.registry import STORES
from gensets.store import Store, WorkspaceStore, local_root
from gensets.stores.local import LocalFolder
from gensets.workspace import Workspace

WORKSPACE = Path(__file__).resolve().parents[1] / "gensets" / "workspace.py"


def test_every_store_implements_the_whole_protocol():
    classes = {scheme: STORES.get(scheme) for scheme in STORES.names()} | {"folder": LocalFolder}
    assert {"s3", "gs", "memory", "folder"} <= set(classes)
    for scheme, cls in classes.items():
        assert issubclass(cls, WorkspaceStore) and not cls.__abstractmethods__, scheme


def test_a_store_missing_a_step_of_the_protocol_cannot_be_made():
    class Half(WorkspaceStore):
        def url_of(self, rel: str) -> str:
            return rel

    with pytest.raises(TypeError, match="abstract"):
        Half()


def test_a_workspace_holds_the_store_of_its_folder_or_url(tmp_path):
    ws = Workspace(tmp_path / "ws")
    assert isinstance(ws.store, LocalFolder) and not ws.store.remote
    assert ws.root == tmp_path / "ws" and ws.where == str(tmp_path / "ws")
    assert ws.dataset_where == str(tmp_path / "ws" / "dataset") and ws.creates_folder
    url = "memory://bucket/prefix"
    ws = Workspace(url)
    assert isinstance(ws.store, Store) and ws.store.remote and type(ws.store) is STORES.get("memory")
    assert ws.root == local_root(url) and ws.where == url and ws.dataset_where == f"{url}/dataset"
    assert not ws.creates_folder


def test_on_a_folder_the_store_only_steps_change_nothing(tmp_path):
    root = tmp_path / "ws"
    (root / "candidates").mkdir(parents=True)
    (root / "config.yaml").write_text("x: 1\n")
    ws = Workspace(root)
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    assert ws.sync() == 0 and ws.remove_orphans() == [] and ws.marker_indexes is None
    ws.commit(root / "candidates" / "u.tar", {"unit": "u", "shard": "u.tar"})
    ws.check_committed()
    ws.check_lease()
    ws.push_dataset()
    ws.pull_config(fresh=True)
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before
    with pytest.raises(GensetsError, match="no dataset/manifest.json"):
        ws.pull_dataset()


def test_the_workspace_never_asks_which_store_it_has():
    """No `if` or conditional expression in gensets/workspace.py tests the store or the URL-ness of the root: what
    differs is a method of the store."""
    tree = ast.parse(WORKSPACE.read_text(encoding="utf-8"))
    bad = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.If, ast.IfExp, ast.While)):
            inner = {id(c) for x in ast.walk(n.test) for c in ast.iter_child_nodes(x) if isinstance(x, ast.Attribute)}
            # the store itself (``if self.store``, ``store is None``) or what kind it is: not one of its methods called
            if any(isinstance(x, ast.Attribute) and (x.attr == "remote" or x.attr == "store" and id(x) not in inner)
                   or isinstance(x, ast.Name) and x.id in ("store", "is_url") for x in ast.walk(n.test)):
                bad.append(ast.unparse(n.test))
    assert not bad, bad


def test_a_lease_dated_in_the_future_is_stale_past_its_time_to_live(caplog):
    """A lease whose writer's clock ran ahead (or a copied _lock.json) is dated in the future: judged only by
    `now - time > TTL` it never became stale and locked the workspace for good. One dated further ahead than the
    time to live is taken over, with a warning that says why; one dated a little ahead is still a live holder's,
    refused with a line that says how far ahead it is."""
    import json
    import logging
    import os
    import time

    from gensets.errors import Busy
    from gensets.store import LEASE_TTL, LOCK

    store = Store(f"memory://leases-ahead/{os.getpid()}")
    other = {"what": "build", "pid": 4242, "host": "ahead.example"}
    store.write(LOCK, json.dumps({**other, "time": time.time() + 60}).encode())
    with pytest.raises(Busy) as e, store.lease("finalize"):
        pass
    assert "(pid 4242 on ahead.example)" in str(e.value) and "s ahead of this machine's clock" in str(e.value)
    store.write(LOCK, json.dumps({**other, "time": time.time() + 10 * LEASE_TTL}).encode())
    with caplog.at_level(logging.WARNING, logger="gensets"), store.lease("finalize"):
        assert json.loads(store.read(LOCK))["what"] == "finalize"
    said = [r.getMessage() for r in caplog.records if "ahead of this machine's clock" in r.getMessage()]
    assert len(said) == 1 and "taken over as stale" in said[0] and "pid 4242 on ahead.example" in said[0], said
    assert not store.exists(LOCK)
