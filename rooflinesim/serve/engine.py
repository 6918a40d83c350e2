"""Engine schedulers, stepped through a stream of requests: ``simulate`` runs the one an
engine names (``schedulers/``: vLLM v1's, SGLang's, TensorRT-LLM's in-flight batching and
static batches), each a policy over the shared state of ``schedulers/base.py``, whose notes
say how the prefix cache is kept and how a step is priced.
"""

from __future__ import annotations

from ..errors import UserError
from .metrics import Served
from .schedulers.base import EngineParams
from .schedulers.sglang import SGLang, SGLangDecode
from .schedulers.static import Static
from .schedulers.trtllm import TrtLlm
from .schedulers.vllm import VllmV1, VllmV1Decode, VllmV1Pipeline, cascade_prefix
from .traffic import Requests

__all__ = ["EngineParams", "cascade_prefix", "engine_class", "simulate"]


def simulate(engine: str, reqs: Requests, steps, p: EngineParams, concurrency: int | None = None,
             progress=None, pull_s=None, warmup: int = 0) -> Served:
    """Serve ``reqs`` with ``engine`` (each scheduler's notes, ``schedulers/``); ``steps`` prices a step
    (``StepTimes``); ``concurrency``: at most this many requests in flight (a closed loop:
    a request is sent when it is due and one in flight has finished); ``progress(k)``, if
    given, hears of every k requests finished. ``pull_s``: the engine is the decode
    instance of a disaggregated pair (vllm, sglang), each request's prompt KV in from the
    prefill instance these seconds after it is given KV there (``VllmV1Decode``,
    ``SGLangDecode``). ``warmup``: the first this many requests warm the engine (its prefix
    cache) and are not measured: the pooled counts (inter-token gaps, preemptions, the prefix
    cache's lookups) start when the first measured request is sent (``Served.warmup``)."""
    if pull_s is not None:
        decode = {"vllm": VllmV1Decode, "sglang": SGLangDecode}.get(engine)
        if decode is None or p.stages > 1:
            raise UserError(f"prefill/decode disaggregation is simulated for --engine vllm and sglang without "
                            f"pipeline stages; {engine}{' with --pp' if decode else ''}'s is not modelled yet")
        sim = decode(reqs, steps, p, concurrency, pull_s)
    else:
        sim = engine_class(engine, p.stages)(reqs, steps, p, concurrency)
    sim.progress, sim.warmup = progress, int(warmup)
    return sim.run()


def engine_class(engine: str, stages: int = 1):
    """The simulation of ``engine`` on ``stages`` pipeline stages, or one sentence why none."""
    cls = {"vllm": VllmV1, "static": Static, "hf": Static, "sglang": SGLang, "trtllm": TrtLlm}.get(engine)
    if cls is None:
        raise UserError(f"unknown engine '{engine}'; known: vllm, sglang, trtllm, static, hf")
    if stages > 1:
        if engine not in ("vllm", "static"):
            raise UserError(f"pipeline parallelism (--pp above 1) is simulated for --engine vllm and static; "
                            f"{engine}'s pipeline scheduling is not modelled yet")
        cls = VllmV1Pipeline if engine == "vllm" else cls
    return cls
