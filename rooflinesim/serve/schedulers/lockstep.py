"""Light loads in lockstep: the running requests of a scheduler kept as plain numbers while
every step gives each of them one token computed and one sampled (each scheduler's
``_Lockstep``, entered after one of its fast paths). One count of those steps (``g``) then
gives each request's computed and generated tokens from two numbers fixed when it joined, a
step's inputs are sums kept up to date, and a request is touched only when it joins or
finishes: at a light load a batch holds a few requests, on which a call into numpy costs more
than Python's arithmetic. The schedulers' tests hold each lockstep to the steps its loop takes.
"""

from __future__ import annotations

from itertools import accumulate

import numpy as np


COUNT_IN_NUMPY = 32  # (requests past which count_blocks counts them in numpy, not one by one)


class Lockstep:
    """The running requests ``ids`` with their computed and generated tokens, as numbers."""

    def __init__(self, sim, ids: list, computed: list, generated: list):
        self.sim = sim
        self.g = 0  # (steps taken in lockstep)
        self.ids = list(ids)
        self.cbase = list(computed)  # (computed tokens, less g)
        self.gbase = list(generated)  # (generated tokens, less g)
        # (the g at which each is done)
        self.ends = (sim.output[np.array(self.ids, dtype=np.int64)] - np.array(self.gbase, dtype=np.int64)).tolist()
        self.total = sum(self.cbase)  # (their sum)

    bs = 0  # (with count_blocks: the block size; the blocks held counted in O(bs))

    def count_blocks(self, bs: int) -> None:
        """Count the KV blocks of ``bs`` tokens the requests' computed tokens fill, as they join
        and leave (``held_at``): each request's computed tokens less g as q whole blocks and r
        more tokens, ``hist[r]`` how many have r, ``whole`` the sum of their q."""
        self.bs = bs
        if len(self.cbase) > COUNT_IN_NUMPY:  # (many requests: one call into numpy for all)
            q, r = np.divmod(np.array(self.cbase, dtype=np.int64), bs)
            self.hist, self.whole = np.bincount(r, minlength=bs).tolist(), int(q.sum())
            return
        self.hist, self.whole = [0] * bs, 0
        for c in self.cbase:
            self._count(c, 1)

    def _count(self, c: int, sign: int) -> None:
        q, r = divmod(c, self.bs)
        self.hist[r] += sign
        self.whole += sign * q

    def held_at(self, g: int) -> int:
        """The blocks the requests' computed tokens fill after ``g`` steps in all (each a
        token more; ``count_blocks``): with c + g + bs - 1 = (q + s) bs + (r + t), a request
        fills q + s blocks and one more where r + t reaches bs."""
        bs = self.bs
        s, t = divmod(g + bs - 1, bs)
        return self.whole + len(self.ids) * s + (sum(self.hist[bs - t:]) if t else 0)

    def held_over(self, g: np.ndarray) -> np.ndarray:
        """``held_at`` at each of the step counts ``g`` (an array)."""
        bs = self.bs
        above = np.fromiter(accumulate(reversed(self.hist), initial=0), np.int64, bs + 1)[::-1]  # (those with r >= x)
        s, t = np.divmod(g + (bs - 1), bs)
        return above[bs - t] + (self.whole + len(self.ids) * s)

    def join(self, i: int, known: int, had: int, now: float):
        """Request ``i`` joins: a step ending ``now`` computed its ``known`` tokens and sampled
        one more (it had ``had``). Its gap, where it had a token before (recomputed after a
        pause), else None (its first token, recorded)."""
        self._append(i, known, had)
        if had:
            return now - float(self.sim.last_token[i])
        self.sim.first[i] = now
        return None

    def _append(self, i: int, known: int, had: int) -> None:
        """Request ``i`` joins the numbers with its ``known`` tokens computed and one more
        sampled than the ``had`` it had (at the step count now)."""
        g = self.g
        if self.bs:
            self._count(known - g, 1)
        self.ids.append(i)
        self.cbase.append(known - g)
        self.gbase.append(had + 1 - g)
        self.ends.append(int(self.sim.output[i]) - had - 1 + g)
        self.total += known - g

    def drop(self, r: int) -> None:
        """Row ``r`` leaves (a request finished)."""
        if self.bs:
            self._count(self.cbase[r], -1)
        self.total -= self.cbase[r]
        del self.ids[r], self.cbase[r], self.gbase[r], self.ends[r]

    def arrays(self) -> tuple:
        """The running requests' ids, computed and generated tokens, as arrays."""
        return (np.array(self.ids, dtype=np.int64), np.array(self.cbase, dtype=np.int64) + self.g,
                np.array(self.gbase, dtype=np.int64) + self.g)
