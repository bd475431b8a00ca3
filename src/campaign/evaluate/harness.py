"""lm-evaluation-harness's per-sample logs as paired scores: `lm_eval --log_samples` writes one
samples_<task>_<date>.jsonl per task, a line per document and filter with `doc_id`, `doc`, `target`, `resps`,
`filtered_resps`, `filter`, `metrics` (the names scored), the hashes `doc_hash`, `prompt_hash`, `target_hash`, and
each metric's value under its name ("exact_match": 1.0).

A baseline and a candidate are paired document by document: by `doc_hash` when every line has one (the same
document whatever its position), else by `doc_id`; runs that did not see the same documents are refused, never
compared on their overlap. A pair must also be one document: the task named inside the samples (where a log has one),
the target_hash and, paired by doc_id, the doc_hash, prompt_hash and the doc itself agree wherever both lines have
them, so that renamed files of two tasks (doc_ids 0..n in both) are refused rather than paired by position.
The metric is named (or the one the file scored), and so is the filter when the file holds several ("strict-match",
"flexible-extract"): what was compared is said, never guessed.
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..results import Result
from .difference import Difference
from .equivalence import Equivalence
from .regress import Guard, GuardedComparison
from .stats import McNemar, TTest


@dataclass(frozen=True)
class HarnessScores:
    """One task's scores: key (doc_hash or doc_id) -> the metric's value, for one filter."""

    path: str
    task: str
    metric: str
    filter: str
    keyed_by: str                      # 'doc_hash' or 'doc_id'
    scores: dict[str, float]
    sha256: str
    doc_ids: dict[str, str] = field(default_factory=dict)  # key -> the doc_id this file gave it (for reading)
    identity: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)  # key -> what names the document


# What a line says about its document, checked between the two lines of a pair (see _identity).
TASK_FIELDS = ("task", "task_name")      # not in lm-eval's own logs; some writers of the format add it


def is_harness_samples(path: str | os.PathLike[str]) -> bool:
    """Whether a JSONL file's first record looks like an lm-eval sample (doc_id and the filtered responses)."""
    p = Path(path)
    if p.suffix.lower() not in (".jsonl", ".ndjson", ".json"):
        return False
    try:
        with open(p, encoding="utf-8") as f:
            first = next((line for line in f if line.strip()), "")
    except (OSError, UnicodeDecodeError):
        return False
    import json

    try:
        doc = json.loads(first)
    except ValueError:
        return False
    return isinstance(doc, dict) and "doc_id" in doc and ("filtered_resps" in doc or "resps" in doc)


def _task(path: Path) -> str:
    match = re.match(r"samples_(.+)_\d{4}-\d{2}-\d{2}T[\d\-.:]+$", path.stem)
    return match.group(1) if match else path.stem


def read_harness_scores(path: str | os.PathLike[str], *, metric: str | None = None,
                        filter: str | None = None,  # noqa: A002 - the harness's own word
                        only_if_held: bool = False) -> HarnessScores:
    """The scores of one samples_*.jsonl file (see the module docstring). With `only_if_held` (a task among
    others in a run folder), a named metric or filter the file does not hold gives way to the file's only one
    (a multiple-choice task's filter 'none' and metric acc beside a generation task's).

    Raises:
        InputError: a line without doc_id or the metric, a metric that is not a number, several filters and none
            named, several metrics and none named, a document scored twice under the filter.
    """
    from .predictions import read_rows

    rows, sha = read_rows(path, what="an lm-eval samples_*.jsonl file")
    p = Path(path)
    filters = sorted({str(r.fields.get("filter", "none")) for r in rows})
    if filter is None:
        if len(filters) > 1:
            raise InputError(f"{p}: holds the filters {', '.join(filters)}; name the one to compare with --filter")
        filter = filters[0]
    elif filter not in filters:
        if only_if_held and len(filters) == 1:
            filter = filters[0]
        else:
            raise InputError(f"{p}: no filter {filter!r} (it holds the filter(s) {', '.join(map(repr, filters))}); "
                             "give one of them")
    chosen = [r for r in rows if str(r.fields.get("filter", "none")) == filter]
    scored: list[str] = []
    for r in chosen:
        names = r.fields.get("metrics")
        if isinstance(names, list):
            scored += [str(n) for n in names if str(n) not in scored]
    if not scored:  # older logs: the numeric fields that are not the harness's own
        own = {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics", "doc_hash",
               "prompt_hash", "target_hash"}
        scored = sorted({k for r in chosen for k, v in r.fields.items() if k not in own
                         and isinstance(v, (int, float)) and not isinstance(v, bool)})
    if metric is not None and only_if_held and metric not in scored and len(scored) == 1:
        metric = scored[0]
    if metric is None:
        if len(scored) != 1:
            raise InputError(f"{p}: scores {', '.join(scored) or 'no metric'}; name the one to compare with --metric")
        metric = scored[0]
    keyed_by = "doc_hash" if all(isinstance(r.fields.get("doc_hash"), str) for r in chosen) else "doc_id"
    scores: dict[str, float] = {}
    doc_ids: dict[str, str] = {}
    identity: dict[str, tuple[tuple[str, str], ...]] = {}
    for r in chosen:
        if "doc_id" not in r.fields:
            raise InputError(f"{p}:{r.line}: no doc_id; this is not a line of lm-eval's samples file")
        if metric not in r.fields:
            raise InputError(f"{p}:{r.line}: no {metric!r} (the line scores {', '.join(scored) or 'nothing'}); "
                             "give --metric with one it scores")
        value = _score(r.fields[metric])
        if value is None:
            raise InputError(f"{p}:{r.line}: {metric} is {_shown(r.fields[metric])}, not a finite number; compare "
                             "a numeric metric")
        key = str(r.fields[keyed_by])
        if key in scores:
            raise InputError(f"{p}:{r.line}: document {keyed_by} {key} is scored twice under the filter {filter!r}; "
                             "give one run's samples per file")
        scores[key] = value
        doc_ids[key] = str(r.fields["doc_id"])
        identity[key] = _identity(r.fields, keyed_by)
    return HarnessScores(str(p), _task(p), metric, filter, keyed_by, scores, sha, doc_ids, identity)


def _score(value: Any) -> float | None:
    """A metric's value as a float, or None when it is not a finite number (an integer beyond a float's range,
    which JSON allows, included: float() of it raises OverflowError)."""
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _shown(value: Any) -> str:
    """A value as a line shows it: its repr, cut short (a 400-digit integer is not printed whole)."""
    text = repr(value)
    if len(text) <= 40:
        return text
    if isinstance(value, int):
        return f"an integer of {len(text.lstrip('-'))} digits"
    return f"{text[:20]}... ({len(text)} characters)"


def _identity(fields: dict[str, Any], keyed_by: str) -> tuple[tuple[str, str], ...]:
    """What a line says about which document it scored: the task named inside it, its prompt_hash and target_hash
    (another prompt or target is another question) and, paired by doc_id (nothing else says the document is the
    same), the doc_hash and the doc itself (hashed)."""
    import hashlib
    import json

    said = [("task", str(fields[name])) for name in TASK_FIELDS if isinstance(fields.get(name), str)][:1]
    names = ("prompt_hash", "target_hash") if keyed_by == "doc_hash" else ("doc_hash", "prompt_hash", "target_hash")
    said += [(name, fields[name]) for name in names if isinstance(fields.get(name), str)]
    if keyed_by == "doc_id" and "doc" in fields:
        text = json.dumps(fields["doc"], sort_keys=True, ensure_ascii=False, default=str)
        said.append(("doc", hashlib.sha256(text.encode("utf-8")).hexdigest()))
    return tuple(said)


def paired_harness_scores(baseline: HarnessScores, candidate: HarnessScores) -> tuple[list[str], list[float],
                                                                                       list[float]]:
    """The documents both runs scored, in the baseline's order, and their scores.

    Raises:
        InputError: other metrics or filters, documents only one run saw, or a pair whose lines name other
            documents (another task, doc, prompt or target: see _identity).
    """
    if (baseline.metric, baseline.filter) != (candidate.metric, candidate.filter):
        raise InputError(f"the baseline compares {baseline.metric} ({baseline.filter}) and the candidate "
                         f"{candidate.metric} ({candidate.filter}); name the same --metric and --filter for both")
    keyed = "doc_hash" if baseline.keyed_by == candidate.keyed_by == "doc_hash" else "doc_id"
    if keyed != baseline.keyed_by or keyed != candidate.keyed_by:
        raise InputError("one file has doc_hash on every line and the other does not; pair runs logged by the same "
                         "lm-eval version (doc_hash pairs a document wherever it sits)")
    only_base = baseline.scores.keys() - candidate.scores.keys()
    only_cand = candidate.scores.keys() - baseline.scores.keys()
    if only_base or only_cand:
        raise InputError(f"the runs did not see the same documents ({len(only_base)} only in {baseline.path}, "
                         f"{len(only_cand)} only in {candidate.path}, by {keyed}); evaluate both on the same task "
                         "version and limit, or the comparison is not paired")
    keys = list(baseline.scores)
    _same_documents(baseline, candidate, keys)
    return keys, [baseline.scores[k] for k in keys], [candidate.scores[k] for k in keys]


_SAID = {"task": "the task named inside the samples", "doc": "the document itself (its doc field)",
         "doc_hash": "doc_hash", "prompt_hash": "prompt_hash", "target_hash": "target_hash"}


def _brief(text: str) -> str:
    """A task name whole, a hash by its first 12 characters."""
    return repr(text) if len(text) <= 40 else f"{text[:12]}..."


def _same_documents(baseline: HarnessScores, candidate: HarnessScores, keys: Sequence[str]) -> None:
    """Refuse a pair whose two lines say they scored other documents, naming the first (in the baseline's order)."""
    for key in keys:
        mine, theirs = dict(baseline.identity.get(key, ())), dict(candidate.identity.get(key, ()))
        for name in (n for n in _SAID if n in mine and n in theirs and mine[n] != theirs[n]):
            shown = "" if name == "doc" else f": {_brief(mine[name])} vs {_brief(theirs[name])}"
            where = f"doc_id {baseline.doc_ids.get(key, key)}" + (
                f" (doc_id {candidate.doc_ids[key]} in the candidate)"
                if candidate.doc_ids.get(key, key) != baseline.doc_ids.get(key, key) else "")
            raise InputError(f"{baseline.path} and {candidate.path} did not score the same documents: {where} "
                             f"differs in {_SAID[name]}{shown}; compare two runs of one task on the same documents "
                             f"(paired by {baseline.keyed_by})")


def read_harness_pairs(baseline: str | os.PathLike[str], candidate: str | os.PathLike[str], *,
                       metric: str | None = None, filter: str | None = None  # noqa: A002
                       ) -> tuple[HarnessScores, HarnessScores, list[str], list[float], list[float]]:
    """Both files read with the same metric and filter, and paired (see paired_harness_scores)."""
    base = read_harness_scores(baseline, metric=metric, filter=filter)
    cand = read_harness_scores(candidate, metric=metric or base.metric, filter=filter or base.filter)
    keys, b, c = paired_harness_scores(base, cand)
    return base, cand, keys, b, c


def flips(baseline: Sequence[float], candidate: Sequence[float], *, threshold: float = 0.5) -> dict[str, Any]:
    """Per-document correctness changes of a 0/1 metric (a score >= threshold counts as right): the two
    discordant counts McNemar's test rests on, and the agreeing ones."""
    right = [(b >= threshold, c >= threshold) for b, c in zip(baseline, candidate, strict=True)]
    return {"both_right": sum(b and c for b, c in right), "both_wrong": sum(not b and not c for b, c in right),
            "right_to_wrong": sum(b and not c for b, c in right), "wrong_to_right": sum(c and not b for b, c in right)}


SCHEMA = "campaign.regress_harness/1"


@dataclass(frozen=True)
class HarnessComparison(GuardedComparison, Result):
    """A baseline's and a candidate's lm-eval runs of one task compared document by document: the metric's means,
    the flips of a 0/1 metric with McNemar's test (the paired test the harness's unpaired z-test is not), a paired
    t-test otherwise, equivalence at a margin when one is stated, and the guards; its checks are the guards and
    equivalence.within_margin."""

    task: str
    metric: str
    filter: str
    paired_by: str
    baseline: dict[str, Any]
    candidate: dict[str, Any]
    examples: int
    mean_baseline: float
    mean_candidate: float
    both_right: int | None
    both_wrong: int | None
    right_to_wrong: tuple[str, ...]  # the baseline's doc_ids
    wrong_to_right: tuple[str, ...]
    mcnemar: McNemar | None
    paired_t: TTest | None
    equivalence: Equivalence | None
    guards: tuple[Guard, ...]
    difference: Difference | None = None         # the metric's paired difference over every document
    per_task: tuple[Difference, ...] = ()        # with several tasks: one per task, Holm-corrected (the verdicts)
    notes: tuple[str, ...] = ()
    schema: str = SCHEMA

    @property
    def verdicts(self) -> tuple[Difference, ...]:
        if self.per_task:
            return self.per_task
        return () if self.difference is None else (self.difference,)


def compare_harness_runs(baseline: str | os.PathLike[str], candidate: str | os.PathLike[str], *,
                         metric: str | None = None, filter: str | None = None,  # noqa: A002
                         margin: float | None = None, guards: Sequence[str] = (),
                         non_inferiority: float | None = None) -> HarnessComparison:
    """Compare two lm-eval samples files of one task (see HarnessComparison). A metric whose every score is 0 or
    1 (exact_match, acc) gets the flips and McNemar's test; any other gets a paired t-test. Guards name the
    metric ("exact_match>=-0.01": the candidate's mean minus the baseline's).

    Raises:
        InputError: what read_harness_pairs refuses, a malformed guard, a margin that is not positive.
    """
    from .regress import parse_guard

    for g in guards:
        parse_guard(g)
    base, cand, keys, b, c = read_harness_pairs(baseline, candidate, metric=metric, filter=filter)
    return compare_paired_scores(base, cand, keys, b, c, margin=margin, guards=guards,
                                 non_inferiority=non_inferiority)


def compare_paired_scores(base: HarnessScores, cand: HarnessScores, keys: Sequence[str], b: Sequence[float],
                          c: Sequence[float], *, margin: float | None = None, guards: Sequence[str] = (),
                          non_inferiority: float | None = None, tasks: Sequence[str] | None = None,
                          task_metrics: dict[str, str] | None = None) -> HarnessComparison:
    """The comparison of two runs' paired scores (keys in order, the flips named by base.doc_ids); `tasks` (the
    task of each key) gives one verdict per task, Holm-corrected, when they are several, each named by its metric
    in `task_metrics` (a folder mixing tasks scored with other metrics)."""
    from .difference import holm_family, paired_difference
    from .equivalence import paired_tost
    from .regress import evaluate_guards
    from .stats import mcnemar, paired_t

    n = len(keys)
    if n < 2:
        raise InputError(f"{n} document(s) in common: a paired comparison needs at least 2")
    binary = all(x in (0.0, 1.0) for x in (*b, *c))
    mean_b, mean_c = sum(b) / n, sum(c) / n
    if binary:  # the flips by the baseline's doc_id
        lost = tuple(base.doc_ids.get(k, k) for k, x, y in zip(keys, b, c, strict=True) if x == 1.0 and y == 0.0)
        won = tuple(base.doc_ids.get(k, k) for k, x, y in zip(keys, b, c, strict=True) if x == 0.0 and y == 1.0)
        both_right = sum(x == y == 1.0 for x, y in zip(b, c, strict=True))
        test, t = mcnemar(len(lost), len(won)), None
        counts: tuple[int | None, int | None] = (both_right, n - both_right - len(lost) - len(won))
    else:
        lost = won = ()
        test, t = None, paired_t([y - x for x, y in zip(b, c, strict=True)])
        counts = (None, None)
    equivalence = paired_tost(b, c, margin=margin) if margin is not None else None
    # the metric is the mean of the per-document scores: each document's influence is its score less the mean
    checked = evaluate_guards(guards, {base.metric: mean_b}, {base.metric: mean_c},
                              influence=({base.metric: [x - mean_b for x in b]},
                                         {base.metric: [y - mean_c for y in c]}))
    d = [y - x for x, y in zip(b, c, strict=True)]
    pooled = paired_difference(d, metric=base.metric, margin=margin, non_inferiority=non_inferiority)
    per_task: tuple[Difference, ...] = ()
    notes: list[str] = []
    names = list(dict.fromkeys(tasks or ()))
    if len(names) > 1:
        per_task = holm_family([paired_difference([v for v, k in zip(d, tasks or (), strict=True) if k == name],
                                                  metric=(task_metrics or {}).get(name, base.metric), margin=margin,
                                                  non_inferiority=non_inferiority, task=name) for name in names])
        notes.append(f"one verdict per task, Holm-corrected over the {len(names)} tasks; the pooled difference "
                     "informs only")
    if guards:
        notes.append(f"guards are tests: each asks whether the data show its bound broken (one-sided, at 5%, "
                     f"paired by document), with Holm's correction over the {len(checked)} guard(s)")
    return HarnessComparison(base.task, base.metric, base.filter, base.keyed_by,
                             {"path": base.path, "sha256": base.sha256}, {"path": cand.path, "sha256": cand.sha256},
                             n, mean_b, mean_c, counts[0], counts[1], lost, won, test, t, equivalence, checked,
                             pooled, per_task, tuple(notes))


__all__ = ["HarnessComparison", "HarnessScores", "compare_harness_runs", "compare_paired_scores", "flips",
           "is_harness_samples", "paired_harness_scores", "read_harness_pairs", "read_harness_scores"]
