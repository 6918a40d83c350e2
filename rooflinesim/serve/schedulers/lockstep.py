"""Light loads in lockstep: the running requests of a scheduler kept as plain numbers while
every step gives each of them one token computed and one sampled (each scheduler's
``_Lockstep``, entered after one of its fast paths). One count of those steps (``g``) then
gives each request's computed and generated tokens from two numbers fixed when it joined, a
step's inputs are sums kept up to date, and a request is touched only when it joins or
finishes: at a light load a batch holds a few requests, on which a call into numpy costs more
than Python's arithmetic. The schedulers' tests hold each lockstep to the steps its loop takes.
"""

from __future__ import annotations

import numpy as np


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

    def join(self, i: int, known: int, had: int, now: float):
        """Request ``i`` joins: a step ending ``now`` computed its ``known`` tokens and sampled
        one more (it had ``had``). Its gap, where it had a token before (recomputed after a
        pause), else None (its first token, recorded)."""
        g = self.g
        self.ids.append(i)
        self.cbase.append(known - g)
        self.gbase.append(had + 1 - g)
        self.ends.append(int(self.sim.output[i]) - had - 1 + g)
        self.total += known - g
        if had:
            return now - float(self.sim.last_token[i])
        self.sim.first[i] = now
        return None

    def drop(self, r: int) -> None:
        """Row ``r`` leaves (a request finished)."""
        self.total -= self.cbase[r]
        del self.ids[r], self.cbase[r], self.gbase[r], self.ends[r]

    def arrays(self) -> tuple:
        """The running requests' ids, computed and generated tokens, as arrays."""
        return (np.array(self.ids, dtype=np.int64), np.array(self.cbase, dtype=np.int64) + self.g,
                np.array(self.gbase, dtype=np.int64) + self.g)
