"""The one rule for GPUs nobody measured, on plain data (no pydantic: the cold CLI path
uses it too): which measured GPU lends its fitted profile, and how the donor's kernel
parameters read on the target's architecture."""

from __future__ import annotations


def transfer(profiles: dict, spec_name: str, vendor: str):
    """The one rule for GPUs nobody measured: the first measured GPU (by name) of the same
    vendor lends its fitted profile. ``profiles`` maps GPU name -> provenance; returns
    (donor name, the fields that make the donor's profile the target's), or None."""
    for gpu in sorted(profiles):
        prov = profiles[gpu] or {}
        if prov.get("vendor", "nvidia") == vendor:
            return gpu, {"gpu": spec_name, "kind": "transferred",
                         "provenance": {**prov, "transferred_from": gpu}}
    return None


def transferred_kernels(kernels: dict, donor_architecture: str, target_architecture: str) -> dict:
    """A donor profile's kernel parameters (as plain data) on another architecture: the
    attention kernels built for sm80 reach more of an Ampere or Ada GPU's peak than of
    Hopper's (attention_kernels.sm80_scale)."""
    from ..attention_kernels import sm80_scale

    scale, cap = sm80_scale(donor_architecture, target_architecture)
    if not scale:
        return kernels
    attention = dict(kernels.get("attention", {}))
    for key, factor in scale.items():
        if key in attention:
            p = attention[key]
            attention[key] = {**p, "compute_efficiency": min(cap, p.get("compute_efficiency", 1.0) * factor)}
    return {**kernels, "attention": attention}
