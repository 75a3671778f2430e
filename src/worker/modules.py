"""The user's modules in the Worker bundle (the module hook, durable_world.edge).

This source copy names none. `stage.py --module NAME` writes the bundle's copy, which imports each
named module (so the bundle's import closure takes in their files) and lists them in MODULES.
"""

from __future__ import annotations

from types import ModuleType

MODULES: tuple[ModuleType, ...] = ()
