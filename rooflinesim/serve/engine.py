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
    first at the end of its prefill); it finishes with its output and frees its blocks.
``static``: static batching, for contrast: up to ``max_num_seqs`` waiting requests form a
batch when the engine is free; their prompts are prefilled together, padded to the
longest, and the batch decodes until its longest output is done (each request's own last
token is its end); the next batch starts after.

A step's time is the GPU time of its kernels (``StepTimes``) plus the engine's host time
per step, a named parameter (``ENGINES``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

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


def _blocks(tokens, block_size: int):
    return -(-tokens // block_size)


def simulate(engine: str, reqs: Requests, steps, p: EngineParams, concurrency: int | None = None) -> Served:
    """Serve ``reqs`` with ``engine`` (see the module's notes); ``steps`` prices a step
    (``StepTimes``); ``concurrency``: at most this many requests in flight (a closed loop:
    a request is sent when it is due and one in flight has finished)."""
    if engine == "vllm":
        return _VllmV1(reqs, steps, p, concurrency).run()
    if engine == "static":
        return _Static(reqs, steps, p, concurrency).run()
    raise UserError(f"unknown engine '{engine}'; known: vllm, static")


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
        self.itl: list = []
        self.log = {"start_s": [], "duration_s": [], "tokens": [], "sequences": [], "kv_blocks_used": []}
        self.preemptions = 0
        self.next = 0  # the next request not yet sent
        # a closed loop: the times slots in flight became free (a request is sent when it is due
        # and a slot is free), none for an open one
        self.slots = None if concurrency is None else deque([0.0] * int(concurrency))
        self.now = 0.0

    def due(self) -> float:
        """When the next request is sent (inf: none left, or the client waits for a slot)."""
        if self.next >= len(self.arrival) or (self.slots is not None and not self.slots):
            return math.inf
        t = self.arrival[self.next]
        return t if self.slots is None else max(t, self.slots[0])

    def send_due(self, queue) -> None:
        """Requests due by now join the queue (the engine sees them at a step's end)."""
        while self.due() <= self.now:
            i = self.next
            self.sent[i] = self.arrival[i] if self.slots is None else max(self.arrival[i], self.slots.popleft())
            queue.append(i)
            self.next += 1

    def release(self, count: int) -> None:
        """``count`` requests finished now: with a concurrency limit, their slots free."""
        if self.slots is not None:
            self.slots.extend([self.now] * count)

    def record(self, start: float, duration: float, tokens: int, seqs: int, blocks: int) -> None:
        log = self.log
        log["start_s"].append(start)
        log["duration_s"].append(duration)
        log["tokens"].append(tokens)
        log["sequences"].append(seqs)
        log["kv_blocks_used"].append(blocks)

    def served(self) -> Served:
        return Served(self.sent, self.prompt, self.output, self.scheduled, self.first, self.finish,
                      np.concatenate(self.itl) if self.itl else np.zeros(0), self.preemptions,
                      {k: np.asarray(v) for k, v in self.log.items()})


class _VllmV1(_Sim):
    stretches = True  # decode-only stretches taken at once (the same steps; False: one by one)

    def run(self) -> Served:
        p, bs = self.p, self.p.block_size
        n = len(self.arrival)
        tokens = self.prompt.copy()  # known tokens: prompt + output so far
        computed = np.zeros(n, dtype=np.int64)
        held = np.zeros(n, dtype=np.int64)  # KV blocks held
        free = p.kv_blocks
        waiting: deque = deque()
        running = np.zeros(0, dtype=np.int64)
        done = 0
        while done < n:
            self.send_due(waiting)
            if not waiting and running.size == 0:
                self.now = self.due()
                continue
            if self.stretches and running.size and self._decode_stretch(running, waiting, tokens, computed, held, free):
                free = p.kv_blocks - int(held.sum())
                left = self.generated[running] < self.output[running]
                ended = running[~left]
                if ended.size:
                    running = running[left]
                    self.finish[ended] = self.now
                    free += int(held[ended].sum())
                    held[ended] = 0
                    done += ended.size
                    self.release(int(ended.size))
                continue
            budget = p.max_num_batched_tokens
            # 1. the running requests, in order, as far as the budget goes
            want = tokens[running] - computed[running]
            give = np.clip(budget - (np.cumsum(want) - want), 0, want)
            need = np.where(give > 0, _blocks(computed[running] + give, bs) - held[running], 0)
            preempted = False
            if need.sum() > free:
                running, give, need, free = self._preempt(running, give, need, free, waiting, computed, held)
                preempted = True
            free -= int(need.sum())
            held[running] += need
            budget -= int(give.sum())
            sched, taken = [running[give > 0]], [give[give > 0]]
            # 2. waiting requests, in order, where nothing was preempted
            admitted = []
            if not preempted:
                room = p.max_num_seqs - running.size
                while waiting and budget > 0 and room > 0:
                    i = waiting[0]
                    g = min(int(tokens[i] - computed[i]), budget)
                    b = int(_blocks(computed[i] + g, bs) - held[i])
                    if b > free:
                        break
                    waiting.popleft()
                    free -= b
                    held[i] += b
                    budget -= g
                    room -= 1
                    admitted.append(i)
                    if np.isnan(self.scheduled[i]):
                        self.scheduled[i] = self.now
                    sched.append(np.array([i]))
                    taken.append(np.array([g]))
                if admitted:
                    running = np.concatenate([running, np.array(admitted, dtype=np.int64)])
            idx = np.concatenate(sched)
            g = np.concatenate(taken)
            if idx.size == 0:  # (nothing fits: only a finishing request can free room)
                raise UserError("the engine stalled: no request fits in the KV cache")
            # 3. the step: decode tokens and prefill chunks, priced
            ctx = computed[idx] + g
            decode = (tokens[idx] - computed[idx]) == 1
            samples = ctx == tokens[idx]
            chunk_tokens = int(g[~decode].sum())
            dur = self.steps.step_s(
                int(decode.sum()), float(ctx[decode].mean()) if decode.any() else 0.0,
                int((~decode).sum()), chunk_tokens,
                float((g[~decode] * ctx[~decode]).sum() / chunk_tokens) if chunk_tokens else 0.0,
                int(samples.sum())) + p.step_overhead_s
            self.record(self.now, dur, int(g.sum()), int(idx.size), p.kv_blocks - free)
            self.now += dur
            computed[idx] = ctx
            # 4. tokens sampled, requests finished
            s = idx[samples]
            self.generated[s] += 1
            tokens[s] += 1
            firsts = s[self.generated[s] == 1]
            self.first[firsts] = self.now
            later = s[self.generated[s] > 1]
            if later.size:
                self.itl.append(self.now - self.last_token[later])
            self.last_token[s] = self.now
            ended = s[self.generated[s] >= self.output[s]]
            if ended.size:
                self.finish[ended] = self.now
                free += int(held[ended].sum())
                held[ended] = 0
                running = running[self.generated[running] < self.output[running]]
                done += ended.size
                self.release(int(ended.size))
        return self.served()

    def _decode_stretch(self, running, waiting, tokens, computed, held, free) -> bool:
        """Steps in which nothing but the running requests' decodes can happen, taken at
        once: every running request decodes, no waiting request can be admitted (none
        waits, or no room or blocks for the first), up to the step in which the first
        running request finishes, a request is due, or the blocks would run out (which
        the step-by-step loop then handles). Each step is the one the loop would take."""
        p = self.p
        if np.any(tokens[running] - computed[running] != 1):
            return False
        if waiting:
            i = waiting[0]
            g = min(int(tokens[i] - computed[i]), p.max_num_batched_tokens - running.size)
            if running.size < p.max_num_seqs and g > 0 and _blocks(computed[i] + g, p.block_size) - held[i] <= free:
                return False
        k = int((self.output[running] - self.generated[running]).min())
        if k < 2:
            return False
        n = running.size
        due = self.due()
        if due < math.inf:  # (no more steps than fit before it at the least a step can take)
            floor = self.steps.dense_decode[n] + self.steps.logits[n] + p.step_overhead_s
            k = min(k, int((due - self.now) / floor) + 2)
        c = computed[running]
        j = np.arange(1, k + 1)
        if n * (k // p.block_size + 1) > free:  # (the blocks may run out: count them per step)
            # new blocks by step j: the requests whose tokens so far open a block
            grow = (_blocks(c[:, None] + j, p.block_size) - held[running][:, None]).clip(0).sum(axis=0)
            k = min(k, int(np.searchsorted(grow, free, side="right")))
            if k < 2:
                return False
        dur = self.steps.decode_steps(n, c.mean() + j[:k]) + p.step_overhead_s
        ends = self.now + np.cumsum(dur)
        if due < ends[-1]:
            k = int(np.searchsorted(ends, due, side="left")) + 1  # (the step in which it comes due ends the stretch)
            dur, ends = dur[:k], ends[:k]
        if k < 2:
            return False
        starts = ends - dur
        log = self.log
        log["start_s"].extend(starts.tolist())
        log["duration_s"].extend(dur.tolist())
        log["tokens"].extend([n] * k)
        log["sequences"].extend([n] * k)
        used = _blocks(c[:, None] + j[:k], p.block_size).sum(axis=0) if n * k <= 1 << 16 else \
            np.full(k, float(_blocks(c + k, p.block_size).sum()))
        log["kv_blocks_used"].extend((p.kv_blocks - free - int(held[running].sum()) + used).tolist())
        self.itl.append(np.concatenate([[ends[0] - self.last_token[running]], np.tile(dur[1:, None], (1, n))]).ravel())
        computed[running] += k
        tokens[running] += k
        self.generated[running] += k
        held[running] = _blocks(computed[running], p.block_size)
        self.now = float(ends[-1])
        self.last_token[running] = self.now
        return True

    def _preempt(self, running, give, need, free, waiting, computed, held):
        """vLLM's preemption: while the first running request whose blocks do not fit is
        unmet, the last running request gives back its blocks and goes to the front of the
        queue to be recomputed (the unmet one too, when it is itself the last)."""
        while True:
            over = np.nonzero(np.cumsum(need) > free)[0]
            if over.size == 0:
                return running, give, need, free
            first = int(over[0])
            victim = int(running[-1])
            self.preemptions += 1
            free += int(held[victim])
            held[victim] = 0
            computed[victim] = 0
            waiting.appendleft(victim)
            running, give, need = running[:-1], give[:-1], need[:-1]
            if first == running.size:  # (the unmet request was the last: preempted itself)
                return running, give, need, free


class _Static(_Sim):
    def run(self) -> Served:
        p = self.p
        n = len(self.arrival)
        waiting: deque = deque()
        done = 0
        while done < n:
            self.send_due(waiting)
            if not waiting:
                self.now = self.due()
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
            self.record(self.now, dur, b * prompt, b, need)
            self.now += dur
            self.first[batch] = self.now
            self.last_token[batch] = self.now
            ends = self.now + np.cumsum(decode + p.step_overhead_s)  # the end of each decode step
            for j, d in enumerate(decode):
                self.record(ends[j] - d - p.step_overhead_s, d + p.step_overhead_s, b, b, need)
            # request i's k-th token (k >= 2) comes at the end of decode step k - 2
            for i in batch:
                k = int(self.output[i])
                if k > 1:
                    t = ends[:k - 1]
                    self.itl.append(np.diff(np.concatenate([[self.now], t])))
                    self.finish[i] = t[-1]
                else:
                    self.finish[i] = self.now
            self.generated[batch] = self.output[batch]
            self.now = float(ends[-1]) if ends.size else self.now
            done += b
            self.release(b)
        return self.served()
