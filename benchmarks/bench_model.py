"""Speed of whole-model predictions (run: python benchmarks/bench_model.py).

Measures, on this machine, with the spec and calibration profile loaded once:
  * one full prediction (prefill and decode, with the per-kernel breakdown of both);
  * one vectorized sweep of decode steps over 1,000 (batch, context) points, and of
    prefills over 1,000 (batch, prompt) points;
  * the cold wall time of one `predict model` CLI call in a fresh process;
  * with --parts, where a full prediction's time goes.
Goals (README): a full prediction under 1 ms; a 1,000-point sweep under 20 ms.
Times are the minimum and the median over repeats (the minimum is the machine's speed,
the median what a busy machine gives).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

CASES = [  # (label, model, gpu, deployment keywords)
    ("llama-3-70b tp4 fp8", "llama-3-70b", "h100", dict(tp=4, weights="fp8")),
    ("llama-3.1-8b tp1 bf16", "llama-3.1-8b", "h200", dict()),
    ("mixtral-8x7b tp2 fp8", "mixtral-8x7b", "h200", dict(tp=2, weights="fp8")),
    ("deepseek-v3 tp8 ep8 fp8", "deepseek-v3", "h200", dict(tp=8, ep=8, weights="fp8", kv_cache="fp8")),
]


def timed(f, repeats: int) -> tuple[float, float]:
    f()  # warm caches (config, spec, imports)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def full_prediction(model, gpu, deploy, repeats):
    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.hardware import load_spec
    from rooflinesim.models.config import load_config
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.models.workload import predict_model

    spec, cfg = load_spec(gpu), load_config(model)
    prof, d = resolve_profile(spec, None), Deployment(**deploy)

    def once():
        r = predict_model(cfg, spec, prof, d, batch=32, prompt=2048, gen=256)
        r.prefill.table(), r.decode.table()

    return timed(once, repeats)


def parts(model, gpu, deploy, repeats) -> dict:
    """Where one full prediction's time goes (ms, minimum over repeats of each part run
    alone): the replay of the plan's recorded sizes, each group's rule terms, the
    roofline of all of them, the collectives, and the tables; the rest is the whole
    prediction less these."""
    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.hardware import load_spec
    from rooflinesim.models.config import load_config
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.models.plan import _plan
    from rooflinesim.models.workload import predict_model
    from rooflinesim.rules import terms_for
    from rooflinesim.pricing import PricedCollectives, PricedTerms

    spec, cfg = load_spec(gpu), load_config(model)
    prof, d = resolve_profile(spec, None), Deployment(**deploy)
    r = predict_model(cfg, spec, prof, d, batch=32, prompt=2048, gen=256)
    phases = [r.prefill.phase, r.decode.phase]
    plan = _plan(cfg, d, ("prefill", "decode"))
    args = plan.arguments(phases)
    ops = [g.op(a, f) for g, a, f in zip(plan.groups, args.groups, plan.fields)]
    terms = [terms_for(op, spec, prof) for op in ops]
    priced = [(op, t) for op, t in zip(ops, terms) if t is not None]
    links = [op for op, t in zip(ops, terms) if t is None]
    out = {"replay of the sizes": timed(lambda: plan.arguments(phases), repeats)[0]}
    for op, _ in priced:
        label = f"terms, {type(op).__name__}" + (f" {op.dtype}" if hasattr(op, "dtype") else "")
        out[label] = out.get(label, 0.0) + timed(lambda op=op: terms_for(op, spec, prof), repeats)[0]
    shapes = [(int(np.size(t.work.hbm_bytes)),) for _, t in priced]
    out[f"roofline of {len(priced)} groups at once"] = timed(
        lambda: PricedTerms([t for _, t in priced], spec, in_sequence=True, shapes=shapes), repeats)[0]
    if links:
        out[f"{len(links)} collective groups at once"] = timed(lambda: PricedCollectives(links, spec, prof), repeats)[0]
    out["tables"] = timed(lambda: (r.prefill.table(), r.decode.table()), repeats)[0]
    whole = full_prediction(model, gpu, deploy, repeats)[0]
    out["rest"] = whole - sum(out.values())
    out["whole"] = whole
    return {k: v * 1e3 for k, v in out.items()}


def sweep_points(model, gpu, deploy, phase, n, repeats):
    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.hardware import load_spec
    from rooflinesim.models.config import load_config
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.models.workload import sweep

    spec, cfg = load_spec(gpu), load_config(model)
    prof, d = resolve_profile(spec, None), Deployment(**deploy)
    rng = np.random.default_rng(0)
    batch = rng.integers(1, 257 if phase == "decode" else 17, n)
    context = rng.integers(128, 8193, n)

    def once():
        r = sweep(cfg, spec, prof, d, batch=batch, context=context, phase=phase)
        assert r.step_s.shape == (n,)

    return timed(once, repeats)


def cold_cli(runs: int) -> float:
    from bench_predict import cold_cli as run_cold

    return run_cold(runs, ["predict", "model", "--model", "llama-3-70b", "--gpu", "h100", "--tp", "4",
                           "--batch", "32", "--prompt", "2048", "--gen", "256", "--weights", "fp8"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--parts", action="store_true", help="where a full prediction's time goes, per case")
    args = ap.parse_args()
    if args.parts:
        for label, model, gpu, deploy in CASES:
            print(label)
            for k, v in parts(model, gpu, deploy, max(args.repeats, 200)).items():
                print(f"  {k:40s} {v:7.3f} ms")
        return
    out: dict[str, float] = {}
    for label, model, gpu, deploy in CASES:
        lo, med = full_prediction(model, gpu, deploy, args.repeats)
        out[f"full prediction, {label} (ms, min / median)"] = (lo * 1e3, med * 1e3)
    for label, model, gpu, deploy in CASES[:3]:
        for phase in ("decode", "prefill"):
            lo, med = sweep_points(model, gpu, deploy, phase, args.points, max(5, args.repeats // 5))
            out[f"{args.points}-point {phase} sweep, {label} (ms, min / median)"] = (lo * 1e3, med * 1e3)
    out["cold CLI `predict model` (s, median)"] = cold_cli(5)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for k, v in out.items():
        print(f"{k:62s} " + (" / ".join(f"{x:7.3f}" for x in v) if isinstance(v, tuple) else f"{v:7.3f}"))


if __name__ == "__main__":
    main()
