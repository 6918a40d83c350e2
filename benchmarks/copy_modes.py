"""Why large device copies look slow when timed inside a CUDA graph.

Times one device-to-device copy of N bytes four ways, with the harness's rules (warm-up,
input sets rotated over at least 4x the L2, CUDA events, median of the replays):

  memcpy  ``dst.copy_(src)``: a contiguous copy, which PyTorch issues as
          cudaMemcpyAsync (inside a graph: a memcpy node)
  kernel  ``torch.mul(src, 1, out=dst)``: the same bytes read and written by an
          elementwise kernel on the SMs

each in a CUDA graph (``graph``) and as eager launches (``eager``), and records the
device time the profiler gives the copy itself in one graph replay, so that a slow
copy can be told apart from a slow graph. Writes JSON Lines: a provenance header, then
one record per (variant, mode, bytes).

    python benchmarks/copy_modes.py --out copy-modes.jsonl

Needs PyTorch with a CUDA device; imports nothing of rooflinesim.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics

SIZES = [2 ** 20, 16 * 2 ** 20, 100 * 2 ** 20, 256 * 2 ** 20, 512 * 2 ** 20, 2 ** 30,
         2 * 2 ** 30, 4 * 2 ** 30]
TARGET_S = 2e-3


def header(torch) -> dict:
    p = torch.cuda.get_device_properties(0)
    return {"run": {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "command": "python benchmarks/copy_modes.py", "device_name": p.name,
                    "total_memory_bytes": p.total_memory, "l2_bytes": getattr(p, "L2_cache_size", 0),
                    "sm_count": p.multi_processor_count, "torch": torch.__version__,
                    "cuda": torch.version.cuda, "python": platform.python_version()}}


def time_copy(torch, nbytes: int, variant: str, graph: bool) -> dict:
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 * 2 ** 20)
    sets = int(max(1, min(64, math.ceil(4 * l2 / (2 * nbytes)))))
    n = nbytes // 2
    src = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    dst = [torch.empty_like(s) for s in src]
    if variant == "memcpy":
        def fn(i):
            dst[i % sets].copy_(src[i % sets])
    else:
        def fn(i):
            torch.mul(src[i % sets], 1, out=dst[i % sets])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(3):
            fn(i)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    est = 4 * nbytes / 3e12 + 5e-6  # read + write at about 3 TB/s, plus a launch
    calls = int(max(sets, min(256, math.ceil(TARGET_S / est))))
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(calls):
                fn(i)
        launch = g.replay
    else:
        def launch():
            for i in range(calls):
                fn(i)
    for _ in range(3):
        launch()
    torch.cuda.synchronize()
    times = []
    for _ in range(15):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        launch()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / calls)
    # device time of the copy itself (the profiler's activity records), one replay
    device_s, names = None, []
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            launch()
            torch.cuda.synchronize()
        evs = [e for e in prof.events() if e.device_type.name == "CUDA"]
        if evs:
            device_s = statistics.median(e.device_time for e in evs) / 1e6
            names = sorted({e.name for e in evs})
    except Exception as exc:  # the profiler is a diagnostic: its failure is reported
        names = [f"profiler failed: {type(exc).__name__}"]
    del src, dst
    torch.cuda.empty_cache()
    med = statistics.median(times)
    return {"variant": variant, "mode": "graph" if graph else "eager", "bytes": nbytes,
            "calls": calls, "sets": sets, "measured_s": med, "min_s": min(times), "max_s": max(times),
            "read_write_bytes_per_s": 2 * nbytes / med, "profiler_device_s": device_s,
            "kernel_names": names}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch

    with open(args.out, "w") as f:
        f.write(json.dumps(header(torch)) + "\n")
        for nbytes in SIZES:
            for variant in ("memcpy", "kernel"):
                for graph in (True, False):
                    rec = time_copy(torch, nbytes, variant, graph)
                    f.write(json.dumps(rec) + "\n")
                    f.flush()
                    print(f"{variant:7s} {rec['mode']:5s} {nbytes / 2 ** 20:8.0f} MiB "
                          f"{rec['measured_s'] * 1e6:9.1f} us {rec['read_write_bytes_per_s'] / 1e12:5.2f} TB/s"
                          f" profiler {rec['profiler_device_s']} {rec['kernel_names'][:2]}", flush=True)


if __name__ == "__main__":
    main()
