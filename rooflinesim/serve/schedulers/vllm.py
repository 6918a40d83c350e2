"""``vllm``: vLLM v1's scheduler (vllm/v1/core/sched/scheduler.py, ``Scheduler.schedule``),
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
    scheduler (schedulers/sglang.py);
  * cascade attention (its FlashAttention backend, ``EngineParams.cascade``): where every
    running request holds the same prefix (the whole blocks whose reference count is the
    running requests'), no longer than the scheduled ones have computed, and
    ``cascade_prefix`` takes it, the step's attention reads that prefix once for all of its
    queries and each sequence's own part (``StepTimes.step_s``).
"""

from __future__ import annotations

import math
from array import array
from collections import deque

import numpy as np

from ...errors import UserError
from ..metrics import Served
from ..traffic import Requests
from .base import EngineParams, _blocks, _bounds, _count, _cumsum, Running, Sim, _sum, _total
from .lockstep import Lockstep


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


class VllmV1(Sim):
    aside = 0  # KV blocks held by requests that are not running (a decode instance's pulls)

    def common_prefix(self, run: Running, on=None, decodes_only: bool = False, rows=None) -> int:
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

    def free_blocks(self, run: Running) -> int:
        """The free KV blocks: all but those the running requests hold (each block once,
        though ``held`` counts a shared prefix's in every request holding it) and those held
        aside."""
        return self.p.kv_blocks - _total(run.held) - self.aside + self.dup

    def run(self) -> Served:
        p = self.p
        n = len(self.arrival)
        # requests not running: known tokens, tokens computed (0 once preempted), tokens generated
        tokens = self.prompt.copy()
        gen = np.zeros(n, dtype=np.int64)
        free = p.kv_blocks
        waiting: deque = deque()
        run = Running()
        done = 0
        light = self.lockstep and self.group is None  # (the prefix cache's bookkeeping is _schedule's)
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
                    if light:  # (the steps after it in lockstep, while they are of these two kinds)
                        free, finished = _Lockstep(self, run).steps(waiting, tokens, gen, free, n - done)
                        done += finished
                    continue
            if self.stretches and run.size and self._decode_stretch(run, want, waiting, tokens, free):
                done += self._finish(run, tokens, gen)
                free = self.free_blocks(run)
                if light and run.size:
                    free, finished = _Lockstep(self, run).steps(waiting, tokens, gen, free, n - done)
                    done += finished
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

    lockstep = True  # (the two fast paths' steps taken by _Lockstep after either; off where a subclass changes them)

    def _whole_prompts_step(self, run: Running, want, waiting, tokens, gen, free):
        """The step ``_schedule`` and the loop would take, the common case at a light load
        taken in fewer operations: every running request decodes a token (or computes its
        prompt's last), every waiting request joins with its whole prompt, and blocks, room
        and budget are left for all of them. (the free blocks after it, how many finished),
        or None where the case does not hold."""
        p, bs = self.p, self.p.block_size
        n = run.size
        if len(waiting) + n > p.max_num_seqs or (n and _count(want != 1)):
            return None
        need = run.computed // bs + 1 - run.held  # (the blocks of one token more: ceil((computed + 1) / bs))
        left = free - _total(need)
        budget = p.max_num_batched_tokens - n
        if left < 0 or budget < 1:
            return None
        ids = list(waiting)
        if self.group is not None and (self.group[ids] >= 0).any():  # (the prefix cache: _schedule's way)
            return None
        ix = np.array(ids, dtype=np.int64)
        prompts = tokens[ix]
        blocks = _blocks(prompts, bs)
        prompt_tokens, prompt_blocks = _total(prompts), _total(blocks)
        if prompt_tokens > budget or prompt_blocks > left:
            return None
        waiting.clear()
        # (the chunks' context weighted by their tokens: sums of whole numbers, exact as ints)
        dur = self.steps.step_s(n, (_total(run.computed) + n) / n if n else 0.0, len(ids), prompt_tokens,
                                _total(prompts * prompts) / prompt_tokens, n + len(ids)) + p.step_overhead_s
        left -= prompt_blocks
        for i in ids:
            if math.isnan(self.scheduled[i]):
                self.scheduled[i] = self.now
        self.looked_up(prompt_tokens, 0)  # (none found: no request here shares a prefix)
        self.record(self.now, dur, n + prompt_tokens, n + len(ids), p.kv_blocks - left, n + len(ids))
        self.now += dur
        run.computed = run.computed + 1
        run.held = run.held + need
        run.add_columns(ix, prompts, prompts, blocks, gen[ix], self.output[ix], self.last_token[ix])
        finished = self._sampled_all(run)
        return (self.free_blocks(run) if finished else left), finished

    def _sampled_all(self, run: Running) -> int:
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
        run.last.fill(self.now)  # (its own array: the caller's add_columns made it)
        return self._finish(run, None, None) if _count(run.generated >= run.output) else 0

    def _schedule(self, run: Running, want, waiting, tokens, gen, free):
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
        (``room``) and their blocks are free: (their rows for ``Running.add``, the tokens
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

    def _sampled(self, run: Running, got, tokens, gen) -> int:
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

    def _finish(self, run: Running, tokens, gen) -> int:
        """Requests that have all their output leave (their blocks freed); how many."""
        ended = run.generated >= run.output
        k = _count(ended)
        if k:
            ids, last = run.id[ended], run.last[ended]
            self.finish[ids] = last  # (now, but for those a decode stretch took on past their end)
            self.generated[ids] = run.generated[ended]
            self.last_token[ids] = last
            if self.group is not None:
                self.left(ids, int(_sum(run.held[ended])), self.free_blocks(run))
            run.keep(~ended)
            self.release(k)
        return k

    def _decode_stretch(self, run: Running, want, waiting, tokens, free) -> bool:
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
        if _count(want != 1) or _count(run.generated) < n:  # (a prompt's last token is no decode)
            return False
        left = run.output - run.generated  # (steps to each request's last token)
        first, last = _bounds(left)
        # (past a finish only where no waiting request, nor one a freed slot lets the client send, could join)
        k = last if not waiting and self.slots is None else first
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
            dur = self.steps.decode_steps(n, _total(c) / n + j, common) + p.step_overhead_s  # (the mean, exactly)
            parts = [(dur, n)]  # (a run of steps with its batch size)
        else:  # (the batch shrinks as requests finish: each step over the requests still running)
            order = left.argsort(kind="stable")
            held = _cumsum(c[order][::-1])[::-1].tolist()  # (context held by each request on, in that order)
            common = (lambda r: self.common_prefix(run, None, True, order[r:])) if self.cascading else None
            parts = self._shrinking(n, k, j, due, left[order].tolist(), held, common)
            dur = np.concatenate([d for d, _ in parts])
            k, j = dur.size, j[:dur.size]
        k, ends = self.until_due(dur, due)
        dur, j = dur[:k], j[:k]
        steps = np.minimum(left, k)  # (each request's steps in the stretch)
        computed = c + steps
        held = _blocks(computed, p.block_size)
        # (blocks in use over the stretch: exact at its ends, in between a straight line)
        before = p.kv_blocks - free
        after = before - _total(run.held) + _total(held[left >= k])
        if self.group is not None and _count(left < k):  # (those that finish: their shared blocks stay)
            after += self.kept_if_left(run.id[left < k])
        ends = self._record_stretch(parts, dur, j, before, after, ends)
        self.itl.append((ends[0] - run.last, 1))  # (each request's gap to this stretch's first token)
        run.computed = computed
        run.tokens = run.tokens + steps
        run.generated = run.generated + steps
        run.held = held
        run.last = ends[steps - 1]  # (a request that finished: its last token's time)
        return True

    def _shrinking(self, n: int, k: int, j, due: float, ranked: list, held: list, common=None) -> list:
        """The steps of a decode stretch of ``k`` steps (``j``: 1 to k) whose batch of ``n``
        shrinks as requests finish, as runs of one batch size, each (durations, batch size), up
        to the run in which a request comes due (``due``): ``ranked`` the steps each request has
        left, ascending, ``held`` the context held by each request from there on, in that
        order; ``common(r)`` the cascade prefix of the requests from the r-th on (None: none)."""
        parts, a, at = [], 0, self.now
        for r in range(n):
            b = min(ranked[r], k)
            if b > a:
                d = self.steps.decode_steps(n - r, held[r] / (n - r) + j[a:b], common(r) if common else 0) \
                    + self.p.step_overhead_s
                parts.append((d, n - r))
                at += float(_sum(d))
                a = b
                if a == k or at >= due:
                    break
        return parts

    def _record_stretch(self, parts: list, dur: np.ndarray, j, before: int, after: int, ends) -> np.ndarray:
        """Log a decode stretch's steps ``dur`` (``until_due``'s cut, ending at ``ends``), its
        runs ``parts`` (each (durations, batch size), the last cut where the stretch ends), the
        KV blocks in use a straight line from ``before`` to ``after`` (exact at its ends), and
        the gap of each step but the first once for each request it serves (the first step's
        are each request's own: the caller's). (When each step ends.)"""
        k = dur.size
        size = parts[0][1] if len(parts) == 1 else sum((array("q", [m]) * d.size for d, m in parts), array("q"))[:k]
        ends = self.record_run(dur, size, np.rint(before + (after - before) * j / k).astype(np.int64), ends)
        a = 0
        for d, m in parts:
            lo, hi = max(a, 1), min(a + d.size, k)
            if hi > lo:
                self.itl.append((dur[lo:hi], m))
            a += d.size
        return ends

    def _preempt(self, run: Running, give, need, free, waiting, tokens, gen):
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


class _Lockstep(Lockstep):
    """``VllmV1.run``'s loop while each step it takes is one of its two fast paths
    (``_whole_prompts_step``, ``_decode_stretch``), with the running requests kept as plain
    numbers. After either path every running request has one token to compute (its next
    decode), its KV blocks those of its computed tokens and the same last token time; each
    step of either path keeps that so, every running request computing and sampling one token
    a step. So one count of the steps taken since (``g``) gives each request's computed and
    generated tokens from two numbers of its own fixed when it joined, a step's inputs are
    sums kept up to date, and a request is touched only when it joins or finishes: numpy is
    called for a stretch's steps, not for the few requests of a light load, on which a call
    costs more than Python's arithmetic. The same steps in the same order, each priced from
    the same whole numbers (``_the_same_steps`` in the tests); where the next step is neither
    kind, ``run`` gets its arrays back and the loop goes on."""

    def __init__(self, sim: "VllmV1", run: Running):
        super().__init__(sim, run.id.tolist(), run.computed.tolist(), run.generated.tolist())
        self.run = run
        self.last = float(run.last[0]) if run.size else sim.now  # (every one's last token time)
        self.count_blocks(sim.p.block_size)

    def steps(self, waiting, tokens, gen, free: int, unfinished: int) -> tuple:
        """Steps while they are of the two kinds, up to ``unfinished`` requests finished.
        (The free blocks, how many finished.)"""
        sim, done = self.sim, 0
        run = self.run
        if run.size and (bool((run.last != self.last).any()) or bool((run.tokens - run.computed != 1).any())
                         or bool((run.generated < 1).any())
                         or bool((run.held != _blocks(run.computed, sim.p.block_size)).any())):
            return free, 0  # (not in lockstep: the loop's general step goes on)
        while done < unfinished:
            sim.send_due(waiting)
            if not waiting and not self.ids:
                sim.idle(sim.due())
                self.last = sim.now
                continue
            if waiting:
                took = self._join(waiting, tokens, gen, free)
                if took is not None:
                    free, finished = took
                    done += finished
                    continue
            if self.ids:
                took = self._stretch(waiting, tokens, free)
                if took is not None:
                    free, finished = took
                    done += finished
                    continue
            break
        self._back()
        return free, done

    def _join(self, waiting, tokens, gen, free: int):
        """``_whole_prompts_step`` with its ``_sampled_all``: (the free blocks after it, how
        many finished), or None where it does not apply."""
        sim = self.sim
        p, bs, g = sim.p, sim.p.block_size, self.g
        n = len(self.ids)
        if len(waiting) + n > p.max_num_seqs:
            return None
        need = self.hist[-g % bs]  # (a block more for one token more: those whose blocks are full)
        left = free - need
        budget = p.max_num_batched_tokens - n
        if left < 0 or budget < 1:
            return None
        ids = list(waiting)
        prompts = [int(tokens[i]) for i in ids]
        blocks = [-(-t // bs) for t in prompts]
        prompt_tokens, prompt_blocks = sum(prompts), sum(blocks)
        if prompt_tokens > budget or prompt_blocks > left:
            return None
        waiting.clear()
        m = n + len(ids)
        now = sim.now
        total = self.total + n * g
        dur = sim.steps.step_s(n, (total + n) / n if n else 0.0, len(ids), prompt_tokens,
                               sum([t * t for t in prompts]) / prompt_tokens, m) + p.step_overhead_s
        left -= prompt_blocks
        for i in ids:
            if math.isnan(sim.scheduled[i]):
                sim.scheduled[i] = now
        sim.looked_up(prompt_tokens, 0)
        sim.record(now, dur, n + prompt_tokens, m, p.kv_blocks - left, m)
        sim.now = now = now + dur
        self.g = g = g + 1  # (a token computed and one sampled for each running request)
        gaps = [now - self.last] * n  # (each running request's gap, then a recomputed one's own)
        for i, t in zip(ids, prompts):  # (its whole known tokens computed)
            gap = self.join(i, t, int(gen[i]), now)
            if gap is not None:
                gaps.append(gap)
        if gaps:
            sim.itl.append((gaps, 1))
        self.last = now
        if min(self.ends) <= g:
            finished = self._finish(None)
            return p.kv_blocks - self.held_at(self.g), finished
        return left, 0

    def _stretch(self, waiting, tokens, free: int):
        """``_decode_stretch`` and the ``_finish`` after it: (the free blocks, how many
        finished), or None where it does not apply (also where the blocks may run out within
        it, which ``_decode_stretch`` counts step by step)."""
        sim = self.sim
        p, bs, g = sim.p, sim.p.block_size, self.g
        n = len(self.ids)
        if waiting and n < p.max_num_seqs:
            want = min(int(tokens[waiting[0]]), p.max_num_batched_tokens - n)
            if want > 0 and -(-want // bs) <= free:
                return None
        first, last = min(self.ends) - g, max(self.ends) - g
        k = last if not waiting and sim.slots is None else first
        due = sim.due()
        k = sim.steps_before_due(k, n if k == first else 1, due)
        if k < 1 or n * (k // bs + 1) > free:
            return None
        j = np.arange(1, k + 1)
        total = self.total + n * g
        if k <= first:  # (the same batch throughout)
            dur = sim.steps.decode_steps(n, total / n + j) + p.step_overhead_s
            parts = [(dur, n)]
        else:  # (the batch shrinks as requests finish: each step over those still running)
            # (those finishing within it, by their ends (stable, as _decode_stretch's argsort):
            # the ranks _shrinking reads; after them none finishes within the k steps)
            going = sorted([r for r, e in enumerate(self.ends) if e - g <= k], key=self.ends.__getitem__)
            held = [total]  # (context held by each request from there on, in that order)
            for r in going:
                held.append(held[-1] - self.cbase[r] - g)
            parts = sim._shrinking(n, k, j, due, [self.ends[r] - g for r in going] + [k], held)
            dur = np.concatenate([d for d, _ in parts])
            k, j = dur.size, j[:dur.size]
        k, ends = sim.until_due(dur, due)
        dur, j = dur[:k], j[:k]
        # (blocks in use over the stretch, those of the requests still running at its end: exact
        # at its ends, in between a straight line)
        before = p.kv_blocks - free
        going = [r for r, e in enumerate(self.ends) if e - g <= k] if first <= k else []
        after = self.held_at(g + k)
        freed = 0
        for r in going:  # (those that finished before the last step hold none at its end)
            h = -(-(self.cbase[r] + g + k) // bs)
            if self.ends[r] - g < k:
                after -= h
            else:
                freed += h
        ends = sim._record_stretch(parts, dur, j, before, after, ends)
        sim.itl.append(([float(ends[0]) - self.last], n))  # (each request's gap to the stretch's first token)
        self.last = sim.now
        if not going:  # (none finishes: the blocks in use are the stretch's last step's)
            self.g = g + k
            return p.kv_blocks - after, 0
        finished = self._finish(going, ends, k)
        self.g = g + k
        return p.kv_blocks - after + freed, finished  # (those ending now freed)

    def _finish(self, going, ends=None, k: int = 0) -> int:
        """Requests that have all their output leave (``_finish``): after a join those whose
        output ends now (``going`` None), after a stretch of ``k`` steps ending at ``ends``
        those of rows ``going`` (their last token at their own step)."""
        sim, g = self.sim, self.g
        if going is None:
            going = [r for r in range(len(self.ids)) if self.ends[r] <= g]
        for r in going:
            i = self.ids[r]
            steps = min(self.ends[r] - g, k) if ends is not None else 0
            t = float(ends[steps - 1]) if ends is not None else self.last
            sim.finish[i] = sim.last_token[i] = t
            sim.generated[i] = self.gbase[r] + g + steps
        for r in reversed(going):  # (the rows in order: the later first)
            self.drop(r)
        sim.release(len(going))
        return len(going)

    def _back(self) -> None:
        """``run``'s arrays from the numbers."""
        run = self.run
        run.id, run.computed, run.generated = self.arrays()
        run.tokens = run.computed + 1
        run.held = _blocks(run.computed, self.sim.p.block_size)
        run.output = self.sim.output[run.id]
        run.last = np.full(run.id.size, self.last)


class VllmV1Decode(VllmV1):
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

    lockstep = False  # (its fast paths are its own)

    def _whole_prompts_step(self, run: Running, want, waiting, tokens, gen, free):
        return None  # (a waiting request may still pull its KV: _admit decides)

    def _decode_stretch(self, run: Running, want, waiting, tokens, free) -> bool:
        # (a request pulling its KV, or one that may be given blocks, ends decode-only stretches)
        return False if waiting else super()._decode_stretch(run, want, waiting, tokens, free)


class VllmV1Pipeline(VllmV1):
    """vLLM v1 on ``stages`` pipeline stages (``EngineCore.step_with_batch_queue``, its batch
    queue as deep as the stages): while fewer than ``stages`` batches are in flight and some
    request has tokens to compute, the scheduler forms the next batch at once (as ``VllmV1``
    does, a request's tokens counted computed when scheduled, so a decode waits for its
    batch's token before it is scheduled again, while a long prompt's next chunk may follow
    in the next batch); otherwise the engine waits for the oldest batch and takes its
    sampled tokens. A batch passes the stages in order, each stage taking its part of the
    step (``StepTimes.stage_s_of``) once it is free of the batch before. A request
    preempted while in flight drops the token its batch brings back. At a light load the
    batches are taken on plain numbers (``_PipelineLockstep``) while they are decodes and
    whole prompts."""

    def run(self) -> Served:
        p = self.p
        n = len(self.arrival)
        tokens = self.prompt.copy()
        gen = np.zeros(n, dtype=np.int64)
        self.epoch = np.zeros(n, dtype=np.int64)  # (preemptions of each request so far)
        free = p.kv_blocks
        waiting: deque = deque()
        run = Running()
        inflight: deque = deque()  # (when the batch leaves the last stage, its samplers' ids and epochs)
        stage_free = [0.0] * p.stages
        mark = np.zeros(n, dtype=bool)  # (the requests a batch brings tokens back for, while it is taken)
        done = 0
        light = self.stretches and self.group is None  # (the prefix cache's bookkeeping is _schedule's)
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
            if light and not waiting and run.size and self.due() > self.now:  # (then on plain numbers, as they go)
                free, finished = _PipelineLockstep(self, run, inflight, stage_free).steps(
                    waiting, tokens, gen, free, n - done)
                done += finished
        return self.served()

    def preempted(self, i: int) -> None:
        self.epoch[i] += 1

    def _launch(self, run: Running, waiting, tokens, gen, free, inflight, stage_free):
        """Schedule a batch (as ``VllmV1.run``'s step) and send it into the pipeline;
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
        start, t = self._through_stages(stage_s, stage_free)
        ids = run.id[samples]
        inflight.append((t, ids, self.epoch[ids]))
        self.record(start, t - start, int(_sum(give)), _count(on), p.kv_blocks - free, sampled)
        return True, free

    def _through_stages(self, stage_s: list, stage_free: list) -> tuple:
        """A batch formed now, each stage taking its part ``stage_s`` once free of the batch
        before (``stage_free``, updated): the host forms it, then the first stage takes it
        when free. (When the first stage starts it, when the last finishes it.)"""
        t = self.now + self.p.step_overhead_s
        self.now = t
        start = max(t, stage_free[0])
        for s, dur in enumerate(stage_s):
            t = max(t, stage_free[s]) + dur
            stage_free[s] = t
        return start, t


class _Batch(Lockstep):
    """The requests of one batch of ``_PipelineLockstep`` as plain numbers (``Lockstep``'s),
    ``g`` the batch's launches: each request's computed tokens are ``cbase + g``, its
    generated ones ``gbase + g`` once the batch is back (it is done at ``g`` = its end), its
    blocks those of its computed tokens (``count_blocks``). ``last``: when those that had a
    token before the batch's last launch last got one (one time for all, or a list, each its
    own, until the batch is first back); ``fresh``: those whose prompt the last launch
    computed, their first token on its way."""

    def __init__(self, sim, ids: list, computed: list, generated: list, last):
        super().__init__(sim, ids, computed, generated)
        self.count_blocks(sim.p.block_size)
        self.last, self.fresh, self.flying = last, [], False

    def add(self, i: int, known: int) -> None:
        """Request ``i`` joins as the batch is launched, its ``known`` tokens computed in it
        (its first token sampled at its end)."""
        self._append(i, known, 0)
        self.fresh.append(i)


class _PipelineLockstep:
    """``VllmV1Pipeline.run``'s loop while every batch it launches takes the batch that came
    back last (the loop's batch of every request whose token is back), a decode each, and
    every request sent since with its whole prompt (none preempted before, none cut to the
    budget, held back by ``max_num_seqs`` or short of blocks), none preempted: then the
    requests of a batch stay together, each launch priced by each stage's table from whole
    numbers kept up to date (the decodes' number and mean context, the prompts'), and a batch
    back gives each of its requests a token (those with all their output leave). Each batch
    kept as ``_Batch``, a step costs the same whatever its size. The same batches, at the
    same times, as the loop's; where its next iteration would be of another kind, the arrays
    get their values back and the loop goes on."""

    def __init__(self, sim: "VllmV1Pipeline", run: Running, inflight: deque, stage_free: list):
        self.sim, self.run, self.inflight, self.stage_free = sim, run, inflight, stage_free
        self.ok = False
        bs = sim.p.block_size
        want = run.tokens - run.computed
        if _count(want > 1) or _count(run.generated < 1) or _count(run.held != _blocks(run.computed, bs)):
            return  # (a prompt in progress, one yet to sample, or blocks held past the computed tokens')
        if _count(want == 0) != sum(ids.size for _, ids, _ in inflight) or \
                any(_count(sim.epoch[ids] != epochs) for _, ids, epochs in inflight):
            return  # (each request in flight in one batch, none preempted)
        self.ok = True
        ids = run.id.tolist()
        self.order = {i: r for r, i in enumerate(ids)}  # (running order, to give back; joins after)
        computed, generated, last = run.computed.tolist(), run.generated.tolist(), run.last.tolist()
        order = self.order

        def batch(members, back: int):  # (``back``: 1 for a batch in flight, its token counted as back)
            rows = [order[i] for i in members]
            return _Batch(sim, members, [computed[r] for r in rows], [generated[r] + back for r in rows],
                          [last[r] for r in rows])

        self.batches = deque()
        for end, members, _ in inflight:
            b = batch(members.tolist(), 1)
            b.flying = True
            self.batches.append((end, b))
        ready = [i for i, w in zip(ids, want.tolist()) if w == 1]
        self.ready = batch(ready, 0) if ready else None
        self.running = len(ids)

    def steps(self, waiting, tokens, gen, free: int, unfinished: int) -> tuple:
        """Launches and batches back while they are of that kind, up to ``unfinished``
        requests finished: (the free blocks, how many finished)."""
        if not self.ok:
            return free, 0
        sim, done = self.sim, 0
        p = sim.p
        batches = self.batches
        while done < unfinished:
            sim.send_due(waiting)
            b = self.ready
            if not waiting and b is None and not batches:
                sim.idle(sim.due())
                continue
            if len(batches) < p.stages and (b is not None or waiting):
                left = self._launch(b, waiting, tokens, gen, free)
                if left is None:
                    break
                free = left
                continue
            end, b = batches.popleft()  # (a batch back: a token each)
            if end > sim.now:
                sim.now = end
            free, finished = self._back_from(b, free)
            done += finished
        self._back()
        return free, done

    def _launch(self, b, waiting, tokens, gen, free: int):
        """The loop's launch of batch ``b`` (None: none back) and every waiting request:
        (the free blocks after it), or None where the loop's would be of another kind."""
        sim = self.sim
        p = sim.p
        n = len(b.ids) if b is not None else 0
        grow = b.held_at(b.g + 1) - b.held_at(b.g) if n else 0
        if grow > free or n > p.max_num_batched_tokens:
            return None  # (a preemption, or a budget cut)
        free -= grow
        ids = list(waiting)
        prompts = [int(tokens[i]) for i in ids]
        prompt_tokens = sum(prompts)
        if ids:
            bs = p.block_size
            blocks = sum([-(-t // bs) for t in prompts])
            if self.running + len(ids) > p.max_num_seqs or prompt_tokens > p.max_num_batched_tokens - n \
                    or blocks > free or min(prompts) < 2 or any(int(gen[i]) for i in ids):
                return None  # (one held back, cut, or short of blocks; a one-token prompt; a recomputation)
            free -= blocks
            now = sim.now
            for i in ids:
                if math.isnan(sim.scheduled[i]):
                    sim.scheduled[i] = now
            sim.looked_up(prompt_tokens, 0)
            waiting.clear()
        if b is None:
            b = _Batch(sim, [], [], [], [])
        g = b.g = b.g + 1
        m = n + len(ids)
        mean = (b.total + n * g) / n if n else 0.0
        chunk = (len(ids), prompt_tokens, sum([t * t for t in prompts]) / prompt_tokens) if ids else (0, 0, 0.0)
        start, t = sim._through_stages([table.step_s(n, mean, *chunk, m) for table in sim.steps.stage_tables],
                                       self.stage_free)
        sim.record(start, t - start, n + prompt_tokens, m, p.kv_blocks - free, m)
        for i, known in zip(ids, prompts):
            b.add(i, known)
            self.order[i] = len(self.order)
        self.running += len(ids)
        b.flying = True
        self.batches.append((t, b))
        self.ready = None
        return free

    def _back_from(self, b: _Batch, free: int) -> tuple:
        """Batch ``b`` is back now: a token each (a first for those it computed the prompt
        of), those with all their output leave. (The free blocks, how many left.)"""
        if not b.ids:  # (a batch of prompt chunks none of which sampled)
            return free, 0
        sim = self.sim
        now, g = sim.now, b.g
        fresh = b.fresh
        if isinstance(b.last, list):
            if b.last:
                sim.itl.append(([now - t for t in b.last], 1))
        elif len(b.ids) > len(fresh):
            sim.itl.append(([now - b.last], len(b.ids) - len(fresh)))
        for i in fresh:
            sim.first[i] = now
        b.last, b.fresh, b.flying = now, [], False
        finished = 0
        if min(b.ends) <= g:  # (those with all their output leave, their blocks freed)
            going = [r for r, e in enumerate(b.ends) if e <= g]
            bs = sim.p.block_size
            for r in reversed(going):
                i = b.ids[r]
                sim.finish[i] = sim.last_token[i] = now
                sim.generated[i] = b.gbase[r] + g
                free += -(-(b.cbase[r] + g) // bs)
                b.drop(r)
            finished = len(going)
            self.running -= finished
            sim.release(finished)
        self.ready = b if b.ids else None
        return free, finished

    def _back(self) -> None:
        """``run``'s arrays and the batches in flight from the numbers."""
        sim, run, bs = self.sim, self.run, self.sim.p.block_size
        groups = [b for _, b in self.batches] + ([self.ready] if self.ready is not None else [])
        cols = {f: [] for f in ("id", "computed", "generated", "want", "last")}
        for b in groups:
            ids, computed, generated = b.arrays()
            old = len(b.ids) - len(b.fresh)
            cols["id"].append(ids)
            cols["computed"].append(computed)
            cols["generated"].append(generated - b.flying)
            cols["want"].append(np.full(ids.size, 0 if b.flying else 1, dtype=np.int64))
            cols["last"].append(np.concatenate((
                np.asarray(b.last, dtype=float) if isinstance(b.last, list) else np.full(old, b.last),
                sim.last_token[ids[old:]])))
        if groups:
            ids = np.concatenate(cols["id"])
            order = np.argsort(np.array([self.order[i] for i in ids.tolist()], dtype=np.int64), kind="stable")
            run.id = ids[order]
            run.computed = np.concatenate(cols["computed"])[order]
            run.generated = np.concatenate(cols["generated"])[order]
            run.tokens = run.computed + np.concatenate(cols["want"])[order]
            run.last = np.concatenate(cols["last"])[order]
        else:
            run.keep(np.zeros(run.size, dtype=bool))
        run.held = _blocks(run.computed, bs)
        run.output = sim.output[run.id]
        self.inflight.clear()
        for end, b in self.batches:
            a = np.array(b.ids, dtype=np.int64)
            self.inflight.append((end, a, sim.epoch[a]))
