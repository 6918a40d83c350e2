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

from ..errors import UserError
from ..files import decode, read_text

# The largest measurement file read back to resume (the project's are under a megabyte).
MAX_FILE_BYTES = 256 * 1024 * 1024

# Shape fields of each op, in record order; they (with op, dtype, backend and the
# timing mode) make the case id.
SHAPE_FIELDS = {
    "gemm": ("m", "n", "k", "batch"),
    "attention": ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "causal"),
    "moe": ("tokens", "hidden", "ffn", "experts", "top_k", "routing"),
    "grouped_gemm": ("rows", "n", "k", "experts"),
    "block_gemm": ("m", "n", "k"),
    "fused_moe": ("tokens", "topk", "experts", "n", "k", "input"),
    "allreduce": ("bytes", "world_size"),
    "allgather": ("bytes", "world_size"),
    "reducescatter": ("bytes", "world_size"),
    "alltoall": ("bytes", "world_size"),
    "copy": ("bytes",),
    "rmsnorm": ("tokens", "hidden"),
    "add_rmsnorm": ("tokens", "hidden"),
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
    """Appends JSON lines, each in one write, so a crash loses at most one case and
    leaves no line half written but the last; a torn last line (a process killed while
    writing) is ended first, so that the next record starts a line of its own."""

    def __init__(self, path: str):
        self.path = path
        parent = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create the directory {parent} for {path} "
                            f"({exc.strerror or exc})") from None

    def write(self, record: dict) -> None:
        line = json.dumps(record, separators=(", ", ": "), default=str) + "\n"
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as exc:
            raise UserError(f"cannot write {self.path} ({exc.strerror or exc})") from None
        try:
            if self._torn_tail(fd):
                line = "\n" + line
            os.write(fd, line.encode("utf-8"))
        except OSError as exc:
            raise UserError(f"cannot write {self.path} ({exc.strerror or exc})") from None
        finally:
            os.close(fd)


    def _torn_tail(self, fd: int) -> bool:
        """Whether the file ends in a line with no newline that is a whole record (then
        the next record starts a line). A last line that is not valid JSON is what a
        process killed while writing left: it is cut off (the case is measured again)."""
        size = os.fstat(fd).st_size
        if not size or os.pread(fd, 1, size - 1) == b"\n":
            return False
        start = max(0, size - (1 << 20))
        tail = os.pread(fd, size - start, start)
        cut = tail.rfind(b"\n") + 1
        try:
            json.loads(tail[cut:])
            return True
        except (ValueError, RecursionError):
            pass
        if cut == 0 and start > 0:  # a last line over a megabyte long: keep it, end it
            return True
        os.ftruncate(fd, start + cut)
        print(f"harness: {self.path}: removed an unfinished last line ({size - start - cut} "
              "bytes, from a run that was stopped while writing)", file=sys.stderr, flush=True)
        return False


def read_lines(path: str):
    """Every JSON object of a measurement file; a line that does not parse (a torn
    last line) is skipped, and a file that is not UTF-8 text is one sentence."""
    if not os.path.exists(path):
        return
    for line in read_text(path, "measurement", MAX_FILE_BYTES).splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            yield obj


def check_measurement_file(path: str) -> None:
    """Refuse to append to a file that is neither empty nor a measurement file (its first
    line a run header): measurements must not land in a user's other files."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UserError(f"cannot read --out {path} ({exc.strerror or exc})") from None
    if not head.strip():
        return
    first = decode(head.lstrip().split(b"\n", 1)[0], path, "measurement")
    try:
        obj = json.loads(first)
    except (ValueError, RecursionError):
        obj = None
    if not (isinstance(obj, dict) and isinstance(obj.get("run"), dict)):
        raise UserError(f"--out {path} is not a measurement file (its first line is not a run "
                        "header) and will not be appended to; name a new file")


# ----------------------------------------------------------------------- lock

class OutLock:
    """An advisory lock (flock) on the measurement file for one run, so that two runs
    never append to one file; ``<out>.lock`` says which process holds it."""

    def __init__(self, out: str):
        self.out, self.info = out, out + ".lock"
        self.fd: int | None = None
        self.created = False

    def __enter__(self):
        import fcntl

        self.created = not os.path.exists(self.out)
        try:
            self.fd = os.open(self.out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as exc:
            raise UserError(f"cannot write {self.out} ({exc.strerror or exc})") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self.fd)
            self.fd = None
            raise UserError(f"--out {self.out} is in use by another harness run ({self._holder()}); "
                            "wait for it to finish or name another file") from None
        try:
            with open(self.info, "w", encoding="utf-8") as f:
                f.write(f"pid {os.getpid()} on {socket.gethostname()} since "
                        f"{datetime.datetime.now().isoformat(timespec='seconds')}\n")
        except OSError:
            pass
        return self

    def _holder(self) -> str:
        try:
            with open(self.info, encoding="utf-8", errors="replace") as f:
                text = " ".join(f.read(200).split())
            return text or "process unknown"
        except OSError:
            return "process unknown"

    def __exit__(self, *exc):
        try:
            os.remove(self.info)
        except OSError:
            pass
        try:
            if self.created and os.path.getsize(self.out) == 0:
                os.remove(self.out)  # nothing was measured: leave no empty file behind
        except OSError:
            pass
        if self.fd is not None:
            os.close(self.fd)
        return False


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
