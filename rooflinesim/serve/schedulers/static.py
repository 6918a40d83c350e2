"""``static``: static batching, for contrast: up to ``max_num_seqs`` waiting requests form a
batch when the engine is free; their prompts are prefilled together, padded to the
longest, and the batch decodes until its longest output is done (each request's own last
token is its end); the next batch starts after. ``hf``: the same static batches, each run as
Hugging Face transformers' generate() runs it (``predict model --engine hf``).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ...errors import UserError
from ..metrics import Served
from .base import _blocks, Sim


class Static(Sim):
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
