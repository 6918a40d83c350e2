"""Do the harness's short timings hold when a GPU is kept busy for seconds, as a server is?

The harness times each case over about a tenth of a second of CUDA-graph replays
(``rooflinesim/harness/timing.py``), right after its warm-up. A serving engine keeps
the GPU busy for as long as requests come: a prefill-heavy load runs compute-bound
kernels back to back for seconds, and a GPU at its power limit runs slower as it heats
(the same watts buy fewer cycles at a higher temperature). This script measures that
directly on the machine it runs on: for a few workloads (compute-bound GEMMs in bf16
and fp8, the block-scaled fp8 Linear layer and fused MoE of the engines' kernels,
FlashAttention prefill, an HBM copy), it

1. times the workload as the harness does (``CudaTimer``: the "burst" figure);
2. replays the same CUDA graph back to back for ``--seconds`` (default 30), each replay
   bracketed by events, while ``nvidia-smi`` samples the SM clock, power and
   temperature every 100 ms;
3. idles ``--cool`` seconds (default 20) before the next workload.

It prints and writes (``--out``, JSON lines) per workload: the burst time per call, the
median time per call over windows of the sustained run (0-0.5 s, 0.5-2 s, 2-10 s, 10 s
to the end) and their ratio to the burst, and the median SM clock, power and
temperature over the same windows.

    python benchmarks/sustained_load.py --out sustained.jsonl [--seconds 30] [--cool 20]
        [--only bf16-gemm,fp8-gemm,...]

Needs a CUDA GPU with torch (and Triton for the block-scaled workloads), nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WINDOWS_S = ((0.0, 0.5), (0.5, 2.0), (2.0, 10.0), (10.0, float("inf")))
SMI_FIELDS = ("timestamp", "clocks.sm", "clocks.mem", "power.draw", "temperature.gpu",
              "clocks_event_reasons.active")


def workloads():
    """(name, harness case) pairs: compute-bound shapes of a prefill step, and a copy."""
    from rooflinesim.harness import suites

    return [
        ("bf16-gemm", suites.gemm(8192, 8192, 8192)),
        ("fp8-gemm", suites.gemm(8192, 8192, 8192, "fp8")),
        ("block-fp8-linear", {"op": "block_gemm", "dtype": "fp8", "m": 8192, "n": 7168, "k": 2048,
                              "backend": "triton-block-fp8"}),
        ("block-fp8-moe", {"op": "fused_moe", "dtype": "fp8", "tokens": 8192, "topk": 8, "experts": 256,
                           "n": 512, "k": 7168, "input": "token", "backend": "triton-fused-moe-fp8"}),
        ("flash-prefill", suites.attention(1, 32, 8, 8192, 8192, 128, True)),
        ("hbm-copy", suites.copy(2 * 1024 ** 3)),
    ]


class Sampler:
    """nvidia-smi sampling the GPU every 100 ms into a file, with the host clock."""

    def __init__(self, index: int):
        self.file = tempfile.NamedTemporaryFile("w+", suffix=".csv", delete=False)
        self.t0 = time.time()
        self.proc = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits",
             "-lms", "100", "-i", str(index)], stdout=self.file, stderr=subprocess.DEVNULL)

    def stop(self) -> list:
        """Samples as (seconds since the host epoch, sm MHz, mem MHz, W, C, reasons)."""
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.file.flush()
        rows = []
        for line in Path(self.file.name).read_text().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != len(SMI_FIELDS):
                continue
            try:
                stamp = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S"))
                frac = float("0." + parts[0].split(".")[1]) if "." in parts[0] else 0.0
                rows.append((stamp + frac, float(parts[1]), float(parts[2]), float(parts[3]),
                             float(parts[4]), parts[5]))
            except (ValueError, IndexError):
                continue
        os.unlink(self.file.name)
        return rows


def sustained(torch, graph, calls: int, seconds: float) -> tuple:
    """Replay ``graph`` back to back for ``seconds``: per replay, its start on the host
    clock (s since the epoch) and its per-call seconds from events."""
    cuda = torch.cuda
    pending, done = [], []
    start = time.time()
    while time.time() - start < seconds:
        a, b = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        pending.append((time.time(), a, b))
        if len(pending) >= 64:  # keep the queue short so host stamps stay near GPU time
            pending[-32][2].synchronize()
            done += [(t, x.elapsed_time(y) / 1e3 / calls) for t, x, y in pending[:-32]]
            pending = pending[-32:]
    cuda.synchronize()
    done += [(t, x.elapsed_time(y) / 1e3 / calls) for t, x, y in pending]
    return start, done


def window_stats(start: float, replays: list, samples: list, burst_s: float) -> list:
    out = []
    for lo, hi in WINDOWS_S:
        per = [s for t, s in replays if lo <= t - start < hi]
        smi = [r for r in samples if lo <= r[0] - start < hi]
        if not per:
            continue
        med = statistics.median(per)
        row = {"from_s": lo, "to_s": None if hi == float("inf") else hi, "replays": len(per),
               "per_call_s": med, "vs_burst": med / burst_s}
        if smi:
            row.update({"sm_clock_mhz": statistics.median(r[1] for r in smi),
                        "power_w": statistics.median(r[3] for r in smi),
                        "temperature_c": statistics.median(r[4] for r in smi),
                        "event_reasons": sorted({r[5] for r in smi})})
        out.append(row)
    return out


def run_one(torch, name: str, case: dict, seconds: float, index: int) -> dict:
    from rooflinesim.harness.cases_gpu import BUILDERS
    from rooflinesim.harness.timing import CudaTimer, rotation_sets

    set_bytes, build = BUILDERS[case["op"]]
    props = torch.cuda.get_device_properties(index)
    sets = rotation_sets(set_bytes(case), getattr(props, "L2_cache_size", 50 * 2 ** 20))
    built = build(torch, case, "cuda", sets)
    timer = CudaTimer(torch, graph=True)
    burst = timer.time(built.fn, sets)
    calls = max(burst.calls, 1)
    graph = timer.capture(built.fn, calls)
    graph.replay()
    torch.cuda.synchronize()
    sampler = Sampler(index)
    time.sleep(0.3)
    start, replays = sustained(torch, graph, calls, seconds)
    time.sleep(0.2)
    samples = sampler.stop()
    idle = [r for r in samples if r[0] < start]
    return {"workload": name, "case": case, "sets": sets, "calls_per_replay": calls,
            "burst_per_call_s": burst.measured_s, "burst_replays": burst.replays,
            "idle_before": ({"sm_clock_mhz": idle[-1][1], "temperature_c": idle[-1][4], "power_w": idle[-1][3]}
                            if idle else None),
            "sustained_s": seconds, "windows": window_stats(start, replays, samples, burst.measured_s),
            **({"config": built.extra["config"]} if "config" in built.extra else {}),
            **({"backend": built.backend} if built.backend else {})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--cool", type=float, default=20.0)
    ap.add_argument("--only", default="")
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args()
    import torch

    torch.cuda.set_device(args.device)
    chosen = [w for w in workloads() if not args.only or w[0] in args.only.split(",")]
    run = {"run": {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": " ".join(sys.argv),
                   "device_name": torch.cuda.get_device_name(args.device), "torch": torch.__version__,
                   "cuda": torch.version.cuda, "python": platform.python_version(),
                   "seconds": args.seconds, "cool_s": args.cool}}
    try:
        import triton
        run["run"]["triton"] = triton.__version__
    except ImportError:
        pass
    try:
        q = subprocess.run(["nvidia-smi", "-i", str(args.device), "--query-gpu=driver_version,power.limit,"
                            "clocks.max.sm,clocks.max.mem", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        run["run"]["nvidia_smi"] = q.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    out = Path(args.out)
    with out.open("w") as f:
        f.write(json.dumps(run) + "\n")
        for k, (name, case) in enumerate(chosen):
            if k:
                time.sleep(args.cool)
            try:
                rec = run_one(torch, name, case, args.seconds, args.device)
            except Exception as exc:  # (one workload failing leaves the others' figures)
                rec = {"workload": name, "case": case, "error": f"{type(exc).__name__}: {exc}"[:300]}
            f.write(json.dumps(rec) + "\n")
            f.flush()
            line = [name, f"burst {rec.get('burst_per_call_s', float('nan')) * 1e6:.1f} us"]
            for w in rec.get("windows", []):
                line.append(f"[{w['from_s']:g}-{w['to_s'] if w['to_s'] is not None else 'end'} s] "
                            f"x{w['vs_burst']:.3f} {w.get('sm_clock_mhz', 0):.0f} MHz "
                            f"{w.get('power_w', 0):.0f} W {w.get('temperature_c', 0):.0f} C")
            print(" | ".join(line) if "error" not in rec else f"{name}: {rec['error']}", flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
