"""Ingest: a workspace's committed candidate shards into state.duckdb (idempotent), the stage between a build's
units and review: run at the end of every build (rank 0) and again by ``finalize`` before it reads the database."""

from __future__ import annotations

from ..curation import queue, state
from ..workspace import Workspace


def ingest(ws: Workspace) -> int:
    """Load committed candidate shards into state.duckdb (idempotent), with where each image lies and the
    review page's tables, so that ``gensets review serve`` starts at once. Returns the samples added."""
    builder, _ = ws.load()
    con = state.connect(ws.state_path)
    try:
        added = state.ingest(con, ws.manifest().iter_rows(), ws.candidate,
                             builder.config_of, initial_status="pending" if builder.needs_review else "accepted",
                             index_of=ws.marker_indexes)
        state.index_images(con, ws.candidate)  # a database from before ``images``
        queue.ensure(con)
        return added
    finally:
        con.close()
