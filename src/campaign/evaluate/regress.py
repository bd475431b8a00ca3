"""Baseline vs candidate on the same examples: flips, per-class deltas, McNemar's test, guards.

A guard states what must not get worse, as a bound on the change (candidate - baseline) of one metric:
`f1[refund]>=-0.01` (F1 of class refund may drop by at most 0.01), `valid_json>=0` (no drop at all).
Metric names are those of the reports' `metrics()`: accuracy, macro_f1, f1[c], precision[c], recall[c]
(classification); valid_json, schema_valid, required_all, required[f], exact[f], match[f] (extraction).
"""
from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..checks import Check
from ..errors import InputError
from ..results import Result
from .analysis import ClassificationReport, analyze_classification, labels_of
from .difference import Difference, difference_checks, paired_difference
from .equivalence import Equivalence, paired_tost
from .extraction import ExtractionReport, analyze_extraction, canonical, parse_object
from .predictions import PredictionSet, label_of, read_predictions
from .stats import McNemar, mcnemar, numpy

SCHEMA = "campaign.regress/1"
_GUARD = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]+\])?)"        # metric, or metric[label]
                    r"\s*(>=|<=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")
_OPS = {">=": lambda a, b: a >= b, ">": lambda a, b: a > b, "<=": lambda a, b: a <= b, "<": lambda a, b: a < b}
EPS = 1e-12   # deltas are differences of rates: 0.1 - 0.1 must pass ">= 0" despite float noise


@dataclass(frozen=True)
class Guard:
    """One guard evaluated: `passed` when the point estimate delta (candidate - baseline) `op` threshold. Tested
    (evaluate/guard_tests.py): the one-sided p-value that the bound is broken, its standard error and df, and the
    Holm-adjusted p-value over the `family` of tested guards; status fail (shown broken: adjusted p < 0.05), warn
    (broken on the point estimate only), pass. Untested (no per-item form of the metric): a point check, status
    fail on a point breach."""

    expression: str
    metric: str
    op: str
    threshold: float
    baseline: float
    candidate: float
    delta: float
    passed: bool
    p_value: float | None = None
    se: float | None = None
    df: int | None = None
    p_adjusted: float | None = None
    family: int = 0

    @property
    def tested(self) -> bool:
        return self.p_value is not None

    @property
    def status(self) -> str:
        if not self.tested:
            return "pass" if self.passed else "fail"
        p = self.p_adjusted if self.p_adjusted is not None else self.p_value
        assert p is not None
        if p < 0.05:
            return "fail"
        return "pass" if self.passed else "warn"

    def describe(self) -> str:
        verb = "fell" if self.delta < 0 else "rose"
        line = (f"{self.metric} {verb} by {abs(self.delta):.4f} ({self.baseline:.4f} -> {self.candidate:.4f}); "
                f"the guard requires a change {self.op} {self.threshold:g}")
        if self.tested:
            line += (f"; one-sided p = {self.p_value:.3g} that it is broken (se {self.se:.4f}), Holm-adjusted over "
                     f"{self.family} tested guard(s): {self.p_adjusted:.3g}")
        else:
            line += "; a point check (no standard error for this metric)"
        return line


def guard_checks(guards: Sequence[Guard]) -> tuple[Check, ...]:
    """One check per guard, id guard.<expression>: fail when shown broken (Holm over the tested guards) or, for an
    untested guard, broken on the point estimate; warn when broken on the point estimate but not shown; else
    pass."""
    out = []
    for g in guards:
        status = g.status
        if status == "pass":
            out.append(Check(f"guard.{g.expression}", "pass", g.describe()))
        elif status == "warn":
            out.append(Check(f"guard.{g.expression}", "warn", g.describe(),
                             "the point estimate breaks the bound, but the test (Holm over the guards) does not show "
                             "it: the change is within the noise of this many examples",
                             "more examples decide it; or fix the candidate if the point estimate worries you"))
        else:
            why = ("the candidate is worse than the baseline by more than the guard allows" if not g.tested else
                   "the data show the bound broken (Holm-adjusted one-sided p < 0.05)")
            out.append(Check(f"guard.{g.expression}", "fail", g.describe(), why,
                             "fix the candidate, or change the guard if the trade is meant"))
    return tuple(out)


def parse_guard(text: str) -> tuple[str, str, float]:
    """'f1[refund]>=-0.01' -> ('f1[refund]', '>=', -0.01)."""
    m = _GUARD.match(text)
    if not m:
        raise InputError(f"guard {text!r} is not of the form METRIC OP NUMBER; write e.g. \"f1[refund]>=-0.01\" "
                         f"or \"valid_json>=0\"")
    return m.group(1), m.group(2), float(m.group(3))


def evaluate_guards(guards: Sequence[str], base: dict[str, float], cand: dict[str, float], *,
                    influence: tuple[dict[str, Any], dict[str, Any]] | None = None,
                    clusters: Sequence[Any] | None = None) -> tuple[Guard, ...]:
    """The guards against the two models' metrics; with `influence` (per-item influence of each metric, baseline's
    and candidate's: evaluate/guard_tests.py), each guard whose metric has one is tested (cluster-robust over
    `clusters`) and the tested guards get Holm's correction."""
    from dataclasses import replace

    from .difference import holm
    from .guard_tests import guard_p_value

    out = []
    for text in guards:
        name, op, threshold = parse_guard(text)
        if name not in base and name not in cand:
            known = sorted(set(base) | set(cand))
            prefix = name.split("[")[0]
            close = [k for k in known if k.startswith(prefix)][:6] or known[:6]
            raise InputError(f"guard {text!r}: no metric {name!r}; known metrics include "
                             f"{', '.join(close)}; fix the name (class names are case-sensitive)")
        b, c = base.get(name, 0.0), cand.get(name, 0.0)
        delta = c - b
        slack = {">=": -EPS, ">": EPS, "<=": EPS, "<": -EPS}[op]
        passed = _OPS[op](delta, threshold + slack)
        g = Guard(text, name, op, threshold, b, c, delta, passed)
        if influence is not None:
            psi_b, psi_c = influence[0].get(name), influence[1].get(name)
            if psi_b is None and psi_c is None:
                pass
            else:
                np = numpy()
                one = np.asarray(psi_b if psi_b is not None else psi_c, dtype=float)
                zero = np.zeros(one.size)
                x = (np.asarray(psi_c, dtype=float) if psi_c is not None else zero) \
                    - (np.asarray(psi_b, dtype=float) if psi_b is not None else zero)
                try:
                    p, se, df = guard_p_value(delta, threshold, op, x, clusters=clusters, broken=not passed)
                    g = replace(g, p_value=p, se=se, df=df)
                except InputError:   # fewer than 2 items or clusters: no standard error, a point check
                    pass
        out.append(g)
    tested = [i for i, g in enumerate(out) if g.tested]
    adjusted = holm([out[i].p_value or 0.0 for i in tested])
    for i, a in zip(tested, adjusted, strict=True):
        out[i] = replace(out[i], p_adjusted=a, family=len(tested))
    return tuple(out)


@dataclass(frozen=True)
class MetricDelta:
    name: str
    baseline: float
    candidate: float
    delta: float


@dataclass(frozen=True)
class FieldDelta:
    """Per-field exact and normalized match rates of both models (extraction): (baseline, candidate)."""

    field: str
    gold_examples: int
    exact: tuple[float, float]
    match: tuple[float, float]
    delta_match: float


@dataclass(frozen=True)
class ClassDelta:
    """Per-class precision, recall and F1 of both models (classification): (baseline, candidate)."""

    label: str
    support: int
    precision: tuple[float, float]
    recall: tuple[float, float]
    f1: tuple[float, float]
    delta_f1: float


class GuardedComparison:
    """The verdict of a baseline-candidate comparison (prediction files, lm-eval runs): the difference's verdict
    (difference.verdict, or difference.<task> per task with Holm's correction: evaluate/difference.py), which
    fails on a significant loss and speaks for a stated margin, and its guards (guard.<expr>)."""

    guards: tuple[Guard, ...]
    equivalence: Equivalence | None

    @property
    def verdicts(self) -> tuple[Difference, ...]:
        return ()

    @property
    def checks(self) -> tuple[Check, ...]:
        if self.verdicts:
            return difference_checks(self.verdicts) + guard_checks(self.guards)
        return guard_checks(self.guards) + (self.equivalence.checks if self.equivalence is not None else ())

    @property
    def failed_guards(self) -> tuple[Guard, ...]:
        """The guards that fail (shown broken, or an untested guard broken on its point estimate)."""
        return tuple(g for g in self.guards if g.status == "fail")


@dataclass(frozen=True)
class RegressionReport(GuardedComparison, Result):
    """What changed between two prediction files on the same examples; its checks are the difference's verdict
    (difference.verdict: fail when the candidate is significantly worse) and the guards (guard.<expr>)."""

    task: str
    baseline: dict[str, Any]
    candidate: dict[str, Any]
    examples: int
    accuracy_baseline: float
    accuracy_candidate: float
    both_right: int
    both_wrong: int
    right_to_wrong: tuple[str, ...]
    wrong_to_right: tuple[str, ...]
    mcnemar: McNemar
    per_class: tuple[ClassDelta, ...]
    per_field: tuple[FieldDelta, ...]
    deltas: tuple[MetricDelta, ...]
    guards: tuple[Guard, ...]
    notes: tuple[str, ...] = ()
    equivalence: Equivalence | None = None  # accuracy within +/- a stated margin (TOST on paired correctness)
    difference: Difference | None = None    # the accuracy's paired difference, its interval and verdict
    cluster_field: str | None = None
    clusters_from: str | None = None       # the split manifest whose units are the clusters
    schema: str = SCHEMA

    @property
    def verdicts(self) -> tuple[Difference, ...]:
        return () if self.difference is None else (self.difference,)



def _check_same_examples(a: PredictionSet, b: PredictionSet, task: str) -> None:
    ia, ib = set(a.ids), set(b.ids)
    if ia != ib:
        only_a, only_b = sorted(ia - ib), sorted(ib - ia)
        eg = repr((only_a or only_b)[0])
        raise InputError(f"{len(only_a) + len(only_b)} ids differ ({len(only_a)} only in the baseline, {len(only_b)} "
                         f"only in the candidate, e.g. {eg}); compare predictions on the same examples")
    bb = b.by_id()
    for p in a.predictions:
        q = bb[p.id]
        if task == "classification":
            same = label_of(p.gold, where=a.where(p), what="gold") == label_of(q.gold, where=b.where(q), what="gold")
        else:
            same = canonical(parse_object(p.gold)) == canonical(parse_object(q.gold))
        if not same:
            raise InputError(f"gold of id {p.id!r} differs ({a.where(p)} vs {b.where(q)}); both files must carry "
                             f"the same gold labels")


def regress(baseline: str | os.PathLike[str] | PredictionSet, candidate: str | os.PathLike[str] | PredictionSet, *,
            task: str = "classification", guards: Sequence[str] = (), schema: Any = None,
            required: Sequence[str] | None = None, id_field: str = "id", gold_field: str = "gold",
            pred_field: str = "pred", margin: float | None = None, non_inferiority: float | None = None,
            cluster: str | None = None, clusters_from: str | os.PathLike[str] | None = None) -> RegressionReport:
    """Compare two prediction files on the same ids: flips with ids, per-class deltas, McNemar, guards, the
    accuracy's paired difference with its 95% interval and verdict (evaluate/difference.py; cluster-robust over
    the metadata field `cluster`, or over the units of the split `clusters_from` names: its groups and duplicate
    clusters, matched by example id to the split's --id), and with `margin` equivalence of the accuracies within
    +/- margin (TOST on the paired correctness), with `non_inferiority` a one-sided test that the loss is under
    that margin.

    Raises:
        InputError: different ids or gold values, an unknown task, a malformed guard or unknown metric, a cluster
            field missing from a row or different between the files, an example in no row of `clusters_from`.
    """
    if task not in ("classification", "extraction"):
        raise InputError(f"task {task!r} is not known; use classification or extraction")
    if cluster and clusters_from:
        raise InputError("--cluster and --clusters-from both name the clusters; give one")
    kw = dict(id_field=id_field, gold_field=gold_field, pred_field=pred_field)
    a = baseline if isinstance(baseline, PredictionSet) else read_predictions(baseline, **kw)
    b = candidate if isinstance(candidate, PredictionSet) else read_predictions(candidate, **kw)
    for g in guards:
        parse_guard(g)                       # malformed guards fail before any work
    _check_same_examples(a, b, task)
    order = a.ids
    rep_a: ClassificationReport | ExtractionReport
    rep_b: ClassificationReport | ExtractionReport
    per_class: list[ClassDelta] = []
    per_field: list[FieldDelta] = []
    if task == "classification":
        if schema is not None or required:
            raise InputError("--schema and --required describe structured outputs; add --task extraction")
        rep_a, rep_b = analyze_classification(a), analyze_classification(b)
        ga, pa = labels_of(a)
        gb, pb = labels_of(b)
        right_a = dict(zip(a.ids, (x == y for x, y in zip(ga, pa, strict=True)), strict=True))
        right_b = dict(zip(b.ids, (x == y for x, y in zip(gb, pb, strict=True)), strict=True))
        ca = {c.label: c for c in rep_a.per_class}
        cb = {c.label: c for c in rep_b.per_class}
        labels = list(rep_a.labels) + [lab for lab in rep_b.labels if lab not in ca]
        for lab in labels:
            x, y = ca.get(lab), cb.get(lab)
            px, rx, fx = (x.precision, x.recall, x.f1) if x else (0.0, 0.0, 0.0)
            py, ry, fy = (y.precision, y.recall, y.f1) if y else (0.0, 0.0, 0.0)
            support = x.support if x else (y.support if y else 0)
            per_class.append(ClassDelta(lab, support, (px, py), (rx, ry), (fx, fy), fy - fx))
    else:
        rep_a = analyze_extraction(a, schema=schema, required=required)
        rep_b = analyze_extraction(b, schema=schema, required=required)
        right_a = {r.id: r.correct for r in rep_a.per_example}
        right_b = {r.id: r.correct for r in rep_b.per_example}
        fb = {f.field: f for f in rep_b.fields}
        per_field = [FieldDelta(f.field, f.gold_examples, (f.exact_rate, fb[f.field].exact_rate),
                                (f.normalized_rate, fb[f.field].normalized_rate),
                                fb[f.field].normalized_rate - f.normalized_rate) for f in rep_a.fields]
    r2w = tuple(i for i in order if right_a[i] and not right_b[i])
    w2r = tuple(i for i in order if not right_a[i] and right_b[i])
    both_right = sum(1 for i in order if right_a[i] and right_b[i])
    both_wrong = len(order) - both_right - len(r2w) - len(w2r)
    ma, mb = rep_a.metrics(), rep_b.metrics()
    deltas = tuple(MetricDelta(k, ma.get(k, 0.0), mb.get(k, 0.0), mb.get(k, 0.0) - ma.get(k, 0.0))
                   for k in list(ma) + [k for k in mb if k not in ma])
    notes = []
    if not guards:
        notes.append("no --guard: state what must not get worse (e.g. --guard \"f1[refund]>=-0.01\")")
    test = mcnemar(len(r2w), len(w2r))
    groups = cluster_labels(a, b, cluster) if cluster else None
    if clusters_from is not None:
        from ..data.split_clusters import clusters_of_ids, read_clusters

        groups = clusters_of_ids(read_clusters(clusters_from), order, lambda i: a.where(a.predictions[i]))
        notes.append(f"clusters: the units of the split {clusters_from} (its groups and near/exact duplicate "
                     "clusters), matched by id")
    checked = evaluate_guards(guards, ma, mb, influence=_influence(task, a, b, rep_a, rep_b), clusters=groups)
    if guards:
        k = sum(g.tested for g in checked)
        notes.append(f"guards are tests: each asks whether the data show its bound broken (one-sided, at 5%), with "
                     f"Holm's correction over the {k} tested guard(s)"
                     + (f"; {len(checked) - k} without a per-item form are point checks" if k < len(checked) else ""))
    diff = paired_difference([float(right_b[i]) - float(right_a[i]) for i in order], metric="accuracy",
                             clusters=groups, margin=margin, non_inferiority=non_inferiority)
    notes += diff.notes
    equivalence = None if margin is None else paired_tost([float(right_a[i]) for i in order],
                                                          [float(right_b[i]) for i in order], margin=margin)
    return RegressionReport(
        task=task, baseline=a.to_dict(), candidate=b.to_dict(), examples=len(order),
        accuracy_baseline=rep_a.accuracy, accuracy_candidate=rep_b.accuracy, both_right=both_right,
        both_wrong=both_wrong, right_to_wrong=r2w, wrong_to_right=w2r, mcnemar=test,
        per_class=tuple(per_class), per_field=tuple(per_field), deltas=deltas, guards=checked,
        notes=tuple(notes), equivalence=equivalence, difference=diff, cluster_field=cluster,
        clusters_from=None if clusters_from is None else str(clusters_from))


def _influence(task: str, a: PredictionSet, b: PredictionSet, rep_a: Any, rep_b: Any) -> tuple[dict[str, Any],
                                                                                           dict[str, Any]]:
    """Per-item influence of each metric of both models, in a's order (evaluate/guard_tests.py)."""
    from .guard_tests import classification_influence, rate_influence

    order = a.ids
    if task == "classification":
        out = []
        for ps, rep in ((a, rep_a), (b, rep_b)):
            gold, pred = labels_of(ps)
            at = {i: k for k, i in enumerate(ps.ids)}
            idx = [at[i] for i in order]
            out.append(classification_influence([gold[k] for k in idx], [pred[k] for k in idx], rep.labels))
        return out[0], out[1]
    flags = []
    for rep in (rep_a, rep_b):
        ex = {r.id: r for r in rep.per_example}
        rows = [ex[i] for i in order]
        f = {"valid_json": [r.parsed for r in rows], "accuracy": [r.correct for r in rows]}
        if rep.schema_valid is not None:
            f["schema_valid"] = [bool(r.schema_ok) for r in rows]
        flags.append(rate_influence(f))
    return flags[0], flags[1]


def cluster_labels(a: PredictionSet, b: PredictionSet, field: str) -> list[str]:
    """The cluster of every example (in a's order) from the metadata field `field`: every row of the baseline
    needs it, and the candidate, where it has it, must agree."""
    bb = b.by_id()
    out = []
    for p in a.predictions:
        if field not in p.meta or p.meta[field] in (None, ""):
            have = ", ".join(map(repr, sorted(p.meta))) or "none"
            raise InputError(f"{a.where(p)} has no {field!r} for --cluster (metadata fields: {have}); give every "
                             "row its cluster, or name another field")
        q = bb[p.id]
        if field in q.meta and str(q.meta[field]) != str(p.meta[field]):
            raise InputError(f"cluster {field!r} of id {p.id!r} differs ({a.where(p)}: {p.meta[field]!r}, "
                             f"{b.where(q)}: {q.meta[field]!r}); both files must put an example in the same cluster")
        out.append(str(p.meta[field]))
    return out
