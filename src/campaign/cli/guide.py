"""`campaign guide`: the five questions and the commands that answer them."""
from __future__ import annotations

import typer

from . import common as o


def register(app: typer.Typer) -> None:
    app.command("guide", epilog="Example: campaign guide --json")(guide)


def guide(as_json: o.Json = False) -> None:
    """Which question is blocking you today? Each question with the commands that answer it."""
    from ..guide import QUESTIONS, built_commands
    from .render import console

    built = built_commands()
    if as_json:
        o.print_json({"schema": "campaign.guide/1", "questions": [
            {"number": q.number, "question": q.question, "outcome": q.outcome,
             "steps": [{"command": f"campaign {s.command}", "does": s.does, "built": s.command in built}
                       for s in q.steps]} for q in QUESTIONS]})
        return
    console.print("[bold]What question is blocking you today?[/bold] From the first load to the checkpoints: "
                  "estimate, measure, and keep results you can use.\n")
    for q in QUESTIONS:
        console.print(f"[bold]{q.number}. {q.question}[/bold] [dim]({q.outcome})[/dim]")
        for s in q.steps:
            mark = "" if s.command in built else " [dim](planned)[/dim]"
            style = "cyan" if s.command in built else "dim"
            console.print(f"   [{style}]campaign {s.command:<8}[/{style}] {s.does}{mark}")
        console.print()
