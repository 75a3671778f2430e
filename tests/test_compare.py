"""`archetype.compare.diff_states`: entities added and removed, and the components that differ,
by name (data changed, or a component one side has and the other has not)."""

import pytest

from archetype.compare import StateDiff, diff_states

A = {1: {"Health": {"hp": 1}}, 2: {"Health": {"hp": 2}, "Tag": {"t": "x"}}, 3: {"Health": {"hp": 3}}}


@pytest.mark.parametrize("second, expected", [
    (A, StateDiff([], [], {})),
    ({**A, 4: {"Health": {"hp": 4}}}, StateDiff([4], [], {})),
    ({1: A[1], 3: A[3]}, StateDiff([], [2], {})),
    ({**A, 1: {"Health": {"hp": -1}}}, StateDiff([], [], {1: ["Health"]})),
    ({**A, 2: {"Health": {"hp": 2}}}, StateDiff([], [], {2: ["Tag"]})),  # a component removed
    ({**A, 3: {"Health": {"hp": 3}, "Tag": {"t": "y"}}}, StateDiff([], [], {3: ["Tag"]})),  # one added
    ({2: {"Health": {"hp": 0}, "Tag": {"t": "z"}}, 5: {}}, StateDiff([5], [1, 3], {2: ["Health", "Tag"]})),
])  # fmt: skip
def test_diff_states(second, expected):
    assert diff_states(A, second) == expected
