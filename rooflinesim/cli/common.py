"""Options and output helpers shared by the commands. Heavy modules are imported inside
the commands so that one prediction stays fast from a cold start."""

from __future__ import annotations

import json
import math
import re
import sys

import click

from ..errors import UserError

# Ranges of the options (shown in each option's --help). Beyond them the arithmetic gave
# NaN, inf, an int64 overflow or a traceback; within them every number is finite.
MAX_SIZE = 2**40  # a size: tokens, features, heads (about 1.1e12, far past any real model)
MAX_BYTES = 2**50  # a buffer or a card's memory (1 PiB)
MAX_COUNT = 2**16  # things the code loops or lays out arrays over: GPUs, experts, stages
MAX_WORK = 2**53  # a kernel's sizes multiplied (its FLOPs and bytes up to a small factor):
                  # float64's exact integers, and far within int64


class Size(click.IntRange):
    """A whole number from ``min`` (default 1) to ``max`` (default MAX_SIZE), as one
    option's documented range; anything else is one sentence and exit code 2."""

    name = "whole number"

    def __init__(self, max: int = MAX_SIZE, min: int = 1):
        super().__init__(min=min, max=max)

    def convert(self, value, param, ctx):
        if isinstance(value, str):
            text = value.strip()
            if not re.fullmatch(r"[+-]?[0-9]+", text):  # (no '1e3', '1_000' or other digits)
                self.fail(f"{value!r} is not a whole number.", param, ctx)
            if len(text) > 30:
                self.fail(f"{text[:12]}... is not in the range {self._describe_range()}.", param, ctx)
            value = int(text)
        return super().convert(value, param, ctx)

    def get_metavar(self, param, ctx=None):
        return "N"


class SizeOrAuto(Size):
    """A whole number as ``Size`` takes it, or 'auto' (vLLM's spelling, also -1): the
    string "auto"."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value.strip().lower() in ("auto", "-1"):
            return "auto"
        return super().convert(value, param, ctx)

    def get_metavar(self, param, ctx=None):
        return "N|auto"


class Real(click.FloatRange):
    """A finite number in a range (never NaN or infinity)."""

    name = "number"

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv

    def get_metavar(self, param, ctx=None):
        return "X"


def check_product(what: str, limit: int = MAX_WORK, **sizes) -> None:
    """One sentence of UserError when ``sizes`` (option name -> value) multiply past ``limit``."""
    product = math.prod(int(v) for v in sizes.values())
    if product > limit:
        names = " x ".join(f"--{k.replace('_', '-')}" for k in sizes)
        raise UserError(f"{what} is too large to count exactly: {names} = {product:.3g} exceeds "
                        f"2^{limit.bit_length() - 1} ({limit:.3g}); give smaller sizes")


POS = Size()
FRACTION = Real(min=0, max=1, min_open=True)


def parse_size(text: str, option: str, kind: str = "bytes", whole: bool = True,
               max: float = MAX_SIZE, min_open: bool = True) -> float:
    """A quantity such as '16MiB' or '1.3 us' given to ``option``, checked: finite, above 0
    (or at least 0 with ``min_open`` False), at most ``max`` and, for ``whole``, a whole number."""
    from ..units import parse_quantity

    value = parse_quantity(text.replace(" ", ""), kind)
    unit = {"bytes": " bytes", "seconds": " s"}.get(kind, "")
    if value < 0 or (min_open and value == 0):
        raise UserError(f"{option} must be {'above' if min_open else 'at least'} 0 (got {text})")
    if value > max:
        raise UserError(f"{option} must be at most {max:g}{unit} (got {text})")
    if whole and value != int(value):
        raise UserError(f"{option} must be a whole number of {kind} (got {text}, {value:g}{unit})")
    return value


SLO_KEYS = ("ttft", "tpot", "e2el")


def slo_options(f):
    """--slo-ttft-p99, --slo-tpot-p99, --slo-e2el-p99 (``parse_slos`` reads them)."""
    for key, what, example in reversed((("ttft", "time to first token", "2s or 500ms"),
                                        ("tpot", "time per output token", "50ms"),
                                        ("e2el", "end-to-end latency", "30s"))):
        f = click.option(f"--slo-{key}-p99", default=None,
                         help=f"SLO on the P99 {what}, with its unit, e.g. {example}.")(f)
    return f


def _is_number(text: str) -> bool:
    """Whether ``text`` is a bare number ('500', '1e3', '+2'), no unit."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def parse_slos(**given) -> dict:
    """The SLOs given as ``slo_<key>_p99`` ('2s', '50ms'), in milliseconds by metric name
    (``p99_ttft_ms``); a bare number is refused, as seconds to us and milliseconds to vLLM's
    --goodput both read it."""
    slos = {}
    for key in SLO_KEYS:
        text = given.get(f"slo_{key}_p99")
        if text is None:
            continue
        option = f"--slo-{key}-p99"
        if _is_number(text):
            raise UserError(f"{option} needs a unit, e.g. {text.strip()}ms or {text.strip()}s (got {text})")
        slos[f"p99_{key}_ms"] = parse_size(text, option, "seconds", whole=False, max=1e6) * 1e3
    return slos


def gpu_options(f):
    f = click.option("--spec-file", "spec_files", multiple=True, type=click.Path(dir_okay=False),
                     help="Extra GPU spec YAML file(s) to register (repeatable).")(f)
    f = click.option("--gpu", default="h100", show_default=True,
                     help="GPU spec name or alias (see `rooflinesim specs list`), the device name "
                          "torch reports (e.g. 'NVIDIA H200'), or a spec YAML path.")(f)
    return f


def profile_option(f):
    return click.option(
        "--profile", default=None,
        help="Calibration profile: 'ideal' (datasheet roofline), a bundled GPU name, or a "
             "YAML path. Default: the GPU's own fitted profile, else one transferred from "
             "a measured GPU.")(f)


def eager_option(f):
    return click.option("--eager", is_flag=True, help=(
        "Launched from Python one call at a time (no CUDA graph): the longer of the host "
        "time of the call (the profile's) and the GPU time."))(f)


def allreduce_option(default: str | None):
    """--allreduce: the engine's TP AllReduce backends (``default``; None: the engine's)."""
    return click.option(
        "--allreduce", type=click.Choice(["engine", "custom"]), default=default, show_default=default is not None,
        help="The TP AllReduce's backends, as measured: engine (vLLM's since v0.11: custom one-stage "
             "kernels, PyTorch symmetric memory, NCCL) or custom (a custom AllReduce's one- and two-stage "
             "kernels, then NCCL: SGLang's default, vLLM before v0.11, TensorRT-LLM's kernels)"
             + ("" if default else "; default: the engine's (engine for vllm, custom for sglang and trtllm)")
             + ".")


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(f)


def load_gpu(gpu: str, spec_files=(), fast: bool = False):
    """The spec of ``gpu``. ``fast``: a registered name may come from the validated cache
    (no pydantic or YAML import), which one-shot kernel predictions use."""
    if fast and not spec_files:
        import os

        from .. import fastpath

        if not (gpu.endswith((".yaml", ".yml")) or os.path.isfile(gpu)):
            view = fastpath.spec(gpu)
            if view is not None:
                return view
    from ..hardware import load_spec

    return load_spec(gpu, spec_files=tuple(spec_files))


def load_model(name: str, fast: bool = False):
    """The model config of ``name`` (a preset, a Hugging Face id, or a config.json path).
    ``fast``: a preset may come from the validated cache (no pydantic import)."""
    if fast:
        from .. import fastpath

        view = fastpath.model(name)
        if view is not None:
            return view
    from ..models.config import load_config

    return load_config(name)


def weights_of(cfg, weights: str | None) -> str:
    """The weight format: as given, else what the config's quantization_config stores (a
    note on stderr where it says so), else bf16."""
    if weights is not None:
        return weights.lower()
    found, note = cfg.weights_default()
    if note:
        click.echo(f"warning: {note}", err=True)
    return found.lower()


def load_profile(spec, profile, fast: bool = False):
    if fast:
        from .. import fastpath

        view = fastpath.profile(spec, profile)
        if view is not None:
            return view
    from ..calibration.profile import resolve_profile

    return resolve_profile(spec, profile)


def profile_label(prof) -> str:
    if prof.kind == "ideal":
        return "ideal (datasheet roofline)"
    if prof.kind == "transferred":
        label = f"transferred from {prof.provenance.get('transferred_from')}"
    else:
        label = f"fitted on {prof.gpu}"
    kept = prof.provenance.get("prior_kept") or {}
    if kept:  # families no record fitted: the base's parameters price them (else the ideal profile's)
        label += f"; {prof.provenance.get('base', 'ideal')} for want of records: {', '.join(kept)}"
    return label


# What Python prints for a number that is not finite: nan, inf, -inf, x inf (a factor).
# (not inside a word, a path or a file name: 'info', 'nan_to_num', 'runs/inf.html')
NONFINITE = re.compile(r"(?i)(?<![\w./\\-])x?[-+]?(nan|inf|infinity)(?![\w./\\-])")

_NOT_FINITE = ("the prediction is not a finite number; the sizes are too large for the "
               "arithmetic (keep each within its range, see --help)")


def echo(*lines) -> None:
    """Print lines of a report, all or none: a number that is not finite is never printed;
    it is one sentence on stderr (exit code 2) instead."""
    text = "\n".join(str(line) for line in lines)
    if NONFINITE.search(text):
        raise UserError(_NOT_FINITE)
    click.echo(text)


def emit_json(obj) -> None:
    try:
        text = json.dumps(obj, indent=2, default=_default, allow_nan=False)
    except ValueError:  # (a NaN or an infinity somewhere)
        raise UserError(_NOT_FINITE) from None
    click.echo(text)


def _default(x):
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def table(rows, headers=None, align=None) -> str:
    """A plain aligned text table."""
    rows = [[str(c) for c in r] for r in rows]
    if headers:
        rows = [list(headers)] + rows
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    align = align or ["<"] + [">"] * (len(widths) - 1)
    lines = []
    for j, r in enumerate(rows):
        lines.append("  ".join(f"{c:{a}{w}}" for c, a, w in zip(r, align, widths)).rstrip())
        if headers and j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def fail(message: str, code: int = 2):
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


__all__ = ["FRACTION", "MAX_BYTES", "MAX_COUNT", "MAX_SIZE", "MAX_WORK", "POS", "Real", "Size", "UserError",
           "check_product", "echo", "eager_option", "emit_json", "fail", "gpu_options", "json_option",
           "load_gpu", "load_profile", "parse_size", "profile_label", "profile_option", "table"]
