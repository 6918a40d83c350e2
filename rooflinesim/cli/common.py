"""Options and output helpers shared by the commands. Heavy modules are imported inside
the commands so that one prediction stays fast from a cold start."""

from __future__ import annotations

import json
import sys

import click

from ..errors import UserError


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
    if kept:  # families no record fitted: the ideal profile's parameters price them
        label += f"; ideal for want of records: {', '.join(kept)}"
    return label


def emit_json(obj) -> None:
    click.echo(json.dumps(obj, indent=2, default=_default))


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


__all__ = ["UserError", "eager_option", "emit_json", "fail", "gpu_options", "json_option", "load_gpu",
           "load_profile", "profile_label", "profile_option", "table"]
