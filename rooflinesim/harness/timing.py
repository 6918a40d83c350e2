"""Timers: CUDA graph replays, eager launch loops, host clock for the CPU; rotation sizing.

Every timer takes ``fn(i)``, which runs call ``i`` on input set ``i % sets`` and
returns whatever the op returns (the timers drop it at once, so the graph pool or
the caching allocator can reuse the memory). torch is imported lazily: the CPU path
and the suite listing run without it.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

# Rules of the method (see the package docstring).
TARGET_REPLAY_S = 2e-3  # one timed replay lasts at least this long ...
MAX_CALLS = 256  # ... with at most this many calls captured in it
WARM_REPLAYS = 3
MIN_REPLAYS = 15
MIN_TIMED_S = 0.1
MAX_REPLAYS = 100
ROTATION_L2_FACTOR = 4  # input sets together span >= 4x the L2
MAX_SETS = 64
MAX_ROTATION_BYTES = 16 * 1024 ** 3
CPU_ROTATION_BYTES = 64 * 1024 ** 2
CPU_MAX_ROTATION_BYTES = 1024 ** 3


@dataclass(frozen=True)
class Timing:
    """Per-call seconds over the timed replays, and how they were taken."""

    measured_s: float  # median
    min_s: float
    max_s: float
    calls: int
    sets: int
    replays: int
    graph: bool
    graph_error: str | None = None
    sm_clock_mhz: tuple | None = None  # the SM clock just before and just after the timed replays
    warm_gpu_s: float = 0.0  # the busy burst run just before them (0: none)

    def fields(self) -> dict:
        out = {"measured_s": self.measured_s, "min_s": self.min_s, "max_s": self.max_s,
               "calls": self.calls, "sets": self.sets, "replays": self.replays,
               "graph": self.graph}
        if self.graph_error:
            out["graph_error"] = self.graph_error
        if self.sm_clock_mhz is not None:
            out["sm_clock_mhz"] = list(self.sm_clock_mhz)
        if self.warm_gpu_s:
            out["warm_gpu_s"] = self.warm_gpu_s
        return out


def rotation_sets(set_bytes: int, l2_bytes: int, *, factor=ROTATION_L2_FACTOR,
                  max_sets=MAX_SETS, max_bytes=MAX_ROTATION_BYTES) -> int:
    """How many independent input sets make the rotation span ``factor`` x the cache."""
    set_bytes = max(1, int(set_bytes))
    want = math.ceil(factor * max(0, l2_bytes) / set_bytes)
    cap = max(1, max_bytes // set_bytes)
    return int(max(1, min(want, max_sets, cap)))


def calls_per_replay(call_s: float, *, target_s=TARGET_REPLAY_S, max_calls=MAX_CALLS) -> int:
    """Calls captured in one replay so it lasts >= target_s (1 .. max_calls)."""
    if not call_s > 0 or math.isinf(call_s):
        return max_calls if call_s == 0 else 1
    return int(min(max_calls, max(1, math.ceil(target_s / call_s))))


def timed_replays(replay_s: float) -> int:
    """Replays to time: >= MIN_REPLAYS and >= MIN_TIMED_S in all, at most MAX_REPLAYS."""
    if not replay_s > 0:
        return MAX_REPLAYS
    return int(min(MAX_REPLAYS, max(MIN_REPLAYS, math.ceil(MIN_TIMED_S / replay_s))))


def summarize(replay_s: list[float], calls: int, sets: int, graph: bool,
              graph_error: str | None = None, **extra) -> Timing:
    per_call = [t / calls for t in replay_s]
    return Timing(statistics.median(per_call), min(per_call), max(per_call), calls, sets,
                  len(per_call), graph, graph_error, **extra)


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    msg = f"{type(exc).__name__}: {text[0] if text else ''}".strip()
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def chained_line(exc: BaseException, limit: int = 300) -> str:
    """one_line of an exception and of the one it was raised while handling, if any."""
    msg = one_line(exc, limit)
    context = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    if context is not None and context is not exc:
        msg = one_line(context, limit) + " (then " + msg + ")"
    return msg if len(msg) <= 2 * limit else msg[: 2 * limit - 3] + "..."


# --------------------------------------------------------------------------- CUDA

class CudaTimer:
    """Times ``fn`` on the current CUDA device, as a CUDA graph or as eager launches.

    ``agree(value, how)`` makes several processes take the same decision (``how`` is
    "max" or "min"); for a single process it is the identity. Collectives need it:
    every rank must capture the same number of calls and replay the same number of
    times, or NCCL would wait forever.
    """

    def __init__(self, torch, graph: bool = True, agree=None, warm_gpu_s: float = 0.0, clock=None):
        self.torch = torch
        self.graph = graph
        self.agree = agree or (lambda value, how: value)
        self.warm_gpu_s = warm_gpu_s  # a busy burst this long just before the timed replays
        self.clock = clock  # () -> the SM clock in MHz, or None: not read

    def _burst(self) -> None:
        """Keep the GPU busy for about ``warm_gpu_s`` (matrix products on a small working
        set), so that the timed replays start at its working clock: launches of small
        kernels leave it mostly idle, and an idle GPU lowers its clock."""
        torch = self.torch
        a = torch.ones(2048, 2048, device="cuda", dtype=torch.bfloat16)
        per = 2 * 2048 ** 3 / 5e14  # seconds per product at a nominal 500 TFLOP/s
        for _ in range(max(1, int(self.warm_gpu_s / per))):
            torch.mm(a, a)
        torch.cuda.synchronize()
        del a

    def _read_clock(self):
        try:
            return int(self.clock())
        except Exception:
            return None

    def _elapsed(self, launch, repeat: int) -> list[float]:
        """Seconds of each of ``repeat`` launches, bracketed by events, one sync at end."""
        cuda = self.torch.cuda
        events = [(cuda.Event(enable_timing=True), cuda.Event(enable_timing=True))
                  for _ in range(repeat)]
        for start, end in events:
            start.record()
            launch()
            end.record()
        events[-1][1].synchronize()
        return [start.elapsed_time(end) / 1e3 for start, end in events]

    def warm_up(self, fn, calls: int = 3) -> None:
        """Run a few calls on a side stream, as graph capture requires, then sync."""
        cuda = self.torch.cuda
        side = cuda.Stream()
        side.wait_stream(cuda.current_stream())
        with cuda.stream(side):
            for i in range(calls):
                fn(i)
        cuda.current_stream().wait_stream(side)
        cuda.synchronize()

    def estimate_call_s(self, fn) -> float:
        """A quick eager estimate of one call: one call, then enough for ~1 ms."""
        first = self.agree(self._elapsed(lambda: fn(0), 1)[0], "max")
        n = int(min(64, max(1, math.ceil(1e-3 / max(first, 1e-7)))))
        if n == 1:
            return first

        def loop():
            for i in range(n):
                fn(i)
        return self._elapsed(loop, 1)[0] / n

    def capture(self, fn, calls: int):
        """One CUDA graph holding ``calls`` calls, cycling through the input sets."""
        graph = self.torch.cuda.CUDAGraph()
        with self.torch.cuda.graph(graph):
            for i in range(calls):
                fn(i)
        return graph

    def time(self, fn, sets: int) -> Timing:
        self.warm_up(fn)
        call_s = self.agree(self.estimate_call_s(fn), "max")
        # every input set is used in each replay, so the rotation really spans the L2
        calls = max(calls_per_replay(call_s), min(sets, MAX_CALLS))
        graph, graph_error = None, None
        if self.graph:
            try:
                graph = self.capture(fn, calls)
            except Exception as exc:  # capture refused: fall back to eager launches
                graph, graph_error = None, "capture failed: " + chained_line(exc)
                self.torch.cuda.synchronize()
            if self.agree(1 if graph is not None else 0, "min") == 0:
                graph = None
                graph_error = graph_error or "capture failed on another rank"
        used_graph = graph is not None
        if used_graph:
            launch = graph.replay
        else:
            def launch():
                for i in range(calls):
                    fn(i)
        replay_s = self.agree(statistics.median(self._elapsed(launch, WARM_REPLAYS)), "max")
        if used_graph and calls < MAX_CALLS and replay_s < TARGET_REPLAY_S / 2:
            # The eager estimate included launch gaps that the graph removes: capture
            # more calls so that a replay lasts the target time.
            more = calls_per_replay(replay_s / calls)
            if more > calls:
                try:
                    bigger = self.capture(fn, more)
                except Exception:
                    bigger = None
                if self.agree(1 if bigger is not None else 0, "min") == 1:
                    graph, calls, launch = bigger, more, bigger.replay
                    replay_s = self.agree(
                        statistics.median(self._elapsed(launch, WARM_REPLAYS)), "max")
                del bigger
        replays = int(self.agree(timed_replays(replay_s), "max"))
        if self.warm_gpu_s:
            self._burst()
        before = self._read_clock() if self.clock else None
        times = self._elapsed(launch, replays)
        after = self._read_clock() if self.clock else None
        clocks = (before, after) if before is not None and after is not None else None
        del graph, launch
        return summarize(times, calls, sets, used_graph, graph_error, sm_clock_mhz=clocks,
                         warm_gpu_s=self.warm_gpu_s)


# ---------------------------------------------------------------------------- CPU

def time_cpu(fn, sets: int, clock=time.perf_counter) -> Timing:
    """Host-clock timing of a synchronous ``fn`` with the same replay rules."""
    for i in range(2):
        fn(i)
    t0 = clock()
    fn(0)
    call_s = clock() - t0
    calls = calls_per_replay(call_s)

    def replay():
        start = clock()
        for i in range(calls):
            fn(i)
        return clock() - start

    warm = [replay() for _ in range(1)]
    replays = timed_replays(statistics.median(warm))
    times = [replay() for _ in range(replays)]
    return summarize(times, calls, sets, False)
