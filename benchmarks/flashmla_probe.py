"""FlashMLA's decode kernel on a grid of shapes, timed outside the harness: the probe that
measured ``benchmarks/measurements/h100-sxm/probe-mla.jsonl`` (an H100 SXM, 2026-12-07),
before the harness's ``mla`` suites (benchmarks/measure_mla.sh) could run on an H200.

    python benchmarks/flashmla_probe.py BUILD_DIR OUT.jsonl

BUILD_DIR: what benchmarks/flashmla_build.py built. First a check: a batch of seven caches of
1 to 2,049 tokens in scattered 64-token blocks, against attention computed in float32
(relative error of the output; it must be under 1e-2). Then query heads 16 and 128 (DeepSeek-
V3 at TP 8 and TP 1), batches 1-128, caches of 512-32,768 tokens: each shape's caches in as
many sets as make three times a 60 MB L2 (2 to 16), one kernel launch per set in turn in a
CUDA graph of about 20 launches, the graph replayed 15 times, each replay timed with CUDA
events; the median replay over its launches is the time (METHOD.md's way). The records are
the harness's (suites.mla_decode's shape: heads = 2 x query heads, head_dim = 288), so that
``rooflinesim calibrate`` and ``validate`` read them.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

D, DV, PAGE = 576, 512, 64
L2_BYTES = 60e6


def _check(torch, flash_mla_with_kvcache, get_mla_metadata) -> float:
    b, h = 7, 16
    lens = torch.tensor([1, 63, 64, 65, 700, 2049, 333], dtype=torch.int32, device="cuda")
    pages = [(int(n) + PAGE - 1) // PAGE for n in lens]
    cache = torch.randn(sum(pages) + 3, PAGE, 1, D, dtype=torch.bfloat16, device="cuda")
    table = torch.zeros(b, max(pages), dtype=torch.int32, device="cuda")
    order, at = torch.randperm(sum(pages), device="cuda").to(torch.int32), 0
    for i, n in enumerate(pages):
        table[i, :n] = order[at:at + n]
        at += n
    q = torch.randn(b, 1, h, D, dtype=torch.bfloat16, device="cuda")
    meta, splits = get_mla_metadata(lens, h, 1)
    out = flash_mla_with_kvcache(q, cache, table, lens, DV, meta, splits, causal=True)[0]
    refs = []
    for i in range(b):
        n = int(lens[i])
        keys = cache[table[i, :pages[i]].long(), :, 0].reshape(-1, D)[:n].float()
        refs.append(torch.softmax(q[i, 0].float() @ keys.t() / math.sqrt(D), -1) @ keys[:, :DV])
    ref = torch.stack(refs)[:, None]
    return float((out.float() - ref).norm() / ref.norm())


def _time_us(torch, flash_mla_with_kvcache, get_mla_metadata, b: int, h: int, s: int) -> tuple:
    pages = (s + PAGE - 1) // PAGE
    sets = max(2, min(16, math.ceil(3 * L2_BYTES / (b * pages * PAGE * D * 2))))
    data = [(torch.randn(b, 1, h, D, dtype=torch.bfloat16, device="cuda"),
             torch.randn(b * pages, PAGE, 1, D, dtype=torch.bfloat16, device="cuda"),
             torch.randperm(b * pages, device="cuda").to(torch.int32).view(b, pages)) for _ in range(sets)]
    lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
    meta, splits = get_mla_metadata(lens, h, 1)
    reps = sets * max(1, 20 // sets)

    def call(j):
        q, cache, table = data[j]
        return flash_mla_with_kvcache(q, cache, table, lens, DV, meta, splits, causal=True)

    for j in range(sets):
        call(j)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(torch.cuda.Stream()):
        for j in range(sets):
            call(j)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        for k in range(reps):
            call(k % sets)
    times = []
    for _ in range(15):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        graph.replay()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) / reps * 1e3)
    times.sort()
    return times[len(times) // 2], times[0], times[-1], sets, reps, int(meta.shape[0])


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    sys.path.insert(0, sys.argv[1])
    import torch
    from flash_mla import flash_mla_with_kvcache, get_mla_metadata

    torch.manual_seed(0)
    err = _check(torch, flash_mla_with_kvcache, get_mla_metadata)
    if not err < 1e-2:
        print(f"error: FlashMLA disagrees with float32 attention (relative error {err:.3g})", file=sys.stderr)
        return 1
    props = torch.cuda.get_device_properties(0)
    run = {"run": {"date": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()), "hardware": props.name,
                   "device": "cuda", "mode": "graph", "suites": ["flashmla-probe"],
                   "command": "python benchmarks/flashmla_probe.py " + " ".join(sys.argv[1:]),
                   "torch": torch.__version__, "cuda": torch.version.cuda, "device_name": props.name,
                   "sm_count": props.multi_processor_count, "check_rel_error": err}}
    with open(sys.argv[2], "w") as f:
        f.write(json.dumps(run) + "\n")
        for h in (16, 128):
            for b in (1, 8, 32, 64, 128):
                for s in (512, 2048, 8192, 32768):
                    us, lo, hi, sets, reps, parts = _time_us(torch, flash_mla_with_kvcache, get_mla_metadata, b, h, s)
                    f.write(json.dumps(record(b, h, s, us, lo, hi, sets, reps, parts, props.name)) + "\n")
                    print(f"h={h} b={b} s={s}: {us:.1f} us ({b * s * D * 2 / (us * 1e3):.0f} GB/s)", flush=True)
    return 0


def record(b, h, s, us, lo, hi, sets, reps, parts, hardware) -> dict:
    """A probe timing as a harness record (suites.mla_decode's case, records.case_id's id)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # (the repository, for its harness)
    from rooflinesim.harness import records, suites

    case = suites.mla_decode(b, h, s)
    return {**case, "page_size": PAGE, "graph": True, "measured_s": us * 1e-6,
            "min_s": None if lo is None else lo * 1e-6, "max_s": None if hi is None else hi * 1e-6,
            "sets": sets, "replays": reps, "sm_parts": parts, "hardware": hardware, "status": "ok",
            "case_id": records.case_id(case, "graph"), "suite": "flashmla-probe"}


if __name__ == "__main__":
    sys.exit(main())
