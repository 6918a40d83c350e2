"""Whole-model predictions against TensorRT-LLM's published FP8 max-throughput table
(output tokens/s, as published; copied with the source in benchmarks/data/end_to_end.yaml).

    python benchmarks/end_to_end_check.py

Each case runs `rooflinesim predict model --model M --gpu G --tp T --weights fp8
--kv-dtype fp8 --batch max --prompt IN --gen OUT --json` and reads the end-to-end output
tokens/s (batch x gen over prefill + (gen - 1) decode steps).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

DATA = Path(__file__).parent / "data" / "end_to_end.yaml"


def main():
    pub = yaml.safe_load(DATA.read_text())
    print(pub["source"])
    print("| model, GPU, TP | in/out | published tok/s | predicted tok/s | batch | error |")
    print("|---|---|---|---|---|---|")
    for case in pub["cases"]:
        for (inp, out), published in zip(pub["lengths"], case["tokens_per_s"]):
            cmd = [sys.executable, "-m", "rooflinesim.cli.main", "predict", "model", "--model",
                   case["model"], "--gpu", case["gpu"], "--tp", str(case["tp"]), "--weights", "fp8",
                   "--kv-dtype", "fp8", "--batch", "max", "--prompt", str(inp), "--gen", str(out),
                   "--json"]
            res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            got = res["tokens_per_s"]["overall"]["total"]
            print(f"| {case['model']}, {case['gpu']}, TP{case['tp']} | {inp}/{out} | {published:,} | "
                  f"{got:,.0f} | {res['batch']} | {100 * (got / published - 1):+.0f}% |")


if __name__ == "__main__":
    main()
