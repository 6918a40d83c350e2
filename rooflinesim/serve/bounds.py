"""`plan`'s bounds without a simulation, from a replica type's step tables (``StepTimes``):
the lower bounds of a workload's P99s with each request alone, and the ceiling of the
requests a replica can serve a second (``plan``'s notes, step 2)."""

from __future__ import annotations

import math

import numpy as np


def bound(st, prompt, output, tokens: int, seqs: int, kv: int, overhead: float, slos: dict, rate: float,
           most: int, front: float = 0.0, fresh=None) -> dict:
    """Step 2 for one pair of limits: {"replicas": the fewest worth simulating} or a
    rejection with its reason; with the bounds (``ceiling`` in requests/s, ``lower``: the
    lower bounds of the P99s in ms; ``front``: each request's seconds through the server's
    front end, in its TTFT and end-to-end latency; ``fresh``: the prompt tokens each request
    computes, where a prefix cache may hold the rest (and the least KV it holds: the prefix's
    blocks are held once for the requests that share it); default all)."""
    prompt = prompt if fresh is None else fresh
    budget = min(tokens, st.max_tokens)
    # the shortest a step of t tokens can take (any t' >= t: the tables need not be monotone)
    dense = np.minimum(st.dense_prefill[1:budget + 1], np.concatenate([
        st.dense_decode[1:min(seqs, budget) + 1], np.full(max(budget - seqs, 0), np.inf)]))
    shortest = np.minimum.accumulate(dense[::-1])[::-1] + overhead
    step_min = float(shortest[0])
    sampling = step_min + float(np.min(st.logits[1:]))
    per_token = float((shortest / np.arange(1, budget + 1)).min())  # seconds a token, at best
    ttft = np.maximum(np.ceil(prompt / budget - 1e-12) * step_min + (sampling - step_min), prompt * per_token) + front
    tpot = np.full(int(np.count_nonzero(output > 1)), sampling)
    lower = {k: float(np.percentile(x, 99)) * 1e3 if x.size else 0.0 for k, x in (
        ("p99_ttft_ms", ttft), ("p99_tpot_ms", tpot), ("p99_e2el_ms", ttft + (output - 1) * sampling))}
    for key, limit in slos.items():
        if lower[key] > limit:
            return {"rejected": key.replace("p99_", "").replace("_ms", "").upper(), "lower": lower,
                    "reason": f"even alone, {key} is at least {lower[key]:.4g} ms (SLO {limit:.4g})"}
    later = np.maximum(output - 1, 0)
    work = float(prompt.sum() + later.sum())
    concurrent = max(1, min(seqs, budget, int(kv // (prompt.min() + 1))))
    # (a request holds at least prompt + j tokens of KV through its j-th decode step, which takes
    # at least the shortest sampling step, and the cache holds kv tokens at a time)
    held = float((prompt * later + later * (later + 1) / 2).sum()) * sampling / kv
    # (on pp stages up to pp batches are in flight, and a stage takes at least 1 / pp of a pass)
    stages = st.d.pp
    decoding = max(float(later.sum()) / concurrent * sampling / stages, held)
    busy = max(work * per_token / stages, decoding)
    ceiling = prompt.size / busy if busy > 0 else math.inf
    replicas = max(1, math.floor(rate / ceiling) + 1)
    # a disaggregated pair's pools: a prefill replica computes the prompts' tokens; a decode
    # replica the decodes, with the KV they hold (requests/s at most, each)
    pool_ceilings = [prompt.size / x if x > 0 else math.inf for x in (float(prompt.sum()) * per_token, decoding)]
    pools = {"pool_ceilings": pool_ceilings, "pools": [max(1, math.floor(rate / x) + 1) for x in pool_ceilings]}
    if replicas > most:
        return {"rejected": "too many GPUs", "ceiling": ceiling, "lower": lower, **pools,
                "reason": f"a replica serves at most {ceiling:.3g} req/s: at least {replicas} replicas "
                          f"(max {most} of this size)"}
    return {"replicas": replicas, "ceiling": ceiling, "lower": lower, **pools}
