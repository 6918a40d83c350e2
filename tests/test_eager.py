"""Eager launches: the host side of a call against its GPU time, priced per record mode."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.calibration.profile import HostParams, Profile, resolve_profile
from rooflinesim.calibration.validate import is_eager, predict_records
from rooflinesim.hardware import load_spec
from rooflinesim.models.layer import decoder_layer
from rooflinesim.ops import Copy, Gemm
from rooflinesim.predict import predict

from helpers import run_cli

H200 = load_spec("h200")
FITTED = resolve_profile(H200, None)


def _with_host(**host) -> Profile:
    return FITTED.model_copy(update={"host": {k: HostParams(**v) for k, v in host.items()}})


@settings(max_examples=40, deadline=None)
@given(host_us=st.floats(0.5, 200.0), m=st.integers(1, 8192), n=st.integers(64, 16384))
def test_a_call_takes_the_longer_of_host_and_gpu(host_us, m, n):
    prof = _with_host(gemm={"call_s": host_us * 1e-6})
    op = Gemm(m=m, n=n, k=4096)
    gpu = predict(op, H200, prof).latency_s
    t = predict(op, H200, prof, eager=True)
    assert t.latency_s == pytest.approx(max(gpu, host_us * 1e-6), rel=1e-12)
    assert (t.bound == "host") == (host_us * 1e-6 > gpu)
    assert t.latency_s >= gpu  # eager is never faster than the graph


def test_a_layer_adds_host_and_gpu_apart():
    """Host and GPU in series: the host runs ahead during the long kernels, so a layer's
    eager time is the larger of the summed host and the summed GPU times, not the sum of
    each kernel's larger one."""
    prof = _with_host(default={"call_s": 10e-6}, sequence={"call_s": 30e-6})
    for mode, seq in (("decode", 2048), ("prefill", 512)):
        layer = decoder_layer(mode, 4, seq, 4096, 32, 8, 128, 14336)
        graph = predict(layer, H200, prof)
        host = 30e-6 + 10e-6 * sum(count for _, _, count in layer.parts)
        t = predict(layer, H200, prof, eager=True)
        assert t.latency_s == pytest.approx(max(host, graph.latency_s), rel=1e-12)
        per_kernel = sum(max(10e-6 * c, p.latency_s) for (_, _, c), (_, p) in zip(layer.parts, graph.parts))
        assert t.latency_s <= per_kernel * (1 + 1e-12)


def test_an_unfitted_profile_takes_the_published_launch_cost():
    t = predict(Copy(bytes=1024), H200, Profile(), eager=True)
    assert t.latency_s == pytest.approx(4e-6)


def test_records_are_priced_in_their_own_mode():
    prof = _with_host(copy={"call_s": 9e-6})
    rec = {"op": "copy", "bytes": 4096, "measured_s": 9e-6, "impl": "kernel"}
    eager, graph = {**rec, "graph": False}, {**rec, "graph": True}
    cpu = {**eager, "backend": "numpy"}  # (the CPU runs where it launches: no host side)
    assert is_eager(eager) and not is_eager(graph) and not is_eager(cpu)
    (_, e, _), (_, g, _) = predict_records([eager, graph], H200, prof)
    assert e == pytest.approx(9e-6) and g < 5e-6


def test_graph_memcpy_nodes_alone_take_the_large_transfer_step():
    """A contiguous copy_ captured in a CUDA graph runs as a memcpy node, slower from about
    512 MiB (benchmarks/measurements/h200-sxm/copy-modes.jsonl); a copy kernel does not."""
    big = 4 * 2 ** 30
    kernel = predict(Copy(bytes=big), H200, FITTED).latency_s
    node = predict(Copy(bytes=big, graph_memcpy=True), H200, FITTED).latency_s
    assert 2 * big / kernel > 3.8e12  # (read and written: 4.2 TB/s measured)
    assert node > 1.3 * kernel
    small = 16 * 2 ** 20
    assert predict(Copy(bytes=small, graph_memcpy=True), H200, FITTED).latency_s == pytest.approx(
        predict(Copy(bytes=small), H200, FITTED).latency_s, rel=0.02)


@pytest.mark.parametrize("cmd", [["gemm", "-m", "1", "-n", "4096", "-k", "4096"],
                                 ["attention", "--decode", "--seq", "1024"],
                                 ["copy", "--bytes", "1024"],
                                 ["norm", "--tokens", "1", "--hidden", "4096"],
                                 ["moe", "--tokens", "4", "--hidden", "4096", "--ffn", "14336",
                                  "--experts", "8", "--top-k", "2"]])
def test_every_kernel_command_has_eager(cmd):
    code, out, err = run_cli(["predict", *cmd, "--gpu", "h200", "--json"])
    assert code == 0, err
    graph = json.loads(out)
    code, out, err = run_cli(["predict", *cmd, "--gpu", "h200", "--eager", "--json"])
    assert code == 0, err
    eager = json.loads(out)
    assert eager["mode"] == "eager" and graph["mode"] == "graph"
    assert eager["latency_s"] >= graph["latency_s"]
    assert np.isfinite(eager["losses"]["host_s"])
