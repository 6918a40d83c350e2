"""``trtllm``: TensorRT-LLM's in-flight batching (cpp/tensorrt_llm/batch_manager/
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
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from ...errors import UserError
from ..metrics import Served
from .base import _blocks, _count, _max, _min, Sim, _sum
from .lockstep import Lockstep


class TrtLlm(Sim):
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
        light = self.stretches and not p.chunked_context
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
                    if light and active.size:  # (the steps after it in lockstep, while they are of two kinds)
                        active, reserved, finished = _Lockstep(self, active, computed, gen, tokens, held).steps(
                            waiting, context, reserved, n - done)
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


class _Lockstep(Lockstep):
    """``TrtLlm.run``'s loop while each step it takes, without chunked context, is a decode
    stretch (``_decode_stretch``) or a general step in which every waiting request is admitted
    and joins with its whole prompt beside a decode of every active request (under
    max_utilization, with no request paused), with the active requests kept as plain numbers
    (as vLLM's ``_Lockstep``): each active request computes and samples one token a step, so
    one count of the steps (``g``) gives its tokens from two numbers fixed when it joined.
    Under max_utilization a decode's blocks are then those of its computed tokens and one more
    (its next step's), counted in O(block size) (``count_blocks``), but for a request that
    joined in the step just taken, which holds its prompt's (``fresh``). The same steps in
    the same order, priced from the same whole numbers; where the next step is of neither
    kind, the arrays get their values back and the loop goes on."""

    def __init__(self, sim: "TrtLlm", active: np.ndarray, computed, gen, tokens, held):
        super().__init__(sim, active.tolist(), computed[active].tolist(), gen[active].tolist())
        self.computed, self.gen, self.tokens, self.held = computed, gen, tokens, held
        self.last = float(sim.last_token[active[0]])  # (every one's last token time)
        self.utilize = sim.p.capacity_policy == "max_utilization"
        self.fresh = []  # (max_utilization: those that joined in the last step, holding their prompt's blocks)
        if self.utilize:
            self.count_blocks(sim.p.block_size)

    def steps(self, waiting, context, reserved: int, unfinished: int) -> tuple:
        """Steps while they are of the two kinds, up to ``unfinished`` requests finished.
        (The active requests, the blocks reserved, how many finished.)"""
        sim, done = self.sim, 0
        a = np.array(self.ids, dtype=np.int64)
        if bool(context[a].any()) or bool((sim.last_token[a] != self.last).any()) \
                or bool((self.tokens[a] - self.computed[a] != 1).any()) \
                or self.utilize and bool((self.held[a] != _blocks(self.computed[a] + 1, sim.p.block_size)).any()):
            return a, reserved, 0  # (not in lockstep: the loop's general step goes on)
        while done < unfinished:
            sim.send_due(waiting)
            if not waiting and not self.ids:
                sim.idle(sim.due())
                continue
            took = self._join(waiting, context, reserved) if waiting else self._stretch(reserved)
            if took is None:
                break
            reserved, finished = took
            done += finished
        return self._back(context), reserved, done

    def _join(self, waiting, context, reserved: int):
        """The loop's general step where every waiting request is admitted and fits the step
        whole: (the blocks reserved after it, how many finished), or None."""
        sim = self.sim
        p, bs, g = sim.p, sim.p.block_size, self.g
        n = len(self.ids)
        ids = list(waiting)
        if n + len(ids) > p.max_num_seqs:
            return None
        prompts = [int(self.tokens[i]) for i in ids]
        if n + sum(prompts) > p.max_num_batched_tokens or any(self.computed[i] for i in ids):
            return None
        if self.utilize:  # (the blocks of every decode's next token and of each prompt, none paused)
            blocks = self.held_at(g + 2) + sum([-(-t // bs) for t in prompts])
            if blocks > p.kv_blocks:
                return None
        else:
            need = sum([-(-(int(sim.prompt[i]) + int(sim.output[i])) // bs) for i in ids])
            if reserved + need > p.kv_blocks:
                return None
            reserved += need
            blocks = reserved
        waiting.clear()
        m, now = n + len(ids), sim.now
        prompt_tokens = sum(prompts)
        for i in ids:
            if math.isnan(sim.scheduled[i]):
                sim.scheduled[i] = now
        dur = sim.steps.step_s(n, (self.total + n * g + n) / n if n else 0.0, len(ids), prompt_tokens,
                               sum([t * t for t in prompts]) / prompt_tokens, m) + p.step_overhead_s
        sim.record(now, dur, n + prompt_tokens, m, blocks, m)
        sim.now = now = now + dur
        self.g = g = g + 1
        gaps = [now - self.last] * n
        for i, t in zip(ids, prompts):
            context[i] = False
            gap = self.join(i, t, int(self.gen[i]), now)
            if gap is not None:
                gaps.append(gap)
        self.fresh = ids if self.utilize else []
        if gaps:
            sim.itl.append((gaps, 1))
        self.last = now
        return self._finish(reserved)

    def _stretch(self, reserved: int):
        """``_decode_stretch`` (under max_utilization while the blocks of each step's tokens
        are free): (the blocks reserved after it, how many finished), or None."""
        sim = self.sim
        p, g = sim.p, self.g
        n = len(self.ids)
        if n > min(p.max_num_seqs, p.max_num_batched_tokens):
            return None
        due = sim.due()
        k = sim.steps_before_due(min(self.ends) - g, n, due)
        if k < 1:
            return None
        j = np.arange(1, k + 1)
        if self.utilize:  # (the j-th step's decodes take the blocks of their next tokens)
            blocks = self.held_over(g + 1 + j)
            k = min(k, int(np.searchsorted(blocks, p.kv_blocks, side="right")))
            if k < 1:
                return None
        dur = sim.steps.decode_steps(n, float(self.total + n * g) / n + j[:k]) + p.step_overhead_s
        k, ends = sim.until_due(dur, due)
        dur = dur[:k]
        ends = sim.record_run(dur, n, blocks[:k] if self.utilize else np.full(k, reserved), ends)
        self.fresh = []
        sim.itl.append(([float(ends[0]) - self.last], n))
        if k > 1:
            sim.itl.append((dur[1:], n))
        self.g += k
        self.last = sim.now
        return self._finish(reserved)

    def _finish(self, reserved: int) -> tuple:
        """Requests with all their output leave now (``_ended``): (the blocks reserved, how many)."""
        sim, g = self.sim, self.g
        going = [r for r, e in enumerate(self.ends) if e <= g]
        if not going:
            return reserved, 0
        for r in reversed(going):
            i = self.ids[r]
            sim.finish[i] = sim.last_token[i] = self.last
            sim.generated[i] = self.gbase[r] + g
            if self.utilize:
                self.held[i] = 0
            else:
                reserved -= -(-(int(sim.prompt[i]) + int(sim.output[i])) // sim.p.block_size)
            self.drop(r)
        sim.release(len(going))
        return reserved, len(going)

    def _back(self, context) -> np.ndarray:
        """The arrays' values from the numbers; the active requests."""
        a, computed, generated = self.arrays()
        self.computed[a], self.gen[a], self.tokens[a] = computed, generated, computed + 1
        if self.utilize:  # (a decode's blocks: its computed tokens' and its next one's; a fresh one its prompt's)
            self.held[a] = _blocks(computed + 1, self.sim.p.block_size)
            running = set(self.ids)
            fresh = np.array([i for i in self.fresh if i in running], dtype=np.int64)
            self.held[fresh] = _blocks(self.sim.prompt[fresh], self.sim.p.block_size)
        self.sim.last_token[a] = self.last
        context[a] = False
        return a
