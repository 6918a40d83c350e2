"""What a new key length costs SDPA on the host: each step of a DynamicCache decode calls
scaled_dot_product_attention with one key more than the last, and on Hopper torch's cuDNN
backend builds a plan for each shape it has not seen.

    python benchmarks/sdpa_new_shape.py --out FILE.jsonl [--calls N]

Per (batch, heads, kv_heads, head_dim): ``calls`` single-query SDPA calls as transformers
makes them in decode (bf16, no mask, ``enable_gqa=True``), first at one fixed key length,
then with the key length growing by one a call; the host seconds per call of each (wall
time of the loop, synchronized at its end, over the calls) and their difference, the
new-shape cost (``measured_s``; the smaller of two runs over lengths never seen). Needs
torch and a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

CASES = [  # (batch, heads, kv_heads, head_dim, keys)
    (1, 32, 8, 128, 600), (8, 32, 8, 128, 1200), (1, 32, 32, 128, 600), (8, 32, 32, 128, 1200),
    (1, 28, 4, 128, 600), (1, 40, 10, 128, 600), (1, 32, 32, 96, 600), (4, 64, 8, 128, 900),
    (1, 16, 16, 128, 600), (2, 32, 4, 128, 2000), (1, 64, 64, 128, 600), (16, 32, 8, 128, 600),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    if os.path.exists(args.out) and os.path.getsize(args.out):
        sys.exit(f"{args.out} exists; give a new file")
    base = {"op": "sdpa_new_shape", "hardware": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "cuda": torch.version.cuda, "dtype": "bf16"}
    with open(args.out, "w") as out, torch.inference_mode():
        for b, h, kv, d, keys in CASES:
            n = args.calls
            q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, kv, keys + 2 * n + 1, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)

            def loop(grow: bool) -> float:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for i in range(n):
                    L = keys + (i if grow else 0)
                    F.scaled_dot_product_attention(q, k[:, :, :L], v[:, :, :L], enable_gqa=True)
                torch.cuda.synchronize()
                return (time.perf_counter() - t0) / n

            loop(False)  # (the fixed shape's plan, built once)
            fixed = min(loop(False) for _ in range(3))
            grow = loop(True)
            keys += n  # (a second run over lengths never seen)
            grow2 = loop(True)
            rec = {**base, "batch": b, "heads": h, "kv_heads": kv, "head_dim": d, "keys": keys, "calls": n,
                   "fixed_call_s": fixed, "new_shape_call_s": [grow, grow2],
                   "new_shape_extra_s": min(grow, grow2) - fixed, "measured_s": min(grow, grow2) - fixed,
                   "status": "ok"}
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print(json.dumps(rec), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
