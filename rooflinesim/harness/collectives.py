"""NCCL collectives through torch.distributed: one process per GPU, rank 0 writes.

Every rank times the same graph (or, if capture fails, the same eager loop) with CUDA
events; the record holds the max over ranks of the per-rank median, min and max.
Bus bandwidth follows the nccl-tests conventions: allreduce moves 2(n-1)/n of the
bytes over each rank's links, allgather, reducescatter and alltoall (n-1)/n.
NVLink multicast (NVLS) stays off: the environment keeps NCCL_NVLS_ENABLE=0.
"""

from __future__ import annotations

import datetime
import socket
import sys
import time

from . import records
from .progress import Progress
from .supervisor import die_with_parent
from .timing import CudaTimer, chained_line, one_line, rotation_sets

NCCL_TIMEOUT_S = 300
FIRST_CASE_EXTRA_TIMEOUT_S = 120  # process start and communicator setup
MAX_RESPAWNS = 2


def bus_factor(op: str, n: int) -> float:
    return 2 * (n - 1) / n if op == "allreduce" else (n - 1) / n


def run_collectives(items, opts, world_size, start=0, total=None) -> None:
    """Measure (case, case_id) items in world_size spawned processes, respawning on a crash."""
    import torch.multiprocessing as mp

    remaining = list(items)
    for attempt in range(MAX_RESPAWNS + 1):
        if not remaining or opts.over_budget():
            return
        ctx = {"out": opts.out, "run_id": opts.run_id, "hardware": opts.hardware,
               "mode": opts.mode, "deadline": opts.deadline, "quiet": opts.quiet,
               "case_timeout_s": opts.case_timeout_s, "start": start,
               "total": total or len(remaining)}
        # Until rank 0 takes over, the first case covers process start and NCCL setup.
        first = records.base_record(remaining[0][0], remaining[0][1], opts.run_id,
                                    opts.hardware, opts.mode == "graph")
        records.mark_inflight(opts.out, first, opts.case_timeout_s + FIRST_CASE_EXTRA_TIMEOUT_S)
        try:
            mp.spawn(_rank_main, args=(world_size, _free_port(), remaining, ctx),
                     nprocs=world_size, join=True)
            records.clear_inflight(opts.out)
            return
        except Exception as exc:
            _record_crash(opts, "collective process failed: " + one_line(exc))
            done = records.done_case_ids(opts.out, retry_failed=False)
            left = [it for it in remaining if it[1] not in done]
            start += len(remaining) - len(left)
            remaining = left
            print(f"harness: collective processes failed ({one_line(exc)}); "
                  f"{len(remaining)} cases left, attempt {attempt + 2}", file=sys.stderr)


def _record_crash(opts, error: str) -> None:
    info = records.read_inflight(opts.out)
    if info and isinstance(info.get("record"), dict):
        records.Writer(opts.out).write(records.failure_record(info["record"], error))
    records.clear_inflight(opts.out)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ in each process

def _rank_main(rank, world_size, port, items, ctx):
    die_with_parent()
    import torch
    import torch.distributed as dist


    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    kwargs = dict(backend="nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                  world_size=world_size, timeout=datetime.timedelta(seconds=NCCL_TIMEOUT_S))
    try:
        dist.init_process_group(device_id=device, **kwargs)
    except TypeError:  # torch without device_id
        dist.init_process_group(**kwargs)
    torch.manual_seed(rank)

    def agree(value, how):
        t = torch.tensor([float(value)], device=device, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX if how == "max" else dist.ReduceOp.MIN)
        return t.item()

    writer = records.Writer(ctx["out"]) if rank == 0 else None
    progress = Progress(ctx["total"], ctx["quiet"] or rank != 0, start=ctx["start"], plain=True)
    try:
        for index, (case, cid) in enumerate(items):
            go = ctx["deadline"] is None or time.time() < ctx["deadline"]
            if agree(1 if go else 0, "min") == 0:
                break
            base = records.base_record(case, cid, ctx["run_id"], ctx["hardware"],
                                       ctx["mode"] == "graph")
            if rank == 0:
                extra = FIRST_CASE_EXTRA_TIMEOUT_S if index == 0 else 0
                records.mark_inflight(ctx["out"], base, ctx["case_timeout_s"] + extra)
            rec = _measure(torch, dist, case, base, device, world_size, agree, ctx)
            if rank == 0:
                writer.write(rec)
                records.clear_inflight(ctx["out"])
                progress.end(rec)
        dist.barrier()
    finally:
        try:
            dist.destroy_process_group()
        except Exception:
            pass


def _buffers(torch, case, device, world_size, sets):
    """fn(i): the collective on input set i % sets, over `bytes` of bf16 in all."""
    import torch.distributed as dist

    op, nbytes = case["op"], case["bytes"]
    if nbytes % 2 or (nbytes // 2) % world_size:
        raise ValueError(f"{nbytes} bytes is not a whole number of bf16 elements per rank")
    n = nbytes // 2
    part = n // world_size
    in_n, out_n = {"allreduce": (n, 0), "allgather": (part, n), "reducescatter": (n, part),
                   "alltoall": (n, n)}[op]
    inp = [torch.randn(in_n, device=device, dtype=torch.bfloat16) for _ in range(sets)]
    out = [torch.empty(out_n, device=device, dtype=torch.bfloat16) for _ in range(sets)]
    call = {
        "allreduce": lambda j: dist.all_reduce(inp[j]),
        "allgather": lambda j: dist.all_gather_into_tensor(out[j], inp[j]),
        "reducescatter": lambda j: dist.reduce_scatter_tensor(out[j], inp[j]),
        "alltoall": lambda j: dist.all_to_all_single(out[j], inp[j]),
    }[op]
    return lambda i: call(i % sets)


def _set_bytes(case, world_size):
    nbytes, op = case["bytes"], case["op"]
    return {"allreduce": nbytes, "allgather": nbytes + nbytes // world_size,
            "reducescatter": nbytes + nbytes // world_size, "alltoall": 2 * nbytes}[op]


def _measure(torch, dist, case, base, device, world_size, agree, ctx):
    t0 = time.perf_counter()
    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20))
    sets = rotation_sets(_set_bytes(case, world_size), l2)
    fn, error = None, None
    try:
        fn = _buffers(torch, case, device, world_size, sets)
    except Exception as exc:  # agree first, so no rank waits in a collective alone
        error = chained_line(exc)
    if agree(0 if fn is None else 1, "min") == 0:
        fn = None
        torch.cuda.empty_cache()
        return records.failure_record(base, error or "buffer setup failed on another rank",
                                      time.perf_counter() - t0)
    try:
        timing = CudaTimer(torch, graph=ctx["mode"] == "graph", agree=agree).time(fn, sets)
        stats = torch.tensor([timing.measured_s, timing.min_s, timing.max_s], device=device,
                             dtype=torch.float64)
        dist.all_reduce(stats, op=dist.ReduceOp.MAX)
        measured_s, min_s, max_s = (float(x) for x in stats.tolist())
    except Exception as exc:
        return records.failure_record(base, chained_line(exc), time.perf_counter() - t0)
    finally:
        fn = None
    fields = timing.fields()
    fields.update(measured_s=measured_s, min_s=min_s, max_s=max_s)
    algbw = case["bytes"] / measured_s
    rec = {k: v for k, v in base.items() if k not in ("hardware", "case_id", "run_id", "suite")}
    rec.update(fields)
    rec.update(algbw_bytes_per_s=algbw,
               busbw_bytes_per_s=algbw * bus_factor(case["op"], world_size),
               hardware=base["hardware"], status="ok", case_id=base["case_id"],
               run_id=base["run_id"], suite=base["suite"],
               wall_s=round(time.perf_counter() - t0, 4))
    return rec
