"""Speed of the prediction paths (run: python benchmarks/bench_predict.py).

Measures, on this machine:
  * vectorized GEMM predictions per second (one call over arrays of shapes), with the
    ideal roofline and with the GPU's calibrated profile (on random shapes, and on
    shapes whose n and k are multiples of 64);
  * the cold wall time of one `rooflinesim predict gemm` in a fresh process (median of
    several runs), which includes Python start-up and imports.
Goals (README): >= 1,000,000 GEMM predictions/s on a 2-core machine; < 0.4 s cold CLI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def vectorized_gemm(n: int, profile: str | None, repeats: int = 5, aligned: bool = False) -> float:
    """GEMM predictions per second over n random shapes (m, n, k uniform: almost all have
    a row stride under 16 bytes, which the calibrated profile prices as the fastest of 30
    to 50 kernel configurations); ``aligned``: n and k rounded up to multiples of 64,
    as a model's layers have them."""
    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.hardware import load_spec
    from rooflinesim.ops import Gemm
    from rooflinesim.predict import predict

    spec = load_spec("h200")
    prof = resolve_profile(spec, profile)
    rng = np.random.default_rng(0)
    m = rng.integers(1, 16384, n)
    nn = rng.integers(64, 32768, n)
    k = rng.integers(64, 32768, n)
    if aligned:
        nn, k = (-(-x // 64) * 64 for x in (nn, k))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        lat = predict(Gemm(m=m, n=nn, k=k), spec, prof).latency_s
        best = min(best, time.perf_counter() - t0)
    assert lat.shape == (n,)
    return n / best


GEMM_ARGS = ["predict", "gemm", "--gpu", "h100", "-m", "4096", "-n", "4096", "-k", "4096"]


def cold_cli(runs: int = 7, args=GEMM_ARGS) -> float:
    """Median wall time of the installed `rooflinesim` command (the first run, which may
    build the spec cache, is left out)."""
    exe = Path(sys.executable).with_name("rooflinesim")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "rooflinesim.cli.main"]
    cmd += list(args)
    subprocess.run(cmd, check=True, capture_output=True)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = {
        "gemm_predictions_per_s_ideal": vectorized_gemm(args.n, "ideal"),
        "gemm_predictions_per_s_calibrated": vectorized_gemm(args.n, None),
        "gemm_predictions_per_s_calibrated_aligned": vectorized_gemm(args.n, None, aligned=True),
        "cold_cli_predict_gemm_s": cold_cli(),
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for k, v in out.items():
        print(f"{k:40s} {v:,.3f}" if v < 100 else f"{k:40s} {v:,.0f}")


if __name__ == "__main__":
    main()
