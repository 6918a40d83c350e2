"""A calibration profile: the achievable fractions of a GPU's datasheet ceilings and the
fixed costs of its kernels, per kernel family, as a YAML file a fit fills in.

The ideal profile (every efficiency 1, no floors, hard roofline corner) is the plain
datasheet roofline. Efficiencies are fractions of the spec's peaks, so a profile fitted
on one GPU transfers to another GPU of its kind through that GPU's spec.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, ValidationError, field_validator

from ..errors import UserError
from ..files import is_file

# frozen: a prediction may keep what it derived from a profile's parameters (per-point
# parameters, serve's step tables), so a parameter never changes in place; a changed profile is a new one
# (``model_copy(update=...)``), and ``Profile.key`` tells the two apart
_STRICT = ConfigDict(extra="forbid", frozen=True)

# The sections a fit fills: the kernel families of ``kernels`` and the collectives. A
# fitted profile's provenance says how many records fitted each (records_per_family) and
# which kept the ideal profile's parameters for want of records (prior_kept).
FAMILIES = ("memory", "gemm", "attention", "grouped_gemm", "sequence", "collective")


def _fit(prior: float, lo: float, hi: float, scale: float | None = None, *, log: bool = False,
         unit: str = "1") -> dict:
    """What a field says of itself beyond its type and its default (the ideal profile's
    value): its SI unit ("1": a ratio), and what a fit that frees it starts from (its
    prior), the bounds it keeps to, its typical scale (least squares' x_scale) and whether
    it is fitted in log space (``fit_ranges``)."""
    return {"unit": unit, "fit": {"prior": prior, "bounds": (lo, hi), "scale": scale, "log": log}}


def fit_ranges(model: type[BaseModel]) -> dict[str, dict]:
    """Field name -> its fit metadata (``_fit``), for every field of ``model`` that a fit
    may free: the one place priors and bounds are written."""
    out = {}
    for name, f in model.model_fields.items():
        extra = f.json_schema_extra
        if isinstance(extra, dict) and "fit" in extra:
            out[name] = extra["fit"]
    return out


def unit_of(model: type[BaseModel], name: str) -> str:
    """The SI unit of a parameter ("1": a ratio; "" where the field does not say)."""
    extra = model.model_fields[name].json_schema_extra
    return extra.get("unit", "") if isinstance(extra, dict) else ""


# Fields more than one family has, each written once (a function per field, so that
# every class holds its own copy of the definition).


def _align2_memory():
    return Field(1.0, gt=0, le=1.0, description=(
        "bandwidth factor when a GEMM's row stride, or a copy's size, is only element-aligned"),
        json_schema_extra=_fit(0.3, 0.02, 1.0, 0.1, unit="1"))


def _align8_memory():
    return Field(1.0, gt=0, le=1.0, description=(
        "bandwidth factor when a GEMM's narrowest row stride, or a copy's size, is 4- or 8-byte aligned"),
        json_schema_extra=_fit(0.6, 0.02, 1.0, 0.1, unit="1"))


def _k_overhead():
    return Field(0.0, ge=0, description="per-tile pipeline fill, in k elements",
        json_schema_extra=_fit(64.0, 1.0, 8192.0, 32.0, log=True, unit="elements of k"))


def _row_element_s():
    return Field(0.0, ge=0, description=(
        "row-wise kernels: seconds per element of one row (norms) or per key (attention) "
        "that one thread block walks in series"), json_schema_extra=_fit(1e-9, 1e-14, 1e-7, 1e-11, log=True, unit="s"))


def _tile_m():
    return Field(1, ge=1, description="rows of the kernel's output (query) tile; 1: no tiling known")


def _wave_quantization():
    return Field(False, description="thread blocks run in whole waves over the SMs")


class FamilyParams(BaseModel):
    """Parameters of one kernel family (optionally one dtype, backend or kind of it): the
    base of each family's class (``FAMILY_PARAMS``). Frozen; a profile file names only
    the fields it changes, and a field of another family is an error."""

    model_config = _STRICT


class RooflineParams(FamilyParams):
    """What the roofline step prices every kernel with (``pricing``):

    latency = kernels * launch_s + corner-norm(compute_s, hbm_s, l2_s), where compute_s
    uses ``compute_efficiency`` of the dtype's peak (vector FLOPs ``vector_efficiency``
    of the fp32 rate) and hbm_s ``memory_efficiency`` of HBM bandwidth, with the DRAM
    latency and large-transfer terms."""

    compute_efficiency: float = Field(1.0, gt=0, le=1.0, json_schema_extra=_fit(0.8, 0.02, 1.0, 0.1, unit="1"))
    vector_efficiency: float = Field(1.0, gt=0, le=1.0, json_schema_extra=_fit(0.5, 0.01, 1.0, 0.1, unit="1"))
    memory_efficiency: float = Field(1.0, gt=0, le=1.0, json_schema_extra=_fit(0.8, 0.02, 1.0, 0.1, unit="1"))
    launch_s: float = Field(0.0, ge=0, json_schema_extra=_fit(3e-6, 0.0, 0.0002, 1e-6, unit="s"))
    corner: float | None = Field(None, gt=1, description="p of the p-norm corner; none = hard max",
        json_schema_extra=_fit(3.0, 1.05, 30.0, 1.0, unit="1"))
    memory_latency_s: float = Field(0.0, ge=0, description=(
        "first-byte latency of a kernel's HBM traffic (memory-bound kernels, GEMMs), paid in "
        "full once it moves more than memory_latency_bytes"), json_schema_extra=_fit(1e-6, 0.0, 2e-5, 1e-7, unit="s"))
    memory_latency_bytes: float = Field(1.0, gt=0,
        json_schema_extra=_fit(1e6, 1000.0, 1e9, 100000.0, log=True, unit="B"))
    large_bytes: float = Field(0.0, ge=0, description=(
        "memory-bound kernels moving more than this ran at large_memory_efficiency of their "
        "bandwidth on the measured GPU (copies above ~1 GB on an H200; cause not established)"),
        json_schema_extra=_fit(9e8, 1e8, 1e11, 1e8, log=True, unit="B"))
    large_memory_efficiency: float = Field(1.0, gt=0, le=1.0, json_schema_extra=_fit(0.7, 0.1, 1.0, 0.1, unit="1"))
    l2_efficiency: float = Field(0.0, ge=0, le=1.0,
                                 description="fraction of the spec's L2 bandwidth; 0 leaves L2 out")


def _k_element_s():
    return Field(0.0, ge=0, description=(
        "GEMM: latency per element of k that one thread block walks in series (for 16-bit "
        "operands; scaled by their bytes); bounds GEMMs with few output tiles and a long k"),
        json_schema_extra=_fit(1e-10, 1e-13, 1e-8, 1e-11, log=True, unit="s"))


class GemmParams(RooflineParams):
    """GEMMs (family ``gemm``, keyed by dtype, and dtype:regime for misaligned strides):
    tiles, k fill, waves, alignment classes, split k, the serial k walk."""

    tile_m: int = _tile_m()
    tile_n: int = Field(1, ge=1)
    k_overhead: float = _k_overhead()
    wave_quantization: bool = _wave_quantization()
    align8_compute: float = Field(1.0, gt=0, le=1.0, description=(
        "GEMM compute-rate factor when the narrowest row stride is 4- or 8-byte aligned "
        "(no TMA: older cp.async kernels)"), json_schema_extra=_fit(0.3, 0.02, 1.0, 0.1, unit="1"))
    align8_memory: float = _align8_memory()
    align2_compute: float = Field(1.0, gt=0, le=1.0, description=(
        "GEMM compute-rate factor when a row stride is only element-aligned (odd sizes)"),
        json_schema_extra=_fit(0.2, 0.02, 1.0, 0.1, unit="1"))
    align2_memory: float = _align2_memory()
    split_k_ratio: float = Field(0.0, ge=0, description=(
        "GEMM: k per 64x64 output tile above which the library splits k and adds a "
        "reduction kernel (0: never)"),
        json_schema_extra=_fit(128.0, 4.0, 65536.0, 32.0, log=True, unit="elements of k per 64x64 tile"))
    element_load_rate: float = Field(0.0, ge=0, description=(
        "GEMM, tiled regimes (profile keys '<dtype>:align2_tiled', ':align8_tiled', "
        "':simt_tiled'): operand elements one SM loads per second through the narrow loads "
        "of the kernels cuBLAS runs for strides under 16 bytes (0: no load term)"),
        json_schema_extra=_fit(2e10, 1e8, 1e13, 1e9, log=True, unit="elements/s"))
    cta_share: float = Field(1.0, gt=0, le=1.0, description=(
        "GEMM, tiled regimes: fraction of an SM's rate a lone thread block reaches"),
        json_schema_extra=_fit(0.5, 0.01, 1.0, 0.1, unit="1"))
    k_element_s: float = _k_element_s()
    split_k_s: float = Field(0.0, ge=0, description=(
        "GEMM: fixed cost of a split k beyond the second launch (partial tiles, reduction)"),
        json_schema_extra=_fit(1e-6, 0.0, 5e-5, 1e-7, unit="s"))
    align2_split_k_ratio: float = Field(0.0, ge=0, description=(
        "GEMM: split_k_ratio of the kernels for element-aligned strides, which split even "
        "a short k (0: as split_k_ratio)"),
        json_schema_extra=_fit(16.0, 0.5, 4096.0, 8.0, log=True, unit="elements of k per 64x64 tile"))
    split_k_min: float = Field(2560.0, ge=0, description="GEMM: smallest k that is ever split")
    skinny_misaligned_memory: float = Field(1.0, gt=0, le=1.0, description=(
        "GEMM bandwidth factor for misaligned skinny GEMMs (m <= 8), which run GEMV-style kernels"),
        json_schema_extra=_fit(0.5, 0.02, 1.0, 0.1, unit="1"))
    gemv_misaligned_memory: float = Field(1.0, gt=0, le=1.0, description=(
        "GEMM bandwidth factor for misaligned single-row GEMMs (m = 1: GEMV kernels)"),
        json_schema_extra=_fit(0.5, 0.02, 1.0, 0.1, unit="1"))


class AttentionParams(RooflineParams):
    """Attention kernels (family ``attention``, keyed by backend or backend:regime):
    query tiles, head-dim tiles, the causal diagonal, key splits, the critical path."""

    tile_m: int = _tile_m()
    wave_quantization: bool = _wave_quantization()
    row_element_s: float = _row_element_s()
    head_dim_tile: int = Field(1, ge=1, description=(
        "attention: head dims are computed rounded up to a multiple of this"))
    critical_path: float = Field(0.0, ge=0, description=(
        "attention: weight of the critical path, the block of the last queries walking every "
        "key over its query tile at its SM's share of the rate (0: off)"),
        json_schema_extra=_fit(1.0, 0.0, 4.0, 0.1, unit="1"))
    walk_dim: float = Field(0.0, ge=0, description=(
        "attention: the critical path's per-key softmax work, in head-dim elements"),
        json_schema_extra=_fit(16.0, 0.0, 512.0, 8.0, unit="elements"))
    key_block_s: float = Field(0.0, ge=0, description=(
        "attention: fixed cost of each block of keys the critical path walks"),
        json_schema_extra=_fit(1e-6, 0.0, 2e-5, 1e-7, unit="s"))
    block_s: float = Field(0.0, ge=0, description=(
        "attention: fixed cost of one thread block (its queries in, its output out), paid "
        "once per round of blocks on an SM"), json_schema_extra=_fit(1e-6, 0.0, 5e-5, 1e-7, unit="s"))
    softmax_overlap: float | None = Field(None, ge=0, le=1.0, description=(
        "attention: share of the softmax work (exp and vector math) hidden under the matrix "
        "products: 1 overlaps fully (FA3's design), 0 runs in series; none: by variant"),
        json_schema_extra=_fit(0.5, 0.0, 1.0, 0.1, unit="1"))
    combine_split_s: float = Field(0.0, ge=0, description=(
        "attention, FlashAttention-2 split keys: time per split of the combine kernel's "
        "serial walk over the splits' partial outputs (a few rows per thread block), "
        "paid once per round of its blocks"), json_schema_extra=_fit(1e-7, 0.0, 5e-6, 1e-8, unit="s"))
    unsplit_memory_efficiency: float = Field(1.0, gt=0, le=1.0, description=(
        "attention: bandwidth factor of short-query kernels that do not split the keys "
        "(the GPU is already full of blocks)"), json_schema_extra=_fit(0.8, 0.1, 1.0, 0.1, unit="1"))
    causal_overhead: float = Field(0.0, ge=0, description=(
        "attention: keys per query computed and masked on the diagonal blocks of causal attention"),
        json_schema_extra=_fit(64.0, 0.0, 4096.0, 32.0, unit="keys"))
    split_kv_max_query: int = Field(1, ge=0, description=(
        "attention: the largest query length for which the kernel splits the keys over "
        "thread blocks to fill the GPU (flash-decoding)"))
    split_kv_min_keys: float = Field(0.0, ge=0, description=(
        "attention, 'fill' splits: the kernel splits the keys only of caches longer than "
        "this (cuDNN's decode kernel: 512, seen in its kernel counts)"))
    split_kv: Literal["fill", "fa2", "flashmla"] = Field("fill", description=(
        "attention: how short queries split the keys: 'fill' splits until the SMs are "
        "full; 'fa2' follows FlashAttention-2's heuristic (wave efficiency, eligible counts); "
        "'flashmla' shares every sequence's key blocks out evenly over the SMs, as FlashMLA's "
        "scheduler does (rules/attention.py)"))
    reread_share: float = Field(1.0, ge=0, le=1.0, description=(
        "attention: share of a decode group's re-reads of its KV cache (blocks of the same "
        "group's other query tiles) that reach HBM; the rest are served by the L2"),
        json_schema_extra=_fit(0.5, 0.0, 1.0, 0.1, unit="1"))
    seq_overhead: float = Field(0.0, ge=0, description="attention: per-query-block fill, in keys",
        json_schema_extra=_fit(128.0, 1.0, 16384.0, 64.0, log=True, unit="keys"))


class RowParams(RooflineParams):
    """Memory-bound and row-wise kernels (family ``memory``: copies, norms, elementwise,
    gathers, bookkeeping; keyed by kind): alignment of a copy's size, one thread block per
    row."""

    align8_memory: float = _align8_memory()
    align2_memory: float = _align2_memory()
    align2_launch_s: float = Field(0.0, ge=0, description=(
        "copies: extra fixed time of a copy whose size is not a multiple of 4 bytes"),
        json_schema_extra=_fit(3e-7, 0.0, 2e-5, 1e-7, unit="s"))
    row_element_s: float = _row_element_s()
    row_bandwidth_elements: float = Field(0.0, ge=0, description=(
        "row-wise kernels: bandwidth falls as 1 / (1 + row length / this) (longer rows, "
        "fewer resident blocks); 0: no effect"),
        json_schema_extra=_fit(16384.0, 256.0, 1e7, 1000.0, log=True, unit="elements"))
    rows_per_sm: float = Field(1.0, gt=0, description="row-wise kernels: rows resident per SM",
        json_schema_extra=_fit(16.0, 0.25, 64.0, 1.0, unit="rows"))
    row_double_bytes: float = Field(0.0, ge=0, description=(
        "norms: once a norm reads more than this many bytes in all, each row's serial pass "
        "takes about twice as long (a smooth step; seen on the H200 from ~0.7 MB at any "
        "row width, cause not established); 0: no effect"),
        json_schema_extra=_fit(700000.0, 10000.0, 1e9, 100000.0, log=True, unit="B"))


class GroupedGemmParams(RooflineParams):
    """MoE grouped GEMMs (family ``grouped_gemm``, keyed by dtype): row tiles, k fill and
    the serial k walk."""

    tile_m: int = _tile_m()
    k_overhead: float = _k_overhead()
    k_element_s: float = _k_element_s()


class SequenceParams(FamilyParams):
    """What a kernel costs among others beyond its own roofline (family ``sequence``, key
    ``gemm``)."""

    dependent_s: float = Field(0.0, ge=0, description=(
        "family 'sequence', key 'gemm': extra time of a GEMM that is not compute-bound when it "
        "follows other kernels (a layer, a forward pass) rather than copies of itself, as the "
        "harness times kernels back to back"), json_schema_extra=_fit(1e-6, 0.0, 2e-5, 1e-7, unit="s"))


FAMILY_PARAMS: dict[str, type[FamilyParams]] = {
    "memory": RowParams, "gemm": GemmParams, "attention": AttentionParams, "grouped_gemm": GroupedGemmParams,
    "sequence": SequenceParams,
}


class CollectiveParams(BaseModel):
    model_config = _STRICT
    latency_s: float = Field(0.0, ge=0, description="fixed cost of one call",
        json_schema_extra=_fit(1e-5, 0.0, 0.001, 1e-6, unit="s"))
    step_latency_s: float = Field(0.0, ge=0, description="cost of each algorithm step",
        json_schema_extra=_fit(0.0, 0.0, 0.0001, 1e-6, unit="s"))
    link_efficiency: float = Field(1.0, gt=0, le=1.0, json_schema_extra=_fit(0.8, 0.02, 1.0, 0.1, unit="1"))
    fill_latency_s: float = Field(0.0, ge=0, description=(
        "extra latency of messages large enough to leave the low-latency protocols, "
        "paid in full above fill_bytes"), json_schema_extra=_fit(1e-5, 0.0, 0.0002, 1e-6, unit="s"))
    fill_bytes: float = Field(1.0, gt=0, json_schema_extra=_fit(1e6, 1000.0, 1e9, 100000.0, log=True, unit="B"))


class HostParams(BaseModel):
    """The host side of eager launches (no CUDA graph): the time Python and PyTorch's
    dispatch take to issue one call of an op, which the GPU overlaps with the work
    already queued (``rooflinesim.eager``). It belongs to the machine's CPU and software
    as much as to the GPU."""

    model_config = _STRICT
    call_s: float = Field(0.0, ge=0, description="host time of one call, whatever it launches",
                          json_schema_extra=_fit(5e-6, 1e-8, 0.002, log=True, unit="s"))
    kernel_s: float = Field(0.0, ge=0, description="host time per kernel the call launches",
                            json_schema_extra=_fit(5e-6, 1e-8, 0.002, log=True, unit="s"))
    gap_s: float = Field(0.0, ge=0, description=(
        "GPU time between back-to-back eagerly launched kernels, beyond a graph's"),
        json_schema_extra=_fit(5e-6, 1e-8, 0.002, log=True, unit="s"))
    corner: float = Field(0.0, ge=0, description=(
        "p-norm joining host and GPU time (0: the hard max); near the crossover the two "
        "stages stall each other"), json_schema_extra=_fit(6.0, 1.5, 40.0))
    n: int = Field(0, ge=0, description="eager measurements it was fitted on (0: not fitted)")


# Without eager measurements: about 4 µs of host time per kernel launched from Python
# (REFERENCE.md: H100 NVL, PyTorch eager)
EAGER_KERNEL_S = 4e-6


def _entry(params: type[FamilyParams], family: str, key: str, value) -> FamilyParams:
    """One profile entry of ``family`` as its class; what is wrong said with where it is."""
    if isinstance(value, dict):
        foreign = sorted(set(value) - set(params.model_fields))
        if foreign:
            raise ValueError(f"{family}.{key}.{foreign[0]} is not a parameter of the {family} family")
    try:
        return params.model_validate(value)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in (family, key, *err["loc"]))
        raise ValueError(f"{where}: {err['msg']}") from None


class Profile(BaseModel):
    model_config = _STRICT
    gpu: str | None = None
    kind: Literal["ideal", "fitted", "transferred"] = "ideal"
    provenance: dict = Field(default_factory=dict)
    # family -> key -> that family's class (dumped as such, not as the base)
    kernels: dict[str, dict[str, SerializeAsAny[FamilyParams]]] = Field(default_factory=dict)
    collectives: dict[str, CollectiveParams] = Field(default_factory=dict)
    host: dict[str, HostParams] = Field(default_factory=dict)  # op key -> eager host side
    validation: dict = Field(default_factory=dict)

    @field_validator("kernels", mode="before")
    @classmethod
    def _family_classes(cls, kernels):
        """Each family's entries as its own class (FAMILY_PARAMS): a field of another
        family, or a family there is none of, is an error."""
        if not isinstance(kernels, dict):
            return kernels
        out = {}
        for family, table in kernels.items():
            params = FAMILY_PARAMS.get(family)
            if params is None:
                raise ValueError(f"unknown kernel family {family!r} (families: {', '.join(FAMILY_PARAMS)})")
            if not isinstance(table, dict):
                return kernels  # (the field's own type check says what is wrong)
            out[family] = {k: v if isinstance(v, params) else _entry(params, family, k, v) for k, v in table.items()}
        return out

    def key(self) -> tuple:
        """What a cache of predictions under this profile is kept by: the identity of the
        profile and of every parameter object in its tables, with the tables' keys (the
        objects are frozen, so their values never change; an entry replaced is another
        object). Whoever keeps a key keeps ``parts`` too, so that the identities stay theirs."""
        return (id(self), *((f, k, id(p)) for f, t in self.kernels.items() for k, p in t.items()),
                *((k, id(p)) for k, p in self.collectives.items()), *((k, id(p)) for k, p in self.host.items()))

    def parts(self) -> tuple:
        """The profile and every parameter object in its tables."""
        return (self, *(p for t in self.kernels.values() for p in t.values()), *self.collectives.values(),
                *self.host.values())

    def host_params(self, *keys: str) -> HostParams:
        """The host side of the first key present, then 'default', else the published
        per-launch figure."""
        for key in (*keys, "default"):
            if key in self.host:
                return self.host[key]
        return _IDEAL_HOST

    def params(self, family: str, *keys: str) -> FamilyParams:
        """The most specific parameters: the first key present, then 'default', else the
        family's ideal ones."""
        table = self.kernels.get(family, {})
        for key in (*keys, "default"):
            if key and key in table:
                return table[key]
        return _IDEAL[family]

    def find(self, family: str, *keys: str) -> FamilyParams | None:
        """The parameters of the first key present, or None (no default)."""
        table = self.kernels.get(family, {})
        return next((table[k] for k in keys if k in table), None)

    def collective(self, kind: str) -> CollectiveParams:
        return self.collectives.get(kind) or self.collectives.get("default") or _IDEAL_COLL


_IDEAL = {family: params() for family, params in FAMILY_PARAMS.items()}
_IDEAL_COLL = CollectiveParams()
_IDEAL_HOST = HostParams(kernel_s=EAGER_KERNEL_S)
IDEAL = Profile()


def load_profile_file(path) -> Profile:
    from ..files import field_path, load_yaml, read_text, shorten

    text = read_text(path, "profile")
    path = Path(path)
    data = load_yaml(text, path.name)
    if not isinstance(data, dict):
        raise UserError(f"{path.name}: expected a mapping of profile fields at the top level")
    try:
        return Profile.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = field_path(err["loc"])
        raise UserError(f"{path.name}: {where}: {shorten(err['msg'], 120)[1:-1]}") from None


def _bundled_dir():
    try:
        from importlib.resources import files

        return files("rooflinesim.hardware_specs") / "profiles"
    except ModuleNotFoundError:
        # a source checkout used without installing: the folder sits beside the package
        return Path(__file__).resolve().parents[2] / "hardware_specs" / "profiles"


@lru_cache(maxsize=None)
def bundled_profile(gpu: str) -> Profile | None:
    """The fitted profile shipped for ``gpu``, if the project measured it."""
    p = _bundled_dir() / f"{gpu}.yaml"
    if not is_file(p):
        return None
    return load_profile_file(p)


def bundled_profiles() -> list[str]:
    d = _bundled_dir()
    if not d.is_dir():
        return []
    return sorted(x.name[:-5] for x in d.iterdir() if x.name.endswith(".yaml"))


def resolve_profile(spec, profile: str | None = None) -> Profile:
    """``profile``: None (the GPU's fitted profile, else one transferred from a measured
    GPU of the same vendor, else ideal), 'ideal', a bundled GPU name, or a YAML path."""
    if profile == "ideal":
        return IDEAL
    if profile is not None:
        if profile.endswith((".yaml", ".yml")) or is_file(profile):
            return load_profile_file(profile)
        found = bundled_profile(profile)
        if found is None:
            raise UserError(f"no profile named '{profile}'; bundled profiles: "
                            f"{', '.join(bundled_profiles()) or 'none'}, or 'ideal', or a YAML path")
        return found
    own = bundled_profile(spec.name)
    if own is not None:
        return own
    return transferred_profile(spec)


def transferred_profile(spec, lender_other_than: str | None = None) -> Profile:
    """The profile of a GPU nobody measured: the fitted fractions of a measured GPU of the same
    vendor (the fractions of peak and bandwidth, the fixed kernel floors), applied through the
    target's own spec (calibration.lending); ``lender_other_than``: a GPU whose own profile
    may not lend (the one being fitted)."""
    from .lending import transfer, transferred_kernels

    profiles = {name: bundled_profile(name) for name in bundled_profiles() if name != lender_other_than}
    found = transfer({n: p.provenance for n, p in profiles.items() if p is not None},
                     spec.name, spec.vendor)
    if found is None:
        return IDEAL
    donor, update = found
    from ..hardware import load_spec

    base = profiles[donor]
    plain = {f: {k: p.model_dump() for k, p in table.items()} for f, table in base.kernels.items()}
    moved = transferred_kernels(plain, load_spec(donor), spec)
    kernels = {f: {k: (base.kernels[f][k] if moved[f][k] == plain[f][k] else FAMILY_PARAMS[f](**moved[f][k]))
                   for k in table} for f, table in moved.items()}
    return base.model_copy(update={**update, "kernels": kernels})
