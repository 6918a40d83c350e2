"""SGLang's memory rule: its defaults by the GPU's memory and the share of memory it keeps
for weights and KV cache (``mem_fraction_static``).

SGLang measures the free memory once its processes have joined (after the CUDA context and
the distributed set-up, the least over the ranks), loads the weights, measures again, and
gives the KV pool what is free then less (1 - mem_fraction_static) of the first figure
(python/sglang/srt/model_executor/model_runner.py, profile_max_num_token):

    pool bytes = free after weights - free before weights x (1 - mem_fraction_static)

Activations, CUDA graphs and the sampler live in that reserve; nothing is profiled. The
default fraction has changed with its releases (server_args.py); ``mem_fraction_static``
here is the rule of its releases since 0.5.10. Earlier servers, whose fraction this module
does not re-create, are run with the value their log prints (``--mem-fraction-static``):

* 0.3.0 to 0.4.5: by TP alone: 0.88, 0.87 at TP 2 and 3, 0.85 at TP 4 to 7, 0.83 (0.3.0 to
  0.3.5), 0.82 (0.3.6) or 0.81 (0.4.0 to 0.4.5) at TP 8 to 15, 0.79 from TP 16;
* 0.4.5.post3 to 0.4.7: on GPUs of more than 81,920 MiB, (memory - 13 GiB) / memory, later
  capped as sgl-project/sglang PR 5893 and PR 6718 did;
* 0.4.8 to 0.5.2: a reserve by GPU size and TP x PP (PR 7054);
* 0.5.3 to 0.5.9: the rule below without piecewise CUDA graphs (PR 10975, 2025-09-27).
"""

from __future__ import annotations

import math

from ..units import GIB, MIB

# SGLang's defaults by the GPU's memory (server_args.py, one table): below this many GiB, its
# chunked_prefill_size and its cuda_graph_max_bs at TP under 4 and at TP 4 and more
SGLANG_MEMORY_TIERS = ((20, 2048, 8, 8), (35, 2048, 24, 80), (60, 4096, 32, 160), (160, 8192, 256, 512),
                       (math.inf, 16384, 512, 512))
# the server's reserve in MiB (server_args.py, _handle_gpu_memory_settings since PR 10975): metadata,
# 1.5 MiB a token of the largest prefill (at least 2,048), 2 MiB a decode graph's request, 1 GiB
# per 8 GPUs of TP x PP, 8 MiB a piecewise graph (on by default since 0.5.10; MLA models: 1.5 GiB
# flat), and at least 10 GiB on GPUs of more than 60 GiB
RESERVE_MIB = {"metadata": 512, "per_prefill_token": 1.5, "min_prefill_tokens": 2048, "per_graph_request": 2,
               "per_8_gpus": 1024, "per_piecewise_graph": 8, "piecewise_mla": 1536, "floor": 10 * 1024,
               "floor_above": 60 * 1024}
FRACTION_SOURCE = ("SGLang's default since 0.5.10 (python/sglang/srt/server_args.py, "
                   "_handle_gpu_memory_settings; sgl-project/sglang PR 10975 and its piecewise CUDA graphs): "
                   "(memory - reserve) / memory, memory as nvidia-smi reports it")


def _tier(spec) -> tuple:
    gib = spec.memory.capacity_bytes / GIB
    return next(t for t in SGLANG_MEMORY_TIERS if gib < t[0])


def chunked_prefill_size(spec) -> int:
    """SGLang's default chunked_prefill_size on ``spec`` (by its memory)."""
    return _tier(spec)[1]


def cuda_graph_max_bs(spec, tp: int) -> int:
    """SGLang's default largest decode batch captured in a CUDA graph on ``spec`` at ``tp``."""
    tier = _tier(spec)
    return tier[2] if tp < 4 else tier[3]


def piecewise_graph_tokens(max_tokens: int) -> int:
    """How many prefill sizes SGLang captures as piecewise CUDA graphs up to ``max_tokens``
    (server_args.py, _generate_piecewise_cuda_graph_tokens)."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, max_tokens + 1, 512)]
    return sum(1 for s in sizes if s <= max_tokens)


def reserve_mib(memory_mib: float, *, tp: int, pp: int, chunk: int, graphs: int, piecewise: bool,
                mla: bool) -> float:
    """SGLang's reserve outside weights and KV pool, in MiB (``RESERVE_MIB``)."""
    r = RESERVE_MIB
    reserved = (r["metadata"] + max(chunk, r["min_prefill_tokens"]) * r["per_prefill_token"]
                + graphs * r["per_graph_request"] + tp * pp / 8 * r["per_8_gpus"])
    if piecewise:
        reserved += r["piecewise_mla"] if mla else piecewise_graph_tokens(chunk) * r["per_piecewise_graph"]
    if memory_mib > r["floor_above"]:
        reserved = max(reserved, r["floor"])
    return reserved


def mem_fraction_static(memory_bytes: float, *, tp: int, pp: int, chunk: int, graphs: int,
                        piecewise: bool = True, mla: bool = False) -> float:
    """SGLang's default mem_fraction_static for a GPU of ``memory_bytes`` (nvidia-smi's total)
    at ``tp`` x ``pp``, prefill chunks of ``chunk`` tokens, decode graphs up to ``graphs``
    requests and (``piecewise``) prefill graphs: (memory - reserve) / memory to 3 decimals."""
    memory_mib = memory_bytes / MIB
    reserved = reserve_mib(memory_mib, tp=tp, pp=pp, chunk=chunk, graphs=graphs, piecewise=piecewise, mla=mla)
    return round((memory_mib - reserved) / memory_mib, 3)


def pool_bytes(free_before_bytes: float, free_after_bytes: float, fraction: float) -> float:
    """The KV pool SGLang allocates from the free memory before and after loading the weights."""
    return free_after_bytes - free_before_bytes * (1.0 - fraction)


def pool_tokens(free_before_bytes: float, free_after_bytes: float, fraction: float, cell_bytes: float,
                page_size: int = 1) -> int:
    """SGLang's max_total_num_tokens: the pool in whole cells (GiB figures as it reads them,
    ``int(rest * 2**30) // cell``), floored to whole pages."""
    rest = pool_bytes(free_before_bytes, free_after_bytes, fraction)
    if rest <= 0:
        return 0
    tokens = int(rest) // int(cell_bytes)
    return tokens // page_size * page_size
