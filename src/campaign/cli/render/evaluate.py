"""The evaluate family's renderers: errors (classification or extraction), regress, seeds."""
from __future__ import annotations

from typing import Any

from . import console, escape, notes, table

SHOW = 10   # ids listed before '... (+n)'


def errors(rep: Any) -> None:
    """An error analysis: classification, extraction or an lm-eval run, by its task."""
    {"classification": classification, "lm-eval": harness_errors}.get(rep.task, extraction)(rep)


def harness_errors(rep: Any) -> None:
    """An lm-eval run's errors per task (evaluate/harness_runs.py)."""
    wrong = "" if rep.wrong is None else f" · {rep.wrong:,} scored 0"
    console.print(f"[bold]{escape(rep.path)}[/bold] · lm-eval · {escape(rep.metric)} ({escape(rep.filter)}) · "
                  f"{len(rep.tasks)} task(s) · {rep.documents:,} documents")
    mixed = len({(x.metric, x.filter) for x in rep.tasks}) > 1
    across = " (a mean across tasks scored with other metrics: read the tasks)" if mixed else ""
    console.print(f"{escape(rep.metric)} [bold]{rep.mean:.4f}[/bold] over every document{wrong}{across}")
    t = table("Per task", [("task", "left"), ("documents", "right")]
              + ([("metric (filter)", "left")] if mixed else [])
              + [("mean" if mixed else escape(rep.metric), "right"), ("se", "right"), ("scored 0", "right"),
                 ("doc_ids scored 0", "left")])
    for x in rep.tasks:
        t.add_row(escape(x.task), f"{x.documents:,}", *([f"{escape(x.metric)} ({escape(x.filter)})"] if mixed else []),
                  f"{x.mean:.4f}", "-" if x.se is None else f"{x.se:.4f}", "-" if x.wrong is None else f"{x.wrong:,}",
                  _ids(x.wrong_ids) + (f" (first {len(x.wrong_ids)})" if x.wrong and x.wrong > len(x.wrong_ids)
                                       else ""))
    console.print(t)


def _ids(ids: Any, n: int = SHOW) -> str:
    ids = list(ids)
    return ", ".join(escape(i) for i in ids[:n]) + (f", ... (+{len(ids) - n})" if len(ids) > n else "")


def _estimates(rep: Any) -> None:
    """Each rate with its standard error and 95% interval, one line."""
    parts = []
    for e in getattr(rep, "estimates", ()):
        parts.append(f"{escape(e.metric)} {e.rate:.4f} (se {e.se:.4f}, 95% interval [{e.ci95[0]:.4f}, "
                     f"{e.ci95[1]:.4f}])")
    if parts:
        e = rep.estimates[0]
        extra = f", design effect {e.design_effect:.2f}" if e.design_effect is not None else ""
        console.print(" · ".join(parts) + f" · {escape(e.method)}{extra}")


def classification(rep: Any) -> None:
    avg = rep.averages
    console.print(f"[bold]{escape(rep.source['path'])}[/bold] · classification · {rep.examples:,} examples · "
                  f"{len(rep.labels)} labels")
    console.print(f"Accuracy [bold]{rep.accuracy:.4f}[/bold] ({rep.errors:,} errors) · macro F1 "
                  f"[bold]{avg['macro']['f1']:.4f}[/bold] · weighted F1 {avg['weighted']['f1']:.4f} · micro F1 "
                  f"{avg['micro']['f1']:.4f}")
    _estimates(rep)
    t = table("Per class", [("label", "left"), ("precision", "right"), ("recall", "right"), ("F1", "right"),
                             ("support", "right"), ("predicted", "right")])
    for c in rep.per_class:
        t.add_row(escape(c.label), f"{c.precision:.3f}", f"{c.recall:.3f}", f"{c.f1:.3f}", str(c.support),
                  str(c.predicted))
    for name in ("macro", "weighted"):
        a = avg[name]
        t.add_row(f"[dim]{name} avg[/dim]", f"{a['precision']:.3f}", f"{a['recall']:.3f}", f"{a['f1']:.3f}",
                  str(rep.examples), "")
    console.print(t)
    if len(rep.labels) <= 12:
        m = table("Confusion matrix (rows gold, columns predicted; counts, row share)",
                   [("gold \\ pred", "left")] + [(escape(lab), "right") for lab in rep.labels])
        for lab, row, share in zip(rep.labels, rep.matrix, rep.matrix_normalized, strict=True):
            m.add_row(escape(lab), *(f"{c} [dim]{s:.0%}[/dim]" if c else "[dim]0[/dim]"
                                     for c, s in zip(row, share, strict=True)))
        console.print(m)
    if rep.top_confusions:
        t = table("Top confusions", [("gold", "left"), ("predicted", "left"), ("count", "right"),
                                      ("of errors", "right"), ("example ids", "left")])
        for c in rep.top_confusions:
            t.add_row(escape(c.gold), escape(c.pred), str(c.count), f"{c.share_of_errors:.0%}", _ids(c.example_ids))
        console.print(t)
    if rep.slices:
        t = table(f"By {escape(rep.slice_field)} (worst first)", [("value", "left"), ("examples", "right"),
                                                           ("errors", "right"), ("accuracy", "right"),
                                                           ("macro F1", "right")])
        for s in rep.slices:
            t.add_row(escape(s.value), str(s.examples), str(s.errors), f"{s.accuracy:.3f}", f"{s.macro_f1:.3f}")
        console.print(t)
    _review(rep)


def _review(rep: Any) -> None:
    if rep.taxonomy:
        tx = rep.taxonomy
        t = table(f"Errors per tag ({tx.tagged_errors} of {tx.errors} errors tagged)",
                   [("tag", "left"), ("errors", "right"), ("share of tagged", "right"), ("rate", "right"),
                    ("on correct", "right")])
        for c in tx.tags:
            t.add_row(escape(c.tag), str(c.errors), f"{c.share_of_tagged:.0%}", f"{c.rate:.2%}", str(c.correct))
        console.print(t)
    if rep.review_sheet:
        console.print(f"Review sheet: {escape(rep.review_sheet)} ({rep.review_rows} rows; fill the 'tag' column, then "
                      f"pass it back with --taxonomy)")
    if rep.plot:
        console.print(f"Plot: {escape(rep.plot)}")
    notes(rep.notes, escaped=True)
    if rep.taxonomy:
        notes(rep.taxonomy.notes, escaped=True)


def extraction(rep: Any) -> None:
    console.print(f"[bold]{escape(rep.source['path'])}[/bold] · extraction · {rep.examples:,} examples")
    line = f"Valid JSON [bold]{rep.valid_json:.1%}[/bold]"
    if rep.schema_valid is not None:
        line += f" · schema-valid [bold]{rep.schema_valid:.1%}[/bold]"
    if rep.required_all is not None:
        line += f" · all required fields {rep.required_all:.1%}"
    console.print(line + f" · every field right [bold]{rep.accuracy:.1%}[/bold]")
    _estimates(rep)
    t = table("Per field (over examples whose gold has it)", [("field", "left"), ("gold", "right"),
                                                               ("produced", "right"), ("exact", "right"),
                                                               ("normalized", "right")])
    for f in rep.fields:
        t.add_row(escape(f.field), str(f.gold_examples), str(f.produced), f"{f.exact_rate:.1%}",
                  f"{f.normalized_rate:.1%}")
    console.print(t)
    if rep.required:
        t = table("Required fields present", [("field", "left"), ("present", "right"), ("rate", "right")])
        for r in rep.required:
            t.add_row(escape(r.field), str(r.present), f"{r.rate:.1%}")
        console.print(t)
    if rep.extra_fields:
        t = table("Fields produced that the gold does not have", [("field", "left"), ("count", "right"),
                                                                    ("example ids", "left")])
        for e in rep.extra_fields:
            t.add_row(escape(e.field), str(e.count), _ids(e.example_ids))
        console.print(t)
    if rep.schema_violations:
        t = table("Schema violations", [("violation", "left"), ("count", "right")])
        for msg, count in rep.schema_violations:
            t.add_row(escape(msg), str(count))
        console.print(t)
    if rep.slices:
        t = table(f"By {escape(rep.slice_field)} (worst first)", [("value", "left"), ("examples", "right"),
                                                           ("valid JSON", "right"), ("all fields right", "right")])
        for s in rep.slices:
            t.add_row(escape(s.value), str(s.examples), f"{s.valid_json:.1%}", f"{s.accuracy:.1%}")
        console.print(t)
    if rep.invalid_ids:
        console.print(f"Invalid JSON, e.g.: {_ids(rep.invalid_ids)}")
    _review(rep)


def _guards_line(rep: Any) -> None:
    """The guards' verdict in one line: which failed, or that all hold."""
    failed = rep.failed_guards
    unsure = [g for g in rep.guards if g.status == "warn"]
    if failed:
        console.print(f"[red]{len(failed)} guard(s) failed[/red]: " + "; ".join(escape(g.describe()) for g in failed))
    elif unsure:
        console.print(f"[yellow]{len(unsure)} guard(s) broken on the point estimate but not shown broken[/yellow]: "
                      + "; ".join(escape(g.describe()) for g in unsure))
    elif rep.guards:
        console.print(f"[green]all {len(rep.guards)} guard(s) hold[/green]")


_VERDICT_STYLE = {"IMPROVED": "green", "EQUIVALENT": "green", "NON-INFERIOR": "green", "WORSE": "red",
                  "NOT SHOWN": "yellow"}


def _verdicts(rep: Any) -> None:
    """The difference's verdict, one line per task (evaluate/difference.py), and the checks that did not pass."""
    from dataclasses import replace

    from ...evaluate.difference import describe

    for x in getattr(rep, "verdicts", ()):
        style = _VERDICT_STYLE[x.verdict]
        line = describe(replace(x, task=None))[len(x.verdict):]
        console.print(f"[{style}]{escape(x.verdict)}[/{style}]" + escape((f" ({x.task})" if x.task else "") + line))
    for c in rep.checks:
        if c.id.startswith("difference.") and c.status != "pass":
            console.print(f"[{'red' if c.status == 'fail' else 'yellow'}]{c.status}[/]: {escape(c.why)}")


def regress(rep: Any) -> None:
    _verdicts(rep)
    _guards_line(rep)
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
        g = table("Guards (change = candidate - baseline)", [("guard", "left"), ("baseline", "right"),
                                                               ("candidate", "right"), ("change", "right"),
                                                               ("p broken (Holm)", "right"), ("status", "left")])
        for x in rep.guards:
            style = {"pass": "green", "warn": "yellow"}.get(x.status, "red")
            g.add_row(escape(x.expression), f"{x.baseline:.4f}", f"{x.candidate:.4f}", f"{x.delta:+.4f}",
                      "point check" if x.p_adjusted is None else f"{x.p_adjusted:.3g}", f"[{style}]{x.status}[/]")
        console.print(g)
    if rep.per_class:
        c = table("Per class (baseline -> candidate)", [("label", "left"), ("support", "right"),
                                                         ("precision", "right"), ("recall", "right"),
                                                         ("F1", "right"), ("F1 change", "right")])
        for x in rep.per_class:
            c.add_row(escape(x.label), str(x.support), f"{x.precision[0]:.3f} -> {x.precision[1]:.3f}",
                      f"{x.recall[0]:.3f} -> {x.recall[1]:.3f}", f"{x.f1[0]:.3f} -> {x.f1[1]:.3f}",
                      f"{x.delta_f1:+.3f}")
        console.print(c)
    if rep.per_field:
        c = table("Per field (baseline -> candidate)", [("field", "left"), ("gold", "right"), ("exact", "right"),
                                                         ("normalized", "right"), ("change", "right")])
        for x in rep.per_field:
            c.add_row(escape(x.field), str(x.gold_examples), f"{x.exact[0]:.1%} -> {x.exact[1]:.1%}",
                      f"{x.match[0]:.1%} -> {x.match[1]:.1%}", f"{x.delta_match:+.1%}")
        console.print(c)
    if not getattr(rep, "verdicts", ()):
        _equivalence(rep.equivalence)
    notes(rep.notes, escaped=True)


def _equivalence(eq: Any) -> None:
    if eq is None:   # (with a verdict, its line above says the TOST p-value)
        return
    low, high = eq.interval
    word = "[green]equivalent[/green]" if eq.equivalent else "[red]not shown equivalent[/red]"
    console.print(f"{word} within +/-{eq.margin:g}: difference {eq.difference:+.4f}, {1 - 2 * eq.alpha:.0%} interval "
                  f"[{low:+.4f}, {high:+.4f}], TOST p = {eq.p_value:.4g}")


def harness(rep: Any) -> None:
    """Two lm-eval runs of one task (evaluate/harness.py)."""
    _verdicts(rep)
    _guards_line(rep)
    console.print(f"{escape(rep.task)} · {escape(rep.metric)} ({escape(rep.filter)}) · {rep.examples:,} documents "
                  f"paired by {rep.paired_by}")
    console.print(f"{escape(rep.metric)} {rep.mean_baseline:.4f} -> [bold]{rep.mean_candidate:.4f}[/bold] "
                  f"({rep.mean_candidate - rep.mean_baseline:+.4f})")
    if rep.mcnemar is not None:
        t = rep.mcnemar
        console.print(f"right->wrong {len(rep.right_to_wrong)}, wrong->right {len(rep.wrong_to_right)} · both right "
                      f"{rep.both_right:,} · both wrong {rep.both_wrong:,} · McNemar p = {t.p_value:.4g} ({t.method})")
        if rep.right_to_wrong:
            console.print(f"[red]right -> wrong[/red]: {_ids(rep.right_to_wrong)}")
        if rep.wrong_to_right:
            console.print(f"[green]wrong -> right[/green]: {_ids(rep.wrong_to_right)}")
    elif rep.paired_t is not None:
        t = rep.paired_t
        console.print(f"paired t-test: mean difference {t.mean:+.4g}, p = {t.p_value:.4g}")
    if not getattr(rep, "verdicts", ()):
        _equivalence(rep.equivalence)
    notes(getattr(rep, "notes", ()), escaped=True)


def _fmt(x: float | None) -> str:
    return "-inf" if x is None else f"{x:+.4g}"


def seeds(rep: Any) -> None:
    style = {"convincing": "green", "no useful effect": "red", "inconclusive": "yellow"}[rep.verdict]
    sign = "candidate - baseline" if rep.higher_is_better else "baseline - candidate (lower is better)"
    ci = ("no interval" if rep.ci_low is None and rep.ci_high is None else
          f"{rep.confidence:.0%} t interval [{_fmt(rep.ci_low)}, "
          f"{'+inf' if rep.ci_high is None else f'{rep.ci_high:+.4g}'}]")
    x = rep.crossed
    if x is not None and rep.verdict_interval != "t over seeds":
        ci = (f"{rep.confidence:.0%} {rep.verdict_interval} interval [{_fmt(x.low)}, "
              f"{'+inf' if x.high is None else f'{x.high:+.4g}'}] (the verdict's; seeds alone: {ci})")
    console.print(f"[{style}]{rep.verdict}[/{style}] — {escape(rep.candidate)} vs {escape(rep.baseline)} on "
                  f"{escape(rep.metric)}: mean "
                  f"difference [bold]{rep.mean_diff:+.4g}[/bold] ({sign}), {ci}, minimum useful effect "
                  f"{rep.min_effect:g}")
    need = (f"{rep.seeds_needed} seeds for 80% power to detect {rep.power_effect:g}"
            if rep.seeds_needed else "seeds needed: unknown")
    needs = getattr(rep, "needs", None)
    if needs is not None:      # from the crossed seed, example and residual components: both counts
        from ...evaluate.seeds import in_clusters

        seeds_part = (f"{needs.seeds} seeds (at {needs.at_examples:,} examples)" if needs.seeds
                      else f"no seed count at {needs.at_examples:,} examples")
        examples_part = (f"{needs.examples:,} examples{in_clusters(needs)} (at {needs.at_seeds} seeds)"
                         if needs.examples
                         else f"no example count at {needs.at_seeds} seeds")
        need = f"{seeds_part} or {examples_part} for 80% power to detect {needs.effect:g} (crossed)"
    power = f" (power now {rep.power:.0%} with {rep.n_seeds})" if rep.power is not None else ""
    console.print(f"{rep.n_seeds} paired seeds · SD of differences "
                  f"{'-' if rep.sd_diff is None else f'{rep.sd_diff:.4g}'} · {need}{power}")
    notes(rep.warnings, "yellow", escaped=True)
    t = table("Per seed", [("seed", "left"), (escape(rep.baseline), "right"), (escape(rep.candidate), "right"),
                            ("difference", "right")])
    for s, a, b, d in zip(rep.seeds, rep.baseline_values, rep.candidate_values, rep.differences, strict=False):
        t.add_row(escape(s), f"{a:.4g}", f"{b:.4g}", f"{d:+.4g}")
    console.print(t)
    tests = table(f"Tests ({rep.alternative})", [("method", "left"), ("statistic", "right"), ("p-value", "right"),
                                                  ("interval", "left")])
    tt = rep.t_test
    t_statistic = ("-" if rep.t_statistic is None else rep.t_statistic if isinstance(rep.t_statistic, str)
                   else f"{rep.t_statistic:.4g}")
    tests.add_row("paired t", t_statistic,
                  "-" if rep.t_pvalue is None else f"{rep.t_pvalue:.4g}",
                  "-" if tt.ci_low is None and tt.ci_high is None else f"[{_fmt(tt.ci_low)}, "
                          f"{'+inf' if tt.ci_high is None else f'{tt.ci_high:+.4g}'}]")
    b = rep.bootstrap
    tests.add_row(f"bootstrap ({b.method}, {b.n_resamples:,})", "", "",
                  f"[{_fmt(b.low)}, {'+inf' if b.high is None else f'{b.high:+.4g}'}]")
    if b.method == "bca":
        tests.add_row("bootstrap (percentile)", "", "",
                      f"[{_fmt(b.percentile_low)}, "
                      f"{'+inf' if b.percentile_high is None else f'{b.percentile_high:+.4g}'}]")
    tests.add_row(f"Wilcoxon signed-rank ({rep.wilcoxon_method})", f"W+ = {rep.wilcoxon_statistic:g}",
                  f"{rep.wilcoxon_pvalue:.4g}", "")
    tests.add_row("sign test", f"{rep.sign.positive}+ / {rep.sign.negative}-", f"{rep.sign_pvalue:.4g}", "")
    scale = x.scale if x is not None else 1.0
    if x is not None:
        clustered = (f", {x.clusters:,} clusters, design effect {x.design_effect:.2f}"
                     if getattr(x, "clusters", None) and x.design_effect is not None else
                     f", {x.clusters:,} clusters" if getattr(x, "clusters", None) else "")
        tests.add_row(f"crossed variance, seeds x examples ({x.seeds} x {x.examples:,}{clustered})",
                      f"mean {x.mean:+.4g}, se {x.se:.4g}", "",
                      f"[{_fmt(x.low)}, {'+inf' if x.high is None else f'{x.high:+.4g}'}]")
    if rep.examples is not None:
        e = rep.examples
        g = getattr(e, "clusters", None)
        what = (f"bootstrap seeds x clusters ({e.seeds} x {g:,} clusters, {e.examples:,} examples)" if g else
                f"bootstrap seeds x examples ({e.seeds} x {e.examples:,})")
        tests.add_row(what,
                      f"mean {scale * e.mean_diff:+.4g}",
                      "", f"[{_fmt(None if e.low is None else scale * e.low)}, "
                          f"{'+inf' if e.high is None else f'{scale * e.high:+.4g}'}]")
    console.print(tests)
    if getattr(rep, "units", ""):
        console.print(f"Units: {escape(rep.units)}")
    if rep.plot:
        console.print(f"Plot: {escape(rep.plot)}")
    notes(rep.notes, escaped=True)
