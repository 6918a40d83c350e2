"""The named overheads of a memory budget and the driver-visible size of each GPU.

Both are data (``rooflinesim/data/memory_overheads.yaml`` and ``device_memory.yaml``): the
defaults carry their sources there, a user overrides any of them with a YAML file of the
same keys or with keyword arguments.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from ..errors import UserError
from ..units import parse_quantity

__all__ = ["Overheads", "DeviceMemory", "load_overheads", "device_memory", "DATA_DIR"]

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
_OVERHEADS_FILE = "memory_overheads.yaml"
_DEVICES_FILE = "device_memory.yaml"


def _bytes(value: Any) -> float:
    x = parse_quantity(value, "bytes")
    if x < 0:
        raise UserError(f"must be at least 0 bytes, got {value!r}")
    return x


Bytes = Annotated[float, BeforeValidator(_bytes)]


def _names(value: Any) -> Any:
    """A list of names, or one string of comma-separated names (as --set gives it)."""
    if isinstance(value, str):
        return tuple(v.strip().lower() for v in value.split(",") if v.strip())
    return value


Names = Annotated[tuple[str, ...], BeforeValidator(_names)]


class Overheads(BaseModel):
    """Every default figure of the budget; sizes in bytes (read from '512 MiB' etc.)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cuda_context: Bytes
    cublas_workspace: Bytes
    cuda_graphs: Bytes
    nccl_base: Bytes
    nccl_per_peer: Bytes
    prefill_chunk_tokens: int = Field(ge=1)
    activation_hidden_copies: float = Field(ge=0)
    logits_fp32_copies: float = Field(ge=0)
    vocab_padding: int = Field(ge=1)
    int4_group_size: int = Field(ge=1)
    vllm_non_torch_base: Bytes
    vllm_non_torch_per_peer: Bytes
    vllm_tp_workspace: Bytes
    vllm_tp_workspace_architectures: Names
    sglang_distributed_per_peer: Bytes
    uncertainty_weights_fraction: float = Field(ge=0, le=1)
    uncertainty_activation_fraction: float = Field(ge=0, le=1)
    uncertainty_activation_moe_fraction: float = Field(ge=0, le=1)
    uncertainty_non_torch: Bytes
    uncertainty_overheads_fraction: float = Field(ge=0, le=1)
    low_kv_room_fraction: float = Field(ge=0, le=1)

    def nccl_bytes(self, gpus: int) -> float:
        """NCCL buffers of one GPU among ``gpus`` that talk to each other (0 when alone)."""
        return 0.0 if gpus <= 1 else self.nccl_base + self.nccl_per_peer * (gpus - 1)

    def sglang_distributed_bytes(self, gpus: int) -> float:
        """What SGLang's distributed set-up takes on one GPU among ``gpus`` (TP x PP)."""
        return self.sglang_distributed_per_peer * (gpus - 1)

    def vllm_non_torch_bytes(self, tp: int) -> float:
        """vLLM's non-torch memory of one worker at tensor parallelism ``tp``, without the
        TP workspace (``vllm_tp_workspace_bytes``)."""
        return self.vllm_non_torch_base + self.vllm_non_torch_per_peer * (tp - 1)

    def vllm_tp_workspace_seen(self, spec) -> bool:
        """Whether vLLM's TP workspace was seen on this kind of GPU: one of
        ``vllm_tp_workspace_architectures`` joined by NVLink."""
        return (spec.architecture in self.vllm_tp_workspace_architectures
                and spec.interconnect.link.startswith("nvlink"))

    def vllm_tp_workspace_bytes(self, tp: int, spec) -> float:
        """The non-torch memory vLLM's profiling pass adds only at TP > 1 (0 at TP 1 and on
        GPUs where it was not seen)."""
        return self.vllm_tp_workspace if tp > 1 and self.vllm_tp_workspace_seen(spec) else 0.0

    def vllm_non_torch_uncertainty(self, tp: int, spec) -> float:
        """How far vLLM's non-torch memory may be off: the logs' spread where they cover the
        GPU, else (TP > 1 elsewhere) the TP workspace itself."""
        if tp > 1 and not self.vllm_tp_workspace_seen(spec):
            return max(self.uncertainty_non_torch, self.vllm_tp_workspace)
        return self.uncertainty_non_torch


def _read_yaml(path: Path, what: str) -> dict:
    from ..files import load_yaml, read_text

    data = load_yaml(read_text(path, what), str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of {what} at the top level")
    return data


def _one_sentence(exc: ValidationError, source: str) -> UserError:
    err = exc.errors(include_url=False)[0]
    from ..files import field_path

    where = field_path(err["loc"])
    if err["type"] == "extra_forbidden":
        known = ", ".join(Overheads.model_fields)
        return UserError(f"{source}: unknown overhead {where!r}; known: {known}")
    msg = str(err.get("ctx", {}).get("error", err["msg"]))
    return UserError(f"{source}: {where}: {msg}")


@lru_cache(maxsize=1)
def _defaults() -> dict:
    return _read_yaml(DATA_DIR / _OVERHEADS_FILE, "overheads")


def load_overheads(path: str | Path | None = None, **overrides: Any) -> Overheads:
    """The bundled defaults, updated by a YAML file of the same keys and then by keyword
    arguments (None values are ignored)."""
    values = dict(_defaults())
    source = "overheads"
    if path is not None:
        values.update(_read_yaml(Path(path), "overheads"))
        source = str(path)
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Overheads.model_validate(values)
    except ValidationError as exc:
        raise _one_sentence(exc, source) from None


class DeviceMemory(BaseModel):
    """The card's total memory as a CUDA process sees it, and where the figure comes from."""

    model_config = ConfigDict(frozen=True)

    total_bytes: float
    source: str
    measured: bool
    nvidia_smi_bytes: float | None = None  # memory.total as nvidia-smi reports it (SGLang reads it)


@lru_cache(maxsize=1)
def _devices() -> dict:
    return _read_yaml(DATA_DIR / _DEVICES_FILE, "device memory")


def device_memory(spec) -> DeviceMemory:
    """Driver-visible total of a GPU spec: the named figure when known, else the spec's
    capacity (flagged as not measured)."""
    entry = _devices().get(spec.name)
    if entry is None:
        return DeviceMemory(total_bytes=spec.memory.capacity_bytes, measured=False,
                            source=f"spec capacity of {spec.name} (no driver-visible figure known)")
    smi = entry.get("nvidia_smi_total")
    return DeviceMemory(total_bytes=parse_quantity(entry["total"], "bytes"),
                        source=str(entry["source"]).strip(), measured=True,
                        nvidia_smi_bytes=None if smi is None else parse_quantity(smi, "bytes"))
