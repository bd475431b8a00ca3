"""The Ray engine of the data pipelines (engine="ray"), for splits and corpora held as shards: the session
(session.py), the stages run on the workers (stages.py, writes.py), the leak search (search.py), the split job
(split.py) and the drop job (drop.py), put together by engine.RayEngine. ray is imported inside the functions that
use it: importing this package stays light.
"""
from .engine import RayEngine
from .search import find_leaks_ray
from .session import EngineError, ray_module, ray_session

__all__ = ["EngineError", "RayEngine", "find_leaks_ray", "ray_module", "ray_session"]
