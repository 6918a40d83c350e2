"""``sglang``: SGLang's scheduler (python/sglang/srt/managers/scheduler.py, schedule_policy.py,
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
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from ...eager import joined
from ...errors import UserError
from ..metrics import Served
from ..traffic import Requests
from .base import EngineParams, _min, Sim, _sum
from .lockstep import Lockstep


SGLANG_CLIP_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
SGLANG_RATIO_INIT, SGLANG_RATIO_MIN_FACTOR, SGLANG_RATIO_DECAY_STEPS = 0.7, 0.14, 600
SGLANG_RETRACT_STEPS = 20
SGLANG_RATIO_MIN = SGLANG_RATIO_INIT * SGLANG_RATIO_MIN_FACTOR
SGLANG_RATIO_DECAY = (SGLANG_RATIO_INIT - SGLANG_RATIO_MIN) / SGLANG_RATIO_DECAY_STEPS  # a decode step's


class SGLang(Sim):
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
                    if self.group is None and running:  # (the steps after it in lockstep, while they are of two kinds)
                        used, ratio, finished = _Lockstep(self, running, tokens, computed, gen).steps(
                            waiting, used, capacity, ratio, n - done)
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
                used = self._ended(ended, computed, gen, used, capacity)
                done += ended.size
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
        used = self._ended(ended, computed, gen, used, capacity)
        running[:] = ids[~done].tolist()
        return used, ratio, int(ended.size)

    def _ended(self, ended: np.ndarray, computed, gen, used: int, capacity: int) -> int:
        """Requests ``ended`` sampled their last token now: they finish, their KV is freed (but
        for what the radix cache keeps) and their slots too; (the KV tokens held after)."""
        self.finish[ended] = self.now
        self.generated[ended] = gen[ended]
        held = int(_sum(computed[ended]))
        used -= held - self.left(ended, held, capacity - used)
        computed[ended] = 0
        self.release(int(ended.size))
        return used

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


class _Lockstep(Lockstep):
    """``SGLang.run``'s loop while each step it takes is a decode stretch (``_decode_stretch``)
    or a prefill batch of whole prompts, with the running requests kept as plain numbers (as
    vLLM's ``_Lockstep``): a decode step gives every running request one token computed and
    sampled, so one count of the decode steps (``g``) gives each its tokens from two numbers
    fixed when it joined, and a prefill batch touches only the requests it admits. The same
    steps in the same order, priced from the same whole numbers; where the next step is of
    neither kind (a prompt cut to the chunk budget, a prefill that cannot be formed while
    requests wait, a retraction), the arrays get their values back and the loop goes on."""

    def __init__(self, sim: "SGLang", running: list, tokens, computed, gen):
        ids = np.array(running, dtype=np.int64)
        super().__init__(sim, running, computed[ids].tolist(), gen[ids].tolist())
        self.running, self.tokens, self.computed, self.gen = running, tokens, computed, gen
        self.lasts = sim.last_token[ids].tolist()  # (each one's last token time)
        self.rows = ids

    def steps(self, waiting, used: int, capacity: int, ratio: float, unfinished: int) -> tuple:
        """Steps while they are of the two kinds, up to ``unfinished`` requests finished.
        (The KV tokens held, the ratio, how many finished.)"""
        sim, done = self.sim, 0
        if bool((self.tokens[self.rows] - self.computed[self.rows] != 1).any()):
            return used, ratio, 0  # (not in lockstep: the loop's general step goes on)
        while done < unfinished:
            sim.send_due(waiting)
            if not waiting and not self.ids:
                sim.idle(sim._idle_until())
                ratio = SGLANG_RATIO_INIT
                continue
            if waiting:
                took = self._prefill(waiting, used, capacity, ratio)
            else:
                took = self._stretch(used, capacity, ratio)
            if took is None:
                break
            used, ratio, finished = took
            done += finished
        self._back()
        return used, ratio, done

    def _prefill(self, waiting, used: int, capacity: int, ratio: float):
        """The loop's prefill batch where every prompt it takes is whole: (the KV tokens held,
        the ratio, how many finished), or None (nothing taken, or a prompt cut)."""
        sim = self.sim
        p, g, tokens = sim.p, self.g, self.tokens
        reserved = float(sum([min(e - g, SGLANG_CLIP_NEW_TOKENS) for e in self.ends])) * ratio
        rem_total, rem_input, rem_chunk = capacity - used - reserved, p.max_prefill_tokens, p.max_num_batched_tokens
        room = p.max_num_seqs - len(self.ids)
        batch = []
        for i in waiting:  # (first as the loop forms it, nothing changed)
            if room <= 0 or rem_chunk <= 0:
                break
            extend = int(tokens[i] - self.computed[i])
            wants = min(int(sim.output[i] - self.gen[i]), SGLANG_CLIP_NEW_TOKENS)
            if extend + wants >= rem_total or (extend >= rem_input and batch):
                break
            if extend > rem_chunk or self.computed[i]:
                return None  # (cut to the chunk budget, or part computed: the loop's way)
            batch.append(i)
            rem_total -= extend + wants
            rem_input -= extend
            rem_chunk -= extend
            room -= 1
        if not batch:
            return None
        now = sim.now
        prompts = [int(tokens[i]) for i in batch]
        for i, t in zip(batch, prompts):
            waiting.popleft()
            sim.found(i, t, 0, (0, 0), t)
            if math.isnan(sim.scheduled[i]):
                sim.scheduled[i] = now
        total = sum(prompts)
        dur = sim.steps.step_s(0, 0.0, len(batch), total, sum([t * t for t in prompts]) / total, len(batch))
        if p.prefill_host_s:
            dur = joined(p.prefill_host_s, dur, sim.steps.profile)
        dur += p.step_overhead_s
        sim.record(now, dur, total, len(batch), -(-(used + total) // p.block_size), len(batch))
        sim.now = now = now + dur
        used += total
        finished = 0
        for i, t in zip(batch, prompts):  # (each samples its first token, or one more once retracted)
            had = int(self.gen[i])
            gap = self.join(i, t, had, now)
            if gap is not None:
                sim.itl.append(([gap], 1))
            self.lasts.append(now)
            if had + 1 >= sim.output[i]:  # (its last token: it leaves at once)
                self.drop(len(self.ids) - 1)
                self.lasts.pop()
                self.gen[i], self.tokens[i], self.computed[i] = had + 1, t + 1, 0
                sim.last_token[i] = sim.finish[i] = now
                sim.generated[i] = had + 1
                sim.release(1)
                used -= t
                finished += 1
        return used, ratio, finished

    def _stretch(self, used: int, capacity: int, ratio: float):
        """``_decode_stretch``: (the KV tokens held, the ratio, how many finished), or None."""
        sim = self.sim
        p, g = sim.p, self.g
        n = len(self.ids)
        k = min(min(self.ends) - g, (capacity - used) // n)
        due = sim.due()
        k = sim.steps_before_due(k, n, due)
        if k < 1:
            return None
        j = np.arange(1, k + 1)
        dur, past = sim._paced(n, sim.steps.decode_steps(n, float(self.total + n * g) / n + j))
        k, ends = sim.until_due(dur, due)
        dur, j = dur[:k], j[:k]
        sim.eager_decode_steps += k if past else 0
        ends = sim.record_run(dur, n, -(-(used + n * j) // p.block_size), ends)
        e0 = float(ends[0])
        sim.itl.append(([e0 - t for t in self.lasts], 1))
        if k > 1:
            sim.itl.append((dur[1:], n))
        used += n * k
        for _ in range(k):  # (step by step, as the loop takes it: the same floats)
            if ratio == SGLANG_RATIO_MIN:
                break
            ratio = max(SGLANG_RATIO_MIN, ratio - SGLANG_RATIO_DECAY)
        self.g = g = g + k
        now = sim.now
        self.lasts = [now] * n
        going = [r for r, e in enumerate(self.ends) if e <= g]
        for r in reversed(going):  # (their last token in the stretch's last step)
            i = self.ids[r]
            sim.finish[i] = sim.last_token[i] = now
            sim.generated[i] = self.gbase[r] + g
            self.gen[i], self.tokens[i], self.computed[i] = self.gbase[r] + g, self.cbase[r] + g + 1, 0
            used -= self.cbase[r] + g
            self.drop(r)
            del self.lasts[r]
        if going:
            sim.release(len(going))
        return used, ratio, len(going)

    def _back(self) -> None:
        """The arrays' values from the numbers; the running list."""
        ids, computed, generated = self.arrays()
        self.computed[ids], self.gen[ids], self.tokens[ids] = computed, generated, computed + 1
        self.sim.last_token[ids] = self.lasts
        self.running[:] = self.ids


SGLANG_DECODE_RESERVED_TOKENS = 512  # num_reserved_decode_tokens: KV kept per decoding request for its growth


class SGLangDecode(SGLang):
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
