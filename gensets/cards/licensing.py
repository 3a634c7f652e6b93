"""The card's Licensing section: the dataset's licence checked against each generator's.

A generator's licence is looked up by its Hub model id in a small packaged table (gensets/data/licenses/models.json);
an unknown model is shown as "check the model's licence", never guessed. A licence with use restrictions (the
OpenRAIL family of Stable Diffusion) asks that they go with what is shared; a dataset under a licence that does not
carry them (``license: mit``) conflicts: the card says so and ``gensets finalize`` / ``gensets card`` warn on stderr.
"""

from __future__ import annotations

from ..models.spec import parse_spec
from ..sources.packaged import model_licences
from .markdown import code, table


def licence_of(model_id: str | None) -> dict | None:
    """``{id, name, url, use_restrictions, compatible}`` of a known model id, else None."""
    known = model_licences()
    lid = known["models"].get(model_id or "")
    return {"id": lid, **known["licences"][lid]} if lid else None


def check(dataset_licence: str, generators: list[tuple[str, str | None]]) -> tuple[list[list[str]], list[str]]:
    """Per generator ``(spec, resolved id)``: a table row (spec, licence, verdict), and the one-line conflicts."""
    rows, conflicts = [], []
    for spec, model_id in generators:
        parsed = parse_spec(spec)
        if parsed.is_tiny or parsed.kind == "random":
            rows.append([code(spec, True), "none (built locally, random weights)", "no licence to carry on"])
            continue
        lic = licence_of(model_id or parsed.name) or licence_of(parsed.name)
        if lic is None:
            rows.append([code(spec, True), "unknown to gensets", "check the model's licence"])
        elif lic["use_restrictions"] and dataset_licence not in lic["compatible"]:
            rows.append([code(spec, True), f"[{lic['name']}]({lic['url']}) (`{lic['id']}`)", "**conflicts** (see below)"])
            conflicts.append(f"dataset licence '{dataset_licence}' conflicts with generator {spec.split('@')[0]}'s "
                             f"{lic['name']} ({lic['id']}): its use restrictions must go with the images; license the "
                             f"dataset under {lic['id']} (or 'other', with the restrictions in the card)")
        else:
            rows.append([code(spec, True), f"[{lic['name']}]({lic['url']}) (`{lic['id']}`)", "compatible"])
    return rows, conflicts


def section(dataset_licence: str, generators: list[tuple[str, str | None]], imported: list[str]) -> str:
    """The Licensing section's text."""
    rows, conflicts = check(dataset_licence, generators)
    out = [f"The dataset is declared `{dataset_licence}` (the build config's `license`). Its images are outputs of "
           "the generators below, whose licences may restrict how they are used and shared:"]
    if rows:
        out += ["", table(["generator", "licence", f"with `{dataset_licence}`"], rows)]
    else:
        out += ["", "(no generator: every image was imported)"]
    if imported:
        out += ["", "Imported images (sources " + ", ".join(code(s) for s in sorted(imported)[:8])
                + (f", ... ({len(imported)} in all)" if len(imported) > 8 else "")
                + ") keep their own licences: check them before publishing."]
    for c in conflicts:
        out += ["", f"> **Warning:** {c[0].upper()}{c[1:]}."]
    return "\n".join(out) + "\n"
