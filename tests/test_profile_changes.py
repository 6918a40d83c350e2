"""A changed profile changes the next prediction, however often the same shape was priced
before (what a prediction keeps between calls is keyed by the parameters' values): in
memory (parameters are frozen; a changed profile is a new one, or a table entry replaced)
and in a file."""

import pydantic
import pytest

from rooflinesim.calibration.profile import load_profile_file, resolve_profile
from rooflinesim.hardware import load_spec
from rooflinesim.models.config import load_config
from rooflinesim.models.workload import predict_model
from rooflinesim.predict import predict
from rooflinesim.ops import Gemm

H200 = load_spec("h200")
MODEL = load_config("llama-3.1-8b")


def _tpot(profile) -> float:
    return predict_model(MODEL, H200, profile, batch=64, prompt=512, gen=64).tpot_s


def _slower_gemms(profile):
    """The profile with every GEMM's compute efficiency halved (a new profile)."""
    kernels = dict(profile.kernels)
    kernels["gemm"] = {k: p.model_copy(update={"compute_efficiency": p.compute_efficiency / 2})
                       for k, p in profile.kernels["gemm"].items()}
    return profile.model_copy(update={"kernels": kernels})


def test_parameters_cannot_change_in_place():
    profile = resolve_profile(H200, None)
    p = profile.params("gemm", "bf16")
    with pytest.raises(pydantic.ValidationError):
        p.compute_efficiency = 0.1
    with pytest.raises(pydantic.ValidationError):
        profile.kind = "ideal"


def test_a_new_profile_reprices_a_model():
    profile = resolve_profile(H200, None)
    before = [_tpot(profile) for _ in range(3)]
    slower = _slower_gemms(profile)
    after = _tpot(slower)
    # batch 64 decode of an 8B model: its GEMMs are partly compute-bound
    assert after > before[-1] * 1.05
    assert _tpot(profile) == pytest.approx(before[-1], rel=1e-12)  # the old profile still answers as before
    # the single-kernel path agrees about the change
    g = Gemm(m=4096, n=4096, k=4096)
    assert predict(g, H200, slower).latency_s > 1.8 * predict(g, H200, profile).latency_s


def test_a_table_entry_replaced_reprices_a_model():
    profile = resolve_profile(H200, None).model_copy(deep=True)
    for _ in range(3):
        before = _tpot(profile)
    table = profile.kernels["gemm"]
    for key, p in list(table.items()):
        table[key] = p.model_copy(update={"compute_efficiency": p.compute_efficiency / 2})
    assert _tpot(profile) > before * 1.05


def test_a_changed_file_reprices(tmp_path):
    src = resolve_profile(H200, None)
    path = tmp_path / "p.yaml"
    import yaml

    path.write_text(yaml.safe_dump(src.model_dump(mode="json")))
    first = load_profile_file(path)
    for _ in range(3):
        before = _tpot(first)
    data = yaml.safe_load(path.read_text())
    for p in data["kernels"]["gemm"].values():
        p["compute_efficiency"] = p.get("compute_efficiency", 1.0) / 2
    path.write_text(yaml.safe_dump(data))
    assert _tpot(load_profile_file(path)) > before * 1.05
