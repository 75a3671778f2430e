"""The modules an operator names with `--module` (`archetype serve`, `archetype runner`,
`archetype components fingerprint`): they define the worlds' components, and may add processors."""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

from archetype.runtime import Runtime
from archetype.settings import ConfigurationError


def import_modules(names: tuple[str, ...]) -> list[ModuleType]:
    """Import the modules defining the worlds' components, from the working directory too (as
    `python -m` would: the console script's own directory is what Python puts first)."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            raise ConfigurationError(
                f"--module {name}: cannot import {exc.name!r}; run from the directory that holds it, or add that "
                f"directory to PYTHONPATH"
            ) from None
        except Exception as exc:  # the module's own code failed: say which and why, no traceback
            raise ConfigurationError(f"--module {name}: importing it raised {type(exc).__name__}: {exc}") from None
    return modules


def set_up_modules(runtime: Runtime, modules: list[ModuleType]) -> None:
    """A module's `setup(runtime)` may add processors."""
    for module in modules:
        setup = getattr(module, "setup", None)
        if callable(setup):
            setup(runtime)
