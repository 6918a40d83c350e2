"""What DeepSeek-R1's decode steps cost per cached token, read from the engines' own logs.

    python benchmarks/mla_log_slopes.py --repo <a clone of Michaelvll/llm-ie-benchmarks>

The published DeepSeek-R1 runs on 8 x H200 (vLLM 0.8.4 and SGLang 0.4.5.post3, the serving
check's twelve points, benchmarks/data/published_serving.yaml) ship their servers' logs. Both
engines log their decode rate as they go: vLLM every 10 s (generation tokens/s, the requests
running, the KV cache's use in percent of its logged size), SGLang every 40 decode steps (the
requests running, the tokens they hold, generation tokens/s). Where the batch stays the same
and nothing else runs (vLLM: no prompt tokens in the window and the same batch before and
after it; SGLang: the tokens held grew by exactly 40 a request since its last line), a step
took running / (generation tokens/s). Fitted as a line over the tokens the batch holds (where
its windows span 100,000 tokens or more), each batch size's slope is what a cached token adds to a step (the MLA decode kernel's read of it,
in all 61 layers) and its intercept what the step costs without a cache.

Beside them, the model's decode step (`predict model`'s kernel sum, as each engine runs it: no
host time) at the same batches and contexts, under the shipped H200 profile without its
FlashMLA key (MLA decode priced as cuDNN's decode kernel, as before the key) and with it (the
H100's, benchmarks/measurements/h100-sxm/mla-fit.yaml, lent as fractions of the H200's peaks);
vLLM runs FlashMLA there (its log: "Forcing kv cache block size to 64 for FlashMLA
backend"), SGLang FlashAttention-3 (its log: "Use fa3 backend by default"), which the model
prices as the GPU's default class with or without the key. The logs are read from the clone
(at the commit the points cite), not copied here: the repository states no licence.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import numpy as np

COMMIT = "5f717fed82f9bbf1d15881842bd61b1915d78b1e"  # (the commit published_serving.yaml cites)
LOGS = {"vllm": ("sgl/logs/vllm-deepseek-r1.log", "sgl/logs/vllm-deepseek-r1-200.log"),
        "sglang": ("sgl/logs/sgl-0.4.5.post3-deepseek-r1.log", "sgl/logs/sgl-0.4.5.post3-deepseek-r1-200.log")}
SGLANG_LOG_INTERVAL = 40  # decode steps between SGLang's lines (its decode_log_interval default)
MIN_POINTS = 4
MIN_SPAN = 100_000  # tokens held: a batch size whose windows span fewer gives no slope

VLLM_LINE = re.compile(r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, "
                       r"Running: (\d+) reqs, Waiting: (\d+) reqs, GPU KV cache usage: ([\d.]+)%")
VLLM_KV = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
SGLANG_LINE = re.compile(r"TP0\] Decode batch\. #running-req: (\d+), #token: (\d+), token usage: [\d.]+, "
                         r"gen throughput \(token/s\): ([\d.]+), #queue-req: (\d+)")


def _text(repo: Path, path: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(repo), "show", f"{COMMIT}:{path}"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"error: cannot read {path} at {COMMIT[:7]} from {repo} ({e})") from None
    return out.stdout.decode("utf-8", "replace")


def vllm_steps(text: str) -> list[tuple[int, float, float]]:
    """(running, tokens held, step seconds) of each steady 10 s window of pure decode."""
    kv = min(int(m.replace(",", "")) for m in VLLM_KV.findall(text))  # (vLLM uses the least over the ranks)
    rows = [tuple(float(x) for x in m) for m in VLLM_LINE.findall(text)]
    out = []
    for before, (prompt, gen, running, waiting, usage), after in zip(rows, rows[1:], rows[2:]):
        if prompt == 0 and waiting == 0 and gen > 0 and running > 0 and before[2] == running == after[2]:
            out.append((int(running), usage / 100 * kv, running / gen))
    return out


def sglang_steps(text: str) -> list[tuple[int, float, float]]:
    """(running, tokens held, step seconds) of each line whose 40 steps were all decode."""
    rows = [tuple(float(x) for x in m) for m in SGLANG_LINE.findall(text)]
    out = []
    for (r0, t0, _, _), (running, tokens, gen, queued) in zip(rows, rows[1:]):
        if running > 0 and gen > 0 and queued == 0 and r0 == running and tokens - t0 == running * SGLANG_LOG_INTERVAL:
            out.append((int(running), tokens, running / gen))
    return out


def model_steps(engine: str, points, flashmla: bool) -> np.ndarray:
    """The model's decode step (s) at each (running, tokens held), with the shipped profile's
    FlashMLA key or without it."""
    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.hardware import load_spec
    from rooflinesim.models.config import load_config
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.models.workload import predict_model
    from rooflinesim.serve.defaults import engine_kernels

    spec, model = load_spec("h200-sxm"), load_config("deepseek-ai/deepseek-r1")
    prof = resolve_profile(spec, None)
    if not flashmla:
        prof = prof.model_copy(deep=True)
        prof.kernels["attention"].pop("flashmla", None)
    # (both ran a custom AllReduce: vLLM before v0.11, SGLang by default)
    d = Deployment(tp=8, weights="fp8", **engine_kernels(engine, "custom"))
    return np.array([float(predict_model(model, spec, prof, d, batch=n, prompt=max(int(t / n), 1), gen=2).tpot_s)
                     for n, t, _ in points])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, required=True, help="a clone of Michaelvll/llm-ie-benchmarks")
    args = ap.parse_args()
    print("| engine | batch | windows | tokens held | measured: ns a token, ms at none | model without "
          "FlashMLA's key | model (shipped: with it) | measured / model |")
    print("|---|---|---|---|---|---|---|---|")
    for engine, paths in LOGS.items():
        points = [p for path in paths for p in (vllm_steps if engine == "vllm" else sglang_steps)(_text(args.repo, path))]
        for n in sorted({p[0] for p in points}):
            mine = [p for p in points if p[0] == n]
            tokens, step = np.array([p[1] for p in mine]), np.array([p[2] for p in mine])
            if len(mine) < MIN_POINTS or np.ptp(tokens) < MIN_SPAN:
                continue
            shipped = model_steps(engine, mine, True)
            cells = []
            for s in (step, model_steps(engine, mine, False), shipped):
                slope, at0 = np.polyfit(tokens, s, 1)
                cells.append(f"{slope * 1e9:.1f} ns, {at0 * 1e3:.1f} ms")
            print(f"| {engine} | {n} | {len(mine)} | {tokens.min():,.0f}-{tokens.max():,.0f} | {' | '.join(cells)} | "
                  f"{np.median(step / shipped):.2f} |")


if __name__ == "__main__":
    main()
