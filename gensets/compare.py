"""How a gensets number is set beside a paper's: one function, :func:`compare`, from two typed definitions.

A published number is a typed quantity (its schema: :class:`gensets.schemas.PublishedNumber`, every entry of
``gensets/data/<paper>/published.json``): *what* it measures (:data:`QUANTITIES`, with the protocol whose top-1 it
is), *how* it was aggregated (:data:`AGGREGATIONS`), *on which images* (:data:`POPULATIONS`), on all classes or a
subset, of *which model* (an exact checkpoint, or only a family), *how precisely* it is printed (exact to k digits,
or approximate), its ``n`` where the paper gives one, and its source. gensets' number beside it carries the same
fields from its run (:class:`Measured`), and whether its models had random weights.

:func:`compare` either refuses (``not comparable: <the fields that differ>``: no difference is printed) or takes the
one test that fits (:data:`TESTS`), and names it in every output:

- the paper names only a model *family*: both numbers and the difference, never judged;
- an *approximate* published number ("about 60%"): never judged ("reported as about 60%");
- the *same images* (the paper's own, re-scored): the difference only. Both numbers share the images' sampling
  noise, so an interval over images says nothing about a systematic difference;
- *independent images* (a rebuild of the paper's generation against a paper number with its ``n``): a 95% interval
  for the difference from both sides' standard errors (binomial, n from the paper); ``consistent`` when it holds
  0, else ``differs``;
- *several builds* (``--seeds N``): a 95% prediction interval for one more build (Student's t over the N builds'
  numbers: the paper's number is one build of the same process); ``consistent`` when the published number lies in
  it. Never the range of the builds (which a faithful reproduction leaves half the time at N = 3).

No other module decides a verdict (tests/test_compare.py: an AST check). Calibration, by simulation in the same
test (and README, "How gensets compares with a paper"): the interval tests call faithful reproductions consistent
93-97% of the time and flag a systematic difference of 3 standard errors at least 80% of the time (the
prediction interval from 20 builds up; its power with fewer builds is :func:`seeds_power`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

# what a number measures (a published entry's ``quantity``; ``protocol`` names the gensets protocol whose top-1 it is)
QUANTITIES = {
    "top1": "top-1 accuracy: the fraction of images (two-way: of counted answers) whose first prediction is right",
    "top5": "top-5 accuracy: the fraction whose first five predictions hold the true class",
    "accuracy-drop": "ImageNet accuracy minus ImageNet-D accuracy, the same model under the same protocol and classes",
    "vqa-accuracy": "the fraction of binary questions answered right",
    "cler": "GenBench's CLER score: a CLIP classifier whose class centres are the generated images, on real test images",
    "failure-rate": "the fraction of generated images the classifier under test gets wrong",
    "target-rate": "the fraction of generated images the classifier under test calls one given wrong class",
    "cost-per-image": "what one image costs to acquire, in US dollars",
    "count": "a count (classes, images) of a dataset",
}
AGGREGATIONS = {
    "pooled-images": "every image (or counted answer) once, pooled over subsets",
    "mean-of-subsets": "each subset's number, then their mean",
    "mean-of-categories": "each category's accuracy, then their mean",
    "pooled-questions": "every question once",
    "dataset-metric": "each dataset's own metric over its test images (GenBench's Table 4)",
    "unknown": "the paper does not say, and its number rules out the obvious readings",
    "none": "not an average (a cost, a count)",
}
POPULATIONS = {  # the published side's images
    "paper-images": "images the paper published (a released set, collected images): scoring them again is the same "
                    "images",
    "paper-generation": "images (or training sets) the paper generated and did not publish: a rebuild draws others "
                        "from the same process",
    "none": "not a measurement over images",
}
OUR_POPULATIONS = {  # gensets' side
    "paper-images": "the paper's own images",
    "rebuild": "a gensets build of the paper's generation (its generator, prompts and selection)",
    "other": "images that are neither: another generator, a smoke build",
}
TESTS = {
    "not run": "gensets ran no model that the published number can be set beside: the published number alone",
    "not comparable": "a field of the two definitions differs (named): both numbers shown, no difference, no verdict",
    "model family": "the paper names only the model's family: shown with the difference, never judged",
    "approximate": "the paper gives the number as approximate: shown with the difference, never judged",
    "same images": "the same images scored again: the difference only, no interval verdict (both numbers share the "
                   "images' sampling noise)",
    "independent images": "a 95% interval for the difference, d +- 1.96 sqrt(p1(1-p1)/n1 + p2(1-p2)/n2), n from the "
                          "paper; consistent when it holds 0",
    "independent images, no n": "independent images but no standard error on one side (the paper gives no n, or the "
                                "quantity is not a fraction of n): the difference only",
    "one build": "a rebuild of the paper's generation, one build: its number varies with the generation, which one "
                 "build cannot measure; the difference only (--seeds N: a prediction interval)",
    "prediction interval over seeds": "a 95% prediction interval for one more build, mean +- t(0.975, N-1) s "
                                      "sqrt(1 + 1/N) over the N builds; consistent when the published number lies in it",
}
VERDICTS = ("consistent", "differs")
# a published quantity gensets' run has only a part of: what it needs, said in place of the quantities
NEEDS = {("accuracy-drop", "top1"): "drop: needs ImageNet accuracy"}
PROPORTIONS = ("top1", "top5", "vqa-accuracy", "failure-rate", "target-rate")  # a fraction of n items: binomial SE
Z = 1.959963984540054  # the 97.5% normal quantile
POWERED_SEEDS = 20  # builds from which the prediction interval flags a 3-standard-error difference >= 80% of the time


@dataclass(frozen=True)
class Measured:
    """gensets' side of a comparison: its number and the same fields as a published entry, from its run.

    ``model``: the gensets model spec; ``family``: the paper family a paper folder declares it to be (a family-level
    published model is compared only with a model of that family); ``random_weights``: any model behind the number
    has random weights (``tiny:``, ``random:``). ``n``: the images (or counted answers, questions) behind it and
    ``se`` its standard error where known (else binomial from ``value`` and ``n`` for a proportion). ``seeds``:
    the number of every build (``--seeds N``), this one's first."""

    value: float | None
    quantity: str
    aggregation: str
    population: str
    classes: str | tuple[str, ...] = "all"
    protocol: str | None = None
    model: str | None = None
    family: str | None = None
    random_weights: bool = False
    n: int | None = None
    se: float | None = None
    seeds: tuple[float, ...] = ()
    note: str | None = None  # why gensets has no number of this quantity (shown in place of a difference)
    # fields of the published definition its caller knows gensets' number differs in, each "field (reason)" (e.g.
    # GenBench's "shots (K=3 vs 20)"): not comparable
    differs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comparison:
    test: str  # a key of TESTS
    fields: tuple[str, ...] = ()  # not comparable: the fields that differ, each with its reason
    difference: float | None = None  # gensets - published
    interval: tuple[float, float] | None = None  # the test's 95% interval (of the difference, or of one more build)
    interval_of: str | None = None  # "difference" or "one more build"
    verdict: str | None = None  # one of VERDICTS, or None: the test gives none
    text: str = ""  # the cell every output shows

    def as_dict(self) -> dict:
        return {"test": self.test, "fields": list(self.fields), "difference": self.difference,
                "interval": None if self.interval is None else list(self.interval), "interval_of": self.interval_of,
                "verdict": self.verdict, "text": self.text}


def checkpoint_id(spec: str) -> str:
    """A model spec as a checkpoint name, to match a published ``model.checkpoints`` entry: lower case, without a
    commit pin (``@<sha>``) and without the loader's prefix (``hf:``, ``diffusers:``, ``timm:hf-hub:``,
    ``open_clip:hf-hub:``); torchvision and open_clip tags keep theirs (``torchvision:resnet50@imagenet1k_v1``)."""
    s = spec.strip()
    head, at, rev = s.rpartition("@")
    if at and len(rev) == 40 and all(c in "0123456789abcdef" for c in rev.lower()):
        s = head
    for prefix in ("timm:hf-hub:", "open_clip:hf-hub:", "hf:", "diffusers:"):
        if s.startswith(prefix):
            s = s[len(prefix):]
            break
    return s.lower()


def _pct(v: float) -> str:
    return f"{100 * v:.2f}".rstrip("0").rstrip(".")


def _classes(c) -> str:
    return "all" if c == "all" else f"{len(c)} of them"


def _differences(pub: Mapping, ours: Measured) -> list[str]:
    """The fields of the two definitions that differ, each named with the two values."""
    out = []
    assumed = set(pub.get("assumed") or ())  # left open by the paper: another reading is not another quantity
    if pub["quantity"] != ours.quantity:
        needs = NEEDS.get((pub["quantity"], ours.quantity))
        out.append(f"quantity ({needs or pub['quantity'] + ' vs ' + ours.quantity})")
    if pub.get("protocol") and ours.protocol and pub["protocol"] != ours.protocol:
        out.append(f"protocol ({pub['protocol']} vs {ours.protocol})")
    if pub["aggregation"] != ours.aggregation and "aggregation" not in assumed:
        out.append(f"aggregation ({pub['aggregation']} vs {ours.aggregation})")
    if pub["classes"] != ours.classes and (pub["classes"] == "all" or ours.classes == "all"
                                           or sorted(pub["classes"]) != sorted(ours.classes)):
        out.append(f"classes ({_classes(pub['classes'])} vs {_classes(ours.classes)})")
    if ours.population == "other" or (pub["population"], ours.population) == ("paper-generation", "paper-images"):
        out.append(f"population ({pub['population']} vs {ours.population}: {OUR_POPULATIONS.get(ours.population, '')})")
    out += list(ours.differs)
    model = pub.get("model")
    if ours.random_weights:
        out.append("model (random weights)")
    elif model is not None:
        if model["level"] == "checkpoint":
            if ours.model is None or checkpoint_id(ours.model) not in {c.lower() for c in model.get("checkpoints") or ()}:
                out.append(f"model (other model: the paper's is {model['name']})")
        elif ours.family != model["name"]:
            out.append(f"model (other model: the paper's is {model['name']})")
    return out


def compare(published: Mapping, ours: Measured) -> Comparison:
    """The comparison of gensets' number ``ours`` with the published entry ``published`` (a dict the schema
    :class:`gensets.schemas.PublishedNumber` accepts, its value a fraction): the test that fits (module
    docstring), the difference (gensets - published) where the two are the same quantity, and the verdict of the
    tests that give one. A field the paper leaves open (``assumed``) is not compared; the text says so."""
    out = _compare(published, ours)
    open_ = [f for f in published.get("assumed") or () if f == "aggregation" and published[f] != ours.aggregation]
    if out.test != "not comparable" and open_:
        return replace(out, text=f"{out.text} (the paper leaves the aggregation open: gensets' reading is "
                                 f"{published['aggregation']}, this number is {ours.aggregation})")
    return out


def _compare(published: Mapping, ours: Measured) -> Comparison:
    differ = _differences(published, ours)
    if differ:
        return Comparison("not comparable", tuple(differ), text="not comparable: " + "; ".join(differ))
    p = float(published["value"])
    if ours.value is None:
        return Comparison("not comparable", ("gensets has no number",),
                          text="not comparable: " + (ours.note or "gensets has no number"))
    d = ours.value - p
    model = published.get("model")
    if model is not None and model["level"] == "family":
        return Comparison("model family", difference=d,
                          text=f"model family: the paper names only {model['name']}; shown, never judged")
    if published["precision"]["kind"] == "approximate":
        return Comparison("approximate", difference=d, text=f"approximate: reported as about {_pct(p)}%; never judged")
    if published["population"] == "paper-images" and ours.population == "paper-images":
        return Comparison("same images", difference=d, text="same images: the difference only, no interval verdict")
    if len(ours.seeds) >= 2:
        lo, hi, ok = prediction_interval(ours.seeds, p)
        n = len(ours.seeds)
        weak = f"; {n} builds flag a 3-SE difference {100 * seeds_power(n):.0f}% of the time" if n < POWERED_SEEDS else ""
        verdict = VERDICTS[0] if ok else VERDICTS[1]
        return Comparison("prediction interval over seeds", difference=d, interval=(lo, hi),
                          interval_of="one more build", verdict=verdict,
                          text=f"{verdict} (95% prediction interval of one more build over {n} seeds: "
                               f"[{_pct(lo)}, {_pct(hi)}]{weak})")
    if published["population"] == "paper-generation":
        return Comparison("one build", difference=d, text="one build: the difference only (--seeds N for a verdict)")
    se_p = binomial_se(p, published.get("n")) if published["quantity"] in PROPORTIONS else None
    se_o = ours.se if ours.se is not None else (binomial_se(ours.value, ours.n)
                                                if ours.quantity in PROPORTIONS else None)
    if se_p is None or se_o is None:
        return Comparison("independent images, no n", difference=d,
                          text="independent images: the difference only (no standard error: "
                               + ("the paper gives no n)" if se_p is None else "gensets' has none)"))
    lo, hi, ok = independent_interval(d, se_o, se_p)
    verdict = VERDICTS[0] if ok else VERDICTS[1]
    return Comparison("independent images", difference=d, interval=(float(lo), float(hi)), interval_of="difference",
                      verdict=verdict,
                      text=f"{verdict} (independent images: 95% interval of the difference [{_pct(lo)}, {_pct(hi)}])")


def not_run(what: str = "gensets ran no model of this kind") -> Comparison:
    """The comparison of a published number beside which gensets has no run: none."""
    return Comparison("not run", text=f"not run: {what}")


def binomial_se(p: float | None, n: int | None) -> float | None:
    """The standard error of a fraction ``p`` of ``n`` items, sqrt(p (1 - p) / n); None without n."""
    if p is None or not n:
        return None
    return math.sqrt(max(p * (1 - p), 0.0) / n)


def independent_interval(d, se_a, se_b):
    """``(lo, hi, consistent)`` of the 95% interval d +- 1.96 sqrt(se_a^2 + se_b^2) for a difference of two
    independent estimates (numbers or numpy arrays, elementwise)."""
    half = Z * (se_a ** 2 + se_b ** 2) ** 0.5
    lo, hi = d - half, d + half
    return lo, hi, (lo <= 0) & (0 <= hi)


def t_quantile(df: int) -> float:
    """Student's t 97.5% quantile with ``df`` degrees of freedom."""
    from scipy.stats import t  # lazy: scipy, only where builds are compared

    return float(t.ppf(0.975, df))


def prediction_interval(values: Sequence[float], published, axis: int = -1):
    """``(lo, hi, consistent)``: the 95% prediction interval of one more build, mean +- t(0.975, N-1) s
    sqrt(1 + 1/N) over the N builds' ``values`` (along ``axis`` of an array, elementwise), and whether
    ``published`` lies in it."""
    import numpy as np  # lazy: numpy, off the CLI's path

    v = np.asarray(values, dtype=float)
    n = v.shape[axis]
    if n < 2:
        raise ValueError(f"a prediction interval needs two builds or more, got {n}")
    half = t_quantile(n - 1) * v.std(axis=axis, ddof=1) * math.sqrt(1 + 1 / n)
    mean = v.mean(axis=axis)
    lo, hi = mean - half, mean + half
    ok = (lo <= published) & (published <= hi)
    if np.ndim(lo) == 0:
        return float(lo), float(hi), bool(ok)
    return lo, hi, ok


def seeds_power(n: int, shift: float = 3.0) -> float:
    """How often the prediction interval over ``n`` builds flags a published number ``shift`` standard errors (of
    published - mean, sigma sqrt(1 + 1/n)) away: a noncentral t's tails beyond t(0.975, n - 1)."""
    from scipy.stats import nct  # lazy: scipy

    t = t_quantile(n - 1)
    return float(nct.sf(t, n - 1, shift) + nct.cdf(-t, n - 1, shift))


def calibration(draws: int = 4000, seed: int = 0, builds: int = POWERED_SEEDS) -> dict:
    """The interval tests' calibration by simulation (README: "How gensets compares with a paper"): for each, the
    fraction of faithful reproductions (drawn from the null) called consistent, and of reproductions with a
    systematic difference of 3 standard errors flagged. Independent images: two binomial fractions at p = 0.5 and
    p = 0.8, n = 4835 and 1000; prediction interval: ``builds`` normal builds and one more (the paper's)."""
    import numpy as np  # lazy: numpy

    rng = np.random.default_rng(seed)
    out: dict = {"draws": draws, "independent images": {}, "prediction interval over seeds": {"builds": builds}}
    for p, n_a, n_b in ((0.5, 4835, 4835), (0.8, 1000, 4835)):
        se = math.sqrt(p * (1 - p) / n_a + p * (1 - p) / n_b)
        res = {}
        for shift, key in ((0.0, "consistent under the null"), (3 * se, "flagged at 3 SE")):
            a = rng.binomial(n_a, p + shift, draws) / n_a
            b = rng.binomial(n_b, p, draws) / n_b
            _, _, ok = independent_interval(a - b, np.sqrt(a * (1 - a) / n_a), np.sqrt(b * (1 - b) / n_b))
            res[key] = float(ok.mean() if shift == 0 else 1 - ok.mean())
        out["independent images"][f"p={p}, n={n_a} vs {n_b}"] = res
    sigma = 0.01
    se = sigma * math.sqrt(1 + 1 / builds)
    for shift, key in ((0.0, "consistent under the null"), (3 * se, "flagged at 3 SE")):
        ours = rng.normal(0.5, sigma, (draws, builds))
        paper = rng.normal(0.5 + shift, sigma, draws)
        _, _, ok = prediction_interval(ours, paper, axis=1)
        out["prediction interval over seeds"][key] = float(ok.mean() if shift == 0 else 1 - ok.mean())
    out["prediction interval over seeds"]["power by builds"] = {n: round(seeds_power(n), 3) for n in (2, 3, 5, 10, 20)}
    return out
