"""`campaign models [MODEL]`: the catalog, or one model's architecture facts and parameter count."""
from __future__ import annotations

from typing import Annotated

import typer

from . import common as o


def register(app: typer.Typer) -> None:
    app.command("models", epilog="Example: campaign models qwen3-30b-a3b")(models)


def models(
    model: Annotated[str | None, typer.Argument(help="A model to describe; omit to list the catalog.")] = None,
    exact: Annotated[bool, typer.Option("--exact", help="Also count with transformers on the meta device.")] = False,
    revision: o.Revision = None, as_json: o.Json = False,
) -> None:
    """List the bundled models, or show one model's spec: layers, heads, KV heads, MoE, MLA, windows, params."""
    from ..models.describe import catalog, describe_model
    from .render.models import catalog as render_catalog, facts as render_facts

    if model is None:
        if revision is not None:
            from ..errors import InputError

            raise InputError(f"--revision {revision}: name the Hub model it is a revision of (campaign models "
                             "ORG/NAME --revision REV)")
        o.emit(catalog(), render_catalog, as_json)
    else:
        o.emit(describe_model(model, exact=exact, revision=revision), render_facts, as_json)
