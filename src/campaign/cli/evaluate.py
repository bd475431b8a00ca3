"""`campaign errors`, `campaign regress`, `campaign seeds`: can I trust the score?"""
from __future__ import annotations

from typing import Annotated, Any, List, Optional

import typer

from . import common as o

Task = Annotated[str, typer.Option(help="classification | extraction (JSON objects compared field by field).")]
IdField = Annotated[str, typer.Option("--id-field", help="Column holding the example id.")]
GoldField = Annotated[str, typer.Option("--gold-field", help="Column holding the gold label or object.")]
PredField = Annotated[str, typer.Option("--pred-field", help="Column holding the prediction.")]
SchemaOpt = Annotated[Optional[str], typer.Option("--schema", help="JSON Schema file the predictions must satisfy (extraction).")]
RequiredOpt = Annotated[Optional[str], typer.Option("--required", help="Comma-separated fields that must be present (extraction; default: the schema's required).")]
Seed = Annotated[int, typer.Option("--seed", help="Seed of the random generator (sampling, bootstrap).")]
SHOW = 10


def register(app: typer.Typer) -> None:
    app.command("errors", epilog="Example: campaign errors preds.jsonl --slice lang --review-sheet review.csv --plot confusion.png")(errors)
    app.command("regress", epilog="Example: campaign regress baseline.jsonl candidate.jsonl --guard \"f1\\[refund]>=-0.01\"")(regress)
    app.command("seeds", epilog="Example: campaign seeds results.csv --min-effect 0.5 --plot seeds.png")(seeds)


def _split(text: str | None) -> list[str] | None:
    return None if text is None else [t.strip() for t in text.split(",") if t.strip()]


def errors(
    predictions: Annotated[str, typer.Argument(help="JSONL, CSV/TSV or Parquet with an id, the gold value, the prediction and optional metadata.")],
    task: Task = "classification",
    slice_by: Annotated[Optional[str], typer.Option("--slice", help="Metadata field to break the metrics down by.")] = None,
    schema: SchemaOpt = None,
    required: RequiredOpt = None,
    review_sheet: Annotated[Optional[str], typer.Option("--review-sheet", help="Write a CSV sample of errors, stratified by confusion cell, to tag by hand.")] = None,
    per_cell: Annotated[int, typer.Option("--per-cell", help="Errors sampled per cell for the review sheet.")] = 5,
    taxonomy: Annotated[Optional[str], typer.Option("--taxonomy", help="CSV of id,tag filled by a person (e.g. the review sheet): errors per tag.")] = None,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Write a confusion heatmap (per-field bars for extraction): .png, .svg or .pdf.")] = None,
    top: Annotated[int, typer.Option(help="Top confusions to list.")] = 10,
    id_field: IdField = "id", gold_field: GoldField = "gold", pred_field: PredField = "pred",
    seed: Seed = 0,
    as_json: o.Json = False,
) -> None:
    """Error analysis: confusion matrix, per-class metrics, top confusions, slices; or extraction validity and fields.

    Exit 0 when analyzed, 2 on bad input.
    """
    from ..evaluate.analysis import analyze_errors

    rep = analyze_errors(predictions, task=task, id_field=id_field, gold_field=gold_field, pred_field=pred_field,
                         schema=schema, required=_split(required), slice_by=slice_by, top=top,
                         review_sheet=review_sheet, per_cell=per_cell, taxonomy=taxonomy, seed=seed, plot=plot)
    o.emit(rep, _render_classification if rep.task == "classification" else _render_extraction, as_json)


def regress(
    baseline: Annotated[str, typer.Argument(help="Predictions of the baseline (JSONL, CSV/TSV or Parquet).")],
    candidate: Annotated[str, typer.Argument(help="Predictions of the candidate, on the same ids.")],
    guard: Annotated[Optional[List[str]], typer.Option("--guard", help="What must not get worse, as a bound on candidate - baseline: \"f1\\[refund]>=-0.01\", \"valid_json>=0\". Repeatable.")] = None,
    task: Task = "classification",
    schema: SchemaOpt = None,
    required: RequiredOpt = None,
    id_field: IdField = "id", gold_field: GoldField = "gold", pred_field: PredField = "pred",
    as_json: o.Json = False,
) -> None:
    """Baseline vs candidate: flips with ids, per-class deltas, McNemar's test, guards.

    Exit 0 when every guard holds, 1 when one fails, 2 on bad input (e.g. different ids).
    """
    from ..evaluate.regress import regress as run_regress

    rep = run_regress(baseline, candidate, task=task, guards=guard or (), schema=schema, required=_split(required),
                      id_field=id_field, gold_field=gold_field, pred_field=pred_field)
    o.emit(rep, _render_regress, as_json, failed=not rep.passed)


def seeds(
    results: Annotated[str, typer.Argument(help="JSONL, CSV/TSV or Parquet with rows of variant, seed, metric.")],
    metric: Annotated[str, typer.Option("--metric-field", "--metric", help="Column holding the metric.")] = "metric",
    variant_field: Annotated[str, typer.Option("--variant-field", help="Column holding the variant name.")] = "variant",
    seed_field: Annotated[str, typer.Option("--seed-field", help="Column holding the seed.")] = "seed",
    baseline: Annotated[Optional[str], typer.Option(help="Baseline variant (default: the first in the file).")] = None,
    candidate: Annotated[Optional[str], typer.Option(help="Candidate variant (default: the other one).")] = None,
    min_effect: Annotated[float, typer.Option("--min-effect", help="Smallest improvement worth having, in metric units.")] = 0.0,
    examples: Annotated[Optional[str], typer.Option("--examples", help="Per-example scores (variant, seed, id, score) for a seeds x examples bootstrap.")] = None,
    score_field: Annotated[str, typer.Option("--score-field", help="Column of the per-example score.")] = "score",
    id_field: Annotated[str, typer.Option("--id-field", help="Column of the example id in the per-example scores.")] = "id",
    lower_is_better: Annotated[bool, typer.Option("--lower-is-better", help="The metric is a loss or an error rate: improvement = baseline - candidate.")] = False,
    confidence: Annotated[float, typer.Option(help="Confidence level of the intervals.")] = 0.95,
    alternative: Annotated[str, typer.Option(help="two-sided | greater (candidate better) | less.")] = "two-sided",
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = 10_000,
    seed: Seed = 0,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Write a dispersion plot: .png, .svg or .pdf.")] = None,
    as_json: o.Json = False,
) -> None:
    """Seed variance: is the difference between two variants larger than the noise between seeds?

    Exit 0 whatever the verdict, 2 on bad input (missing columns, unpaired seeds, non-numeric metrics).
    """
    from ..evaluate.seeds import compare_seeds
    from .render import progress_reporter

    with progress_reporter("seeds") as tell:    # a spinner: the per-example bootstrap can take seconds
        tell(f"{resamples:,} bootstrap resamples" + (" over seeds x examples" if examples else ""))
        rep = compare_seeds(results, metric=metric, baseline=baseline, candidate=candidate, examples=examples,
                            score_field=score_field, min_effect=min_effect, confidence=confidence,
                            alternative=alternative, higher_is_better=not lower_is_better, n_resamples=resamples,
                            seed=seed, variant_field=variant_field, seed_field=seed_field, id_field=id_field,
                            plot=plot)
    o.emit(rep, _render_seeds, as_json)


# ---- rendering: the verdict first, then tables, then notes ----------------------------------------------------

def _e(text: Any) -> str:
    """User text (labels, ids, paths, guards) escaped, so '[refund]' is not read as rich markup."""
    from rich.markup import escape

    return escape(str(text))


def _table(title: str, columns: list[tuple[str, str]]) -> Any:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for name, justify in columns:
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    return t


def _notes(notes: Any, style: str = "dim") -> None:
    from .render import console

    for n in notes:
        console.print(f"[{style}]- {_e(n)}[/{style}]")


def _ids(ids: Any, n: int = SHOW) -> str:
    ids = list(ids)
    return ", ".join(_e(i) for i in ids[:n]) + (f", ... (+{len(ids) - n})" if len(ids) > n else "")


def _render_classification(rep: Any) -> None:
    from .render import console

    avg = rep.averages
    console.print(f"[bold]{_e(rep.source['path'])}[/bold] · classification · {rep.examples:,} examples · "
                  f"{len(rep.labels)} labels")
    console.print(f"Accuracy [bold]{rep.accuracy:.4f}[/bold] ({rep.errors:,} errors) · macro F1 "
                  f"[bold]{avg['macro']['f1']:.4f}[/bold] · weighted F1 {avg['weighted']['f1']:.4f} · micro F1 "
                  f"{avg['micro']['f1']:.4f}")
    t = _table("Per class", [("label", "left"), ("precision", "right"), ("recall", "right"), ("F1", "right"),
                             ("support", "right"), ("predicted", "right")])
    for c in rep.per_class:
        t.add_row(_e(c.label), f"{c.precision:.3f}", f"{c.recall:.3f}", f"{c.f1:.3f}", str(c.support), str(c.predicted))
    for name in ("macro", "weighted"):
        a = avg[name]
        t.add_row(f"[dim]{name} avg[/dim]", f"{a['precision']:.3f}", f"{a['recall']:.3f}", f"{a['f1']:.3f}",
                  str(rep.examples), "")
    console.print(t)
    if len(rep.labels) <= 12:
        m = _table("Confusion matrix (rows gold, columns predicted; counts, row share)",
                   [("gold \\ pred", "left")] + [(_e(lab), "right") for lab in rep.labels])
        for lab, row, share in zip(rep.labels, rep.matrix, rep.matrix_normalized):
            m.add_row(_e(lab), *(f"{c} [dim]{s:.0%}[/dim]" if c else "[dim]0[/dim]" for c, s in zip(row, share)))
        console.print(m)
    if rep.top_confusions:
        t = _table("Top confusions", [("gold", "left"), ("predicted", "left"), ("count", "right"),
                                      ("of errors", "right"), ("example ids", "left")])
        for c in rep.top_confusions:
            t.add_row(_e(c.gold), _e(c.pred), str(c.count), f"{c.share_of_errors:.0%}", _ids(c.example_ids))
        console.print(t)
    if rep.slices:
        t = _table(f"By {_e(rep.slice_field)} (worst first)", [("value", "left"), ("examples", "right"),
                                                           ("errors", "right"), ("accuracy", "right"),
                                                           ("macro F1", "right")])
        for s in rep.slices:
            t.add_row(_e(s.value), str(s.examples), str(s.errors), f"{s.accuracy:.3f}", f"{s.macro_f1:.3f}")
        console.print(t)
    _render_review(rep)


def _render_review(rep: Any) -> None:
    from .render import console

    if rep.taxonomy:
        tx = rep.taxonomy
        t = _table(f"Errors per tag ({tx.tagged_errors} of {tx.errors} errors tagged)",
                   [("tag", "left"), ("errors", "right"), ("share of tagged", "right"), ("rate", "right"),
                    ("on correct", "right")])
        for c in tx.tags:
            t.add_row(_e(c.tag), str(c.errors), f"{c.share_of_tagged:.0%}", f"{c.rate:.2%}", str(c.correct))
        console.print(t)
    if rep.review_sheet:
        console.print(f"Review sheet: {_e(rep.review_sheet)} ({rep.review_rows} rows; fill the 'tag' column, then "
                      f"pass it back with --taxonomy)")
    if rep.plot:
        console.print(f"Plot: {_e(rep.plot)}")
    _notes(rep.notes)
    if rep.taxonomy:
        _notes(rep.taxonomy.notes)


def _render_extraction(rep: Any) -> None:
    from .render import console

    console.print(f"[bold]{_e(rep.source['path'])}[/bold] · extraction · {rep.examples:,} examples")
    line = f"Valid JSON [bold]{rep.valid_json:.1%}[/bold]"
    if rep.schema_valid is not None:
        line += f" · schema-valid [bold]{rep.schema_valid:.1%}[/bold]"
    if rep.required_all is not None:
        line += f" · all required fields {rep.required_all:.1%}"
    console.print(line + f" · every field right [bold]{rep.accuracy:.1%}[/bold]")
    t = _table("Per field (over examples whose gold has it)", [("field", "left"), ("gold", "right"),
                                                               ("produced", "right"), ("exact", "right"),
                                                               ("normalized", "right")])
    for f in rep.fields:
        t.add_row(_e(f.field), str(f.gold_examples), str(f.produced), f"{f.exact_rate:.1%}", f"{f.normalized_rate:.1%}")
    console.print(t)
    if rep.required:
        t = _table("Required fields present", [("field", "left"), ("present", "right"), ("rate", "right")])
        for r in rep.required:
            t.add_row(_e(r.field), str(r.present), f"{r.rate:.1%}")
        console.print(t)
    if rep.extra_fields:
        t = _table("Fields produced that the gold does not have", [("field", "left"), ("count", "right"),
                                                                    ("example ids", "left")])
        for e in rep.extra_fields:
            t.add_row(_e(e.field), str(e.count), _ids(e.example_ids))
        console.print(t)
    if rep.schema_violations:
        t = _table("Schema violations", [("violation", "left"), ("count", "right")])
        for msg, count in rep.schema_violations:
            t.add_row(_e(msg), str(count))
        console.print(t)
    if rep.slices:
        t = _table(f"By {_e(rep.slice_field)} (worst first)", [("value", "left"), ("examples", "right"),
                                                           ("valid JSON", "right"), ("all fields right", "right")])
        for s in rep.slices:
            t.add_row(_e(s.value), str(s.examples), f"{s.valid_json:.1%}", f"{s.accuracy:.1%}")
        console.print(t)
    if rep.invalid_ids:
        console.print(f"Invalid JSON, e.g.: {_ids(rep.invalid_ids)}")
    _render_review(rep)


def _render_regress(rep: Any) -> None:
    from .render import console

    failed = rep.failed_guards
    if failed:
        console.print(f"[red]{len(failed)} guard(s) failed[/red]: " + "; ".join(_e(g.describe()) for g in failed))
    elif rep.guards:
        console.print(f"[green]all {len(rep.guards)} guard(s) hold[/green]")
    t = rep.mcnemar
    p = f"p = {t.p_value:.4g}" + (f", statistic {t.statistic:.4g}" if t.statistic is not None else "")
    console.print(f"Accuracy {rep.accuracy_baseline:.4f} -> [bold]{rep.accuracy_candidate:.4f}[/bold] "
                  f"({rep.accuracy_candidate - rep.accuracy_baseline:+.4f}) on {rep.examples:,} examples · "
                  f"right->wrong {len(rep.right_to_wrong)}, wrong->right {len(rep.wrong_to_right)} · "
                  f"McNemar {p} ({t.method})")
    console.print(f"both right {rep.both_right:,} · both wrong {rep.both_wrong:,}")
    if rep.right_to_wrong:
        console.print(f"[red]right -> wrong[/red]: {_ids(rep.right_to_wrong)}")
    if rep.wrong_to_right:
        console.print(f"[green]wrong -> right[/green]: {_ids(rep.wrong_to_right)}")
    if rep.guards:
        g = _table("Guards (change = candidate - baseline)", [("guard", "left"), ("baseline", "right"),
                                                               ("candidate", "right"), ("change", "right"),
                                                               ("status", "left")])
        for x in rep.guards:
            g.add_row(_e(x.expression), f"{x.baseline:.4f}", f"{x.candidate:.4f}", f"{x.delta:+.4f}",
                      "[green]pass[/green]" if x.passed else "[red]fail[/red]")
        console.print(g)
    if rep.per_class:
        c = _table("Per class (baseline -> candidate)", [("label", "left"), ("support", "right"),
                                                         ("precision", "right"), ("recall", "right"),
                                                         ("F1", "right"), ("F1 change", "right")])
        for x in rep.per_class:
            c.add_row(_e(x.label), str(x.support), f"{x.precision[0]:.3f} -> {x.precision[1]:.3f}",
                      f"{x.recall[0]:.3f} -> {x.recall[1]:.3f}", f"{x.f1[0]:.3f} -> {x.f1[1]:.3f}",
                      f"{x.delta_f1:+.3f}")
        console.print(c)
    if rep.per_field:
        c = _table("Per field (baseline -> candidate)", [("field", "left"), ("gold", "right"), ("exact", "right"),
                                                         ("normalized", "right"), ("change", "right")])
        for x in rep.per_field:
            c.add_row(_e(x.field), str(x.gold_examples), f"{x.exact[0]:.1%} -> {x.exact[1]:.1%}",
                      f"{x.match[0]:.1%} -> {x.match[1]:.1%}", f"{x.delta_match:+.1%}")
        console.print(c)
    _notes(rep.notes)


def _fmt(x: float | None) -> str:
    return "-inf" if x is None else f"{x:+.4g}"


def _render_seeds(rep: Any) -> None:
    from .render import console

    style = {"convincing": "green", "no useful effect": "red", "inconclusive": "yellow"}[rep.verdict]
    sign = "candidate - baseline" if rep.higher_is_better else "baseline - candidate (lower is better)"
    ci = "no interval" if rep.ci_low is None and rep.ci_high is None else \
        f"{rep.confidence:.0%} t interval [{_fmt(rep.ci_low)}, {'+inf' if rep.ci_high is None else f'{rep.ci_high:+.4g}'}]"
    console.print(f"[{style}]{rep.verdict}[/{style}] — {_e(rep.candidate)} vs {_e(rep.baseline)} on {_e(rep.metric)}: mean "
                  f"difference [bold]{rep.mean_diff:+.4g}[/bold] ({sign}), {ci}, minimum useful effect "
                  f"{rep.min_effect:g}")
    need = (f"{rep.seeds_needed} seeds for 80% power to detect {rep.power_effect:g}"
            if rep.seeds_needed else "seeds needed: unknown")
    power = f" (power now {rep.power:.0%} with {rep.n_seeds})" if rep.power is not None else ""
    console.print(f"{rep.n_seeds} paired seeds · SD of differences "
                  f"{'-' if rep.sd_diff is None else f'{rep.sd_diff:.4g}'} · {need}{power}")
    _notes(rep.warnings, "yellow")
    t = _table("Per seed", [("seed", "left"), (_e(rep.baseline), "right"), (_e(rep.candidate), "right"),
                            ("difference", "right")])
    for s, a, b, d in zip(rep.seeds, rep.baseline_values, rep.candidate_values, rep.differences):
        t.add_row(_e(s), f"{a:.4g}", f"{b:.4g}", f"{d:+.4g}")
    console.print(t)
    tests = _table(f"Tests ({rep.alternative})", [("method", "left"), ("statistic", "right"), ("p-value", "right"),
                                                  ("interval", "left")])
    tt = rep.t_test
    tests.add_row("paired t", "-" if rep.t_statistic is None else str(rep.t_statistic if isinstance(rep.t_statistic, str) else f"{rep.t_statistic:.4g}"),
                  "-" if rep.t_pvalue is None else f"{rep.t_pvalue:.4g}",
                  "-" if tt.ci_low is None and tt.ci_high is None else f"[{_fmt(tt.ci_low)}, {'+inf' if tt.ci_high is None else f'{tt.ci_high:+.4g}'}]")
    b = rep.bootstrap
    tests.add_row(f"bootstrap ({b.method}, {b.n_resamples:,})", "", "",
                  f"[{_fmt(b.low)}, {'+inf' if b.high is None else f'{b.high:+.4g}'}]")
    if b.method == "bca":
        tests.add_row("bootstrap (percentile)", "", "",
                      f"[{_fmt(b.percentile_low)}, {'+inf' if b.percentile_high is None else f'{b.percentile_high:+.4g}'}]")
    tests.add_row(f"Wilcoxon signed-rank ({rep.wilcoxon_method})", f"W+ = {rep.wilcoxon_statistic:g}",
                  f"{rep.wilcoxon_pvalue:.4g}", "")
    tests.add_row("sign test", f"{rep.sign.positive}+ / {rep.sign.negative}-", f"{rep.sign_pvalue:.4g}", "")
    if rep.examples is not None:
        e = rep.examples
        tests.add_row(f"bootstrap seeds x examples ({e.seeds} x {e.examples:,})", f"mean {e.mean_diff:+.4g}", "",
                      f"[{_fmt(e.low)}, {'+inf' if e.high is None else f'{e.high:+.4g}'}]")
    console.print(tests)
    if rep.plot:
        console.print(f"Plot: {_e(rep.plot)}")
    _notes(rep.notes)
