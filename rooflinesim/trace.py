"""Recorded arithmetic: run code once on stand-ins for its inputs, keep the numpy calls
it made, and replay them on numbers later.

A model's kernels have the same structure at every batch and length; only their sizes
follow the phase's numbers. The workload builds its kernels once with ``Var`` stand-ins
for those numbers; every ufunc (and ``np.where``) applied to a stand-in is recorded on a
``Tape`` (identical calls once), and ``Tape.replay`` repeats the calls on arrays, in the
order they were made, so a replayed value is the very float the code computes.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin


class Var(NDArrayOperatorsMixin):
    """A value computed from a tape's inputs (an input itself, or a recorded call)."""

    __slots__ = ("tape", "index")

    def __init__(self, tape: "Tape", index: int):
        self.tape, self.index = tape, index

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            return NotImplemented
        return self.tape.call(ufunc, inputs)

    def __array_function__(self, func, types, args, kwargs):
        if func is np.where and not kwargs:
            return self.tape.call(np.where, args)
        return NotImplemented

    def __bool__(self):
        raise TypeError("a recorded value has no truth value: the structure must not depend on it")

    def __repr__(self):
        return f"Var({self.index})"


class Tape:
    """The calls made on ``inputs`` stand-ins, in order."""

    def __init__(self, inputs: int):
        self.inputs = inputs
        self.calls: list[tuple] = []  # (function, arguments: Var index or constant)
        self._seen: dict = {}
        self._replay = None  # (calls compiled, the function)

    def variables(self) -> list[Var]:
        return [Var(self, i) for i in range(self.inputs)]

    def call(self, func, args) -> Var:
        refs = tuple(_Ref(a.index) if isinstance(a, Var) else a for a in args)
        if any(isinstance(a, Var) and a.tape is not self for a in args):
            raise ValueError("a value of another tape")
        try:
            key = (func, tuple(_key(a) for a in refs))
            found = self._seen.get(key)
        except TypeError:  # (an unhashable constant: recorded apart)
            key, found = None, None
        if found is not None:
            return Var(self, found)
        self.calls.append((func, refs))
        index = self.inputs + len(self.calls) - 1
        if key is not None:
            self._seen[key] = index
        return Var(self, index)

    def replay(self, inputs: list) -> list:
        """Every value of the tape (inputs first) for the given input values."""
        if self._replay is None or self._replay[0] != len(self.calls):
            self._replay = (len(self.calls), self._compile())
        return self._replay[1](*inputs)

    def _compile(self):
        """The calls as one Python function of the inputs (a loop over them costs as much
        as the calls themselves)."""
        names: dict = {}
        lines = [f"def replay({', '.join(f'v{i}' for i in range(self.inputs))}):"]
        for k, (func, refs) in enumerate(self.calls):
            f = names.setdefault(("f", id(func)), (f"f{len(names)}", func))[0]
            args = []
            for a in refs:
                if type(a) is _Ref:
                    args.append(f"v{int(a)}")
                else:
                    args.append(names.setdefault(("c", len(names)), (f"c{len(names)}", a))[0])
            lines.append(f"    v{self.inputs + k} = {f}({', '.join(args)})")
        lines.append(f"    return [{', '.join(f'v{i}' for i in range(self.inputs + len(self.calls)))}]")
        scope = {name: value for name, value in names.values()}
        exec("\n".join(lines), scope)
        return scope["replay"]


class _Ref(int):
    """The index of a tape value among a call's arguments."""


def _key(a):
    return ("ref", int(a)) if type(a) is _Ref else (type(a), a)
