"""How much of a BLIS stage-0 run's P99 TTFT is the server's first seconds.

The vLLM 0.15.1 points of `data/published_serving.yaml` (inference-sim/training) ran each
workload in two stages on one server; stage 0 starts on a server that has served nothing.
Their repository also ships, per experiment, every request's arrival
(`replay_data/<exp>.json`) and its measured TTFT (`replay_data/<exp>_ground_truth.json`).
This prints, for each stage, the P99 and median TTFT of its successful requests as
published, recomputed from those files, and recomputed without the requests that arrived in
the stage's first `--skip-s` seconds: what a simulation that starts warm (CUDA graphs
captured, the allocator and the HTTP server past their first calls) can be expected to match.

    git clone https://github.com/inference-sim/training && \
        python benchmarks/stage_warmup.py --repo training

`--repo` takes a clone (a work tree) or a bare git directory; the files are read at the
commit the points cite, whichever is checked out.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
SOURCE = re.compile(
    r"inference-sim/training/blob/(?P<commit>[0-9a-f]{40})/default_args/(?P<exp>[^/]+)/results/stage_(?P<stage>\d+)_"
)


def read(repo: Path, commit: str, path: str) -> object:
    git = ["git", "--git-dir", str(repo / ".git")] if (repo / ".git").exists() else ["git", "--git-dir", str(repo)]
    shown = subprocess.run([*git, "show", f"{commit}:{path}"], capture_output=True, check=True)
    return json.loads(shown.stdout)


def stages(arrivals_s: np.ndarray, count: int) -> np.ndarray:
    """Each request's stage: the stages are split at the `count - 1` longest pauses between arrivals
    (the client pauses a few seconds between stages; at these rates arrivals are well under that apart)."""
    order = np.argsort(arrivals_s, kind="stable")
    gaps = np.diff(arrivals_s[order])
    cut = np.zeros(len(gaps), dtype=int)
    cut[np.argsort(gaps)[len(gaps) - (count - 1):]] = 1
    stage = np.empty(len(arrivals_s), dtype=int)
    stage[order] = np.concatenate([[0], np.cumsum(cut)])
    return stage


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, required=True, help="a clone of inference-sim/training")
    ap.add_argument("--skip-s", type=float, default=20.0, help="seconds at a stage's start left out (default 20)")
    ap.add_argument("--data", type=Path, default=HERE / "data" / "published_serving.yaml")
    args = ap.parse_args()

    points = yaml.safe_load(args.data.read_text())["points"]
    print(f"| point | published P99 / median TTFT ms | from the files | without the first {args.skip_s:g} s | "
          f"requests left out |")
    print("|---|---|---|---|---|")
    cache: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for point in points:
        m = SOURCE.search(point.get("source", ""))
        if not m:
            continue
        exp, commit, want = m["exp"], m["commit"], int(m["stage"])
        if exp not in cache:
            replay = read(args.repo, commit, f"replay_data/{exp}.json")["requests"]
            truth = {r["index"]: r for r in read(args.repo, commit, f"replay_data/{exp}_ground_truth.json")}
            arrival_s = np.array([r["arrival_time_us"] for r in replay]) / 1e6
            ok = np.array([not r["has_error"] and not truth[r["index"]]["has_error"] for r in replay])
            ttft_s = np.array([truth[r["index"]].get("ttft_s", np.nan) for r in replay])
            cache[exp] = (arrival_s, ok, ttft_s)
        arrival_s, ok, ttft_s = cache[exp]
        of = re.search(r"stage \d+ of (\d+)", point.get("where", ""))
        stage = stages(arrival_s, int(of[1]) if of else 1)
        mine = (stage == want) & ok
        late = mine & (arrival_s >= arrival_s[stage == want].min() + args.skip_s)
        pub = point["metrics"]

        def fig(sel: np.ndarray) -> str:
            return f"{np.percentile(ttft_s[sel], 99) * 1e3:.1f} / {np.median(ttft_s[sel]) * 1e3:.1f}"

        print(f"| {point['id']} | {pub['p99_ttft_ms']:.1f} / {pub['median_ttft_ms']:.1f} | {fig(mine)} | "
              f"{fig(late)} | {int(mine.sum() - late.sum())} of {int(mine.sum())} |")


if __name__ == "__main__":
    main()
