"""Measurement records: case ids, the JSON Lines writer, resume, and run provenance.

A measurement file holds one ``{"run": {...}}`` header line per run, then one record
per case, appended and flushed as soon as the case is measured. Standard library only
(torch is used for provenance only when the caller passes it in).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time
import uuid

# Shape fields of each op, in record order; they (with op, dtype, backend and the
# timing mode) make the case id.
SHAPE_FIELDS = {
    "gemm": ("m", "n", "k", "batch"),
    "attention": ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "causal"),
    "moe": ("tokens", "hidden", "ffn", "experts", "top_k", "routing"),
    "allreduce": ("bytes", "world_size"),
    "allgather": ("bytes", "world_size"),
    "reducescatter": ("bytes", "world_size"),
    "alltoall": ("bytes", "world_size"),
    "copy": ("bytes",),
    "rmsnorm": ("tokens", "hidden"),
    "decoder_layer": ("mode", "batch", "seq", "hidden", "heads", "kv_heads", "head_dim", "ffn"),
    "selftest": ("action",),
}

def file_slug(hardware: str) -> str:
    """A file-name-safe form of a hardware name: 'NVIDIA H200' -> 'nvidia-h200'."""
    return re.sub(r"[^a-z0-9]+", "-", hardware.strip().lower()).strip("-") or "unknown"


def case_id(case: dict, timing_mode: str) -> str:
    """Stable id of a case: op, dtype, backend, timing mode and the shape fields."""
    op = case["op"]
    fields = SHAPE_FIELDS.get(op)
    if fields is None:
        raise KeyError(f"unknown op '{op}'")
    shape = ",".join(f"{f}={_scalar(case.get(f))}" for f in fields)
    return f"{op}|{case.get('dtype', '')}|{case.get('backend', '')}|{timing_mode}|{shape}"


def _scalar(v):
    return str(v).lower() if isinstance(v, bool) else str(v)


def case_fields(case: dict) -> dict:
    """op, dtype and the shape fields of a case, in record order."""
    out = {"op": case["op"], "dtype": case.get("dtype")}
    for f in SHAPE_FIELDS.get(case["op"], ()):
        if f in case:
            out[f] = case[f]
    return out


def base_record(case: dict, cid: str, run_id: str, hardware: str, graph: bool) -> dict:
    rec = case_fields(case)
    rec.update(backend=case.get("backend"), graph=graph, hardware=hardware, case_id=cid,
               run_id=run_id, suite=case.get("suite"))
    return rec


def failure_record(base: dict, error: str, wall_s: float | None = None) -> dict:
    rec = dict(base, status="failed", error=error)
    if wall_s is not None:
        rec["wall_s"] = round(wall_s, 4)
    return rec


class Writer:
    """Appends JSON lines and flushes each one, so a crash loses at most one case."""

    def __init__(self, path: str):
        self.path = path
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)

    def write(self, record: dict) -> None:
        line = json.dumps(record, separators=(", ", ": "), default=str)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()


def read_lines(path: str):
    """Every parsable JSON object of a measurement file (a torn last line is skipped)."""
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                yield obj


def done_case_ids(path: str, retry_failed: bool = False, resume: bool = True,
                  run_id: str | None = None) -> set:
    """Case ids not to measure again.

    Every case this run already recorded (a restarted worker must not loop on a case
    that crashed it); from earlier runs, measured cases, and failed ones unless
    ``retry_failed``; nothing from earlier runs when not ``resume``.
    """
    done = set()
    for rec in read_lines(path):
        cid = rec.get("case_id")
        if not cid:
            continue
        if run_id is not None and rec.get("run_id") == run_id:
            done.add(cid)
        elif resume and (rec.get("status") == "ok" or not retry_failed):
            done.add(cid)
    return done


def run_records(path: str, run_id: str) -> list:
    return [r for r in read_lines(path) if r.get("run_id") == run_id and "case_id" in r]


def has_header(path: str, run_id: str) -> bool:
    return any(r.get("run", {}).get("run_id") == run_id for r in read_lines(path)
               if isinstance(r.get("run"), dict))


# ----------------------------------------------------------------- in-flight marker

def inflight_path(out_path: str) -> str:
    return out_path + ".inflight"


def mark_inflight(out_path: str, record: dict, timeout_s: float, phase: str = "measure") -> None:
    """Say which case is running, for a supervisor that may have to kill this process."""
    tmp = inflight_path(out_path) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"record": record, "started": time.time(), "timeout_s": timeout_s,
                   "phase": phase}, f)
    os.replace(tmp, inflight_path(out_path))


def clear_inflight(out_path: str) -> None:
    try:
        os.remove(inflight_path(out_path))
    except FileNotFoundError:
        pass


def read_inflight(out_path: str):
    try:
        with open(inflight_path(out_path), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------------ provenance

NVIDIA_SMI_QUERY = ("clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit,"
                    "driver_version")


def nvidia_smi() -> list:
    """Clocks, power limit and driver of each GPU, or an empty list if unavailable."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={NVIDIA_SMI_QUERY}",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    keys = NVIDIA_SMI_QUERY.split(",")
    rows = []
    for line in out.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(keys):
            rows.append(dict(zip(keys, values)))
    return rows


def provenance(*, run_id, hardware, device, mode, suites, argv, torch=None) -> dict:
    """The run header: who, when, where, with what software."""
    info = {
        "run_id": run_id,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "hardware": hardware,
        "device": device,
        "mode": mode,
        "suites": list(suites),
        "command": " ".join([os.path.basename(sys.executable), "-m", "rooflinesim.harness",
                             *argv]),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
    }
    try:
        import numpy

        info["numpy"] = numpy.__version__
    except Exception:
        pass
    if torch is not None:
        info.update(_torch_provenance(torch, device))
    return info


def _torch_provenance(torch, device) -> dict:
    info = {"torch": torch.__version__}
    for key, get in (
        ("cuda", lambda: torch.version.cuda),
        ("cudnn", lambda: torch.backends.cudnn.version()),
        ("nccl", lambda: _version_text(torch.cuda.nccl.version())),
        ("torch_threads", lambda: torch.get_num_threads()),
    ):
        try:
            info[key] = get()
        except Exception:
            info[key] = None
    if device != "cuda":
        return info
    try:
        props = torch.cuda.get_device_properties(0)
        info.update(
            device_name=props.name,
            device_count=torch.cuda.device_count(),
            sm_count=props.multi_processor_count,
            l2_bytes=getattr(props, "L2_cache_size", None),
            total_memory_bytes=props.total_memory,
            compute_capability=f"{props.major}.{props.minor}",
        )
    except Exception as exc:
        info["device_error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    smi = nvidia_smi()
    if smi:
        info["driver_version"] = smi[0].get("driver_version")
        info["nvidia_smi"] = smi
    matmul = torch.backends.cuda.matmul
    for key in ("allow_bf16_reduced_precision_reduction", "allow_fp16_reduced_precision_reduction"):
        try:
            info[key] = bool(getattr(matmul, key))
        except Exception:
            pass
    env = {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES", "NCCL_NVLS_ENABLE",
                                      "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
           if k in os.environ}
    info["env"] = env
    return info


def _version_text(v) -> str:
    return ".".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)


def new_run_id() -> str:
    return str(uuid.uuid4())
