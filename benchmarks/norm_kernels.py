"""The residual add and RMSNorm of a decoder layer as an engine runs it, against the kernel
the calibration measures (torch.nn.functional.rms_norm).

    python benchmarks/norm_kernels.py --out FILE.jsonl

Per (rows, hidden), bf16, as CUDA graphs and as eager launches (the harness's CudaTimer:
warm-up, device events, inputs rotated over sets that span the L2 several times, medians):

* ``torch_rms_norm``: F.rms_norm of the rows (what the harness's ``rmsnorm`` cases time);
* ``torch_add_then_rms_norm``: the residual add, then F.rms_norm (two kernels);
* ``fused_add_rms_norm``: one Triton program per row that reads the row and its residual,
  writes their sum back as the residual and the normalized sum as the output, the whole row
  in registers (``rooflinesim.harness.triton_norm``, the harness's add_rmsnorm cases): the
  kernel class of vLLM's and SGLang's fused_add_rms_norm (one block per token), written
  here, not theirs.

Needs torch, triton and a GPU. Diagnostic: the profile does not fit on these rows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROWS = (1, 8, 27, 64, 128, 256, 575, 2048, 8192)
HIDDEN = (4096, 8192)
EPS = 1e-5


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if os.path.exists(args.out) and os.path.getsize(args.out):
        sys.exit(f"{args.out} exists; give a new file")
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    import triton

    from rooflinesim.harness.timing import CudaTimer, rotation_sets
    from rooflinesim.harness.triton_norm import fused_add_rms_norm

    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 50 * 2**20))
    base = {"hardware": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda, "date": time.strftime("%Y-%m-%d"), "dtype": "bf16"}
    with open(args.out, "w") as f:
        f.write(json.dumps({"provenance": base}) + "\n")
        for hidden in HIDDEN:
            for rows in ROWS:
                set_bytes = 3 * rows * hidden * 2 + hidden * 2
                sets = rotation_sets(set_bytes, l2)
                xs = [torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
                rs = [torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
                outs = [torch.empty_like(x) for x in xs]
                w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
                fns = {
                    "torch_rms_norm": lambda i: F.rms_norm(xs[i % sets], (hidden,), w, eps=EPS),
                    "torch_add_then_rms_norm": lambda i: F.rms_norm(xs[i % sets] + rs[i % sets], (hidden,), w,
                                                                    eps=EPS),
                    "fused_add_rms_norm": lambda i: fused_add_rms_norm(xs[i % sets], rs[i % sets], w,
                                                                       outs[i % sets], EPS),
                }
                for name, fn in fns.items():
                    for graph in (True, False):
                        t = CudaTimer(torch, graph=graph).time(fn, sets)
                        rec = {**base, "kernel": name, "rows": rows, "hidden": hidden,
                               "mode": "graph" if t.graph else "eager", "sets": sets,
                               "measured_s": t.measured_s,
                               "bytes": (4 if name != "torch_rms_norm" else 2) * rows * hidden * 2}
                        f.write(json.dumps(rec) + "\n")
                        f.flush()
                        print(f"{name:24s} rows {rows:5d} hidden {hidden} {rec['mode']:5s} "
                              f"{t.measured_s * 1e6:8.2f} us", flush=True)


if __name__ == "__main__":
    main()
