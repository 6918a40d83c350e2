"""The one rule for GPUs nobody measured, on plain data (no pydantic: the cold CLI path
uses it too): which measured GPU lends its fitted profile, and how the donor's kernel
parameters read on the target (its SMs, clock and bandwidth, its architecture)."""

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


# kernels that run below the copy's share of the HBM for the HBM's own sake, and keep their
# share on a GPU of the same architecture: PyTorch's cast of bf16 up to fp32 (it writes twice
# what it reads) took 1.39-1.43x as long on an H100 SXM as on the H200 at 25-50 MB, as the
# bandwidths would have it (benchmarks/measurements/h100-sxm/hf-ops.jsonl)
HBM_BOUND = {("memory", "copy:cast")}


# the bandwidth factors of a kernel's regimes that narrower loads or fewer thread blocks set
# (the SMs' side): a regime's share is memory_efficiency times its factor
REGIME_FACTORS = ("align8_memory", "align2_memory", "skinny_misaligned_memory", "gemv_misaligned_memory",
                  "unsplit_memory_efficiency")


def _sm_bound(p: dict, ceiling: float, factor: float) -> dict:
    """One key's parameters on the target: each share of the HBM below ``ceiling`` (the
    kernel's own, and each regime's: the kernel's times the regime's factor) times ``factor``
    (the donor's bandwidth over the target's, times the target's SMs x clock over the
    donor's), up to ``ceiling``."""
    if "memory_efficiency" not in p:  # (a family priced otherwise)
        return p
    e = p["memory_efficiency"]
    moved = e if e >= ceiling else min(ceiling, e * factor)
    out = {**p, "memory_efficiency": moved}
    for name in REGIME_FACTORS:
        f = p.get(name, 1.0)
        if f < 1 and e * f < ceiling:
            out[name] = min(1.0, min(ceiling, e * f * factor) / moved)
    return out


def _get(obj, name):
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


def _terms(spec) -> tuple:
    """(architecture, SMs x boost clock in Hz, HBM bytes/s) of a spec, a spec's plain data
    (``model_dump``) or the fast path's view of one."""
    chip, memory = _get(spec, "chip"), _get(spec, "memory")
    return (_get(spec, "architecture"), _get(chip, "sm_count") * (_get(chip, "boost_clock_hz") or 0.0),
            _get(memory, "hbm_bandwidth_bytes_per_s"))


def transferred_kernels(kernels: dict, donor, target) -> dict:
    """A donor profile's kernel parameters (as plain data) on the target GPU (``donor`` and
    ``target``: their specs, as objects or plain data).

    Within one architecture (the same SM), a kernel that the donor ran below the bandwidth
    of its contiguous copy (the HBM's practical ceiling, the copy's ``memory_efficiency``)
    is taken as bound by its SMs, not by the HBM: on the target it reaches the bandwidth it
    reached on the donor scaled by the SMs x clock, up to that ceiling's share of the
    target's own. So a kernel that stays in the SMs' limit keeps its time where the target
    has less bandwidth per SM (an H100 SXM: the same 132 SMs and clock as the H200, 70% of
    its bandwidth), and loses share where it has more. So does each regime whose share (the
    kernel's times the regime's factor, ``REGIME_FACTORS``: misaligned loads, GEMV kernels,
    attention that does not split its keys) is below the ceiling. Shares at the ceiling
    stay, as do those of ``HBM_BOUND``. Across architectures the shares are kept as they
    are, but for the attention kernels built for sm80, which reach more of an Ampere or
    Ada GPU's peak than of Hopper's (attention_kernels.sm80_scale)."""
    from ..attention_kernels import sm80_scale

    d_arch, d_sm, d_bw = _terms(donor)
    t_arch, t_sm, t_bw = _terms(target)
    ceiling = kernels.get("memory", {}).get("copy", {}).get("memory_efficiency")
    if d_arch == t_arch and ceiling and d_sm and t_sm and (d_sm, d_bw) != (t_sm, t_bw):
        factor = (d_bw / t_bw) * (t_sm / d_sm)
        kernels = {f: {k: p if (f, k) in HBM_BOUND else _sm_bound(p, ceiling, factor) for k, p in table.items()}
                   for f, table in kernels.items()}
    scale, cap = sm80_scale(d_arch, t_arch)
    if not scale:
        return kernels
    attention = dict(kernels.get("attention", {}))
    for key, factor in scale.items():
        if key in attention:
            p = attention[key]
            attention[key] = {**p, "compute_efficiency": min(cap, p.get("compute_efficiency", 1.0) * factor)}
    return {**kernels, "attention": attention}
