"""`rooflinesim specs ...`: the GPU spec registry."""

from __future__ import annotations

import click

from .common import echo, emit_json, json_option, table


@click.group()
def specs():
    """List, show and validate GPU specs."""


@specs.command(name="list")
@json_option
def list_(as_json):
    """Bundled GPUs (and those in $ROOFLINESIM_SPECS_DIR) with their headline figures."""
    from ..hardware import aliases, load_spec, spec_names
    from ..units import format_bytes, format_rate

    names = spec_names()
    alias_of = {}
    for a, target in aliases().items():
        alias_of.setdefault(target, []).append(a)
    rows, out = [], []
    for name in names:
        s = load_spec(name)
        bf16 = s.compute.peak_flops_per_s.get("bf16")
        fp8 = s.compute.peak_flops_per_s.get("fp8")
        out.append({"name": name, "full_name": s.full_name, "aliases": sorted(alias_of.get(name, [])),
                    "device_names": list(s.device_names),
                    "bf16_flops_per_s": bf16, "fp8_flops_per_s": fp8,
                    "hbm_bandwidth_bytes_per_s": s.memory.hbm_bandwidth_bytes_per_s,
                    "capacity_bytes": s.memory.capacity_bytes})
        rows.append((name, s.full_name,
                     format_rate(bf16, "FLOP/s") if bf16 else "-",
                     format_rate(fp8, "FLOP/s") if fp8 else "-",
                     format_rate(s.memory.hbm_bandwidth_bytes_per_s, "B/s"),
                     format_bytes(s.memory.capacity_bytes, binary=False),
                     ", ".join(sorted(alias_of.get(name, [])))))
    if as_json:
        emit_json(out)
        return
    echo(table(rows, headers=("name", "GPU", "bf16 dense", "fp8 dense", "HBM", "memory",
                                    "aliases"), align=["<", "<", ">", ">", ">", ">", "<"]))


@specs.command()
@click.argument("name")
@click.option("--spec-file", "spec_files", multiple=True, type=click.Path(dir_okay=False))
@json_option
def show(name, spec_files, as_json):
    """One GPU's spec, in SI units, with ridge points per dtype."""
    from ..hardware import load_spec
    from ..units import format_bytes, format_rate

    s = load_spec(name, spec_files=tuple(spec_files))
    if as_json:
        emit_json(s.model_dump())
        return
    click.echo(f"{s.name}: {s.full_name} ({s.vendor} {s.architecture})")
    if s.device_names:
        click.echo(f"device names: {', '.join(s.device_names)}")
    rows = []
    for rate, v in s.compute.peak_flops_per_s.items():
        rows.append((f"dense {rate}", format_rate(v, "FLOP/s"),
                     f"ridge {v / s.memory.hbm_bandwidth_bytes_per_s:.1f} FLOP/B"))
    if s.compute.sfu_ops_per_s:
        rows.append(("special functions", format_rate(s.compute.sfu_ops_per_s, "op/s"),
                     "derived" if s.compute.sfu_estimated else ""))
    m = s.memory
    rows += [
        ("memory", f"{format_bytes(m.capacity_bytes, binary=False)} {m.kind}",
         f"= {format_bytes(m.capacity_bytes, binary=True)}"),
        ("HBM bandwidth", format_rate(m.hbm_bandwidth_bytes_per_s, "B/s"), ""),
        ("L2", format_bytes(m.l2_bytes, binary=False),
         f"CUDA-visible {format_bytes(m.l2_visible_bytes, binary=True)}" if m.l2_visible_bytes else ""),
    ]
    if m.l2_bandwidth_bytes_per_s:
        rows.append(("L2 bandwidth", format_rate(m.l2_bandwidth_bytes_per_s, "B/s"),
                     "estimate" if m.l2_bandwidth_estimated else ""))
    c, i = s.chip, s.interconnect
    rows += [
        ("SMs" if s.vendor == "nvidia" else "CUs", str(c.sm_count), ""),
        ("boost clock", f"{c.boost_clock_hz / 1e6:.0f} MHz" if c.boost_clock_hz else "-", ""),
        ("link", f"{i.link}, {format_rate(i.link_bandwidth_bytes_per_s, 'B/s')} per direction"
         if i.link_bandwidth_bytes_per_s else i.link,
         f"{i.gpus_per_node} GPUs per node" + (", NVLink SHARP" if i.nvlink_sharp else "")),
        ("PCIe", f"Gen{i.pcie_generation}", format_rate(i.pcie_bandwidth_bytes_per_s, "B/s")
         + " per direction"),
    ]
    echo(table(rows, align=["<", "<", "<"]))
    click.echo("sources:")
    for group in (s.compute, s.memory, s.chip, s.interconnect):
        click.echo(f"  {type(group).__name__.lower()}: {group.source}")


@specs.command()
@click.argument("file", type=click.Path(dir_okay=False))
def validate(file):
    """Check a spec YAML file; exit 0 when valid, 2 with the first problem otherwise."""
    from ..hardware import validate_spec_file

    s = validate_spec_file(file)
    click.echo(f"{file}: valid spec for {s.name} ({s.full_name})")


@specs.command()
def schema():
    """The JSON Schema of the spec file format."""
    from ..hardware import json_schema

    emit_json(json_schema())
