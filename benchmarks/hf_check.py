"""Hugging Face transformers' measured forward (benchmarks/hf_forward.py on the H200) against
what `predict model` says for the same shapes: the gap an engine's fused kernels leave to
transformers' own (`--engine hf` is not built yet; this measures how far off the engine
view is for people who run transformers).

    python benchmarks/hf_check.py

Per record: the measured time (eager: launched from Python; graph: the decode step
replayed), the profiler's kernel sum, and `predict model`'s step for the same batch and
lengths on the same number of layers (a config with fewer layers where the measurement kept
fewer), and their ratio.
"""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parent / "measurements" / "h200-sxm"
PRESETS = Path(__file__).resolve().parents[1] / "rooflinesim" / "models" / "presets"
FILES = ["hf-forward-llama", "hf-forward-qwen", "hf-forward-mixtral8", "hf-forward-mistral", "hf-forward-phi3",
         "hf-forward-qwen3moe8", "hf-dynamic-llama", "hf-dynamic-qwen"]


def main() -> None:
    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.hardware import load_spec
    from rooflinesim.models.config import from_hf_dict
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.models.workload import Phase, price_phases

    spec = load_spec("h200")
    profile = resolve_profile(spec, None)
    print("| model (layers) | phase | batch | tokens | mode | measured ms | kernel sum ms (kernels) | predict model ms | "
          "measured / predicted |\n|---|---|---|---|---|---|---|---|---|")
    for name in FILES:
        path = DATA / f"{name}.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r.get("status") != "ok" or "phase" not in r:
                continue
            d = json.loads((PRESETS / f"{r['model']}.json").read_text())
            d["num_hidden_layers"] = r["layers"]
            model = from_hf_dict(d, name=r["model"])
            if r["phase"] == "prefill":
                ph = Phase("prefill", batch=r["batch"], seq_q=r["seq"], seq_kv=r["seq"], sequences=r["batch"])
                n = r["seq"]
            else:
                ph = Phase("decode", batch=r["batch"], seq_q=1, seq_kv=r["context"] + 1, sequences=r["batch"])
                n = r["context"]
            pred = float(price_phases(model, spec, profile, Deployment(), [ph])[0].step_s[0])
            ks = f"{r['kernel_sum_s'] * 1e3:.2f} ({r['kernels']})" if "kernel_sum_s" in r else "-"
            mode = r["mode"] + (f", {r['cache']} cache" if r["phase"] == "decode" and "cache" in r else "")
            print(f"| {r['model']} ({r['layers']}) | {r['phase']} | {r['batch']} | {n} | {mode} | "
                  f"{r['measured_s'] * 1e3:.2f} | {ks} | {pred * 1e3:.2f} | {r['measured_s'] / pred:.2f} |")


if __name__ == "__main__":
    main()
