"""Engine schedulers, stepped through a stream of requests.

``vllm``: vLLM v1's scheduler (vllm/v1/core/sched/scheduler.py, ``Scheduler.schedule``),
FCFS, chunked prefill always on:
  * each step has a budget of ``max_num_batched_tokens`` new tokens; the running requests
    are scheduled first, in order, each with all its uncomputed tokens (one for a decode,
    the rest of its prompt for a prefill in progress) as far as the budget goes;
  * a request's KV cache grows in blocks of ``block_size`` tokens; when a running request's
    next tokens find no free block, the last running request is preempted (its blocks
    freed; it goes back to the front of the queue and recomputes its prompt and output
    so far), until the request fits or is itself the one preempted;
  * only in a step that preempted nothing are waiting requests admitted, in order, while
    the budget lasts, fewer than ``max_num_seqs`` requests run and the blocks of the
    tokens they are given are free (a prompt longer than the budget left is chunked);
  * a request samples a token in the step that computes its last uncomputed token (the
    first at the end of its prefill); it finishes with its output and frees its blocks;
  * async scheduling (``overlap``; on by default since v0.14.0, PR 27614, but with pipeline
    stages): the engine core schedules the next step as soon as this one is launched, the
    tokens this one samples standing in as placeholders (``AsyncScheduler``; the batch
    queue of ``EngineCore.step_with_batch_queue``), so a request that arrives while a step
    runs is first scheduled in the step after the next, as under SGLang's overlap
    scheduler (below);
  * cascade attention (its FlashAttention backend, ``EngineParams.cascade``): where every
    running request holds the same prefix (the whole blocks whose reference count is the
    running requests'), no longer than the scheduled ones have computed, and
    ``cascade_prefix`` takes it, the step's attention reads that prefix once for all of its
    queries and each sequence's own part (``StepTimes.step_s``).
``sglang``: SGLang's scheduler (python/sglang/srt/managers/scheduler.py, schedule_policy.py,
schedule_batch.py), FCFS, mixed chunks off (its default):
  * a step is a prefill batch whenever one can be formed, else a decode step of every
    running request; a prompt in progress (chunked) continues first;
  * a waiting request joins a prefill batch while the batch's prompt tokens stay under
    ``max_prefill_tokens`` (the first may pass it) and the KV tokens left, less a
    reservation for the running requests' future tokens (their remaining output, at most
    4096 each, times ``new_token_ratio``) and for each admitted one's whole output (at
    most 4096), cover its prompt; a prompt longer than the chunk budget
    (``max_num_batched_tokens``: SGLang's chunked_prefill_size) is cut to it;
  * ``new_token_ratio`` starts at 0.7, falls by (0.7 - 0.098) / 600 per decode step to
    0.098, and is back at 0.7 when the server idles;
  * a decode step needs a free KV token per running request; short of them, the running
    requests with the fewest output tokens (the longest prompts among equals) are retracted
    (their KV freed, back to the queue to be recomputed) until the free tokens cover 20
    steps of the rest, and ``new_token_ratio`` becomes min(1, (tokens generated + 20 x
    requests) / output tokens wanted) over the rest;
  * KV pages of one token; at most ``max_num_seqs`` requests run (max_running_requests);
  * the overlap scheduler (``overlap``, on by default since PR 2067, 2024-11-18) forms and
    launches the next batch while the GPU runs this one, and only then takes this one's
    results (``event_loop_overlap``): a batch is formed at the start of the step before it,
    so a request that arrives while a step runs is first scheduled in the step after the
    next (an idle server takes it at once). The tokens a finishing request decodes once
    more before its end is seen are not counted.
``trtllm``: TensorRT-LLM's in-flight batching (cpp/tensorrt_llm/batch_manager/
capacityScheduler.cpp, microBatchScheduler.cpp, scheduledBlocksManager.cpp;
tensorrt_llm/llmapi/llm_args.py), its default capacity policy GUARANTEED_NO_EVICT and
chunked context off, or MAX_UTILIZATION (``capacity_policy``) and chunked context
(``chunked_context``), as trtllm-bench runs it:
  * guaranteed_no_evict: a request is admitted, in order, only when the KV blocks (of
    ``block_size`` tokens) of its whole prompt and output fit beside those reserved to
    completion for every request in progress; the first that does not fit stops admission;
    nothing is ever evicted;
  * max_utilization: the executor holds up to ``max_num_seqs`` requests in order of arrival;
    each step takes them in order while the KV blocks of their next step are free (a first
    context chunk's whole context, a decode's next token); where they are not, the last
    started request from there on (a decode, or a context past its first chunk) is paused,
    its blocks freed, to recompute its tokens so far as a context later, and the request
    tried again; with none to pause, the step takes the requests before it;
  * a step takes those requests in order, one token for each generating request and its
    remaining context for each context request, up to ``max_num_batched_tokens``
    (max_num_tokens) and ``max_num_seqs`` (max_batch_size); the first that would pass
    them ends the step. With chunked context the contexts do not end it: they share the
    tokens the decodes leave first come first served, whole while they fit, the first that
    does not cut to whole blocks (the chunk unit is a block), and it samples at its last;
  * its overlap scheduler (on by default since PR 4174, 2025-05) fetches and schedules the
    next batch while the GPU runs this one, as SGLang's does (``overlap``).
``static``: static batching, for contrast: up to ``max_num_seqs`` waiting requests form a
batch when the engine is free; their prompts are prefilled together, padded to the
longest, and the batch decodes until its longest output is done (each request's own last
token is its end); the next batch starts after. ``hf``: the same static batches, each run as
Hugging Face transformers' generate() runs it (``predict model --engine hf``).

The prefix cache (``prefix_caching``; vllm's automatic prefix caching, sglang's radix
cache): a request scheduled from nothing computed finds its shared prefix (``Requests.
prefix_id``) cached once an earlier request with that prefix has been scheduled to compute
it (vLLM caches a block as it is allocated), in whole blocks for vllm and to the token for
sglang, its last prompt token always computed; the step computes the rest, its attention
over the whole context. A cached prefix held by no running request stays in the cache until
its blocks are taken for others: vLLM puts a finished request's blocks at the tail of its
queue of free blocks (its last blocks first, so its prefix's are taken last) and takes new
blocks from the head, and SGLang evicts its radix cache's least recently used leaves when
it runs short, so a prefix freed with F blocks free is lost once F, less the prefix's own
blocks, more have been allocated (a level of nested prefixes lost whole with its first
block; a request finds the levels from the first up to the first one lost, as vLLM's walk
of block hashes stops at the first block it does not find). A prefix's blocks are held once
however many running requests hold it (vLLM's blocks counted by reference, SGLang's radix
tree's nodes locked): a request that finds it held by a running one takes no blocks for its
whole blocks (a level's last part block is its own), one that finds it cached but held by
none takes its blocks back from the free ones, and its blocks are freed when the last
request holding it leaves. Two requests that compute the same prefix at once (the second
scheduled before the first has covered it) hold a copy each; a request sharing it then is
counted as sharing the copy of one still running.

A step's time is the GPU time of its kernels (``StepTimes``) plus the engine's host time
per step, a named parameter (``ENGINES``).
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..eager import joined
from ..errors import UserError
from .metrics import Served
from .traffic import Requests


@dataclass(frozen=True)
class EngineParams:
    """The scheduler's limits and the host time of a step."""

    name: str
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    kv_blocks: int  # the KV cache, in blocks of one replica
    step_overhead_s: float  # host time per step not hidden under the GPU's
    max_prefill_tokens: int = 16384  # sglang: prompt tokens of one prefill batch (its first request may pass it)
    stages: int = 1  # pipeline stages of a replica (vllm: as many batches in flight)
    overlap: bool = False  # the next batch is formed while the GPU runs this one (vLLM: async scheduling)
    capacity_policy: str = "guaranteed_no_evict"  # trtllm: or "max_utilization"
    chunked_context: bool = False  # trtllm: contexts cut to the step's token capacity (FCFS, in blocks)
    request_overhead_s: float = 0.0  # from a client's send to the engine's queue (the server's front end)
    prefill_host_s: float = 0.0  # sglang: the host's time for a prefill batch run without a CUDA graph (0: captured)
    # sglang: a decode batch of more requests than this runs without a CUDA graph (its
    # cuda_graph_max_bs), paced by the slower of its GPU time and decode_host_s; None: all captured
    eager_decode_above: int | None = None
    decode_host_s: float = 0.0
    max_model_len: int | None = None  # the longest request (prompt + output) the engine accepts (context.py)
    prefix_caching: bool = False  # vllm, sglang: a prompt's shared prefix, once computed, is reused (see _Sim.hit)
    # vllm: (query heads, KV heads of a GPU, the GPU's SMs) where its FlashAttention backend may
    # run cascade attention over a prefix every running request shares (cascade_prefix); None: never
    cascade: tuple | None = None
    # the engine's share of each card its KV cache was sized at and where it came from (None: tokens given)
    memory_fraction: tuple | None = None


_sum, _count = np.add.reduce, np.count_nonzero  # (the plain ufunc calls: a step makes a few dozen)
_max, _min, _cumsum = np.maximum.reduce, np.minimum.reduce, np.add.accumulate  # (cumsum's own, less its wrapper)

CASCADE_MIN_PREFIX = 256  # vLLM's use_cascade_attention: a shorter common prefix is not worth a second kernel
CASCADE_MIN_REQUESTS = 8  # nor are fewer requests in the step
CASCADE_TILE = 128  # the query and KV tiles of its performance model


def cascade_prefix(common: int, requests: int, decodes_only: bool, rule: tuple) -> int:
    """vLLM's choice of cascade attention for a step of ``requests`` sequences (each one
    token where ``decodes_only``) over a ``common`` prefix they all share, ``rule`` the
    deployment's (query heads, KV heads, SMs): the prefix it attends to once for all, or 0
    (vllm/v1/attention/backends/flash_attn.py, use_cascade_attention: a prefix of at least
    256 tokens, 8 requests; where FlashDecoding would run, GQA decodes only, whichever its
    count of thread-block waves makes faster)."""
    if common < CASCADE_MIN_PREFIX or requests < CASCADE_MIN_REQUESTS:
        return 0
    heads, kv_heads, sms = rule
    per_kv = heads // kv_heads
    if per_kv <= 1 or not decodes_only:  # (no FlashDecoding: cascade saves the prefix's reads)
        return common
    tiles = -(-common // CASCADE_TILE)
    cascade = -(-(heads * -(-requests // CASCADE_TILE)) // sms) * tiles
    flash_decoding = -(-(requests * kv_heads * -(-per_kv // CASCADE_TILE) * tiles) // sms)
    return common if cascade < flash_decoding else 0


def _blocks(tokens, block_size: int):
    return -(-tokens // block_size)


def simulate(engine: str, reqs: Requests, steps, p: EngineParams, concurrency: int | None = None,
             progress=None, pull_s=None, warmup: int = 0) -> Served:
    """Serve ``reqs`` with ``engine`` (see the module's notes); ``steps`` prices a step
    (``StepTimes``); ``concurrency``: at most this many requests in flight (a closed loop:
    a request is sent when it is due and one in flight has finished); ``progress(k)``, if
    given, hears of every k requests finished. ``pull_s``: the engine is the decode
    instance of a disaggregated pair (vllm, sglang), each request's prompt KV in from the
    prefill instance these seconds after it is given KV there (``_VllmV1Decode``,
    ``_SGLangDecode``). ``warmup``: the first this many requests warm the engine (its prefix
    cache) and are not measured: the pooled counts (inter-token gaps, preemptions, the prefix
    cache's lookups) start when the first measured request is sent (``Served.warmup``)."""
    if pull_s is not None:
        decode = {"vllm": _VllmV1Decode, "sglang": _SGLangDecode}.get(engine)
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
    cls = {"vllm": _VllmV1, "static": _Static, "hf": _Static, "sglang": _SGLang, "trtllm": _TrtLlm}.get(engine)
    if cls is None:
        raise UserError(f"unknown engine '{engine}'; known: vllm, sglang, trtllm, static, hf")
    if stages > 1:
        if engine not in ("vllm", "static"):
            raise UserError(f"pipeline parallelism (--pp above 1) is simulated for --engine vllm and static; "
                            f"{engine}'s pipeline scheduling is not modelled yet")
        cls = _VllmV1Pipeline if engine == "vllm" else cls
    return cls


class _Sim:
    def __init__(self, reqs: Requests, steps, p: EngineParams, concurrency: int | None):
        n = len(reqs)
        self.reqs, self.steps, self.p = reqs, steps, p
        self.prompt = reqs.input_tokens.astype(np.int64)
        self.output = reqs.output_tokens.astype(np.int64)
        worst = int(_blocks(self.prompt + self.output, p.block_size).max())
        if worst > p.kv_blocks:
            i = int(np.argmax(self.prompt + self.output))
            raise UserError(f"a request of {int(self.prompt[i] + self.output[i]):,} tokens needs {worst:,} KV blocks "
                            f"of {p.block_size} tokens; the KV cache holds {p.kv_blocks:,}")
        self.arrival = reqs.arrival_s.astype(float).copy()
        self.sent = np.full(n, np.nan)  # when the client sends each request
        self.scheduled = np.full(n, np.nan)
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.last_token = np.zeros(n)
        self.generated = np.zeros(n, dtype=np.int64)
        self.itl: list = []  # inter-token gaps, as (gaps, how many requests each stands for)
        # (the step log: machine arrays, appended to as lists are and read by numpy without a copy)
        self.log = {"start_s": array("d"), "duration_s": array("d"), "tokens": array("q"), "sequences": array("q"),
                    "kv_blocks_used": array("q"), "sampled": array("q")}
        self.preemptions = 0
        self.eager_decode_steps = 0
        # the prefix cache (where on and the requests share prefixes): the prefixes computed
        # (a column per level of nested prefixes; the cache holds (level, id) pairs)
        on = p.prefix_caching and reqs.prefix_id is not None
        self.group = reqs.prefix_id.reshape(n, -1) if on else None
        # (a level without a prefix is never covered: its levels covered are then the first ones)
        self.group_tokens = np.where(self.group >= 0, reqs.prefix_tokens.reshape(n, -1), np.iinfo(np.int64).max) \
            if on else None
        self.marked = np.zeros(n, dtype=np.int64) if on else None  # levels each running request holds
        self.cascading = on and p.cascade is not None  # (vllm: cascade attention over a prefix all hold)
        # the cached prefixes, (level, id): how many running requests hold each, and for those
        # none holds, the count of blocks allocated at which the cache loses it (see the notes)
        self.holders: dict = {}
        self.parked: dict = {}
        # the sharing of the prefixes' blocks: of a prefix's holders, how many share another's
        # blocks (found them held); how many levels each running request shares so; and the
        # blocks the running requests' own counts hold more than once (the cache holds them once)
        self.sharers: dict = {}
        self.borrowed = np.zeros(n, dtype=np.int64) if on else None
        self.dup = 0
        self.freed = self.reused = 0  # blocks freed by requests leaving; cached blocks taken back from the free
        self.cache_queries = self.cache_hits = 0
        self.next = 0  # the next request not yet sent
        # a closed loop: the times slots in flight became free (a request is sent when it is due
        # and a slot is free), none for an open one
        self.slots = None if concurrency is None else deque([0.0] * int(concurrency))
        self.now = 0.0

    def hit(self, i: int, known: int, page: int, used: int) -> int:
        """Request ``i``, to be scheduled from nothing computed with ``known`` tokens while
        ``used`` blocks are held: how many the prefix cache holds. Its nested prefixes from
        the first while each is cached (computed by a request scheduled to, and held by a
        running one or not yet lost: the module's notes), in whole pages of ``page`` tokens,
        its last known token always computed (vLLM's KVCacheManager.get_computed_blocks;
        SGLang's radix cache, pages of one token)."""
        if self.group is None:
            return 0
        found, ids, allocated = 0, self.group[i], self.allocated(used)
        for level in range(ids.size):
            key = (level, int(ids[level]))
            if key[1] < 0:
                break
            if key not in self.holders:
                lost = self.parked.get(key)
                if lost is None or lost <= allocated:
                    self.parked.pop(key, None)
                    break
            found = int(self.group_tokens[i, level])
        return min(found, known - 1) // page * page

    def allocated(self, used: int) -> int:
        """Blocks allocated so far, with ``used`` held now (those freed and those held, less
        the cached ones taken back from the free blocks)."""
        return self.freed + used - self.reused

    def shared(self, i: int, hit: int) -> tuple:
        """Request ``i``, finding ``hit`` tokens in the prefix cache: its nested prefixes from
        the first that running requests hold, whole within the hit (how many levels, and
        their whole blocks: those it shares rather than takes)."""
        if self.group is None:
            return 0, 0
        bs, levels, ids = self.p.block_size, 0, self.group[i]
        while levels < ids.size and ids[levels] >= 0 and (levels, int(ids[levels])) in self.holders \
                and int(self.group_tokens[i, levels]) // bs * bs <= hit:
            levels += 1
        return levels, int(self.group_tokens[i, levels - 1]) // bs if levels else 0

    def looked_up(self, known: int, hit: int, shared: int = 0) -> None:
        """Requests scheduled with ``known`` tokens, ``hit`` of them found in the prefix cache
        (counted as vLLM counts its hit rate), ``shared`` blocks of those held by running
        requests (the rest taken back from the free blocks)."""
        if self.p.prefix_caching:
            self.cache_queries += known
            self.cache_hits += hit
            self.reused += hit // self.p.block_size - shared

    def found(self, i: int, known: int, hit: int, share: tuple, tokens: int) -> None:
        """Request ``i``, scheduled with ``known`` tokens, found ``hit`` of them in the prefix
        cache, ``share`` of them held by running requests (``shared``'s answer), and will
        have ``tokens`` computed."""
        self.looked_up(known, hit, share[1])
        if self.group is not None:
            self.borrowed[i] = share[0]
            self.prefix_computed(i, tokens)

    def _level_blocks(self, i: int, level: int) -> int:
        """The whole blocks request ``i``'s prefix at ``level`` adds to the level before."""
        bs, t = self.p.block_size, self.group_tokens[i]
        return int(t[level]) // bs - (int(t[level - 1]) // bs if level else 0)

    @staticmethod
    def _counted_twice(holders: int, sharers: int) -> int:
        """Of a prefix's copies counted by its ``holders``, ``sharers`` of them sharing
        another's blocks, how many the cache does not hold: each sharer's, but one where none
        holds blocks of its own (those that computed it left)."""
        return max(0, min(sharers, holders - 1))

    def _hold(self, key, blocks: int, holders: int, sharers: int) -> None:
        """A prefix of ``blocks`` blocks now has ``holders`` running requests holding it,
        ``sharers`` of them sharing another's blocks: the blocks counted more than once follow."""
        old = self._counted_twice(self.holders.get(key, 0), self.sharers.get(key, 0))
        self.dup += (self._counted_twice(holders, sharers) - old) * blocks
        if holders:
            self.holders[key] = holders
        else:
            self.holders.pop(key, None)
        if sharers:
            self.sharers[key] = sharers
        else:
            self.sharers.pop(key, None)

    def prefix_computed(self, ids, tokens) -> None:
        """Requests ``ids`` will have ``tokens`` computed: they hold their prefixes those
        cover (cached from now, as vLLM caches a block once allocated)."""
        if self.group is not None:
            ids = np.atleast_1d(ids)
            covered = (np.atleast_1d(tokens)[:, None] >= self.group_tokens[ids]).sum(axis=1)
            more = covered > self.marked[ids]
            holders, sharers, parked = self.holders, self.sharers, self.parked
            for i, upto in zip(ids[more].tolist(), covered[more].tolist()):
                for level in range(int(self.marked[i]), upto):
                    key = (level, int(self.group[i, level]))
                    self._hold(key, self._level_blocks(i, level), holders.get(key, 0) + 1,
                               sharers.get(key, 0) + (level < self.borrowed[i]))
                    parked.pop(key, None)
                self.marked[i] = upto

    def left(self, ids, blocks: int, free: int) -> int:
        """Requests ``ids``, holding ``blocks``, left the running ones (finished, preempted,
        retracted) with ``free`` blocks free: of their blocks, how many others still hold
        (their prefixes' shared blocks; the rest are freed). The prefixes no running request
        holds now go to the tail of the free blocks, lost once that many, less their own,
        are allocated."""
        if self.group is None:
            return 0
        kept, unheld = self._let_go(ids)
        self.freed += int(blocks) - kept
        free = int(free) + int(blocks) - kept  # (after)
        allocated, bs = self.allocated(self.p.kv_blocks - free), self.p.block_size
        for key, prefix in unheld:
            self.parked[key] = allocated + free - -(-prefix // bs)
        return kept

    def _after_leaving(self, ids) -> tuple:
        """Were requests ``ids`` to leave now, one after another: each prefix level they hold
        as (the prefix, the leaving request's blocks of it, the holders and sharers left), in
        that order; how many of their blocks others would still hold; and the prefixes none
        would hold, with the tokens of the request that held each last (nothing changed)."""
        holders, sharers, left, updates, kept, unheld = self.holders, self.sharers, {}, [], 0, []
        for i in np.atleast_1d(ids).tolist():
            for level in range(int(self.marked[i])):
                key = (level, int(self.group[i, level]))
                h, s = left.get(key) or (holders[key], sharers.get(key, 0))
                blocks, after = self._level_blocks(i, level), (h - 1, s - int(level < self.borrowed[i]))
                kept += (self._counted_twice(h, s) - self._counted_twice(*after)) * blocks
                left[key] = after
                updates.append((key, blocks, *after))
                if not after[0]:
                    unheld.append((key, int(self.group_tokens[i, level])))
        return updates, kept, unheld

    def _let_go(self, ids) -> tuple:
        """Requests ``ids`` no longer hold their prefixes: (how many of their blocks others
        still hold, the prefixes none holds now with their tokens)."""
        updates, kept, unheld = self._after_leaving(ids)
        for key, blocks, h, s in updates:
            self._hold(key, blocks, h, s)
        ids = np.atleast_1d(ids)
        self.marked[ids] = self.borrowed[ids] = 0
        return kept, unheld

    def kept_if_left(self, ids) -> int:
        """How many of requests ``ids``' blocks others would still hold were they to leave
        now (nothing changed)."""
        return self._after_leaving(ids)[1] if self.dup else 0

    def due(self) -> float:
        """When the next request reaches the engine: sent, and through the server's front end
        (inf: none left, or the client waits for a slot)."""
        if self.next >= len(self.arrival) or (self.slots is not None and not self.slots):
            return math.inf
        t = self.arrival[self.next]
        return (t if self.slots is None else max(t, self.slots[0])) + self.p.request_overhead_s

    formed = None  # overlap: when the coming batch was formed (the start of the step last run); None: now

    def send_due(self, queue) -> None:
        """Requests due by now join the queue (the engine sees them at a step's end; with the
        overlap scheduler, those due by the start of the step just run)."""
        until = self.now if self.formed is None else self.formed
        while self.due() <= until:
            i = self.next
            self.sent[i] = self.arrival[i] if self.slots is None else max(self.arrival[i], self.slots.popleft())
            queue.append(i)
            self.next += 1
            if i == self.warmup and i:  # (the first measured request: the pooled counts start here)
                self.marks = (len(self.itl), self.preemptions, self.cache_queries, self.cache_hits,
                              self.eager_decode_steps)

    progress = None  # progress(k): k more requests finished
    warmup = 0  # requests before the first measured one (``simulate``)
    marks = (0, 0, 0, 0, 0)  # the pooled counts when it was sent: gaps logged, preemptions, lookups, hits, eager steps

    def release(self, count: int) -> None:
        """``count`` requests finished now: with a concurrency limit, their slots free."""
        if self.progress is not None:
            self.progress(count)
        if self.slots is not None:
            self.slots.extend([self.now] * count)

    def idle(self, t: float) -> None:
        """Nothing to run until ``t`` (not before now): an idle server takes the next request at once."""
        self.now, self.formed = max(self.now, t), None

    stretches = True  # decode-only stretches taken at once (the same steps; False: one by one)

    def steps_before_due(self, k: int, n: int, due: float) -> int:
        """At most ``k`` steps of ``n`` decodes, no more than fit, each at the least such a
        step can take, before the loop would see a request due at ``due`` (``until_due``'s)."""
        if due == math.inf:
            return k
        floor = self.steps.dense_decode[n] + self.steps.logits[n] + self.p.step_overhead_s
        return min(k, max(int((due - self.now) / floor), -1) + 2)  # (with the overlap, it may be due already)

    def until_due(self, dur: np.ndarray, due: float) -> tuple:
        """Of steps of these durations from now, how many the loop runs before a request due
        at ``due`` joins: up to the one in which it comes due, with the overlap scheduler
        (which forms a batch as the one before starts) the first to start after it. (That
        many, and when each of the steps ends: ``record_run``'s ``ends`` for the first so many.)"""
        ends = self.now + _cumsum(dur)
        k = min(dur.size, int((ends - dur if self.p.overlap else ends).searchsorted(due, side="left")) + 1)
        return k, ends

    def record_run(self, dur: np.ndarray, sizes, blocks, ends: np.ndarray | None = None) -> np.ndarray:
        """Steps of durations ``dur`` from now, one after another, of ``sizes`` decodes
        (an array("q"), a list, or one for all) holding ``blocks`` KV blocks (an array or list); now is
        their end, the last formed as ``record`` leaves it. ``ends``: when each ends, where known
        (``until_due``'s; a cumulative sum's first values are those of the sum over fewer).
        (When each ends.)"""
        log, k = self.log, dur.size
        ends = self.now + _cumsum(dur) if ends is None else ends[:k]
        log["start_s"].frombytes((ends - dur).tobytes())
        log["duration_s"].frombytes(np.ascontiguousarray(dur, dtype=float).tobytes())
        size = array("q", [sizes]) * k if isinstance(sizes, (int, np.integer)) else \
            sizes if isinstance(sizes, array) else array("q", sizes)
        log["tokens"].extend(size)
        log["sequences"].extend(size)
        log["sampled"].extend(size)
        log["kv_blocks_used"].frombytes(np.ascontiguousarray(blocks, dtype=np.int64).tobytes())
        self.now = float(ends[-1])
        self.formed = float(ends[-1] - dur[-1]) if self.p.overlap else None
        return ends

    def decoded(self, ids: np.ndarray, dur: np.ndarray, ends: np.ndarray, computed, gen, tokens) -> None:
        """Requests ``ids`` decoded a token in each of the steps of durations ``dur`` just
        run (``record_run``'s, ending at ``ends``): their gaps (each request's to the first,
        then every later step's, once for each request), their counts, their last token's time."""
        k = dur.size
        self.itl.append((ends[0] - self.last_token[ids], 1))
        if k > 1:
            self.itl.append((dur[1:], ids.size))
        computed[ids] += k
        gen[ids] += k
        tokens[ids] += k
        self.last_token[ids] = ends[-1]

    def record(self, start: float, duration: float, tokens: int, seqs: int, blocks: int, sampled: int) -> None:
        """A step from ``start`` of ``tokens`` computed for ``seqs`` requests, ``sampled`` of which
        got an output token at its end; with the overlap scheduler the next batch is formed as it
        starts."""
        self.formed = start if self.p.overlap else None
        log = self.log
        log["start_s"].append(start)
        log["duration_s"].append(duration)
        log["tokens"].append(tokens)
        log["sequences"].append(seqs)
        log["kv_blocks_used"].append(blocks)
        log["sampled"].append(sampled)

    def served(self) -> Served:
        gaps = np.zeros(0)
        itl = self.itl[self.marks[0]:]  # (from the first measured request's send)
        if itl:  # (each gap as many times as requests saw it, as a client lists them; each an array)
            values, each = zip(*itl)
            sizes = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
            gaps = np.repeat(np.concatenate(values), np.repeat(np.array(each, dtype=np.int64), sizes))
        log = {k: np.frombuffer(v, dtype=float if k.endswith("_s") else np.int64) for k, v in self.log.items()}
        _, preempted, queries, hits, eager = self.marks
        return Served(self.sent, self.prompt, self.output, self.scheduled, self.first, self.finish,
                      gaps, self.preemptions - preempted, log, self.cache_queries - queries, self.cache_hits - hits,
                      self.eager_decode_steps - eager, warmup=self.warmup)


class _Running:
    """The running requests, in scheduling order, as arrays: id, known tokens (prompt and
    output so far), tokens computed, KV blocks held, tokens generated, output wanted, and
    when each last produced a token."""

    FIELDS = ("id", "tokens", "computed", "held", "generated", "output", "last")

    def __init__(self):
        for f in self.FIELDS:
            setattr(self, f, np.zeros(0, dtype=float if f == "last" else np.int64))

    @property
    def size(self) -> int:
        return self.id.size

    def keep(self, mask) -> None:
        fields = self.__dict__
        for f in self.FIELDS:
            fields[f] = fields[f][mask]

    def add_columns(self, *columns) -> None:
        """Append requests given as one array (or value) a field, in ``FIELDS``' order."""
        fields = self.__dict__
        for f, c in zip(self.FIELDS, columns):
            fields[f] = np.concatenate((fields[f], c))

    def add(self, rows: list) -> None:
        """Append requests, each (id, tokens, computed, held, generated, output, last)."""
        m = len(rows)
        for f, c in zip(self.FIELDS, zip(*rows)):
            old = getattr(self, f)
            new = np.empty(old.size + m, dtype=old.dtype)  # (cheaper than concatenating a few values)
            new[:old.size] = old
            new[old.size:] = c
            setattr(self, f, new)


class _VllmV1(_Sim):
    aside = 0  # KV blocks held by requests that are not running (a decode instance's pulls)

    def common_prefix(self, run: _Running, on=None, decodes_only: bool = False, rows=None) -> int:
        """The prefix the step's cascade attention covers (0: none): the whole blocks of the
        nested prefixes every running request holds (vLLM's blocks whose reference count is
        the running requests'; ``rows``: those of these rows, the others gone), no more than
        the scheduled requests (``on``; None: all) have computed, as vLLM's runner cuts it
        (_compute_cascade_attn_prefix_len), where ``cascade_prefix`` takes it."""
        n = run.size if rows is None else len(rows)  # (called where self.cascading)
        if n < CASCADE_MIN_REQUESTS:
            return 0
        first = int(run.id[0 if rows is None else rows[0]])
        ids, level = self.group[first], 0
        if rows is None:  # (held by as many running requests as there are)
            holders = self.holders
            while level < int(self.marked[first]) and holders.get((level, int(ids[level]))) == n:
                level += 1
        else:  # (held by each of these)
            group, marked = self.group[run.id[rows]], self.marked[run.id[rows]]
            while level < int(marked.min()) and bool((group[:, level] == ids[level]).all()):
                level += 1
        if not level:
            return 0
        bs = self.p.block_size
        computed = run.computed[rows] if rows is not None else run.computed if on is None else run.computed[on]
        common = min(int(self.group_tokens[first, level - 1]) // bs, int(computed.min()) // bs) * bs
        return cascade_prefix(common, int(computed.size), decodes_only, self.p.cascade)

    def free_blocks(self, run: _Running) -> int:
        """The free KV blocks: all but those the running requests hold (each block once,
        though ``held`` counts a shared prefix's in every request holding it) and those held
        aside."""
        return self.p.kv_blocks - int(_sum(run.held)) - self.aside + self.dup

    def run(self) -> Served:
        p = self.p
        n = len(self.arrival)
        # requests not running: known tokens, tokens computed (0 once preempted), tokens generated
        tokens = self.prompt.copy()
        gen = np.zeros(n, dtype=np.int64)
        free = p.kv_blocks
        waiting: deque = deque()
        run = _Running()
        done = 0
        while done < n:
            self.send_due(waiting)
            if not waiting and run.size == 0:
                self.idle(self.due())
                continue
            want = run.tokens - run.computed
            if self.stretches and waiting:  # (where it takes a step, no decode stretch could be)
                took = self._whole_prompts_step(run, want, waiting, tokens, gen, free)
                if took is not None:
                    free, finished = took
                    done += finished
                    continue
            if self.stretches and run.size and self._decode_stretch(run, want, waiting, tokens, free):
                done += self._finish(run, tokens, gen)
                free = self.free_blocks(run)
                continue
            want, give, free = self._schedule(run, want, waiting, tokens, gen, free)
            if not _count(give):  # (nothing fits: only a finishing request can free room)
                later = self._next_ready()
                if later is None:
                    raise UserError("the engine stalled: no request fits in the KV cache")
                self.idle(later)  # (no step runs: the next request is seen at once)
                continue
            # 3. the step: decode tokens and prefill chunks, priced
            ctx = run.computed + give
            on = give > 0  # (a running request the budget did not reach is not in the step)
            samples = on & (ctx == run.tokens)
            common = self.common_prefix(run, on, bool((give[on] == 1).all())) if self.cascading else 0
            sampled = _count(samples)
            dur = self.steps.step_of(give[on], ctx[on], (want == 1)[on], sampled, common) + p.step_overhead_s
            self.record(self.now, dur, int(_sum(give)), _count(on), p.kv_blocks - free, sampled)
            self.now += dur
            run.computed = ctx
            # 4. tokens sampled, requests finished
            finished = self._sampled(run, samples, tokens, gen)
            if finished:
                done += finished
                free = self.free_blocks(run)
        return self.served()

    def _whole_prompts_step(self, run: _Running, want, waiting, tokens, gen, free):
        """The step ``_schedule`` and the loop would take, the common case at a light load
        taken in fewer operations: every running request decodes a token (or computes its
        prompt's last), every waiting request joins with its whole prompt, and blocks, room
        and budget are left for all of them. (the free blocks after it, how many finished),
        or None where the case does not hold."""
        p, bs = self.p, self.p.block_size
        n = run.size
        if len(waiting) + n > p.max_num_seqs or (n and (_max(want) != 1 or _min(want) != 1)):
            return None
        need = _blocks(run.computed + 1, bs) - run.held
        left = free - int(_sum(need))
        budget = p.max_num_batched_tokens - n
        if left < 0 or budget < 1:
            return None
        ids = list(waiting)
        if self.group is not None and (self.group[ids] >= 0).any():  # (the prefix cache: _schedule's way)
            return None
        prompts = tokens[ids]
        blocks = _blocks(prompts, bs)
        prompt_tokens, prompt_blocks = int(_sum(prompts)), int(_sum(blocks))
        if prompt_tokens > budget or prompt_blocks > left:
            return None
        waiting.clear()
        t = prompts.astype(float)
        dur = self.steps.step_s(n, float(_sum(run.computed) + n) / n if n else 0.0, len(ids), prompt_tokens,
                                float(_sum(t * t) / _sum(t)), n + len(ids)) + p.step_overhead_s
        left -= prompt_blocks
        for i in ids:
            if math.isnan(self.scheduled[i]):
                self.scheduled[i] = self.now
        self.looked_up(prompt_tokens, 0)  # (none found: no request here shares a prefix)
        self.record(self.now, dur, n + prompt_tokens, n + len(ids), p.kv_blocks - left, n + len(ids))
        self.now += dur
        run.computed = run.computed + 1
        run.held = run.held + need
        ix = np.array(ids, dtype=np.int64)
        run.add_columns(ix, prompts, prompts, blocks, gen[ix], self.output[ix], self.last_token[ix])
        finished = self._sampled_all(run)
        return (self.free_blocks(run) if finished else left), finished

    def _sampled_all(self, run: _Running) -> int:
        """``_sampled`` with every running request given a token."""
        run.generated = run.generated + 1
        run.tokens = run.tokens + 1
        firsts = run.generated == 1
        k = _count(firsts)
        if k:
            self.first[run.id[firsts]] = self.now
            if self.group is not None:
                self.prefix_computed(run.id[firsts], run.tokens[firsts])
        if k < run.size:
            self.itl.append((self.now - run.last[~firsts], 1))
        run.last = np.full(run.size, self.now)
        return self._finish(run, None, None) if _count(run.generated >= run.output) else 0

    def _schedule(self, run: _Running, want, waiting, tokens, gen, free):
        """A step's scheduling (the module's notes): the running requests' tokens as far as
        the budget goes, preempting where blocks run out, then waiting requests where nothing
        was preempted; (their tokens wanted, the tokens given each, the free blocks left)."""
        p, bs = self.p, self.p.block_size
        budget = p.max_num_batched_tokens
        # 1. the running requests, in order, as far as the budget goes
        give = np.minimum(want, np.maximum(budget - (_cumsum(want) - want), 0))
        need = _blocks(run.computed + give, bs) - run.held  # (0 where given nothing: held covers computed)
        preempted = False
        grow = int(_sum(need))
        if grow > free:
            give, need, free = self._preempt(run, give, need, free, waiting, tokens, gen)
            want = run.tokens - run.computed
            preempted = True
            grow = int(_sum(need))
        free -= grow
        run.held = run.held + need
        budget -= int(_sum(give))
        # 2. waiting requests, in order, where nothing was preempted
        if not preempted and waiting:
            rows, gives, free = self._admit(waiting, tokens, gen, free, budget, p.max_num_seqs - run.size)
            if rows:
                run.add(rows)
                want = np.concatenate([want, run.tokens[-len(rows):] - run.computed[-len(rows):]])
                give = np.concatenate([give, np.array(gives, dtype=np.int64)])
        return want, give, free

    def _admit(self, waiting, tokens, gen, free, budget: int, room: int):
        """Waiting requests, in order, while the budget lasts, fewer than max_num_seqs run
        (``room``) and their blocks are free: (their rows for ``_Running.add``, the tokens
        given each, the free blocks left)."""
        bs, rows, gives = self.p.block_size, [], []
        while waiting and budget > 0 and room > 0:
            i = waiting[0]
            known = int(tokens[i])
            h = self.hit(i, known, bs, self.p.kv_blocks - free)  # (a waiting request: nothing computed but the cache's)
            g = min(known - h, budget)
            b = int(_blocks(h + g, bs))  # (counted as its own, those it shares too: free_blocks)
            share = self.shared(i, h)
            if b - share[1] > free:
                break
            waiting.popleft()
            free -= b - share[1]
            budget -= g
            room -= 1
            self.found(i, known, h, share, h + g)
            rows.append((i, known, h, b, int(gen[i]), int(self.output[i]), self.last_token[i]))
            gives.append(g)
            if np.isnan(self.scheduled[i]):
                self.scheduled[i] = self.now
        return rows, gives, free

    def _sampled(self, run: _Running, got, tokens, gen) -> int:
        """A token each for the running requests of mask ``got``, now; how many finish."""
        run.generated = run.generated + got
        run.tokens = run.tokens + got
        firsts = got & (run.generated == 1)
        if _count(firsts):
            self.first[run.id[firsts]] = self.now
            self.prefix_computed(run.id[firsts], run.tokens[firsts])  # (chunked prompts' prefixes now cached)
        later = got ^ firsts  # (those given a token and past their first)
        if _count(later):
            self.itl.append((self.now - run.last[later], 1))
        run.last = np.where(got, self.now, run.last)
        return self._finish(run, tokens, gen) if _count(got & (run.generated >= run.output)) else 0

    def preempted(self, i: int) -> None:
        """Request ``i`` was preempted (a hook: nothing to do when one batch runs at a time)."""

    def _next_ready(self) -> float | None:
        """With nothing to schedule: when a waiting request may become schedulable without
        a step (none here: a request that fits nowhere stalls the engine)."""
        return None

    def _finish(self, run: _Running, tokens, gen) -> int:
        """Requests that have all their output leave (their blocks freed); how many."""
        ended = run.generated >= run.output
        k = _count(ended)
        if k:
            ids = run.id[ended]
            self.finish[ids] = run.last[ended]  # (now, but for those a decode stretch took on past their end)
            self.generated[ids] = run.generated[ended]
            self.last_token[ids] = run.last[ended]
            if self.group is not None:
                self.left(ids, int(_sum(run.held[ended])), self.free_blocks(run))
            run.keep(~ended)
            self.release(k)
        return k

    def _decode_stretch(self, run: _Running, want, waiting, tokens, free) -> bool:
        """Steps in which nothing but the running requests' decodes can happen, taken at
        once: every running request decodes, no waiting request can be admitted (none
        waits, or no room or blocks for the first), up to the step after which the loop
        would see a request come due (``until_due``) or the blocks would run out (which the
        step-by-step loop then handles), and up to the first running request's finish,
        unless nothing waits or may be sent before
        the stretch ends (then the batch goes on without those that finish, as the loop
        would take it). Each step is the one the loop would take."""
        p = self.p
        n = run.size
        if waiting and n < p.max_num_seqs:  # (the cheap test first: one waiting may be admitted)
            i = waiting[0]
            g = min(int(tokens[i]), p.max_num_batched_tokens - n)
            if g > 0 and _blocks(g, p.block_size) <= free:
                return False
        if _max(want) != 1 or _min(want) != 1 or _min(run.generated) < 1:  # (a prompt's last token is no decode)
            return False
        left = run.output - run.generated  # (steps to each request's last token)
        first = int(_min(left))
        # (past a finish only where no waiting request, nor one a freed slot lets the client send, could join)
        k = int(_max(left)) if not waiting and self.slots is None else first
        due = self.due()
        k = self.steps_before_due(k, n if k == first else 1, due)
        c = run.computed
        if n * (k // p.block_size + 1) > free:  # (the blocks may run out: count them per step)
            k = min(k, first)
            j = np.arange(1, k + 1)
            grow = (_blocks(c[:, None] + j, p.block_size) - run.held[:, None]).clip(0).sum(axis=0)
            k = min(k, int(np.searchsorted(grow, free, side="right")))
        if k < 1:
            return False
        j = np.arange(1, k + 1)
        if k <= first:  # (the same batch throughout)
            common = self.common_prefix(run, None, True) if self.cascading else 0
            dur = self.steps.decode_steps(n, int(_sum(c)) / n + j, common) + p.step_overhead_s  # (the mean, exactly)
            parts = [(dur, n)]  # (a run of steps with its batch size)
        else:  # (the batch shrinks as requests finish: each step over the requests still running)
            order = np.argsort(left, kind="stable")
            ranked = left[order].tolist()
            held = _cumsum(c[order][::-1])[::-1].tolist()  # (context held by each request on, in that order)
            parts, a, at = [], 0, self.now  # (one part a batch size, until the step in which one is due)
            for r in range(n):
                b = min(ranked[r], k)
                if b > a:
                    common = self.common_prefix(run, None, True, order[r:]) if self.cascading else 0
                    d = self.steps.decode_steps(n - r, held[r] / (n - r) + j[a:b], common) + p.step_overhead_s
                    parts.append((d, n - r))
                    at += float(_sum(d))
                    a = b
                    if a == k or at >= due:
                        break
            dur = np.concatenate([d for d, _ in parts])
            k, j = dur.size, j[:dur.size]
        k, ends = self.until_due(dur, due)
        dur, j = dur[:k], j[:k]
        steps = np.minimum(left, k)  # (each request's steps in the stretch)
        held = _blocks(c + steps, p.block_size)
        # (blocks in use over the stretch: exact at its ends, in between a straight line)
        before = p.kv_blocks - free
        after = before - int(_sum(run.held)) + int(_sum(held[left >= k]))
        if self.group is not None and _count(left < k):  # (those that finish: their shared blocks stay)
            after += self.kept_if_left(run.id[left < k])
        # (each step's batch, the parts past the stretch's end cut off)
        size = n if len(parts) == 1 else sum((array("q", [m]) * d.size for d, m in parts), array("q"))[:k]
        ends = self.record_run(dur, size, np.rint(before + (after - before) * j / k).astype(np.int64), ends)
        self.itl.append((ends[0] - run.last, 1))  # (each request's gap to this stretch's first token,
        a = 0  # then every later step's, once for each request it serves)
        for d, m in parts:
            lo, hi = max(a, 1), min(a + d.size, k)
            if hi > lo:
                self.itl.append((dur[lo:hi], m))
            a += d.size
        run.computed = c + steps
        run.tokens = run.tokens + steps
        run.generated = run.generated + steps
        run.held = held
        run.last = ends[steps - 1]  # (a request that finished: its last token's time)
        return True

    def _preempt(self, run: _Running, give, need, free, waiting, tokens, gen):
        """vLLM's preemption: while the first running request whose blocks do not fit is
        unmet, the last running request gives back its blocks and goes to the front of the
        queue to be recomputed (the unmet one too, when it is itself the last)."""
        while True:
            over = np.nonzero(np.cumsum(need) > free)[0]
            if over.size == 0:
                return give, need, free
            first = int(over[0])
            v = run.size - 1
            victim = int(run.id[v])
            self.preemptions += 1
            self.preempted(victim)
            free += int(run.held[v]) - self.left(victim, int(run.held[v]), free)
            tokens[victim], gen[victim] = run.tokens[v], run.generated[v]
            self.last_token[victim] = run.last[v]
            waiting.appendleft(victim)
            keep = np.arange(run.size) < v
            run.keep(keep)
            give, need = give[:v], need[:v]
            if first == v:  # (the unmet request was the last: preempted itself)
                return give, need, free


class _VllmV1Decode(_VllmV1):
    """vLLM v1 as the decode instance of a disaggregated pair (its NixlConnector,
    vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py): each request's prompt
    KV was computed by a prefill instance. At the head of the queue a request is given
    blocks for its whole prompt, taking none of the step's token budget (blocks it does
    not find hold back the queue, as any waiting request's do), and its KV is pulled in
    the background (``pull_s``); the queue goes on past it. Once the pull is done, the
    next schedule takes it as a waiting request with all but its last prompt token
    computed: a one-token step recomputes that token and samples the first output
    token. A request preempted after that recomputes here, as any other."""

    def __init__(self, reqs: Requests, steps, p: EngineParams, concurrency: int | None, pull_s):
        super().__init__(reqs, steps, p, concurrency)
        self.pull_s = np.broadcast_to(np.asarray(pull_s, dtype=float), (len(reqs),))
        self.pulled = np.full(len(reqs), np.nan)  # when each request's KV is in (nan: no blocks yet)
        self.remote = np.ones(len(reqs), dtype=bool)  # its prompt KV still comes from the prefill instance
        self.pull_blocks = np.zeros(len(reqs), dtype=np.int64)

    def _admit(self, waiting, tokens, gen, free, budget: int, room: int):
        bs, rows, gives, passed = self.p.block_size, [], [], []
        # (with nothing running, a request the free blocks cannot take, or that cannot finish
        # beside the blocks the pulled requests behind it hold, would wait for them forever, or
        # be preempted again and again: those, which need no blocks, go first)
        idle, blocked = room == self.p.max_num_seqs, False
        while waiting and budget > 0 and room > 0:
            i = waiting[0]
            if blocked and (not self.remote[i] or np.isnan(self.pulled[i])):
                passed.append(waiting.popleft())
                continue
            if not self.remote[i]:  # (preempted here: recomputed as any waiting request)
                whole = int(_blocks(int(tokens[i] + self.output[i] - gen[i]), bs))
                if idle and self.aside and whole > self.p.kv_blocks - self.aside:
                    blocked = True
                    continue
                got, g, free = super()._admit(deque([i]), tokens, gen, free, budget, room)
                if not got:
                    if idle and self.aside:
                        blocked = True
                        continue
                    break
                waiting.popleft()
                rows += got
                gives += g
                budget -= g[0]
                room -= 1
                continue
            if np.isnan(self.pulled[i]):  # blocks for the whole prompt, then the pull
                b = int(_blocks(int(tokens[i]), bs))
                if b > free:
                    if idle and self.aside:
                        blocked = True
                        continue
                    break
                free -= b
                self.aside += b
                self.pull_blocks[i] = b
                self.pulled[i] = self.now + self.pull_s[i]
                if np.isnan(self.scheduled[i]):
                    self.scheduled[i] = self.now
            if self.pulled[i] > self.now:  # (still pulling: the queue goes on past it)
                passed.append(waiting.popleft())
                continue
            waiting.popleft()
            self.remote[i] = False
            self.aside -= int(self.pull_blocks[i])  # (its blocks now held as a running request's)
            rows.append((i, int(tokens[i]), int(tokens[i]) - 1, int(self.pull_blocks[i]), int(gen[i]),
                         int(self.output[i]), self.last_token[i]))
            gives.append(1)
            budget -= 1
            room -= 1
        waiting.extendleft(reversed(passed))  # (those still pulling keep their places)
        return rows, gives, free

    def _next_ready(self) -> float | None:
        if np.any(self.remote & (self.pulled <= self.now)):
            return self.now  # (a pulled request, its blocks held, waits: a step that preempted admitted none)
        pulling = self.pulled[self.remote & (self.pulled > self.now)]
        later = min(float(pulling.min()) if pulling.size else math.inf, self.due())
        return None if math.isinf(later) else later

    def _whole_prompts_step(self, run: _Running, want, waiting, tokens, gen, free):
        return None  # (a waiting request may still pull its KV: _admit decides)

    def _decode_stretch(self, run: _Running, want, waiting, tokens, free) -> bool:
        # (a request pulling its KV, or one that may be given blocks, ends decode-only stretches)
        return False if waiting else super()._decode_stretch(run, want, waiting, tokens, free)


class _VllmV1Pipeline(_VllmV1):
    """vLLM v1 on ``stages`` pipeline stages (``EngineCore.step_with_batch_queue``, its batch
    queue as deep as the stages): while fewer than ``stages`` batches are in flight and some
    request has tokens to compute, the scheduler forms the next batch at once (as ``_VllmV1``
    does, a request's tokens counted computed when scheduled, so a decode waits for its
    batch's token before it is scheduled again, while a long prompt's next chunk may follow
    in the next batch); otherwise the engine waits for the oldest batch and takes its
    sampled tokens. A batch passes the stages in order, each stage taking its part of the
    step (``StepTimes.stage_s_of``) once it is free of the batch before. A request
    preempted while in flight drops the token its batch brings back."""

    def run(self) -> Served:
        p = self.p
        n = len(self.arrival)
        tokens = self.prompt.copy()
        gen = np.zeros(n, dtype=np.int64)
        self.epoch = np.zeros(n, dtype=np.int64)  # (preemptions of each request so far)
        free = p.kv_blocks
        waiting: deque = deque()
        run = _Running()
        inflight: deque = deque()  # (when the batch leaves the last stage, its samplers' ids and epochs)
        stage_free = [0.0] * p.stages
        mark = np.zeros(n, dtype=bool)  # (the requests a batch brings tokens back for, while it is taken)
        done = 0
        while done < n:
            self.send_due(waiting)
            if not waiting and run.size == 0 and not inflight:
                self.idle(self.due())
                continue
            launched = False
            if len(inflight) < p.stages and (waiting or run.size):
                launched, free = self._launch(run, waiting, tokens, gen, free, inflight, stage_free)
            if launched:
                continue
            if not inflight:
                raise UserError("the engine stalled: no request fits in the KV cache")
            end, ids, epochs = inflight.popleft()
            self.now = max(self.now, end)
            if ids.size:
                back = ids[self.epoch[ids] == epochs]  # (those not preempted while in flight)
                mark[back] = True  # (np.isin's answer, in fewer operations)
                got = mark[run.id]
                mark[back] = False
                done += self._sampled(run, got, tokens, gen)
                free = self.free_blocks(run)
        return self.served()

    def preempted(self, i: int) -> None:
        self.epoch[i] += 1

    def _launch(self, run: _Running, waiting, tokens, gen, free, inflight, stage_free):
        """Schedule a batch (as ``_VllmV1.run``'s step) and send it into the pipeline;
        (whether one was, the free blocks)."""
        p = self.p
        want, give, free = self._schedule(run, run.tokens - run.computed, waiting, tokens, gen, free)
        if not _count(give):
            return False, free
        ctx = run.computed + give
        on = give > 0
        samples = on & (ctx == run.tokens)
        common = self.common_prefix(run, on, bool((give[on] == 1).all())) if self.cascading else 0
        sampled = _count(samples)
        stage_s = self.steps.stage_s_of(give[on], ctx[on], (want == 1)[on], sampled, common)
        run.computed = ctx
        t = self.now + p.step_overhead_s  # (the host forms the batch, then the first stage takes it when free)
        self.now = t
        start = max(t, stage_free[0])
        for s, dur in enumerate(stage_s):
            t = max(t, stage_free[s]) + dur
            stage_free[s] = t
        ids = run.id[samples]
        inflight.append((t, ids, self.epoch[ids]))
        self.record(start, t - start, int(_sum(give)), _count(on), p.kv_blocks - free, sampled)
        return True, free


class _Static(_Sim):
    def run(self) -> Served:
        p = self.p
        n = len(self.arrival)
        waiting: deque = deque()
        done = 0
        while done < n:
            self.send_due(waiting)
            if not waiting:
                self.idle(self.due())
                continue
            batch = np.array([waiting.popleft() for _ in range(min(len(waiting), p.max_num_seqs))])
            b, prompt = batch.size, int(self.prompt[batch].max())
            out = int(self.output[batch].max())
            need = b * _blocks(prompt + out, p.block_size)
            if need > p.kv_blocks:
                raise UserError(f"a static batch of {b} requests padded to {prompt + out:,} tokens needs "
                                f"{need:,} KV blocks; the KV cache holds {p.kv_blocks:,} (lower --max-num-seqs)")
            self.scheduled[batch] = self.now
            pre, decode = self.steps.static_batch(b, prompt, out)
            dur = pre + p.step_overhead_s
            self.record(self.now, dur, b * prompt, b, need, b)
            self.now += dur
            self.first[batch] = self.now
            self.last_token[batch] = self.now
            ends = self.now + np.cumsum(decode + p.step_overhead_s)  # the end of each decode step
            outs = np.sort(self.output[batch])
            for j, d in enumerate(decode):  # (decode step j gives a token to those with more than j + 1)
                self.record(ends[j] - d - p.step_overhead_s, d + p.step_overhead_s, b, b, need,
                            b - int(np.searchsorted(outs, j + 1, side="right")))
            # request i's k-th token (k >= 2) comes at the end of decode step k - 2
            for i in batch:
                k = int(self.output[i])
                if k > 1:
                    t = ends[:k - 1]
                    self.itl.append((np.diff(np.concatenate([[self.now], t])), 1))
                    self.finish[i] = t[-1]
                else:
                    self.finish[i] = self.now
            self.generated[batch] = self.output[batch]
            self.now = float(ends[-1]) if ends.size else self.now
            done += b
            self.release(b)
        return self.served()


SGLANG_CLIP_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
SGLANG_RATIO_INIT, SGLANG_RATIO_MIN_FACTOR, SGLANG_RATIO_DECAY_STEPS = 0.7, 0.14, 600
SGLANG_RETRACT_STEPS = 20
SGLANG_RATIO_MIN = SGLANG_RATIO_INIT * SGLANG_RATIO_MIN_FACTOR
SGLANG_RATIO_DECAY = (SGLANG_RATIO_INIT - SGLANG_RATIO_MIN) / SGLANG_RATIO_DECAY_STEPS  # a decode step's


class _SGLang(_Sim):
    def run(self) -> Served:
        p = self.p
        n = len(self.arrival)
        capacity = p.kv_blocks * p.block_size  # KV tokens
        ratio = SGLANG_RATIO_INIT
        tokens = self.prompt.copy()  # known tokens (prompt, and output so far once retracted)
        computed = np.zeros(n, dtype=np.int64)
        gen = np.zeros(n, dtype=np.int64)
        waiting: deque = deque()
        running: list = []  # decoding requests, in order of admission
        chunked = None  # the request whose prompt is part computed (not yet running)
        used = 0  # KV tokens held
        done = 0
        while done < n:
            self.send_due(waiting)
            used, finished = self._prebuilt(running, tokens, computed, gen, used, capacity)
            done += finished
            if not waiting and not running and chunked is None:
                self.idle(self._idle_until())
                ratio = SGLANG_RATIO_INIT
                continue
            # 1. a prefill batch, if one can be formed
            free = capacity - used
            # (the running requests' reservation: read only where a prompt may join the batch)
            reserved = self._reserved(running, gen, ratio) if waiting or chunked is not None else 0.0
            rem_total, rem_input, rem_chunk = free - reserved, p.max_prefill_tokens, p.max_num_batched_tokens
            batch = []  # (request, tokens computed in this step)
            if chunked is not None:
                i = chunked
                g = min(int(tokens[i] - computed[i]), rem_chunk)
                batch.append((i, g))
                rem_total -= g
                rem_input -= g
                rem_chunk -= g
            room = p.max_num_seqs - len(running) - len(batch)
            while waiting and room > 0 and rem_chunk > 0:
                i = waiting[0]
                h = self.hit(i, int(tokens[i]), 1, used) if computed[i] == 0 else 0  # (the radix cache)
                share = self.shared(i, h)
                taken = h - share[1]  # (cached tokens no running request holds: locked, no longer evictable)
                extend = int(tokens[i] - computed[i]) - h
                if extend + taken + min(int(self.output[i] - gen[i]), SGLANG_CLIP_NEW_TOKENS) >= rem_total:
                    break  # (no room for its prompt and output: the batch is full)
                if extend >= rem_input and batch:
                    break
                waiting.popleft()
                g = min(extend, rem_chunk)
                if computed[i] == 0:
                    self.found(i, int(tokens[i]), h, share, h + g)
                    computed[i] = h  # (its own count; used holds those it shares once)
                    used += taken
                batch.append((i, g))
                if np.isnan(self.scheduled[i]):
                    self.scheduled[i] = self.now
                rem_total -= g + taken + min(int(self.output[i] - gen[i]), SGLANG_CLIP_NEW_TOKENS)
                rem_input -= g
                rem_chunk -= g
                room -= 1
                if g < extend:
                    break  # (cut to the chunk budget: it goes on in the next prefill)
            if batch:
                ids = np.array([i for i, _ in batch])
                g = np.array([x for _, x in batch])
                ctx = computed[ids] + g
                samples = ctx == tokens[ids]
                dur = self.steps.step_of(g, ctx, np.zeros(g.size, dtype=bool), int(samples.sum()))
                if p.prefill_host_s:  # (no CUDA graph: the slower of the host and the GPU sets the pace)
                    dur = joined(p.prefill_host_s, dur, self.steps.profile)
                dur += p.step_overhead_s
                self.record(self.now, dur, int(g.sum()), len(batch), -(-(used + int(g.sum())) // p.block_size),
                            int(samples.sum()))
                self.now += dur
                computed[ids] = ctx
                used += int(g.sum())
                chunked = None
                for i, s in zip(ids.tolist(), samples.tolist()):
                    if s:  # (its prompt computed: its prefix cached)
                        self.prefix_computed(i, int(tokens[i]))
                    if not s:
                        chunked = i
                    elif self._sample(i, tokens, gen):
                        used -= int(computed[i]) - self.left(i, int(computed[i]), capacity - used)
                        computed[i] = 0
                        done += 1
                    else:
                        running.append(i)
                continue
            if not running:
                raise UserError("the engine stalled: no request fits in the KV cache")
            # 2. a decode step of every running request (retracting some where KV runs short)
            if self.stretches and not waiting:
                took = self._decode_stretch(running, tokens, computed, gen, used, capacity, ratio)
                if took is not None:
                    used, ratio, finished = took
                    done += finished
                    continue
            if capacity - used < len(running):
                used, ratio = self._retract(running, waiting, tokens, computed, gen, used, capacity)
            ids = np.array(running)
            ctx = computed[ids] + 1
            dur, past = self._paced(len(running), self.steps.step_s(len(running), float(ctx.mean()), 0, 0, 0.0,
                                                                    len(running)))
            self.eager_decode_steps += past
            self.record(self.now, dur, len(running), len(running), -(-(used + len(running)) // p.block_size),
                        len(running))
            self.now += dur
            computed[ids] = ctx
            used += len(running)
            ratio = max(SGLANG_RATIO_MIN, ratio - SGLANG_RATIO_DECAY)
            gen[ids] += 1  # (every running request has its first token: each leaves a gap)
            tokens[ids] += 1
            self.itl.append((self.now - self.last_token[ids], 1))
            self.last_token[ids] = self.now
            ended = ids[gen[ids] >= self.output[ids]]
            if ended.size:
                self.finish[ended] = self.now
                self.generated[ended] = gen[ended]
                held = int(computed[ended].sum())
                used -= held - self.left(ended, held, capacity - used)
                computed[ended] = 0
                done += ended.size
                self.release(int(ended.size))
                running[:] = ids[gen[ids] < self.output[ids]].tolist()
        return self.served()

    def _reserved(self, running: list, gen, ratio: float) -> float:
        """The KV tokens a prefill batch leaves for the running requests' future tokens: their
        remaining output, at most SGLANG_CLIP_NEW_TOKENS each, times ``new_token_ratio``."""
        ids = np.array(running, dtype=np.int64)
        return float(np.minimum(self.output[ids] - gen[ids], SGLANG_CLIP_NEW_TOKENS).sum()) * ratio

    def _decode_stretch(self, running: list, tokens, computed, gen, used: int, capacity: int, ratio: float):
        """Decode steps of every running request taken at once, where nothing waits: up to
        the first finish (those that finish then leave the batch as in the loop), while each
        step's tokens fit (no retraction), and up to the step in which a request comes due as
        the loop sees it (``until_due``). Each step is the one the loop would take. (The KV
        tokens held, the ratio after them and how many requests finished; None: no step.)"""
        p = self.p
        n = len(running)
        ids = np.array(running, dtype=np.int64)
        left = self.output[ids] - gen[ids]
        k = min(int(_min(left)), (capacity - used) // n)
        due = self.due()
        k = self.steps_before_due(k, n, due)
        if k < 1:
            return None
        j = np.arange(1, k + 1)
        dur, past = self._paced(n, self.steps.decode_steps(n, float(_sum(computed[ids])) / n + j))
        k, ends = self.until_due(dur, due)
        dur, j = dur[:k], j[:k]
        self.eager_decode_steps += k if past else 0
        ends = self.record_run(dur, n, -(-(used + n * j) // p.block_size), ends)
        self.decoded(ids, dur, ends, computed, gen, tokens)
        used += n * k
        for _ in range(k):  # (step by step, as the loop takes it: the same floats; at its floor it stays)
            if ratio == SGLANG_RATIO_MIN:
                break
            ratio = max(SGLANG_RATIO_MIN, ratio - SGLANG_RATIO_DECAY)
        done = left == k
        if not done.any():
            return used, ratio, 0
        ended = ids[done]  # (their last token in the stretch's last step: they leave as the loop's step lets them)
        self.finish[ended] = self.now
        self.generated[ended] = gen[ended]
        held = int(_sum(computed[ended]))
        used -= held - self.left(ended, held, capacity - used)
        computed[ended] = 0
        self.release(int(ended.size))
        running[:] = ids[~done].tolist()
        return used, ratio, int(ended.size)

    def _paced(self, n: int, gpu_s):
        """A decode step of ``n`` requests (or a run of them: an array) from its GPU time:
        past the largest CUDA graph, the slower of that and the host's time for a pass; then
        the host's time between steps. (Its time, whether it ran past the graphs.)"""
        p = self.p
        past = p.eager_decode_above is not None and n > p.eager_decode_above
        if past:
            gpu_s = joined(p.decode_host_s, gpu_s, self.steps.profile)
        return gpu_s + p.step_overhead_s, past

    def _prebuilt(self, running: list, tokens, computed, gen, used: int, capacity: int) -> tuple:
        """Requests whose prompt KV a prefill server sent join the running batch (a hook:
        none here); (the KV tokens held, how many of them finished)."""
        return used, 0

    def _idle_until(self) -> float:
        """With nothing to run: when something may be (the next request sent)."""
        return self.due()

    def _sample(self, i: int, tokens, gen) -> bool:
        """Request ``i`` samples a token now; whether that was its last (it is done)."""
        gen[i] += 1
        tokens[i] += 1
        if gen[i] == 1:
            self.first[i] = self.now
        else:
            self.itl.append((np.array([self.now - self.last_token[i]]), 1))
        self.last_token[i] = self.now
        if gen[i] >= self.output[i]:
            self.finish[i] = self.now
            self.generated[i] = gen[i]
            self.release(1)
            return True
        return False

    def _retract(self, running: list, waiting, tokens, computed, gen, used: int, capacity: int):
        """SGLang's retract_decode: the fewest output tokens first (the longest prompt among
        equals), at least one, until the free tokens cover 20 steps of the rest."""
        order = sorted(running, key=lambda i: (int(gen[i]), -int(self.prompt[i])), reverse=True)
        while order:
            v = order.pop()
            running.remove(v)
            self.preemptions += 1
            used -= int(computed[v]) - self.left(v, int(computed[v]), capacity - used)
            computed[v] = 0
            waiting.appendleft(v)
            if capacity - used >= len(running) * SGLANG_RETRACT_STEPS:
                break
        wanted = sum(int(self.output[i]) for i in running)
        ratio = min(1.0, (sum(int(gen[i]) for i in running) + SGLANG_RETRACT_STEPS * len(running)) / wanted) \
            if wanted else SGLANG_RATIO_INIT
        return used, ratio


SGLANG_DECODE_RESERVED_TOKENS = 512  # num_reserved_decode_tokens: KV kept per decoding request for its growth


class _SGLangDecode(_SGLang):
    """SGLang as the decode server of a disaggregated pair (python/sglang/srt/disaggregation/
    decode.py): a request's prompt KV is computed, and its first token sampled, by a prefill
    server. In order of arrival, a request is given KV for its prompt once the prompt and
    ``num_reserved_decode_tokens`` fit in the free KV beside that many tokens kept for each
    running request (the first that does not fit holds back the rest; an idle server takes
    it); once its KV is in (``pull_s`` later) it joins the running batch at the next step
    without a forward pass, its first token streamed then, and decodes. A request retracted
    for KV recomputes here, as in a colocated server."""

    stretches = False  # (a request whose prompt KV is in joins between steps: none taken at once)

    def __init__(self, reqs: Requests, steps, p: EngineParams, concurrency: int | None, pull_s):
        super().__init__(reqs, steps, p, concurrency)
        self.pull_s = np.broadcast_to(np.asarray(pull_s, dtype=float), (len(reqs),))
        self.prealloc: deque = deque()  # arrived, waiting for KV
        self.pulling: list = []  # (when its KV is in, request), in order of allocation

    def send_due(self, queue) -> None:
        super().send_due(self.prealloc)  # (every arrival comes from the prefill server)

    def _prebuilt(self, running: list, tokens, computed, gen, used: int, capacity: int) -> tuple:
        finished, later = 0, []
        for at, i in self.pulling:  # (first those whose KV is in: one may finish, and free its KV)
            if at > self.now or len(running) >= self.p.max_num_seqs:
                later.append((at, i))
                continue
            computed[i] = tokens[i]
            if self._sample(i, tokens, gen):  # (its first token, sent with its KV)
                used -= int(computed[i])
                computed[i] = 0
                finished += 1
            else:
                running.append(i)
        self.pulling = later
        reserve = SGLANG_DECODE_RESERVED_TOKENS
        while self.prealloc:  # (the KV given counts as held from here)
            i = self.prealloc[0]
            free, need = capacity - used, int(tokens[i])
            active = len(running) + len(self.pulling)
            if need > free or (active and need + reserve > free - reserve * active):
                break
            self.prealloc.popleft()
            used += need
            self.pulling.append((self.now + float(self.pull_s[i]), i))
            self.scheduled[i] = self.now
        return used, finished

    def _idle_until(self) -> float:
        pulled = min((at for at, _ in self.pulling), default=math.inf)
        later = min(max(pulled, self.now), self.due())
        if math.isinf(later) and self.prealloc:  # (nothing runs, pulls or arrives, and a request waits for KV)
            raise UserError("the engine stalled: no request fits in the KV cache")
        return later


class _TrtLlm(_Sim):
    def run(self) -> Served:
        p, bs = self.p, self.p.block_size
        n = len(self.arrival)
        tokens = self.prompt.copy()  # known tokens: the prompt and the output so far
        computed = np.zeros(n, dtype=np.int64)  # of them, in the KV cache
        gen = np.zeros(n, dtype=np.int64)
        held = np.zeros(n, dtype=np.int64)  # KV blocks allocated (max_utilization)
        context = np.ones(n, dtype=bool)  # in the context phase (a paused request is again)
        waiting: deque = deque()
        active = np.zeros(0, dtype=np.int64)  # the requests the executor holds, in order of arrival
        reserved = 0  # guaranteed_no_evict: KV blocks reserved to completion for the active requests
        done = 0
        utilize = p.capacity_policy == "max_utilization"
        if not p.chunked_context:
            for i in range(n):
                if self.prompt[i] > p.max_num_batched_tokens:
                    raise UserError(f"a prompt of {int(self.prompt[i]):,} tokens is past max_num_tokens "
                                    f"({p.max_num_batched_tokens:,}); TensorRT-LLM's chunked context is off by "
                                    f"default (--chunked-context turns it on)")
        while done < n:
            self.send_due(waiting)
            if not waiting and not active.size:
                self.idle(self.due())
                continue
            if self.stretches and not waiting:
                took = self._decode_stretch(active, tokens, computed, gen, held, context, reserved, utilize)
                if took is not None:
                    active, reserved, finished = took
                    done += finished
                    continue
            joined = []
            if utilize:  # (the executor holds up to max_batch_size requests; the capacity scheduler picks)
                while waiting and active.size + len(joined) < p.max_num_seqs:
                    joined.append(waiting.popleft())
            else:  # (admitted, in order, while the whole request's blocks fit beside those reserved)
                while waiting and active.size + len(joined) < p.max_num_seqs:
                    i = waiting[0]
                    need = int(_blocks(self.prompt[i] + self.output[i], bs))
                    if reserved + need > p.kv_blocks:
                        break
                    waiting.popleft()
                    reserved += need
                    joined.append(i)
            if joined:
                active = np.concatenate([active, np.array(joined, dtype=np.int64)])
            fits = self._max_utilization(active, tokens, computed, held, context) if utilize else active
            ids, g = self._micro_batch(fits, tokens, computed, context)
            if not ids.size:
                raise UserError("the engine stalled: no request fits in the KV cache")
            first_seen = ids[np.isnan(self.scheduled[ids])]
            self.scheduled[first_seen] = self.now
            if utilize:  # (a first context chunk takes the blocks of its whole context, a decode its next token's)
                total = self.prompt[ids] + self.output[ids]
                target = np.where(context[ids], _blocks(tokens[ids], bs),
                                  _blocks(np.minimum(tokens[ids] + 1, total), bs))
                held[ids] = np.maximum(held[ids], target)
            ctx = computed[ids] + g
            decode = ~context[ids]
            samples = ctx == tokens[ids]  # (a decode, or a context's last chunk)
            dur = self.steps.step_of(g, ctx, decode, _count(samples)) + p.step_overhead_s
            self.record(self.now, dur, int(g.sum()), int(ids.size), int(held[active].sum()) if utilize else reserved,
                        _count(samples))
            self.now += dur
            computed[ids] = ctx
            ids = ids[samples]
            context[ids] = False
            gen[ids] += 1
            tokens[ids] += 1
            first = gen[ids] == 1
            self.first[ids[first]] = self.now
            if (~first).any():
                self.itl.append((self.now - self.last_token[ids[~first]], 1))
            self.last_token[ids] = self.now
            ended = ids[gen[ids] >= self.output[ids]]
            if ended.size:
                active, reserved = self._ended(ended, active, gen, held, reserved, utilize)
                done += ended.size
        return self.served()

    def _ended(self, ended: np.ndarray, active: np.ndarray, gen, held, reserved: int, utilize: bool) -> tuple:
        """Requests ``ended`` sampled their last token now: their KV blocks freed (or no longer
        reserved), out of the active requests. (The active requests, the blocks reserved.)"""
        self.finish[ended] = self.now
        self.generated[ended] = gen[ended]
        if utilize:
            held[ended] = 0
        else:
            reserved -= int(_blocks(self.prompt[ended] + self.output[ended], self.p.block_size).sum())
        self.release(int(ended.size))
        return active[gen[active] < self.output[active]], reserved  # (those that ended out; np.isin's answer)

    def _decode_stretch(self, active: np.ndarray, tokens, computed, gen, held, context, reserved: int,
                        utilize: bool):
        """Decode steps of every active request taken at once, where nothing waits and
        every one is past its context: up to the first finish (those that finish then leave
        as in the loop), with max_utilization while the blocks of each step's tokens are
        free (no pause), and up to the step in which a request comes due as the loop sees
        it (``until_due``). Each step is the one the loop would take. (The active requests,
        the blocks reserved and how many finished; None: no step.)"""
        p, bs = self.p, self.p.block_size
        a = active
        n = a.size
        if n > min(p.max_num_seqs, p.max_num_batched_tokens) or _max(context[a]):
            return None
        due = self.due()
        left = self.output[a] - gen[a]
        k = self.steps_before_due(int(_min(left)), n, due)
        if k < 1:
            return None
        j = np.arange(1, k + 1)
        if utilize:  # (the j-th step's decode takes the blocks of its next token)
            total = self.prompt[a] + self.output[a]
            grown = np.maximum(held[a][:, None], _blocks(np.minimum(tokens[a][:, None] + j, total[:, None]), bs))
            blocks = grown.sum(axis=0)
            k = min(k, int(np.searchsorted(blocks, p.kv_blocks, side="right")))
            if k < 1:
                return None
        dur = self.steps.decode_steps(n, float(_sum(computed[a])) / n + j[:k]) + p.step_overhead_s
        k, ends = self.until_due(dur, due)
        dur = dur[:k]
        ends = self.record_run(dur, n, blocks[:k] if utilize else np.full(k, reserved), ends)
        self.decoded(a, dur, ends, computed, gen, tokens)
        if utilize:
            held[a] = grown[:, k - 1]
        ended = a[left == k]
        if not ended.size:
            return active, reserved, 0
        return (*self._ended(ended, active, gen, held, reserved, utilize), int(ended.size))

    def _max_utilization(self, active: np.ndarray, tokens, computed, held, context) -> np.ndarray:
        """TensorRT-LLM's MaxUtilizationScheduler over the active requests, in order: each
        takes the KV blocks of its next step (a first context chunk its whole context's, a
        decode its next token's) where they are free beside those the requests before it
        take; where they are not, the last started request (a decode, or a context past its
        first chunk) from this one on is paused (its blocks freed; it is a context again,
        to recompute its tokens so far) and this one tried again; with none to pause, the
        step takes the requests so far. (Runs of requests that fit are taken at once.)"""
        p, bs = self.p, self.p.block_size
        a = active
        total = self.prompt[a] + self.output[a]
        need = np.where(context[a], np.where(computed[a] == 0, _blocks(tokens[a], bs) - held[a], 0),
                        np.maximum(_blocks(np.minimum(tokens[a] + 1, total), bs) - held[a], 0))
        free = p.kv_blocks - int(held[a].sum())
        taken, end, k, out = 0, a.size, 0, []
        while k < end:
            cum = taken + np.cumsum(need[k:end])
            over = np.flatnonzero(cum > free)
            if not over.size:
                out.append(a[k:end])
                break
            f = int(over[0])
            out.append(a[k:k + f])
            taken = int(cum[f - 1]) if f else taken
            k += f
            started = np.flatnonzero(computed[a[k:end]] > 0)
            if not started.size:
                break
            last = k + int(started[-1])
            v = a[last]
            free += int(held[v])
            held[v], computed[v], context[v] = 0, 0, True
            self.preemptions += 1
            end = last
        return np.concatenate(out) if out else a[:0]

    def _micro_batch(self, fits: np.ndarray, tokens, computed, context) -> tuple:
        """TensorRT-LLM's MicroBatchScheduler over the requests the capacity scheduler lets
        run, in order, up to max_batch_size of them: a decode takes one token, a context
        its remaining tokens, while they stay within max_num_tokens (the first past it ends
        the step); with chunked context the contexts are taken whatever their length, then,
        where they pass the tokens the decodes leave, cut first come first served, a cut
        chunk rounded down to whole blocks. (The ids, the new tokens of each.)"""
        p = self.p
        f = np.asarray(fits, dtype=np.int64)[:p.max_num_seqs]
        rest = tokens[f] - computed[f]
        chunked = context[f] if p.chunked_context else np.zeros(f.size, dtype=bool)
        cum = np.cumsum(np.where(chunked, 0, rest))
        over = np.flatnonzero(cum > p.max_num_batched_tokens)
        k = int(over[0]) if over.size else f.size
        f, rest, chunked = f[:k], rest[:k], chunked[:k]
        room = p.max_num_batched_tokens - (int(cum[k - 1]) if k else 0)
        want = np.cumsum(rest[chunked])
        if not want.size or want[-1] <= room:
            return f, rest
        # first come first served: whole contexts while they fit, the first that does not cut
        # to whole blocks, and after it only a context as short as what is left
        give = rest.copy()
        c = give[chunked]
        cut = int(np.argmax(want > room))
        left = room - (int(want[cut - 1]) if cut else 0)
        c[cut] = left // p.block_size * p.block_size
        left -= int(c[cut])
        tail = c[cut + 1:]  # (what is left is under a block: a later context fits only whole)
        fit = np.zeros(tail.size, dtype=bool)
        for j in np.flatnonzero(tail <= left).tolist():  # (the candidates: what is left only shrinks)
            if tail[j] <= left:
                fit[j] = True
                left -= int(tail[j])
        tail[~fit] = 0
        give[chunked] = c
        keep = give > 0
        return f[keep], give[keep]
