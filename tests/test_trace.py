"""Recorded arithmetic (rooflinesim.trace): a replay is the very float the code computes."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rooflinesim.symbolic import ceil, is_symbolic, maximum, minimum, where
from rooflinesim.trace import Tape


def sizes(x, y, z):
    """Arithmetic of the kind the workload's builders do on a phase's numbers."""
    tokens = x * y
    rows = ceil(tokens / 8)
    load = minimum(tokens, tokens / 32 + (2 * np.log(256) * tokens) ** 0.5)
    spare = maximum(0, load - tokens / 32)
    return [tokens * 4096 * 2.0, rows, 256 * (1 - (1 - 8 / 256) ** tokens), where(True, spare, 0),
            minimum(z, y + 4096), tokens * 4096 * 2.0 - z]


@given(st.lists(st.tuples(st.integers(1, 512), st.integers(1, 10_000), st.integers(1, 20_000)), min_size=1, max_size=6))
def test_a_replay_is_the_direct_arithmetic(points):
    tape = Tape(3)
    recorded = sizes(*tape.variables())
    x, y, z = (np.array(v, dtype=float) for v in zip(*points))
    values = tape.replay([x, y, z])
    for got, want in zip(recorded, sizes(x, y, z)):
        assert np.array_equal(values[got.index], want)


def test_identical_calls_are_recorded_once():
    tape = Tape(2)
    a, b = tape.variables()
    first, second = a * b * 4096, a * b * 4096
    assert first.index == second.index
    assert len(tape.calls) == 2  # a * b, then * 4096
    assert is_symbolic(first)


def test_a_recorded_value_has_no_truth_value():
    a, = Tape(1).variables()
    with pytest.raises(TypeError, match="structure"):
        bool(a > 1)
