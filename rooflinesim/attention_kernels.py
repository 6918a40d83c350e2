"""Which attention kernel runs on a GPU: one resolution for every path.

A user names an attention class (``fa3``, ``fa2``, ``naive``), a measured backend
(``sdpa-cudnn``, ``sdpa-flash``, ``sdpa-efficient``), or nothing. The GPU's architecture
decides what that means there (``rooflinesim/data/attention_kernels.json``): nothing is
the class that GPU's engines and PyTorch default to, a class is the kernel that runs it
there, and a class or backend the GPU does not have is an error. The kernel found names
the timing rule's regimes and the profile keys, for pricing, calibration and validation
alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .errors import UserError

FALLBACK_ARCHITECTURE = "ampere"  # an architecture the data does not name: FA2-class kernels


@lru_cache(maxsize=1)
def _table() -> dict:
    return json.loads((Path(__file__).parent / "data" / "attention_kernels.json").read_text())


@dataclass(frozen=True)
class AttentionKernel:
    """The kernel an attention op runs on one GPU."""

    variant: str  # its class: fa3, fa2 or naive
    backend: str  # the measured kernel whose regimes and profile parameters price it
    label: str  # for output: what runs, and why
    default: bool  # chosen as the GPU's default (no class or backend named)

    def describe(self) -> str:
        return f"{self.variant} attention ({self.label})"


@lru_cache(maxsize=256)
def _resolve(variant, backend, gpu: str, architecture: str) -> AttentionKernel:
    table = _table()
    known = table["architectures"].get(architecture)
    arch = known or table["architectures"][FALLBACK_ARCHITECTURE]
    where = f"{gpu} ({architecture})"
    if backend is not None:
        info = table["backends"].get(backend)
        if info is None:
            raise UserError(f"unknown attention backend {backend!r}; known: {', '.join(table['backends'])}")
        if backend not in arch["backends"]:
            ok = ", ".join(arch["backends"])
            raise UserError(f"attention backend {backend} is not measured for {where}: use one of {ok}")
        return AttentionKernel(info["class"], backend, info["label"], False)
    default = variant is None
    variant = arch["default"] if default else variant
    kernel = arch["kernels"].get(variant)
    if kernel is None:
        if variant == "fa3":
            raise UserError(f"FlashAttention-3-class attention (fa3) does not run on {where}: it needs a Hopper "
                            f"or Blackwell GPU; use --attention {arch['default']}, the default there")
        raise UserError(f"attention class {variant!r} is not one of {', '.join(arch['kernels'])} on {where}")
    label = arch.get("label") if kernel != "naive" else None
    label = label or table["backends"][kernel]["label"]
    if known is None:
        label += f"; architecture {architecture!r} is not in the attention table, FlashAttention-2 class assumed"
    if default:
        label += f"; the default on {architecture}"
    return AttentionKernel(variant, kernel, label, default)


def resolve(variant, backend, spec) -> AttentionKernel:
    """The kernel that attention class ``variant`` (None: the GPU's default) or measured
    ``backend`` (which wins when given) runs on ``spec``'s GPU; a UserError where the
    GPU has no such kernel."""
    return _resolve(variant, backend, spec.name, getattr(spec, "architecture", "") or "")


def sm80_scale(donor_architecture: str, target_architecture: str) -> tuple[dict, float]:
    """({profile key: factor} for the attention kernels built for sm80 whose compute
    efficiency a profile fitted on the donor's architecture raises on the target's
    (the data's 'sm80_kernels'), and the cap); empty where the rule does not apply."""
    rule = _table()["sm80_kernels"]
    if donor_architecture not in rule["donor"] or target_architecture not in rule["target"]:
        return {}, 1.0
    return dict.fromkeys(rule["keys"], 1.0 / rule["hopper_share"]), 1.0


def from_record(name) -> dict:
    """Attention op keywords for the backend a measurement record names: a measured
    backend as itself, PyTorch's math backend as the unfused class, and anything else
    (none, "sdpa-default", "torch", ...) as what SDPA's own dispatch picks, which is the
    GPU's default class."""
    if name in _table()["backends"]:
        return {"backend": name}
    if name == "sdpa-math":
        return {"variant": "naive"}
    return {}


def kernel_of(op, spec, profile=None) -> AttentionKernel:
    """The kernel an Attention op runs on ``spec``'s GPU: MLA's latent decode, with no class
    or backend named, the architecture's MLA decode kernel where it has one (and, given a
    ``profile``, where that profile has the kernel's parameters: else the GPU's default
    kernel prices it, as before the kernel was measured)."""
    if op.latent and op.variant is None and op.backend is None:
        mla = mla_decode_backend(spec)
        if mla is not None and (profile is None or profile.find("attention", mla) is not None):
            k = resolve(None, mla, spec)
            return AttentionKernel(k.variant, k.backend, f"{k.label}; the engines' MLA decode on "
                                   f"{getattr(spec, 'architecture', '')}", True)
    return resolve(op.variant, op.backend, spec)


def mla_decode_backend(spec) -> str | None:
    """The kernel ``spec``'s architecture runs MLA's latent decode with (None: its default class)."""
    arch = _table()["architectures"].get(getattr(spec, "architecture", "") or "")
    return (arch or {}).get("mla_decode")
