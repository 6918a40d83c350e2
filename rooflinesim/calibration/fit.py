"""Fit a calibration profile to measurements, and measure its error on held-out shapes.

Each fit group is one kernel family (and dtype or backend) with a few physical
parameters: the achievable fraction of peak compute and of HBM bandwidth, a launch
floor, the sharpness of the roofline corner, and shape losses (k fill per tile,
misaligned strides, key-block fill in attention, bandwidth ramp of small transfers).
Parameters are fitted by robust least squares on log(predicted / measured), so every
record counts by its relative error. Groups are fitted in order (memory kernels, then
GEMMs, then attention, then MoE layers that reuse both, then collectives).

Error is reported by k-fold cross-validation over *shapes*: all records of one shape
fall in the same fold, so a shape is never predicted by a fit that saw it.
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from ..attention_kernels import kernel_of
from ..errors import UserError
from ..ops import Attention, Gemm
from ..rules import ATTENTION_REGIMES, GEMM_REGIMES, attention_regimes, gemm_regime_mask
from ..rules.attention import OWN_KEY_ONLY
from .folds import held_out
from .hf import fit_hf_host
from .host import fit_host
from .profile import FAMILIES, FAMILY_PARAMS, CollectiveParams, HostParams, Profile, fit_ranges
from .records import COLLECTIVES, Measurements, Unpredictable, is_graph_memcpy, measured_on, to_op
from .validate import is_eager, predicted, reasons, stats

# name -> (initial value, lower bound, upper bound, typical scale), as the profile's
# fields state them (profile.fit_ranges: the one place they are written)
_RANGES = {name: r for params in (*FAMILY_PARAMS.values(), CollectiveParams)
           for name, r in fit_ranges(params).items()}
PARAMS = {name: (r["prior"], *r["bounds"], r["scale"]) for name, r in _RANGES.items()}


@dataclass
class Group:
    """One fit: which records, where the parameters go, which are free."""

    name: str  # e.g. "gemm/bf16"
    family: str  # profile section: a kernel family, or "collective"
    key: str  # dtype, backend or kind inside the family
    select: object  # rec -> bool
    free: tuple  # parameter names fitted
    fixed: dict = field(default_factory=dict)  # other fields of the family's parameters
    also: tuple = ()  # (family, key) that receive the same parameters
    inherit: tuple | None = None  # (family, key) whose fitted parameters are the defaults
    inherit_only: tuple = ()  # the fields taken from inherit (empty: all of them)
    # fitted together with the group's own: parameters named "<prefix>.<name>" go to
    # (family, key), whose defaults are the fitted parameters of (family, key) inherit
    linked: tuple = ()  # ((prefix, family, key, inherit), ...)


# What the kernel names and counts of H200 measurements show of each attention kernel:
# its query tile and whether (and how) it splits the keys over thread blocks.
_NO_SPLIT = {"split_kv_max_query": 0}
_DECODE = {"compute_efficiency": 0.5, "causal_overhead": 0.0, "split_kv_min_keys": 512}
ATTENTION_FIXED = {
    "sdpa-flash": {"tile_m": 64, "wave_quantization": True, "split_kv": "fa2",
                   "split_kv_max_query": 1 << 30},
    "sdpa-cudnn": {"tile_m": 128, "head_dim_tile": 64, "wave_quantization": True, **_NO_SPLIT},
    # the decode kernels are memory-bound on every measured shape, which leaves their
    # matrix rate unmeasured: they issue Ampere-style mma.sync, about half Hopper's
    # dense rate; single-token queries have no causal diagonal; and they split the keys
    # (a reduction kernel follows) only for caches longer than 512 keys
    "sdpa-cudnn:decode": {"tile_m": 16, "head_dim_tile": 64, "wave_quantization": True,
                          "split_kv_max_query": 1, **_DECODE},
    "sdpa-cudnn:decode_wide": {"tile_m": 16, "head_dim_tile": 64, "wave_quantization": True,
                               "split_kv_max_query": 1, **_DECODE},
    "sdpa-efficient": {"tile_m": 64, "wave_quantization": True, **_NO_SPLIT},
    # FlashMLA: 64 query heads a block (128 rows of the cost model's MQA, twice the heads);
    # its scheduler shares every sequence's key blocks out over parts that fill the SMs,
    # however short the cache; no causal diagonal. The blocks of a part's query tiles run at
    # once over the same key blocks, so a second tile's reads come from the L2: at 128 heads
    # it ran at 575 TFLOP/s on an H100 (probe-mla.jsonl), its compute bound (FlashMLA's
    # README: up to 580-660 TFLOP/s on an H800), not twice its cache read
    "flashmla": {"tile_m": 128, "wave_quantization": False, "split_kv": "flashmla", "split_kv_max_query": 1,
                 "causal_overhead": 0.0, "seq_overhead": 0.0, "critical_path": 0.0, "walk_dim": 0.0,
                 "block_s": 0.0, "unsplit_memory_efficiency": 1.0, "reread_share": 0.0, "corner": None},
    "sdpa-efficient:wide": {"tile_m": 32, "wave_quantization": True, **_NO_SPLIT},
    "sdpa-flash:causal_split": {"tile_m": 64, "wave_quantization": True, "split_kv": "fa2",
                                "split_kv_max_query": 1 << 30},
    None: {"tile_m": 64, "wave_quantization": True, "split_kv_max_query": 1},
}


# costs of one backend's kernels (and of its regimes'): FlashAttention-2's combine walks
# its splits; the CUTLASS kernel's critical path pays a fixed cost per block of keys
ATTENTION_FREE = {"sdpa-flash": ("combine_split_s",), "sdpa-efficient": ("key_block_s",),
                  "flashmla": ("key_block_s", "combine_split_s")}

# regimes with few measurements start from their backend's fitted parameters and fit these
REGIME_FREE = {"sdpa-flash:causal_split": ("compute_efficiency", "critical_path")}

LOG_PARAMS = {name for name, r in _RANGES.items() if r["log"]}


# GEMMs with row strides under 16 bytes (rules.GEMM_REGIMES), fitted on their own: the
# skinny ones (at most rules.SKINNY_ROWS rows) by the dense GEMM formulas with their own
# parameters, the others as the fastest of a few tile configurations. A regime with fewer
# than REGIME_MIN_RECORDS measurements of a format is fitted with the coarser one it refines.
GEMM_ODD_FREE = ("compute_efficiency", "memory_efficiency", "launch_s", "corner", "k_overhead",
                 "align2_memory", "skinny_misaligned_memory", "gemv_misaligned_memory",
                 "split_k_ratio", "align2_split_k_ratio", "k_element_s", "memory_latency_s")
GEMM_TILED_FREE = ("compute_efficiency", "element_load_rate", "cta_share", "k_overhead", "launch_s",
                   "memory_efficiency", "corner", "split_k_s")
_NO_CLASS_FACTORS = {"align2_compute": 1.0, "align2_memory": 1.0, "align8_compute": 1.0, "align8_memory": 1.0}
GEMM_REGIME_FITS = {  # regime: (free parameters, fixed ones)
    "align2": (GEMM_ODD_FREE, {"tile_m": 64, "tile_n": 64, "align2_compute": 1.0}),
    "align8": (("compute_efficiency", "memory_efficiency", "launch_s", "corner", "skinny_misaligned_memory",
                "gemv_misaligned_memory", "split_k_ratio", "k_element_s"),  # (few measured: fewer)
               {"tile_m": 64, "tile_n": 64, **_NO_CLASS_FACTORS}),
    "align2_tiled": (GEMM_TILED_FREE, {}),
    "align8_tiled": (GEMM_TILED_FREE, {}),
    "simt_tiled": (GEMM_TILED_FREE, {}),
}
CLASS_FREE = ("align8_compute", "align8_memory", "skinny_misaligned_memory")  # (of 4-8-byte strides)
GEMM_REFINES = {"simt_tiled": "", "align2_tiled": "align2", "align8_tiled": "align8", "align8": ""}  # in order
GEMM_FORMATS = (("bf16", "fp16"), ("fp8",), ("tf32",), ("fp32",), ("int8",))  # one fit each
REGIME_MIN_RECORDS = 20
MIN_RECORDS = 3  # the fewest predictable records any group is fitted on


def _regime(rec, spec) -> tuple:
    """(kernel, regime) the timing rules price a record's op in: for attention, the
    kernel it runs on the GPU (attention_kernels) and a regime of that kernel; for a
    GEMM, "" and its stride regime (rules.GEMM_REGIMES); else ("", ""). (None, None)
    when the record cannot be predicted."""
    try:
        op = to_op(rec)
        if isinstance(op, Attention):
            backend = kernel_of(op, spec).backend
            return backend, next(name for name, mask in attention_regimes(op, spec.chip.sm_count, backend)
                                 if mask.any())
    except (Unpredictable, UserError):
        return None, None
    if isinstance(op, Gemm):
        return "", next((name for name, _, _ in GEMM_REGIMES if gemm_regime_mask(op, name)), "")
    return "", ""


def _groups(meas: Measurements, spec) -> list[Group]:
    recs = meas.records
    seen = lambda op, f: sorted({f(r) for r in recs if r["op"] == op})  # noqa: E731
    found = {id(r): _regime(r, spec) for r in recs if r["op"] in ("gemm", "attention")}
    regimes = {i: reg for i, (_, reg) in found.items()}
    kernel = lambda r: found.get(id(r), (None,))[0]  # noqa: E731  (attention: the kernel it runs)
    classed = set()  # GEMMs with 4-8-byte strides left to their format's main fit
    for dts in GEMM_FORMATS:  # a regime measured too little is fitted with the one it refines
        for name, coarse in GEMM_REFINES.items():
            ids = [id(r) for r in recs if r["op"] == "gemm" and r.get("dtype", "bf16") in dts
                   and regimes.get(id(r)) == name]
            if len(ids) < REGIME_MIN_RECORDS:
                regimes.update(dict.fromkeys(ids, coarse))
                classed.update(ids if coarse == "" else ())
    regime = lambda r: regimes.get(id(r)) or ""  # noqa: E731
    out = [
        # a copy kernel: 16-bit buffers run its 16-byte vector loads whatever their size's
        # alignment (the kernel names: vectorized_elementwise_kernel<8>), odd byte counts
        # a 4-byte one (<4>): the latter alone pay align2_memory (rules.memory)
        Group("copy", "memory", "copy", lambda r: r["op"] == "copy" and not is_graph_memcpy(r)
              and r.get("layout", "contiguous") == "contiguous",
              ("memory_efficiency", "launch_s", "memory_latency_s", "memory_latency_bytes",
               "align2_memory", "align2_launch_s"), fixed={"align8_memory": 1.0}),
        # PyTorch's generic elementwise kernel over a strided or broadcast source (repeat_kv's
        # expand-and-reshape) and torch.roll: their own bandwidth, the contiguous copy's
        # fixed costs (kernels of transformers' profiled forwards, benchmarks/hf_forward.py)
        # (the roll's records so far are of one size: its bandwidth alone)
        *[Group(f"copy:{layout}", "memory", f"copy:{layout}",
                lambda r, layout=layout: r["op"] == "copy" and r.get("layout") == layout,
                free, inherit=("memory", "copy"))
          for layout, free in (("strided", ("memory_efficiency", "launch_s")),
                               ("cast", ("memory_efficiency", "launch_s")),
                               ("roll", ("memory_efficiency",)))],
        # a contiguous copy_ in a CUDA graph runs as a memcpy node: its own fixed costs,
        # misaligned paths and a slowdown past a size (benchmarks/copy_modes.py)
        Group("copy:graph_memcpy", "memory", "copy:graph_memcpy", is_graph_memcpy,
              ("memory_efficiency", "launch_s", "memory_latency_s", "memory_latency_bytes",
               "align8_memory", "align2_memory", "large_bytes", "large_memory_efficiency",
               "align2_launch_s")),
        Group("rmsnorm", "memory", "rmsnorm", lambda r: r["op"] == "rmsnorm",
              ("memory_efficiency", "launch_s", "memory_latency_s", "memory_latency_bytes",
               "row_element_s", "rows_per_sm", "corner", "row_bandwidth_elements", "row_double_bytes"),
              also=(("memory", "layernorm"), ("memory", "softmax"), ("memory", "add"),
                    ("memory", "silu_mul"), ("memory", "gather"), ("memory", "default"))),
        # the residual add fused into RMSNorm as the engines run it (a Triton program per row,
        # benchmarks/measure_h200.sh norm1): its own rates and row costs, the norm's corner
        Group("add_rmsnorm", "memory", "add_rmsnorm", lambda r: r["op"] == "add_rmsnorm",
              ("memory_efficiency", "launch_s", "memory_latency_s", "memory_latency_bytes",
               "row_element_s", "rows_per_sm", "row_bandwidth_elements", "row_double_bytes"),
              inherit=("memory", "rmsnorm")),
    ]
    gemm_free = ("compute_efficiency", "memory_efficiency", "launch_s", "corner", "k_overhead",
                 "align8_compute", "align8_memory", "skinny_misaligned_memory", "split_k_ratio",
                 "k_element_s", "split_k_s", "memory_latency_s", "memory_latency_bytes")
    for dts in GEMM_FORMATS:
        present = [d for d in dts if d in seen("gemm", lambda r: r.get("dtype", "bf16"))]
        if not present:
            continue
        # 16-bit formats run the same kernels: one fit serves both; the other formats,
        # with fewer odd shapes measured, take the alignment and k-loop losses from it
        first = len(dts) > 1
        own = gemm_free[:5] + ("split_k_ratio", "memory_latency_s")
        # the 4-8-byte class factors, where such GEMMs are left to this fit (else their
        # own regime's parameters price them, and the factors keep their defaults)
        if any(id(r) in classed for r in recs if r["op"] == "gemm" and r.get("dtype", "bf16") in dts):
            free = gemm_free if first else own + CLASS_FREE
        else:
            free = tuple(f for f in (gemm_free if first else own) if f not in CLASS_FREE)
        out.append(Group(f"gemm/{'+'.join(present)}", "gemm", present[0],
                         lambda r, dts=dts: r["op"] == "gemm" and r.get("dtype", "bf16") in dts
                         and regime(r) == "", free,
                         fixed={"tile_m": 64, "tile_n": 128},
                         also=tuple(("gemm", d) for d in present[1:]),
                         inherit=None if first else ("gemm", "bf16")))
        # strides under 16 bytes: other kernels, fitted on their own (the regimes are
        # rules.GEMM_REGIMES: skinny and tiled, element-aligned and 4-8-byte strides)
        for name, (free, fixed) in GEMM_REGIME_FITS.items():
            if any(r["op"] == "gemm" and r.get("dtype", "bf16") in dts and regime(r) == name for r in recs):
                out.append(Group(f"gemm/{'+'.join(present)}:{name}", "gemm", f"{present[0]}:{name}",
                                 lambda r, dts=dts, name=name: r["op"] == "gemm"
                                 and r.get("dtype", "bf16") in dts and regime(r) == name, free, fixed=fixed,
                                 also=tuple(("gemm", f"{d}:{name}") for d in present[1:])))
    attention_free = ("compute_efficiency", "memory_efficiency", "launch_s", "corner",
                      "seq_overhead", "critical_path", "walk_dim", "block_s", "unsplit_memory_efficiency",
                      "causal_overhead", "softmax_overlap", "vector_efficiency")
    for be in seen("attention", lambda r: kernel(r) or ""):
        if not be:
            continue  # (records that cannot be predicted)
        own = ATTENTION_FIXED.get(be, ATTENTION_FIXED[None])
        free = tuple(f for f in attention_free + ATTENTION_FREE.get(be, ()) if f not in own)
        out.append(Group(f"attention/{be}", "attention", be,
                         lambda r, be=be: r["op"] == "attention"
                         and kernel(r) == be and regime(r) == "",
                         free, fixed=own))
        for name, _ in ATTENTION_REGIMES.get(be, ()):
            fixed = ATTENTION_FIXED[f"{be}:{name}"]
            few = REGIME_FREE.get(f"{be}:{name}")  # (few records: the backend's fit, and a few more)
            out.append(Group(f"attention/{be}:{name}", "attention", f"{be}:{name}",
                             lambda r, be=be, name=name: r["op"] == "attention"
                             and kernel(r) == be and regime(r) == name,
                             few or tuple(f for f in free if f not in fixed), fixed=fixed,
                             inherit=("attention", be) if few else None))
    if any(r["op"] == "moe" for r in recs):
        # the expert GEMMs (from the dense GEMMs' launch floor and memory latency), and
        # with them (one fit: each trades off against the others) the rows the harness's
        # layer moves with PyTorch's index kernels (index_select dispatch, index_add
        # combine: atomics) at a bandwidth of their own, and the fixed cost of its small
        # routing kernels (sorts, scans, fills); engines' fused permutation kernels keep
        # the memory kernels' own
        out.append(Group("moe", "grouped_gemm", "bf16", lambda r: r["op"] == "moe",
                         ("compute_efficiency", "memory_efficiency", "corner",
                          "k_overhead", "indexed.memory_efficiency", "bookkeeping.launch_s"),
                         fixed={"tile_m": 128}, inherit=("gemm", "bf16"),
                         inherit_only=("launch_s", "memory_latency_s", "memory_latency_bytes"),
                         linked=(("indexed", "memory", "indexed", ("memory", "rmsnorm")),
                                 ("bookkeeping", "memory", "bookkeeping", ("memory", "rmsnorm")))))
    if any(r["op"] == "grouped_gemm" and r.get("dtype") == "fp8" for r in recs):
        # PyTorch's fp8 grouped GEMM measured alone (benchmarks/measure_h200.sh grouped1): its
        # own rates, k overhead and corner, the bf16 grouped GEMM's fixed costs, under its own
        # key (an engine's fused fp8 MoE kernel is another kernel: MoE layers keep the dtype's
        # fit); the bf16 ones measured beside them are left to check the layers' fit
        out.append(Group("grouped_gemm/fp8:scaled_grouped_mm", "grouped_gemm", "fp8:scaled_grouped_mm",
                         lambda r: r["op"] == "grouped_gemm" and r.get("dtype") == "fp8",
                         ("compute_efficiency", "memory_efficiency", "corner", "k_overhead"),
                         fixed={"tile_m": 128}, inherit=("grouped_gemm", "bf16"),
                         inherit_only=("launch_s", "memory_latency_s", "memory_latency_bytes")))
    if any(r["op"] == "block_gemm" for r in recs):
        # Linear layers of checkpoints stored in 128 x 128 fp8 blocks, in the engines'
        # Triton kernel class (benchmarks/measure_h200.sh block1): no split k, so a few output
        # tiles walk the whole k in series (k_element_s); the fp8 fit's memory latency size
        out.append(Group("gemm/fp8:triton-block-fp8", "gemm", "fp8:triton-block-fp8",
                         lambda r: r["op"] == "block_gemm",
                         ("compute_efficiency", "memory_efficiency", "launch_s", "corner", "k_overhead",
                          "k_element_s", "memory_latency_s"),
                         fixed={"tile_m": 64, "tile_n": 128, "split_k_ratio": 0.0}, inherit=("gemm", "fp8"),
                         inherit_only=("memory_latency_bytes",)))
    if any(r["op"] == "fused_moe" and r.get("dtype", "fp8") == "fp8" for r in recs):
        # the engines' fused MoE kernel over experts stored in 128 x 128 fp8 blocks (block1):
        # its own rates, k overhead, corner and launch floor; the bf16 grouped GEMM's
        # memory latency
        out.append(Group("grouped_gemm/fp8:triton-fused-moe-fp8", "grouped_gemm", "fp8:triton-fused-moe-fp8",
                         lambda r: r["op"] == "fused_moe" and r.get("dtype", "fp8") == "fp8",
                         ("compute_efficiency", "memory_efficiency", "corner", "k_overhead", "launch_s",
                          "k_element_s"),
                         # (no 128-row padding: the kernel's row tile follows the rows per
                         # expert, 16 for a few, and a padded tile's rows cost little then)
                         fixed={"tile_m": 1}, inherit=("grouped_gemm", "bf16"),
                         inherit_only=("memory_latency_s", "memory_latency_bytes")))
    if any(r["op"] == "fused_moe" and r.get("dtype") == "bf16" for r in recs):
        # the same kernel over experts stored in 16 bits (benchmarks/measure_h200.sh moe16), the
        # engines' for bf16 and fp16 MoE checkpoints: its own rates, k overhead, corner, launch
        # floor and serial k walk, as the fp8 one's; the bf16 grouped GEMM's memory latency
        out.append(Group("grouped_gemm/bf16:triton-fused-moe", "grouped_gemm", "bf16:triton-fused-moe",
                         lambda r: r["op"] == "fused_moe" and r.get("dtype") == "bf16",
                         ("compute_efficiency", "memory_efficiency", "corner", "k_overhead", "launch_s",
                          "k_element_s"),
                         fixed={"tile_m": 1}, inherit=("grouped_gemm", "bf16"),
                         inherit_only=("memory_latency_s", "memory_latency_bytes")))
    if any(r["op"] == "decoder_layer" for r in recs):
        # whole layers fit one thing the kernels alone cannot show: what a GEMM that is
        # not compute-bound costs after other kernels rather than after copies of itself
        out.append(Group("sequence", "sequence", "gemm", lambda r: r["op"] == "decoder_layer",
                         ("dependent_s",)))
    for kind in seen_any(recs, COLLECTIVES):
        out.append(Group(kind, "collective", kind, lambda r, kind=kind: r["op"] == kind,
                         ("latency_s", "link_efficiency", "fill_latency_s", "fill_bytes")))
    return out


def seen_any(recs, ops):
    return [op for op in ops if any(r["op"] == op for r in recs)]


def _with(profile: Profile, group: Group, values: dict) -> Profile:
    """A copy of ``profile`` with the group's parameters set."""
    kernels = {f: dict(t) for f, t in profile.kernels.items()}
    collectives = dict(profile.collectives)
    own = {n: v for n, v in values.items() if "." not in n}
    if group.family == "collective":
        collectives[group.key] = CollectiveParams(**own)
    else:
        base = _inherited(profile, group.inherit, FAMILY_PARAMS[group.family])
        if group.inherit_only:
            base = {f: base[f] for f in group.inherit_only if f in base}
        params = FAMILY_PARAMS[group.family](**{**base, **group.fixed, **own})
        for fam, key in ((group.family, group.key), *group.also):
            kernels.setdefault(fam, {})[key] = params
    for prefix, fam, key, inherit in group.linked:
        mine = {n.partition(".")[2]: v for n, v in values.items() if n.startswith(prefix + ".")}
        family_params = FAMILY_PARAMS[fam]
        kernels.setdefault(fam, {})[key] = family_params(**{**_inherited(profile, inherit, family_params), **mine})
    return profile.model_copy(update={"kernels": kernels, "collectives": collectives})


def _inherited(profile: Profile, source, params) -> dict:
    """The fitted parameters of (family, key) ``source`` that family class ``params``
    has, or none."""
    if source and source[1] in profile.kernels.get(source[0], {}):
        found = profile.kernels[source[0]][source[1]].model_dump()
        return {f: v for f, v in found.items() if f in params.model_fields}
    return {}


def _fit_group(group: Group, records, spec, base: Profile) -> dict:
    from scipy.optimize import least_squares

    meas = np.array([r["measured_s"] for r in records])
    names = group.free
    base_names = [n.rpartition(".")[2] for n in names]  # (linked parameters: "<prefix>.<name>")
    logs = np.array([n in LOG_PARAMS for n in base_names])
    x0 = np.array([PARAMS[n][0] for n in base_names])
    lo = np.array([PARAMS[n][1] for n in base_names])
    hi = np.array([PARAMS[n][2] for n in base_names])
    scale = np.array([PARAMS[n][3] for n in base_names])
    # scale parameters spanning decades are fitted by their logarithm
    x0, lo, hi = (np.where(logs, np.log(np.where(logs, v, 1.0)), v) for v in (x0, lo, hi))
    scale = np.where(logs, 1.0, scale)

    def values(x):
        return dict(zip(names, np.where(logs, np.exp(np.where(logs, x, 0.0)), x)))

    def residual(x):
        prof = _with(base, group, values(x))
        pred = predicted(records, spec, prof)
        r = np.log(pred / meas)
        return np.where(np.isfinite(r), r, 5.0)

    best = None
    for start in (x0, lo + 0.5 * (hi - lo) * np.where(logs, 1.0, 0.5)):
        inside = np.clip(start, lo + 1e-6 * (hi - lo), hi - 1e-6 * (hi - lo))
        res = least_squares(residual, inside, bounds=(lo, hi), x_scale=scale,
                            loss="soft_l1", f_scale=0.05, max_nfev=400)
        if best is None or res.cost < best.cost:
            best = res
    return {n: float(v) for n, v in values(best.x).items()}


def fit_profile(meas: Measurements, spec, folds: int = 5, sources=(), base: Profile | None = None,
                base_label: str = "ideal") -> tuple[Profile, dict]:
    """Fit every group in order; return the profile and held-out error per record op.
    ``base``: the profile whose parameters stand where the records fit none (a kernel key,
    a collective or a host key no record reaches; ``base_label`` names it, as a profile line
    does: "transferred from h200-sxm"), else the ideal profile's."""
    if not meas.records:
        raise UserError("no successful measurements to fit")
    mine, elsewhere, notes = measured_on(meas, spec)
    if not mine:
        raise UserError(f"none of the {len(meas.records)} measurements was taken on "
                        f"{spec.name}: {reasons(elsewhere)}")
    meas = replace(meas, records=mine)
    groups = _groups(meas, spec)
    profile = Profile(gpu=spec.name, kind="fitted", **({} if base is None else {
        "kernels": base.kernels, "collectives": base.collectives, "host": base.host}))
    cv_errors: dict[int, tuple[str, float]] = {}  # per record: its op and held-out error
    group_cv: dict[str, dict] = {}
    fitted: dict[str, set] = {}  # family -> ids of the records that fitted it
    short: dict[str, int] = {}  # family -> predictable records of groups too small to fit
    for group in groups:
        recs = [r for r in meas.records if group.select(r) and not is_eager(r)]  # (eager: the host fit)
        if group.family == "attention" and group.key in OWN_KEY_ONLY and profile.find("attention", group.key) is None:
            profile = _with(profile, group, {})  # (a kernel priced by its own key only starts from its fixed values)
        usable = [r for r, t in zip(recs, predicted(recs, spec, profile)) if np.isfinite(t)]
        if len(usable) < MIN_RECORDS:
            short[group.family] = max(short.get(group.family, 0), len(usable))
            continue
        fitted.setdefault(group.family, set()).update(map(id, usable))
        held = held_out(recs, folds, lambda train: _with(profile, group, _fit_group(group, train, spec, profile)),
                        lambda test, fitted: predicted(test, spec, fitted))
        values = _fit_group(group, recs, spec, profile)
        profile = _with(profile, group, values)
        ok = np.isfinite(held)
        errs = held[ok] / np.array([r["measured_s"] for r in recs])[ok] - 1
        if errs.size:
            group_cv[group.name] = stats(errs)
            for r, e in zip([r for r, o in zip(recs, ok) if o], errs):
                # (a later group refines an earlier one; transformers' copies apart by layout)
                op = f"copy:{r['layout']}" if r["op"] == "copy" and r.get("layout", "contiguous") != "contiguous" \
                    else r["op"]
                cv_errors[id(r)] = (op, float(e))
    if not fitted:
        ops = ", ".join(f"{op} {n}" for op, n in sorted(Counter(r["op"] for r in mine).items()))
        raise UserError(f"nothing to fit on {spec.name}: no kernel family has the {MIN_RECORDS} "
                        f"predictable records a fit needs (records measured on it: {ops})")
    # the host side of eager launches, on the GPU side just fitted (eager records only)
    profile, host_errors, host_cv = fit_host(meas.records, spec, profile, folds)
    group_cv.update(host_cv)
    cv_errors.update({i: (f"{op}/eager", e) for i, (op, e) in host_errors.items()})
    # transformers' eager decode steps (benchmarks/hf_forward.py), on the GPU side just fitted
    profile, hf_errors, hf_cv = fit_hf_host(meas.records, spec, profile)
    group_cv.update(hf_cv)
    cv_errors.update({i: (f"{op}/eager", e) for i, (op, e) in hf_errors.items()})
    by_op: dict[str, list[float]] = {}
    for op, e in cv_errors.values():
        by_op.setdefault(op, []).append(e)
    cv = {op: stats(e) for op, e in sorted(by_op.items())}
    used_runs = {r.get("run_id") for r in mine}
    run = next((v for k, v in meas.runs.items() if k in used_runs), next(iter(meas.runs.values()), {}))
    profile = profile.model_copy(update={
        "provenance": {
            "vendor": spec.vendor,
            "device": run.get("device_name") or run.get("device"),
            "driver": run.get("driver_version") or run.get("driver"),
            "torch": run.get("torch_version") or run.get("torch"),
            "cuda": run.get("cuda_version") or run.get("cuda"),
            "measured": sorted({str(r.get("date", ""))[:10] for r in meas.runs.values()} - {""}),
            "fitted": _dt.date.today().isoformat(),
            "measurements": len(meas.records),
            "files": list(sources),
            "method": f"robust least squares on log time; {folds}-fold cross-validation over shapes",
            **_family_counts(fitted, short, base_label),
            **({} if base is None else {"base": base_label}),
            **({"left_out": f"{len(elsewhere)} records measured on other GPUs"} if elsewhere else {}),
            **({"hardware_notes": notes} if notes else {}),
        },
        "validation": {"cross_validated": cv, "groups": group_cv, **_base_errors(base, cv, base_label)},
    })
    return profile, cv


def _base_errors(base: Profile | None, cv: dict, base_label: str) -> dict:
    """The cross-validated error of base profile ``base_label`` for the ops this fit did not
    validate (``cv`` holds those it did): the base's parameters price them, so serve's intervals
    take the base's error for them. The base's own, else what it carried from its own base."""
    known = {} if base is None else base.validation
    carried = {**known.get("base_cross_validated", {}), **known.get("cross_validated", {})}
    kept = {op: s for op, s in sorted(carried.items()) if op not in cv}
    return {"base_cross_validated": kept, "base_cross_validated_from": base_label} if kept else {}


def _family_counts(fitted: dict, short: dict, base_label: str = "ideal") -> dict:
    """Provenance of each family: the records that fitted it, and why a family kept the
    parameters of the base profile ``base_label`` (the ideal profile's: its prior)."""
    stay = "the ideal profile's" if base_label == "ideal" else f"those of the profile {base_label}"
    kept = {f: (f"{short[f]} predictable records, fewer than the {MIN_RECORDS} a fit needs"
                if short.get(f) else "no records") + f"; its parameters stay {stay}"
            for f in FAMILIES if f not in fitted}
    return {"records_per_family": {f: len(fitted.get(f, ())) for f in FAMILIES},
            **({"prior_kept": kept} if kept else {})}


def write_profile(profile: Profile, path) -> None:
    import yaml

    data = profile.model_dump(exclude_defaults=False)
    # keep the file readable: drop parameters left at their ideal defaults
    for name, fam in data["kernels"].items():
        ideal = FAMILY_PARAMS[name]().model_dump()
        for key, params in fam.items():
            fam[key] = {k: _round(v) for k, v in params.items() if v != ideal[k]}
    data["collectives"] = {k: {kk: _round(vv) for kk, vv in v.items()}
                           for k, v in data["collectives"].items()}
    unset = HostParams().model_dump()
    data["host"] = {k: {kk: _round(vv) for kk, vv in v.items() if kk == "n" or vv != unset[kk]}
                    for k, v in data["host"].items()}
    data["validation"] = _round(data["validation"])
    header = (f"# Calibration profile for {profile.gpu}, fitted by `rooflinesim calibrate`.\n"
              "# Efficiencies are fractions of the spec's datasheet peaks; times are seconds.\n"
              "# provenance.records_per_family: the records that fitted each family; a family\n"
              "# under prior_kept had none and keeps the parameters of provenance.base (where\n"
              "# given; else the ideal profile's), as does any kernel key no record reached.\n")
    from ..files import write_text

    write_text(path, header + yaml.safe_dump(data, sort_keys=False, width=100), "profile")


def _round(x):
    if isinstance(x, float):
        return float(f"{x:.4g}")
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_round(v) for v in x]
    return x
