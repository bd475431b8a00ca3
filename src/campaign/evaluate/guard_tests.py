"""A guard as a test: is the change of a metric shown to break its bound, with Holm's correction over the guards?

A guard `metric op threshold` holds when delta = metric(candidate) - metric(baseline) op threshold. Its test
takes "the guard holds" as the null hypothesis and asks whether the data show it broken: for `>=` / `>` the
one-sided p-value P(T <= (delta - threshold) / se), for `<=` / `<` P(T >= (delta - threshold) / se). The
standard error comes from the metric's linearization (delta method): a metric that is a ratio of per-item sums,
R = sum(a_i) / sum(b_i) (accuracy: a = right, b = 1; precision[c]: a = right and predicted c, b = predicted c;
recall[c]: b = gold c; f1[c] = 2 TP / (2 TP + FP + FN): a = 2 [right and gold c], b = [gold c] + [predicted c]), has
per-item influence psi_i = (a_i - R b_i) / mean(b); a macro average, the mean of its classes' influences. The
change's influence is psi(candidate) - psi(baseline), paired item by item, and its standard error the paired one
(sd / sqrt(n), t on n - 1 df) or, with clusters, the CR1 cluster-robust one (t on G - 1 df) of difference.py.
For accuracy this is exactly the paired t-test of the per-item differences against the threshold.

The guards of one comparison are a family: their p-values get Holm's step-down correction, so k guards together
raise a false alarm at most 5% of the time. A guard fails when its Holm-adjusted p-value is under 0.05 (shown
broken); it warns when the point estimate breaks the bound but the test does not show it; else it passes. A
metric without a per-item form here (weighted and micro averages, per-field extraction rates) stays a point
check: it fails on a point breach, is left out of the family, and says so.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .stats import numpy, scipy_stats

ALPHA = 0.05


def ratio_influence(a: Any, b: Any) -> Any:
    """Per-item influence of R = sum(a) / sum(b): (a - R b) / mean(b); zeros when sum(b) = 0 (R is then 0 by
    convention and does not move with the data)."""
    np = numpy()
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    total = float(b.sum())
    if total == 0:
        return np.zeros_like(a)
    return (a - a.sum() / total * b) / (total / b.size)


def classification_influence(gold: Sequence[str], pred: Sequence[str], labels: Sequence[str]) -> dict[str, Any]:
    """Influence of accuracy, precision[c], recall[c], f1[c] (every label c) and the macro averages."""
    np = numpy()
    g, p = np.asarray(gold, dtype=object), np.asarray(pred, dtype=object)
    right = (g == p).astype(float)
    out = {"accuracy": ratio_influence(right, np.ones_like(right))}
    per: dict[str, list[Any]] = {"precision": [], "recall": [], "f1": []}
    for c in labels:
        gc, pc = (g == c).astype(float), (p == c).astype(float)
        tp = gc * pc
        for name, (num, den) in {"precision": (tp, pc), "recall": (tp, gc), "f1": (2 * tp, gc + pc)}.items():
            psi = ratio_influence(num, den)
            out[f"{name}[{c}]"] = psi
            per[name].append(psi)
    for name, psis in per.items():
        if psis:
            out[f"macro_{name}"] = np.mean(psis, axis=0)
    return out


def rate_influence(flags: Mapping[str, Sequence[bool]]) -> dict[str, Any]:
    """Influence of rates over all items (valid_json, schema_valid, accuracy of extraction)."""
    np = numpy()
    return {k: ratio_influence(np.asarray(v, dtype=float), np.ones(len(v))) for k, v in flags.items()}


def guard_p_value(delta: float, threshold: float, op: str, influence: Any, *,
                  clusters: Sequence[Any] | None = None, broken: bool) -> tuple[float, float, int]:
    """(one-sided p-value that the guard is broken, se, df) for the change `delta` with per-item influence
    `influence` (candidate's minus baseline's); `broken`: the point estimate breaks the bound (decides when the
    standard error is 0)."""
    from .difference import paired_difference

    np = numpy()
    x = np.asarray(influence, dtype=float)
    d = paired_difference(x, clusters=clusters)
    se, df = d.se, d.df
    gap = delta - threshold
    lower_breaks = op in (">=", ">")          # the guard is broken below the threshold
    if se == 0:
        return (0.0 if broken else 1.0), 0.0, df
    t = gap / se
    st = scipy_stats()
    p = float(st.t.cdf(t, df)) if lower_breaks else float(st.t.sf(t, df))
    return p, se, df


__all__ = ["classification_influence", "guard_p_value", "rate_influence", "ratio_influence"]
