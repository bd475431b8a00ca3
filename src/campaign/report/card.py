"""The bundle's README, a Hugging Face model card, each section filled from the records it names:

- the data: each file the run recorded, placed by its split manifest (track/evidence.py): the held-out
  split (the one the usage ledger used for a final test or a model selection, else the manifest's last, as
  `campaign usage` takes it) and the files the run used for evaluation are evaluation data, never training data;
- the evaluation and the `model-index`: the held-out comparison of the run's own predictions (the newest saved
  `campaign regress` record whose candidate is one of the run's predictions files, else an `errors` record of one),
  not the last values of the training log, which are listed apart as what they are;
- how to load: the base and its revision (the binding's, else adapter_config.json's `revision`);
- the limits (bundle._limits), the runs of the campaign that failed or stopped among them.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..track.evidence import DataFile, HeldOut, data_files
from ..track.manifest import SHIPPED_KINDS, Manifest

UNTRACKED_MAX = 50 * 2**20  # an untracked file larger than this is named in the README, not copied (data, weights)


def card_metadata(m: Manifest, base_model: str, held: HeldOut | None, data: list[DataFile]) -> str:
    """The YAML front matter of a Hugging Face model card: base_model, library_name, metrics and a model-index of
    the held-out figures (none without a held-out record: training-log values are not results); the license is
    left for the user to set."""
    import yaml

    adapter = any(a.kind.split(":")[0] == "adapter" for a in m.artifacts)
    meta: dict[str, Any] = {}
    if base_model:
        meta["base_model"] = base_model
    meta["library_name"] = "peft" if adapter else "transformers"
    meta["tags"] = ["campaign"]
    if held is not None and held.metrics:
        split = next((d for d in data if d.held_out and d.split), None)
        dataset = f"{split.split} split ({Path(split.artifact.path).name})" if split else \
            f"the held-out predictions of {held.record}"
        meta["metrics"] = sorted(held.metrics)
        meta["model-index"] = [{"name": m.name, "results": [{
            "task": {"type": "other", "name": m.hypothesis or m.name},
            "dataset": {"name": dataset, "type": "custom"},
            "metrics": [{"type": k, "value": v, "name": k} for k, v in held.metrics.items()]}]}]
    return ("---\n# license: set it (the base model's and the data's terms apply)\n"
            + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n")


def readme(m: Manifest, base: Manifest | None, limits: list[str], extras: dict[str, Any] | None = None, *,
           held: HeldOut | None = None, base_model: str = "", revision: str | None = None) -> str:
    """The bundle's README, a Hugging Face model card: front matter, then what the run is, its data, its
    evaluation, its limits, how to load it, and every file shipped."""
    from .names import shipped_names

    extras = extras or {}
    data = data_files(m)
    lines = [card_metadata(m, base_model, held, data), f"# {m.name}: hand-over", "",
             f"Run `{m.id}`, accepted: {m.decision.why if m.decision else ''}", ""]
    lines += ["## Intended use", "", (f"Hypothesis: {m.hypothesis}" if m.hypothesis else
                                      "No hypothesis was stated for this run."), ""]
    if base is not None:
        change = ", ".join(m.change) or "nothing"
        lines += [f"Baseline `{base.id}`; what changed: {change}.", ""]

    def placed(d: DataFile) -> str:
        where = f", the {d.split} split of {Path(d.manifest or '').name}" if d.split else ""
        return f"- {Path(d.artifact.path).name} (sha256 {d.artifact.sha256}{where})"

    training = [placed(d) for d in data if not d.held_out]
    evaluation = [placed(d) for d in data if d.held_out]
    lines += ["## Training data", ""]
    lines += training or (["- only held-out data was recorded with the run (below); the training data was not "
                           "recorded"] if evaluation else ["- no data file was recorded"])
    if evaluation:
        lines += ["", "## Evaluation data", "", *evaluation]
    for where in extras.get("split", []):
        ledger = where in extras.get("ledgers", [])
        lines.append(f"- the split's manifest{' and usage ledger' if ledger else ''}: {where}/"
                     + ("" if ledger else " (no usage ledger was recorded for it: campaign usage --use SPLIT)"))
    lines += ["", "## Evaluation", ""]
    if held is not None:
        on = f" on {held.examples:,} examples" if held.examples else ""
        lines.append(f"Held-out figures of this run's predictions{on}, from {held.record} ({held.created}):")
        lines.append("")
        lines += [f"- {k}: {v:.4f}" + (f" (baseline {held.baseline[k]:.4f}, {v - held.baseline[k]:+.4f})"
                                       if k in held.baseline else "") for k, v in held.metrics.items()]
        lines += [f"- {line}" for line in held.lines]
    else:
        lines.append("- no held-out comparison was saved for this run's predictions (campaign --record regress "
                     "BASELINE CANDIDATE): the model-index is empty")
    if extras.get("records"):
        lines.append(f"- {extras['records']} comparison record(s) in records/ (regress, seeds, errors, ... as JSON)")
    if base is not None:
        lines.append("- the baseline's predictions are in baseline/artifacts/: `campaign regress "
                     "baseline/artifacts/FILE artifacts/FILE` gives the comparison again")
    logged = {k: v for k, v in m.metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if logged:
        lines += ["", "Last values the run logged (its training log, not held-out figures): "
                  + ", ".join(f"{k} {v:.4g}" for k, v in sorted(logged.items()))]
    code = m.code
    lines += ["", "## Code and environment", ""]
    if code.get("commit"):
        lines += [f"Code: commit {code['commit']}" + (" plus the uncommitted diff in run/code.diff"
                                                      if code.get("diff_sha256") else ""), ""]
    if extras.get("untracked"):
        lines.append(f"- untracked files named by the run, as they are now: code/untracked/ "
                     f"({', '.join(extras['untracked'][:5])})")
    if extras.get("untracked_missing"):
        lines.append(f"- untracked files named by the run but not shipped (gone, or over "
                     f"{UNTRACKED_MAX // 2**20} MiB): {', '.join(extras['untracked_missing'][:5])}")
    if extras.get("packages"):
        lines.append(f"- {extras['packages']} package versions the run recorded: environment/packages.txt "
                     "(`pip install -r environment/packages.txt`)")
    lines += ["", "## Files", ""]
    shipped = [a for a in m.artifacts if a.kind.split(":")[0] in SHIPPED_KINDS]
    names = shipped_names([a.path for a in shipped])
    for a in shipped:
        lines.append(f"- artifacts/{names[a.path]} ({a.kind}, sha256 {a.sha256})")
        if (Path(a.path) / "campaign_binding.json").is_file():
            lines.append("  bound to its base model by campaign_binding.json: load it with "
                         "campaign.load_adapter(base, folder), which refuses another base")
    if m.amendments:
        lines += ["", "## Amended after the run ended", ""] + [
            f"- {Path(a.path).name}: {a.reason} ({a.at}; sha256 {a.was_sha256[:12]}... -> {a.sha256[:12]}...)"
            for a in m.amendments]
    lines += ["", "## Limitations", "", "Limits observed:", ""] + [f"- {limit}" for limit in limits]
    adapters = [names[a.path] for a in shipped if a.kind.split(":")[0] == "adapter"]
    if adapters:
        at = f", revision={revision!r}" if revision else ""
        lines += ["", "## How to load", "", "```python", "from peft import PeftModel",
                  "from transformers import AutoModelForCausalLM", "",
                  f"base = AutoModelForCausalLM.from_pretrained({base_model or 'BASE_MODEL'!r}{at})",
                  f"model = PeftModel.from_pretrained(base, 'artifacts/{adapters[0]}')", "```"]
        if not revision:
            lines += ["", "The base's revision was not recorded (no revision in the binding or adapter_config.json):"
                      " load the revision the adapter was trained on, or its outputs differ."]
    lines += ["", "Every file is listed with its sha256 in bundle.json (its own in bundle.json.sha256): "
              "`campaign verify .` checks every hash, the adapter's binding and what is missing or extra. "
              "report.html is the campaign's report.", ""]
    return "\n".join(lines)


def base_revision(m: Manifest) -> str | None:
    """The base model's revision the adapter was trained on: its binding's, else adapter_config.json's `revision`."""
    for a in m.artifacts:
        for name in ("campaign_binding.json", "adapter_config.json"):
            try:
                doc = json.loads((Path(a.path) / name).read_text(encoding="utf-8"))
            except (OSError, ValueError, UnicodeDecodeError, NotADirectoryError):
                continue
            value = doc.get("revision") if isinstance(doc, dict) else None
            if isinstance(value, str) and value.strip():
                return value.strip()
    return None


__all__ = ["UNTRACKED_MAX", "base_revision", "card_metadata", "readme"]
