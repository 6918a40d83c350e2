"""What every op shares: a family name, a registry, and input checks."""

from __future__ import annotations

from dataclasses import fields
from typing import ClassVar

import numpy as np

from ..errors import UserError, did_you_mean
from ..symbolic import is_symbolic
from ..work import Work

_REGISTRY: dict[str, type["Op"]] = {}


class Op:
    """Base of the op dataclasses. Subclasses set ``family`` and implement ``work``."""

    family: ClassVar[str] = ""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.family:
            _REGISTRY[cls.family] = cls

    def work(self) -> Work:  # pragma: no cover - every op overrides it
        raise NotImplementedError

    def shape(self) -> dict:
        """The op's fields, for tables, hover text and JSON."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    def label(self) -> str:
        parts = []
        for k, v in self.shape().items():
            if v is None or k in ("name",):
                continue
            parts.append(f"{k}={v}")
        return f"{self.family}({', '.join(parts)})"


def op_class(name: str) -> type[Op]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise did_you_mean(name, _REGISTRY, "op") from None


def op_names() -> list[str]:
    return sorted(_REGISTRY)


def check_positive(**values) -> None:
    """Sizes must be positive whole numbers (checked for numbers and arrays, not symbols)."""
    for name, v in values.items():
        if v is None:
            continue
        if type(v) is int:  # the common scalar case, without numpy
            if v > 0:
                continue
            raise UserError(f"{name} must be a positive number (got {v!r})")
        if is_symbolic(v):
            continue
        a = np.asarray(v)
        ok = a.dtype.kind in "iu" or (a.dtype.kind == "f" and bool(np.isfinite(a).all()))
        if not ok or not bool((a > 0).all()):
            raise UserError(f"{name} must be a positive number (got {v!r})")


def check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise UserError(f"{name} must be one of {', '.join(choices)} (got {value!r})")
