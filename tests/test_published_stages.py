"""The serving check's later stages (``after`` in benchmarks/data/published_serving.yaml): each
names its run's earlier stage and when it began, and is simulated after it on one server."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import blis_replay  # noqa: E402
import serving_check  # noqa: E402

POINTS = serving_check.load_points(serving_check.DATA)
LATER = [p for p in POINTS if p.get("after")]


def test_every_later_stage_follows_stage_0_of_its_own_run():
    assert len(LATER) == 8
    for p in LATER:
        earlier = p["after"]["point"]
        commit, exp, stage, count = blis_replay.stage_of(p)
        assert blis_replay.stage_of(earlier) == (commit, exp, 0, count) and stage == 1
        # the later stage begins after the earlier one's last arrival (its duration), within seconds
        assert float(earlier["duration_s"]) < float(p["after"]["start_s"]) < float(earlier["duration_s"]) + 30
        for key in ("model", "gpu", "tp", "weights", "max_num_batched_tokens", "max_num_seqs", "logged"):
            assert p[key] == earlier[key], (p["id"], key)


def test_the_stages_send_the_same_prompts_and_the_later_is_measured_alone():
    p = next(q for q in LATER if q["id"].endswith("codegen-rate10") and "7b" in q["id"])
    earlier, later = serving_check.requests_of(p["after"]["point"]), serving_check.requests_of(p)
    # request k sends prompt k mod 100 in both stages: the same prompts, the same prefixes
    assert np.array_equal(earlier.prefix_id[:100], later.prefix_id[:100])
    assert np.array_equal(earlier.input_tokens[:100], later.input_tokens[:100])
    r = serving_check.simulate(p, 0)
    assert r.metrics["completed"] == int(p["num_prompts"]) and r.metrics["warmup_requests"] == len(earlier)
    assert r.served.arrival_s[len(earlier)] == pytest.approx(float(p["after"]["start_s"]))


def test_stages_are_split_at_the_longest_pauses():
    a = np.array([0.0, 0.4, 0.9, 1.1, 6.0, 6.2, 6.9, 12.0, 12.1])
    assert blis_replay.stages(a, 3).tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2]
    assert blis_replay.stages(a[::-1], 2).tolist() == [1, 1, 0, 0, 0, 0, 0, 0, 0]  # (5.1 s before 12.0, 4.9 before 6.0)
    assert blis_replay.stages(a, 1).tolist() == [0] * 9
