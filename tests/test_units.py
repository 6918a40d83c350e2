"""Quantities: parsing human strings into SI floats and formatting them back."""

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.errors import UserError
from rooflinesim.units import format_bytes, format_rate, format_seconds, parse_quantity


@pytest.mark.parametrize(
    "text, kind, expected",
    [
        # Decimal prefixes are powers of 1000, binary ones powers of 1024: never mixed.
        ("80 GB", "bytes", 80 * 10**9),
        ("80 GiB", "bytes", 80 * 2**30),
        ("50 MB", "bytes", 50 * 10**6),
        ("50 MiB", "bytes", 50 * 2**20),
        ("1 kB", "bytes", 1000),
        ("1 KiB", "bytes", 1024),
        ("2 TiB", "bytes", 2 * 2**40),
        ("0.5 B", "bytes", 0.5),
        ("3.35 TB/s", "bytes_per_s", 3.35e12),
        ("4.8TB/s", "bytes_per_s", 4.8e12),
        ("900 GB/s", "bytes_per_s", 900e9),
        ("1 GiB/s", "bytes_per_s", 2**30),
        ("989 TFLOPS", "flops_per_s", 989e12),
        ("989.4 TFLOP/s", "flops_per_s", 989.4e12),
        ("1979 TOPS", "flops_per_s", 1979e12),  # integer ops count as FLOP/s
        ("1,979 TOPS", "flops_per_s", 1979e12),  # datasheets write thousands with commas
        ("2.61 PFLOPS", "flops_per_s", 2.61e15),
        ("1830 MHz", "hz", 1.83e9),
        ("2.1 GHz", "hz", 2.1e9),
        ("1.3 us", "seconds", 1.3e-6),
        ("25 \u00b5s", "seconds", 25e-6),  # micro sign
        ("25 \u03bcs", "seconds", 25e-6),  # Greek mu
        ("4 ms", "seconds", 4e-3),
        ("7 ns", "seconds", 7e-9),
        ("2 s", "seconds", 2.0),
    ],
)
def test_parse(text, kind, expected):
    assert parse_quantity(text, kind) == pytest.approx(expected, rel=1e-12)


def test_decimal_and_binary_differ_by_the_right_factor():
    assert parse_quantity("80 GiB", "bytes") / parse_quantity("80 GB", "bytes") == 2**30 / 10**9


@pytest.mark.parametrize("value, kind", [(3.35e12, "bytes_per_s"), (80, "bytes"), ("3e12", "bytes_per_s")])
def test_bare_number_is_already_si(value, kind):
    assert parse_quantity(value, kind) == float(value)


def test_wrong_kind_message_is_one_sentence():
    with pytest.raises(UserError) as info:
        parse_quantity("3.35 TB", "bytes_per_s")
    assert str(info.value) == "cannot read '3.35 TB' as a bandwidth (expected e.g. '3.35 TB/s')"


@pytest.mark.parametrize(
    "value, kind",
    [
        ("3.35 TB", "bytes_per_s"),  # a size where a bandwidth belongs
        ("80 GB/s", "bytes"),
        ("80 Gb", "bytes"),  # lower-case b reads as bits: refused, not guessed
        ("989 TFLOPS", "bytes_per_s"),
        ("3 TiFLOPS", "flops_per_s"),  # binary prefixes are for bytes only
        ("1830 MHz", "seconds"),
        ("1.3 us", "hz"),
        ("fast", "hz"),
        ("", "bytes"),
        ("GB", "bytes"),
        ("1.2.3 GB", "bytes"),
        ("nan", "bytes"),
        ("1e999 B", "bytes"),
        (float("inf"), "bytes"),
        (None, "bytes"),
        (True, "bytes"),
        ([80], "bytes"),
    ],
)
def test_malformed_raises_user_error(value, kind):
    with pytest.raises(UserError) as info:
        parse_quantity(value, kind)
    message = str(info.value)
    assert message.startswith("cannot read ") and "\n" not in message


def test_unknown_kind_is_a_programming_error():
    with pytest.raises(ValueError) as info:
        parse_quantity("1 GB", "furlongs")
    assert not isinstance(info.value, UserError)


@pytest.mark.parametrize(
    "text, expected",
    [
        (format_bytes(80 * 2**30), "80.0 GiB"),
        (format_bytes(80e9, binary=False), "80.0 GB"),
        (format_bytes(141e9, binary=False), "141 GB"),
        (format_bytes(50 * 2**20), "50.0 MiB"),
        (format_bytes(0.5), "0.500 B"),  # an int4 element is half a byte
        (format_bytes(0), "0 B"),
        (format_bytes(999.96e9, binary=False), "1.00 TB"),  # rounding moves up a unit
        (format_bytes(1023.9 * 2**20), "1.00 GiB"),
        (format_seconds(1.3e-6), "1.30 \u00b5s"),
        (format_seconds(4e-3), "4.00 ms"),
        (format_seconds(25e-9), "25.0 ns"),
        (format_seconds(2.5), "2.50 s"),
        (format_rate(9.89e14, "FLOP/s"), "989 TFLOP/s"),
        (format_rate(3.35e12, "B/s"), "3.35 TB/s"),
        (format_rate(1.83e9, "Hz"), "1.83 GHz"),
    ],
)
def test_format(text, expected):
    assert text == expected


def _number(text: str) -> float:
    return float(text.split()[0])


@settings(deadline=None)
@given(x=st.floats(min_value=1e-3, max_value=1e21), binary=st.booleans())
def test_bytes_round_trip(x, binary):
    text = format_bytes(x, binary=binary)
    # Three significant digits: the round trip is exact to half a unit in the third digit.
    assert parse_quantity(text, "bytes") == pytest.approx(x, rel=5e-3)


@settings(deadline=None)
@given(x=st.floats(min_value=1.0, max_value=1e18), binary=st.booleans())
def test_bytes_pick_the_unit_that_keeps_three_digits(x, binary):
    number = _number(format_bytes(x, binary=binary))
    assert 1 <= number < (1024 if binary else 1000)
    assert len(re.sub(r"\D", "", f"{number:g}").lstrip("0")) <= 4


@settings(deadline=None)
@given(x=st.floats(min_value=1e-12, max_value=1e4))
def test_seconds_round_trip(x):
    assert parse_quantity(format_seconds(x), "seconds") == pytest.approx(x, rel=5e-3)


@settings(deadline=None)
@given(x=st.floats(min_value=1.0, max_value=1e20), unit=st.sampled_from(["B/s", "FLOP/s", "Hz"]))
def test_rate_round_trip(x, unit):
    kind = {"B/s": "bytes_per_s", "FLOP/s": "flops_per_s", "Hz": "hz"}[unit]
    if unit == "Hz":
        x = min(x, 9.99e11)  # clocks stop at GHz
    assert parse_quantity(format_rate(x, unit), kind) == pytest.approx(x, rel=5e-3)


@given(n=st.integers(min_value=1, max_value=10**6), prefix=st.sampled_from("kMGTP"))
def test_prefixes_never_confused(n, prefix):
    power = "kMGTP".index(prefix) + 1
    # 1024**k / 1000**k is at least 1.024, far outside the float rounding allowed here.
    assert math.isclose(parse_quantity(f"{n} {prefix}B", "bytes"), n * 1000**power, rel_tol=1e-12)
    assert math.isclose(parse_quantity(f"{n} {prefix.upper()}iB", "bytes"), n * 1024**power, rel_tol=1e-12)
    assert math.isclose(parse_quantity(f"{n} {prefix}B/s", "bytes_per_s"), n * 1000**power, rel_tol=1e-12)
