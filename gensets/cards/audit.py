"""The card's "Duplicates and contamination" section, from the audit finalize recorded in manifest.json (``audit``):
what was checked (methods, thresholds and their sources, the embedding model, the references), the images flagged
per config and reference, the closest pairs and their figure, and the near-duplicates left out."""

from __future__ import annotations

from .markdown import code, table, text

_METHOD = {"exact": "exact pixels", "phash": "pHash", "dhash": "dHash", "embedding": "embedding"}


def _c(value) -> str:
    return code(value, True)  # in a table cell


def _threshold(name: str, t: dict) -> list:
    if name == "exact":
        return ["exact pixels", "identical", text(t["source"])]
    if name == "mirror":
        return ["mirror (left-right flip)", "on" if t["on"] else "off", text(t["source"])]
    if name == "embedding":
        return [f"embedding {_c(t['model'])}", f"cosine >= {t['cosine_at_least']:g}", text(t["source"])]
    return [_METHOD[name], f"Hamming <= {t['hamming_at_most']} of 64 bits", text(t["source"])]


def _value(method: str, v) -> str:
    return "exact" if method == "exact" else f"{_METHOD[method]} {v:g}" if method == "embedding" \
        else f"{_METHOD[method]} {v}"


def section(manifest: dict) -> str:
    """The section (empty when the dataset was finalized without the audit)."""
    a = manifest.get("audit")
    if not a:
        return ""
    methods = a["methods"]
    refs = a["references"]
    out = ["\n## Duplicates and contamination\n",
           "Every image was compared with every other image of this dataset (`self`: near-duplicates, which inflate "
           "its size and narrow every interval computed on it) and with each reference set (a copy of a test image "
           "inflates scores measured on that test set; a copy of a training image is a replica), by "
           + ", ".join(_METHOD[m] for m in methods) + " (`gensets audit`; each sample's `json.audit` names its "
           "nearest neighbours).\n",
           table(["check", "a pair when", "source of the threshold"],
                 [_threshold(n, a["thresholds"][n]) for n in ("exact", "phash", "dhash", "mirror", "embedding")
                  if n in a["thresholds"]]), ""]
    if a.get("embedding"):
        e = a["embedding"]
        out.append(f"Embedding: {code(e['spec'])} (weights {code(e['id'])}), searched "
                   f"{'exactly (every pair)' if e['search'] == 'exact' else 'with an HNSW index (approximate)'}.\n")
    out.append(table(["reference", "source", "images"],
                     [[_c(r["name"]), text(r["source"]) if r["name"] != "self" else "this dataset", r["images"]]
                      for r in refs]
                     + [[_c(s["name"]), text(s["source"]), f"not checked: {text(s['why'])}"]
                        for s in a.get("skipped", [])]))
    out += ["", "Images with a neighbour within a threshold, per config and reference (by method):", "",
            table(["config", "reference", "images", "flagged", *[_METHOD[m] for m in methods]],
                  [[text(str(c["config"])), _c(c["reference"]), c["images"], c["flagged"], *[c[m] for m in methods]]
                   for c in a["counts"]])]
    closest = a["pairs"]["closest"]
    if closest:
        out += ["", f"The closest pairs ({len(closest)} of {a['pairs']['total']}):", "",
                table(["image", "config", "reference", "neighbour", "distances"],
                      [[_c(p["key"]), text(str(p["config"])), _c(p["reference"]), _c(p["neighbour"]),
                        ", ".join(_value(m, v) for m, v in p["methods"].items())] for p in closest])]
    else:
        out += ["", "No pair is within the thresholds."]
    if a.get("figure"):
        out += ["", f"![The closest pairs: each image beside its neighbour]({a['figure']})"]
    d = a.get("dropped")
    if d is not None:
        out += ["", f"Near-duplicates left out (`finalize --drop near-duplicates`): {d['images']} image(s); of each "
                "group the image reviewed first is kept, else the first by key."]
        if d["groups"]:
            out += ["", table(["kept", "why", "left out"],
                              [[_c(g["kept"]), g["why"], ", ".join(_c(k) for k in g["dropped"])]
                               for g in d["groups"][:20]])]
            if len(d["groups"]) > 20:
                out.append(f"\n({len(d['groups']) - 20} more groups: manifest.json's `audit.dropped`.)")
    return "\n".join(out) + "\n"
