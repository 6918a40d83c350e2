"""Serving metrics with the names and definitions of vLLM's benchmark client (benchmark_serving.py,
``vllm bench serve``):

* TTFT: arrival to the first output token; E2EL: arrival to the last;
* TPOT: (E2EL - TTFT) / (output tokens - 1), over the requests with more than one output
  token;
* ITL: every gap between two successive output tokens of a request, all requests pooled;
* duration: from the first arrival to the last completion; throughputs per second of it;
* goodput: requests per second that meet every SLO given (TTFT, TPOT, E2EL; a request
  with one output token meets any TPOT SLO);
* peaks: the most output tokens in one second (seconds counted from the first send, each
  token at the end of the step that sampled it; with warm-up requests, the steps from the
  first measured send on) and the most requests in flight at once (from send to last token,
  a finish before a send at the same instant), vLLM's max_output_tokens_per_s and
  max_concurrent_requests.

Times are reported in milliseconds (``*_ms``), as the client does. Queueing delay (arrival
to the first step that schedules the request) and the prefix cache's hit rate (prompt
tokens found there over those looked up, as vLLM logs it) are ours: the client cannot see
them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PERCENTILES = (50, 90, 99)  # the median, and those reported by default (vLLM's --metric-percentiles)


def percentile_key(p: float) -> str:
    """A percentile's name in the metrics' keys, as vLLM's client writes it: p99, p99.9."""
    return f"p{int(p)}" if float(p) == int(p) else f"p{p:g}"


@dataclass(frozen=True)
class Served:
    """What a simulated engine did with each request (times in seconds, from the first
    arrival), and over time."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    scheduled_s: np.ndarray  # when a step first scheduled the request
    first_token_s: np.ndarray
    finish_s: np.ndarray
    itl_s: np.ndarray  # every inter-token gap, all requests
    preemptions: int
    steps: dict  # per step: start_s, duration_s, tokens, sequences, kv_blocks_used, sampled (tokens out)
    prefix_cache_queries: int = 0  # prompt tokens looked up in the prefix cache (0: it was off)
    prefix_cache_hits: int = 0  # of them, found there
    eager_decode_steps: int = 0  # sglang: decode steps past its largest CUDA graph (run without one)
    # requests ahead of the measured ones (they warmed the engine; the pooled counts above,
    # itl_s too, start when the first measured request was sent; steps and the arrays hold all)
    warmup: int = 0


def summary(s: Served, slo_ms: dict | None = None, percentiles=PERCENTILES) -> dict:
    """The client's metrics (see the module's notes), in its JSON names: mean, std, median and
    ``percentiles`` (in (0, 100]; the 50th is the median) of each; with warm-up requests
    (``Served.warmup``), of the measured ones alone, the duration and steps from the first
    measured request's send."""
    qs = sorted({float(p) for p in percentiles} - {50.0})
    w = s.warmup
    arrival, first, finish = s.arrival_s[w:], s.first_token_s[w:], s.finish_s[w:]
    inputs, outputs = s.input_tokens[w:], s.output_tokens[w:]
    ttft = first - arrival
    e2el = finish - arrival
    many = outputs > 1
    tpot = (e2el[many] - ttft[many]) / (outputs[many] - 1)
    start = float(arrival.min())
    duration = float(finish.max() - start)
    steps = s.steps["start_s"]
    out: dict = {
        "completed": int(arrival.size),
        "duration_s": duration,
        "total_input_tokens": int(inputs.sum()),
        "total_output_tokens": int(outputs.sum()),
        "request_throughput": arrival.size / duration,
        "output_throughput": float(outputs.sum()) / duration,
        "total_token_throughput": float(inputs.sum() + outputs.sum()) / duration,
        "preemptions": s.preemptions,
        "steps": int(np.count_nonzero(steps >= start) if w else len(steps)),
    }
    ends = steps + s.steps["duration_s"]
    mine = ends >= start
    if mine.any():  # (none where no step is logged: SGLang's decode pool takes no step for one-token requests)
        # (tokens sampled in each whole second from the start that has any: the seconds
        # counted apart, as a run at a very low rate spans more seconds than it has steps)
        _, second = np.unique((ends[mine] - start).astype(np.int64), return_inverse=True)
        out["max_output_tokens_per_s"] = float(np.bincount(second.ravel(), weights=s.steps["sampled"][mine]).max())
    events = np.concatenate([np.stack([finish, np.full(finish.size, -1.0)], 1),
                             np.stack([arrival, np.ones(arrival.size)], 1)])
    events = events[np.lexsort((events[:, 1], events[:, 0]))]  # (by time, a finish first)
    out["max_concurrent_requests"] = int(np.cumsum(events[:, 1]).max())
    if w:
        out["warmup_requests"] = int(w)
    if s.prefix_cache_queries:  # (as vLLM logs its "Prefix cache hit rate")
        out["prefix_cache_hit_rate"] = s.prefix_cache_hits / s.prefix_cache_queries
    for name, x in (("ttft", ttft), ("tpot", tpot), ("itl", s.itl_s), ("e2el", e2el),
                    ("queue", s.scheduled_s[w:] - arrival)):
        ms = np.asarray(x, dtype=float) * 1e3
        if ms.size == 0:
            ms = np.zeros(1)
        out[f"mean_{name}_ms"] = float(ms.mean())
        out[f"std_{name}_ms"] = float(ms.std())
        out[f"median_{name}_ms"] = float(np.median(ms))
        if qs:
            for p, v in zip(qs, np.percentile(ms, qs)):
                out[f"{percentile_key(p)}_{name}_ms"] = float(v)
    if slo_ms:
        good = np.ones(arrival.size, dtype=bool)
        per = {"ttft": ttft, "e2el": e2el}
        full_tpot = np.zeros(arrival.size)
        full_tpot[many] = tpot
        per["tpot"] = full_tpot
        for key, limit in slo_ms.items():
            good &= per[key] * 1e3 <= limit
        out["request_goodput"] = float(good.sum()) / duration
        out["slo_attainment"] = float(good.mean())
        out["slo_ms"] = dict(slo_ms)
    return out
