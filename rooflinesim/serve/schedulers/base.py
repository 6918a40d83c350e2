"""The state every engine's scheduler steps (``Sim``: the client, the step log, the
prefix cache), the running requests as arrays (``Running``) and the scheduler's limits
(``EngineParams``).

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

from ...errors import UserError
from ..metrics import Served
from ..traffic import Requests, check_span


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
    prefix_caching: bool = False  # vllm, sglang: a prompt's shared prefix, once computed, is reused (see Sim.hit)
    # vllm: (query heads, KV heads of a GPU, the GPU's SMs) where its FlashAttention backend may
    # run cascade attention over a prefix every running request shares (cascade_prefix); None: never
    cascade: tuple | None = None
    # the engine's share of each card its KV cache was sized at and where it came from (None: tokens given)
    memory_fraction: tuple | None = None


_sum, _count = np.add.reduce, np.count_nonzero  # (the plain ufunc calls: a step makes a few dozen)
_max, _min, _cumsum = np.maximum.reduce, np.minimum.reduce, np.add.accumulate  # (cumsum's own, less its wrapper)


def _blocks(tokens, block_size: int):
    return -(-tokens // block_size)


def _total(values: np.ndarray) -> int:
    """The sum of an int array, a plain int (over a few values, Python's sum of the list is
    the cheaper call)."""
    return sum(values.tolist()) if values.size <= 32 else int(_sum(values))


def _bounds(values: np.ndarray) -> tuple:
    """The least and the greatest of an int array, plain ints (``_total``'s way)."""
    if values.size <= 32:
        v = values.tolist()
        return min(v), max(v)
    return int(_min(values)), int(_max(values))


class Sim:
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
        check_span(float(self.arrival.max() - self.arrival.min()) if n else 0.0)
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
        floor = self.steps.decode_base(n) + self.p.step_overhead_s
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


class Running:
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
