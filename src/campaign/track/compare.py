"""Two runs side by side (`campaign runs diff A B`): what differs in parameters, data, code and environment, and
whether more than one set of parameters changed (then the comparison cannot say which change did it); and a run's
hypothesis checked (`campaign runs check ID`): its guards evaluated on its recorded predictions against its
baseline's, through `campaign regress`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks import Check
from ..errors import InputError
from ..results import Result
from .manifest import flatten, param_sets_changed
from .store import Store


@dataclass(frozen=True)
class Difference:
    part: str            # params | data | code | environment | seeds
    key: str
    a: Any
    b: Any


@dataclass(frozen=True)
class RunDiff(Result):
    a: str
    b: str
    differences: tuple[Difference, ...]
    param_sets: tuple[str, ...]           # top-level parameter sets that differ
    checks: tuple[Check, ...]
    schema: str = "campaign.runs_diff/1"


def diff_runs(a: str, b: str, *, root: str | Path | None = None) -> RunDiff:
    store = Store(root)
    ma, mb = store.read(a), store.read(b)
    diffs = []
    for part, da, db in (("params", ma.params, mb.params), ("code", ma.code, mb.code),
                         ("environment", ma.environment, mb.environment)):
        fa, fb = flatten(da), flatten(db)
        diffs += [Difference(part, k, fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb))
                  if fa.get(k) != fb.get(k) and not (part == "environment" and k.startswith("visible"))]
    data_a = {d.path: d.sha256 for d in ma.data}
    data_b = {d.path: d.sha256 for d in mb.data}
    diffs += [Difference("data", p, data_a.get(p), data_b.get(p)) for p in sorted(set(data_a) | set(data_b))
              if data_a.get(p) != data_b.get(p)]
    if ma.seeds != mb.seeds:
        diffs.append(Difference("seeds", "seeds", list(ma.seeds), list(mb.seeds)))
    sets = tuple(param_sets_changed(mb.params, ma.params))
    checks = []
    if len(sets) > 1:
        checks.append(Check("runs.one_change", "warn", f"{len(sets)} parameter sets differ: {', '.join(sets)}",
                            "with more than one change, the difference in results cannot be given to either",
                            "change one set at a time against the baseline, or plan the factors (campaign ablate)"))
    else:
        checks.append(Check("runs.one_change", "pass", f"one parameter set differs: {sets[0]}" if sets else
                            "the parameters are the same"))
    same_eval = [d for d in diffs if d.part in ("data", "seeds")]
    checks.append(Check("runs.same_data_and_seeds", "warn" if same_eval else "pass",
                        f"{len(same_eval)} differences in data or seeds" if same_eval else
                        "same data hashes and seeds", "different data or seeds confound the comparison"
                        if same_eval else "", "compare runs on the same data and seeds" if same_eval else ""))
    env = [d.key for d in diffs if d.part == "environment"]
    if env:
        checks.append(Check("runs.same_environment", "warn", f"the environment differs: {', '.join(env[:5])}",
                            "another CUDA, driver or library version can change results on its own",
                            "rerun both on one environment, or check the gap with seeds"))
    return RunDiff(a, b, tuple(diffs), sets, tuple(checks))


def check_run(run_id: str, *, root: str | Path | None = None,
              progress: Callable[[str], None] | None = None) -> Any:
    """The run's guards on its predictions against its baseline's (a RegressionReport). progress: called with each
    phase as it begins ('predictions of the baseline', 'predictions of the run', 'regress').

    Raises:
        InputError: no baseline, no guards, or either run lacks a 'predictions' artifact (or the file changed).
    """
    from ..evaluate.regress import regress
    from ..io import sha256_file

    store = Store(root)
    m = store.read(run_id)
    if m.baseline is None:
        raise InputError(f"run {run_id} has no baseline to check against; start it with --baseline ID")
    if not m.guards:
        raise InputError(f"run {run_id} states no guards (what must not regress); start it with --guard ...")
    base = store.read(m.baseline)

    def predictions(r: Any) -> str:
        found = [a for a in r.artifacts if a.kind == "predictions"]
        if not found:
            raise InputError(f"run {r.id} has no predictions recorded; `campaign run artifact {r.id} FILE --kind "
                             "predictions`")
        art = found[-1]
        if not Path(art.path).is_file() or sha256_file(art.path) != art.sha256:
            raise InputError(f"{art.path}: the predictions of run {r.id} changed or are gone since they were recorded")
        return art.path

    say = progress or (lambda _phase: None)
    say("predictions of the baseline")
    before = predictions(base)
    say("predictions of the run")
    after = predictions(m)
    say("regress")
    return regress(before, after, guards=list(m.guards))


__all__ = ["Difference", "RunDiff", "check_run", "diff_runs"]
