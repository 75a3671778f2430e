"""`archetype components`: what the wire and the ledger call a component class (its name and the
fingerprint of its schema), the identity a declared schema migration names (docs/guide/schema-evolution.md)."""

from __future__ import annotations

import click

from archetype.settings import ConfigurationError


@click.group()
def components() -> None:
    """Component classes of your modules."""


@components.command()
@click.argument("module")
@click.argument("classes", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per class and line.")
def fingerprint(module: str, classes: tuple[str, ...], as_json: bool) -> None:
    """Print the name and fingerprint of every component class MODULE defines (or of CLASSES of it).

    MODULE is imported as `archetype serve --module` imports it, from the working directory too:
    run it on yesterday's code to learn the fingerprint its saved worlds hold."""
    from archetype.client_cli import print_rows
    from archetype.modules import import_modules
    from archetype.world import Component

    try:
        (imported,) = import_modules((module,))
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc).removeprefix(f"--module {module}: "), param_hint="MODULE") from None
    defined = {name: value for name, value in vars(imported).items()
               if isinstance(value, type) and issubclass(value, Component) and value.__module__ == imported.__name__}  # fmt: skip
    unknown = [name for name in classes if name not in defined]
    if unknown:
        raise click.BadParameter(f"{module} defines no component class {', '.join(map(repr, unknown))}; it defines "
                                 f"{', '.join(sorted(defined)) or 'none'}", param_hint="CLASSES")  # fmt: skip
    rows = [{"name": cls.__name__, "fingerprint": cls.component_fingerprint(), "class": f"{cls.__module__}.{cls.__qualname__}"}
            for name, cls in sorted(defined.items()) if not classes or name in classes]  # fmt: skip
    print_rows(rows, ["name", "fingerprint", "class"], as_json=as_json)
