"""``predict``: the timing of one op on a GPU under a calibration profile, replayed in a
CUDA graph or launched eagerly. It hands the op to its family's rule (:mod:`.rules`) and,
for eager launches, adds the host side (:mod:`.eager`)."""

from __future__ import annotations

from .eager import eager_timing
from .rules import rule_for
from .timing import Timing


def predict(op, spec, profile=None, eager: bool = False) -> Timing:
    """Latency of ``op`` on ``spec`` under ``profile`` (the ideal roofline when None),
    replayed in a CUDA graph, or with ``eager`` launched from Python one call at a time
    (the host side in :mod:`.eager`)."""
    if profile is None:
        from .calibration.profile import IDEAL  # (imported here: it imports pydantic)

        profile = IDEAL
    t = rule_for(op).timing(op, spec, profile)
    return eager_timing(op, spec, profile, t) if eager else t
