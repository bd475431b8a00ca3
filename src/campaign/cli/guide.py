"""`campaign guide`: the five questions and the commands that answer them."""
from __future__ import annotations

import typer

from . import common as o

_REGISTERED: list[typer.Typer] = []  # the app this command is registered in (cli/__init__.py), read at run time


def register(app: typer.Typer) -> None:
    _REGISTERED[:] = [app]
    app.command("guide", epilog="Example: campaign guide --json")(guide)


def guide(as_json: o.Json = False) -> None:
    """Which question is blocking you today? Each question with the commands that answer it."""
    from ..guide import guide_map
    from .render.models import guide as render_guide

    built: set[str] = set()
    for app in _REGISTERED:  # the commands and groups of the app, given at registration (no import of cli)
        built |= {c.name for c in app.registered_commands if c.name} | {g.name for g in app.registered_groups
                                                                         if g.name}
    o.emit(guide_map(built), render_guide, as_json)
