"""A sequence of kernels run one after another (a layer, a forward pass): its work and
its latency are the sums of its parts'."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..work import Work, total
from .base import Op


@dataclass(frozen=True)
class Sequence(Op):
    """``parts`` is a tuple of (name, op, count): ``count`` runs of ``op``."""

    parts: tuple
    name: str = ""

    family: ClassVar[str] = "sequence"

    def kernels(self) -> list[tuple[str, Op, object]]:
        return list(self.parts)

    def work(self) -> Work:
        return total(op.work() * count for _, op, count in self.parts)

    def label(self) -> str:
        return self.name or f"sequence of {len(self.parts)} kernels"
