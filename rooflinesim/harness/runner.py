"""The measurement loop: pick the cases still to do, measure each, write each record.

Every case ends as one record, ``status: ok`` or ``status: failed`` with a one-line
error; a failure never stops the run, except when the CUDA context itself is broken
(then exit code 3, and a re-run with the same output file resumes).
"""

from __future__ import annotations

import gc
import os
import sys
import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field

from . import records
from .progress import Progress, describe
from .suites import COLLECTIVE_OPS
from .timing import (CPU_MAX_ROTATION_BYTES, CPU_ROTATION_BYTES, CudaTimer, chained_line,
                     rotation_sets, time_cpu)

EXIT_CUDA_BROKEN = 3
PROFILE_TIMEOUT_S = 60.0  # the kernel-count pass of one case
CPU_BACKENDS = ("numpy", "torch-cpu")
NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}


def keep_multicast_off() -> None:
    """NVLink multicast stays off (set only where unset; never switched on)."""
    for key, value in NVLS_OFF.items():
        os.environ.setdefault(key, value)


@dataclass
class Options:
    out: str
    device: str  # "cuda" or "cpu"
    mode: str  # "graph" or "eager" (the CPU is always eager)
    hardware: str
    run_id: str
    suites: list
    argv: list
    max_cases: int | None = None
    deadline: float | None = None  # epoch seconds; no new case starts after it
    resume: bool = True
    retry_failed: bool = False
    profile: bool = True
    case_timeout_s: float = 180.0
    warm_gpu_s: float = 0.0  # a busy burst before each case's timed replays (0: none)
    builds: int = 1  # times each case is built afresh and timed (the record: the median)
    quiet: bool = False
    notes: list = field(default_factory=list)

    @property
    def timing_mode(self) -> str:
        return "eager" if self.device == "cpu" else self.mode

    def over_budget(self) -> bool:
        return self.deadline is not None and time.time() >= self.deadline


def runs_here(case: dict, device: str) -> bool:
    """CPU cases (numpy / torch-cpu backends, self-test) run only with --device cpu."""
    cpu_case = case.get("backend") in CPU_BACKENDS or case["op"] == "selftest"
    return cpu_case == (device == "cpu")


def plan(cases: list, opts: Options, world_size: int):
    """(local cases, collective cases) still to do, each as (case, case_id)."""
    done = records.done_case_ids(opts.out, opts.retry_failed, opts.resume, opts.run_id)
    local, coll, seen = [], [], set()
    skipped = {"done": 0, "other device": 0, "collectives": 0}
    for case in cases:
        if not runs_here(case, opts.device):
            skipped["other device"] += 1
            continue
        if case["op"] in COLLECTIVE_OPS:
            if world_size < 2:
                skipped["collectives"] += 1
                continue
            case = dict(case, world_size=world_size)
        cid = records.case_id(case, opts.timing_mode)
        if cid in seen:
            continue
        seen.add(cid)
        if cid in done:
            skipped["done"] += 1
            continue
        (coll if case["op"] in COLLECTIVE_OPS else local).append((case, cid))
    if opts.max_cases is not None:
        local = local[: opts.max_cases]
        coll = coll[: max(0, opts.max_cases - len(local))]
    return local, coll, skipped


def _sm_clock(torch):
    """A reader of the SM clock in MHz (PyTorch asks NVML), or None where it cannot be read."""
    try:
        if int(torch.cuda.clock_rate()) > 0:
            return torch.cuda.clock_rate
    except Exception:
        pass
    return None


class GpuContext:
    def __init__(self, torch, opts: Options):
        self.torch = torch
        self.opts = opts
        self.device = torch.device("cuda", torch.cuda.current_device())
        props = torch.cuda.get_device_properties(self.device)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 50 * 1024 ** 2))
        self.clock = _sm_clock(torch)

    def healthy(self) -> bool:
        torch = self.torch
        try:
            torch.cuda.synchronize()
            return float(torch.ones(16, device=self.device).sum().item()) == 16.0
        except Exception:
            return False

    def tidy(self, failed: bool) -> None:
        """Every case starts from an empty caching allocator, so that no case's host time
        depends on the blocks earlier cases left cached (eager copies took 8 µs in one
        process and 15-16 µs after MoE layers in another: eager-memory.jsonl,
        eager-holdout13.jsonl)."""
        torch = self.torch
        try:
            gc.collect()
            torch.cuda.empty_cache()
        except Exception:
            pass


def measure_gpu(ctx: GpuContext, case: dict, cid: str) -> dict:
    from . import cases_gpu

    opts, torch = ctx.opts, ctx.torch
    base = records.base_record(case, cid, opts.run_id, opts.hardware, opts.mode == "graph")
    records.mark_inflight(opts.out, base, opts.case_timeout_s)
    t0 = time.perf_counter()
    caught = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            set_bytes_fn, build = cases_gpu.BUILDERS[case["op"]]
            sets = rotation_sets(set_bytes_fn(case), ctx.l2_bytes)
            timings = []
            for b in range(opts.builds):
                if b:
                    del built
                    ctx.tidy(False)
                built = build(torch, case, ctx.device, sets)
                with built.context or nullcontext():
                    timings.append(CudaTimer(torch, graph=opts.mode == "graph", warm_gpu_s=opts.warm_gpu_s,
                                             clock=ctx.clock).time(built.fn, sets))
                    last = b == opts.builds - 1
                    if opts.profile and last:
                        records.mark_inflight(opts.out, base, PROFILE_TIMEOUT_S, phase="profile")
                    kernels = _kernels(ctx, built) if opts.profile and last else {}
        rec = _ok_record(base, built.backend, built.extra, combine_builds(timings), kernels)
        del built
    except Exception as exc:
        rec = records.failure_record(base, _error_line(exc, caught))
    rec["wall_s"] = round(time.perf_counter() - t0, 4)
    return rec


def combine_builds(timings: list) -> dict:
    """The record's timing fields over the case built and timed afresh ``len(timings)``
    times (new inputs each time): the median of the builds' medians, the extremes of all,
    and each build's median (eager launches: one build's host time can sit 1.3-1.5x above
    another's, the same case in the same process, benchmarks/eager_repeat.py)."""
    out = timings[0].fields()
    if len(timings) > 1:
        medians = sorted(t.measured_s for t in timings)
        out.update(measured_s=medians[len(medians) // 2] if len(medians) % 2 else
                   0.5 * (medians[len(medians) // 2 - 1] + medians[len(medians) // 2]),
                   min_s=min(t.min_s for t in timings), max_s=max(t.max_s for t in timings),
                   builds=[t.measured_s for t in timings])
    return out


def _init_profiler(torch) -> None:
    """Start the profiler once before any graph is captured (a known kineto/CUDA-graph
    ordering problem: pytorch/pytorch#75504)."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            pass
    except Exception:
        pass


def _kernels(ctx: GpuContext, built) -> dict:
    from .cases_gpu import count_kernels

    try:
        count, names = count_kernels(ctx.torch, built.fn, built.include_copies)
        return {"kernels": count, "kernel_names": names}
    except Exception as exc:  # metadata only, never fatal
        return {"kernels_error": chained_line(exc)}


def _ok_record(base, backend, extra, timing_fields, kernels) -> dict:
    rec = {k: v for k, v in base.items() if k not in ("hardware", "case_id", "run_id", "suite")}
    rec.update(extra)
    if backend:
        rec["backend"] = backend
    rec.update(timing_fields)
    rec.update(kernels)
    rec.update(hardware=base["hardware"], status="ok", case_id=base["case_id"],
               run_id=base["run_id"], suite=base["suite"])
    return rec


def _error_line(exc: BaseException, caught) -> str:
    msg = chained_line(exc)
    reasons = []
    for w in caught or ():
        text = str(w.message).strip().splitlines()
        if text and text[0] not in reasons:
            reasons.append(text[0][:200])
    if reasons:
        msg += " | warnings: " + "; ".join(reasons[:4])
    return msg


def measure_cpu(opts: Options, case: dict, cid: str) -> dict:
    from . import cases_cpu

    base = records.base_record(case, cid, opts.run_id, opts.hardware, False)
    records.mark_inflight(opts.out, base, opts.case_timeout_s)
    t0 = time.perf_counter()
    try:
        if case["op"] not in cases_cpu.BUILDERS:
            raise ValueError(f"op '{case['op']}' has no CPU builder")
        set_bytes_fn, build = cases_cpu.BUILDERS[case["op"]]
        sets = rotation_sets(set_bytes_fn(case), CPU_ROTATION_BYTES, factor=1,
                             max_bytes=CPU_MAX_ROTATION_BYTES)
        fn = build(case, sets)
        timing = time_cpu(fn, sets)
        rec = _ok_record(base, None, {}, timing.fields(), {})
    except Exception as exc:
        rec = records.failure_record(base, chained_line(exc))
    rec["wall_s"] = round(time.perf_counter() - t0, 4)
    return rec


# ----------------------------------------------------------------------------- run

def import_torch():
    import torch

    return torch


def run(cases: list, opts: Options) -> int:
    """Measure the cases not yet in ``opts.out``; returns the process exit code."""
    keep_multicast_off()
    torch = import_torch() if opts.device == "cuda" else None
    world_size = torch.cuda.device_count() if torch is not None else 0
    writer = records.Writer(opts.out)
    local, coll, skipped = plan(cases, opts, world_size)
    _say_skipped(skipped, world_size, opts)
    if (local or coll) and not records.has_header(opts.out, opts.run_id):
        writer.write({"run": records.provenance(
            run_id=opts.run_id, hardware=opts.hardware, device=opts.device,
            mode=opts.timing_mode, suites=opts.suites, argv=opts.argv, torch=torch)})
    if not (local or coll):
        _note(opts, "nothing to measure")
    progress = Progress(len(local) + len(coll), opts.quiet)
    ctx = None
    if torch is not None:
        torch.manual_seed(0)
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 unless a case says tf32
        ctx = GpuContext(torch, opts)
        if opts.profile:
            _init_profiler(torch)
    try:
        for case, cid in local:
            if opts.over_budget():
                _note(opts, "time budget reached: stopping before the remaining cases")
                return 0
            progress.begin(describe(case))
            rec = measure_cpu(opts, case, cid) if ctx is None else measure_gpu(ctx, case, cid)
            writer.write(rec)
            records.clear_inflight(opts.out)
            progress.end(rec)
            if ctx is not None:
                failed = rec["status"] != "ok"
                ctx.tidy(failed)
                if failed and not ctx.healthy():
                    _note(opts, "the CUDA context is broken after this failure; run again with "
                                "the same --out to resume")
                    return EXIT_CUDA_BROKEN
        if coll and not opts.over_budget():
            from .collectives import run_collectives

            torch.cuda.empty_cache()  # rank 0 shares GPU 0 with this process

            run_collectives(coll, opts, world_size, start=progress.count,
                            total=progress.total)
    finally:
        progress.close()
    return 0


def _say_skipped(skipped: dict, world_size: int, opts: Options) -> None:
    if skipped["done"]:
        _note(opts, f"resuming: {skipped['done']} cases already in {opts.out}")
    if skipped["collectives"]:
        _note(opts, f"skipping {skipped['collectives']} collective cases: they need >= 2 GPUs "
                    f"(found {world_size})")
    if skipped["other device"]:
        _note(opts, f"skipping {skipped['other device']} cases that do not run on "
                    f"--device {opts.device}")


def _note(opts: Options, text: str) -> None:
    opts.notes.append(text)
    if not opts.quiet:
        print(f"harness: {text}", file=sys.stderr, flush=True)


def summary_table(out: str, run_id: str) -> str:
    """Per op: measured and failed counts and wall time, for this run's records."""
    rows = {}
    for rec in records.run_records(out, run_id):
        row = rows.setdefault(rec.get("op", "?"), [0, 0, 0.0])
        row[0 if rec.get("status") == "ok" else 1] += 1
        row[2] += float(rec.get("wall_s") or 0.0)
    lines = [f"{'op':<16}{'ok':>6}{'failed':>8}{'wall s':>10}"]
    for op in sorted(rows):
        ok, failed, wall = rows[op]
        lines.append(f"{op:<16}{ok:>6}{failed:>8}{wall:>10.1f}")
    tot = [sum(r[i] for r in rows.values()) for i in range(3)]
    lines.append(f"{'total':<16}{tot[0]:>6}{tot[1]:>8}{tot[2]:>10.1f}")
    return "\n".join(lines)
