"""What `campaign models` shows: the bundled catalog, or one model's facts with its published parameter count."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..results import Information
from .catalog import catalog_names, published_counts
from .resolve import load_spec
from .spec import ModelSpec


@dataclass(frozen=True)
class Catalog(Information):
    """Every bundled model's spec, in the catalog's order."""

    specs: tuple[ModelSpec, ...]
    schema: str = "campaign.models/1"

    def fields_dict(self) -> dict[str, Any]:
        # by hand: the catalog lists each model's headline figures, not its whole spec
        return {"models": [
            {"name": s.name, "model_type": s.model_type, "params": s.params, "active_params": s.active_params}
            for s in self.specs]}


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
    return Catalog(tuple(load_spec(name) for name in catalog_names()))


def describe_model(model: str, *, exact: bool = False, revision: str | None = None) -> ModelFacts:
    """The facts memory depends on, for a catalog name, a model dir, a config.json or a repo id (at `revision`, of
    the Hub); `exact` also counts the parameters with transformers on the meta device (the torch extra)."""
    spec = load_spec(model, exact=exact, revision=revision)
    return ModelFacts(spec, published_counts().get(spec.name) or None)
