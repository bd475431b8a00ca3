"""lm-evaluation-harness runs of one or several tasks: `campaign errors` and `campaign seeds` on the
samples_<task>_<date>.jsonl files `lm_eval --log_samples` writes (harness.py reads one file).

A run is one samples file or a folder of them (lm-eval's output folder of one model: one file per task). Its
documents are keyed by task and doc_hash (doc_id where a file has no doc_hash on every line); runs are compared
only when they scored the same tasks and, task by task, the same documents (harness.paired_harness_scores), with
the metric and filter named once for every task and said in the result.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..results import Information, Record
from .harness import HarnessComparison, HarnessScores, compare_paired_scores, paired_harness_scores, read_harness_scores

if TYPE_CHECKING:
    from .seeds import SeedsReport

SCHEMA_ERRORS = "campaign.errors_harness/1"
SHOWN_IDS = 50   # failing doc_ids kept per task in the result


@dataclass(frozen=True)
class HarnessRun:
    """One lm-eval run: a HarnessScores per task, all with the same metric and filter."""

    path: str
    tasks: tuple[HarnessScores, ...]

    @property
    def metric(self) -> str:
        """The metric, or the tasks' metrics joined ('acc, exact_match') where they differ."""
        return ", ".join(dict.fromkeys(t.metric for t in self.tasks))

    @property
    def filter(self) -> str:
        return ", ".join(dict.fromkeys(t.filter for t in self.tasks))

    @property
    def mixed(self) -> bool:
        """Whether the tasks are scored with other metrics or filters (a mean over every document then mixes them)."""
        return len({(t.metric, t.filter) for t in self.tasks}) > 1

    def task(self, name: str) -> HarnessScores:
        return next(t for t in self.tasks if t.task == name)

    def source(self) -> dict[str, Any]:
        return {"path": self.path, "files": [{"path": t.path, "task": t.task, "sha256": t.sha256} for t in self.tasks]}


def samples_files(path: str | os.PathLike[str]) -> list[Path]:
    """The samples files of a run: the file itself, or a folder's samples_*.jsonl, one per task.

    Raises:
        InputError: no such file or folder, a folder without samples files, or two files of one task (two runs
            logged into one folder).
    """
    from .harness import _task

    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise InputError(f"{p}: no such file or folder; give an lm-eval samples_<task>_<date>.jsonl file or the "
                         "folder lm_eval --log_samples wrote them to")
    files = sorted(p.glob("samples_*.jsonl"))
    if not files:
        raise InputError(f"{p}: no samples_*.jsonl in this folder; run lm_eval with --log_samples, or give the "
                         "model's subfolder of --output_path")
    seen: dict[str, Path] = {}
    for f in files:
        task = _task(f)
        if task in seen:
            raise InputError(f"{p}: two runs of the task {task!r} ({seen[task].name} and {f.name}); keep one run "
                             "per folder or give the file")
        seen[task] = f
    return files


def read_harness_run(path: str | os.PathLike[str], *, metric: str | None = None,
                     filter: str | None = None) -> HarnessRun:  # noqa: A002 - the harness's own word
    """Every task of a run, each with its metric and filter: the named ones where a task holds them, else the
    task's only one (a folder mixing multiple-choice and generation tasks: acc under 'none' beside exact_match
    under 'strict-match'); see read_harness_scores.

    Raises:
        InputError: what read_harness_scores refuses (a task with several metrics or filters and none of them
            named).
    """
    files = samples_files(path)
    several = len(files) > 1
    tasks = tuple(read_harness_scores(f, metric=metric, filter=filter, only_if_held=several) for f in files)
    return HarnessRun(str(path), tasks)


def paired_runs(baseline: HarnessRun, candidate: HarnessRun) -> tuple[list[tuple[str, str]], list[float],
                                                                        list[float]]:
    """(task, key) of every document both runs scored, in the baseline's order, and the two runs' scores.

    Raises:
        InputError: tasks only one run scored, another metric or filter, documents only one run saw.
    """
    one = len(baseline.tasks) == len(candidate.tasks) == 1
    if one and not (_logged_name(baseline.tasks[0]) and _logged_name(candidate.tasks[0])):
        # one file each, not both named as lm-eval names them (samples_<task>_<date>): the names say no task
        k, x, y = paired_harness_scores(baseline.tasks[0], candidate.tasks[0])
        return [(baseline.tasks[0].task, key) for key in k], x, y
    names_b, names_c = [t.task for t in baseline.tasks], [t.task for t in candidate.tasks]
    if set(names_b) != set(names_c):
        only_b, only_c = sorted(set(names_b) - set(names_c)), sorted(set(names_c) - set(names_b))
        raise InputError(f"the runs scored other tasks ({', '.join(only_b) or 'none'} only in {baseline.path}, "
                         f"{', '.join(only_c) or 'none'} only in {candidate.path}); compare runs of the same tasks")
    keys: list[tuple[str, str]] = []
    b: list[float] = []
    c: list[float] = []
    for task in names_b:
        k, x, y = paired_harness_scores(baseline.task(task), candidate.task(task))
        keys += [(task, key) for key in k]
        b += x
        c += y
    return keys, b, c


def compare_run_folders(baseline: str | os.PathLike[str], candidate: str | os.PathLike[str], *,
                        metric: str | None = None, filter: str | None = None,  # noqa: A002
                        margin: float | None = None, guards: Sequence[str] = (),
                        non_inferiority: float | None = None) -> HarnessComparison:
    """`campaign regress` of two lm-eval runs of one or several tasks (a samples file or a run's folder each):
    their documents pooled and paired task by task (see paired_runs), named task/doc_id when there are several
    tasks; then as compare_harness_runs (McNemar and flips of a 0/1 metric, equivalence at a margin, guards)."""
    from .regress import parse_guard

    for g in guards:
        parse_guard(g)
    run_b = read_harness_run(baseline, metric=metric, filter=filter)
    run_c = read_harness_run(candidate, metric=metric or (None if run_b.mixed else run_b.metric),
                             filter=filter or (None if run_b.mixed else run_b.filter))
    pairs, b, c = paired_runs(run_b, run_c)
    several = len(run_b.tasks) > 1

    def named(task: str, key: str) -> str:
        return f"{task}/{key}" if several else key

    keys = [named(task, key) for task, key in pairs]
    doc_ids = {named(task, key): named(task, run_b.task(task).doc_ids[key]) for task, key in pairs}
    base, cand = (HarnessScores(r.path, ", ".join(t.task for t in r.tasks), r.metric, r.filter, r.tasks[0].keyed_by,
                                {}, run_sha256(r), doc_ids if r is run_b else {}) for r in (run_b, run_c))
    return compare_paired_scores(base, cand, keys, b, c, margin=margin, guards=guards,
                                 non_inferiority=non_inferiority, tasks=[task for task, _ in pairs],
                                 task_metrics={t.task: t.metric for t in run_b.tasks})


def run_sha256(run: HarnessRun) -> str:
    """One sha256 for a run: of its file when it is one, else over its files' task names and sha256s."""
    if len(run.tasks) == 1:
        return run.tasks[0].sha256
    return hashlib.sha256("".join(f"{t.task}\0{t.sha256}\n" for t in run.tasks).encode()).hexdigest()


def _logged_name(scores: HarnessScores) -> bool:
    """Whether the file is named as lm-eval names it, so that its task is known from the name."""
    return Path(scores.path).stem != scores.task


def is_binary(values: Any) -> bool:
    return all(v in (0.0, 1.0) for v in values)


@dataclass(frozen=True)
class TaskErrors(Record):
    """One task of a run: its documents, the metric's mean and, for a 0/1 metric, the documents scored 0."""

    task: str
    path: str
    sha256: str
    paired_by: str
    documents: int
    mean: float
    wrong: int | None          # None: the metric is not 0/1
    wrong_ids: tuple[str, ...]  # doc_ids, at most SHOWN_IDS
    metric: str = ""
    filter: str = ""
    se: float | None = None     # standard error of the mean, sd (n - 1) / sqrt(n): lm-eval's <metric>_stderr


@dataclass(frozen=True)
class HarnessErrors(Information):
    """`campaign errors` of an lm-eval run: per task and over all documents, the metric (named with its filter)
    and the documents it scored 0."""

    path: str
    metric: str
    filter: str
    documents: int
    mean: float
    wrong: int | None
    tasks: tuple[TaskErrors, ...]
    task: str = "lm-eval"
    schema: str = SCHEMA_ERRORS


def harness_errors(path: str | os.PathLike[str], *, metric: str | None = None,
                   filter: str | None = None) -> HarnessErrors:  # noqa: A002
    """The errors of one lm-eval run (a samples file or a folder of them; see HarnessErrors)."""
    run = read_harness_run(path, metric=metric, filter=filter)
    rows = []
    for t in run.tasks:
        values = list(t.scores.values())
        binary = is_binary(values)
        wrong = [t.doc_ids[k] for k, v in t.scores.items() if v == 0.0] if binary else []
        rows.append(TaskErrors(t.task, t.path, t.sha256, t.keyed_by, len(values), sum(values) / len(values),
                               len(wrong) if binary else None, tuple(wrong[:SHOWN_IDS]), t.metric, t.filter,
                               _stderr(values)))
    every = [v for t in run.tasks for v in t.scores.values()]
    binary = all(r.wrong is not None for r in rows)
    return HarnessErrors(run.path, run.metric, run.filter, len(every), sum(every) / len(every),
                         sum(r.wrong or 0 for r in rows) if binary else None, tuple(rows))


def _stderr(values: Sequence[float]) -> float | None:
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    return (sum((v - mean) ** 2 for v in values) / (n - 1) / n) ** 0.5


def harness_seed_runs(baseline: list[str], candidate: list[str], *, metric: str | None = None,
                      filter: str | None = None  # noqa: A002
                      ) -> tuple[list[str], list[float], list[float], Any, dict[str, Any], str]:
    """Runs of two variants, one per seed in the same order, as compare_paired takes them: (seed labels, each
    run's mean over all its documents, the per-document differences (seeds x documents, candidate - baseline),
    the source, the metric said as 'metric (filter)').

    Raises:
        InputError: not as many candidate runs as baseline runs, fewer than 1, or any run that did not score the
            same tasks and documents as the first baseline run (see paired_runs).
    """
    import numpy as np

    if not baseline or len(baseline) != len(candidate):
        raise InputError(f"{len(baseline)} baseline run(s) and {len(candidate)} candidate run(s): give one "
                         "--baseline-samples and one --candidate-samples per seed, in the same seed order")
    first = read_harness_run(baseline[0], metric=metric, filter=filter)
    if not first.mixed:
        metric, filter = first.metric, first.filter
    runs_b = [first] + [read_harness_run(p, metric=metric, filter=filter) for p in baseline[1:]]
    runs_c = [read_harness_run(p, metric=metric, filter=filter) for p in candidate]
    means_b, means_c, diffs = [], [], []
    for rb, rc in zip(runs_b, runs_c, strict=True):
        keys, _, b = paired_runs(first, rb)    # every run against the first: the same documents throughout,
        _, _, c = paired_runs(first, rc)       # in the first run's order
        means_b.append(sum(b) / len(b))
        means_c.append(sum(c) / len(c))
        diffs.append([y - x for x, y in zip(b, c, strict=True)])
    source = {"harness": {"metric": metric, "filter": filter, "paired_by": first.tasks[0].keyed_by,
                          "tasks": [t.task for t in first.tasks], "documents": len(keys),
                          "baseline": [r.source() for r in runs_b], "candidate": [r.source() for r in runs_c]}}
    return ([str(i + 1) for i in range(len(runs_b))], means_b, means_c, np.asarray(diffs, dtype=float), source,
            f"{metric} ({filter})")


def compare_harness_seeds(baseline: list[str], candidate: list[str], *, metric: str | None = None,
                          filter: str | None = None, higher_is_better: bool = True,  # noqa: A002
                          **options: Any) -> SeedsReport:
    """`campaign seeds` over lm-eval runs: each variant's runs, one per seed in the same order (a samples file
    or a run's folder each), compared paired by seed on the metric's mean over every document, with the
    seeds x documents bootstrap of the per-document differences. `options` are compare_paired's (min_effect,
    confidence, alternative, n_resamples, seed)."""
    from .seeds import compare_paired

    seeds, b, c, diffs, source, said = harness_seed_runs(baseline, candidate, metric=metric, filter=filter)
    return compare_paired(b, c, seeds=seeds, metric=said, higher_is_better=higher_is_better,
                          example_diffs=diffs if higher_is_better else -diffs, source=source, **options)


__all__ = ["HarnessErrors", "HarnessRun", "TaskErrors", "compare_harness_seeds", "compare_run_folders",
           "harness_errors", "harness_seed_runs", "paired_runs",
           "read_harness_run", "samples_files"]
