"""The audit of a generated dataset: near-duplicates within it, copies of test images (contamination) and of
training images (replicas), by exact pixels, perceptual hashes and an image embedding.

hashes (one pure function per fingerprint) -> features (extracted once, cached per image) -> search (nearest
neighbours: exact, near-linear) -> check (options and thresholds, the neighbours, pairs, groups, summary) -> run
(``gensets audit``, finalize's stage: sets opened, figure, state.duckdb's ``audit_neighbours``); sources (what is
read). Below the engine (finalize calls it), above curation, cards and models.
"""
