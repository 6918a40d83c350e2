"""Prefill/decode disaggregation: a prefill pool and a decode pool of replicas, as vLLM v1
runs it with its NixlConnector and as SGLang runs it (python/sglang/srt/disaggregation/).

vLLM:
* A proxy picks a prefill and a decode replica for each request (round robin, as vLLM's
  toy proxy does, tests/v1/kv_connector/nixl_integration/toy_proxy_server.py) and sends
  the request to the prefill replica with ``max_tokens=1``: a prefill-only request, whose
  sampled token is dropped. When it is done, the proxy sends the request to the decode
  replica and streams that replica's tokens to the client: the first token the client
  sees comes from the decode replica.
* The decode replica gives the request blocks for its whole prompt when it reaches the
  head of its queue, pulls the prompt's KV from the prefill replica in the background (a
  one-sided read of all layers at once, overlapped with its own steps), then recomputes
  the last prompt token in a one-token step that samples the first output token
  (``schedulers.vllm.VllmV1Decode``).

SGLang:
* The prefill server samples the first token and pushes each prefill chunk's KV as soon as
  it is computed; what is left to move when its prefill ends is the last chunk's KV (or
  more, where the link is slower than the chunks).
* The decode server gives the request KV for its prompt when the prompt and 512 reserved
  tokens fit beside 512 kept for each request it runs; once the KV is in, the request
  joins its running batch at the next step, its first token streamed then
  (``schedulers.sglang.SGLangDecode``).

A move takes one GPU's share of the prompt's KV (the larger of a prefill GPU's and a
decode GPU's) over that GPU's link, each GPU pair at once: ``latency + bytes /
bandwidth``. The default is each engine's connector as measured in use (``KV_LINKS``):
vLLM's NixlConnector moved 167 MB in 38.7 ms (4.3 GB/s: posting its many small block
descriptors, not the fabric, set the pace; vllm-project/vllm issue 50913), SGLang's
default backend, Mooncake's transfer engine, 42 GB/s on one 400 Gb/s NIC
(kvcache-ai/Mooncake issue 813); no fixed latency. ``--kv-link-bandwidth`` and
``--kv-link-latency`` set others (e.g. NVLink within a node).

Simplifications, each small where the pools are not out of KV cache: the pools are
simulated one after the other, so a prefill replica frees a request's blocks when its
prefill ends (vLLM holds them until the decode replica's read is done, SGLang until its
push is), and SGLang's decode server gives KV when the prefill is done (it does so before
the prefill starts, which then waits for it); moves of one GPU do not queue behind each
other; the proxy's hop takes no time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import UserError
from .engine import EngineParams, simulate
from .metrics import Served
from .traffic import Requests

# The default move of each engine's connector, per GPU, as measured in use (``--kv-link-*`` set others)
KV_LINKS = {
    "vllm": (4.32e9, "vLLM's NixlConnector as measured in use: 167 MB per transfer in 38.7 ms, 4,319 MB/s "
                     "(1,785 descriptors a transfer, 64-token blocks; vllm-project/vllm issue 50913), where "
                     "posting the descriptors, not the fabric, sets the pace"),
    "sglang": (42e9, "SGLang's default transfer backend, Mooncake's transfer engine, at the 42 GB/s it measured "
                     "on one 400 Gb/s NIC (kvcache-ai/Mooncake issue 813), one such NIC per GPU as DGX "
                     "H100/H200 nodes have"),
}


@dataclass(frozen=True)
class Pool:
    """One side of the pair: its replicas' count, each replica's scheduler limits and KV
    cache, its step tables, and the KV bytes a prompt token takes on one of its GPUs."""

    replicas: int
    engine: EngineParams
    kv_tokens: int
    steps: object  # StepTimes
    kv_bytes_per_token: float
    gpus: int  # per replica
    gpu: str  # the GPU's spec name
    profile: object  # its calibration profile


@dataclass(frozen=True)
class Link:
    """A GPU's move of KV to the other pool. ``bytes_per_s`` None: the engine's connector
    as measured in use (``KV_LINKS``, ``for_engine``)."""

    bytes_per_s: float | None = None
    latency_s: float = 0.0

    def for_engine(self, engine: str) -> tuple["Link", str]:
        """This link with the engine's default bandwidth where it names none, and its source."""
        if self.bytes_per_s is not None:
            return self, "given"
        rate, source = KV_LINKS[engine]
        return Link(rate, self.latency_s), source

    def pull_s(self, nbytes):
        return self.latency_s + np.asarray(nbytes, dtype=float) / self.bytes_per_s


def run(reqs: Requests, prefill: Pool, decode: Pool, link: Link, progress=None, scale=None,
        engine: str = "vllm") -> tuple[Served, dict]:
    """Serve ``reqs`` on the pair (see the module's notes): the client's view as one
    ``Served`` (its steps: the decode pool's), and what the pair did (``stats``).
    ``scale``: per-family factors applied to both pools' step tables (interval draws)."""
    n = len(reqs)
    if n == 0:
        raise UserError("no requests to serve")
    pre_steps = prefill.steps if scale is None else prefill.steps.scaled(scale)
    dec_steps = decode.steps if scale is None else decode.steps.scaled(scale)
    prompt, output = reqs.input_tokens.astype(np.int64), reqs.output_tokens.astype(np.int64)
    index = np.arange(n)
    # 1. the prefill pool: prefill-only requests (max_tokens=1)
    prefilled, scheduled, pre_steps_n, pre_preempt = np.empty(n), np.empty(n), 0, 0
    queries = hits = 0  # (the prefill pool's prefix cache)
    for r in range(min(prefill.replicas, n)):
        at = index[r::prefill.replicas]
        s = simulate(engine, replace(reqs.take(at), output_tokens=np.ones(at.size, dtype=np.int64)),
                     pre_steps, prefill.engine)
        prefilled[at], scheduled[at] = s.finish_s, s.scheduled_s
        queries, hits = queries + s.prefix_cache_queries, hits + s.prefix_cache_hits
        pre_steps_n += len(s.steps["duration_s"])
        pre_preempt += s.preemptions
    # 2. each prompt's KV pulled by its decode replica, which then decodes
    per_token = np.maximum(prefill.kv_bytes_per_token, decode.kv_bytes_per_token)
    nbytes = per_token * prompt
    pull = link.pull_s(nbytes)
    if engine == "sglang":
        # each chunk's KV pushed once computed: what is left at the prefill's end is the last
        # chunk's, unless the link is slower than the chunks
        chunk = prefill.engine.max_num_batched_tokens
        last = link.pull_s(per_token * (prompt - chunk * ((prompt - 1) // chunk)))
        pull = np.maximum(last, scheduled + pull - prefilled)
    first, finish, gaps, logs, dec_preempt, eager = np.empty(n), np.empty(n), [], [], 0, 0
    for r in range(min(decode.replicas, n)):
        at = index[r::decode.replicas]
        at = at[np.argsort(prefilled[at], kind="stable")]  # (in the order the proxy hands them on)
        s = simulate(engine, Requests(prefilled[at], prompt[at], output[at]), dec_steps, decode.engine,
                     progress=progress, pull_s=pull[at])
        first[at], finish[at] = s.first_token_s, s.finish_s
        gaps.append(s.itl_s)
        logs.append(s.steps)
        dec_preempt += s.preemptions
        eager += s.eager_decode_steps
    steps = {k: np.concatenate([g[k] for g in logs]) for k in logs[0]}
    served = Served(reqs.arrival_s, prompt, output, scheduled, first, finish, np.concatenate(gaps),
                    pre_preempt + dec_preempt, steps, queries, hits, eager)
    ms = pull * 1e3
    stats = {"prefill_replicas": prefill.replicas, "decode_replicas": decode.replicas,
             "gpus": prefill.replicas * prefill.gpus + decode.replicas * decode.gpus,
             "prefill_gpu": prefill.gpu, "decode_gpu": decode.gpu,
             "prefill_gpus_per_replica": prefill.gpus, "decode_gpus_per_replica": decode.gpus,
             "prefill_kv_cache_tokens": prefill.kv_tokens, "decode_kv_cache_tokens": decode.kv_tokens,
             "prefill_steps": pre_steps_n, "decode_steps": int(len(steps["duration_s"])),
             "prefill_preemptions": pre_preempt, "decode_preemptions": dec_preempt,
             "kv_link_bytes_per_s": link.bytes_per_s, "kv_link_latency_s": link.latency_s,
             "mean_kv_bytes_per_request": float(nbytes.mean()), "mean_kv_pull_ms": float(ms.mean()),
             "p99_kv_pull_ms": float(np.percentile(ms, 99)),
             "mean_prefill_done_ms": float(((prefilled - reqs.arrival_s) * 1e3).mean()),
             "p99_prefill_done_ms": float(np.percentile((prefilled - reqs.arrival_s) * 1e3, 99))}
    return served, stats
