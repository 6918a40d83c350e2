"""Run the measurement loop in a worker process and restart it if it dies or hangs.

A crash inside a CUDA library (or a hung NCCL call) takes the whole process with it.
The worker says which case it is measuring in ``<out>.inflight``; when the worker
dies, or that case runs past its time limit, the supervisor kills the worker's
process group, writes a failure record for the case and starts a new worker, which
resumes from the measurement file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from . import records

POLL_S = 0.5


def die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (no orphans on a GPU)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def _watch(proc: subprocess.Popen, out: str):
    """Wait for the worker; (exit code, reason it was killed or None)."""
    while True:
        try:
            return proc.wait(timeout=POLL_S), None
        except subprocess.TimeoutExpired:
            pass
        info = records.read_inflight(out)
        if info and time.time() - float(info.get("started", time.time())) > float(
                info.get("timeout_s", float("inf"))):
            _kill_group(proc)
            where = " in the kernel-count profiler" if info.get("phase") == "profile" else ""
            return proc.returncode, f"timed out{where} after {float(info['timeout_s']):.0f} s"


def _worker_env() -> dict:
    """This environment, with this copy of the package first on the import path."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def supervise(worker_args: list, out: str, run_id: str, restarts: int,
              deadline: float | None, max_cases: int | None) -> int:
    """Run ``python -m rooflinesim.harness run <worker_args> --worker`` until it finishes."""
    records.clear_inflight(out)
    no_profile = False
    for attempt in range(restarts + 1):
        args = list(worker_args) + ["--worker", "--run-id", run_id]
        if no_profile and "--no-profile" not in args:
            args.append("--no-profile")
        if deadline is not None:
            left = deadline - time.time()
            if left <= 0:
                return 0
            args += ["--time-budget", f"{max(left, 0.1):.1f}"]
        if max_cases is not None:
            left_cases = max_cases - len(records.run_records(out, run_id))
            if left_cases <= 0:
                return 0
            args += ["--max-cases", str(left_cases)]
        proc = subprocess.Popen([sys.executable, "-m", "rooflinesim.harness", "run", *args],
                                env=_worker_env(), start_new_session=True)
        try:
            rc, killed = _watch(proc, out)
        except BaseException:  # Ctrl-C or a kill of this process: take the worker along
            _kill_group(proc)
            raise
        if killed is None and rc in (0, 2):
            records.clear_inflight(out)
            return rc
        reason = killed or f"worker process died (exit code {rc})"
        info = records.read_inflight(out)
        if info and info.get("phase") == "profile":
            no_profile = True  # the profiler hung or crashed: count no more kernels
            reason += "; later cases are measured without the kernel count"
        if info and isinstance(info.get("record"), dict):
            records.Writer(out).write(records.failure_record(info["record"], reason))
        records.clear_inflight(out)
        _kill_group(proc)  # leftovers of the group, e.g. collective ranks
        if attempt < restarts:
            print(f"harness: {reason}; restarting the worker ({attempt + 1}/{restarts}), "
                  "it resumes from the measurement file", file=sys.stderr, flush=True)
    print(f"harness: giving up after {restarts} restarts", file=sys.stderr)
    return 1
