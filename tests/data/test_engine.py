"""data/engine.py: the engines by name, and the data package's shape: one pipeline over the engines, no import
circle inside the package, counting the imports inside functions."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from campaign.data.engine import ENGINES, engine_for
from campaign.data.local import LocalEngine
from campaign.data.ray import RayEngine
from campaign.data.read import Fields
from campaign.data.split import split_file
from campaign.errors import InputError

from .conftest import write_jsonl

DATA = Path(__file__).resolve().parents[2] / "src" / "campaign" / "data"


def test_engines_by_name_and_their_options():
    assert ENGINES == ("local", "ray")
    assert isinstance(engine_for("local"), LocalEngine) and isinstance(engine_for("ray", workers=2), RayEngine)
    eng = engine_for("ray", address="127.0.0.1:1", parts=3)
    assert engine_for(eng) is eng and (eng.address, eng.parts) == ("127.0.0.1:1", 3)
    with pytest.raises(InputError, match="engine 'spark' is unknown; use local or ray"):
        engine_for("spark")
    with pytest.raises(InputError, match="--address and --workers go with --engine ray"):
        engine_for("local", workers=2)


def test_the_ray_engine_refuses_a_temporal_split_before_starting(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": f"row {i}", "day": "2024-01-01"} for i in range(5)])
    with pytest.raises(InputError, match="runs on one machine only"):
        split_file(data, tmp_path / "out", Fields(date="day"), engine="ray", address="127.0.0.1:1")
    assert not (tmp_path / "out").exists()


def _imports() -> dict[str, set[str]]:
    """{data module: data modules it imports, at module level or inside functions}."""
    graph: dict[str, set[str]] = {}
    for f in DATA.rglob("*.py"):
        parts = ["campaign", *f.relative_to(DATA.parent).with_suffix("").parts]
        mod = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = mod.split(".") if f.name == "__init__.py" else mod.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                target = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
                deps.update(f"{target}.{a.name}" for a in node.names)
                deps.add(target)
        graph[mod] = deps
    return {m: {d for d in deps if d in graph and d != m and d.startswith("campaign.data")}
            for m, deps in graph.items()}


def test_no_import_circle_inside_the_data_package_counting_imports_in_functions():
    graph = _imports()
    assert {"campaign.data.ray.search", "campaign.data.split", "campaign.data.local"} <= set(graph)
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1 and d != "campaign.data" and not m.startswith(d + "."):
                return [*path, m, d]
            if d not in state and (found := visit(d, [*path, m])):
                return found
        state[m] = 2
        return None

    circles = [c for m in sorted(graph) if m not in state and (c := visit(m, []))]
    assert circles == []
