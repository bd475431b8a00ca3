"""The shape DESIGN.md promises: no import circle at module level, nothing below the CLI imports it, and the CLI
(with every command registered) starts without torch, numpy or any other heavy library."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _module_graph() -> dict[str, set[str]]:
    """{module: campaign modules it imports at module level} (function-level and TYPE_CHECKING imports are lazy)."""
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
        for node in ast.parse(f.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                target = ".".join(base + [node.module]) if node.module else ".".join(base)
                if not node.level and not target.startswith("campaign"):
                    continue
                deps.update(f"{target}.{a.name}" if f"{target}.{a.name}" in files else target for a in node.names)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("campaign"))
        graph[mod] = {d for d in deps if d in files and d != mod}
    return graph


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
    # relative imports are followed: the memory package imports its estimate module, leaks its dedup module
    assert "campaign.memory.estimate" in graph["campaign.memory"]
    assert "campaign.data.dedup" in graph["campaign.data.leaks"]
    assert _circle(graph) is None
    below = [m for m, deps in graph.items() if not m.startswith(("campaign.cli", "campaign.__main__"))
             and any(d.startswith("campaign.cli") for d in deps)]
    assert below == []


def test_the_circle_finder_finds_one():
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) is None


def test_the_cli_starts_without_heavy_libraries():
    code = ("import sys, campaign.cli, campaign; "
            "print(sorted(m for m in ('torch', 'numpy', 'transformers', 'sklearn', 'scipy', 'matplotlib', 'pyarrow', "
            "'peft', 'numba', 'datasketch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC), "PATH": ""}).stdout
    assert out.strip() == "[]"
