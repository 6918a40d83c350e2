"""Decode attention over a prefix every sequence shares, against the same shapes with a
prefix of each sequence's own: does the GPU's L2 cache serve the shared prefix's KV to the
sequences after the first (so a decode step over a shared system prompt costs less than the
HBM reads of every sequence's whole context, as serve prices it without cascade attention)?

Runs on a CUDA GPU with PyTorch alone: ``python3 benchmarks/shared_prefix_l2.py --out
FILE.json``. One layer of Llama-3.1-8B's attention (32 query heads, 8 KV heads, head_dim
128, bf16) through PyTorch's SDPA: ``n`` decode queries over ``context`` tokens of KV, the
KV either one tensor per sequence (``own``) or one prefix seen by all of them through a
zero batch stride (``shared``, as a paged kernel's block tables point every sequence at the
same blocks). Several prefixes are rotated between timed runs so that each run finds its
prefix in HBM, not left in L2 by the run before (in a model the other layers' reads evict
it). Also times cascade attention's first kernel: the ``n`` queries as one sequence over the
prefix, without a causal mask. Device events, warm-up, the median of the repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
ROTATE = 4  # prefixes (or KV sets) cycled between runs


def _time(fn, reps: int, warmup: int = 5) -> float:
    import torch

    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(i)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    return statistics.median(times)


def _measure(backend, n: int, L: int, reps: int) -> dict:
    """One row: SDPA decode over the shared prefix and over each sequence's own, and cascade's
    prefix kernel, with ``backend`` (or the reason it did not run)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    dev, dt = "cuda", torch.bfloat16
    group = HEADS // KV_HEADS  # (a KV head's queries as that many query rows, unmasked, as FlashDecoding packs GQA)
    q = [torch.randn(n, KV_HEADS, group, HEAD_DIM, device=dev, dtype=dt) for _ in range(ROTATE)]
    base = [(torch.randn(1, KV_HEADS, L, HEAD_DIM, device=dev, dtype=dt),
             torch.randn(1, KV_HEADS, L, HEAD_DIM, device=dev, dtype=dt)) for _ in range(ROTATE)]
    shared = [(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in base]
    own = [(torch.randn(n, KV_HEADS, L, HEAD_DIM, device=dev, dtype=dt),
            torch.randn(n, KV_HEADS, L, HEAD_DIM, device=dev, dtype=dt)) for _ in range(2)]
    qs = [x.transpose(0, 1).reshape(1, KV_HEADS, n * group, HEAD_DIM) for x in q]  # (cascade's: one sequence)
    row = {"backend": backend.name, "n": n, "context": L,
           "hbm_floor_own_s": n * 2 * KV_HEADS * L * HEAD_DIM * 2 / 4.8e12}  # (each sequence's KV once)
    try:
        # correct first: the shared view against its copy, on the first 8 sequences (float64 on the GPU)
        k, v = shared[0]
        ref = F.scaled_dot_product_attention(q[0][:8].double(), k[:8].double(), v[:8].double())
        with sdpa_kernel(backend):
            got = F.scaled_dot_product_attention(q[0], k, v)[:8]
            err = float((got.double() - ref).norm() / ref.norm())
            if not err < 1e-2:
                raise RuntimeError(f"shared-prefix output off by {err:.2e}")
            row["check_rel_err"] = err
            row["shared_s"] = _time(lambda i: F.scaled_dot_product_attention(q[i % ROTATE], *shared[i % ROTATE]), reps)
            row["own_s"] = _time(lambda i: F.scaled_dot_product_attention(q[i % ROTATE], *own[i % 2]), reps)
            row["cascade_prefix_s"] = _time(lambda i: F.scaled_dot_product_attention(qs[i % ROTATE],
                                                                                    *base[i % ROTATE]), reps)
    except RuntimeError as e:
        row["error"] = str(e).splitlines()[0][:200]
    return row


def main() -> int:
    import torch
    from torch.nn.attention import SDPBackend

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--context", type=int, default=6000)
    ap.add_argument("--batches", default="64,256,1024")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        for n in (int(x) for x in args.batches.split(",")):
            rows.append(_measure(backend, n, args.context, args.reps))
            torch.cuda.empty_cache()
    props = torch.cuda.get_device_properties(0)
    with open(args.out, "w") as f:
        json.dump({"gpu": props.name, "torch": torch.__version__, "cuda": torch.version.cuda,
                   "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "heads": HEADS, "kv_heads": KV_HEADS, "head_dim": HEAD_DIM, "dtype": "bf16",
                   "rotate": ROTATE, "reps": args.reps, "rows": rows}, f, indent=1)
    print(f"{'backend':<22} {'n':>5} {'own us':>9} {'shared us':>10} {'cascade us':>11} {'floor us':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['backend']:<22} {r['n']:>5} error: {r['error'][:60]}")
            continue
        print(f"{r['backend']:<22} {r['n']:>5} {r['own_s'] * 1e6:>9.1f} {r['shared_s'] * 1e6:>10.1f} "
              f"{r['cascade_prefix_s'] * 1e6:>11.1f} {r['hbm_floor_own_s'] * 1e6:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
