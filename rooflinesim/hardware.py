"""GPU specs: pydantic models of the hardware_specs/*.yaml files and a registry over them.

A spec file holds human units ("3.35 TB/s", "50 MiB", "989 TFLOPS"); validators turn them
into SI floats once, at load. Peak rates are dense (no 2:4 sparsity). The registry reads
the bundled specs, every *.yaml in the directories of ROOFLINESIM_SPECS_DIR and any extra
files passed in; it indexes names, aliases and device names (what torch or nvidia-smi
reports) from the parsed YAML and validates a spec only when it is asked for, so resolving
a name stays cheap. A device name that several specs list is told apart by the memory
size a measurement reports.
"""

from __future__ import annotations

import difflib
import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from .gpu import SpecMethods
from .errors import UnknownName, UserError, did_you_mean
from .files import field_path, is_file, shorten
from .units import parse_quantity

__all__ = [
    "ENV_VAR", "RATE_KEYS", "GpuSpec", "Compute", "Memory", "Chip", "Interconnect",
    "spec_names", "aliases", "device_names", "resolve", "identify", "load_spec", "load_spec_file",
    "validate_spec_file", "json_schema", "MEMORY_TOLERANCE",
]

ENV_VAR = "ROOFLINESIM_SPECS_DIR"
BUNDLED_PACKAGE = "rooflinesim.hardware_specs"

# Keys of compute.dense_peak; a dtype's ``rate`` (rooflinesim.dtypes) names one of them.
# fp64 is the vector (CUDA-core) rate, fp64_tensor the matrix rate that fp64 GEMMs use.
RATE_KEYS = ("fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4")


# ---------------------------------------------------------------------------- models


def _quantity(kind: str, example: str, *, optional: bool = False, allow_zero: bool = False):
    """An SI float read from a human string such as ``example`` (or a plain SI number)."""

    def convert(value: Any) -> float | None:
        if value is None and optional:
            return None
        x = parse_quantity(value, kind)
        if x < 0 or (x == 0 and not allow_zero):
            raise UserError(f"must be {'at least' if allow_zero else 'greater than'} 0, got {shorten(value)}")
        return x

    number = {"type": "number", ("minimum" if allow_zero else "exclusiveMinimum"): 0}
    variants = [{"type": "string", "examples": [example]}, number]
    if optional:
        variants.append({"type": "null"})
    schema = WithJsonSchema({"anyOf": variants})
    return Annotated[float | None if optional else float, BeforeValidator(convert), schema]


Bytes = _quantity("bytes", "80 GB")
OptBytes = _quantity("bytes", "50 MiB", optional=True)
Bandwidth = _quantity("bytes_per_s", "3.35 TB/s")
LinkBandwidth = _quantity("bytes_per_s", "450 GB/s", allow_zero=True)
OptBandwidth = _quantity("bytes_per_s", "10 TB/s", optional=True)
Rate = _quantity("flops_per_s", "989 TFLOPS")
OptRate = _quantity("flops_per_s", "3.9 TFLOPS", optional=True)
OptHz = _quantity("hz", "1830 MHz", optional=True)
Source = Annotated[str, Field(min_length=1, description="where the figures come from")]
SpecName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")]
DeviceName = Annotated[str, Field(min_length=1, max_length=120, pattern=r"\S")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Compute(_Model):
    """Dense peak rates per dtype-rate key, and the special-function (exp) rate."""

    peak_flops_per_s: dict[str, Rate] = Field(
        alias="dense_peak",
        description=f"dense (no sparsity) peak per rate key, one of: {', '.join(RATE_KEYS)}; "
        "omit a key the hardware lacks",
        json_schema_extra={"propertyNames": {"enum": list(RATE_KEYS)}},
    )
    sfu_ops_per_s: OptRate = Field(
        None, alias="special_function", description="special-function (exp, rcp) ops per second"
    )
    sfu_estimated: bool = Field(False, alias="special_function_estimated")
    source: Source

    @field_validator("peak_flops_per_s", mode="before")
    @classmethod
    def _known_rate_keys(cls, value: Any) -> Any:
        if isinstance(value, dict):
            if not value:
                raise UserError("needs at least one rate")
            for key in value:
                if key not in RATE_KEYS:
                    raise UserError(f"unknown rate {shorten(key)}; known: {', '.join(RATE_KEYS)}")
        return value


class Memory(_Model):
    """Device memory and L2 cache. Capacity is what the vendor states (decimal GB)."""

    capacity_bytes: Bytes = Field(alias="capacity", description="'80 GB' is 80e9 bytes, '80 GiB' 80*2**30")
    hbm_bandwidth_bytes_per_s: Bandwidth = Field(
        alias="hbm_bandwidth", description="datasheet DRAM bandwidth (HBM or GDDR)"
    )
    l2_bytes: Bytes = Field(alias="l2", description="L2 size from the datasheet")
    l2_visible_bytes: OptBytes = Field(
        None, alias="l2_visible", description="L2 size a CUDA device query reports, where it differs"
    )
    l2_bandwidth_bytes_per_s: OptBandwidth = Field(None, alias="l2_bandwidth")
    l2_bandwidth_estimated: bool = False
    kind: str = Field(min_length=1, description="HBM3e, GDDR6, ...")
    source: Source


class Chip(_Model):
    """Processor count and clocks."""

    sm_count: int = Field(ge=1, description="streaming multiprocessors (NVIDIA) or compute units (AMD)")
    base_clock_hz: OptHz = Field(None, alias="base_clock")
    boost_clock_hz: OptHz = Field(None, alias="boost_clock")
    tdp_w: float | None = Field(None, gt=0, description="board power in watts")
    source: Source

    @model_validator(mode="after")
    def _base_below_boost(self) -> Chip:
        if self.base_clock_hz and self.boost_clock_hz and self.base_clock_hz > self.boost_clock_hz:
            raise UserError("base_clock is above boost_clock")
        return self


class Interconnect(_Model):
    """Intra-node GPU link (bandwidth per direction) and the host PCIe link."""

    link: Literal["nvlink3", "nvlink4", "nvlink5", "infinity-fabric", "pcie"] = Field(
        description="GPU-to-GPU link inside a node; 'pcie' when GPUs talk only over PCIe"
    )
    link_bandwidth_bytes_per_s: LinkBandwidth = Field(
        0.0,
        alias="link_bandwidth",
        description="per GPU, per direction (NVLink 4 '900 GB/s' bidirectional is 450 GB/s); 0 for none",
    )
    gpus_per_node: int = Field(ge=1, description="GPUs joined by this link in one node or board")
    nvlink_sharp: bool = Field(False, description="NVLink SHARP (NVLS) in-switch reductions available")
    pcie_generation: int = Field(ge=1, le=7)
    pcie_bandwidth_bytes_per_s: Bandwidth = Field(alias="pcie_bandwidth", description="x16, per direction")
    source: Source

    @model_validator(mode="after")
    def _consistent(self) -> Interconnect:
        if self.link != "pcie" and self.link_bandwidth_bytes_per_s == 0:
            raise UserError(f"link {self.link} needs a link_bandwidth above 0")
        if self.nvlink_sharp and self.link not in ("nvlink4", "nvlink5"):
            raise UserError("nvlink_sharp needs an nvlink4 or nvlink5 link")
        return self


class GpuSpec(_Model, SpecMethods):
    """One GPU: the contents of one hardware_specs/*.yaml file, in SI units."""

    name: SpecName = Field(description="canonical name, the file name without .yaml")
    full_name: str = Field(min_length=1)
    vendor: Literal["nvidia", "amd"]
    architecture: str = Field(min_length=1)
    aliases: list[SpecName] = Field(default_factory=list, description="short names, lower case")
    device_names: list[DeviceName] = Field(default_factory=list, description=(
        "names the driver reports for this GPU (torch.cuda.get_device_name(), nvidia-smi, "
        "ROCm), matched case-insensitively; a name that several specs list is told apart by "
        "the memory size a measurement reports"))
    compute: Compute
    memory: Memory
    chip: Chip
    interconnect: Interconnect
    notes: str | None = None

    def __hash__(self) -> int:  # usable as a cache key; equal specs share a name
        return hash(self.name)

    @field_validator("device_names")
    @classmethod
    def _distinct_device_names(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for name in value:
            if _key(name) in seen:
                raise UserError(f"{shorten(name)} is listed twice (names compare case-insensitively)")
            seen.add(_key(name))
        return value


def json_schema() -> dict:
    """JSON schema of a spec file (YAML keys, human-unit strings allowed)."""
    return GpuSpec.model_json_schema(by_alias=True)


# ------------------------------------------------------------------ reading files


def _stat_key(path) -> tuple:
    """Cache key that changes when the file does."""
    try:
        st = os.stat(path)
        return (str(path), st.st_mtime_ns, st.st_size)
    except (OSError, TypeError):
        return (str(path),)


def _load_yaml(path) -> dict:
    """The top-level mapping of a YAML file; any problem is a one-sentence UserError."""
    from .files import load_yaml, read_text

    data = load_yaml(read_text(path, "spec"), str(path))
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of fields at the top level")
    return data


@lru_cache(maxsize=512)
def _parse(key: tuple, path) -> dict:
    return _load_yaml(path)


def _read_raw(path) -> dict:
    """Parsed YAML, cached until the file changes."""
    return _parse(_stat_key(path), path)


def _known_fields(loc: tuple) -> list[str]:
    """YAML keys allowed at the model that ``loc`` points into."""
    model: type[BaseModel] = GpuSpec
    for part in loc:
        fields = {f.alias or n: f for n, f in model.model_fields.items()}
        ann = fields[part].annotation if part in fields else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            break
        model = ann
    return [f.alias or n for n, f in model.model_fields.items()]


def _raw_at(raw: Any, loc: tuple) -> Any:
    for part in loc:
        try:
            raw = raw[part]
        except (KeyError, IndexError, TypeError):
            return None
    return raw


def _one_sentence(exc: ValidationError, raw: dict) -> str:
    """The first problem of a pydantic error, as 'where: what'."""
    errors = exc.errors(include_url=False)
    err = errors[0]
    loc = tuple(err["loc"])
    where = field_path(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        what = f"unknown field; expected one of {', '.join(_known_fields(loc[:-1]))}"
    elif kind == "missing":
        what = "missing required field"
    elif kind in ("value_error", "assertion_error") and "error" in err.get("ctx", {}):
        what = str(err["ctx"]["error"])
    else:
        msg = err["msg"]
        what = f"{msg[:1].lower()}{msg[1:]}, got {shorten(_raw_at(raw, loc))}"
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return f"{where}: {what}{more}" if where else f"{what}{more}"


def _validate(path, raw: dict) -> GpuSpec:
    try:
        return GpuSpec.model_validate(raw)
    except ValidationError as exc:
        raise UserError(f"{path}: {_one_sentence(exc, raw)}") from None


@lru_cache(maxsize=256)
def _validate_cached(key: tuple, path) -> GpuSpec:
    return _validate(path, _read_raw(path))


def load_spec_file(path) -> GpuSpec:
    """Load and validate one spec file (cached until the file changes)."""
    path = _as_path(path)
    return _validate_cached(_stat_key(path), path)


def validate_spec_file(path) -> GpuSpec:
    """Validate one spec file afresh; raises UserError naming the file and the first problem."""
    path = _as_path(path)
    return _validate(path, _load_yaml(path))


def _as_path(path):
    if isinstance(path, (str, os.PathLike)):
        if not os.fspath(path).strip():
            raise UserError("an empty path was given for a spec file")
        path = Path(path)
        if not is_file(path):
            raise UserError(f"{shorten(os.fspath(path))}: no such spec file")
    return path


# ------------------------------------------------------------------ name registry


def _key(name: str) -> str:
    """Names compare case-insensitively, with spaces and underscores read as hyphens."""
    return "-".join(str(name).strip().lower().replace("_", " ").split())


@lru_cache(maxsize=1)
def _bundled_files() -> tuple:
    try:
        from importlib.resources import files

        folder = files(BUNDLED_PACKAGE)
    except ModuleNotFoundError:
        # A source checkout used without installing: the folder sits beside the package.
        folder = Path(__file__).resolve().parent.parent / "hardware_specs"
    return tuple(sorted((p for p in folder.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name))


def _user_files() -> list[Path]:
    found = []
    for folder in filter(None, os.environ.get(ENV_VAR, "").split(os.pathsep)):
        if not os.path.isdir(folder):
            raise UserError(f"{ENV_VAR} names '{folder}', which is not a directory")
        found += sorted(p for p in Path(folder).glob("*.yaml") if p.is_file())
    return found


def _names_in(path, strict: bool) -> tuple[str, list[str], list[str]]:
    """Canonical name, aliases and device names a file declares, without validating it.

    A file that cannot be parsed is indexed under its file name, so the error shows up
    when it is loaded (``strict`` raises at once instead).
    """
    stem = _key(path.name.rsplit(".", 1)[0])
    try:
        raw = _read_raw(path)
    except UserError:
        if strict:
            raise
        return stem, [], []
    if strict:  # a file named on the command line: its mistakes are reported at once
        load_spec_file(path)
    name = _key(raw["name"]) if isinstance(raw.get("name"), str) else stem
    strings = lambda v: [x for x in v if isinstance(x, str)] if isinstance(v, list) else []  # noqa: E731
    found = [_key(a) for a in strings(raw.get("aliases"))]
    return name, found + ([stem] if stem != name else []), strings(raw.get("device_names"))


def _index(spec_files=()) -> tuple[dict, dict, dict]:
    """(canonical name -> file, name or alias -> canonical name, device name key ->
    (the name as first written, canonical names of the specs that list it)); later files
    win, and a file that redefines a GPU replaces its device names too."""
    files: dict[str, Any] = {}
    alias_of: dict[str, str] = {}
    declared: dict[str, list[str]] = {}
    sources = [(p, False) for p in (*_bundled_files(), *_user_files())]
    sources += [(_as_path(p), True) for p in spec_files]
    for path, strict in sources:
        name, names, devices = _names_in(path, strict)
        files[name] = path
        declared[name] = devices
        for alias in names:
            alias_of[alias] = name
    listed: dict[str, tuple[str, list[str]]] = {}
    for name, devices in declared.items():
        for device in devices:
            listed.setdefault(_key(device), (device.strip(), []))[1].append(name)
    return files, {**alias_of, **{n: n for n in files}}, listed


def spec_names(spec_files=()) -> list[str]:
    """Canonical names of every known GPU (bundled, user directories, extra files)."""
    return sorted(_index(spec_files)[0])


def aliases(spec_files=()) -> dict[str, str]:
    """Alias -> canonical name."""
    return {k: v for k, v in sorted(_index(spec_files)[1].items()) if k != v}


def device_names(spec_files=()) -> dict[str, list[str]]:
    """Device name (as a spec writes it) -> the canonical names of the specs that list it;
    more than one when only memory size tells the GPUs apart."""
    listed = _index(spec_files)[2].values()
    return dict(sorted((written, sorted(set(names))) for written, names in listed))


def _unknown(name: str, lookup: dict[str, str], canonical, listed=None) -> UnknownName:
    key = _key(name)
    listed = listed or {}
    near = difflib.get_close_matches(key, list(listed), n=2, cutoff=0.75)
    if near and " " in name.strip():  # a device name (as a driver reports it) no spec lists
        known = ", ".join(f"'{listed[k][0]}' ({', '.join(listed[k][1])})" for k in near)
        return UnknownName(f"unknown GPU '{name}': no spec lists that device name (nearest: "
                           f"{known}); a spec file of that GPU may list it under device_names")
    score = lambda k: difflib.SequenceMatcher(None, key, k).ratio()  # noqa: E731
    prefixed = sorted((k for k in lookup if key and k.startswith(key)), key=score, reverse=True)
    close = difflib.get_close_matches(key, list(lookup), n=10, cutoff=0.5)
    hint: list[str] = []
    for k in prefixed + close:  # suggest canonical names, not the aliases that matched
        if lookup[k] not in hint:
            hint.append(lookup[k])
    if hint:
        return UnknownName(f"unknown GPU '{name}'; did you mean {' or '.join(hint[:3])}?")
    return did_you_mean(name, canonical, "GPU")


# What a driver reports as a GPU's memory is within a few percent of the datasheet figure,
# above or below it (vendors quote GB and GiB loosely: an H200's "141 GB" is 150.1e9 bytes
# to torch); the GPUs that share a device name differ by far more (ROCm's generic "AMD
# Radeon Graphics": MI300X 192 GB, MI325X 256 GB).
MEMORY_TOLERANCE = 0.15


def _by_memory(name: str, capacity_bytes: dict[str, float], memory_bytes) -> tuple[str, str]:
    """The GPU among those sharing device name ``name`` whose capacity is nearest to the
    memory a measurement reports, and a note saying so (ties go to the spec registered
    last); one sentence of UserError when memory cannot decide."""
    names = list(capacity_bytes)
    if len(names) == 1:
        return names[0], ""
    listed = ", ".join(names[:-1]) + f" and {names[-1]}"
    if not memory_bytes or memory_bytes <= 0:
        raise UserError(f"'{name}' is the device name of {listed}, which only the memory size "
                        "a measurement reports tells apart; name one of them")
    from .units import format_bytes

    gap = {n: abs(math.log(memory_bytes / capacity_bytes[n])) for n in names}
    best = min(reversed(names), key=gap.__getitem__)
    have = format_bytes(memory_bytes, binary=True)
    if gap[best] > math.log1p(MEMORY_TOLERANCE):
        sizes = ", ".join(f"{n} ({format_bytes(capacity_bytes[n], binary=False)})" for n in names)
        raise UserError(f"'{name}' with {have} of memory matches none of {sizes}")
    others = ", ".join(n for n in names if n != best)
    return best, (f"'{name}' with {have} of memory read as {best} "
                  f"({format_bytes(capacity_bytes[best], binary=False)}; the name also fits {others})")


def _capacities(names, files) -> dict[str, float]:
    return {n: load_spec_file(files[n]).memory.capacity_bytes for n in names}


def _resolve(name: str, spec_files, memory_bytes=None) -> tuple[str, dict, str]:
    files, lookup, listed = _index(spec_files)
    key = _key(name)
    if key in lookup:
        return lookup[key], files, ""
    if key in listed:
        canonical, note = _by_memory(name, _capacities(listed[key][1], files), memory_bytes)
        return canonical, files, note
    compact = key.replace("-", "")  # "h100sxm" finds "h100-sxm"
    for k, canonical in lookup.items():
        if k.replace("-", "") == compact:
            return canonical, files, ""
    raise _unknown(name, lookup, files, listed)


def resolve(name: str, spec_files=(), memory_bytes: float | None = None) -> str:
    """Canonical name for a GPU name, alias or device name (case-insensitive); unknown
    names raise UserError, and so does a device name that several GPUs share unless
    ``memory_bytes`` (what the device reports) tells them apart."""
    return _resolve(name, spec_files, memory_bytes)[0]


def identify(name: str, spec, memory_bytes: float | None = None) -> tuple[str | None, str]:
    """Which GPU a measurement's hardware name means, checked against ``spec`` (which may
    be a file outside the registry): (canonical name, or None when unknown or when memory
    cannot decide; a note on how memory decided, or why it could not)."""
    key = _key(name)
    if key in {_key(spec.name), *(_key(a) for a in spec.aliases)}:
        return spec.name, ""
    mine = key in {_key(d) for d in getattr(spec, "device_names", ())}
    files, lookup, listed = _index()
    if key in lookup and not mine:
        return lookup[key], ""
    sharing = [n for n in listed.get(key, ("", []))[1] if n != spec.name]
    if not mine and not sharing:
        try:
            return _resolve(name, (), memory_bytes)[0], ""
        except UnknownName:
            return None, ""
    capacities = _capacities(dict.fromkeys(sharing), files)
    if mine:
        capacities[spec.name] = spec.memory.capacity_bytes
    try:
        return _by_memory(name, capacities, memory_bytes)
    except UserError as e:
        return None, str(e)


def load_spec(name_or_path, spec_files=()) -> GpuSpec:
    """A validated spec by name, alias or file path (*.yaml, *.yml or an existing file).

    ``spec_files`` are extra spec files registered before the name is looked up; they win
    over user directories (ROOFLINESIM_SPECS_DIR), which win over the bundled specs.
    """
    for path in spec_files:  # every file a user names is checked, whichever GPU is asked for
        load_spec_file(path)
    if isinstance(name_or_path, SpecMethods):  # (a validated spec, or its cached view)
        return name_or_path
    text = os.fspath(name_or_path)
    if isinstance(name_or_path, os.PathLike) or text.endswith((".yaml", ".yml")) or os.path.isfile(text):
        return load_spec_file(text)
    canonical, files, _ = _resolve(text, spec_files)
    return load_spec_file(files[canonical])
