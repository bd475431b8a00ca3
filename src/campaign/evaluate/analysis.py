"""Error analysis of a classifier: confusion matrix, per-class and averaged metrics, top confusions, slices.

Metrics come from scikit-learn (zero_division=0: a class never predicted has precision 0). Labels are the gold
labels (sorted) followed by labels only ever predicted (sorted), e.g. a hallucinated class or '(none)' for an
empty prediction; the averages run over all of them, as sklearn's do by default.
`analyze_errors` is the entry point for both tasks (classification here, extraction in extraction.py).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InputError, MissingDependencyError
from ..results import Information
from ..validate import check_seed
from .difference import RateEstimate, rate_estimate
from .extraction import ExtractionReport, analyze_extraction
from .predictions import NO_PREDICTION, PredictionSet, label_of, read_predictions
from .review import ReviewCandidate, TaxonomySummary, as_text, sample_for_review, summarize_taxonomy, write_review_sheet
from .stats import numpy

SCHEMA = "campaign.errors/1"
TASKS = ("classification", "extraction")
MISSING_SLICE = "(missing)"


def sklearn_metrics():
    try:
        from sklearn import metrics
    except ImportError:
        raise MissingDependencyError("scikit-learn", "data") from None
    return metrics


@dataclass(frozen=True)
class ClassMetrics:
    label: str
    precision: float
    recall: float
    f1: float
    support: int          # gold examples of the class
    predicted: int        # predictions of the class


@dataclass(frozen=True)
class Confusion:
    """One off-diagonal cell: `count` examples of gold class `gold` predicted as `pred`, with example ids."""

    gold: str
    pred: str
    count: int
    share_of_errors: float
    example_ids: tuple[str, ...]


@dataclass(frozen=True)
class SliceMetrics:
    value: str
    examples: int
    errors: int
    accuracy: float
    macro_f1: float


@dataclass(frozen=True)
class ClassificationReport(Information):
    """Everything `campaign errors` shows for a classifier; matrix rows are gold labels, columns predictions."""

    source: dict[str, Any]
    examples: int
    errors: int
    accuracy: float
    labels: tuple[str, ...]
    matrix: tuple[tuple[int, ...], ...]
    matrix_normalized: tuple[tuple[float, ...], ...]
    per_class: tuple[ClassMetrics, ...]
    averages: dict[str, dict[str, float]]
    top_confusions: tuple[Confusion, ...]
    no_prediction: int = 0
    slice_field: str | None = None
    slices: tuple[SliceMetrics, ...] = ()
    taxonomy: TaxonomySummary | None = None
    review_sheet: str | None = None
    review_rows: int = 0
    notes: tuple[str, ...] = ()
    task: str = "classification"
    schema: str = SCHEMA
    plot: str | None = None         # the heatmap written by the CLI's --plot (campaign.plots)
    estimates: tuple[RateEstimate, ...] = ()   # accuracy with its standard error and 95% interval
    cluster_field: str | None = None


    def metrics(self) -> dict[str, float]:
        """Flat metric names for guards: accuracy, macro_f1, f1[label], precision[label], recall[label], ..."""
        out = {"accuracy": self.accuracy}
        for avg, vals in self.averages.items():
            for k, v in vals.items():
                out[f"{avg}_{k}"] = v
        for c in self.per_class:
            out[f"f1[{c.label}]"] = c.f1
            out[f"precision[{c.label}]"] = c.precision
            out[f"recall[{c.label}]"] = c.recall
        return out


def labels_of(preds: PredictionSet) -> tuple[list[str], list[str]]:
    """(gold labels, predicted labels) as strings, in file order; an empty prediction is '(none)'."""
    gold, pred = [], []
    for p in preds.predictions:
        gold.append(label_of(p.gold, where=preds.where(p), what="gold"))
        pred.append(label_of(p.pred, where=preds.where(p), what="prediction") or NO_PREDICTION)
    return gold, pred  # type: ignore[return-value]


def label_order(gold: Sequence[str], pred: Sequence[str]) -> list[str]:
    g = sorted(set(gold))
    return g + sorted(set(pred) - set(g))


def _slice_value(meta: dict[str, Any], name: str) -> str:
    v = meta.get(name)
    return MISSING_SLICE if v is None or v == "" else as_text(v)


def analyze_classification(preds: PredictionSet, *, slice_by: str | None = None, top: int = 10,
                           examples_per_confusion: int = 5, review_sheet: str | os.PathLike[str] | None = None,
                           per_cell: int = 5, correct_per_cell: int = 0, taxonomy: str | os.PathLike[str] | None = None,
                           seed: int = 0) -> ClassificationReport:
    """Confusion matrix, per-class precision/recall/F1/support, macro/micro/weighted averages, top confusions
    with example ids, metrics per value of the metadata field `slice_by`; optionally a review sheet (written)
    and a taxonomy summary (read)."""
    if top < 1 or examples_per_confusion < 1 or per_cell < 1 or correct_per_cell < 0:
        raise InputError(f"top ({top}), examples per confusion ({examples_per_confusion}) and per cell ({per_cell}) "
                         f"must be >= 1, correct per cell ({correct_per_cell}) >= 0")
    check_seed(seed)
    m = sklearn_metrics()
    np = numpy()
    gold, pred = labels_of(preds)
    labels = label_order(gold, pred)
    # sklearn is given integer codes (label i of `labels` is code i): the same metrics, far faster than strings.
    code = {lab: i for i, lab in enumerate(labels)}
    yt = np.fromiter((code[g] for g in gold), dtype=np.int64, count=len(gold))
    yp = np.fromiter((code[q] for q in pred), dtype=np.int64, count=len(pred))
    k = list(range(len(labels)))
    cm = m.confusion_matrix(yt, yp, labels=k)
    rows = cm.sum(axis=1)
    norm = tuple(tuple(float(x / r) if r else 0.0 for x in row)
                 for row, r in zip(cm.tolist(), rows.tolist(), strict=True))
    p, r, f, s = m.precision_recall_fscore_support(yt, yp, labels=k, zero_division=0)
    per_class = tuple(ClassMetrics(lab, float(p[i]), float(r[i]), float(f[i]), int(s[i]), int(cm[:, i].sum()))
                      for i, lab in enumerate(labels))
    averages = {}
    for avg in ("macro", "micro", "weighted"):
        ap, ar, af, _ = m.precision_recall_fscore_support(yt, yp, labels=k, average=avg, zero_division=0)
        averages[avg] = {"precision": float(ap), "recall": float(ar), "f1": float(af)}
    n = len(gold)
    wrong = [i for i in range(n) if gold[i] != pred[i]]
    ids = preds.ids
    cells: dict[tuple[str, str], list[str]] = {}
    for i in wrong:
        cells.setdefault((gold[i], pred[i]), []).append(ids[i])
    ranked = sorted(cells.items(), key=lambda kv: (-len(kv[1]), labels.index(kv[0][0]), labels.index(kv[0][1])))
    confusions = tuple(Confusion(g, q, len(v), len(v) / len(wrong), tuple(v[:examples_per_confusion]))
                       for (g, q), v in ranked[:top])
    notes: list[str] = []
    none = pred.count(NO_PREDICTION)
    if none:
        notes.append(f"{none} example(s) have no prediction; they count as the label {NO_PREDICTION!r}")
    extra = [lab for lab in labels if lab not in set(gold)]
    if extra:
        notes.append(f"predicted labels never in the gold: {', '.join(map(repr, extra))} (precision 0 by definition)")
    slices: tuple[SliceMetrics, ...] = ()
    if slice_by:
        if not any(slice_by in pr.meta for pr in preds.predictions):
            fields = sorted({k for pr in preds.predictions for k in pr.meta})
            raise InputError(f"no field {slice_by!r} in {preds.path} (metadata fields: "
                             f"{', '.join(map(repr, fields)) or 'none'}); pass --slice with one of them")
        values = np.array([_slice_value(pr.meta, slice_by) for pr in preds.predictions], dtype=object)
        out = []
        for v in sorted(set(values.tolist())):
            mask = values == v
            st, sp = yt[mask], yp[mask]
            errs = int((st != sp).sum())
            # macro F1 over the labels seen in the slice (gold or predicted), as sklearn does without `labels`
            out.append(SliceMetrics(v, int(mask.sum()), errs, 1 - errs / int(mask.sum()),
                                    float(m.f1_score(st, sp, average="macro", zero_division=0))))
        slices = tuple(sorted(out, key=lambda sm: (sm.accuracy, sm.value)))
    sheet, sheet_rows = None, 0
    if review_sheet is not None:
        cands = [ReviewCandidate(ids[i], gold[i], pred[i], f"{gold[i]} -> {pred[i]}", gold[i] != pred[i],
                                 preds.predictions[i].meta) for i in range(n)]
        chosen = sample_for_review(cands, per_cell=per_cell, correct_per_cell=correct_per_cell, seed=seed)
        sheet = str(write_review_sheet(review_sheet, chosen, inputs=[preds.path] + ([taxonomy] if taxonomy else [])))
        sheet_rows = len(chosen)
    tax = summarize_taxonomy(taxonomy, ids=ids, error_ids=[ids[i] for i in wrong]) if taxonomy else None
    return ClassificationReport(
        source=preds.to_dict(), examples=n, errors=len(wrong), accuracy=1 - len(wrong) / n, labels=tuple(labels),
        matrix=tuple(tuple(int(x) for x in row) for row in cm.tolist()), matrix_normalized=norm,
        per_class=per_class, averages=averages, top_confusions=confusions, no_prediction=none,
        slice_field=slice_by, slices=slices, taxonomy=tax, review_sheet=sheet, review_rows=sheet_rows,
        notes=tuple(notes))


def analyze_errors(predictions: str | os.PathLike[str] | PredictionSet, *, task: str = "classification",
                   id_field: str = "id", gold_field: str = "gold", pred_field: str = "pred",
                   schema: str | os.PathLike[str] | dict[str, Any] | None = None,
                   required: Sequence[str] | None = None, slice_by: str | None = None, top: int = 10,
                   review_sheet: str | os.PathLike[str] | None = None, per_cell: int = 5, correct_per_cell: int = 0,
                   taxonomy: str | os.PathLike[str] | None = None,
                   seed: int = 0, cluster: str | None = None,
                   clusters_from: str | os.PathLike[str] | None = None) -> ClassificationReport | ExtractionReport:
    """Read a prediction file and analyze its errors: task 'classification' or 'extraction'. Its figure is
    campaign.plots.confusion (fields for extraction) of the result's to_dict().

    Raises:
        InputError: unreadable or malformed predictions, an unknown task, options that do not fit the task.
    """
    if task not in TASKS:
        raise InputError(f"task {task!r} is not known; use classification or extraction")
    preds = predictions if isinstance(predictions, PredictionSet) else read_predictions(
        predictions, id_field=id_field, gold_field=gold_field, pred_field=pred_field)
    if task == "classification":
        if schema is not None or required:
            raise InputError("--schema and --required describe structured outputs; add --task extraction")
        rep: ClassificationReport | ExtractionReport = analyze_classification(
            preds, slice_by=slice_by, top=top, review_sheet=review_sheet, per_cell=per_cell,
            correct_per_cell=correct_per_cell, taxonomy=taxonomy, seed=seed)
    else:
        rep = analyze_extraction(preds, schema=schema, required=required, slice_by=slice_by,
                                 review_sheet=review_sheet, per_cell=per_cell, correct_per_cell=correct_per_cell,
                                 taxonomy=taxonomy, seed=seed)
    return with_estimates(rep, preds, cluster, clusters_from=clusters_from)


def with_estimates(rep: ClassificationReport | ExtractionReport, preds: PredictionSet,
                   cluster: str | None = None, *,
                   clusters_from: str | os.PathLike[str] | None = None) -> ClassificationReport | ExtractionReport:
    """The report with each rate's standard error and 95% interval (evaluate/difference.rate_estimate):
    accuracy (classification); valid JSON and every field right (extraction); cluster-robust over the metadata
    field `cluster` when given, or over the units of the split manifest `clusters_from` (data/split_clusters.py:
    its groups and duplicate clusters, matched by example id)."""
    from dataclasses import replace

    if cluster is not None and clusters_from is not None:
        raise InputError("--cluster and --clusters-from both name the clusters; give one")
    groups = None
    notes = tuple(rep.notes)
    if clusters_from is not None:
        from ..data.split_clusters import clusters_of_ids, read_clusters

        groups = clusters_of_ids(read_clusters(clusters_from), preds.ids, lambda i: preds.where(preds.predictions[i]))
        notes += (f"clusters: the units of the split {clusters_from} (its groups and near/exact duplicate "
                  "clusters), matched by id",)
    if cluster is not None:
        groups = []
        for p in preds.predictions:
            if p.meta.get(cluster) in (None, ""):
                have = ", ".join(map(repr, sorted(p.meta))) or "none"
                raise InputError(f"{preds.where(p)} has no {cluster!r} for --cluster (metadata fields: {have}); give "
                                 "every row its cluster, or name another field")
            groups.append(str(p.meta[cluster]))
    if isinstance(rep, ClassificationReport):
        gold, pred = labels_of(preds)
        est: tuple[RateEstimate, ...] = (rate_estimate([g == q for g, q in zip(gold, pred, strict=True)],
                                                       metric="accuracy", clusters=groups),)
    else:
        est = (rate_estimate([r.parsed for r in rep.per_example], metric="valid_json", clusters=groups),
               rate_estimate([r.correct for r in rep.per_example], metric="accuracy", clusters=groups))
    if est[0].clusters is not None and est[0].clusters < 20:
        notes += (f"only {est[0].clusters} clusters: cluster-robust intervals are too narrow under about 20",)
    return replace(rep, estimates=est, cluster_field=cluster, notes=notes)



ErrorsReport = ClassificationReport | ExtractionReport
