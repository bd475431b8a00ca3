"""`campaign errors`, `campaign regress`, `campaign seeds`: can I trust the score?"""
from __future__ import annotations

from typing import Annotated

import typer

from . import common as o

# Help panels of these commands (beside common's INPUT and OUTPUT).
TASK, STATS, VERDICT, REVIEW, HARNESS = "Task", "Statistics", "Verdict", "Review sheet", "lm-eval runs"

Task = Annotated[str, typer.Option(help="classification | extraction (JSON objects compared field by field).",
                                   rich_help_panel=TASK)]
IdField = Annotated[str, typer.Option("--id-field", help="Column holding the example id.", rich_help_panel=o.INPUT)]
GoldField = Annotated[str, typer.Option("--gold-field", help="Column holding the gold label or object.",
                                        rich_help_panel=o.INPUT)]
PredField = Annotated[str, typer.Option("--pred-field", help="Column holding the prediction.", rich_help_panel=o.INPUT)]
SchemaOpt = Annotated[str | None, typer.Option("--schema", help="JSON Schema file the predictions must satisfy "
        "(extraction).", rich_help_panel=TASK)]
RequiredOpt = Annotated[str | None, typer.Option("--required", help="Comma-separated fields that must be present "
        "(extraction; default: the schema's required).", rich_help_panel=TASK)]
Seed = Annotated[int, typer.Option("--seed", help="Seed of the random generator (sampling, bootstrap).",
                                   rich_help_panel=STATS)]


def register(app: typer.Typer) -> None:
    app.command("errors", epilog="Example: campaign errors preds.jsonl --slice lang --review-sheet review.csv --plot "
                                 "confusion.png")(errors)
    app.command("regress", epilog="Example: campaign regress baseline.jsonl candidate.jsonl --guard "
                                  "\"f1\\[refund]>=-0.01\"")(regress)
    app.command("seeds", epilog="Example: campaign seeds results.csv --min-effect 0.5 --plot seeds.png")(seeds)


def _split(text: str | None) -> list[str] | None:
    return None if text is None else [t.strip() for t in text.split(",") if t.strip()]


MetricName = Annotated[str | None, typer.Option("--metric", help="lm-eval samples files: the metric to compare "
        "(exact_match, acc...; default: the one the file scores).", rich_help_panel=HARNESS)]
HarnessFilter = Annotated[str | None, typer.Option("--filter", help="lm-eval samples files: the filter to compare "
        "(strict-match...) when the file holds several.", rich_help_panel=HARNESS)]


def _not_harness(what: str, **given: object) -> None:
    """Refuse options that have no meaning for an lm-eval run (or, with what='prediction files', for those)."""
    named = [name for name, value in given.items() if value not in (None, False, ())]
    if named:
        from ..errors import InputError

        raise InputError(f"{', '.join(named)} do(es) not apply to {what}; leave them out")


def _is_harness(path: str | None) -> bool:
    from pathlib import Path

    from ..evaluate.harness import is_harness_samples

    return path is not None and (is_harness_samples(path) or (Path(path).is_dir()
                                                                and any(Path(path).glob("samples_*.jsonl"))))


def errors(
    predictions: Annotated[str, typer.Argument(help="JSONL, CSV/TSV or Parquet with an id, the gold value, the "
            "prediction and optional metadata; or an lm-eval run: a samples_<task>_<date>.jsonl file or the folder of "
            "them (one per task).")],
    task: Task = "classification",
    slice_by: Annotated[str | None, typer.Option(
        "--slice", help="Metadata field to break the metrics down by.", rich_help_panel=STATS)] = None,
    schema: SchemaOpt = None,
    required: RequiredOpt = None,
    review_sheet: Annotated[str | None, typer.Option("--review-sheet", help="Write a CSV sample of errors, stratified "
            "by confusion cell, to tag by hand.", rich_help_panel=REVIEW)] = None,
    per_cell: Annotated[int, typer.Option("--per-cell", help="Errors sampled per cell for the review sheet.",
                                          rich_help_panel=REVIEW)] = 5,
    taxonomy: Annotated[str | None, typer.Option("--taxonomy", help="CSV of id,tag filled by a person (e.g. the review "
            "sheet): errors per tag.", rich_help_panel=REVIEW)] = None,
    plot: Annotated[str | None, typer.Option("--plot", help="Write a confusion heatmap (per-field bars for "
            "extraction): .png, .svg or .pdf.", rich_help_panel=o.OUTPUT)] = None,
    top: Annotated[int, typer.Option(help="Top confusions to list.", rich_help_panel=STATS)] = 10,
    id_field: IdField = "id", gold_field: GoldField = "gold", pred_field: PredField = "pred",
    seed: Seed = 0,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Metadata field grouping related examples (movie, "
            "user, document): standard errors and intervals become cluster-robust.", rich_help_panel=STATS)] = None,
    clusters_from: Annotated[str | None, typer.Option("--clusters-from", help="A split_manifest.json of `campaign "
            "split` (made with --id): its groups and duplicate clusters are the clusters, matched by --id-field.",
            rich_help_panel=STATS)] = None,
    metric: MetricName = None,
    harness_filter: HarnessFilter = None,
    as_json: o.Json = False,
) -> None:
    """Error analysis: accuracy with its standard error and 95% interval (Wilson; cluster-robust with --cluster),
    confusion matrix, per-class metrics, top confusions, slices; or extraction validity and fields.
    An lm-eval run (lm_eval --log_samples): the metric per task and the documents it scored 0.

    Exit 0 when analyzed, 2 on bad input.
    """
    from .. import plots
    from ..evaluate.analysis import ClassificationReport, analyze_errors
    from .render import escape, progress_reporter
    from .render.evaluate import errors as render_errors

    if _is_harness(predictions):
        from ..evaluate.harness_runs import harness_errors

        _not_harness("an lm-eval run", **{"--slice": slice_by, "--schema": schema, "--required": required,
                                          "--review-sheet": review_sheet, "--taxonomy": taxonomy, "--plot": plot,
                                          "--cluster": cluster, "--clusters-from": clusters_from})
        o.emit(harness_errors(predictions, metric=metric, filter=harness_filter), render_errors, as_json)
        return
    _not_harness("prediction files", **{"--metric": metric, "--filter": harness_filter})
    o.plot_file(plot)
    with progress_reporter("errors", enabled=not as_json) as tell:   # scikit-learn's import alone takes a second
        tell(f"{escape(task)} metrics of {escape(predictions)}" + (", the plot" if plot else ""))
        rep = analyze_errors(predictions, task=task, id_field=id_field, gold_field=gold_field, pred_field=pred_field,
                             schema=schema, required=_split(required), slice_by=slice_by, top=top,
                             review_sheet=review_sheet, per_cell=per_cell, taxonomy=taxonomy, seed=seed,
                             cluster=cluster, clusters_from=clusters_from)
        rep = o.with_plot(rep, plots.confusion if isinstance(rep, ClassificationReport) else plots.fields, plot)
    o.emit(rep, render_errors, as_json)


def regress(
    baseline: Annotated[str, typer.Argument(help="Predictions of the baseline (JSONL, CSV/TSV or Parquet).")],
    candidate: Annotated[str, typer.Argument(help="Predictions of the candidate, on the same ids.")],
    guard: Annotated[list[str] | None, typer.Option("--guard", help="What must not get worse, as a bound on candidate "
            "- baseline: \"f1\\[refund]>=-0.01\", \"valid_json>=0\". Repeatable.", rich_help_panel=VERDICT)] = None,
    task: Task = "classification",
    schema: SchemaOpt = None,
    required: RequiredOpt = None,
    id_field: IdField = "id", gold_field: GoldField = "gold", pred_field: PredField = "pred",
    equivalence_margin: Annotated[float | None, typer.Option("--equivalence-margin", help="Also test equivalence: "
            "that the candidate is within +/- this of the baseline (TOST on the paired scores), in the metric's units "
            "(0.01 = one point).", rich_help_panel=VERDICT)] = None,
    old_margin: Annotated[float | None, typer.Option("--margin", hidden=True)] = None,
    non_inferiority: Annotated[float | None, typer.Option("--non-inferiority", help="Test that the candidate is "
            "not worse by this much or more (one-sided, at 5%), in the metric's units (0.01 = one point).",
            rich_help_panel=VERDICT)] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Metadata field grouping related examples (movie, "
            "user, document, template): the difference's interval and p-value become cluster-robust.",
            rich_help_panel=STATS)] = None,
    clusters_from: Annotated[str | None, typer.Option("--clusters-from", help="A split_manifest.json of `campaign "
            "split` (made with --id): its groups and duplicate clusters are the clusters, matched by --id-field.",
            rich_help_panel=STATS)] = None,
    metric: MetricName = None,
    harness_filter: HarnessFilter = None,
    as_json: o.Json = False,
) -> None:
    """Baseline vs candidate: the paired difference with its 95% interval and a verdict (IMPROVED, WORSE, NOT
    SHOWN, EQUIVALENT at --equivalence-margin, NON-INFERIOR at --non-inferiority), flips with ids, per-class
    deltas, McNemar's test, guards. Reads lm-eval's samples_<task>_<date>.jsonl (lm_eval --log_samples) too, paired
    document by document, one verdict per task (Holm-corrected).

    Exit 0 when the candidate is not significantly worse and every guard holds (and the candidate is within
    --equivalence-margin, or not worse than --non-inferiority), 1 when not, 2 on bad input (e.g. different ids or
    documents).
    """
    from ..evaluate.regress import regress as run_regress
    from .render import progress_reporter
    from .render.evaluate import regress as render_regress

    margin = o.renamed(old_margin, equivalence_margin, old_name="regress --margin",
                       new_name="regress --equivalence-margin")
    if _is_harness(baseline) or _is_harness(candidate):
        from ..evaluate.harness_runs import compare_run_folders
        from .render.evaluate import harness as render_harness

        _not_harness("lm-eval runs", **{"--cluster": cluster, "--clusters-from": clusters_from})
        with progress_reporter("regress", enabled=not as_json) as tell:
            tell("pairing the two runs' documents")
            runs = compare_run_folders(baseline, candidate, metric=metric, filter=harness_filter, margin=margin,
                                       guards=guard or (), non_inferiority=non_inferiority)
        o.emit(runs, render_harness, as_json)
        return
    if metric is not None or harness_filter is not None:
        from ..errors import InputError

        raise InputError("--metric and --filter name what to compare in lm-eval samples files; these are "
                         "prediction files (compare with --guard)")
    with progress_reporter("regress", enabled=not as_json) as tell:
        tell(f"flips, McNemar's test and {len(guard or ())} guard(s) over the shared ids")
        rep = run_regress(baseline, candidate, task=task, guards=guard or (), schema=schema,
                          required=_split(required), id_field=id_field, gold_field=gold_field, pred_field=pred_field,
                          margin=margin, non_inferiority=non_inferiority, cluster=cluster,
                          clusters_from=clusters_from)
    o.emit(rep, render_regress, as_json)


def seeds(
    results: Annotated[str | None, typer.Argument(help="JSONL, CSV/TSV or Parquet with rows of variant, seed, metric "
            "(or give lm-eval runs with --baseline-samples and --candidate-samples).")] = None,
    metric: Annotated[str | None, typer.Option("--metric-field", "--metric", help="Column holding the metric (default "
            "'metric'); with lm-eval runs, the metric's name (default: the one the files score).",
            rich_help_panel=o.INPUT)] = None,
    variant_field: Annotated[str, typer.Option("--variant-field", help="Column holding the variant name.",
                                               rich_help_panel=o.INPUT)] = "variant",
    seed_field: Annotated[str, typer.Option("--seed-field", help="Column holding the seed.",
                                            rich_help_panel=o.INPUT)] = "seed",
    baseline: Annotated[str | None, typer.Option(help="Baseline variant (default: the first in the file).",
                                                 rich_help_panel=o.INPUT)] = None,
    candidate: Annotated[str | None, typer.Option(help="Candidate variant (default: the other one).",
                                                  rich_help_panel=o.INPUT)] = None,
    min_effect: Annotated[float, typer.Option(
        "--min-effect", help="Smallest improvement worth having, in metric units.", rich_help_panel=VERDICT)] = 0.0,
    examples: Annotated[str | None, typer.Option("--example-scores", help="Per-example scores (variant, seed, id, "
            "score) for a seeds x examples bootstrap.", rich_help_panel=o.INPUT)] = None,
    old_examples: Annotated[str | None, typer.Option("--examples", hidden=True)] = None,
    score_field: Annotated[str, typer.Option("--score-field", help="Column of the per-example score.",
                                             rich_help_panel=o.INPUT)] = "score",
    id_field: Annotated[str, typer.Option(
        "--id-field", help="Column of the example id in the per-example scores.", rich_help_panel=o.INPUT)] = "id",
    cluster: Annotated[str | None, typer.Option("--cluster", help="Column of the per-example scores grouping related "
            "examples (movie, document, template): the crossed interval's example term becomes cluster-robust and "
            "the bootstrap resamples clusters.",
            rich_help_panel=STATS)] = None,
    clusters_from: Annotated[str | None, typer.Option("--clusters-from", help="A split_manifest.json of `campaign "
            "split` (made with --id): its groups and duplicate clusters are the clusters, matched by --id-field.",
            rich_help_panel=STATS)] = None,
    lower_is_better: Annotated[bool, typer.Option("--lower-is-better", help="The metric is a loss or an error rate: "
            "improvement = baseline - candidate.", rich_help_panel=VERDICT)] = False,
    confidence: Annotated[float, typer.Option(help="Confidence level of the intervals.", rich_help_panel=STATS)] = 0.95,
    alternative: Annotated[str, typer.Option(help="two-sided | greater (candidate better) | less.",
                                             rich_help_panel=VERDICT)] = "two-sided",
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.", rich_help_panel=STATS)] = 10_000,
    seed: Seed = 0,
    plot: Annotated[str | None, typer.Option("--plot", help="Write a dispersion plot: .png, .svg or .pdf.",
                                             rich_help_panel=o.OUTPUT)] = None,
    baseline_samples: Annotated[list[str] | None, typer.Option("--baseline-samples", help="An lm-eval run of the "
            "baseline (a samples_<task>_<date>.jsonl file or the folder of them), one per seed. Repeatable.",
            rich_help_panel=HARNESS)] = None,
    candidate_samples: Annotated[list[str] | None, typer.Option("--candidate-samples", help="An lm-eval run of the "
            "candidate per seed, in the order of --baseline-samples. Repeatable.", rich_help_panel=HARNESS)] = None,
    harness_filter: HarnessFilter = None,
    as_json: o.Json = False,
) -> None:
    """Seed variance: is the difference between two variants larger than the noise between seeds?
    Reads lm-eval runs too (one per seed and variant), paired by seed and, within a seed, document by document.

    Exit 0 whatever the verdict, 2 on bad input (missing columns, unpaired seeds or documents, non-numeric metrics).
    """
    from .. import plots
    from ..evaluate.seeds import compare_seeds
    from .render import progress_reporter
    from .render.evaluate import seeds as render_seeds

    examples = o.renamed(old_examples, examples, old_name="seeds --examples", new_name="seeds --example-scores")
    o.plot_file(plot)
    if baseline_samples or candidate_samples:
        from ..evaluate.harness_runs import compare_harness_seeds

        _not_harness("lm-eval runs", **{"RESULTS": results, "--example-scores": examples, "--baseline": baseline,
                                        "--candidate": candidate, "--cluster": cluster,
                                        "--clusters-from": clusters_from})
        with progress_reporter("seeds", enabled=not as_json) as tell:
            tell(f"{resamples:,} bootstrap resamples over seeds x documents")
            rep = compare_harness_seeds(baseline_samples or [], candidate_samples or [], metric=metric,
                                        filter=harness_filter, higher_is_better=not lower_is_better,
                                        min_effect=min_effect, confidence=confidence, alternative=alternative,
                                        n_resamples=resamples, seed=seed)
            rep = o.with_plot(rep, plots.seeds, plot)
        o.emit(rep, render_seeds, as_json)
        return
    if results is None:
        from ..errors import InputError

        raise InputError("no results: give a results file (variant, seed, metric rows), or lm-eval runs with "
                         "--baseline-samples and --candidate-samples (one each per seed)")
    _not_harness("a results file", **{"--filter": harness_filter})
    # a spinner: the per-example bootstrap can take seconds
    with progress_reporter("seeds", enabled=not as_json) as tell:
        tell(f"{resamples:,} bootstrap resamples" + ("" if not examples else " over seeds x clusters"
                                                      if cluster or clusters_from else " over seeds x examples"))
        rep = compare_seeds(results, metric=metric or "metric", baseline=baseline, candidate=candidate,
                            examples=examples, score_field=score_field, min_effect=min_effect, confidence=confidence,
                            alternative=alternative, higher_is_better=not lower_is_better, n_resamples=resamples,
                            seed=seed, variant_field=variant_field, seed_field=seed_field, id_field=id_field,
                            cluster=cluster, clusters_from=clusters_from)
        rep = o.with_plot(rep, plots.seeds, plot)
    o.emit(rep, render_seeds, as_json)
