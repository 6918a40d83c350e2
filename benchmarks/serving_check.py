"""`rooflinesim serve` against published serving benchmarks (benchmarks/data/published_serving.yaml).

    python benchmarks/serving_check.py [--samples 10] [--points] [--write-residuals] [--engine E] [--jobs N]
        [--data FILE] [--seed S] [--arrivals-from REPO]

Every point of the file whose workload can be re-created is simulated: the random dataset
(with the semantics of the client that printed it: SGLang's bench_serving draws each length
uniformly from [range_ratio x L, L], and it, like vLLM's benchmark_serving.py before 0.10,
sends the gaps between requests as drawn, not rescaled to the rate as serve's vLLM-style
default does: ``fill=False``), its rate and number of prompts, the engine (vllm or
sglang, at the defaults the source left in place), model, GPU, tensor parallelism and
weights, and the KV-cache tokens and block size the server's own log states (``logged``;
where it states none, the memory planner's); SGLang before 0.3.6 without its overlap
scheduler (``overlap_schedule``); SGLang 0.3 and 0.4 with their prefill batches run
without CUDA graphs (``eager_prefill``) and decode batches past 160 without them
(``cuda_graph_max_bs``). ShareGPT points draw from the shipped
ShareGPT shape (``--dataset sharegpt``); inference-perf's shared_prefix points are re-created
as its client sent them (``shared_prefix_requests``), with vLLM's prefix cache on as their
servers ran it, and the limits a point states (``max_num_batched_tokens``, ``max_num_seqs``)
are passed on. A later stage of one server's run (``after``: the earlier stage's point and
when the later one's first request arrived) is simulated after the earlier stage's requests on
the same simulated server, its prefix cache as they left it, and only its own requests are
measured (serve's ``warmup``). ``--seed`` draws the workloads (and the interval draws) anew:
a P99 near capacity moves a lot between draws. ``--arrivals-from`` sends the points of the
BLIS team's runs at the arrivals each run recorded (blis_replay.py; their lengths stay
drawn), read from a clone of their repository. Where a point says ``lengths_from_totals`` (its client
let requests stop at an end-of-sequence token), the drawn lengths are scaled to the token
totals it printed. Points of vLLM 0.6 are skipped (its V0 scheduler
ran them, with multi-step scheduling: not the scheduler serve runs), and so are points on
GPUs with no spec here. The points run in parallel processes (``--jobs``, default: every
core).

TensorRT-LLM's points (trtllm-bench runs: every request at once, fixed lengths) are
simulated with the scheduler trtllm-bench sets up (tensorrt_llm/bench/dataclasses/
configuration.py: the MAX_UTILIZATION capacity policy, chunked context), at the
max_batch_size and max_num_tokens it picks for the run (``trtllm_bench_limits``), with the KV
cache its memory fraction leaves (``KV_FREE_FRACTION``, as serve budgets TensorRT-LLM's) and the
KV dtype the checkpoint sets.

Prints, per metric, the median absolute error and how many published values two intervals
covered: the kernel model's alone (the middle 90% of --samples draws of its error), and
the whole one serve reports, that interval widened by the serving residual (see
rooflinesim/serve/residual.py) as measured on the other sources only: each source (a
repository and engine) is held out in turn, so that no point is covered by a spread it
helped to measure. --points lists every point; --write-residuals stores every point's log
errors in rooflinesim/data/serving_residuals.yaml, the residual serve ships. Points of a
disaggregated pair (``pd``: prefill and decode replicas in one machine, the KV over its
NVLink) are reported in a table of their own, their interval widened by every colocated
source's spread, and left out of the residual. Where a point's log states the server's
prompt throughput while requests waited (``logged.prefill_tokens_per_s``), it is printed beside
predict model's prefill of one such prompt in steps of the engine's token budget, apart from
the table: the prefill rate without the queue.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import yaml

DATA = Path(__file__).resolve().parent / "data" / "published_serving.yaml"
MODELS = {"deepseek-ai/DeepSeek-R1": "deepseek-v3", "meta-llama/Llama-3.3-70B-Instruct": "llama-3.3-70b",
          "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b", "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
          "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b", "nvidia/Llama-3.3-70B-Instruct-FP8": "llama-3.3-70b",
          "nvidia/Llama-3.1-405B-Instruct-FP8": "llama-3.1-405b", "Qwen/Qwen3-8B": "qwen3-8b",
          "Qwen/Qwen3-14B": "qwen3-14b", "Qwen/Qwen3-32B": "qwen3-32b", "meta-llama/Llama-2-7b-hf": "llama-2-7b",
          "meta-llama/Llama-2-70b-hf": "llama-2-70b", "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
          "codellama/CodeLlama-34b-Instruct-hf": "codellama-34b"}
NVML_TOTAL_MIB = {"h200-sxm": 143771, "h100-sxm": 81559}  # (what nvidia-smi and NVML report; device_memory.yaml)
GPUS = {"H200": "h200-sxm", "H100": "h100", "A100": "a100-sxm4-80gb"}
SEED = 1


def _gpu(text: str) -> str | None:
    return next((v for k, v in GPUS.items() if text.upper().startswith(k)), None)


def _scaled(lengths: np.ndarray, total: int) -> np.ndarray:
    """Whole lengths (at least 1) in the proportions of ``lengths``, summing to about ``total``."""
    return np.maximum(np.rint(lengths * (float(total) / float(lengths.sum()))), 1).astype(np.int64)


def load_points(path: Path) -> list:
    """The points of a file, each later stage's ``after.point`` resolved to its earlier stage's point."""
    points = yaml.safe_load(path.read_text())["points"]
    ids = {p["id"]: p for p in points}
    for p in points:
        if p.get("after"):
            if p["after"].get("point") not in ids:
                raise SystemExit(f"{p['id']}: after.point {p['after'].get('point')!r} is no point of {path}")
            p["after"] = {**p["after"], "point": ids[p["after"]["point"]]}
    return points


def allreduce_of(point: dict) -> str:
    """The TP AllReduce's backends of the point's engine as it ran (Deployment.allreduce):
    vLLM's symmetric-memory communicator from v0.11.0 on (its PR 24111), a custom AllReduce
    then NCCL before; SGLang's and TensorRT-LLM's their defaults."""
    from rooflinesim.serve.defaults import ENGINES

    if point["engine"] != "vllm":
        return ENGINES[point["engine"]].allreduce
    return "engine" if _version(point) >= (0, 11) else "custom"


def simulate(point: dict, samples: int):
    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.hardware import load_spec
    from rooflinesim.models.config import load_config
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.serve.defaults import engine_kernels
    from rooflinesim.serve.simulate import serve

    spec = load_spec(_gpu(point["gpu"]))
    reqs, warmup = requests_of(point), 0
    if point.get("after"):  # (a later stage: the earlier one's requests first, on the same server, not measured)
        earlier = requests_of(point["after"]["point"])
        warmup = len(earlier)
        reqs = earlier.then(reqs, float(point["after"]["start_s"]))
    model = load_config(MODELS[point["model"]])
    d = Deployment(tp=int(point["tp"]), weights=point["weights"], **engine_kernels(point["engine"], allreduce_of(point)),
                   **({"kv_cache": point["kv_cache"]} if point.get("kv_cache") else {}))
    limits = {}
    if point.get("client", "").startswith("trtllm-bench"):  # (its scheduler settings, limits and KV budget)
        seqs, tokens = trtllm_bench_limits(point, model, spec)
        limits = dict(max_num_seqs=seqs, max_num_batched_tokens=tokens, capacity_policy="max_utilization",
                      chunked_context=True, gpu_memory_utilization=KV_FREE_FRACTION)
    for key in ("max_num_batched_tokens", "max_num_seqs"):  # (the server's, where the point states them)
        if point.get(key) is not None:
            limits.setdefault(key, int(point[key]))
    logged = point.get("logged") or {}
    pair = {}
    if point.get("pd"):  # (a disaggregated pair in one machine: the KV moves over NVLink)
        from rooflinesim.serve.disaggregated import Link

        pair = dict(pd=(int(point["pd"]["prefill"]), int(point["pd"]["decode"])),
                    kv_link=Link(spec.interconnect.link_bandwidth_bytes_per_s))
    return serve(model, spec, resolve_profile(spec, None), d, reqs,
                 engine=point["engine"], interval_samples=samples, seed=point.get("seed", SEED),
                 concurrency=point.get("max_concurrency"),
                 kv_tokens=logged.get("kv_cache_tokens"), block_size=logged.get("block_size"),
                 **({"gpu_memory_utilization": mem_fraction_static(point)} if point["engine"] == "sglang" else {}),
                 overlap_schedule=overlap_schedule(point), eager_prefill=eager_prefill(point),
                 cuda_graph_max_bs=cuda_graph_max_bs(point),
                 max_model_len=point.get("max_model_len"), warmup=warmup, **limits, **pair)


def requests_of(point: dict):
    """The requests of a point's workload as its client sent them (see the module's notes),
    seeded alike for every point: the stages of one run draw the same prompts."""
    from rooflinesim.serve.traffic import Requests, arrivals, dataset_requests, random_lengths

    ds, seed = point["dataset"], point.get("seed", SEED)
    rng = np.random.default_rng(seed)
    n = int(point["num_prompts"])
    client = point.get("client", "")
    rate = math.inf if str(point["request_rate"]) == "inf" else float(point["request_rate"])
    if ds["name"] == "sharegpt":
        reqs = dataset_requests("sharegpt", n, rate=rate, seed=seed, client="sglang")  # (its clients: SGLang's)
    elif ds["name"] == "shared_prefix":
        reqs = shared_prefix_requests(point, rng)
    elif ds["name"] == "fixed":
        reqs = Requests(arrivals(n, rate, 1.0, rng, fill=False), np.full(n, int(ds["input_len"])),
                        np.full(n, int(ds["output_len"])))
    else:
        how = "sglang" if client.startswith("sglang") else "vllm"  # (its random dataset's lengths)
        inputs = random_lengths(n, int(ds["input_len"]), float(ds["range_ratio"]), rng, how)
        outputs = random_lengths(n, int(ds["output_len"]), float(ds["range_ratio"]), rng, how)
        reqs = Requests(arrivals(n, rate, float(point.get("burstiness", 1.0)), rng, fill=False), inputs, outputs)
    if point.get("arrivals_s") is not None:  # (--arrivals-from: the run's own arrivals, its lengths drawn)
        reqs = Requests(np.asarray(point["arrivals_s"], dtype=float), reqs.input_tokens, reqs.output_tokens,
                        reqs.prefix_id, reqs.prefix_tokens)
    if point.get("lengths_from_totals"):  # (no --ignore-eos: the dataset's lengths, scaled to what was sent and made)
        reqs = Requests(reqs.arrival_s, *(_scaled(x, point["totals"][key]) for x, key in (
            (reqs.input_tokens, "total_input_tokens"), (reqs.output_tokens, "total_output_tokens"))))
    return reqs


def shared_prefix_requests(point: dict, rng):
    """inference-perf's shared_prefix dataset under its "constant" load, as its client sent a
    stage (inference_perf/datagen/shared_prefix_datagen.py and loadgen/load_timer.py, the
    version of Oct-Nov 2025): num_groups x num_prompts_per_group prompts, each a group's
    system prompt and a question, shuffled once; request k of a stage sends prompt k mod
    their number; rate x duration requests at exponential gaps scaled to fill the stage's
    duration. Each prompt's tokens drawn uniform over the range the client counted (it counts
    the re-tokenized text, the server's count); two nested prefixes: the group's system prompt
    and the BOS token, then the whole prompt, which every request after its first sends again
    (load_lazy_data: data_index modulo the prompts), so that a prefix cache holds it; the
    output exactly output_len (ignore_eos)."""
    from rooflinesim.serve.traffic import Requests

    ds, n = point["dataset"], int(point["num_prompts"])
    prompts = int(ds["num_groups"]) * int(ds["num_prompts_per_group"])
    group = rng.permutation(np.repeat(np.arange(int(ds["num_groups"])), int(ds["num_prompts_per_group"])))
    span = ds["prompt_len"]
    length = rng.integers(int(span["min"]), int(span["max"]) + 1, size=prompts)
    gaps = rng.exponential(1.0 / float(point["request_rate"]), size=n)
    arrival = np.cumsum(gaps) * (float(point["duration_s"]) / gaps.sum())
    k = np.arange(n) % prompts
    system = np.full(n, int(ds["system_prompt_len"]) + 1)
    ids = np.stack([group[k], k], axis=1)  # (levels: the group's system prompt, the prompt itself)
    return Requests(arrival - arrival[0], length[k], np.full(n, int(ds["output_len"])), ids,
                    np.stack([system, length[k]], axis=1))


# trtllm-bench's kv_cache_free_gpu_mem_fraction default (bench/dataclasses/configuration.py), which serve
# reads for --engine trtllm as TensorRT-LLM's free_gpu_memory_fraction (defaults.engine_kv_tokens)
KV_FREE_FRACTION = 0.90


def trtllm_bench_limits(point: dict, model, spec, kv_fraction: float = KV_FREE_FRACTION) -> tuple[int, int]:
    """The max_batch_size and max_num_tokens trtllm-bench gives a run (tensorrt_llm/bench/build/
    tuning.py, calc_engine_setting and finetune_setting): the requests of the dataset's lengths
    that the KV cache would hold (the GPUs' memory less the weights' parameter bytes, times
    the KV share of free memory; at least one KV head per GPU), at most 4,096, rounded up to
    a multiple of 32, 128 or 256 (at least 64); tokens as that many requests' prompts and
    outputs in the ratio of the lengths, at most 32,768, rounded up likewise (at least 2,048)."""
    from rooflinesim.dtypes import bytes_per_element

    tp, ds = int(point["tp"]), point["dataset"]
    isl, osl = int(ds["input_len"]), int(ds["output_len"])
    gib = 2.0 ** 30
    kv_heads = max(tp, model.num_kv_heads)
    per_token = 2 * model.num_layers * kv_heads * model.head_dim * bytes_per_element(point.get("kv_cache") or "bf16")
    weights = sum(model.param_counts().values()) * bytes_per_element(point["weights"])
    memory = NVML_TOTAL_MIB[spec.name] * 2.0 ** 20 * tp
    requests = (memory - weights) / gib * kv_fraction / (per_token / gib * (isl + osl))
    raw_bs = min(requests, 4096)
    raw_tokens = min(raw_bs * (1 + isl / osl), 32768)
    return (_rounded_up(raw_bs, 64, ((256, 32), (1024, 128), (math.inf, 256))),
            _rounded_up(raw_tokens, 2048, ((4096, 256), (8192, 512), (math.inf, 1024))))


def _rounded_up(x: float, least: int, steps: tuple) -> int:
    """``x`` rounded up to a multiple of the step of the first (bound, step) whose bound it
    is under, and at least ``least`` (where the first step applies)."""
    for k, (bound, step) in enumerate(steps):
        if x < bound:
            return max(least if k == 0 else 0, step * math.ceil(x / step))
    raise ValueError(x)


def _version(point: dict) -> tuple:
    """The leading numbers of a point's engine version ("0.4.5.post3" -> (0, 4, 5))."""
    out = []
    for part in str(point.get("engine_version", "")).split()[0].split("."):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def overlap_schedule(point: dict) -> bool | None:
    """Whether the point's server ran an overlap scheduler: SGLang's was opt-in until PR 2067
    (2024-11-18) turned it on by default, first released in 0.3.6; vLLM's async scheduling
    until 0.14.0 (PR 27614); otherwise the engine's default (None)."""
    server = point.get("server", "")
    if point["engine"] == "sglang" and "--disable-overlap-schedule" in server:
        return False
    if point["engine"] == "sglang" and _version(point) < (0, 3, 6):
        return "--enable-overlap-schedule" in server
    if point["engine"] == "vllm" and "--no-async-scheduling" in server:
        return False
    if point["engine"] == "vllm" and _version(point) < (0, 14):
        return "--async-scheduling" in server
    return None


def eager_prefill(point: dict) -> bool:
    """Whether the point's server ran prefill batches without CUDA graphs: SGLang did by
    default until piecewise CUDA graphs became its prefill default (PR 16331, 2026-01-03);
    its 0.3 and 0.4 releases certainly did (a point of a later release says so with
    ``eager_prefill``)."""
    if "eager_prefill" in point:
        return bool(point["eager_prefill"])
    return point["engine"] == "sglang" and _version(point) < (0, 5)


def cuda_graph_max_bs(point: dict) -> int | None:
    """SGLang's largest decode batch from a CUDA graph on the point's server: as its launch line
    or the point states it, else 160 for releases before 0.5 (their default on GPUs of 25 GB and
    more until PR 10372 raised it, 2025-09-12), else the engine's default (None)."""
    if point["engine"] != "sglang":
        return None
    stated = _stated(point, "cuda_graph_max_bs", int)
    if stated is not None:
        return stated
    return 160 if _version(point) < (0, 5) else None


def _stated(point: dict, key: str, kind):
    """A server setting as the point states it, else as its launch line passes the flag of
    that name (``--cuda-graph-max-bs`` for cuda_graph_max_bs), else None."""
    if key in point:
        return kind(point[key])
    words, flag = point.get("server", "").replace("=", " ").split(), "--" + key.replace("_", "-")
    return kind(words[words.index(flag) + 1]) if flag in words else None


def mem_fraction_static(point: dict) -> float | None:
    """SGLang's mem_fraction_static on the point's server (its KV cache, where the log states
    none: serve's SGLang budget, rooflinesim/memory/sglang.py): as its launch line or the point
    states it; for releases 0.3.0 to 0.4.5, whose rule was by TP alone (server_args.py of those
    wheels: 0.88; 0.87 at TP 2-3; 0.85 at TP 4-7; at TP 8-15 0.83 until 0.3.5, 0.82 in 0.3.6,
    0.81 from 0.4.0; 0.79 from TP 16), that; else the engine's rule (None), which a point of
    0.4.5.post3 to 0.5.9 must override by stating its own."""
    if point["engine"] != "sglang":
        return None
    stated = _stated(point, "mem_fraction_static", float)
    if stated is not None:
        return stated
    version, tp = _version(point), int(point["tp"])
    if not (0, 3) <= version <= (0, 4, 5) or "post" in str(point.get("engine_version", "")):
        return None
    if tp >= 16:
        return 0.79
    if tp >= 8:
        return 0.83 if version < (0, 3, 6) else 0.82 if version < (0, 4) else 0.81
    return 0.85 if tp >= 4 else 0.87 if tp >= 2 else 0.88


def _run(point: dict, samples: int) -> tuple:
    """One point's simulated metrics and kernel intervals (in a worker process), or (None,
    the sentence why) where serve refuses the deployment (a request the planned KV cache
    cannot hold: the server had more memory for it than the planner gives)."""
    from rooflinesim.errors import UserError

    try:
        r = simulate(point, samples)
    except UserError as e:
        return None, str(e)
    return r.metrics, r.interval_kernel


def planned_kv_tokens(point: dict) -> int:
    """The KV-cache tokens our memory planner gives the point's deployment (its engine's
    budget: SGLang's at the fraction its server ran, else vLLM's)."""
    from rooflinesim.hardware import load_spec
    from rooflinesim.models.config import load_config
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.serve.defaults import engine_kv_tokens, engine_limits, kv_cache_tokens

    spec, model = load_spec(_gpu(point["gpu"])), load_config(MODELS[point["model"]])
    d = Deployment(tp=int(point["tp"]), weights=point["weights"])
    if point["engine"] == "sglang":
        return engine_kv_tokens("sglang", model, spec, d,
                                block_size=1, gpu_memory_utilization=mem_fraction_static(point),
                                max_num_batched_tokens=engine_limits("sglang", model, spec)["max_num_batched_tokens"],
                                max_num_seqs=0, cuda_graph_max_bs=cuda_graph_max_bs(point),
                                piecewise_cuda_graph=not eager_prefill(point))
    v = engine_limits("vllm", model, spec)
    return kv_cache_tokens(model, spec, d, block_size=16,
                           gpu_memory_utilization=0.9, max_num_batched_tokens=v["max_num_batched_tokens"],
                           max_num_seqs=v["max_num_seqs"])


def modelled_prefill_rate(point: dict) -> float:
    """Prompt tokens per second of ``predict model``'s prefill of one of the point's prompts
    (its dataset's input length) in steps of the engine's token budget."""
    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.hardware import load_spec
    from rooflinesim.models.config import load_config
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.models.workload import predict_model
    from rooflinesim.serve.defaults import engine_kernels, engine_limits

    spec, model = load_spec(_gpu(point["gpu"])), load_config(MODELS[point["model"]])
    prompt = int(point["dataset"]["input_len"])
    chunk = engine_limits(point["engine"], model, spec)["max_num_batched_tokens"]
    d = Deployment(tp=int(point["tp"]), weights=point["weights"], **engine_kernels(point["engine"], allreduce_of(point)))
    r = predict_model(model, spec, resolve_profile(spec, None), d, batch=1, prompt=prompt, gen=2,
                      chunk=min(chunk, prompt))
    return prompt / float(r.ttft_s)


EXTRA = {"mean_e2e_latency_ms": "mean_e2el_ms", "median_e2e_latency_ms": "median_e2el_ms"}  # (SGLang's names)


def source_of(point: dict) -> str:
    """A point's source for holding out: its repository and engine."""
    parts = point["source"].split("/")
    return f"{parts[3]}/{parts[4]} {point['engine']}"


def write_residuals(rows: list, points: int) -> Path:
    out = Path(__file__).resolve().parent.parent / "rooflinesim" / "data" / "serving_residuals.yaml"
    engines = sorted({r["source"].split()[-1] for r in rows})
    head = (
        "# How far `rooflinesim serve` has landed from published serving benchmarks: log(published / simulated)\n"
        "# per point and metric, written by `python benchmarks/serving_check.py --write-residuals` (do not edit:\n"
        "# run it again). rooflinesim/serve/residual.py reads a sigma per group of metrics from these rows and\n"
        "# widens serve's intervals by it.\n")
    body = {"source": f"benchmarks/data/published_serving.yaml: {points} points re-created by "
                      f"benchmarks/serving_check.py (their sources and engine versions are listed there)",
            "engines_measured": engines,
            "residuals": [{"point": r["point"], "source": r["source"], "metric": r["metric"],
                           "log_error": round(r["log_error"], 6)} for r in rows]}
    out.write_text(head + yaml.safe_dump(body, sort_keys=False, width=120))
    return out


def main() -> None:
    from rooflinesim.serve.residual import sigmas_of, widen

    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--points", action="store_true")
    ap.add_argument("--write-residuals", action="store_true")
    ap.add_argument("--engine", action="append", help="only the points of this engine (repeatable)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="points simulated at once (processes)")
    ap.add_argument("--data", type=Path, default=DATA, help="the points' file (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=SEED, help="the workloads' and the interval draws' seed "
                                                          "(default: %(default)s, as the residual was measured)")
    ap.add_argument("--arrivals-from", type=Path, default=None, metavar="REPO",
                    help="a clone of inference-sim/training: its points sent at the run's own recorded arrivals "
                         "(replay_data), not drawn ones")
    args = ap.parse_args()
    if args.write_residuals and (args.engine or args.data != DATA or args.seed != SEED or args.arrivals_from):
        raise SystemExit("--write-residuals takes every point of the default file at the default seed and drawn "
                         "arrivals: leave out --engine, --data, --seed and --arrivals-from")
    points = load_points(args.data)
    for p in points:  # (in place: a later stage's after.point is its earlier stage's dict)
        p["seed"] = args.seed
    if args.arrivals_from is not None:
        from blis_replay import stage_arrivals, stage_of

        for p in points:
            if stage_of(p) is not None:
                p["arrivals_s"] = stage_arrivals(args.arrivals_from, p)
                if len(p["arrivals_s"]) != int(p["num_prompts"]):
                    raise SystemExit(f"{p['id']}: the run recorded {len(p['arrivals_s']):,} arrivals in its stage, "
                                     f"the point says {int(p['num_prompts']):,} prompts")
    skipped, rows, memory, prefill, pairs, chosen = defaultdict(int), [], [], [], [], []
    for p in points:
        if p["engine"] == "vllm" and str(p.get("engine_version", "")).startswith("0.6"):
            skipped["vLLM 0.6: its V0 scheduler with multi-step scheduling, not the one serve runs"] += 1
            continue
        if args.engine and p["engine"] not in args.engine:
            continue
        if _gpu(p["gpu"]) is None or p["model"] not in MODELS:
            skipped["GPU or model not here"] += 1
            continue
        chosen.append(p)
    runs = []
    with ProcessPoolExecutor(max(1, min(args.jobs, len(chosen)))) as pool:  # (each point on its own)
        for k, run in enumerate(pool.map(_run, chosen, [args.samples] * len(chosen)), 1):
            runs.append(run)
            print(f"[{k}/{len(chosen)}] {chosen[k - 1]['id']}", file=sys.stderr, flush=True)
    for p, (metrics, kernel) in zip(chosen, runs):
        if metrics is None:
            skipped[f"serve refused it ({kernel}), where the server ran it"] += 1
            continue
        if (p.get("logged") or {}).get("kv_cache_tokens"):
            memory.append((p["id"], p["engine"], p["logged"]["kv_cache_tokens"], planned_kv_tokens(p)))
        if (p.get("logged") or {}).get("prefill_tokens_per_s"):
            prefill.append((p["id"], p["engine"], p["logged"]["prefill_tokens_per_s"], modelled_prefill_rate(p)))
        published = {**p["metrics"], **{EXTRA[k]: v for k, v in (p.get("extra_metrics") or {}).items() if k in EXTRA}}
        for key, value in published.items():
            if key not in metrics:
                continue
            ours = metrics[key]
            (pairs if p.get("pd") else rows).append({
                "point": p["id"], "source": source_of(p), "metric": key, "published": value, "simulated": ours,
                "log_error": math.log(value / ours), "kernel": (kernel or {}).get(key, (ours, ours))})
    # each source held out in turn: its intervals widened by the spread of the others' errors
    for src in sorted({r["source"] for r in rows}):
        sigmas = sigmas_of([r for r in rows if r["source"] != src])
        for r in rows:
            if r["source"] == src:
                r["whole"] = widen({r["metric"]: r["simulated"]}, {r["metric"]: list(r["kernel"])}, sigmas)[r["metric"]]
    inside = lambda iv, x: iv[0] <= x <= iv[1]  # noqa: E731
    if args.points:
        print("| point | metric | published | simulated | error | kernel interval | held-out interval |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            (klo, khi), (lo, hi) = r["kernel"], r["whole"]
            print(f"| {r['point']} | {r['metric']} | {r['published']:.4g} | {r['simulated']:.4g} | "
                  f"{100 * (r['simulated'] / r['published'] - 1):+.1f}% | [{klo:.4g}, {khi:.4g}] | "
                  f"[{lo:.4g}, {hi:.4g}] |")
        print()
    if rows:
        print("| metric | points | median abs. error | median signed error | inside the kernel interval "
              "| inside the held-out interval |")
        print("|---|---|---|---|---|---|")

    def line(label: str, mine: list) -> None:
        e = np.array([r["simulated"] / r["published"] - 1 for r in mine])
        print(f"| {label} | {e.size} | {100 * np.median(np.abs(e)):.1f}% | {100 * np.median(e):+.1f}% | "
              f"{sum(inside(r['kernel'], r['published']) for r in mine)} of {len(mine)} | "
              f"{sum(inside(r['whole'], r['published']) for r in mine)} of {len(mine)} |")

    for key in sorted({r["metric"] for r in rows}):
        mine = [r for r in rows if r["metric"] == key]
        line(key, mine)
        engines = sorted({r["source"].split()[-1] for r in mine})
        for engine in engines if len(engines) > 1 else ():  # (a metric several engines report: each apart)
            line(f"{key} ({engine})", [r for r in mine if r["source"].split()[-1] == engine])
    n_in = sum(inside(r["whole"], r["published"]) for r in rows)
    if rows:
        print(f"\nall metrics: {n_in} of {len(rows)} inside the held-out interval ({100 * n_in / len(rows):.0f}%; "
              f"the interval's level is 90%); serving sigma over every source: "
              + ", ".join(f"{g} {s:.2f}" for g, s in sigmas_of(rows).items()))
    if memory:
        print("\nKV-cache tokens, the server's log against our memory planner (`fit --engine` of the point's engine, "
              "at the fraction its server ran):")
        for pid, engine, logged, ours in memory:
            print(f"  {pid} ({engine}): logged {logged:,}, planned {ours:,} ({100 * (ours / logged - 1):+.1f}%)")
    if prefill:
        print("\nPrefill rate while requests wait, the server's log against predict model (one prompt in steps of "
              "the engine's token budget):")
        for pid, engine, logged, ours in prefill:
            print(f"  {pid} ({engine}): logged {', '.join(f'{x:,.0f}' for x in logged)} tokens/s, modelled "
                  f"{ours:,.0f} ({100 * (ours / statistics.median(logged) - 1):+.0f}% over the logged median)")
    if pairs:  # (disaggregated pairs: apart, their interval widened by every colocated source's spread)
        print("\nDisaggregated pairs (not in the table above nor in the serving residual):")
        print("| point | metric | published | simulated | error | kernel interval | interval |")
        print("|---|---|---|---|---|---|---|")
        sigmas = sigmas_of(rows)
        for r in pairs:
            (klo, khi) = r["kernel"]
            lo, hi = widen({r["metric"]: r["simulated"]}, {r["metric"]: list(r["kernel"])}, sigmas)[r["metric"]]
            print(f"| {r['point']} | {r['metric']} | {r['published']:.4g} | {r['simulated']:.4g} | "
                  f"{100 * (r['simulated'] / r['published'] - 1):+.1f}% | [{klo:.4g}, {khi:.4g}] | "
                  f"[{lo:.4g}, {hi:.4g}] |")
    print("\nskipped: " + ", ".join(f"{v} ({k})" for k, v in skipped.items()))
    if args.write_residuals:
        print(f"wrote {write_residuals(rows, len({r['point'] for r in rows}))}")


if __name__ == "__main__":
    main()
