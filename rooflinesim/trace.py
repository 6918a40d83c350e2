"""Recorded arithmetic: run code once on stand-ins for its inputs, keep the numpy calls
it made, and replay them on numbers later.

A model's kernels have the same structure at every batch and length; only their sizes
follow the phase's numbers. The workload builds its kernels once with ``Var`` stand-ins
for those numbers; every ufunc (and ``np.where``) applied to a stand-in is recorded on a
``Tape`` (identical calls once), and ``Tape.replay`` repeats the calls on arrays, in the
order they were made, so a replayed value is the very float the code computes.

A tape made by ``Tape.recording(values)`` also carries each stand-in's value, so that code
which looks at its numbers still runs: a branch on a recorded value (``if x > 0``), or a
value taken out as a plain number or array, becomes a *guard*, the value that must come
out again for the recording to hold. ``Tape.function(outputs)`` compiles the calls the
outputs and guards need (and no others) into one function of the inputs, which answers
None where a guard fails: the caller then runs the code itself. Calls whose output shape
follows their values (``np.nonzero``, indexing by a recorded mask) are never recorded: the
mask is taken out, under a guard, and the call made on it.
"""

from __future__ import annotations

import operator

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin


class Var(NDArrayOperatorsMixin):
    """A value computed from a tape's inputs (an input itself, or a recorded call); on a
    recording tape, ``value`` is its number or array at the recorded inputs."""

    __slots__ = ("tape", "index", "value")

    def __init__(self, tape: "Tape", index: int, value=None):
        self.tape, self.index, self.value = tape, index, value

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "__call__" and not kwargs and ufunc.nout == 1:
            return self.tape.call(ufunc, inputs)
        return self.tape.outside(getattr(ufunc, method) if method != "__call__" else ufunc, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if func in _SHAPES:
            return func(*self.tape.shapes(args), **kwargs)
        arrays = _RECORDED.get(func)
        if arrays is not None and (func is not np.where or len(args) == 3):  # (the other arguments,
            # which may set a shape, taken out; np.where of a condition alone is np.nonzero)
            tape = self.tape
            return tape.call(_with(func, tape.taken(kwargs)), (*args[:arrays], *tape.taken(args[arrays:])))
        return self.tape.outside(func, args, kwargs)

    # what a recording tape can answer without a guard: the shape follows the inputs'
    shape = property(lambda self: self.tape.known(self).shape)
    ndim = property(lambda self: self.tape.known(self).ndim)
    size = property(lambda self: self.tape.known(self).size)
    dtype = property(lambda self: self.tape.known(self).dtype)

    def __len__(self):
        return len(self.tape.known(self))

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __getitem__(self, key):
        return self.tape.call(operator.getitem, (self, self.tape.taken(key)))

    # methods of an array, recorded
    def astype(self, dtype, copy=True):
        return self if self.tape.known(self).dtype == dtype else self.tape.call(_with(np.asarray, {"dtype": dtype}), (self,))

    def reshape(self, *shape):
        return self.tape.call(np.reshape, (self, self.tape.taken(shape[0] if len(shape) == 1 else shape)))

    def copy(self):
        return self

    def item(self, *args):
        return self.tape.call(_method("item"), (self, *args))

    def __getattr__(self, name):
        if name in _METHODS:
            tape = self.tape
            return lambda *args, **kwargs: tape.call(_with(_method(name), tape.taken(kwargs)), (self, *tape.taken(args)))
        raise AttributeError(name)

    @property
    def T(self):
        return self.tape.call(np.transpose, (self,))

    # what needs the value itself: taken out under a guard
    def __bool__(self):
        return self.tape.branch(self)

    def __float__(self):
        return float(self.tape.take(self))

    def __int__(self):
        return int(self.tape.take(self))

    def __index__(self):
        return operator.index(self.tape.take(self))

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.tape.take(self), dtype=dtype)

    def tolist(self):
        return self.tape.take(self).tolist()

    def __repr__(self):
        return f"Var({self.index})"


# array functions recorded as calls, with how many leading arguments are arrays (the
# others are taken out): each output's shape follows the shapes of its inputs
_RECORDED = {np.where: 3, np.concatenate: 1, np.stack: 1, np.take: 2, np.argmax: 1, np.argmin: 1,
             np.count_nonzero: 1, np.sum: 1, np.prod: 1, np.max: 1, np.min: 1, np.amax: 1, np.amin: 1,
             np.any: 1, np.all: 1, np.broadcast_to: 1, np.reshape: 1, np.ravel: 1, np.transpose: 1,
             np.expand_dims: 1, np.clip: 3, np.round: 1, np.zeros_like: 1, np.ones_like: 1, np.diff: 1,
             np.cumsum: 1, np.dot: 2, np.matmul: 2}
_SHAPES = {np.shape, np.ndim, np.size}
_METHODS = {"argmin", "argmax", "sum", "max", "min", "any", "all", "mean", "prod", "ravel", "flatten", "cumsum",
            "transpose", "squeeze", "round", "clip"}


class _Named:
    """A recorded function (hashable, and named in a compiled replay)."""

    __slots__ = ("fn", "key")

    def __init__(self, fn, key):
        self.fn, self.key = fn, key

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __eq__(self, other):
        return type(other) is _Named and self.key == other.key

    def __hash__(self):
        return hash(self.key)


def _with(func, kwargs: dict):
    """``func`` with its keyword arguments bound, as a recorded function."""
    if not kwargs:
        return func
    items = tuple(sorted(kwargs.items()))
    return _Named(lambda *args: func(*args, **dict(items)), (func, items))


def _method(name: str):
    """The array method ``name`` as a recorded function."""
    if name not in _METHOD_CALLS:
        _METHOD_CALLS[name] = _Named(lambda x, *a, **k: getattr(x, name)(*a, **k), ("method", name))
    return _METHOD_CALLS[name]


_METHOD_CALLS: dict = {}


class Tape:
    """The calls made on ``inputs`` stand-ins, in order."""

    def __init__(self, inputs: int, values: list | None = None):
        self.inputs = inputs
        self.calls: list[tuple] = []  # (function, arguments: Var index or constant)
        self.values = values  # a recording tape: every value so far (inputs first)
        self.guards: dict = {}  # tape index -> the value that must come out again
        self._seen: dict = {}
        self._vars: list = []
        self._replay = None  # (calls compiled, the function)

    @classmethod
    def recording(cls, values: list) -> "Tape":
        """A tape whose stand-ins carry ``values`` (see the module's notes)."""
        return cls(len(values), list(values))

    def variables(self) -> list[Var]:
        if self.values is None:
            return [Var(self, i) for i in range(self.inputs)]
        return [Var(self, i, v) for i, v in enumerate(self.values[:self.inputs])]

    def call(self, func, args) -> Var:
        refs = tuple(self._ref(a) for a in args)
        try:
            key = (func, tuple(_key(a) for a in refs))
            found = self._seen.get(key)
        except TypeError:  # (an unhashable constant: recorded apart)
            key, found = None, None
        if found is not None:
            return self._vars[found - self.inputs]
        value = None
        if self.values is not None:
            value = func(*(_value(a, self.values) for a in refs))
            self.values.append(value)
        self.calls.append((func, refs))
        index = self.inputs + len(self.calls) - 1
        if key is not None:
            self._seen[key] = index
        var = Var(self, index, value)
        self._vars.append(var)
        return var

    def _ref(self, a):
        if type(a) is Var:
            if a.tape is not self:
                raise ValueError("a value of another tape")
            return _Ref(a.index)
        if _holds_var(a):
            if type(a) not in (list, tuple):
                raise TypeError(f"a recorded value inside a {type(a).__name__} argument")
            return _Seq(self._ref(x) for x in a)
        return a

    # ---------------------------------------------------------------- a recording tape

    def known(self, var: Var):
        """``var``'s value, for what its shape tells (no guard: the shape follows the
        inputs' shapes)."""
        if self.values is None:
            raise TypeError("a recorded value has no shape: the structure must not depend on it")
        return np.asarray(var.value)

    def shapes(self, args):
        """``args`` with each value as its value, for a function of shapes only."""
        if self.values is None:
            raise TypeError("a recorded value has no shape: the structure must not depend on it")
        return [a.value if type(a) is Var else a for a in args]

    def take(self, var: Var):
        """``var``'s value, under a guard that it comes out the same."""
        if self.values is None:
            raise TypeError("a recorded value has no value: the structure must not depend on it")
        v = var.value
        if type(v) is np.ndarray:  # (the caller, or whoever gets the value, may write into it)
            self.guards.setdefault(var.index, v.copy())
            return v.copy()
        self.guards.setdefault(var.index, v)
        return v

    def branch(self, var: Var) -> bool:
        if self.values is None:
            raise TypeError("a recorded value has no truth value: the structure must not depend on it")
        truth = bool(var.value)
        self.guards.setdefault(var.index, truth)
        return truth

    def taken(self, x):
        """``x`` with every value in it taken out (under guards)."""
        if type(x) is Var:
            return self.take(x)
        if type(x) in (list, tuple):
            return type(x)(self.taken(a) for a in x)
        if type(x) is dict:
            return {k: self.taken(v) for k, v in x.items()}
        if type(x) is slice:
            return slice(self.taken(x.start), self.taken(x.stop), self.taken(x.step))
        return x

    def outside(self, func, args, kwargs):
        """A call the tape does not record: made on the values, taken out under guards."""
        if self.values is None:
            return NotImplemented
        return func(*self.taken(args), **self.taken(kwargs))

    # ---------------------------------------------------------------- replays

    def replay(self, inputs: list) -> list:
        """Every value of the tape (inputs first) for the given input values."""
        if self._replay is None or self._replay[0] != len(self.calls):
            self._replay = (len(self.calls), self._compile(None))
        return self._replay[1](*inputs)

    def function(self, outputs: list):
        """The calls that ``outputs`` (values of this tape, or constants) and the guards
        need, as one function of the inputs that returns the outputs' values, or None
        where a guard's value does not come out the same."""
        return self._compile([self._ref(x) for x in outputs])

    def _compile(self, outputs):
        """The calls as one Python function of the inputs (a loop over them costs as much
        as the calls themselves): every value, or only ``outputs`` and what they need."""
        names: dict = {}

        def name(a):
            if type(a) is _Ref:
                return f"v{int(a)}"
            if type(a) is _Seq:
                return "[" + ", ".join(name(x) for x in a) + "]"
            return names.setdefault(("c", len(names)), (f"c{len(names)}", a))[0]

        keep = None
        if outputs is not None:
            keep = set()
            todo = [int(r) for r in _refs(outputs)] + list(self.guards)
            while todo:
                i = todo.pop()
                if i in keep:
                    continue
                keep.add(i)
                if i >= self.inputs:
                    todo.extend(int(r) for r in _refs(self.calls[i - self.inputs][1]))
        lines = [f"def replay({', '.join(f'v{i}' for i in range(self.inputs))}):"]
        for i in range(self.inputs):
            if i in self.guards:
                lines.append(_check(i, self.guards[i], name))
        kept = [(self.inputs + k, func, refs) for k, (func, refs) in enumerate(self.calls)
                if keep is None or self.inputs + k in keep]
        last = {}  # value -> the call that uses it last (a replay lets go of it there)
        if outputs is not None:
            for index, _, refs in kept:
                for r in _refs(refs):
                    last[int(r)] = index
            for r in _refs(outputs):
                last.pop(int(r), None)
        done: dict = {}
        for index, v in last.items():
            done.setdefault(v, []).append(index)
        for index, func, refs in kept:
            f = names.setdefault(("f", id(func)), (f"f{len(names)}", func))[0]
            lines.append(f"    v{index} = {f}({', '.join(name(a) for a in refs)})")
            if index in self.guards:
                lines.append(_check(index, self.guards[index], name))
            if index in done:  # (large arrays then reuse memory, as the code run directly does)
                lines.append(f"    del {', '.join(f'v{i}' for i in sorted(set(done[index])))}")
        if outputs is None:
            lines.append(f"    return [{', '.join(f'v{i}' for i in range(self.inputs + len(self.calls)))}]")
        else:
            # (an output that is a constant array is handed out as a copy: the caller may write into it)
            lines.append(f"    return [{', '.join(name(a) + ('.copy()' if type(a) is np.ndarray else '') for a in outputs)}]")
        scope = {name: value for name, value in names.values()}
        scope["_same"] = _same
        exec("\n".join(lines), scope)
        replay = scope["replay"]
        replay.calls = len(kept)  # (how many calls it makes)
        return replay


def _check(index: int, expected, name) -> str:
    if type(expected) is bool:
        return f"    if {'not ' if expected else ''}v{index}: return None"
    return f"    if not _same(v{index}, {name(expected)}): return None"


def _same(a, b) -> bool:
    """Whether a replayed value is the recorded one (same type, shape and numbers)."""
    if type(a) is not type(b):
        return False
    if type(b) is np.ndarray:
        return a.shape == b.shape and a.dtype == b.dtype and bool(np.all(a == b))
    return bool(a == b)


def _refs(refs):
    for a in refs:
        if type(a) is _Ref:
            yield a
        elif type(a) is _Seq:
            yield from _refs(a)


def _value(a, values):
    if type(a) is _Ref:
        return values[a]
    if type(a) is _Seq:
        return [_value(x, values) for x in a]
    return a


class _Ref(int):
    """The index of a tape value among a call's arguments."""


class _Seq(tuple):
    """A list among a call's arguments that holds tape values."""


def record(func, *args):
    """``func(*args)``, recorded where an argument is a tape value, or a list or tuple
    that holds one (a function of arrays that the tape does not see inside)."""
    var = _first_var(args)
    return func(*args) if var is None else var.tape.call(func, args)


def _first_var(a):
    """The first tape value in ``a`` (a value, or lists and tuples of them), if any."""
    if type(a) is Var:
        return a
    if type(a) in (list, tuple, dict, slice):
        for x in (a.values() if type(a) is dict else (a.start, a.stop, a.step) if type(a) is slice else a):
            found = _first_var(x)
            if found is not None:
                return found
    return None


def _holds_var(a) -> bool:
    return type(a) in (list, tuple, dict, slice) and _first_var(a) is not None


def asarray(x, dtype=None):
    """``np.asarray`` that keeps a tape value one."""
    if type(x) is Var:
        return x if dtype is None else x.astype(dtype)
    return np.asarray(x, dtype=dtype)


def _key(a):
    if type(a) is _Ref:
        return ("ref", int(a))
    if type(a) is _Seq:
        return ("seq", tuple(_key(x) for x in a))
    if isinstance(a, float):  # (0.0 and -0.0 are equal, and NaN is not itself: their bits are)
        return (type(a), a.hex())
    return (type(a), a)
