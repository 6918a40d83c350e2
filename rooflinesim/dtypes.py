"""The dtype registry. ``bits`` is the single truth for storage size (int4 is half a byte).

``rate`` names the peak-rate entry of a GPU spec that matrix math with this input
dtype runs at (tf32 is stored as fp32 but runs on the tensor cores' tf32 rate).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .errors import did_you_mean


@dataclass(frozen=True)
class DType:
    name: str
    bits: int
    kind: str  # "float" or "int"
    rate: str  # key of the spec's dense peak rate used by matrix math in this dtype

    @property
    def bytes(self) -> float:
        return self.bits / 8


_DTYPES = {
    d.name: d
    for d in (
        DType("fp64", 64, "float", "fp64_tensor"),
        DType("fp32", 32, "float", "fp32"),
        DType("tf32", 32, "float", "tf32"),
        DType("bf16", 16, "float", "bf16"),
        DType("fp16", 16, "float", "fp16"),
        DType("fp8", 8, "float", "fp8"),
        DType("int8", 8, "int", "int8"),
        DType("int4", 4, "int", "int4"),
    )
}

_ALIASES = {
    "float64": "fp64", "double": "fp64",
    "float32": "fp32", "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16", "half": "fp16",
    "fp8_e4m3": "fp8", "e4m3": "fp8", "float8_e4m3fn": "fp8",
    "w4a16": "int4",
}


def dtype(name: str | DType) -> DType:
    """Look up a dtype by name or alias; unknown names raise a one-sentence UserError."""
    found = _DTYPES.get(name) if type(name) is str else None
    if found is not None:  # (the common case: a canonical name)
        return found
    if isinstance(name, DType):
        return name
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    try:
        return _DTYPES[key]
    except KeyError:
        raise did_you_mean(str(name), list(_DTYPES) + list(_ALIASES), "dtype") from None


def names() -> list[str]:
    return list(_DTYPES)


@lru_cache(maxsize=None)
def _bytes_of(name: str) -> float:
    return dtype(name).bits / 8


def bytes_per_element(name: str | DType) -> float:
    if isinstance(name, DType):
        return name.bits / 8
    return _bytes_of(name)
