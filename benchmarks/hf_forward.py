"""Hugging Face transformers' forward pass, timed as people run it (for `predict model
--engine hf`): a model built from a preset's config.json with random bf16 weights and SDPA
attention, on one GPU.

    python benchmarks/hf_forward.py --out FILE.jsonl [--model NAME ...] [--layers N] [--budget-s S]
        [--prefill BxS ...] [--decode BxC ...] [--trace]

Per model: prefill (batch x prompt, no cache) and one decode step with a StaticCache, or
with ``--cache dynamic`` a DynamicCache (batch x context: the cache filled to the context,
one new token), each
  * eager: the forward launched from Python, device events around each call (median of
    the timed calls after warm-up), with the wall time around it;
  * graph (decode only): the decode step captured once in a CUDA graph and replayed;
  * kernels: one profiled forward, the sum of its kernel durations and their count, and the
    ten kernels that took longest in all (name, count, seconds).
With ``--trace`` each point is instead one profiled forward written op by op: every aten op
that launched kernels, in launch order, with its input shapes and dtypes and its kernels'
names and durations (the kernel inventory of transformers' forward, as run).
Weights and caches are built once per model; inputs are random token ids. ``--layers``
keeps that many decoder layers (the record says how many; the rest of the config is the
preset's), so that large models fit and runs stay short. Needs torch and transformers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

PRESETS = Path(__file__).resolve().parents[1] / "rooflinesim" / "models" / "presets"
PREFILL = [(1, 128), (1, 512), (1, 2048), (4, 512), (8, 1024)]
DECODE = [(1, 512), (1, 4096), (8, 1024), (32, 1024), (64, 2048)]
WARM, TIMED = 3, 10
SLACK = 128  # cache positions past the context


def _config(name: str, layers: int | None):
    from transformers import AutoConfig

    d = json.loads((PRESETS / f"{name}.json").read_text())
    d.pop("transformers_version", None)
    if layers:
        d["num_hidden_layers"] = min(layers, d["num_hidden_layers"])
    kind = d.pop("model_type")
    cfg = AutoConfig.for_model(kind, **{k: v for k, v in d.items() if k != "architectures"})
    cfg._attn_implementation = "sdpa"
    return cfg, d


def _cuda_time(torch, fn, warm=WARM, timed=TIMED) -> tuple[float, float]:
    """(median seconds per call by device events, median wall seconds per call)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    dev, wall = [], []
    for _ in range(timed):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        a.record()
        fn()
        b.record()
        b.synchronize()
        wall.append(time.perf_counter() - t0)
        dev.append(a.elapsed_time(b) / 1e3)
    return statistics.median(dev), statistics.median(wall)


def _kernels(torch, fn) -> dict:
    """One profiled call: the kernels' summed duration, count and the ten longest in all."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    total, count, by = 0.0, 0, {}
    for e in prof.events():
        if str(getattr(e, "device_type", "")).rsplit(".", 1)[-1] != "CUDA":
            continue
        activity = getattr(e, "activity_type", None)
        name = e.name or ""
        if isinstance(activity, str) and activity:
            if activity not in ("kernel", "gpu_memcpy", "gpu_memset"):
                continue
        elif name.startswith(("aten::", "ProfilerStep")):  # (annotations on the GPU row)
            continue
        us = float(getattr(e, "device_time", None) or getattr(e, "cuda_time", 0.0) or 0.0)
        total += us
        count += 1
        n, t = by.get(name, (0, 0.0))
        by[name] = (n + 1, t + us)
    top = sorted(by.items(), key=lambda kv: -kv[1][1])[:10]
    return {"kernel_sum_s": total / 1e6, "kernels": count,
            "top_kernels": [{"name": k[:120], "count": n, "s": s / 1e6} for k, (n, s) in top]}


def _trace(torch, fn) -> dict:
    """One profiled call, op by op: each aten op that launched kernels (innermost), in launch
    order, with its input shapes and dtypes and its kernels (name, microseconds)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        fn()
        torch.cuda.synchronize()
    dtypes = {}
    try:  # (dtypes are on kineto's raw events, keyed by the op's correlation id)
        for ev in prof.profiler.kineto_results.events():
            if str(ev.device_type()).rsplit(".", 1)[-1] == "CPU":
                dtypes[ev.correlation_id()] = [str(t) for t in ev.dtypes()]
    except Exception:  # noqa: BLE001 (older or newer profilers: shapes only)
        pass
    ops, total = [], 0.0
    for e in prof.events():
        ks = [k for k in (getattr(e, "kernels", None) or [])]
        if not ks:
            continue
        rows = [[k.name[:140], round(float(k.duration), 3)] for k in ks]
        total += sum(r[1] for r in rows)
        start = getattr(getattr(e, "time_range", None), "start", 0)
        ops.append({"t": start, "op": e.name, "shapes": [list(x) if isinstance(x, (list, tuple)) else x
                                                       for x in (e.input_shapes or [])],
                    "dtypes": dtypes.get(e.id, []), "kernels": rows})
    ops.sort(key=lambda o: o["t"])
    for o in ops:
        del o["t"]
    host = []  # where the host's time goes: the ops with the most self CPU time
    try:
        for a in sorted(prof.key_averages(), key=lambda a: -a.self_cpu_time_total)[:20]:
            host.append([a.key[:80], a.count, round(float(a.self_cpu_time_total), 1)])
    except Exception:  # noqa: BLE001
        pass
    return {"ops": ops, "op_kernel_sum_s": total / 1e6, "host_self_us": host, **_kernels(torch, fn)}


def _static_cache(cfg, batch, length, device, dtype):
    from transformers import StaticCache

    try:
        return StaticCache(config=cfg, max_cache_len=length)
    except TypeError:
        return StaticCache(config=cfg, max_batch_size=batch, max_cache_len=length, device=device, dtype=dtype)


def run_model(torch, name: str, layers: int | None, out, deadline: float, base: dict, cache_kind: str = "static",
              prefill=PREFILL, decode=DECODE, trace: bool = False) -> None:
    from transformers import AutoModelForCausalLM

    cfg, d = _config(name, layers)
    torch.manual_seed(0)
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        except TypeError:  # (transformers before the dtype argument)
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    model.eval()
    vocab = cfg.vocab_size
    head = {**base, "model": name, "layers": cfg.num_hidden_layers, "preset_layers":
            json.loads((PRESETS / f"{name}.json").read_text())["num_hidden_layers"], "attention": "sdpa"}

    def emit(rec):
        out.write(json.dumps(rec) + "\n")
        out.flush()
        print(json.dumps({k: rec[k] for k in rec if k not in ("top_kernels",)})[:300], file=sys.stderr, flush=True)

    with torch.inference_mode():
        for batch, prompt in prefill:
            if time.time() > deadline:
                return
            ids = torch.randint(0, vocab, (batch, prompt), device="cuda")
            try:
                fn = lambda: model(input_ids=ids, use_cache=False, logits_to_keep=1)  # noqa: E731
                if trace:
                    emit({**head, "phase": "prefill", "batch": batch, "seq": prompt, "mode": "trace",
                          **_trace(torch, fn), "status": "ok"})
                    continue
                dev, wall = _cuda_time(torch, fn)
                emit({**head, "phase": "prefill", "batch": batch, "seq": prompt, "mode": "eager", "measured_s": dev,
                      "wall_s": wall, **_kernels(torch, fn), "status": "ok"})
            except Exception as e:  # noqa: BLE001 (a record says why)
                emit({**head, "phase": "prefill", "batch": batch, "seq": prompt, "status": "failed",
                      "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"})
            torch.cuda.empty_cache()
        for batch, context in decode:
            if time.time() > deadline:
                return
            rec = {**head, "phase": "decode", "batch": batch, "context": context, "cache": cache_kind,
                   **({"cache_len": context + SLACK} if cache_kind == "static" else {})}
            try:
                fill = torch.randint(0, vocab, (batch, context), device="cuda")
                tok = torch.randint(0, vocab, (batch, 1), device="cuda")
                if cache_kind == "static":
                    # (room past the context: each call writes one token further where the model
                    # counts the cache's filled positions itself; some 20 calls are made, so the
                    # context grows by at most that over the measurement)
                    cache = _static_cache(cfg, batch, context + SLACK, "cuda", torch.bfloat16)
                    model(input_ids=fill, past_key_values=cache, use_cache=True, logits_to_keep=1,
                          cache_position=torch.arange(context, device="cuda"))
                    pos = torch.tensor([context], device="cuda")

                    def step():
                        return model(input_ids=tok, past_key_values=cache, use_cache=True, cache_position=pos,
                                     logits_to_keep=1)
                else:  # DynamicCache: each call appends (cat) one token, as generate() does
                    cache = model(input_ids=fill, use_cache=True, logits_to_keep=1).past_key_values

                    def step():
                        return model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1)

                if trace:
                    emit({**rec, "mode": "trace", **_trace(torch, step), "status": "ok"})
                    del cache, fill
                    torch.cuda.empty_cache()
                    continue
                dev, wall = _cuda_time(torch, step)
                emit({**rec, "mode": "eager", "measured_s": dev, "wall_s": wall, **_kernels(torch, step),
                      "status": "ok"})
            except Exception as e:  # noqa: BLE001
                emit({**rec, "mode": "eager", "status": "failed",
                      "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"})
                torch.cuda.empty_cache()
                continue
            if cache_kind != "static":  # (a growing cache cannot be captured)
                del cache, fill
                torch.cuda.empty_cache()
                continue
            try:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3):
                        step()
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    step()
                dev, wall = _cuda_time(torch, graph.replay)
                emit({**rec, "mode": "graph", "measured_s": dev, "wall_s": wall, "status": "ok"})
                del graph, cache, fill
            except Exception as e:  # noqa: BLE001 (capture refused: the eager record stands)
                emit({**rec, "mode": "graph", "status": "failed",
                      "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"})
            torch.cuda.empty_cache()
    del model
    torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", action="append", default=None)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--budget-s", type=float, default=400)
    ap.add_argument("--cache", choices=("static", "dynamic"), default="static",
                    help="decode with a StaticCache (also graph-replayed) or a DynamicCache (eager only)")
    ap.add_argument("--no-prefill", action="store_true", help="decode steps only")
    ap.add_argument("--prefill", action="append", default=None, metavar="BxS",
                    help="prefill points (batch x prompt), instead of the default ones")
    ap.add_argument("--decode", action="append", default=None, metavar="BxC",
                    help="decode points (batch x context), instead of the default ones")
    ap.add_argument("--trace", action="store_true", help="one profiled forward per point, op by op")
    args = ap.parse_args()
    points = lambda xs, default: [tuple(int(v) for v in x.split("x")) for x in xs] if xs else default  # noqa: E731
    prefill = [] if args.no_prefill else points(args.prefill, PREFILL)
    decode = points(args.decode, DECODE)
    import torch
    import transformers

    p = torch.cuda.get_device_properties(0)
    base = {"op": "hf_forward", "hardware": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "transformers": transformers.__version__, "cuda": torch.version.cuda,
            "python": platform.python_version(), "sm_count": p.multi_processor_count, "dtype": "bf16"}
    deadline = time.time() + args.budget_s
    if os.path.exists(args.out) and os.path.getsize(args.out):
        sys.exit(f"{args.out} exists; give a new file")
    with open(args.out, "w") as out:
        for name in args.model or ["llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b"]:
            if time.time() > deadline:
                break
            try:
                run_model(torch, name, args.layers, out, deadline, base, args.cache, prefill, decode, args.trace)
            except Exception as e:  # noqa: BLE001
                out.write(json.dumps({**base, "model": name, "status": "failed",
                                      "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}) + "\n")
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
