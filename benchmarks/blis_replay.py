"""The per-request files of the BLIS team's vLLM runs (inference-sim/training), read from a clone.

The vLLM 0.15.1 points of `data/published_serving.yaml` cite their stage summaries
(`default_args/<exp>/results/stage_<k>_lifecycle_metrics.json` at a commit); the same commit
ships every request of each run: its arrival (`replay_data/<exp>.json`, microseconds from
the first) and its measured TTFT and end-to-end latency (`replay_data/<exp>_ground_truth.json`).
The repository states no licence, so nothing of it is copied here: the scripts that use it
(stage_warmup.py, serving_check.py --arrivals-from) read a clone the user makes.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np

SOURCE = re.compile(
    r"inference-sim/training/blob/(?P<commit>[0-9a-f]{40})/default_args/(?P<exp>[^/]+)/results/stage_(?P<stage>\d+)_"
)


def stage_of(point: dict) -> tuple | None:
    """(commit, experiment, stage, stages) of a point from those runs, else None."""
    m = SOURCE.search(point.get("source", ""))
    if not m:
        return None
    of = re.search(r"stage \d+ of (\d+)", point.get("where", ""))
    return m["commit"], m["exp"], int(m["stage"]), int(of[1]) if of else 1


def read(repo: Path, commit: str, path: str) -> object:
    """A JSON file of the clone at ``commit`` (a work tree or a bare git directory)."""
    git = ["git", "--git-dir", str(repo / ".git")] if (repo / ".git").exists() else ["git", "--git-dir", str(repo)]
    try:
        shown = subprocess.run([*git, "show", f"{commit}:{path}"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"{repo} does not hold {path} at {commit[:12]} (a clone of inference-sim/training?): "
                         f"{getattr(e, 'stderr', b'').decode().strip() or e}") from None
    return json.loads(shown.stdout)


def stages(arrivals_s: np.ndarray, count: int) -> np.ndarray:
    """Each request's stage: the stages are split at the ``count - 1`` longest pauses between
    arrivals (the client pauses about 4 s between stages; at these rates arrivals are well
    under that apart)."""
    order = np.argsort(arrivals_s, kind="stable")
    gaps = np.diff(arrivals_s[order])
    cut = np.zeros(len(gaps), dtype=int)
    if count > 1:
        cut[np.argsort(gaps)[len(gaps) - (count - 1):]] = 1
    stage = np.empty(len(arrivals_s), dtype=int)
    stage[order] = np.concatenate([[0], np.cumsum(cut)])
    return stage


_RUNS: dict = {}


def run(repo: Path, point: dict) -> dict:
    """A point's whole run: every request's arrival (s from the first), stage, whether it
    succeeded, and its TTFT (s; NaN where it failed)."""
    commit, exp, _, count = stage_of(point)
    key = (str(repo), commit, exp)
    if key not in _RUNS:
        replay = read(repo, commit, f"replay_data/{exp}.json")["requests"]
        truth = {r["index"]: r for r in read(repo, commit, f"replay_data/{exp}_ground_truth.json")}
        arrival_s = np.array([r["arrival_time_us"] for r in replay]) / 1e6
        _RUNS[key] = {
            "arrival_s": arrival_s,
            "stage": stages(arrival_s, count),
            "ok": np.array([not r["has_error"] and not truth[r["index"]]["has_error"] for r in replay]),
            "ttft_s": np.array([truth[r["index"]].get("ttft_s", np.nan) for r in replay]),
        }
    return _RUNS[key]


def stage_arrivals(repo: Path, point: dict) -> np.ndarray:
    """The arrivals of a point's stage, s from its first."""
    r = run(repo, point)
    a = np.sort(r["arrival_s"][r["stage"] == stage_of(point)[2]])
    return a - a[0]
