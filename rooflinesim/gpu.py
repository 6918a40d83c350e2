"""What every GPU spec object answers, the validated model (``hardware.GpuSpec``) and the
cached view (``fastpath.SpecView``) alike: peak rates by dtype, ridge points, the usable
L2. Kept apart and light (no pydantic) so that both can use it."""

from __future__ import annotations

from .dtypes import dtype as _dtype
from .dtypes import names as _dtype_names
from .errors import UserError


class SpecMethods:
    """What every GPU spec object answers, validated model or cached view alike."""

    def supports(self, dtype_name: str) -> bool:
        """Whether the spec has a peak rate for matrix math in this dtype."""
        return _dtype(dtype_name).rate in self.compute.peak_flops_per_s

    def supported_dtypes(self) -> list[str]:
        return [n for n in _dtype_names() if self.supports(n)]

    def peak(self, dtype_name: str) -> float:
        """Dense peak FLOP/s (OP/s for integers) of matrix math in ``dtype_name``."""
        d = _dtype(dtype_name)
        try:
            return self.compute.peak_flops_per_s[d.rate]
        except KeyError:
            raise UserError(
                f"{self.name} has no {d.name} tensor-core rate; "
                f"it supports: {', '.join(self.supported_dtypes())}"
            ) from None

    def ridge_point(self, dtype_name: str, level: str = "hbm") -> float:
        """Arithmetic intensity (FLOP/byte) where the roofline turns: peak / bandwidth."""
        if level == "hbm":
            bandwidth = self.memory.hbm_bandwidth_bytes_per_s
        elif level == "l2":
            bandwidth = self.memory.l2_bandwidth_bytes_per_s
            if bandwidth is None:
                raise UserError(f"{self.name} has no l2_bandwidth in its spec")
        else:
            raise UserError(f"unknown memory level '{level}'; known: hbm, l2")
        return self.peak(dtype_name) / bandwidth

    @property
    def l2_effective_bytes(self) -> float:
        """L2 size a kernel can use: the device-query size when known, else the datasheet's."""
        return self.memory.l2_visible_bytes or self.memory.l2_bytes
