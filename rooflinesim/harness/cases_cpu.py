"""CPU op builders (numpy, or torch on the CPU for gemm), and the harness self-test op.

Same contract as cases_gpu: ``set_bytes(case)`` and ``build(case, sets)`` returning
``fn(i)`` that runs call i on input set i % sets; calls are synchronous, so the host
clock times them. Sets are copies of one random draw: on a CPU only the memory
footprint matters for the caches, and copying is much faster than drawing.
"""

from __future__ import annotations

import os
import time

from .suites import ELEMENT_BYTES

RMS_EPS = 1e-6
SELFTEST_ACTIONS = ("ok", "raise", "exit", "hang")


def _np():
    import numpy

    return numpy


def _np_dtype(name):
    np = _np()
    try:
        return {"fp32": np.float32, "fp64": np.float64, "uint8": np.uint8}[name]
    except KeyError:
        raise ValueError(f"dtype '{name}' is not measured on the CPU (fp32, fp64, uint8)") from None


def _sets_of(draw, sets):
    first = draw()
    return [first] + [first.copy() for _ in range(sets - 1)]


def _normal(shape, dtype_name, seed=0):
    np = _np()
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(_np_dtype(dtype_name))


def gemm_set_bytes(c):
    return c["batch"] * (c["m"] * c["k"] + c["n"] * c["k"]) * ELEMENT_BYTES[c["dtype"]]


def build_gemm(c, sets):
    b, m, n, k, dt = c["batch"], c["m"], c["n"], c["k"], c["dtype"]
    if b != 1:
        raise ValueError("CPU gemm is measured with batch 1 only")
    if c.get("backend") == "torch-cpu":
        return _build_gemm_torch(m, n, k, dt, sets)
    a = _sets_of(lambda: _normal((m, k), dt, 1), sets)
    w = _sets_of(lambda: _normal((n, k), dt, 2), sets)
    np = _np()

    def fn(i):
        j = i % sets
        return np.matmul(a[j], w[j].T)
    return fn


def _build_gemm_torch(m, n, k, dt, sets):
    import torch

    tdt = {"fp32": torch.float32, "fp64": torch.float64, "bf16": torch.bfloat16}[dt]
    a = [torch.randn(m, k, dtype=tdt) for _ in range(sets)]
    w = [torch.randn(n, k, dtype=tdt) for _ in range(sets)]

    def fn(i):
        j = i % sets
        return torch.mm(a[j], w[j].t())
    return fn


def copy_set_bytes(c):
    return 2 * c["bytes"]


def build_copy(c, sets):
    np = _np()
    nbytes, dt = c["bytes"], c.get("dtype", "uint8")
    elem = ELEMENT_BYTES[dt]
    if nbytes < 1 or nbytes % elem:
        raise ValueError(f"copy of {nbytes} bytes is not a whole number of {dt} elements")
    n = nbytes // elem
    src = _sets_of(lambda: np.random.default_rng(3).integers(1, 256, n).astype(_np_dtype(dt)),
                   sets)
    dst = [np.empty_like(s) for s in src]

    def fn(i):
        j = i % sets
        np.copyto(dst[j], src[j])
        return dst[j]
    return fn


def rmsnorm_set_bytes(c):
    return (c["tokens"] * c["hidden"] + c["hidden"]) * ELEMENT_BYTES[c["dtype"]]


def build_rmsnorm(c, sets):
    np = _np()
    t, hd, dt = c["tokens"], c["hidden"], c["dtype"]
    x = _sets_of(lambda: _normal((t, hd), dt, 4), sets)
    w = _sets_of(lambda: (1.0 + 0.1 * _normal((hd,), dt, 5)).astype(_np_dtype(dt)), sets)

    def fn(i):
        j = i % sets
        xj = x[j]
        inv = 1.0 / np.sqrt(np.mean(xj * xj, axis=-1, keepdims=True) + RMS_EPS)
        return (xj * inv) * w[j]
    return fn


def selftest_set_bytes(c):
    return 1024


def build_selftest(c, sets):
    """A tiny op whose outcome is chosen by the case: for checking failure handling."""
    action = c.get("action")
    if action not in SELFTEST_ACTIONS:
        raise ValueError(f"selftest action must be one of {', '.join(SELFTEST_ACTIONS)}")
    if action == "raise":
        raise RuntimeError("selftest case asked to fail")
    if action == "exit":
        os._exit(86)  # a hard crash: no record, no cleanup
    if action == "hang":
        while True:
            time.sleep(1)
    return lambda i: i * i


BUILDERS = {
    "gemm": (gemm_set_bytes, build_gemm),
    "copy": (copy_set_bytes, build_copy),
    "rmsnorm": (rmsnorm_set_bytes, build_rmsnorm),
    "selftest": (selftest_set_bytes, build_selftest),
}
