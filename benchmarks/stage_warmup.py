"""How much of a BLIS stage-0 run's P99 TTFT is the server's first seconds.

The vLLM 0.15.1 points of `data/published_serving.yaml` (inference-sim/training) ran each
workload in two stages on one server; stage 0 starts on a server that has served nothing.
Their repository also ships, per experiment, every request's arrival
(`replay_data/<exp>.json`) and its measured TTFT (`replay_data/<exp>_ground_truth.json`).
This prints, for each stage, the P99 and median TTFT of its successful requests as
published, recomputed from those files, and recomputed without the requests that arrived in
the stage's first `--skip-s` seconds: what a simulation that starts warm (CUDA graphs
captured, the allocator and the HTTP server past their first calls) can be expected to match.
With ``--simulate``, the same two figures of each point as the serving check simulates it
(serving_check.py's ``simulate``, its second stages after their first): serve's engine is warm
from its first step, but its prefix cache starts empty, so its first stage's first sends miss
as the server's did.

    git clone https://github.com/inference-sim/training && \
        python benchmarks/stage_warmup.py --repo training [--simulate]

`--repo` takes a clone (a work tree) or a bare git directory; the files are read at the
commit the points cite, whichever is checked out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def figure(ttft_s: np.ndarray) -> str:
    """P99 / median, in ms."""
    return f"{np.percentile(ttft_s, 99) * 1e3:.1f} / {np.median(ttft_s) * 1e3:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, required=True, help="a clone of inference-sim/training")
    ap.add_argument("--skip-s", type=float, default=20.0, help="seconds at a stage's start left out (default 20)")
    ap.add_argument("--data", type=Path, default=HERE / "data" / "published_serving.yaml")
    ap.add_argument("--simulate", action="store_true", help="add serve's figures, whole and cut alike")
    args = ap.parse_args()

    sys.path.insert(0, str(HERE))
    from blis_replay import run, stage_of
    from serving_check import load_points
    from serving_check import simulate as simulated

    points = load_points(args.data)
    cut = f"without the first {args.skip_s:g} s"
    sim = f" simulated | simulated, {cut} |" if args.simulate else ""
    print(f"| point | published P99 / median TTFT ms | from the files | {cut} | requests left out |{sim}")
    print("|---|---|---|---|---|" + ("---|---|" if args.simulate else ""))
    for point in points:
        if stage_of(point) is None:
            continue
        want = stage_of(point)[2]
        r = run(args.repo, point)
        arrival_s, ok, ttft_s, stage = r["arrival_s"], r["ok"], r["ttft_s"], r["stage"]
        mine = (stage == want) & ok
        late = mine & (arrival_s >= arrival_s[stage == want].min() + args.skip_s)
        pub = point["metrics"]
        row = (f"| {point['id']} | {pub['p99_ttft_ms']:.1f} / {pub['median_ttft_ms']:.1f} | {figure(ttft_s[mine])} | "
               f"{figure(ttft_s[late])} | {int(mine.sum() - late.sum())} of {int(mine.sum())} |")
        if args.simulate:
            served = simulated(point, 0).served
            w = served.warmup
            sent, ttft = served.arrival_s[w:], (served.first_token_s - served.arrival_s)[w:]
            keep = sent >= sent.min() + args.skip_s
            row += f" {figure(ttft)} | {figure(ttft[keep])} |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
