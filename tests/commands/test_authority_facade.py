"""The typed `Authority` facade matches the ledger: one method per `LEDGER_METHODS` name, each with
the Ledger method's exact signature, each sending exactly its own name and arguments to `rpc`.

mypy checks call sites against the facade's signatures; this checks the facade against the ledger,
so a call that type-checks is also one the ledger accepts."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from archetype.commands.authority import Authority
from archetype.commands.ledger import CATALOG_METHODS, FORK_COPY_METHODS, LEDGER_METHODS, Ledger

TRANSPORT = {"rpc", "close", "admit_each"}  # Authority's own methods, not ledger operations (admit_each: many admits in one call)


class Recording(Authority):
    """Records what each typed method hands to the transport, and answers a marker."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.answer = object()

    async def rpc(self, method: str, arguments: dict[str, Any]) -> Any:
        self.calls.append((method, arguments))
        return self.answer


def signature(fn: Any) -> inspect.Signature:
    return inspect.signature(fn, eval_str=True)  # annotations as types, not as their source text


def test_ledger_methods_are_the_ledgers_public_methods_each_named_once():
    public = {name for name in dir(Ledger) if not name.startswith("_") and callable(getattr(Ledger, name))}  # its bases' too
    named = LEDGER_METHODS + CATALOG_METHODS + FORK_COPY_METHODS  # the last: objects' steps of a fork, no facade's
    assert sorted(named) == sorted(set(named)) == sorted(public)


def test_the_facade_has_one_method_per_ledger_method_and_no_other():
    public = {name for name, value in vars(Authority).items() if callable(value) and not name.startswith("_")}
    assert sorted(public - TRANSPORT) == sorted(LEDGER_METHODS + CATALOG_METHODS)
    for name in LEDGER_METHODS + CATALOG_METHODS:
        assert inspect.iscoroutinefunction(getattr(Authority, name)), f"Authority.{name} is not async"


@pytest.mark.parametrize("name", LEDGER_METHODS + CATALOG_METHODS)
def test_each_method_has_the_ledgers_signature(name):
    facade, ledger = signature(getattr(Authority, name)), signature(getattr(Ledger, name))
    # Parameter equality is name, kind (so order and keyword-only-ness), default and annotation.
    assert list(facade.parameters.values()) == list(ledger.parameters.values())
    assert facade.return_annotation == ledger.return_annotation


@pytest.mark.parametrize("name", LEDGER_METHODS + CATALOG_METHODS)
async def test_each_method_sends_its_own_name_and_every_argument(name):
    authority = Recording()
    parameters = [p for p in signature(getattr(Ledger, name)).parameters.values() if p.name != "self"]
    arguments = {p.name: object() for p in parameters}  # a distinct marker each: a swap shows
    result = await getattr(authority, name)(*arguments.values())
    assert authority.calls == [(name, arguments)]
    expected = None if signature(getattr(Ledger, name)).return_annotation is None else authority.answer
    assert result is expected


@pytest.mark.parametrize("name", LEDGER_METHODS + CATALOG_METHODS)
async def test_omitted_arguments_are_sent_as_the_ledgers_defaults(name):
    authority = Recording()
    parameters = [p for p in signature(getattr(Ledger, name)).parameters.values() if p.name != "self"]
    required = {p.name: object() for p in parameters if p.default is inspect.Parameter.empty}
    await getattr(authority, name)(**required)
    defaults = {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
    assert authority.calls == [(name, {**required, **defaults})]
