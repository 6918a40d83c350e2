"""How far predictions land from published figures on GPUs (and setups) the project did
not measure: the fitted H200 profile, transferred through each GPU's spec.

    python benchmarks/published_check.py [--profile NAME] [--markdown]

Prints, per source, the published figure, the prediction and the error.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import yaml

from rooflinesim.calibration.profile import resolve_profile
from rooflinesim.hardware import load_spec
from rooflinesim.ops import Attention, Collective, Copy, Gemm
from rooflinesim.predict import predict

DATA = Path(__file__).parent / "data" / "published.yaml"


def rows(profile_name=None):
    pub = yaml.safe_load(DATA.read_text())
    out = []
    fa = pub["flash_attention_h100"]
    spec = load_spec("h100-sxm")
    prof = resolve_profile(spec, profile_name)
    for row in fa["rows"]:
        d, causal = row["head_dim"], row["causal"]
        for i, s in enumerate(fa["seqlens"]):
            b, h = 16384 // s, 2048 // d
            flops = 4 * b * s * s * h * d / (2 if causal else 1)
            for backend, column in (("sdpa-cudnn", "cudnn"), ("sdpa-cudnn", "fa3"), ("sdpa-flash", "fa2")):
                op = Attention(batch=b, heads=h, seq_q=s, seq_kv=s, head_dim=d, causal=causal,
                               dtype="fp16", backend=backend)
                t = float(predict(op, spec, prof).latency_s)
                out.append(("FlashAttention-3 table, H100", f"{column} d={d} {'causal' if causal else 'full'} s={s}",
                            row[column][i], flops / t / 1e12, "TFLOP/s"))
    for c in pub["matmul"]["cases"]:
        spec = load_spec(c["gpu"])
        prof = resolve_profile(spec, profile_name)
        sizes = [c["size"]] if c["size"] != "best" else [4096, 6144, 8192, 12288, 16384]
        best = max(2 * s**3 / float(predict(Gemm(m=s, n=s, k=s, dtype=c["dtype"]), spec, prof).latency_s)
                   for s in sizes)
        out.append(("matmul", f"{c['gpu']} {c['dtype']} {c['size']}", c["tflops"], best / 1e12, "TFLOP/s"))
    for c in pub["copy_bandwidth"]["cases"]:
        spec = load_spec(c["gpu"])
        prof = resolve_profile(spec, profile_name)
        nbytes = 2**25 * 8  # BabelStream's default array: 2^25 doubles
        t = float(predict(Copy(bytes=nbytes), spec, prof).latency_s)
        out.append(("copy bandwidth", c["gpu"], c["tb_per_s"], 2 * nbytes / t / 1e12, "TB/s"))
    ar = pub["allreduce_8gpu"]
    for c in ar["cases"]:
        spec = load_spec(c["gpu"])
        prof = resolve_profile(spec, profile_name)
        for size, bus in zip(map(float, ar["sizes_bytes"]), c["busbw_gb_per_s"]):
            t = predict(Collective(kind="allreduce", bytes=size, world_size=8,
                                   algorithm=c["algorithm"]), spec, prof)
            out.append(("AllReduce 8 GPUs busbw", f"{c['gpu']} {c['algorithm']} {size:.3g} B", bus,
                        float(t.losses["busbw_bytes_per_s"]) / 1e9, "GB/s"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=None)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    data = rows(args.profile)
    groups: dict[str, list[float]] = {}
    for src, case, pub, pred, unit in data:
        groups.setdefault(src, []).append(pred / pub - 1)
        if not args.markdown:
            print(f"{src:28s} {case:40s} published {pub:8.3g} predicted {pred:8.3g} {unit:8s} "
                  f"{100 * (pred / pub - 1):+6.1f}%")
    print()
    print("| published source | n | median abs error | max abs error | bias |")
    print("|---|---|---|---|---|")
    for src, e in groups.items():
        e = np.array(e)
        print(f"| {src} | {len(e)} | {100 * np.median(abs(e)):.0f}% | {100 * abs(e).max():.0f}% | "
              f"{100 * np.median(e):+.0f}% |")


if __name__ == "__main__":
    main()
