"""The setup `campaign quant` takes: a Python factory `path/setup.py:make_setup` (as `batch`, `check` and `inspect`
take theirs) returning a dict with the reference model, the evaluation batches, the metric and, for the formats that
calibrate, the calibration batches. Every variant is evaluated on exactly these batches.

    def make_setup():
        return {"model": model,                  # torch.nn.Module, a zero-argument function making it, or a model dir
                "batches": batches,              # evaluation: dicts of tensors (input_ids, attention_mask, labels)
                "metric": "perplexity",          # or "classification" / "extraction" with predict
                "predict": None,                 # predict(model, batch) -> one prediction per row
                "gold": None,                    # gold value per example, in batch order (classification default:
                                                 # each row's batch["labels"])
                "ids": None,                     # one id per example (default: its position, "0", "1", ...)
                "calibration": None,             # batches the calibrated formats (gptq, awq) see; or several sets
                                                 # by name ({"c4": [...], "wiki": [...]}): each calibrated format is
                                                 # fitted to each and the fits are compared
                "calibration_name": None,        # what they are ("c4 train[:128]"), shown with their sha256
                "keep": None}                    # module names left in the reference precision (default: the
                                                 # output embeddings and classification heads)
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..train.setup import call_factory, run_factory

FIELDS = ("model", "batches", "metric", "predict", "gold", "ids", "calibration", "calibration_name", "keep",
          "schema", "required", "name")
METRICS = ("perplexity", "classification", "extraction")


@dataclass
class QuantSetup:
    """What `compare_quant` runs on; see the module docstring for each field."""

    model: Any
    batches: list[Mapping[str, Any]]
    metric: str = "perplexity"
    predict: Callable[[Any, Mapping[str, Any]], Sequence[Any]] | None = None
    gold: list[Any] | None = None
    ids: list[str] | None = None
    calibration: list[Mapping[str, Any]] | None = None
    calibration_name: str | None = None
    calibrations: dict[str, list[Mapping[str, Any]]] | None = None   # the named sets, when several are given
    keep: tuple[str, ...] = ()
    schema: Any = None
    required: Sequence[str] | None = None
    name: str = ""
    source: str = field(default="the setup")

    def calibration_sets(self) -> dict[str, list[Mapping[str, Any]]]:
        """The calibration sets by name (one for a plain list, named by calibration_name); empty when none."""
        if self.calibrations:
            return dict(self.calibrations)
        if self.calibration:
            return {self.calibration_name or "calibration (unnamed)": list(self.calibration)}
        return {}


def load_quant_setup(ref: str | Callable[[], Any] | Mapping[str, Any] | QuantSetup) -> QuantSetup:
    """A QuantSetup from 'path/setup.py:function' (called with no argument), a function, a dict or a QuantSetup.

    Raises:
        InputError: no such file or function, a factory that raises, a missing or malformed field (one line each,
            naming the setup).
    """
    if isinstance(ref, QuantSetup):
        return _checked(ref)
    if isinstance(ref, Mapping):
        return _checked(_from(ref, "the setup"))
    if callable(ref):
        where = getattr(ref, "__name__", "the factory")
        return _checked(_from(call_factory(ref, where), where))
    made, where = run_factory(str(ref), "examples/quant_setup.py:make_setup")
    return _checked(_from(made, where))


def _from(made: Any, where: str) -> QuantSetup:
    if not isinstance(made, Mapping):
        raise InputError(f"{where} must return a dict with the model and the evaluation batches (fields: "
                         f"{', '.join(FIELDS)}); got {type(made).__name__}")
    unknown = sorted(set(made) - set(FIELDS))
    if unknown:
        raise InputError(f"{where} returned unknown field(s) {', '.join(unknown)}; the fields are {', '.join(FIELDS)}")
    if made.get("model") is None or made.get("batches") is None:
        raise InputError(f"{where} must return the model and the evaluation batches ('model' and 'batches')")
    values = {k: v for k, v in made.items() if v is not None}
    if "metric" not in values:
        values["metric"] = "classification" if values.get("predict") is not None else "perplexity"
    keep = values.pop("keep", ())
    setup = QuantSetup(**values)
    setup.keep = (keep,) if isinstance(keep, str) else tuple(keep)
    setup.source = where
    return setup


def _calibration_batches(batches: Any, what: str) -> list[Mapping[str, Any]]:
    cal = list(batches) if isinstance(batches, (list, tuple)) else None
    if not cal or not all(isinstance(b, Mapping) and b for b in cal):
        raise InputError(f"{what} must be a non-empty list of batches (dicts of tensors)")
    return cal


def _checked(s: QuantSetup) -> QuantSetup:
    where = s.source
    if s.metric not in METRICS:
        raise InputError(f"{where}: metric {s.metric!r} is not one of {', '.join(METRICS)}")
    batches = list(s.batches) if isinstance(s.batches, (list, tuple)) else None
    if not batches or not all(isinstance(b, Mapping) and b for b in batches):
        raise InputError(f"{where}: batches must be a non-empty list of evaluation batches (dicts of tensors)")
    s.batches = batches
    if s.metric == "perplexity":
        if s.predict is not None:
            raise InputError(f"{where}: perplexity is computed from the model's logits; drop predict or set "
                             "metric to 'classification' or 'extraction'")
        if not all("input_ids" in b for b in batches):
            raise InputError(f"{where}: perplexity needs input_ids in every batch (labels default to input_ids; "
                             "-100 marks positions not scored)")
    else:
        if not callable(s.predict):
            raise InputError(f"{where}: metric {s.metric!r} needs predict(model, batch) -> one prediction per row")
        if s.gold is None and (s.metric == "extraction" or not all("labels" in b for b in batches)):
            raise InputError(f"{where}: give gold (one value per example, in batch order) or labels in every batch")
    if isinstance(s.calibration, Mapping):
        if s.calibration_name is not None:
            raise InputError(f"{where}: calibration is a dict of named sets, so its keys name them; drop "
                             "calibration_name")
        sets = {}
        for name, batches in s.calibration.items():
            if not isinstance(name, str) or not name.strip():
                raise InputError(f"{where}: calibration set names must be non-empty str, got {name!r}")
            sets[name] = _calibration_batches(batches, f"{where}: calibration set {name!r}")
        if not sets:
            raise InputError(f"{where}: calibration is an empty dict; give one or more named sets of batches")
        s.calibrations = sets
        s.calibration_name, s.calibration = next(iter(sets.items()))
    elif s.calibration is not None:
        s.calibration = _calibration_batches(s.calibration, f"{where}: calibration")
    if s.calibration_name is not None and not isinstance(s.calibration_name, str):
        raise InputError(f"{where}: calibration_name must be a str naming the data (e.g. 'c4 train[:128]')")
    if not all(isinstance(k, str) for k in s.keep):
        raise InputError(f"{where}: keep must be module names (str), e.g. ['lm_head']")
    if isinstance(s.model, (str, Path)) and not Path(s.model).is_dir():
        raise InputError(f"{where}: model {str(s.model)!r} is not a model dir; give a torch.nn.Module, a function "
                         "making one, or a directory with config.json and safetensors")
    return s
