"""The engines the data pipelines run on. split.split_file (validate, form units, assign, write, check, merge) and
leaks.check_files (search, then the outputs) are written once over what an engine offers:

- session(label, phase): the context its stages run in (Ray connected; nothing on this machine);
- a leak search: the splits read and sketched, candidate pairs found and confirmed, the report assembled, and the
  rows it shows (row(split, row) -> LeakRow), with the drop job that writes the splits without their leaking rows
  (leak_files.DropJob);
- a split job: the input read and sketched, what its units are formed from (units.UnitInputs: duplicate clusters,
  group columns or links), each split written, and the result that describes what was written.

"local" runs in this process on files read whole (local.py); "ray" on Ray Data for data held as shards (ray/).
"""
from __future__ import annotations

from ..errors import InputError
from .local import LocalEngine
from .ray import RayEngine

ENGINES = ("local", "ray")
Engine = LocalEngine | RayEngine


def engine_for(engine: str | Engine, *, address: str | None = None, workers: int | None = None,
               parts: int | None = None, progress: bool | None = None) -> Engine:
    """The engine named `engine` (or that engine itself), with its options.

    Raises:
        InputError: an unknown engine, or Ray's options (address, workers) for the local engine.
    """
    if not isinstance(engine, str):
        return engine
    if engine not in ENGINES:
        raise InputError(f"engine {engine!r} is unknown; use local or ray")
    if engine == "local":
        if address is not None or workers is not None:
            raise InputError("--address and --workers go with --engine ray")
        return LocalEngine(progress)
    return RayEngine(address, workers, parts, progress)


__all__ = ["ENGINES", "Engine", "engine_for"]
