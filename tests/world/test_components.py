import json

import pytest
from pydantic import ValidationError

from archetype.canonical import canonical_json
from archetype.world import Component, ComponentTypeRef, ComponentValue
from archetype.world.components import canonical_prefixed_schema, resolve_component_class
from tests.component_modules import alpha, beta, gamma


def test_fingerprint_is_sha256_of_the_prefixed_schema():
    schema = canonical_prefixed_schema(alpha.Position)
    assert set(schema["properties"]) == {"position__x", "position__y"}
    assert schema["required"] == ["position__x", "position__y"]
    fp = alpha.Position.component_fingerprint()
    assert len(fp) == 64 and int(fp, 16) >= 0


def test_schema_identical_classes_in_two_modules_share_a_fingerprint():
    assert alpha.Position is not beta.Position
    assert alpha.Position.component_fingerprint() == beta.Position.component_fingerprint()


def test_same_name_with_another_schema_has_another_fingerprint():
    assert alpha.Position.component_fingerprint() != gamma.Position.component_fingerprint()


def test_documentation_does_not_change_identity():
    # beta.Position has a docstring, alpha.Position none: both have the same identity.
    assert beta.Position.__doc__ and not alpha.Position.__doc__
    assert ComponentTypeRef.from_type(alpha.Position).key == ComponentTypeRef.from_type(beta.Position).key


def test_wire_form_carries_only_name_fingerprint_and_data():
    value = ComponentValue.from_component(beta.Position(x=1, y=2))
    assert json.loads(value.model_dump_json()) == {
        "name": "Position",
        "fingerprint": beta.Position.component_fingerprint(),
        "data": {"x": 1.0, "y": 2.0},
    }
    ref = ComponentTypeRef.from_type(beta.Position)
    assert ref.model_dump(mode="json") == {"name": "Position", "fingerprint": beta.Position.component_fingerprint()}


def test_affinity_is_absent_from_json_schema_and_canonical_json():
    for model in (ComponentValue, ComponentTypeRef):
        assert "affinity" not in json.dumps(model.model_json_schema())
    value = ComponentValue.from_component(beta.Position(x=1, y=2))
    twin = ComponentValue.from_component(alpha.Position(x=1, y=2))
    assert canonical_json(value.model_dump(mode="json")) == canonical_json(twin.model_dump(mode="json"))


def test_direct_values_keep_the_callers_exact_class():
    value = ComponentValue.from_component(beta.Position(x=1, y=2))
    assert value.affinity is beta.Position
    assert type(value.to_component()) is beta.Position
    assert ComponentTypeRef.from_type(beta.Position).resolve() is beta.Position
    assert value.type_ref.affinity is beta.Position


def test_affinity_is_immutable():
    value = ComponentValue.from_component(beta.Position(x=1, y=2))
    with pytest.raises(TypeError):
        value._affinity = alpha.Position
    with pytest.raises(TypeError):
        value.name = "Other"
    assert value.affinity is beta.Position


def test_wire_decoding_resolves_by_name_and_fingerprint_only():
    wire = ComponentValue.from_component(beta.Position(x=1, y=2)).model_dump_json()
    decoded = ComponentValue.model_validate_json(wire)
    assert decoded.affinity is None
    # any loaded class with that wire identity will do (another module, archetype.bench say, may
    # hold one too and have been loaded first): the name and fingerprint decide, nothing else
    decoded_class = type(decoded.to_component())
    assert (decoded_class.__name__, decoded_class.component_fingerprint()) == ("Position", beta.Position.component_fingerprint())
    assert resolve_component_class("Position", alpha.Position.component_fingerprint()) is decoded_class


def test_wire_decoding_never_guesses_a_same_named_class():
    different = ComponentValue.model_validate(
        {"name": "Position", "fingerprint": "0" * 64, "data": {"x": 1, "y": 2}}
    )
    with pytest.raises(LookupError, match="another schema"):
        different.to_component()
    gamma_value = ComponentValue.model_validate_json(
        ComponentValue.from_component(gamma.Position(x=1, y=2, z=3)).model_dump_json()
    )
    assert type(gamma_value.to_component()) is gamma.Position


def test_unknown_component_name_is_a_lookup_error():
    with pytest.raises(LookupError):
        ComponentValue.model_validate({"name": "Nope", "fingerprint": "a" * 64, "data": {}}).to_component()


@pytest.mark.parametrize(
    "wire",
    [
        {"name": "Position", "fingerprint": "xyz", "data": {}},
        {"name": "bad name", "fingerprint": "a" * 64, "data": {}},
        {"name": "Position", "fingerprint": "a" * 64, "data": {}, "extra": 1},
    ],
)
def test_malformed_wire_values_are_refused(wire):
    with pytest.raises(ValidationError):
        ComponentValue.model_validate(wire)


def test_components_are_immutable_and_closed():
    position = alpha.Position(x=1, y=2)
    with pytest.raises(ValidationError):
        position.x = 3
    with pytest.raises(ValidationError):
        alpha.Position(x=1, y=2, z=3)


def test_from_component_refuses_non_components():
    with pytest.raises(TypeError):
        ComponentValue.from_component({"x": 1})
    with pytest.raises(TypeError):
        ComponentTypeRef.from_type(dict)


def test_non_canonical_component_data_is_refused():
    class Reading(Component):
        value: float

    with pytest.raises(ValueError):
        ComponentValue.from_component(Reading(value=float("nan")))


def test_equality_is_wire_equality():
    direct = ComponentValue.from_component(beta.Position(x=1, y=2))
    decoded = ComponentValue.model_validate_json(direct.model_dump_json())
    assert direct == decoded and hash(direct) == hash(decoded)
    assert direct != ComponentValue.from_component(beta.Position(x=1, y=3))
    assert ComponentTypeRef.from_type(alpha.Position) == ComponentTypeRef.from_type(beta.Position)
