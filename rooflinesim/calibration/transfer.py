"""Profiles for GPUs nobody measured: take the fitted fractions of a measured GPU of the
same vendor (the fractions of peak and bandwidth, the fixed kernel floors) and apply
them through the target's own spec."""

from __future__ import annotations

from .profile import IDEAL, Profile, bundled_profile, bundled_profiles


def transferred_profile(spec) -> Profile:
    donors = []
    for name in bundled_profiles():
        prof = bundled_profile(name)
        if prof is not None and prof.provenance.get("vendor", "nvidia") == spec.vendor:
            donors.append(prof)
    if not donors:
        return IDEAL
    donor = donors[0]
    return donor.model_copy(update={
        "gpu": spec.name,
        "kind": "transferred",
        "provenance": {**donor.provenance, "transferred_from": donor.gpu},
    })
