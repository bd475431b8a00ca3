"""A variant's quality on the evaluation data and its paired test against the reference: for perplexity a paired
t-test on each example's mean token NLL, for classification and extraction `campaign regress` (McNemar, per-class
deltas) on the predictions; guards use regress's syntax."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..errors import InputError
from ..evaluate.analysis import analyze_classification
from ..evaluate.equivalence import paired_tost
from ..evaluate.extraction import analyze_extraction
from ..evaluate.predictions import Prediction, PredictionSet
from ..evaluate.regress import evaluate_guards, regress
from ..evaluate.stats import paired_t
from .setup import QuantSetup
from .variant import scalar


def quality_of(s: QuantSetup, out: list[Any]) -> tuple[float, dict[str, float]]:
    if s.metric == "perplexity":
        nll = sum(x for x, _ in out) / sum(c for _, c in out)
        return math.exp(nll), {"perplexity": math.exp(nll), "nll": nll}
    rep = _prediction_report(s, out)
    metrics = rep.metrics()
    return float(rep.accuracy), dict(metrics)


def _gold(s: QuantSetup) -> list[Any]:
    if s.gold is not None:
        return list(s.gold)
    out: list[Any] = []
    for b in s.batches:
        out.extend(scalar(x) for x in b["labels"])
    return out


def _prediction_set(s: QuantSetup, out: list[Any], examples: list[str], label: str) -> Any:
    gold = _gold(s)
    if len(gold) != len(examples):
        raise InputError(f"{s.source}: {len(gold)} gold values for {len(examples)} examples; give one per example")
    preds = tuple(Prediction(i, g, p, n + 1) for n, (i, g, p) in enumerate(zip(examples, gold, out, strict=False)))
    return PredictionSet(f"<{label}>", "", preds)


def _prediction_report(s: QuantSetup, out: list[Any]) -> Any:
    ps = _prediction_set(s, out, [str(i) for i in range(len(out))], "variant")
    if s.metric == "classification":
        return analyze_classification(ps)
    return analyze_extraction(ps, schema=s.schema, required=s.required)


def finite_outcomes(s: QuantSetup, out: list[Any]) -> bool:
    """Whether every per-example outcome is a finite number where it is a number: a NaN or inf NLL (perplexity),
    a NaN or inf float prediction."""
    if s.metric == "perplexity":
        return all(math.isfinite(x) for x, _ in out)
    return not any(isinstance(p, float) and not math.isfinite(p) for p in out)


def paired_test(s: QuantSetup, ref: list[Any], var: list[Any], examples: list[str], guards: Sequence[str],
                ref_name: str, var_name: str, confidence: float, margin: float | None = None) -> dict[str, Any]:
    """The variant against the reference: the difference, its paired test and interval, the guards and, with a
    margin, equivalence (TOST at the 5% level, as `campaign regress --equivalence-margin`). Outcomes that are not
    finite (NaN or inf) are not tested: the difference is reported, the p-value and the equivalence are None
    (quant.finite fails)."""
    finite = finite_outcomes(s, ref) and finite_outcomes(s, var)
    if s.metric == "perplexity":
        base, cand = quality_of(s, ref)[1], quality_of(s, var)[1]
        checked = evaluate_guards(guards, base, cand)
        delta = cand["perplexity"] - base["perplexity"]
        if not finite:
            return {"delta": delta, "p": None, "interval": None, "flips": None, "guards": checked,
                    "test": "not tested: a per-example NLL is NaN or inf", "equivalence": None}
        per_ref, per_var = [y / k for y, k in ref], [x / c for x, c in var]   # per-example mean NLL
        t = paired_t([a - b for a, b in zip(per_var, per_ref, strict=False)], confidence=confidence)
        interval = (t.ci_low, t.ci_high) if t.ci_low is not None and t.ci_high is not None else None
        return {"delta": delta, "p": t.p_value, "test": f"paired t on per-example NLL ({len(per_ref)} examples)",
                "interval": interval, "flips": None, "guards": checked,
                "equivalence": None if margin is None else paired_tost(per_ref, per_var, margin=margin)}
    rep = regress(_prediction_set(s, ref, examples, ref_name), _prediction_set(s, var, examples, var_name),
                  task=s.metric, guards=guards, schema=s.schema, required=s.required,
                  margin=margin if finite else None)
    return {"delta": rep.accuracy_candidate - rep.accuracy_baseline, "p": rep.mcnemar.p_value,
            "test": f"McNemar ({rep.mcnemar.method})", "interval": None,
            "flips": (len(rep.right_to_wrong), len(rep.wrong_to_right)), "guards": rep.guards,
            "equivalence": rep.equivalence}
