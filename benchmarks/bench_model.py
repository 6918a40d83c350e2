"""Speed of whole-model predictions (run: python benchmarks/bench_model.py).

Measures, on this machine, with the spec and calibration profile loaded once:
  * one full prediction (prefill and decode, with the per-kernel breakdown of both) of
    another random request each repeat;
  * one vectorized sweep of decode steps over 1,000 (batch, context) points, and of
    prefills over 1,000 (batch, prompt) points;
  * 1,000 random requests (batch, prompt, gen) priced as one array (predict_requests);
  * the cold wall time of one `predict model` CLI call in a fresh process;
  * with --parts, the first prediction of a model (its plan found), and where a full
    prediction's time goes (the pricing also group by group).
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


def _setup(model, gpu, deploy):
    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.hardware import load_spec
    from rooflinesim.models.config import load_config
    from rooflinesim.models.deploy import Deployment

    spec = load_spec(gpu)
    return load_config(model), spec, resolve_profile(spec, None), Deployment(**deploy)


def _requests(n: int) -> list[dict]:
    """Requests of random batch (1-256), prompt (128-8192) and gen (16-1024): each
    repeat predicts another one (one prompt chunk and four decode points, the shape of
    every such prediction)."""
    rng = np.random.default_rng(0)
    return [dict(batch=int(rng.integers(1, 257)), prompt=int(rng.integers(128, 8193)),
                 gen=int(rng.integers(16, 1025))) for _ in range(n)]


def full_prediction(model, gpu, deploy, repeats):
    """One full prediction, prefill and decode with both tables, of another request each
    repeat."""
    from rooflinesim.models.workload import predict_model

    cfg, spec, prof, d = _setup(model, gpu, deploy)
    requests = iter(_requests(repeats + 1))

    def once():
        r = predict_model(cfg, spec, prof, d, **next(requests))
        r.prefill.table(), r.decode.table()

    predict_model(cfg, spec, prof, d, batch=32, prompt=2048, gen=256)  # (the shape seen once)
    return timed(once, repeats)


def first_prediction(model, gpu, deploy, repeats) -> float:
    """The first prediction of a model and deployment in a process (its plan found), ms."""
    from rooflinesim.models import plan as plans
    from rooflinesim.models.workload import predict_model

    cfg, spec, prof, d = _setup(model, gpu, deploy)
    times = []
    for _ in range(repeats):
        plans._plan.cache_clear()
        t0 = time.perf_counter()
        predict_model(cfg, spec, prof, d, batch=32, prompt=2048, gen=256)
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


def parts(model, gpu, deploy, repeats) -> dict:
    """Where one full prediction's time goes (ms, minimum over repeats of each part run
    alone): building the kernels on the phases' points, pricing them, the two tables,
    and the rest (the phases' numbers, the combination into stages and steps, the result
    objects)."""
    from rooflinesim.models.plan import _inputs, _plan, _price
    from rooflinesim.models.workload import predict_model

    cfg, spec, prof, d = _setup(model, gpu, deploy)
    r = predict_model(cfg, spec, prof, d, batch=32, prompt=2048, gen=256)
    plan = _plan(cfg, d, ("prefill", "decode"))
    phases = [r.prefill.phase, r.decode.phase]
    ns = tuple(ph.n for ph in phases)
    args = plan.arguments(phases)
    out = {"kernels built on the points": timed(lambda: [plan.built(j, _inputs(ph)) for j, ph in enumerate(phases)],
                                                repeats)[0],
           "arguments laid (the kernels built included)": timed(lambda: plan.arguments(phases), repeats)[0],
           "pricing": timed(lambda: _price(plan, args, ns, spec, prof), repeats)[0],
           "tables": timed(lambda: (r.prefill.table(), r.decode.table()), repeats)[0]}
    out.update(_pricing_parts(plan, args, ns, spec, prof, repeats))
    whole = full_prediction(model, gpu, deploy, repeats)[0]
    out["rest"] = whole - sum(out[k] for k in ("arguments laid (the kernels built included)", "pricing", "tables"))
    out["whole"] = whole
    return {k: v * 1e3 for k, v in out.items()}


def _pricing_parts(plan, args, ns, spec, prof, repeats) -> dict:
    """Within the pricing (s, each run alone): each group's rule terms (by class, in plan
    order), the roofline of all groups with terms at once, the collectives at once."""
    from rooflinesim.ops.collectives import Collective
    from rooflinesim.pricing import PricedCollectives, price_terms
    from rooflinesim.rules import terms_for

    ops = [g.op(a, f) for g, a, f in zip(plan.groups, args.groups, plan.fields)]
    sizes = [sum(ns[j] for j, _ in g.members) for g in plan.groups]
    terms = [terms_for(op, spec, prof) for op in ops]
    out = {}
    for i, (g, op) in enumerate(zip(plan.groups, ops)):
        if terms[i] is not None:
            label = f"  rule terms, {g.cls.__name__} group {i} ({len(g.members)} kernels)"
            out[label] = timed(lambda op=op: terms_for(op, spec, prof), repeats)[0]
    have = [i for i, t in enumerate(terms) if t is not None]
    out["  roofline of those groups at once"] = timed(lambda: price_terms(
        [terms[i] for i in have], spec, in_sequence=True, shapes=[(sizes[i],) for i in have]), repeats)[0]
    links = [i for i, op in enumerate(ops) if type(op) is Collective]
    if links:
        out["  collectives at once"] = timed(lambda: PricedCollectives(
            [ops[i] for i in links], spec, prof, shapes=[(sizes[i],) for i in links]), repeats)[0]
    return out


def sweep_points(model, gpu, deploy, phase, n, repeats):
    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.hardware import load_spec
    from rooflinesim.models.config import load_config
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.models.workload import sweep

    spec, cfg = load_spec(gpu), load_config(model)
    prof, d = resolve_profile(spec, None), Deployment(**deploy)
    rng = np.random.default_rng(0)

    def once():  # (other random points each repeat)
        batch = rng.integers(1, 257 if phase == "decode" else 17, n)
        context = rng.integers(128, 8193, n)
        r = sweep(cfg, spec, prof, d, batch=batch, context=context, phase=phase)
        assert r.step_s.shape == (n,)

    return timed(once, repeats)


def many_requests(model, gpu, deploy, n, repeats):
    """``n`` random requests (batch, prompt, gen as in _requests) as one array
    (``predict_requests``: each request's TTFT, TPOT and end-to-end latency)."""
    from rooflinesim.models.workload import predict_requests

    cfg, spec, prof, d = _setup(model, gpu, deploy)
    reqs = _requests(n)
    batch, prompt, gen = (np.array([r[k] for r in reqs]) for k in ("batch", "prompt", "gen"))

    def once():
        assert predict_requests(cfg, spec, prof, d, batch=batch, prompt=prompt, gen=gen).ttft_s.shape == (n,)

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
            first = {"first prediction (the plan found)": first_prediction(model, gpu, deploy, 10)}
            for k, v in {**first, **parts(model, gpu, deploy, max(args.repeats, 200))}.items():
                print(f"  {k:50s} {v:7.3f} ms")
        return
    out: dict[str, float] = {}
    for label, model, gpu, deploy in CASES:
        lo, med = full_prediction(model, gpu, deploy, args.repeats)
        out[f"full prediction, {label} (ms, min / median)"] = (lo * 1e3, med * 1e3)
    for label, model, gpu, deploy in CASES[:3]:
        for phase in ("decode", "prefill"):
            lo, med = sweep_points(model, gpu, deploy, phase, args.points, max(10, args.repeats // 5))
            out[f"{args.points}-point {phase} sweep, {label} (ms, min / median)"] = (lo * 1e3, med * 1e3)
    for label, model, gpu, deploy in CASES:
        lo, med = many_requests(model, gpu, deploy, args.points, max(5, args.repeats // 10))
        out[f"{args.points} requests as one array, {label} (ms, min / median)"] = (lo * 1e3, med * 1e3)
    out["cold CLI `predict model` (s, median)"] = cold_cli(5)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for k, v in out.items():
        print(f"{k:62s} " + (" / ".join(f"{x:7.3f}" for x in v) if isinstance(v, tuple) else f"{v:7.3f}"))


if __name__ == "__main__":
    main()
