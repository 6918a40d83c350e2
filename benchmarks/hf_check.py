"""Hugging Face transformers' measured forward against `predict model --engine hf`.

    python benchmarks/hf_check.py [FILE.jsonl ...] [--rows] [--engine] [--gpu NAME]

Files default to the development set (the hf-forward-*, hf-dynamic-* and hf-ops* files of
benchmarks/measurements/h200-sxm/); give others to check them (the hf-untouched-* and
hf-untouched2-* files, measured before the inventory and the fits were fixed, were each
looked at once, after).
Per record, what the issue's goals compare:
  prefill (eager forward, no cache)  the profiler's kernel sum against the predicted kernel sum
  decode, CUDA graph (StaticCache)   the replayed step against the predicted step
  decode, eager (either cache)       the measured step (device events around the Python call)
                                     against the predicted eager step (host and GPU in series)
  op traces (two layers)             each forward's kernel sum, prefill and decode
and the median and 90th percentile of |error| per kind. ``--engine`` adds, per record, what
the engine view (`predict model` without --engine hf) says; ``--rows`` prints every record;
``--gpu`` names the GPU the files were measured on (default: the H200), priced with its
profile (for a GPU nobody fitted, the one transferred to it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "measurements" / "h200-sxm"
DEVELOPMENT = ["hf-forward-llama", "hf-forward-qwen", "hf-forward-mixtral8", "hf-forward-mistral", "hf-forward-phi3",
               "hf-forward-qwen3moe8", "hf-dynamic-llama", "hf-dynamic-qwen", "hf-ops", "hf-ops-dynamic", "hf-ops-v3"]


def kind_of(r: dict) -> str | None:
    if r.get("status") != "ok" or "phase" not in r:
        return None
    if r["mode"] == "trace":
        return f"trace {r['phase']}"
    if r["phase"] == "prefill":
        return "prefill kernel sum" if "kernel_sum_s" in r else None
    return f"decode {r['mode']}" + (" dynamic" if r.get("cache") == "dynamic" and r["mode"] == "eager" else "")


def predicted(r: dict, spec, profile, engine: bool = False) -> float:
    from rooflinesim.calibration.hf import record_step
    from rooflinesim.models.workload import price_phases

    model, d, ph = record_step(r, engine=engine)
    return float(price_phases(model, spec, profile, d, [ph])[0].step_s[0])


def truth(r: dict) -> float:
    return r["kernel_sum_s"] if r["phase"] == "prefill" or r["mode"] == "trace" else r["measured_s"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="*")
    ap.add_argument("--rows", action="store_true")
    ap.add_argument("--engine", action="store_true")
    ap.add_argument("--gpu", default="h200")
    args = ap.parse_args()
    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.hardware import load_spec

    spec = load_spec(args.gpu)
    profile = resolve_profile(spec, None)
    files = [Path(f) for f in args.files] or [DATA / f"{n}.jsonl" for n in DEVELOPMENT]
    errors: dict[str, list[float]] = {}
    if args.rows:
        print("| model (layers) | phase | batch | tokens | cache | mode | measured ms | predicted ms | error |"
              + (" engine ms |" if args.engine else "") + "\n|---|---|---|---|---|---|---|---|---|"
              + ("---|" if args.engine else ""))
    for path in files:
        for line in path.read_text().splitlines():
            r = json.loads(line)
            kind = kind_of(r)
            if kind is None:
                continue
            p, m = predicted(r, spec, profile), truth(r)
            errors.setdefault(kind, []).append(p / m - 1)
            if args.rows:
                n = r.get("seq") or r.get("context")
                eng = f" {predicted(r, spec, profile, engine=True) * 1e3:.2f} |" if args.engine else ""
                print(f"| {r['model']} ({r['layers']}) | {r['phase']} | {r['batch']} | {n} | {r.get('cache', '-')} | "
                      f"{r['mode']} | {m * 1e3:.2f} | {p * 1e3:.2f} | {p / m - 1:+.1%} |{eng}")
    print("\n| kind | records | median abs error | p90 abs error | median signed error |\n|---|---|---|---|---|")
    for kind, e in sorted(errors.items()):
        a = np.abs(e)
        print(f"| {kind} | {len(e)} | {np.median(a):.1%} | {np.percentile(a, 90):.1%} | {np.median(e):+.1%} |")


if __name__ == "__main__":
    main()
