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


def test_calls_on_constants_that_compare_equal_but_differ_are_recorded_apart():
    tape = Tape(1)
    a, = tape.variables()
    assert (a * 0.0).index != (a * -0.0).index
    assert np.array_equal(tape.replay([np.array([-1.0])])[-1], [0.0]) and np.signbit(tape.replay([np.array([1.0])])[-1][0])


def test_a_recorded_value_has_no_truth_value():
    a, = Tape(1).variables()
    with pytest.raises(TypeError, match="structure"):
        bool(a > 1)


def recorded(x, y):
    """Code that looks at its numbers: a branch, a value taken out, an unused loss."""
    scale = np.where(x > 4, 2.0, 1.0)
    out = x * y * scale
    if np.count_nonzero(y > 100):  # a branch on the numbers: a guard
        out = out + 1.0
    np.log1p(out) / 3  # a value no output needs: left out of the replay
    rows = np.asarray(x > 2)  # a value taken out: a guard on its value
    return [out, out[rows].sum() if rows.any() else 0.0]


def test_a_recording_replays_the_code_where_its_guards_hold():
    x, y = np.array([1.0, 5.0, 3.0]), np.array([10.0, 200.0, 7.0])
    tape = Tape.recording([x, y])
    outputs = recorded(*tape.variables())
    assert all(np.array_equal(o.value, w) for o, w in zip(outputs, recorded(x, y)))
    replay = tape.function(outputs)
    assert len(tape.guards) == 2
    assert not any(f is np.log1p for f in replay.__globals__.values())
    for a, b in [(x, y), (x + np.array([0, 1, 0.5]), y * 2), (np.array([1.5, 9.0, 4.0]), np.array([1.0, 101.0, 5.0]))]:
        got = replay(a, b)
        for g, w in zip(got, recorded(a, b)):
            assert np.array_equal(g, w)
    assert replay(x, np.array([10.0, 20.0, 7.0])) is None  # the branch goes the other way
    assert replay(np.array([3.0, 5.0, 1.0]), y) is None  # another value taken out


def test_a_call_whose_shape_follows_the_numbers_is_made_on_a_guarded_value():
    x = np.array([1.0, 5.0, 3.0])
    tape = Tape.recording([x])
    v, = tape.variables()
    picked = np.nonzero(v > 2)[0]  # not recorded: made on the value, under a guard
    assert np.array_equal(picked, [1, 2]) and type(picked) is np.ndarray
    assert type(np.where(v > 2)[0]) is np.ndarray  # (np.where of a condition alone is np.nonzero)
    out = v[v > 2] * 2  # indexing by a recorded mask: the mask taken out, the indexing recorded
    replay = tape.function([out])
    assert np.array_equal(replay(np.array([0.0, 7.0, 4.0]))[0], [14.0, 8.0])
    assert replay(np.array([3.0, 1.0, 1.0])) is None


def test_a_constant_output_is_handed_out_as_a_copy():
    tape = Tape.recording([np.array([1.0, 2.0])])
    v, = tape.variables()
    replay = tape.function([v * 2, np.array([7.0])])
    first = replay(np.array([3.0, 4.0]))
    first[1][0] = 0.0  # the caller writes into what it got
    assert np.array_equal(replay(np.array([3.0, 4.0]))[1], [7.0])
