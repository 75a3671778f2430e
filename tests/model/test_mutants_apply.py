"""Every deliberate bug in tests/model/mutants.py still applies to today's sources: a change that
rewrites a mutated line must rewrite its mutant too, or the stateful test's teeth go unchecked."""

import pytest

from tests.model.mutants import MUTANTS, unapplicable


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_the_mutant_applies_to_the_sources(name):
    assert unapplicable(name) == []
