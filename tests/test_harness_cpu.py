"""The measurement harness on a CPU: records, resume, failures, isolation, CLI errors.

Needs numpy only (no torch): the CUDA timer's control flow is checked against a small
stand-in for torch.cuda whose "graph" records calls and replays them.
"""

from __future__ import annotations

import contextlib
import json

import pytest

from rooflinesim.harness import cli, records, suites, timing

COMMON = ("op", "dtype", "measured_s", "min_s", "max_s", "hardware", "backend", "graph",
          "status", "case_id", "run_id", "suite")


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _run(*args):
    return cli.main(["run", "--device", "cpu", "--quiet", *args])


def _write_cases(path, cases):
    path.write_text(json.dumps(cases))
    return str(path)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny") / "m.jsonl"
    assert _run("--suite", "cpu-tiny", "--out", str(out)) == 0
    return out


def test_cpu_tiny_writes_header_then_one_ok_record_per_case(tiny_run):
    lines = _lines(tiny_run)
    header, recs = lines[0], lines[1:]
    run = header["run"]
    assert run["device"] == "cpu" and run["hardware"] == "cpu" and run["suites"] == ["cpu-tiny"]
    assert run["mode"] == "eager" and run["run_id"] and run["date"] and run["python"]
    assert len(recs) == len(suites.suite_cases("cpu-tiny"))
    for rec in recs:
        assert set(COMMON) <= set(rec), rec
        assert rec["status"] == "ok" and rec["run_id"] == run["run_id"]
        assert rec["hardware"] == "cpu" and rec["graph"] is False and rec["suite"] == "cpu-tiny"
        assert 0 < rec["min_s"] <= rec["measured_s"] <= rec["max_s"] < 1.0
        assert rec["calls"] >= 1 and 1 <= rec["sets"] <= timing.MAX_SETS
        assert timing.MIN_REPLAYS <= rec["replays"] <= timing.MAX_REPLAYS
        assert rec["case_id"] == records.case_id(rec, "eager")
    ops = {r["op"] for r in recs}
    assert ops == {"gemm", "copy", "rmsnorm"}


def test_second_run_resumes_and_writes_nothing(tiny_run):
    before = tiny_run.read_bytes()
    assert _run("--suite", "cpu-tiny", "--out", str(tiny_run)) == 0
    assert tiny_run.read_bytes() == before


def test_failing_case_gives_a_failure_record_and_the_run_goes_on(tmp_path):
    cases = [
        {"op": "gemm", "dtype": "fp32", "m": 8, "n": 16, "k": 16, "batch": 1, "backend": "numpy"},
        {"op": "gemm", "dtype": "fp32", "m": -1, "n": 16, "k": 16, "batch": 1, "backend": "numpy"},
        {"op": "copy", "dtype": "uint8", "bytes": 4096, "backend": "numpy"},
    ]
    out = tmp_path / "m.jsonl"
    assert _run("--cases", _write_cases(tmp_path / "c.json", cases), "--out", str(out)) == 0
    recs = _lines(out)[1:]
    assert [r["status"] for r in recs] == ["ok", "failed", "ok"]
    failed = recs[1]
    assert failed["m"] == -1 and "\n" not in failed["error"] and failed["error"]
    assert failed["op"] == "gemm" and failed["case_id"] and failed["run_id"] == recs[0]["run_id"]
    # failed cases are skipped on resume unless retried
    assert _run("--cases", str(tmp_path / "c.json"), "--out", str(out)) == 0
    assert len(_lines(out)) == 4
    assert _run("--cases", str(tmp_path / "c.json"), "--out", str(out), "--retry-failed") == 0
    again = _lines(out)
    assert again[-1]["status"] == "failed" and again[-1]["m"] == -1
    assert len(again) == 6  # a new header and the retried case


def test_isolated_run_records_a_crash_and_a_hang_and_goes_on(tmp_path):
    cases = [{"op": "selftest", "action": a, "dtype": "none"} for a in ("exit", "hang", "ok")]
    out = tmp_path / "m.jsonl"
    rc = _run("--cases", _write_cases(tmp_path / "c.json", cases), "--out", str(out),
              "--isolate", "--case-timeout", "2", "--restarts", "3")
    assert rc == 0
    recs = [r for r in _lines(out) if "case_id" in r]
    by_action = {r["action"]: r for r in recs}
    assert "died" in by_action["exit"]["error"] and by_action["exit"]["status"] == "failed"
    assert "timed out" in by_action["hang"]["error"]
    assert by_action["ok"]["status"] == "ok"
    assert len({r["run_id"] for r in recs}) == 1
    assert not (tmp_path / "m.jsonl.inflight").exists()


def test_max_cases_and_time_budget_limit_the_run(tmp_path):
    out = tmp_path / "m.jsonl"
    assert _run("--suite", "cpu-tiny", "--out", str(out), "--max-cases", "2") == 0
    assert len(_lines(out)) == 3
    assert _run("--suite", "cpu-tiny", "--out", str(out), "--time-budget", "0.001") == 0
    assert len([r for r in _lines(out) if "case_id" in r]) <= 3


def test_list_shows_every_suite_with_counts_and_estimates(capsys):
    assert cli.main(["run", "--list"]) == 0
    text = capsys.readouterr().out
    for name in suites.SUITE_NAMES:
        assert name in text
    assert cli.main(["list", "--suite", "gemm"]) == 0
    assert "gemm" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    [],
    ["run", "--suite", "nope"],
    ["run", "--max-cases", "0"],
    ["run", "--time-budget", "soon"],
    ["run", "--device", "tpu"],
    ["run", "--bogus"],
    ["run", "--suite", "cpu-tiny", "--cases", "x.json"],
    ["run", "--device", "cpu", "--cases", "/nonexistent/cases.json"],
])
def test_bad_arguments_exit_2_with_one_sentence(argv, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("harness: error:") and "\n" not in err and "Traceback" not in err


def test_bad_case_file_exits_2(tmp_path, capsys):
    path = _write_cases(tmp_path / "c.json", [{"op": "gemm", "m": 1}])
    assert cli.main(["run", "--device", "cpu", "--cases", path]) == 2
    assert "lacks" in capsys.readouterr().err


# ----------------------------------------------------------------- pure helpers

def test_case_id_is_stable_and_distinguishes_mode_backend_and_shape():
    g = suites.gemm(128, 4096, 4096)
    assert records.case_id(g, "graph") == records.case_id(dict(g, suite="x"), "graph")
    assert records.case_id(g, "graph") != records.case_id(g, "eager")
    assert records.case_id(g, "graph") != records.case_id(suites.gemm(129, 4096, 4096), "graph")
    a = suites.attention(1, 32, 8, 1, 4096, 128, False, backend="sdpa-flash")
    b = dict(a, backend="sdpa-cudnn")
    assert records.case_id(a, "graph") != records.case_id(b, "graph")


def test_the_harness_records_the_device_name_and_names_files_by_it():
    """The harness keeps no GPU name table (the specs' device_names are the one mapping):
    it records what torch reports, and names the default file after it."""
    class Cuda:
        @staticmethod
        def get_device_name(index):
            return "NVIDIA H100 80GB HBM3"

    torch = type("torch", (), {"cuda": Cuda})
    assert cli._hardware("cuda", torch) == "NVIDIA H100 80GB HBM3"
    assert cli._hardware("cpu", torch) == "cpu"
    assert records.file_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert records.file_slug("NVIDIA A100-SXM4-80GB") == "nvidia-a100-sxm4-80gb"
    assert records.file_slug("  ") == "unknown"


def test_rotation_and_replay_rules():
    l2 = 50 * 2 ** 20
    assert timing.rotation_sets(l2, l2) == 4  # 4 sets of one L2 each span 4x the L2
    assert timing.rotation_sets(1, l2) == timing.MAX_SETS
    assert timing.rotation_sets(10 * 2 ** 30, l2) == 1
    assert timing.rotation_sets(6 * 2 ** 30, 64 * 2 ** 30) == 2  # capped at 16 GiB in all
    assert timing.calls_per_replay(1e-6) == timing.MAX_CALLS
    assert timing.calls_per_replay(1e-4) == 20
    assert timing.calls_per_replay(5e-3) == 1
    assert timing.timed_replays(2e-3) == 50
    assert timing.timed_replays(1.0) == timing.MIN_REPLAYS
    assert timing.timed_replays(1e-6) == timing.MAX_REPLAYS


def test_suites_are_deterministic_and_within_their_caps():
    for name in suites.SUITE_NAMES:
        assert suites.suite_cases(name) == suites.suite_cases(name)
    for c in suites.suite_cases("gemm"):
        e = suites.ELEMENT_BYTES[c["dtype"]]
        b, m, n, k = c["batch"], c["m"], c["n"], c["k"]
        nbytes = b * (m * k * e + n * k * e + m * n * (2 if c["dtype"] == "fp8" else e))
        assert 2 * b * m * n * k <= suites.GEMM_MAX_FLOPS and nbytes <= suites.GEMM_MAX_OPERAND_BYTES
        if c["dtype"] == "fp8":
            assert c["n"] % 16 == 0 and c["k"] % 16 == 0  # torch._scaled_mm's rule
    quick = suites.suite_cases("quick")
    local = [c for c in quick if c["op"] not in suites.COLLECTIVE_OPS]
    from rooflinesim.cli.measure import _h200_call_s

    # (the README's one-minute quick suite, by the calibrated model's call times)
    assert 30 < suites.estimate_suite_s(local, _h200_call_s(), 1) < 3 * 60
    assert {c["op"] for c in quick} >= {"gemm", "attention", "moe", "copy", "rmsnorm",
                                        "decoder_layer", "allreduce", "alltoall"}


def test_mla_suites_write_flashmla_as_the_models_mqa():
    """FlashMLA's cases are the MQA the cost model prices MLA decode as: twice the query
    heads over one KV head of 288 (half the 576-wide latent key), one query token; the
    held-out shapes are off the calibration grid."""
    grid, held = suites.suite_cases("mla"), suites.suite_cases("mla-holdout")
    assert len(grid) > 200 and len(held) == 80
    for c in grid + held:
        assert c["backend"] == "flashmla" and c["heads"] == 2 * c["query_heads"]
        assert (c["kv_heads"], c["seq_q"], c["head_dim"]) == (1, 1, 288)
        assert c["query_heads"] in suites.MLA_QUERY_HEADS
        assert 2 * c["batch"] * c["seq_kv"] * 288 * 2 <= suites.KV_MAX_BYTES
    shape = lambda c: (c["batch"], c["heads"], c["seq_kv"])  # noqa: E731
    assert len({shape(c) for c in held} & {shape(c) for c in grid}) <= 2


# ------------------------------------------------- CUDA timer against a stand-in

class _FakeCuda:
    """Enough of torch.cuda for CudaTimer: events on a host clock, graphs as call lists."""

    def __init__(self, capture_fails=False):
        self.capturing = None
        self.capture_fails = capture_fails
        self.clock = 0.0
        cuda = self

        class Event:
            def __init__(self, enable_timing=True):
                self.t = None

            def record(self):
                self.t = cuda.clock

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return (end.t - self.t) * 1e3

        class Stream:
            def wait_stream(self, other):
                pass

        class CUDAGraph:
            def __init__(self):
                self.calls = []

            def replay(self):
                for call in self.calls:
                    call()

        @contextlib.contextmanager
        def graph(g):
            cuda.capturing = g
            try:
                yield
            finally:
                cuda.capturing = None

        self.Event, self.Stream, self.CUDAGraph, self.graph = Event, Stream, CUDAGraph, graph
        self.stream = lambda s: contextlib.nullcontext()
        self.current_stream = Stream
        self.synchronize = lambda: None

    def op(self, seconds, log, launch_gap=0.0):
        """An op taking `seconds` on the device, plus `launch_gap` when launched eagerly."""
        def run(i):
            log.append(i)
            self.clock += seconds

        def fn(i):
            if self.capturing is not None:
                if self.capture_fails:
                    raise RuntimeError("operation not permitted when stream is capturing")
                self.capturing.calls.append(lambda: run(i))
            else:
                self.clock += launch_gap
                run(i)
        return fn


class _FakeTorch:
    def __init__(self, **kw):
        self.cuda = _FakeCuda(**kw)


def test_cuda_timer_captures_enough_calls_and_times_replays():
    torch = _FakeTorch()
    log = []
    call_s = 2.0 ** -16  # about 15 us, exact in binary so the sums are exact
    t = timing.CudaTimer(torch, graph=True).time(torch.cuda.op(call_s, log), sets=7)
    assert t.graph and t.graph_error is None
    assert t.calls == 132  # ceil(2 ms / 15.26 us)
    assert t.replays == 50  # ceil(0.1 s / 2.014 ms)
    assert t.measured_s == pytest.approx(call_s) and t.sets == 7
    assert set(log[-t.calls:]) == set(range(t.calls))  # call i ran on set i % sets


def test_cuda_timer_recaptures_when_the_eager_estimate_was_inflated_by_launch_gaps():
    torch = _FakeTorch()
    call_s = 2.0 ** -16
    t = timing.CudaTimer(torch, graph=True).time(torch.cuda.op(call_s, [], 2 * call_s), 1)
    assert t.graph and t.calls == 132 and t.measured_s == pytest.approx(call_s)
    eager = timing.CudaTimer(torch, graph=False).time(torch.cuda.op(call_s, [], 2 * call_s), 1)
    assert not eager.graph and eager.calls == 44 and eager.measured_s == pytest.approx(3 * call_s)


def test_cuda_timer_falls_back_to_eager_when_capture_fails():
    torch = _FakeTorch(capture_fails=True)
    t = timing.CudaTimer(torch, graph=True).time(torch.cuda.op(1e-3, []), sets=1)
    assert t.graph is False and "capture failed" in t.graph_error
    assert t.calls == 2 and t.measured_s == pytest.approx(1e-3)


def test_cpu_timer_follows_the_replay_rules():
    clock = [0.0]

    def fn(i):
        clock[0] += 1e-4
    t = timing.time_cpu(fn, 3, clock=lambda: clock[0])
    assert t.calls == 20 and t.replays == 50 and t.measured_s == pytest.approx(1e-4)


def test_committed_measurements_come_from_the_suites_as_defined():
    """Every measured case in the committed H200 and H100 data is a case of the suite it
    names: the suites still generate what was measured, so each file can be measured again."""
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "benchmarks" / "measurements"
    ids: dict = {}
    checked = 0
    for path in sorted([*data.glob("h200-sxm/*.jsonl"), *data.glob("h100-sxm/*.jsonl")]):
        for rec in _lines(path):
            name = rec.get("suite")
            if "case_id" not in rec or name not in suites.SUITE_NAMES:
                continue
            if name not in ids:  # (collectives take the world size of the run)
                ids[name] = {records.case_id(dict(c, world_size=w) if c["op"] in suites.COLLECTIVE_OPS
                                             else c, m)
                             for c in suites.suite_cases(name) for m in ("graph", "eager")
                             for w in (2, 4, 8)}
            assert rec["case_id"] in ids[name], f"{path.name}: {rec['case_id']} is not in suite {name}"
            checked += 1
    assert checked > 4000


# ------------------------------------------------- a run stopped, files that are not ours

def _start(out, *extra):
    import signal
    import subprocess
    import sys

    # (SIGINT at its default in the run, as at a terminal: a shell that starts the tests in the
    # background hands its children SIGINT ignored, and Python then keeps it so)
    return subprocess.Popen([sys.executable, "-m", "rooflinesim.harness", "run", "--device", "cpu",
                             "--suite", "cpu-tiny", "--quiet", "--out", str(out), *extra],
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for_lines(path, n, proc, timeout_s=60.0):
    import time

    end = time.monotonic() + timeout_s
    while time.monotonic() < end and proc.poll() is None:
        if path.exists() and len(path.read_bytes().splitlines()) >= n:
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGINT"])
def test_a_run_stopped_mid_way_loses_no_finished_record_and_resumes(tmp_path, signal_name):
    import signal

    out = tmp_path / "m.jsonl"
    proc = _start(out)
    assert _wait_for_lines(out, 4, proc), "the run finished before it could be stopped"
    proc.send_signal(getattr(signal, signal_name))
    proc.wait(timeout=60)
    if signal_name == "SIGINT":
        assert proc.returncode == 130 and "resume" in proc.stderr.read()
    data = out.read_bytes()
    finished = [json.loads(line) for line in data.splitlines()[:-1]]  # all but the last: whole
    assert finished[0]["run"]["device"] == "cpu"
    if not data.endswith(b"\n"):  # killed while writing: the resumed run cuts the torn line
        data = data[: data.rfind(b"\n") + 1]
    before = [line for line in data.splitlines() if line.strip()]
    assert _run("--suite", "cpu-tiny", "--out", str(out)) == 0
    lines = out.read_bytes().splitlines()
    assert lines[: len(before)] == before  # nothing finished was lost or rewritten
    recs = [json.loads(line) for line in lines if b'"case_id"' in line]
    ids = [r["case_id"] for r in recs]
    assert sorted(set(ids)) == sorted(ids)  # no case measured twice
    assert len(ids) == len(suites.suite_cases("cpu-tiny"))
    assert not (tmp_path / "m.jsonl.lock").exists()


def test_a_second_run_on_the_same_out_is_refused_and_names_the_first(tmp_path, capsys):
    out = tmp_path / "m.jsonl"
    proc = _start(out)
    try:
        assert _wait_for_lines(out, 2, proc)
        assert _run("--suite", "cpu-tiny", "--out", str(out)) == 2
        err = capsys.readouterr().err.strip()
        assert "in use by another harness run" in err and f"pid {proc.pid}" in err
        assert "\n" not in err
    finally:
        proc.kill()
        proc.wait(timeout=60)


def test_an_out_file_that_is_not_a_measurement_file_is_left_alone(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    assert _run("--suite", "cpu-tiny", "--out", str(notes)) == 2
    assert "not a measurement file" in capsys.readouterr().err
    assert notes.read_text() == "my notes\n"


def test_a_torn_last_line_is_cut_before_the_next_record(tmp_path):
    out = tmp_path / "m.jsonl"
    assert _run("--suite", "cpu-tiny", "--max-cases", "2", "--out", str(out)) == 0
    whole = out.read_bytes()
    out.write_bytes(whole + b'{"op": "gemm", "dtype": "fp32", "m')
    assert _run("--suite", "cpu-tiny", "--max-cases", "1", "--out", str(out)) == 0
    data = out.read_bytes()
    assert data.startswith(whole) and data.endswith(b"\n")
    assert all(isinstance(json.loads(line), dict) for line in data.splitlines())


def test_no_case_for_this_device_is_an_error_and_writes_no_file(tmp_path, capsys):
    out = tmp_path / "m.jsonl"
    assert cli.main(["run", "--device", "cpu", "--suite", "quick", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "nothing to measure" in err and "\n" not in err and "was not written" in err
    assert not out.exists()


def test_cuda_timer_reads_the_sm_clock_around_the_timed_replays_and_warms_first():
    torch = _FakeTorch()
    readings, order = iter([1980, 1755]), []
    timer = timing.CudaTimer(torch, graph=False, warm_gpu_s=0.03, clock=lambda: next(readings))
    timer._burst = lambda: order.append("burst")
    fields = timer.time(torch.cuda.op(2.0 ** -16, []), 1).fields()
    assert order == ["burst"]
    assert fields["sm_clock_mhz"] == [1980, 1755] and fields["warm_gpu_s"] == 0.03
    plain = timing.CudaTimer(torch, graph=False).time(torch.cuda.op(2.0 ** -16, []), 1).fields()
    assert "sm_clock_mhz" not in plain and "warm_gpu_s" not in plain  # (records as before)


def test_an_unreadable_clock_is_left_out_of_the_record():
    torch = _FakeTorch()

    def broken():
        raise RuntimeError("no NVML")

    fields = timing.CudaTimer(torch, graph=False, clock=broken).time(torch.cuda.op(2.0 ** -16, []), 1).fields()
    assert "sm_clock_mhz" not in fields


def test_a_case_built_several_times_records_the_median_build():
    from rooflinesim.harness.runner import combine_builds

    def t(m, lo, hi):
        return timing.Timing(m, lo, hi, 10, 2, 15, False)

    out = combine_builds([t(3e-5, 2e-5, 4e-5), t(1e-5, 0.9e-5, 1.2e-5), t(2e-5, 1.8e-5, 2.5e-5)])
    assert out["measured_s"] == 2e-5 and out["min_s"] == 0.9e-5 and out["max_s"] == 4e-5
    assert out["builds"] == [3e-5, 1e-5, 2e-5] and out["graph"] is False
    assert "builds" not in combine_builds([t(3e-5, 2e-5, 4e-5)])


@pytest.mark.parametrize("name", ["grouped-gemm", "grouped-gemm-holdout"])
def test_grouped_gemm_suites_hold_cases_the_kernels_take(name):
    """The builder's preconditions (16-byte strides, at least a row per expert) and the
    suites' size cap, for every case; both dtypes in each suite, and the held-out set
    shares no shape with the calibration set."""
    cases = suites.suite_cases(name)
    assert {c["dtype"] for c in cases} == {"fp8", "bf16"}
    for c in cases:
        assert c["n"] % 16 == 0 and c["k"] % 16 == 0 and 1 <= c["experts"] <= c["rows"], c
        assert 2 * c["rows"] * c["n"] * c["k"] <= suites.GROUPED_MAX_FLOPS
        records.case_id(c, "graph")  # (every shape field present)
    shape = lambda c: (c["rows"], c["n"], c["k"], c["experts"])  # noqa: E731
    calib = {shape(c) for c in suites.suite_cases("grouped-gemm")}
    if name == "grouped-gemm-holdout":
        assert not calib & {shape(c) for c in cases}


@pytest.mark.parametrize("name", ["block-fp8", "block-fp8-holdout"])
def test_block_fp8_suites_hold_cases_the_kernels_take(name):
    """The Triton builders' preconditions (k in whole 128-element scale groups, topk at most
    the experts, an input kind) and the size cap, for every case; both ops in each suite,
    and the held-out set shares no shape with the calibration set."""
    cases = suites.suite_cases(name)
    assert {c["op"] for c in cases} == {"block_gemm", "fused_moe"}
    for c in cases:
        assert c["dtype"] == "fp8" and c["k"] % 128 == 0, c
        if c["op"] == "fused_moe":
            assert 1 <= c["topk"] <= c["experts"] and c["input"] in ("token", "row"), c
            assert 2 * c["tokens"] * c["topk"] * c["n"] * c["k"] <= suites.GROUPED_MAX_FLOPS
        records.case_id(c, "graph")  # (every shape field present)
    shape = lambda c: tuple(c.get(f) for f in ("op", "m", "tokens", "topk", "experts", "n", "k", "input"))  # noqa: E731
    calib = {shape(c) for c in suites.suite_cases("block-fp8")}
    if name == "block-fp8-holdout":
        assert not calib & {shape(c) for c in cases}


@pytest.mark.parametrize("name", ["fused-moe16", "fused-moe16-holdout"])
def test_16_bit_fused_moe_suites_hold_cases_the_kernel_takes(name):
    """The fused MoE kernel over 16-bit experts: calibration in bf16, held out in bf16 and
    fp16, topk at most the experts, an input kind, under the size cap; the held-out set
    shares no shape with the calibration set."""
    cases = suites.suite_cases(name)
    assert {c["op"] for c in cases} == {"fused_moe"}
    assert {c["dtype"] for c in cases} == ({"bf16"} if name == "fused-moe16" else {"bf16", "fp16"})
    for c in cases:
        assert c["backend"] == "triton-fused-moe" and 1 <= c["topk"] <= c["experts"], c
        assert c["input"] in ("token", "row") and 2 * c["tokens"] * c["topk"] * c["n"] * c["k"] <= \
            suites.GROUPED_MAX_FLOPS
        records.case_id(c, "graph")
    shape = lambda c: tuple(c.get(f) for f in ("tokens", "topk", "experts", "n", "k", "input"))  # noqa: E731
    if name == "fused-moe16-holdout":
        assert not {shape(c) for c in suites.suite_cases("fused-moe16")} & {shape(c) for c in cases}


def test_fused_add_rmsnorm_suites_are_model_widths_and_others_held_out():
    calib = suites.suite_cases("add-rmsnorm")
    held = suites.suite_cases("add-rmsnorm-holdout")
    for c in calib + held:
        assert c["op"] == "add_rmsnorm" and c["dtype"] == "bf16" and c["backend"] == "triton-fused-add-rmsnorm"
        assert 1 <= c["tokens"] <= 32768 and 3 * c["tokens"] * c["hidden"] * 2 <= suites.RMSNORM_MAX_BYTES
        records.case_id(c, "graph")
    assert {c["hidden"] for c in calib} == set(suites.ADD_NORM_WIDTHS) and len(held) == 48
    assert not {c["hidden"] for c in calib} & {c["hidden"] for c in held}
    assert held == suites.suite_cases("add-rmsnorm-holdout")  # (seeded)


def test_a_cases_file_takes_every_suites_cases_as_they_are_written(tmp_path):
    """A case a suite makes, written to a --cases file, reads back (the fused MoE cases' input
    kind is a name): the way to re-measure committed shapes."""
    from rooflinesim.harness.cli import _check_case_types

    for name in ("block-fp8", "fused-moe16", "add-rmsnorm"):
        for c in suites.suite_cases(name)[:5]:
            _check_case_types(c, name)
    with pytest.raises(Exception, match="must be a whole number"):
        _check_case_types({"op": "fused_moe", "tokens": "8", "input": "token"}, "x")
