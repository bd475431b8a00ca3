"""The table of every command-line option in CONTRIBUTING.md ("Option names"): each option, what it means (the
first sentence of its help) and the commands that take it, read from the commands themselves (hidden options, the
old spellings kept for a release, left out).

The test (tests/cli/test_option_table.py) checks that the table names every option with its commands;
`python -m tests.option_table --update` rewrites it between its two markers after an option is added or renamed.
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
BEGIN, END = "<!-- option-table: begin (python -m tests.option_table --update) -->", "<!-- option-table: end -->"
MEANING = 110  # characters of help shown per option


def options() -> dict[str, list[tuple[str, str]]]:
    """{option (its long names joined by '/'): [(command path, help), ...]} over every command and sub-command."""
    import typer

    from campaign.cli import app

    found: dict[str, list[tuple[str, str]]] = {}

    def walk(command: Any, path: list[str]) -> None:
        if getattr(command, "hidden", False):     # an old command name kept for a release
            return
        if hasattr(command, "commands"):           # a group: its sub-commands
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
            return
        for p in command.params:
            if type(p).__name__.endswith("Option") and not p.hidden:
                names = [o for o in (*p.opts, *p.secondary_opts) if o.startswith("--")] or list(p.opts)
                found.setdefault("/".join(names), []).append((" ".join(path), " ".join((p.help or "").split())))

    walk(typer.main.get_group(app), [])
    return found


# One meaning for the options whose help is worded for each command (the same idea, or, marked "per command", the
# collisions CONTRIBUTING.md lists under the table).
MEANINGS = {
    "--baseline": "per command: the baseline variant's name (seeds); the run this one is compared with (run start).",
    "--card": "A card (name, alias or a size like 24GiB): the one checked; budget: one compared (repeatable).",
    "--cluster": "Metadata field grouping related examples: intervals and p-values become cluster-robust.",
    "--confidence": "Confidence level of the intervals.",
    "--context": "Tokens per sequence, prompt + output (inference).",
    "--dtype": "Weight storage (fp32, bf16, fp16, fp8, int8, nf4, int4, gptq, awq).",
    "--engine": "local (this process) | ray (Ray Data; pip install 'campaign[ray]').",
    "--examples": "per command: example pairs shown (leaks); examples shown per class (inspect).",
    "--force": "Do what is refused by default: replace an earlier output, or compare a measurement of another size.",
    "--guard": "What must not get worse, as a bound on candidate - baseline (repeatable).",
    "--id-field": "Column holding the example id.",
    "--kv-dtype": "KV cache precision (quant: the precisions estimated, comma-separated).",
    "--lower-is-better": "The metric is a loss or an error rate: improvement = baseline - candidate.",
    "--plot": "Also draw the result's figure into this .png, .svg or .pdf file.",
    "--out": "Where the result is written (a file or a folder, atomically).",
    "--prices": "Price file (YAML or JSON: per card an hourly price and 3/7/30-day packages).",
    "--processes": "Processes under torchrun (DDP; gloo on the CPU).",
    "--root": "The record folder (default: $CAMPAIGN_ROOT, else .campaign here).",
    "--run": "A run id (campaign runs list).",
    "--seed": "A random seed (split, leaks: of the hashes; errors, seeds: of the generator; run start: recorded).",
    "--seed-field": "Column holding the seed.",
    "--sequences": "Concurrent sequences (inference).",
    "--status": "A run's status: completed | stopped | failed | invalid (runs list: only runs with it).",
    "--tag": "A run's tag (run start: repeatable; runs list: only runs with it).",
}


def meaning(name: str, helps: list[str]) -> str:
    """MEANINGS' line, else the most common help's first sentence, shortened to MEANING characters."""
    text = MEANINGS.get(name) or Counter(helps).most_common(1)[0][0]
    first = re.split(r"(?<=[.)])\s+(?=[A-Z(])", text, maxsplit=1)[0]
    return first if len(first) <= MEANING else first[:MEANING - 3].rstrip() + "..."


def rows(found: dict[str, list[tuple[str, str]]]) -> list[tuple[str, str, str]]:
    """(option, meaning, commands) in option order, the commands in the order the CLI lists them."""
    out = []
    for name in sorted(found, key=lambda n: n.lstrip("-").lower()):
        uses = found[name]
        commands = list(dict.fromkeys(c for c, _ in uses))
        out.append((name, meaning(name, [h for _, h in uses]), ", ".join(commands)))
    return out


def table(found: dict[str, list[tuple[str, str]]] | None = None) -> str:
    """The markdown table, between its markers."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [BEGIN, "", "| option | meaning | commands |", "| --- | --- | --- |"]
    lines += [f"| `{cell(o)}` | {cell(m)} | {cell(c)} |" for o, m, c in rows(found if found is not None else options())]
    return "\n".join([*lines, "", END])


def shown(text: str) -> dict[str, str]:
    """{option: commands} as the table in `text` shows them."""
    start, end = text.index(BEGIN), text.index(END)
    out = {}
    for line in text[start:end].splitlines():
        m = re.match(r"^\| `(.+?)` \| .* \| (.*) \|$", line)
        if m:
            out[m.group(1).replace("\\|", "|")] = m.group(2).replace("\\|", "|")
    return out


def update(path: Path = CONTRIBUTING) -> bool:
    """Rewrite the table in `path`; True when it changed."""
    text = path.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    new = text[:start] + table() + text[end:]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the table in CONTRIBUTING.md")
    args = parser.parse_args(argv)
    if args.update:
        print("CONTRIBUTING.md: option table " + ("rewritten" if update() else "already current"))
    else:
        print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
