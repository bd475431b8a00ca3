"""The shape DESIGN.md promises: no import circle at module level, none inside a package even through the imports
inside functions, nothing below the CLI imports it, and the CLI (with every command registered) starts without
torch, numpy or any other heavy library: neither its import, nor the --help of any command or sub-command, nor the
everyday commands (cards, models, guide, memory, kv)."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
HEAVY = ("numpy", "scipy", "pandas", "pyarrow", "numba", "torch", "transformers", "sklearn", "matplotlib", "ray",
         "mlflow", "peft", "datasketch")


def _imports(tree: ast.Module, *, lazy: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of a module: at module level only, or (lazy) anywhere in it, inside functions too;
    never those under `if TYPE_CHECKING:` (annotations only, never run)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for child in node.body for n in ast.walk(child))
    for node in ast.walk(tree) if lazy else tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skipped:
            yield node


def _module_graph(*, lazy: bool = False) -> dict[str, set[str]]:
    """{module: campaign modules it imports}: at module level, or (lazy) with the imports inside functions too."""
    files = {}
    for f in (SRC / "campaign").rglob("*.py"):
        parts = list(f.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        files[".".join(parts)] = f
    graph = {}
    for mod, f in files.items():
        package = mod.split(".") if f.name == "__init__.py" else mod.split(".")[:-1]
        deps = set()
        for node in _imports(ast.parse(f.read_text(encoding="utf-8")), lazy=lazy):
            if isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                target = ".".join(base + [node.module]) if node.module else ".".join(base)
                if not node.level and not target.startswith("campaign"):
                    continue
                deps.update(f"{target}.{a.name}" if f"{target}.{a.name}" in files else target for a in node.names)
            else:
                deps.update(a.name for a in node.names if a.name.startswith("campaign"))
        graph[mod] = {d for d in deps if d in files and d != mod}
    return graph


def _package(module: str) -> str:
    """The package of campaign a module belongs to: campaign.memory for campaign.memory.kv, campaign for campaign.io."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or (SRC / Path(*parts)).is_dir() else parts[0]


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        path.pop()
        state[m] = 2
        return None

    return next((c for m in sorted(graph) if m not in state and (c := visit(m))), None)


def test_no_import_circle_and_nothing_imports_the_cli():
    graph = _module_graph()
    # relative imports are followed: the card fit imports the estimate's breakdown, leaks its dedup module
    assert "campaign.memory.breakdown" in graph["campaign.memory.fit"]
    assert "campaign.data.dedup" in graph["campaign.data.leaks"]
    assert _circle(graph) is None
    below = [m for m, deps in graph.items() if not m.startswith(("campaign.cli", "campaign.__main__"))
             and any(d.startswith("campaign.cli") for d in deps)]
    assert below == []


# Import circles inside a package that an import inside a function hides, left to the helper who owns the package
# (issue 25, item 4): each entry is the function-level import (module, the module it imports) that closes one.
CIRCLES_LEFT: dict[tuple[str, str], str] = {}


def test_no_import_circle_inside_a_package_even_through_imports_inside_functions():
    graph = _module_graph(lazy=True)
    # an import inside a function counts (the trace imports its torch-backed tracker where it runs it); one under
    # `if TYPE_CHECKING:` does not (the renderers name the result types for their annotations only)
    assert "campaign.memory.tracker" in graph["campaign.memory.trace"]
    assert "campaign.memory.tracker" not in _module_graph()["campaign.memory.trace"]
    assert "campaign.memory.plan" not in graph["campaign.cli.render.memory"]
    assert _package("campaign.memory.kv") == _package("campaign.memory") == "campaign.memory"
    assert _package("campaign.io") == _package("campaign") == "campaign"
    inside = {m: {d for d in deps if _package(d) == _package(m) and (m, d) not in CIRCLES_LEFT}
              for m, deps in graph.items()}
    assert _circle(inside) is None


def test_the_circle_finder_finds_one():
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) is None


def _command_paths() -> list[list[str]]:
    """Every command and sub-command of the typer app, as the words that name it ([] for campaign itself)."""
    import typer

    from campaign.cli import app

    def walk(command, path):
        yield path
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), []))


EVERYDAY = [["cards"], ["models"], ["models", "llama-3.1-8b"], ["guide"], ["memory", "llama-3.1-8b", "--no-solve"],
            ["memory", "llama-3.1-8b", "--no-solve", "--json"], ["kv", "llama-3.1-8b", "--context", "32768"], []]
COMMAND_LINES = [[*path, "--help"] for path in _command_paths()] + EVERYDAY

# One process runs every command line in turn (as `campaign` would, through main) and notes, after each, the heavy
# modules loaded so far: the first line after which one appears is the one that imported it.
_WALK = """
import contextlib, io, json, sys
heavy, lines = json.loads(sys.argv[1]), json.loads(sys.argv[2])
import campaign, campaign.cli
seen = {"import campaign.cli": [0, sorted(m for m in heavy if m in sys.modules)]}
for argv in lines:
    code = 0
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            campaign.cli.main(argv)
        except SystemExit as e:
            code = e.code
    seen[" ".join(argv)] = [code, sorted(m for m in heavy if m in sys.modules)]
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def start_up_imports() -> dict[str, list]:
    """{command line: [exit code, heavy modules loaded once it has run]}, from one fresh process."""
    out = subprocess.run([sys.executable, "-c", _WALK, json.dumps(HEAVY), json.dumps(COMMAND_LINES)],
                         capture_output=True, text=True, check=True, timeout=300,
                         env={"PYTHONPATH": str(SRC), "PATH": "", "COLUMNS": "120"}).stdout
    return json.loads(out)


def test_the_cli_starts_without_heavy_libraries(start_up_imports):
    assert start_up_imports["import campaign.cli"] == [0, []]
    # the walk found the sub-commands too, not only the top-level ones
    assert {"run start --help", "runs list --help", "ablate plan --help", "memory --help"} <= set(start_up_imports)


@pytest.mark.parametrize("argv", COMMAND_LINES, ids=lambda argv: " ".join(argv) or "campaign")
def test_no_command_line_imports_a_heavy_library(start_up_imports, argv):
    code, loaded = start_up_imports[" ".join(argv)]
    assert loaded == [], f"campaign {' '.join(argv)} (or a command line before it) imported {loaded}"
    assert code in (0, None) or argv == [], code
