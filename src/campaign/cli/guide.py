"""`campaign guide`: the five questions and the commands that answer them."""
from __future__ import annotations

import typer

from . import common as o


def register(app: typer.Typer) -> None:
    app.command("guide", epilog="Example: campaign guide --json")(guide)


def guide(as_json: o.Json = False) -> None:
    """Which question is blocking you today? Each question with the commands that answer it."""
    from ..guide import guide_map
    from . import app

    o.emit(guide_map({c.name for c in app.registered_commands if c.name}), render_guide, as_json)


def render_guide(g) -> None:  # type: ignore[no-untyped-def]
    from .render import console

    console.print("[bold]What question is blocking you today?[/bold] From the first load to the checkpoints: "
                  "estimate, measure, and keep results you can use.\n")
    for q in g.questions:
        console.print(f"[bold]{q.number}. {q.question}[/bold] [dim]({q.outcome})[/dim]")
        for s in q.steps:
            built = s.command in g.built
            mark = "" if built else " [dim](planned)[/dim]"
            style = "cyan" if built else "dim"
            console.print(f"   [{style}]campaign {s.command:<8}[/{style}] {s.does}{mark}")
        console.print()
