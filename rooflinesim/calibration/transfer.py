"""Profiles for GPUs nobody measured: take the fitted fractions of a measured GPU of the
same vendor (the fractions of peak and bandwidth, the fixed kernel floors) and apply
them through the target's own spec."""

from __future__ import annotations

from .profile import IDEAL, Profile, bundled_profile, bundled_profiles


def transferred_profile(spec) -> Profile:
    from ..fastpath import transfer

    profiles = {name: bundled_profile(name) for name in bundled_profiles()}
    found = transfer({n: p.provenance for n, p in profiles.items() if p is not None},
                     spec.name, spec.vendor)
    if found is None:
        return IDEAL
    donor, update = found
    from ..fastpath import transferred_kernels
    from ..hardware import load_spec
    from .profile import KernelParams

    base = profiles[donor]
    plain = {f: {k: p.model_dump() for k, p in table.items()} for f, table in base.kernels.items()}
    moved = transferred_kernels(plain, load_spec(donor).architecture, spec.architecture)
    kernels = {f: {k: (base.kernels[f][k] if moved[f][k] == plain[f][k] else KernelParams(**moved[f][k]))
                   for k in table} for f, table in moved.items()}
    return base.model_copy(update={**update, "kernels": kernels})
