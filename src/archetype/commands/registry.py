"""The exact operation registry: one OperationSpec per exact model type and discriminator name.

Resolution is by exact type only (no MRO fallback): a subclass of a registered model is not
registered. Only the six portable world mutations may carry a DurableOperation.

`OperationSpec.payload_of` is admission's one check of a complete operation: canonical JSON,
discriminator, a round trip through the registered decoder, and every component value built
live through its class (where the class is loaded) and checked canonical, all before anything
is persisted. A registration may vouch for an operation without the decoder
(`DurableOperation.encode`); `payload_of_exhaustive` always asks the decoder, and is what that
short cut is held to.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from archetype.canonical import NonCanonicalValueError, canonical_json, canonical_text, load_json, path_step
from archetype.commands.errors import (
    InvalidCommandError,
    InvalidComponentDataError,
    NotDurableError,
    UnregisteredOperationError,
)
from archetype.commands.options import Role
from archetype.world.components import (
    Component,
    ComponentValue,
    LiveValue,
    admission_context,
    canonical_by_validation,
    component_data,
    live_from_data,
    non_canonical_refusal,
    validates_as_given,
)
from archetype.world.error_text import error_text, safe_text, type_name
from archetype.world.operations import PORTABLE_MUTATIONS

SUMMARY_LIMIT = 200

Handler = Callable[[Any, Any], Awaitable[Any]]


class NonCanonicalCommandError(InvalidCommandError, NonCanonicalValueError):
    """A command (or a value in it) has no canonical JSON form: NaN or an infinity, an integer
    outside +/-(2**53-1), a lone surrogate, nesting beyond the limit, a live Python object, or a
    live component value that its class turns into one of those. Both an InvalidCommandError
    (code `non_canonical_value`, HTTP 422) and a NonCanonicalValueError."""

    code = NonCanonicalValueError.code

    def __init__(self, message: str, *, path: str = "$", reason: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason if reason is not None else message

    @classmethod
    def at(cls, prefix: str, exc: NonCanonicalValueError) -> NonCanonicalCommandError:
        """The refusal `exc` of a value found at JSONPath `prefix` (its own path is relative to it)."""
        path = prefix + exc.path[1:]
        return cls(f"{path}: {exc.reason}", path=path, reason=exc.reason)


def _is_async(fn: Any) -> bool:
    # an object with an async __call__: the method itself is inspected, so callable() would not do
    call = getattr(fn, "__call__", None)  # noqa: B004
    return any(inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f) for f in (fn, call) if f is not None)


def _synchronous(materialize: Callable[[Any, Any], object]) -> Callable[[Any, Any], object]:
    """`materialize`, refusing an awaitable result with TypeError (a permanent failure: REJECTED).

    A materializer runs inside the world's tick with its lock held; nothing awaits its result, so
    a coroutine it returned would never run and the command would be APPLIED with no effect."""
    if getattr(materialize, "__archetype_synchronous__", False):
        return materialize

    @functools.wraps(materialize)
    def checked(world: Any, op: Any) -> object:
        result = materialize(world, op)
        if inspect.isawaitable(result):
            close = getattr(result, "close", None)
            if close is not None:
                close()  # never awaited by design: close it rather than leak a warning
            raise TypeError(
                f"the durable materializer of {type(op).__name__} returned an awaitable; materializers "
                "must be synchronous (they run inside the tick, with the world's lock held)"
            )
        return result

    checked.__archetype_synchronous__ = True  # type: ignore[attr-defined]
    return checked


@dataclass(frozen=True)
class DurableOperation:
    """How a durable command is rebuilt from its stored payload and applied inside a tick.

    `decode(payload: dict)` must return the exact registered model; `materialize(world, op)` runs
    with the world's operation lock held and mutates only that world. Both are synchronous: a
    coroutine function is refused here (TypeError), and a materializer that returns an awaitable
    anyway fails its command with TypeError when it is called.

    `encode(op)`, optional, lets admission skip the decoder: for an operation it vouches for, it
    answers the payload `model_dump` and canonical JSON would give, and the component values
    `decode` would rebuild from it (`LiveValue`: index, name, the class loaded for its identity,
    data, key order included) that building them live could refuse: it may leave out a value its
    class `validates_as_given`, which `_check_live` skips. It promises that `decode` returns a
    model that dumps back to that payload. None promises nothing: the decoder is asked, and its
    answer stands. It must never vouch where the decoder would refuse.

    `encode_all(ops)`, optional with `encode`, is it for a batch at once: the payloads `encode`
    answers for every one of `ops`, where it vouches for each with no value to build live; None
    otherwise (`encode` is then asked of each).
    """

    decode: Callable[[dict[str, Any]], BaseModel]
    materialize: Callable[[Any, Any], object]  # what it returns, the tick ignores
    encode: Callable[[Any], tuple[str, list[LiveValue]] | None] | None = None
    encode_all: Callable[[list[Any]], list[str] | None] | None = None

    def __post_init__(self) -> None:
        if self.encode_all is not None and self.encode is None:
            raise TypeError("a durable encode_all needs the encode it stands for")
        for role in ("decode", "materialize", "encode", "encode_all"):
            fn = getattr(self, role)
            if fn is None and role in ("encode", "encode_all"):
                continue
            if not callable(fn):
                raise TypeError(f"a durable {role} function must be callable, not {type(fn).__name__}")
            if _is_async(fn):
                raise TypeError(
                    f"durable {role} {getattr(fn, '__qualname__', fn)!r} is a coroutine function; durable "
                    f"{role} functions must be synchronous (nothing awaits them inside the tick)"
                )
        object.__setattr__(self, "materialize", _synchronous(self.materialize))


@dataclass(frozen=True)
class OperationSpec:
    model: type[BaseModel]
    handler: Handler
    permission: Role
    quota_scope: str | None = None
    summarize: Callable[[Any], str] = repr
    trusted: bool = True
    untrusted: bool = False
    world_key: Callable[[Any], str] | None = None
    durable: DurableOperation | None = None
    version: int = 1

    @functools.cached_property
    def name(self) -> str:
        # read on every admission and materialization; the model's discriminator never changes
        return operation_name(self.model)

    def require_durable(self) -> DurableOperation:
        if self.durable is None:
            raise NotDurableError(f"{self.name} is direct-only; it cannot be deferred")
        return self.durable

    def summary(self, op: Any) -> str:
        text = self.summarize(op)
        return text if len(text) <= SUMMARY_LIMIT else text[: SUMMARY_LIMIT - 3] + "..."

    def payload_of(self, op: BaseModel, live: list[LiveValue] | None = None) -> str:
        """The canonical payload JSON of `op` as admission stores it, after checking the complete
        operation as it will be materialized:

        - exactly this spec's model, with this spec's discriminator;
        - canonical (NonCanonicalCommandError: NaN, infinities, integers outside +/-(2**53-1),
          lone surrogates, nesting, live objects anywhere in it);
        - decoded by the registered decoder to the exact model, round-tripping byte for byte;
        - every component value built live through its class, where the class is loaded here,
          and its live value canonical too (a class's coercions and validators run).

        Where the registration's `encode` vouches for `op`, neither the generic canonical pass nor
        the decoder runs (it would build the models only to dump them again); anything it does
        not vouch for takes `payload_of_exhaustive`'s path, so every refusal is that path's.
        Given `live`, a vouched-for operation's values are added to it instead of being built
        (`check_live_together` builds a batch's at once).
        """
        encode = self.durable.encode if self.durable is not None else None
        vouched = encode(op) if encode is not None else None
        if vouched is None:
            return self.payload_of_exhaustive(op)
        payload, values = vouched
        if live is None:
            if values:  # (usually none: the encoder leaves out the values that validate as given)
                self._check_live(values)
        elif values:
            live.extend(values)
        return payload

    def payload_of_exhaustive(self, op: BaseModel) -> str:
        """`payload_of` through the generic canonical pass and the registered decoder always: the
        reference its short cut is held to (tests, bench/admission_validation.py)."""
        payload = self._canonical_payload(op)
        decoded = self._decode(payload)
        if _json_text(decoded.model_dump(mode="python")) != payload:  # equal to canonical bytes: canonical too
            raise InvalidCommandError(f"{self.name!r} does not round-trip through its decoder byte for byte")
        self._check_live([
            (index, value.name, _resolved(value), value.data)
            for index, value in enumerate(_components_of(decoded) or ())
            if isinstance(value, ComponentValue)
        ])  # fmt: skip
        return payload

    def decode_exact(self, payload: str) -> BaseModel:
        """Rebuild the model from stored payload; it must be the exact type and round-trip byte for byte."""
        self.require_durable()
        op = self._decode(payload)
        if self._canonical_payload(op) != payload:
            raise InvalidCommandError(f"payload of {self.name!r} does not round-trip its canonical JSON")
        return op

    def _decode(self, payload: str) -> BaseModel:
        decode = self.durable.decode if self.durable is not None else self.model.model_validate
        try:
            op = decode(load_json(payload))  # re-encoded and compared by the callers
        except NonCanonicalValueError as exc:
            raise NonCanonicalCommandError.at("$", exc) from None
        except ValidationError as exc:
            refusal = non_canonical_refusal(exc.errors())
            if refusal is not None:
                raise NonCanonicalCommandError.at("$", refusal) from None
            raise InvalidCommandError(safe_text(f"payload does not decode as {self.name}: {_errors(exc)}")) from None
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:  # the registration's decoder (a model's validators) raised: whatever it is, a refusal
            raise InvalidCommandError(safe_text(f"payload does not decode as {self.name}: {error_text(exc)}")) from None
        if type(op) is not self.model:
            raise InvalidCommandError(f"decoder for {self.name!r} returned {type(op).__qualname__}, not {self.model.__qualname__}")
        return op

    def _canonical_payload(self, op: BaseModel) -> str:
        """The canonical JSON of `op` as it is (python-mode fields: nothing is converted on the way)."""
        if type(op) is not self.model:
            raise UnregisteredOperationError(f"{type(op).__qualname__} is not exactly {self.model.__qualname__}")
        try:
            data = op.model_dump(mode="python")
        except (ValueError, TypeError, RecursionError) as exc:
            reason = f"the operation has no JSON form ({type_name(exc)})"
            raise NonCanonicalCommandError(f"$: {reason}", reason=reason) from None
        if not isinstance(data, dict) or data.get("operation") != self.name:
            found = data.get("operation") if isinstance(data, dict) else None
            raise InvalidCommandError(f"operation {found!r} does not match discriminator {self.name!r}")
        try:
            return canonical_json(data)
        except NonCanonicalValueError as exc:
            raise NonCanonicalCommandError.at("$", exc) from None

    def _check_live(self, values: list[LiveValue]) -> None:
        """Build each component value (index, name, its class, data) live, as its materializer
        will, and check it canonical.

        A value whose class is not loaded in this process (None: an edge that admits for runners)
        is left to materialization, which runs the same check and rejects that one command."""
        for index, name, component_type, data in values:
            if component_type is None or validates_as_given(component_type, data):  # (its class's verdict, known)
                continue
            try:
                live_from_data(component_type, data, context=admission_context())
            except NonCanonicalValueError as exc:
                raise NonCanonicalCommandError.at(_data_path(index), exc) from None
            except ValidationError as exc:
                refusal = non_canonical_refusal(exc.errors())
                if refusal is not None:
                    raise NonCanonicalCommandError.at(_data_path(index), refusal) from None
                first = exc.errors(include_url=False, include_input=False)[0]
                at = _data_path(index) + "".join(path_step(step) for step in first["loc"])
                raise InvalidComponentDataError(safe_text(f"{at}: does not validate as {name}: {_errors(exc)}")) from None
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # the class's own code (a validator) raised: it refuses this command, whatever it is
                raise InvalidCommandError(safe_text(f"{_data_path(index)}: {name} cannot be built from it: {error_text(exc)}")) from None


def _data_path(index: int) -> str:
    """Where a refused value's data is, written only when one is refused."""
    return f"$.components[{index}].data"


_LIST_ADAPTERS: dict[type[Component], TypeAdapter[list[Component]]] = {}


def check_live_together(values: list[LiveValue]) -> None:
    """Build the live values of many operations at once, one validation per component class (a
    batch's values share a few classes), and check them canonical. A refusal raises whatever it
    raised, saying neither which value nor why: the caller checks item by item then, to refuse
    as that would (the first refusal in batch order, with its path)."""
    by_class: dict[type[Component], list[dict[str, Any]]] = {}
    for _, _, component_type, data in values:
        if component_type is not None and not validates_as_given(component_type, data):
            by_class.setdefault(component_type, []).append(data)
    for component_type, datas in by_class.items():
        adapter = _LIST_ADAPTERS.get(component_type)
        if adapter is None:
            adapter = _LIST_ADAPTERS[component_type] = TypeAdapter(list[component_type])  # type: ignore[valid-type]
        components = adapter.validate_python(datas, context=admission_context())
        if not canonical_by_validation(component_type):
            for component in components:
                component_data(component)


def _resolved(value: ComponentValue) -> type[Component] | None:
    try:
        return value.resolve()
    except LookupError:
        return None


_HAS_COMPONENTS: dict[type, bool] = {}


def _components_of(op: BaseModel) -> Any:
    """`op.components`, None when it has none, with whether its class has any asked once per class:
    pydantic says an attribute is missing by raising through two `__getattr__`s, which every
    admission of an operation without components paid."""
    cls = type(op)
    has = _HAS_COMPONENTS.get(cls)
    if has is None:
        has = _HAS_COMPONENTS.setdefault(cls, "components" in cls.model_fields or hasattr(cls, "components"))
    return getattr(op, "components", None) if has else None


def _json_text(data: Any) -> str | None:
    """The JSON text of `data` in the canonical layout, unchecked (None when there is none): what
    a value already known canonical is compared with."""
    try:
        return canonical_text(data)
    except (TypeError, ValueError, RecursionError):
        return None


def _errors(exc: ValidationError) -> str:
    shown = exc.errors(include_url=False, include_input=False)[:3]
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(value)'}: {e['msg']}" for e in shown)


def operation_name(model: type[BaseModel]) -> str:
    field = model.model_fields.get("operation")
    name = field.default if field is not None else None
    if not isinstance(name, str) or not name:
        raise TypeError(f"{model.__qualname__} has no `operation` discriminator with a default name")
    return name


class OperationRegistry:
    def __init__(self) -> None:
        self._by_model: dict[type[object], OperationSpec] = {}  # resolve() looks up any object's type
        self._by_name: dict[str, OperationSpec] = {}
        # the durable registrations by exact model: every admission looks its operation's up (a
        # registration never changes nor goes: the registry only adds)
        self.durable: dict[type[object], OperationSpec] = {}

    def register(self, spec: OperationSpec) -> OperationSpec:
        name = spec.name
        if spec.durable is not None and not isinstance(spec.durable, DurableOperation):
            raise TypeError(f"durable registration of {name!r} must be a DurableOperation, not {type(spec.durable).__name__}")
        if spec.model in self._by_model:
            raise ValueError(f"model {spec.model.__qualname__} is already registered")
        if name in self._by_name:
            raise ValueError(f"operation name {name!r} is already registered")
        if spec.durable is not None and spec.model not in PORTABLE_MUTATIONS:
            raise ValueError(
                f"{spec.model.__qualname__} cannot be durable: only Spawn, SpawnReserved, Despawn, Update, "
                "AddComponents and RemoveComponents are portable tick mutations"
            )
        if spec.durable is not None and spec.world_key is None:
            raise ValueError(f"durable operation {name!r} needs a world-key extractor")
        if not (isinstance(spec.version, int) and spec.version >= 1):
            raise ValueError(f"operation {name!r} needs a positive schema version")
        if not (spec.trusted or spec.untrusted):
            raise ValueError(f"operation {name!r} is available to nobody")
        self._by_model[spec.model] = spec
        self._by_name[name] = spec
        if spec.durable is not None:
            self.durable[spec.model] = spec
        return spec

    def resolve(self, op: object) -> OperationSpec:
        spec = self._by_model.get(type(op))
        if spec is None:
            raise UnregisteredOperationError(f"{type(op).__qualname__} is not a registered operation")
        return spec

    def durable_spec(self, op: object) -> OperationSpec:
        """`op`'s registration, which must be durable: the `durable` map's at once, or the reason
        there is none (UnregisteredOperationError, then NotDurableError)."""
        spec = self.durable.get(type(op))
        if spec is None:
            spec = self.resolve(op)
            spec.require_durable()
        return spec

    def named(self, name: str) -> OperationSpec:
        spec = self._by_name.get(name)
        if spec is None:
            raise UnregisteredOperationError(f"no operation named {name!r} is registered")
        return spec

    def __iter__(self) -> Iterator[OperationSpec]:
        return iter(self._by_name.values())

    def __contains__(self, model: object) -> bool:
        return model in self._by_model
