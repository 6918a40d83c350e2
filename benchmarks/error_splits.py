"""Error splits the README quotes that `rooflinesim validate --by FIELD` cannot make,
because no record field holds them (run: python benchmarks/error_splits.py FILE...).

  * GEMMs by the alignment class of their narrowest row stride (16-byte: the TMA
    kernels; 4-8 bytes; 2 bytes or less: element-aligned, odd sizes), the last two also
    by rows (at most 8: skinny kernels; more: the tiled regimes);
  * odd skinny GEMMs (2 to 16 rows) by the cuBLAS kernel that ran: the CUDA-core
    "small N" kernel (gemmSN, in the recorded kernel names) or another;
  * copies and RMSNorm together, and the four collectives together;
  * eager decoder layers as the shipped model prices them (rooflinesim.eager: each call's
    host time by op family, the layer's own, joined with the GPU time) and by the rule
    `predict model --eager` used before it did the same (each kernel launched the host
    time of a one-kernel call, the layer the longer of that and its GPU time).

Median and 90th-percentile absolute error, as `rooflinesim validate` computes them, with
the shipped profile of --gpu.
"""

from __future__ import annotations

import argparse

from rooflinesim.calibration import records
from rooflinesim.calibration.records import to_op
from rooflinesim.calibration.validate import is_eager, predict_records, stats
from rooflinesim.cli.common import load_gpu, load_profile
from rooflinesim.rules import SKINNY_ROWS, gemm_alignment


def _gemm_classes(rec: dict) -> list[str]:
    a = float(gemm_alignment(to_op(rec)))
    cls = "16-byte aligned" if a >= 16 else ("4-8 byte aligned" if a >= 4 else "odd (2 bytes or less)")
    out = [f"gemm, {cls}"]
    if a < 16:  # the model's regimes: skinny kernels, or the fastest of tiled configurations
        rows = f"{SKINNY_ROWS} rows or fewer" if rec["m"] <= SKINNY_ROWS else f"over {SKINNY_ROWS} rows"
        out.append(f"gemm, {cls}, {rows}")
    if a < 4 and 2 <= rec["m"] <= 16 and rec.get("kernel_names"):
        ran = "gemmSN" if "gemmSN" in rec["kernel_names"][0] else "other kernels"
        out.append(f"gemm, odd with 2-16 rows, {ran}")
    return out


def _classes(rec: dict) -> list[str]:
    op = rec["op"]
    if op == "gemm":
        return _gemm_classes(rec)
    if op in ("copy", "rmsnorm"):
        return ["copy and rmsnorm"]
    if op in ("allreduce", "allgather", "reducescatter", "alltoall"):
        return ["four collectives"]
    if op == "decoder_layer" and is_eager(rec):
        return ["decoder layers (eager), as priced"]
    return []


def _per_launch(rec: dict, spec, profile) -> float:
    """An eager decoder layer by the per-launch rule: max(GPU time, launches x the host
    time of a one-kernel call)."""
    import numpy as np

    from rooflinesim.eager import launches
    from rooflinesim.predict import predict
    from rooflinesim.rules import in_sequence

    parts = to_op(rec).kernels()
    gpu = sum(count * float(in_sequence(predict(k, spec, profile)).latency_s) for _, k, count in parts)
    n = sum(count * float(np.sum(launches(k, spec, profile))) for _, k, count in parts)
    p = profile.host_params()
    return max(gpu, n * (p.call_s + p.kernel_s))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="measurement files (JSON Lines)")
    ap.add_argument("--gpu", default="h200-sxm")
    args = ap.parse_args()
    spec = load_gpu(args.gpu, ())
    profile = load_profile(spec, None)
    recs = [r for r in records.measured_on(records.load(args.files), spec)[0] if _classes(r)]
    errors: dict[str, list[float]] = {}
    for rec, predicted, _ in predict_records(recs, spec, profile):
        if predicted:
            for c in _classes(rec):
                errors.setdefault(c, []).append(predicted / rec["measured_s"] - 1)
            if rec["op"] == "decoder_layer":
                errors.setdefault("decoder layers (eager), per-launch rule", []).append(
                    _per_launch(rec, spec, profile) / rec["measured_s"] - 1)
    print(f"{'split':45s} {'n':>5s} {'median':>8s} {'p90':>8s}")
    for name in sorted(errors):
        s = stats(errors[name])
        print(f"{name:45s} {s['n']:5d} {s['median_ape']:8.1%} {s['p90_ape']:8.1%}")


if __name__ == "__main__":
    main()
