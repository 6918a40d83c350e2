"""What every op shares: a family name, a registry, and input checks."""

from __future__ import annotations

import math
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
    arrays = [v for v in values.values() if _numeric_array(v)]
    if len(arrays) > 1 and _positive(np.concatenate(arrays, axis=None)):
        if len(arrays) == len(values):
            return
        values = {k: v for k, v in values.items() if not _numeric_array(v)}  # checked at once
    for name, v in values.items():
        if v is not None and not _positive(v):
            raise UserError(f"{name} must be a positive number (got {v!r})")


def _numeric_array(v) -> bool:
    return type(v) is np.ndarray and v.dtype.kind in "iuf"


def _positive(v) -> bool:
    kind = type(v)
    if kind is int:  # the common cases first, with the fewest numpy calls
        return v > 0
    if kind is float:
        return 0 < v < math.inf
    if _numeric_array(v) and v.size:
        # (the least and the greatest by their index: cheaper than min() and max())
        return v.item(v.argmin()) > 0 and (v.dtype.kind != "f" or v.item(v.argmax()) < math.inf)
    if is_symbolic(v):
        return True
    a = np.asarray(v)
    ok = a.dtype.kind in "iu" or (a.dtype.kind == "f" and bool(np.isfinite(a).all()))
    return ok and bool((a > 0).all())


def check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise UserError(f"{name} must be one of {', '.join(choices)} (got {value!r})")
