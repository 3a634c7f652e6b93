#!/usr/bin/env python
"""Derive gensets/data/wordnet/imagenet_superclasses.json: the WordNet 3.0 superclass of each ImageNet-1k class.

    python scripts/imagenet_superclasses.py WORDNET_3.0_DICT [--out gensets/data/wordnet/imagenet_superclasses.json]

WORDNET_3.0_DICT is the ``dict/`` folder of Princeton's WordNet 3.0 database (its ``data.noun`` is read; the
packaged file was made from a copy whose sha256 is recorded in the output). The 1000 class wnids, in class-index
order, are timm's ``timm/data/_info/imagenet_synsets.txt`` (installed with timm); class names are gensets'
(``gensets.labels.imagenet.imagenet_names``). An ImageNet wnid ``nXXXXXXXX`` is the WordNet 3.0 noun synset at
offset XXXXXXXX.

The rule: the superclass is the class synset's *grandparent*, a hypernym of one of its hypernyms (``@`` or
``@i`` pointers of data.noun). When WordNet gives several grandparents (86 of the 1000 classes), they are
listed in data.noun's order (each hypernym in turn, then each of its hypernyms) and the *last* is taken:
that reproduces Wiles et al.'s example "Persian cat (domestic animal)" (domestic cat's hypernyms are "cat"
and then "domestic animal"); their other example "ladybug (insect)" has one grandparent. Every candidate is
kept in the output (``grandparents``), and a build config overrides any label (``superclasses:``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RULE = ("the WordNet 3.0 grandparent of the class synset (a hypernym of a hypernym, @ and @i pointers); "
        "with several, the last in data.noun's order (each hypernym in turn, then each of its hypernyms)")


def read_nouns(data_noun: Path) -> dict[str, tuple[list[str], list[str]]]:
    """offset -> (lemmas, hypernym offsets) of every noun synset of a WordNet data.noun file."""
    out = {}
    for line in data_noun.read_text(encoding="latin-1").splitlines():
        if line.startswith("  "):  # the licence header
            continue
        f = line.split(" | ")[0].split()
        n_words = int(f[3], 16)
        lemmas = [f[4 + 2 * i] for i in range(n_words)]
        at = 4 + 2 * n_words
        pointers = [f[at + 1 + 4 * k : at + 5 + 4 * k] for k in range(int(f[at]))]
        out[f[0]] = (lemmas, [p[1] for p in pointers if p[0] in ("@", "@i") and p[2] == "n"])
    return out


def grandparents(nouns: dict, offset: str) -> list[str]:
    out: list[str] = []
    for parent in nouns[offset][1]:
        for g in nouns[parent][1]:
            if g not in out:
                out.append(g)
    return out


def main(argv=None) -> int:
    import timm.data

    from gensets.labels.imagenet import imagenet_names

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("wordnet_dict", type=Path, help="WordNet 3.0's dict/ folder (holds data.noun)")
    p.add_argument("--out", type=Path, default=ROOT / "gensets" / "data" / "wordnet" / "imagenet_superclasses.json")
    args = p.parse_args(argv)
    data_noun = args.wordnet_dict / "data.noun"
    nouns = read_nouns(data_noun)
    wnids = (Path(timm.data.__file__).parent / "_info" / "imagenet_synsets.txt").read_text().split()
    names = imagenet_names()
    assert len(wnids) == len(names) == 1000 and wnids == sorted(wnids)

    def name(offset: str) -> str:
        return nouns[offset][0][0].replace("_", " ")

    rows = []
    for index, (wnid, cls) in enumerate(zip(wnids, names, strict=True)):
        gps = grandparents(nouns, wnid[1:])
        rows.append({"index": index, "wnid": wnid, "name": cls, "superclass": name(gps[-1]),
                     "superclass_wnid": f"n{gps[-1]}", "grandparents": [name(g) for g in gps]})
    header = {
        "source": "WordNet 3.0 (Princeton University), dict/data.noun; ImageNet-1k wnids in class-index order "
                  "from timm's imagenet_synsets.txt; made by scripts/imagenet_superclasses.py",
        "licence": "WordNet 3.0 licence (Princeton University): see LICENSE beside this file",
        "wordnet_data_noun_sha256": hashlib.sha256(data_noun.read_bytes()).hexdigest(),
        "rule": RULE,
    }
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in header.items()] + [' "classes": [']
    lines += [f"  {json.dumps(r, ensure_ascii=False)}{',' if i < len(rows) - 1 else ''}" for i, r in enumerate(rows)]
    lines += [" ]", "}"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    several = sum(len(r["grandparents"]) > 1 for r in rows)
    print(f"{args.out}: {len(rows)} classes ({several} with several grandparents)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
