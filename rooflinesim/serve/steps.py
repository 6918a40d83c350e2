"""Step times of a serving engine from the calibrated kernels, tabulated over the states a
simulation reaches.

An engine step runs one forward pass over a mixed batch: decode tokens (one per sequence)
and prefill chunks (several tokens of one sequence), each sequence attending to its own
cache. Most kernels (GEMMs, norms, MoE layers, the TP collectives) follow only the tokens
in the step; the attention kernels (and, in MLA prefill, the latent's expansion over the
cache) follow each sequence's context; the LM head follows the sequences that sample. So
a step's time is

    dense(tokens) + attention(decode sequences, their mean context)
        + sum over prefill chunks of attention(chunk, its context) + logits(samplers)

with each term read from a table the model priced once (``predict_model``'s kernels and
pricing; the varlen attention of a step as one kernel per part). Which kernels follow the
context is found by pricing the model's phases at two contexts.
"""

from __future__ import annotations

import bisect
import copy
import math

import numpy as np

from ..errors import UserError
from ..models.deploy import Deployment
from ..models.workload import Phase, price_phases



def _grid(lo: float, hi: float, ratio: float) -> np.ndarray:
    """Whole numbers from lo, each about ``ratio`` times the last (all of them while the
    step is under one), up to the first at or past hi: the grid up to a smaller hi is a
    prefix of this one, so a table over a larger range answers as the smaller one does."""
    pts, x = [], float(lo)
    while True:
        pts.append(int(round(x)))
        if pts[-1] >= hi:
            break
        x = max(x * ratio, x + 1)
    return np.unique(np.array(pts, dtype=float))


_sum = np.add.reduce


def _parts_of(tokens: np.ndarray, context: np.ndarray, decode: np.ndarray) -> tuple:
    """A step given per scheduled sequence (``StepTimes.step_of``'s arguments) as
    ``step_s`` takes it: the decodes, their mean context, the prefill chunks, their tokens
    and their context weighted by their tokens."""
    n_dec = int(_sum(decode))
    if n_dec == decode.size:
        return n_dec, float(_sum(context)) / n_dec, 0, 0, 0.0
    chunk = ~decode
    t, c = tokens[chunk], context[chunk]
    chunk_tokens = int(_sum(t))
    return (n_dec, float(_sum(context[decode])) / n_dec if n_dec else 0.0, int(chunk.size - n_dec), chunk_tokens,
            float(_sum(t * c)) / chunk_tokens if chunk_tokens else 0.0)


def _bracket(axis: list, x: float) -> tuple:
    """Where ``x`` falls on a sorted ``axis`` (plain floats): the index of the point at or
    below it (the first or the last but one off the axis's ends) and its weight towards the
    next, held to [0, 1] (the ends' values off the axis)."""
    i = bisect.bisect_right(axis, x) - 1
    i = 0 if i < 0 else len(axis) - 2 if i > len(axis) - 2 else i
    w = (x - axis[i]) / (axis[i + 1] - axis[i])
    return i, 0.0 if w < 0.0 else 1.0 if w > 1.0 else w


class LogTable:
    """A positive quantity tabulated over a grid of positive axes, read by multilinear
    interpolation of its logarithm in the logarithms of the axes (exact at the grid's
    points; power laws between them)."""

    def __init__(self, grids: list, values: np.ndarray):
        z = np.maximum(np.asarray(values, dtype=float), 1e-30).reshape([len(g) for g in grids])
        self.axes = tuple(np.log(np.asarray(g, dtype=float)) for g in grids)
        self._axes = [a.tolist() for a in self.axes]  # (plain floats: a scalar lookup with bisect)
        self.log_z = np.log(z)
        self._z = self.log_z.tolist()  # (nested lists: a lookup touches 2^d values, cheaper in plain floats)
        self._seen: dict = {}  # (lookups done: a simulation asks for the same points again and again)

    def __call__(self, *x: float) -> float:
        got = self._seen.get(x)
        if got is None:
            if len(self._seen) > 1 << 16:
                self._seen.clear()
            got = self._seen[x] = self._lookup(x)
        return got

    def _lookup(self, x: tuple) -> float:
        corners, weights = [self._z], []
        for a, v in zip(self._axes, x):
            i, w = _bracket(a, math.log(v))
            weights.append(w)
            corners = [c for node in corners for c in (node[i], node[i + 1])]  # (the first axis varies slowest)
        for w in weights:  # (contract one axis at a time, the first first)
            h = len(corners) >> 1
            corners = [corners[k] * (1 - w) + corners[h + k] * w for k in range(h)]
        return math.exp(corners[0])


class StepTimes:
    """The step times of one replica of a deployment, for steps of at most ``max_tokens``
    new tokens and ``max_seqs`` sequences, each with a context of at most ``max_context``
    tokens: a step's pass through every pipeline stage, and with ``pp`` above 1 each
    stage's part (``stage_tables``: one table set a stage, its kernels only)."""

    def __init__(self, model, spec, profile, d: Deployment, *, max_tokens: int, max_seqs: int, max_context: int):
        if d.eager and d.kernels != "hf":
            raise UserError("serve prices CUDA-graph steps, as engines run them; --eager is not modelled")
        self.model, self.spec, self.profile, self.d = model, spec, profile, d
        self._static: dict = {}
        self.max_tokens, self.max_seqs, self.max_context = int(max_tokens), int(max_seqs), int(max_context)
        T, N = np.arange(1.0, self.max_tokens + 1), np.arange(1.0, self.max_seqs + 1)
        c0 = 64.0
        # which kernels follow the context: each phase priced at a short and a long one
        probe = [Phase("prefill", batch=1, seq_q=c0, seq_kv=c0, sequences=1, logits=0.0),
                 Phase("prefill", batch=1, seq_q=c0, seq_kv=c0 + 4096, sequences=1, logits=0.0),
                 Phase("decode", batch=1, seq_q=1, seq_kv=c0, sequences=1),
                 Phase("decode", batch=1, seq_q=1, seq_kv=c0 + 4096, sequences=1)]
        (_, p0), (_, p1), (_, d0), (_, d1) = (r.row_times() for r in self._price(probe))
        self.prefill_context = ~np.isclose(p0[:, 0], p1[:, 0], rtol=1e-12, atol=0)
        self.decode_context = ~np.isclose(d0[:, 0], d1[:, 0], rtol=1e-12, atol=0)
        # the tables: tokens, decode sequences, logits rows; attention over (sequences, context)
        # for decode and over (chunks, tokens per chunk, context) for prefill
        self.ctx_grid = _grid(1, max(self.max_context, 2), 1.25)
        self.q_grid = _grid(1, max(self.max_tokens, 2), 1.3)
        self.n_grid = _grid(1, max(self.max_seqs, 2), 1.25)
        self.chunk_grid = _grid(1, max(min(self.max_seqs, self.max_tokens), 2), 1.4)
        pn, pq, pc = np.meshgrid(self.chunk_grid, self.q_grid, self.ctx_grid, indexing="ij")
        dn, dc = np.meshgrid(self.n_grid, self.ctx_grid, indexing="ij")
        phases = [
            Phase("prefill", batch=1, seq_q=T, seq_kv=T, sequences=1, logits=0.0, n=T.size),
            Phase("decode", batch=N, seq_q=1, seq_kv=c0, sequences=N, logits=0.0, n=N.size),
            Phase("decode", batch=N, seq_q=1, seq_kv=c0, sequences=N, logits=1.0, n=N.size),
            # (a chunk attends at least to itself)
            Phase("prefill", batch=pn.ravel(), seq_q=pq.ravel(), seq_kv=np.maximum(pc, pq).ravel(),
                  sequences=pn.ravel(), logits=0.0, n=pn.size),
            Phase("decode", batch=dn.ravel(), seq_q=1, seq_kv=dc.ravel(), sequences=dn.ravel(), logits=0.0,
                  n=dn.size),
        ]
        priced = self._price(phases)
        fam_pre, fam_dec = priced[0].row_families(), priced[1].row_families()
        self.families = tuple(sorted(set(fam_pre) | set(fam_dec)))
        self._families_of = (fam_pre, fam_dec)
        self._parts = self._parts_of(priced, None)
        self.stage_tables: list = []
        if d.pp > 1:  # (each stage's own tables: copies of these, over its kernels only)
            for stage in range(d.pp):
                t = copy.copy(self)
                t._parts, t.stage_tables = self._parts_of(priced, stage), []
                self.stage_tables.append(t)
        self._combine(np.ones(len(self.families)))

    def _parts_of(self, priced, stage: int | None) -> dict:
        """Per table, per family: the times of the kernels it holds (``stage``: on that
        pipeline stage only; None: every stage's)."""
        (_, dense_pre), (_, dense_dec), (_, with_logits), (_, att_pre), (_, att_dec) = (
            r.row_times(stage) for r in priced)
        fam_pre, fam_dec = self._families_of
        by = lambda rows, fams, keep: np.stack([  # noqa: E731  (per family: the kept rows' sum)
            rows[keep & (np.array(fams) == f)].sum(axis=0) for f in self.families])
        pad = lambda x: np.concatenate([np.zeros((x.shape[0], 1)), x], axis=1)  # noqa: E731  (index 0: none)
        return {
            "dense_prefill": pad(by(dense_pre, fam_pre, ~self.prefill_context)),
            "dense_decode": pad(by(dense_dec, fam_dec, ~self.decode_context)),
            "logits": pad(by(with_logits, fam_dec, np.ones(len(fam_dec), bool)) -
                          by(dense_dec, fam_dec, np.ones(len(fam_dec), bool))),
            "attention_prefill": by(att_pre, fam_pre, self.prefill_context),
            "attention_decode": by(att_dec, fam_dec, self.decode_context),
        }

    def _combine(self, m: np.ndarray) -> None:
        """The tables with each family's times multiplied by ``m`` (one factor a family)."""
        self.multipliers = m
        parts = self._parts
        self.dense_prefill, self.dense_decode, self.logits = (m @ parts[k] for k in (
            "dense_prefill", "dense_decode", "logits"))
        self.attention_prefill = LogTable([self.chunk_grid, self.q_grid, self.ctx_grid],
                                          m @ parts["attention_prefill"])
        self.attention_decode = LogTable([self.n_grid, self.ctx_grid], m @ parts["attention_decode"])
        self._rows: dict = {}
        self._row_lists: dict = {}  # (the same rows as plain floats, for one context at a time)
        self._decode_base: dict = {}  # (a decode step's time but its attention's, a plain float per batch size)
        for t in self.stage_tables:
            t._combine(m)

    def scaled(self, multipliers: dict) -> "StepTimes":
        """These step times with each family's kernel times multiplied by its factor
        (``multipliers``: family -> factor; a family left out keeps 1)."""
        out = copy.copy(self)
        out._static = self._static  # (per family, shared)
        out.stage_tables = [copy.copy(t) for t in self.stage_tables]
        out._combine(np.array([float(multipliers.get(f, 1.0)) for f in self.families]))
        return out

    def step_of(self, tokens: np.ndarray, context: np.ndarray, decode: np.ndarray, samplers: int,
                common: int = 0) -> float:
        """``step_s`` of a step given per scheduled sequence: its new ``tokens``, its
        ``context`` after them, and whether it is a ``decode`` (the rest are prefill chunks,
        their context weighted by their tokens); ``common``: ``step_s``'s."""
        return self.step_s(*_parts_of(tokens, context, decode), samplers, common)

    def _decode_row(self, n: int) -> np.ndarray:
        """The decode attention table's log times at ``n`` sequences over the context grid
        (its interpolation in the sequences, done once per ``n``)."""
        row = self._rows.get(n)
        if row is None:
            t = self.attention_decode
            i, w = _bracket(t._axes[0], math.log(n))
            row = self._rows[n] = t.log_z[i] * (1 - w) + t.log_z[i + 1] * w
        return row

    def _decode_attention_at(self, n: int, context: float) -> float:
        """``decode_attention`` at one context, in plain floats."""
        row = self._row_lists.get(n)
        if row is None:
            row = self._row_lists[n] = self._decode_row(n).tolist()
        i, w = _bracket(self.attention_decode._axes[1], math.log(context))
        return math.exp(row[i] * (1 - w) + row[i + 1] * w)

    def decode_base(self, n: int) -> float:
        """A step of ``n`` decode tokens, all sampling: its time but the attention's."""
        t = self._decode_base.get(n)
        if t is None:
            t = self._decode_base[n] = float(self.dense_decode[n] + self.logits[n])
        return t

    def decode_attention(self, n: int, context):
        """``attention_decode(n, context)`` for a context or an array of them (the same
        interpolation, its first axis taken once per ``n``)."""
        return np.exp(np.interp(np.log(context), self.attention_decode.axes[1], self._decode_row(n)))

    def decode_steps(self, n: int, context: np.ndarray, common: int = 0) -> np.ndarray:
        """Steps of ``n`` decode tokens only, all sampling, their sequences holding
        ``context`` tokens on average (an array: one step each); ``common``: ``step_s``'s."""
        t = self.decode_base(n) + self.decode_attention(n, context - common if common else context)
        return t + self.prefix_attention(n, common) if common else t

    def prefix_attention(self, tokens: int, common: int) -> float:
        """Cascade attention's first kernel: the step's ``tokens`` queries, as one sequence,
        over the ``common`` prefix every sequence shares, without a causal mask (priced as a
        chunk over a context that gives as many query-key pairs: ``common`` + (tokens - 1) / 2)."""
        return self.attention_prefill(1, tokens, max(common + (tokens - 1) / 2, tokens))

    def static_batch(self, batch: int, prompt: int, output: int) -> tuple[float, np.ndarray]:
        """A static batch, priced as ``predict_model`` prices it: its prompts' prefill
        (padded to ``prompt``), and each of its ``output`` - 1 decode steps (the j-th over
        prompt + j tokens)."""
        key = (batch, prompt, output)
        if key not in self._static:
            ctx = prompt + np.arange(1.0, max(output, 2))
            if self.d.kernels == "hf" and self.d.hf_cache == "static":  # (SDPA reads the whole cache)
                ctx = np.full(ctx.size, float(prompt + output))
            m = min(self.d.microbatches or self.d.pp, batch)  # (microbatches through the stages, as predict_model)
            b = math.ceil(batch / m)
            pre, dec = self._price([
                Phase("prefill", batch=b, seq_q=prompt, seq_kv=prompt, sequences=batch, microbatches=m),
                Phase("decode", batch=b, seq_q=1, seq_kv=ctx, sequences=batch, microbatches=m, n=ctx.size)])
            per = []
            for r in (pre, dec):
                _, rows = r.row_times()
                if self.d.eager or self.d.kernels == "hf" or self.d.pp > 1:
                    # (the step as priced whole: a host-paced step's host time, the graph gap
                    # a prefill in no graph leaves out, or microbatches filling the pipeline,
                    # shared out over its kernels' times)
                    rows = rows * (r.step_s / rows.sum(axis=0))
                fams = np.array(r.row_families())
                per.append(np.stack([rows[fams == f].sum(axis=0) for f in self.families]))
            if len(self._static) > 256:
                self._static.clear()
            self._static[key] = (per[0][:, 0], per[1] if output > 1 else np.zeros((len(self.families), 0)))
        pre_f, dec_f = self._static[key]
        return float(self.multipliers @ pre_f), self.multipliers @ dec_f

    def _price(self, phases):
        return price_phases(self.model, self.spec, self.profile, self.d, phases)

    def stage_s_of(self, tokens: np.ndarray, context: np.ndarray, decode: np.ndarray, samplers: int,
                   common: int = 0) -> list:
        """Each pipeline stage's time in a step (``step_of``'s arguments)."""
        parts = _parts_of(tokens, context, decode)
        return [t.step_s(*parts, samplers, common) for t in self.stage_tables]

    def step_s(self, decode_n: int, decode_context: float, chunk_n: int = 0, chunk_tokens: int = 0,
               chunk_context: float = 0.0, samplers: int = 0, common: int = 0) -> float:
        """One step: ``decode_n`` decode tokens whose sequences hold ``decode_context``
        tokens on average (this step's included); ``chunk_n`` prefill chunks of
        ``chunk_tokens`` new tokens in all, attending on average (weighted by their tokens)
        to ``chunk_context`` tokens; ``samplers`` sequences that sample a token. The
        varlen attention of each part is priced as one kernel over sequences of its mean
        lengths. ``common``: cascade attention over a prefix of that many tokens every
        sequence shares (vLLM's FlashAttention backend): its queries attend to it once for
        all (``prefix_attention``), each sequence's attention covers the rest of its context
        (the kernel that merges the two outputs is not priced)."""
        tokens = decode_n + chunk_tokens
        if tokens > self.max_tokens:
            raise ValueError(f"a step of {tokens} tokens is past the table's {self.max_tokens}")
        t = (self.dense_prefill[tokens] if chunk_n else self.dense_decode[decode_n]) + self.logits[samplers]
        if decode_n:
            t += self._decode_attention_at(decode_n, decode_context - common)
        if chunk_n:
            q = chunk_tokens / chunk_n
            t += self.attention_prefill(chunk_n, q, max(chunk_context - common, q))
        if common:
            t += self.prefix_attention(tokens, common)
        return t
