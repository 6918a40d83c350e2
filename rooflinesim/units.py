"""Human quantities in, SI floats out, and back again for printing.

YAML files hold strings such as ``3.35 TB/s`` or ``50 MiB``; the code holds SI floats
(bytes, bytes/s, FLOP/s, Hz, seconds). Decimal prefixes (k M G T P E, powers of 1000)
and binary prefixes (Ki Mi Gi Ti Pi Ei, powers of 1024) are kept apart: ``80 GB`` is
80e9 bytes and ``80 GiB`` is 80 * 2**30 bytes. Standard library only.
"""

from __future__ import annotations

import math
import re

from .errors import UserError

__all__ = ["KINDS", "MIB", "GIB", "parse_quantity", "format_bytes", "format_seconds", "format_rate"]

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {p + "i": float(1024**n) for n, p in enumerate("KMGTPE", start=1)}
_BINARY["ki"] = _BINARY["Ki"]
MIB, GIB = _BINARY["Mi"], _BINARY["Gi"]  # bytes in one MiB and one GiB
_SUBUNIT = {"": 1.0, "m": 1e-3, "u": 1e-6, "\u00b5": 1e-6, "\u03bc": 1e-6, "n": 1e-9, "p": 1e-12}


class _Kind:
    """How one kind of quantity is written: base unit spellings and allowed prefixes."""

    def __init__(self, what, example, bases, prefixes, ignore_case=False):
        self.what = what  # words for the error message: "a bandwidth"
        self.example = example
        self.bases = sorted(bases, key=len, reverse=True)  # longest spelling first
        self.prefixes = prefixes
        self.ignore_case = ignore_case

    def scale(self, unit: str) -> float | None:
        """SI factor of a unit such as 'TB/s', or None if this kind does not use it."""
        for base in self.bases:
            if self.ignore_case:
                if not unit.lower().endswith(base.lower()):
                    continue
                # "mhz" and "tflops" mean MHz and TFLOPS: no milli-hertz or milli-FLOP/s here.
                prefix = unit[: len(unit) - len(base)].upper()
            elif unit.endswith(base):
                prefix = unit[: len(unit) - len(base)]
            else:
                continue
            if prefix in self.prefixes:
                return self.prefixes[prefix]
        return None


KINDS = {
    "bytes": _Kind("a size in bytes", "80 GB' or '50 MiB", ("B", "byte", "bytes"),
                   {**_DECIMAL, **_BINARY}),
    "bytes_per_s": _Kind("a bandwidth", "3.35 TB/s", ("B/s", "B/sec", "bytes/s"),
                         {**_DECIMAL, **_BINARY}),
    # Integer datasheet rates are quoted in OPS/TOPS; they are treated like FLOP/s.
    "flops_per_s": _Kind("a compute rate", "989 TFLOPS",
                         ("FLOPS", "FLOP/s", "FLOPs/s", "OPS", "OP/s", "OPs/s"),
                         {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18},
                         ignore_case=True),
    "hz": _Kind("a clock frequency", "1830 MHz", ("Hz",),
                {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9}, ignore_case=True),
    "seconds": _Kind("a time", "1.3 us", ("s", "sec", "secs", "second", "seconds"), _SUBUNIT),
}

# A number (optionally with thousands commas: "1,979") followed by an optional unit.
_QUANTITY = re.compile(
    r"([+-]?(?:\d{1,3}(?:,\d{3})+(?:\.\d*)?|\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(.*)"
)


def parse_quantity(value: str | float | int, kind: str) -> float:
    """Read a quantity such as '3.35 TB/s' as an SI float of ``kind``; a bare number is SI.

    Raises UserError with one sentence when the text is malformed or of another kind.
    """
    try:
        spec = KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown quantity kind {kind!r}; known: {', '.join(KINDS)}") from None

    def fail() -> UserError:
        from .files import shorten

        text = value if isinstance(value, str) else shorten(value)
        return UserError(f"cannot read {shorten(text)} as {spec.what} (expected e.g. '{spec.example}')")

    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise fail()
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        match = _QUANTITY.fullmatch(value.strip())
        if match is None:
            raise fail()
        unit = "".join(match.group(2).split())  # "TB / s" reads as "TB/s"
        scale = spec.scale(unit) if unit else 1.0
        if scale is None:
            raise fail()
        number = float(match.group(1).replace(",", ""))
        # Divide by 1e6 rather than multiply by 1e-6: '25 us' is then exactly 25/1e6.
        number = number * scale if scale >= 1 else number / round(1 / scale)
    if not math.isfinite(number):
        raise fail()
    return number


def _three_digits(x: float) -> float:
    """x rounded to three significant digits."""
    return float(f"{x:.3g}")


def _format(x: float, steps: list[tuple[float, str]], sep: str = " ") -> str:
    """Format x in the largest unit of ``steps`` (ascending) that keeps it >= 1, 3 digits."""
    if not math.isfinite(x):
        return f"{x}{sep}{steps[0][1]}"
    factor, name = steps[0]
    for f, n in reversed(steps):
        if abs(_three_digits(x / f)) >= 1:
            factor, name = f, n
            break
    r = _three_digits(x / factor)
    decimals = 0 if r == 0 else max(0, 2 - math.floor(math.log10(abs(r))))
    return f"{r:.{decimals}f}{sep}{name}"


_BYTES_BINARY = [(1.0, "B")] + [(1024.0**n, p + "iB") for n, p in enumerate("KMGTPE", start=1)]
_BYTES_DECIMAL = [(1.0, "B")] + [(1000.0**n, p + "B") for n, p in enumerate("kMGTPE", start=1)]
_SECONDS = [(1e-9, "ns"), (1e-6, "\u00b5s"), (1e-3, "ms"), (1.0, "s")]
_RATE_PREFIXES = [(1000.0**n, p) for n, p in enumerate(["", "k", "M", "G", "T", "P", "E"])]


def format_bytes(x: float, binary: bool = True) -> str:
    """A byte count for people: '80.0 GiB' (binary=True) or '80.0 GB' (binary=False)."""
    return _format(x, _BYTES_BINARY if binary else _BYTES_DECIMAL)


def format_seconds(x: float) -> str:
    """A duration in ns, µs, ms or s with three significant digits: '1.30 µs'."""
    return _format(x, _SECONDS)


def format_rate(x: float, unit: str) -> str:
    """A rate with a decimal prefix: format_rate(9.89e14, 'FLOP/s') -> '989 TFLOP/s'."""
    return _format(x, [(f, p + unit) for f, p in _RATE_PREFIXES])
