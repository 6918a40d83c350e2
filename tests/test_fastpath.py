"""The cold-start path: cached spec, profile and model-preset views answer exactly as the
validated models do, and a changed file is never read from a stale cache."""

import pytest

from rooflinesim import fastpath
from rooflinesim.calibration.profile import resolve_profile
from rooflinesim.hardware import load_spec
from rooflinesim.ops import Attention, Collective, Gemm, MoE
from rooflinesim.predict import predict


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(fastpath.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.setattr(fastpath, "_REGISTRY", None)


@pytest.mark.parametrize("gpu", ["h100", "h200", "gh200", "a100", "mi300x", "l4"])
@pytest.mark.parametrize("profile", [None, "ideal"])
def test_views_predict_exactly_like_the_models(gpu, profile):
    full_spec = load_spec(gpu)
    full_prof = resolve_profile(full_spec, profile)
    view = fastpath.spec(gpu)
    prof = fastpath.profile(view, profile)
    assert view.name == full_spec.name and prof.kind == full_prof.kind
    ops = [Gemm(m=17, n=4097, k=4096), Gemm(m=4096, n=4096, k=4096),
           Attention(batch=4, heads=32, kv_heads=8, seq_q=1, seq_kv=8192),
           MoE(tokens=256, hidden=4096, ffn=14336, experts=8, top_k=2)]
    if full_spec.interconnect.gpus_per_node >= 2:
        ops.append(Collective(kind="allreduce", bytes=1 << 24, world_size=2))
    for op in ops:
        assert predict(op, view, prof).latency_s == predict(op, full_spec, full_prof).latency_s


def test_cache_follows_file_changes(tmp_path, monkeypatch):
    user = tmp_path / "specs"
    user.mkdir()
    src = next(p for p in fastpath._inputs() if p.name == "h100-sxm.yaml").read_text()
    f = user / "my-gpu.yaml"
    f.write_text(src.replace("name: h100-sxm", "name: my-gpu").replace("aliases: [", "aliases: [mine, "))
    monkeypatch.setenv("ROOFLINESIM_SPECS_DIR", str(user))
    assert fastpath.spec("mine").name == "my-gpu"
    bw = fastpath.spec("my-gpu").memory.hbm_bandwidth_bytes_per_s
    f.write_text(f.read_text().replace("hbm_bandwidth: 3.35 TB/s", "hbm_bandwidth: 9.9 TB/s") + "\n")
    monkeypatch.setattr(fastpath, "_REGISTRY", None)
    assert fastpath.spec("my-gpu").memory.hbm_bandwidth_bytes_per_s == 9.9e12 != bw


def test_device_names_resolve_on_the_cached_path():
    assert fastpath.spec("NVIDIA H200").name == "h200-sxm"
    assert fastpath.spec("nvidia a100-sxm4-80gb").name == "a100-sxm4-80gb"
    assert fastpath.spec("AMD Radeon Graphics") is None  # shared: only memory tells (full path)


def test_unknown_or_broken_falls_back_to_the_validating_path(tmp_path, monkeypatch):
    assert fastpath.spec("h10") is None  # the full path then says "did you mean"
    user = tmp_path / "specs"
    user.mkdir()
    (user / "bad.yaml").write_text("name: bad\n")
    monkeypatch.setenv("ROOFLINESIM_SPECS_DIR", str(user))
    monkeypatch.setattr(fastpath, "_REGISTRY", None)
    assert fastpath.spec("h100") is None


@pytest.mark.parametrize("argv,shows", [
    (['predict', 'gemm', '--gpu', 'h200', '-m', '64', '-n', '64', '-k', '64'], "latency"),
    (['predict', 'gemm', '--gpu', 'NVIDIA H200', '-m', '64', '-n', '64', '-k', '64'], "on h200-sxm"),
    (['predict', 'model', '--model', 'meta-llama/Llama-3.1-70B-Instruct', '--gpu', 'h100', '--tp', '4',
      '--weights', 'fp8', '--batch', '32'], "time to first token"),
])
def test_second_cold_prediction_imports_no_validation_stack(tmp_path, argv, shows):
    import subprocess
    import sys

    code = ("import sys\n"
            f"sys.argv = ['rooflinesim', *{argv!r}]\n"
            "from rooflinesim.cli.main import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print([m for m in ('pydantic', 'yaml', 'sympy', 'scipy', 'plotly') if m in sys.modules], "
            "file=sys.stderr)\n")
    env = {**__import__("os").environ, fastpath.ENV_CACHE: str(tmp_path / "c")}
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert "pydantic" in first.stderr  # the first run validates and fills the cache
    assert second.stderr.strip().splitlines()[-1] == "[]"
    assert shows in second.stdout and second.stdout == first.stdout


def test_preset_views_answer_like_the_validated_configs():
    from rooflinesim.models.config import load_config
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.models.presets import preset_names
    from rooflinesim.models.workload import predict_model

    spec = load_spec("h200")
    for name in [*preset_names(), "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-30B-A3B"]:
        full, view = load_config(name), fastpath.model(name)
        assert {f: getattr(view, f) for f in type(full).model_fields} == full.model_dump(), name
        for method in ("param_counts", "total_params", "active_params", "mtp_params", "attention_param_counts"):
            assert getattr(view, method)() == getattr(full, method)(), (name, method)
        assert view.kv_cache_bytes_per_token("fp8") == full.kv_cache_bytes_per_token("fp8")
        assert (view.is_moe, view.is_mla, view.dense_layers) == (full.is_moe, full.is_mla, full.dense_layers)
    d = Deployment(tp=8, weights="fp8")
    full, view = load_config("deepseek-v3"), fastpath.model("deepseek-v3")
    a = predict_model(full, spec, None, d, batch=16, prompt=1000, gen=100)
    b = predict_model(view, spec, None, d, batch=16, prompt=1000, gen=100)
    assert a.as_dict() == b.as_dict()
    assert view == fastpath.model("DeepSeek-V3") and hash(view) == hash(fastpath.model("deepseek-v3"))
    assert fastpath.model("no-such-model") is None and fastpath.model(__file__) is None
    with pytest.raises(AttributeError, match="frozen"):
        view.num_layers = 3
