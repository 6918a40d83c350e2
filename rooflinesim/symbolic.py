"""One formula, two backends: the few non-arithmetic functions the cost models need.

Each function looks at its arguments: sympy expressions get sympy functions, anything
else (Python numbers, numpy arrays) gets numpy. sympy is never imported here unless a
sympy object is already in play, so numeric callers never pay for it.
"""

from __future__ import annotations

import sys

import numpy as np


def _sympy(*args):
    """Return the sympy module if any argument is a sympy object, else None."""
    sp = sys.modules.get("sympy")
    if sp is None:
        return None
    for a in args:
        if isinstance(a, sp.Basic):
            return sp
    return None


def ceil(x):
    sp = _sympy(x)
    return sp.ceiling(x) if sp else np.ceil(x)


def floor(x):
    sp = _sympy(x)
    return sp.floor(x) if sp else np.floor(x)


def maximum(a, b):
    sp = _sympy(a, b)
    return sp.Max(a, b) if sp else np.maximum(a, b)


def minimum(a, b):
    sp = _sympy(a, b)
    return sp.Min(a, b) if sp else np.minimum(a, b)


def log(x):
    sp = _sympy(x)
    return sp.log(x) if sp else np.log(x)


def where(cond, a, b):
    """``a`` where ``cond`` holds, else ``b`` (sympy Piecewise or numpy where)."""
    sp = _sympy(cond, a, b)
    if sp:
        return sp.Piecewise((a, cond), (b, True))
    return np.where(cond, a, b)


def numeric_only(name: str, func, *args):
    """``func(*args)`` for a quantity with no closed form: computed on numbers and arrays,
    and for sympy arguments the undefined function ``name`` of them."""
    sp = _sympy(*args)
    if sp:
        return sp.Function(name)(*args)
    return func(*args)


def is_symbolic(*args) -> bool:
    """Whether any argument is a sympy object."""
    return _sympy(*args) is not None
