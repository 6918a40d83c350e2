"""Does a DeepSeek-V3 MoE block, run whole, take what rooflinesim prices it at?

``predict model`` prices a layer as the sum of its kernels, each fitted to the harness's
measurements of that kernel alone. This script builds the MoE half of one DeepSeek-V3/R1
layer as one GPU of a tensor-parallel-8 deployment holds it (256 routed experts with an
intermediate of 2048 / 8 = 256, one shared expert likewise cut, fp8 weights in 128 x 128
blocks), out of the harness's kernels (``rooflinesim/harness/triton_fp8.py``) and torch
ops for the rest, in the order the engines run it:

    RMSNorm -> router (bf16 GEMM) -> grouped top-8 (sigmoid, bias, best 4 of 8 groups)
    -> activations to fp8 per 1 x 128 group -> fused MoE gate/up -> SiLU x up
    -> to fp8 -> fused MoE down (times the routing weight) -> sum over the 8 choices
    -> shared expert (block-fp8 gate/up, SiLU x up, to fp8, block-fp8 down) -> add

and times, for each token count, every step alone and the whole block, each as a CUDA
graph (``CudaTimer``, as the harness times a case), and the whole block launched from
Python without a graph (as an engine runs a prefill too large for its captured graphs). The routed rows are sorted by
expert once, before timing (the engines' align step needs the host for its sizes here;
the model prices it as ``moe_routing``). Run it on a GPU to measure:

    python benchmarks/moe_layer_check.py --measure OUT.jsonl [--tokens 64,1024,2048,8192]

then anywhere rooflinesim is installed, to set the measurements beside the model's
per-layer kernels (``predict model --tp 8`` for DeepSeek-R1 on the H200, prefill of as
many tokens):

    python benchmarks/moe_layer_check.py --compare OUT.jsonl

``--cpu-check`` runs the measuring code on the CPU at a small size with torch stand-ins
for the Triton kernels (a test of the code path, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HIDDEN, EXPERTS, TOPK, GROUPS, TOPK_GROUPS, SCALING = 7168, 256, 8, 8, 4, 2.5
BLOCK = 128
TOKENS = (64, 1024, 2048, 8192)
# the model's kernels of the same block, one layer's worth each (predict model's op names)
MODEL_OPS = ("post_attention_norm", "moe_router", "moe_topk", "moe_routing", "moe_dispatch", "moe_experts_quant_in",
             "moe_experts_gate_up", "moe_experts_act", "moe_experts_quant_mid", "moe_experts_down", "moe_combine",
             "shared_gate_up_proj_quant", "shared_gate_up_proj", "shared_act", "shared_down_proj_quant",
             "shared_down_proj")
# the block's GEMMs, measured step -> the model's kernel (the rest: the small kernels around them)
GEMMS = {"router": "moe_router", "experts_gate_up": "moe_experts_gate_up", "experts_down": "moe_experts_down",
         "shared_gate_up": "shared_gate_up_proj", "shared_down": "shared_down_proj"}


def build(torch, tokens: int, inter: int, device, kernels, pick, hidden=HIDDEN, experts=EXPERTS):
    """The block's steps as {name: fn()} (every fn runs on the same buffers, so the
    whole block is their sequence) and their order. ``kernels``: (block_gemm, fused_moe,
    sort_routes, CONFIGS); ``pick(fns)``: the fastest config's key. Inputs are quantized as
    the harness's block-scaled cases quantize theirs."""
    from rooflinesim.harness.cases_gpu import _quantize_blocks, _quantize_groups

    block_gemm, fused_moe, sort_routes, configs = kernels

    def block_weights(w):
        return _quantize_blocks(torch, w)

    def quant(x):
        return _quantize_groups(torch, x)
    F = torch.nn.functional
    g = torch.Generator(device=device).manual_seed(tokens)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, device=device) * scale).to(torch.bfloat16)

    x = randn(tokens, hidden)
    ln = randn(hidden, scale=0.1) + 1.0
    w_router = randn(experts, hidden, scale=hidden ** -0.5)
    bias = torch.randn(experts, generator=g, device=device) * 0.01
    w13, s13 = block_weights(randn(experts, 2 * inter, hidden, scale=hidden ** -0.5))
    w2, s2 = block_weights(randn(experts, hidden, inter, scale=inter ** -0.5))
    ws13, ss13 = block_weights(randn(2 * inter, hidden, scale=hidden ** -0.5))
    ws2, ss2 = block_weights(randn(hidden, inter, scale=inter ** -0.5))
    rows = tokens * TOPK
    buf = {"h": torch.empty_like(x), "logits": torch.empty(tokens, experts, device=device, dtype=torch.float32),
           "gate_up": torch.zeros(rows, 2 * inter, device=device, dtype=torch.bfloat16),
           "down": torch.zeros(rows, hidden, device=device, dtype=torch.bfloat16),
           "shared_gate_up": torch.empty(tokens, 2 * inter, device=device, dtype=torch.bfloat16),
           "shared_down": torch.empty(tokens, hidden, device=device, dtype=torch.bfloat16)}

    def topk_ids():
        scores = buf["logits"].sigmoid()
        biased = scores + bias
        group = biased.view(tokens, GROUPS, -1).topk(2, dim=-1).values.sum(-1)
        keep = group.topk(TOPK_GROUPS, dim=-1).indices
        mask = torch.zeros_like(group).scatter_(1, keep, 1.0)
        masked = biased.masked_fill(~mask.bool().repeat_interleave(experts // GROUPS, dim=1), float("-inf"))
        ids = masked.topk(TOPK, dim=-1).indices
        w = scores.gather(1, ids)
        return ids, w / w.sum(-1, keepdim=True) * SCALING

    # routes from the real router on these inputs, sorted once (see the module's notes)
    buf["h"].copy_(F.rms_norm(x, (hidden,), ln, eps=1e-6))
    buf["logits"].copy_(torch.mm(buf["h"], w_router.t()).float())
    ids, weights = topk_ids()
    buf["weights"] = weights.reshape(-1).float().contiguous()
    buf["xq"], buf["xs"] = quant(buf["h"])
    buf["mid_q"], buf["mid_s"] = quant(torch.zeros(rows, inter, device=device, dtype=torch.bfloat16))
    buf["smid_q"], buf["smid_s"] = quant(torch.zeros(tokens, inter, device=device, dtype=torch.bfloat16))
    counts = torch.bincount(ids.reshape(-1), minlength=experts)
    per_expert = 2 * rows // experts
    moe_cfgs = [c for c in configs if c[0] <= max(16, per_expert)]
    routes = {bm: sort_routes(torch, ids, experts, bm) for bm in {c[0] for c in moe_cfgs}}
    dense_cfgs = [c for c in configs if c[0] <= max(16, 2 * tokens)]

    def up(cfg):
        return fused_moe(buf["xq"], buf["xs"], w13, s13, buf["gate_up"], routes[cfg[0]], cfg, True)

    def down(cfg):
        return fused_moe(buf["mid_q"], buf["mid_s"], w2, s2, buf["down"], routes[cfg[0]], cfg, False, buf["weights"])

    def s_up(cfg):
        return block_gemm(buf["xq"], buf["xs"], ws13, ss13, buf["shared_gate_up"], cfg)

    def s_down(cfg):
        return block_gemm(buf["smid_q"], buf["smid_s"], ws2, ss2, buf["shared_down"], cfg)
    cfg = {name: pick({c: (lambda c=c, f=f: f(c)) for c in cands})
           for name, f, cands in (("up", up, moe_cfgs), ("down", down, moe_cfgs),
                                  ("s_up", s_up, dense_cfgs), ("s_down", s_down, dense_cfgs))}

    def act(src, q, s):
        a = F.silu(src[:, :inter]) * src[:, inter:]
        aq, as_ = quant(a)
        q.copy_(aq)
        s.copy_(as_)

    steps = {
        "norm": lambda: buf["h"].copy_(F.rms_norm(x, (hidden,), ln, eps=1e-6)),
        "router": lambda: buf["logits"].copy_(torch.mm(buf["h"], w_router.t()).float()),
        "topk": lambda: buf["weights"].copy_(topk_ids()[1].reshape(-1)),
        "quant_in": lambda: [t.copy_(v) for t, v in zip((buf["xq"], buf["xs"]), quant(buf["h"]))],
        "experts_gate_up": lambda: up(cfg["up"]),
        "experts_act_quant": lambda: act(buf["gate_up"], buf["mid_q"], buf["mid_s"]),
        "experts_down": lambda: down(cfg["down"]),
        "combine": lambda: buf["shared_down"].add_(buf["down"].view(tokens, TOPK, hidden).sum(1)),
        "shared_gate_up": lambda: s_up(cfg["s_up"]),
        "shared_act_quant": lambda: act(buf["shared_gate_up"], buf["smid_q"], buf["smid_s"]),
        "shared_down": lambda: s_down(cfg["s_down"]),
        "residual": lambda: buf["h"].copy_(x + buf["shared_down"]),
    }
    order = ["norm", "router", "topk", "quant_in", "shared_gate_up", "shared_act_quant", "shared_down",
             "experts_gate_up", "experts_act_quant", "experts_down", "combine", "residual"]
    info = {"experts_touched": int((counts > 0).sum()), "busiest_expert_rows": int(counts.max()),
            "configs": {k: list(v) for k, v in cfg.items()}}
    return steps, order, info


def measure(args) -> None:
    import torch

    from rooflinesim.harness import triton_fp8
    from rooflinesim.harness.cases_gpu import _fastest_config
    from rooflinesim.harness.timing import CudaTimer

    kernels = (triton_fp8.block_gemm, triton_fp8.fused_moe, triton_fp8.sort_routes, triton_fp8.CONFIGS)
    timer, eager = CudaTimer(torch, graph=True), CudaTimer(torch, graph=False)
    out = Path(args.measure)
    with out.open("w") as f:
        f.write(json.dumps({"run": {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": " ".join(sys.argv),
                                    "device_name": torch.cuda.get_device_name(0), "torch": torch.__version__,
                                    "cuda": torch.version.cuda, "triton": __import__("triton").__version__}}) + "\n")
        for tokens in [int(t) for t in args.tokens.split(",")]:
            steps, order, info = build(torch, tokens, 2048 // 8, "cuda", kernels, _fastest_config)

            def whole(i, steps=steps, order=order):
                for name in order:
                    steps[name]()
            rec = {"tokens": tokens, **info, "steps_s": {}}
            for name in order:
                rec["steps_s"][name] = timer.time(lambda i, fn=steps[name]: fn(), 1).measured_s
            t = timer.time(whole, 1)
            rec["whole_s"], rec["whole_replays"] = t.measured_s, t.replays
            rec["whole_eager_s"] = eager.time(whole, 1).measured_s  # (launched from Python, no graph)
            rec["sum_of_steps_s"] = sum(rec["steps_s"].values())
            f.write(json.dumps(rec) + "\n")
            f.flush()
            print(f"tokens {tokens}: whole {rec['whole_s'] * 1e6:.1f} us (eager {rec['whole_eager_s'] * 1e6:.1f}), "
                  f"steps summed "
                  f"{rec['sum_of_steps_s'] * 1e6:.1f} us; " +
                  ", ".join(f"{k} {v * 1e6:.1f}" for k, v in rec["steps_s"].items()), flush=True)
            del steps
            torch.cuda.empty_cache()


def model_layer(tokens: int) -> dict:
    """Per-layer seconds of the block's kernels as predict model prices a prefill of
    ``tokens`` tokens of DeepSeek-R1 on 8 H200s (tp 8)."""
    cmd = [sys.executable, "-m", "rooflinesim", "predict", "model", "--model", "deepseek-v3", "--gpu", "h200-sxm",
           "--tp", "8", "--prompt", str(tokens), "--gen", "2", "--json"]
    ops = {o["op"]: o for o in json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
           ["prefill"]["ops"]}
    return {name: ops[name]["time_s"] / ops[name]["count"] for name in MODEL_OPS if name in ops}


def compare(args) -> None:
    rows = [json.loads(line) for line in Path(args.compare).read_text().splitlines() if line.strip()]
    for rec in rows:
        if "tokens" not in rec:
            continue
        model = model_layer(rec["tokens"])
        priced = sum(model.values())
        print(f"tokens {rec['tokens']}: measured whole {rec['whole_s'] * 1e6:.1f} us "
              f"(launched eagerly {rec.get('whole_eager_s', float('nan')) * 1e6:.1f} us) "
              f"(its steps alone {rec['sum_of_steps_s'] * 1e6:.1f} us), model {priced * 1e6:.1f} us "
              f"(measured / model {rec['whole_s'] / priced:.3f}; busiest expert {rec['busiest_expert_rows']} rows)")
        gm = sum(rec["steps_s"][k] for k in GEMMS)
        gp = sum(model.get(v, 0.0) for v in GEMMS.values())
        print(f"    the GEMMs: measured {gm * 1e6:.1f} us, model {gp * 1e6:.1f} us ({gm / gp:.3f}); the rest: "
              f"measured {(rec['sum_of_steps_s'] - gm) * 1e6:.1f} us (torch ops one by one), model "
              f"{(priced - gp) * 1e6:.1f} us (an engine's fused kernels)")
        for name, t in model.items():
            print(f"    model {name:26s} {t * 1e6:9.1f} us")
        for name, t in rec["steps_s"].items():
            print(f"    measured {name:23s} {t * 1e6:9.1f} us")


def cpu_check() -> None:
    """The measuring code on the CPU at 16 tokens, torch stand-ins for the kernels."""
    import torch

    from rooflinesim.harness.cases_gpu import _dequantized

    def block_gemm(a, sa, w, sw, out, cfg):
        return out.copy_(_dequantized(a, sa, 1) @ _dequantized(w, sw, BLOCK).t())

    def fused_moe(a, sa, w, sw, out, routing, cfg, per_token, weights=None):
        rows_sorted, block_expert, topk, routed = routing
        bm = rows_sorted.numel() // block_expert.numel()
        for b, e in enumerate(block_expert.tolist()):
            for r in rows_sorted[b * bm:(b + 1) * bm].tolist():
                if r < routed:
                    src = r // topk if per_token else r
                    v = _dequantized(a[src:src + 1], sa[src:src + 1], 1) @ _dequantized(w[e], sw[e], BLOCK).t()
                    out[r] = (v[0] * (weights[r] if weights is not None else 1.0)).to(out.dtype)
        return out

    def sort_routes(torch_, ids, experts, bm):
        flat = ids.reshape(-1)
        rows, blocks = [], []
        for e in range(experts):
            mine = (flat == e).nonzero().reshape(-1).tolist()
            if mine:
                n = math.ceil(len(mine) / bm)
                rows += mine + [flat.numel()] * (n * bm - len(mine))
                blocks += [e] * n
        return (torch.tensor(rows, dtype=torch.int32), torch.tensor(blocks, dtype=torch.int32), ids.shape[1],
                flat.numel())

    kernels = (block_gemm, fused_moe, sort_routes, ((16, 64, 1, 4, 4),))
    steps, order, info = build(torch, 16, BLOCK, "cpu", kernels, lambda fns: next(iter(fns)), hidden=256, experts=32)
    for name in order:
        steps[name]()
    print("cpu check ok:", info, "out finite:", bool(torch.isfinite(steps["residual"]()).all()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measure", help="measure on the GPU into this JSON-lines file")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--compare", help="set a measured file beside the model")
    ap.add_argument("--cpu-check", action="store_true")
    args = ap.parse_args()
    if args.cpu_check:
        cpu_check()
    elif args.measure:
        measure(args)
    elif args.compare:
        compare(args)
    else:
        ap.error("give --measure, --compare or --cpu-check")


if __name__ == "__main__":
    main()
