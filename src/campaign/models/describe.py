"""What `campaign models` shows: the bundled catalog, or one model's facts with its published parameter count."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..results import Information
from .architectures import counted_on_meta_device
from .catalog import catalog_names, load_catalog_config, published_counts
from .resolve import load_spec
from .spec import ModelSpec


@dataclass(frozen=True)
class MetaDeviceModel:
    """A bundled model whose spec is counted by transformers on the meta device (other towers, or a family with no
    builder): the listing names it without building it (seconds of import); `campaign models NAME` counts it."""

    name: str
    model_type: str


@dataclass(frozen=True)
class Catalog(Information):
    """Every bundled model's spec, in the catalog's order; the models counted on the meta device by name only."""

    specs: tuple[ModelSpec, ...]
    meta_device: tuple[MetaDeviceModel, ...] = ()
    schema: str = "campaign.models/1"

    def fields_dict(self) -> dict[str, Any]:
        # by hand: the catalog lists each model's headline figures, not its whole spec
        rows = {s.name: {"name": s.name, "model_type": s.model_type, "params": s.params,
                         "active_params": s.active_params} for s in self.specs}
        rows |= {m.name: {"name": m.name, "model_type": m.model_type, "params": None, "active_params": None,
                          "counted_by": f"campaign models {m.name}"} for m in self.meta_device}
        return {"models": [rows[name] for name in catalog_names() if name in rows]}


@dataclass(frozen=True)
class ModelFacts(Information):
    """One model's spec and, for a catalog model, the figures its publisher gives."""

    spec: ModelSpec
    published: dict[str, Any] | None
    schema: str = "campaign.model/1"

    def fields_dict(self) -> dict[str, Any]:
        # by hand: the spec's own fields at the top level (as before the header), then the published figures
        return {**self.spec.to_dict(), "published": self.published}


def catalog() -> Catalog:
    """The bundled models: a spec for each the formulas count; the others (vision-language, encoder-decoders
    other than T5, state-space models) by name, so the listing never imports transformers."""
    specs, deferred = [], []
    for name in catalog_names():
        cfg = load_catalog_config(name)
        if counted_on_meta_device(cfg):
            deferred.append(MetaDeviceModel(name, str(cfg.get("model_type"))))
        else:
            specs.append(load_spec(name))
    return Catalog(tuple(specs), tuple(deferred))


def describe_model(model: str, *, exact: bool = False, revision: str | None = None) -> ModelFacts:
    """The facts memory depends on, for a catalog name, a model dir, a config.json or a repo id (at `revision`, of
    the Hub); `exact` also counts the parameters with transformers on the meta device (the torch extra)."""
    spec = load_spec(model, exact=exact, revision=revision)
    return ModelFacts(spec, published_counts().get(spec.name) or None)
