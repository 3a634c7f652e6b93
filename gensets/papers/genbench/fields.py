"""What a GenBench sample records beside the common provenance (its fields) and its key: below every other module
of the package (the builder, the baselines and the report read them)."""

from __future__ import annotations

from ...records import provenance_of, slug

NAME = "genbench"

# the provenance fields GenBench adds to the common provenance (records.schema): the strategy as the config names
# it, and how the prompt was made: the variant of readings, the prompt source (ST, DT, CE), the template, the
# seeded draw from the strategy's prompt pool, a seq2seq expansion (CE), an init image and where it came from (RA)
PROMPTING = [("variant", "string"), ("prompt_source", "string"), ("template", "string"), ("draw_seed", "int64"),
             ("expansion_model", "string"), ("expansion_revision", "string"), ("expansion_input", "string"),
             ("expansion_seed", "int64"), ("init_image", "string"), ("init_image_sha256", "string"),
             ("strength", "float64"), ("reference_source", "string"), ("allow_dataset_split", "bool"),
             ("token", "string"), ("embedding", "string"), ("embedding_sha256", "string")]
# the data types that are not generated (baselines.py: original, retrieval): where each image came from
DATA = [("type", "string"), ("item", "string"), ("sha256", "string"), ("caption", "string"), ("query", "string"),
        ("score", "float64"), ("draw_seed", "int64")]
FIELD_DOCS = {
    "strategy": "the prompt strategy (or data type) as the config names it",
    "prompting": "how the prompt was made: variant of readings, prompt source, template, seeded draw, expansion "
                 "model (CE), init image (RA), textual-inversion token (TI)",
    "data": "for the data types that are not generated (original, retrieval): where the image came from",
}
FIELDS = (("strategy", "string"), ("prompting", ("struct", PROMPTING)), ("data", ("struct", DATA)))


def key_of(p: dict, i: int) -> str:
    """Shot ``i``'s sample key in unit payload ``p``: the shot index last, so a K-shot subset is ``shot < K``."""
    return f"{slug(p['strategy'])}_{p['label_index']:04d}_{slug(p['class'])}_{i:04d}"


def shot_of(key: str) -> int:
    """A GenBench sample's shot index: the last part of its key (:func:`key_of`; ``st_0000_airplane_0003`` -> 3)."""
    return int(key.rsplit("_", 1)[1])


def provenance(**values) -> dict:
    """A GenBench sample's complete provenance (as ``GenBenchBuilder.provenance``): the common fields and FIELDS."""
    return provenance_of(FIELDS, builder=NAME, **values)
