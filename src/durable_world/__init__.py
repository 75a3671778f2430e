"""The remote control authority: one Cloudflare Durable Object per world, over its SQLite storage.

Pyodide-safe: stdlib, pydantic and the shared core only. The `workers` SDK is imported where it
exists (the Workers runtime) and stood in for elsewhere, so the module also imports under CPython,
where the tests host the real class in a stand-in runtime (tests/support/durable_object_standin.py).
"""

from durable_world.authority import DurableObjectAuthority
from durable_world.port import DurableObjectSqlPort
from durable_world.world_object import WorldObject

__all__ = ["DurableObjectAuthority", "DurableObjectSqlPort", "WorldObject"]
