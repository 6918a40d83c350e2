"""Measure, fit, validate: the calibration loop end to end on the CPU, parameter
recovery on synthetic data, and the shipped H200 profile against held-out data."""

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli as cli

from rooflinesim.calibration import fit, records
from rooflinesim.calibration.profile import IDEAL, GemmParams, Profile, load_profile_file, resolve_profile
from rooflinesim.calibration.validate import validate
from rooflinesim.errors import UserError
from rooflinesim.hardware import load_spec, load_spec_file
from rooflinesim.ops import Gemm
from rooflinesim.predict import predict

ROOT = Path(__file__).resolve().parents[1]
CPU_SPEC = ROOT / "tests" / "data" / "cpu-2core.yaml"
H200_DATA = ROOT / "benchmarks" / "measurements" / "h200-sxm"


def test_cpu_loop_measure_fit_validate(tmp_path):
    from rooflinesim.harness.cli import main as harness

    meas = tmp_path / "cpu.jsonl"
    assert harness(["run", "--device", "cpu", "--suite", "cpu-tiny", "--out", str(meas)]) == 0
    prof = tmp_path / "cpu.yaml"
    code, out, err = cli(["calibrate", str(meas), "--gpu", str(CPU_SPEC), "--spec-file",
                          str(CPU_SPEC), "-o", str(prof)])
    assert code == 0, err
    assert "cross-validated" in out and prof.exists()
    p = load_profile_file(prof)
    assert p.kind == "fitted" and p.provenance["measurements"] >= 15
    assert set(p.validation["cross_validated"]) >= {"gemm", "copy", "rmsnorm"}
    code, out, err = cli(["validate", str(meas), "--gpu", str(CPU_SPEC), "--profile", str(prof),
                          "--json"])
    assert code == 0, err
    rep = json.loads(out)
    assert set(rep) >= {"gpu", "profile", "ops", "skipped"}
    for op, s in rep["ops"].items():
        assert set(s) == {"n", "median_ape", "p90_ape", "max_ape", "bias"}
    # fitted on these very points, the profile must beat the nominal roofline overall
    # (CPU timings are noisy on a shared two-core machine, so the bound is loose)
    m = records.load([meas])
    spec = load_spec_file(CPU_SPEC)
    fitted_err = [abs(r["error"]) for r in validate(m, spec, p, "fitted").rows]
    ideal_err = [abs(r["error"]) for r in validate(m, spec, IDEAL, "ideal").rows]
    assert np.median(fitted_err) < np.median(ideal_err)
    # the profile is never overwritten without being asked
    code, _, err = cli(["calibrate", str(meas), "--gpu", str(CPU_SPEC), "-o", str(prof)])
    assert code == 2 and "--force" in err


def test_fit_recovers_known_parameters():
    spec = load_spec("h200")
    truth = Profile(kind="fitted", kernels={"gemm": {"bf16": GemmParams(
        compute_efficiency=0.7, memory_efficiency=0.85, launch_s=3e-6, corner=4.0, tile_m=128,
        tile_n=128, k_overhead=80.0)}})
    rng = np.random.default_rng(1)
    recs = []
    for _ in range(200):
        m, n, k = (int(x) for x in np.exp(rng.uniform(np.log(16), np.log(16384), 3)) // 64 * 64 + 64)
        t = float(predict(Gemm(m=m, n=n, k=k), spec, truth).latency_s)
        recs.append({"op": "gemm", "dtype": "bf16", "m": m, "n": n, "k": k, "batch": 1,
                     "hardware": "h200-sxm", "measured_s": t * float(np.exp(rng.normal(0, 0.02)))})
    prof, cv = fit.fit_profile(records.Measurements(records=recs), spec, folds=4)
    got = prof.kernels["gemm"]["bf16"]
    assert got.compute_efficiency == pytest.approx(0.7, rel=0.05)
    # the floor of a tiny GEMM: the launch time, which the fit may share with the DRAM
    # latency it also frees (they add up alike there), so the time is checked, not the split
    for shape in ((64, 64, 64), (128, 64, 256)):
        want = float(predict(Gemm(*shape), spec, truth).latency_s)
        assert float(predict(Gemm(*shape), spec, prof).latency_s) == pytest.approx(want, rel=0.25)
    assert cv["gemm"]["median_ape"] < 0.03  # 2% noise, held-out shapes
    # and shapes the fit never saw, across the range
    for _ in range(50):
        m, n, k = (int(x) for x in np.exp(rng.uniform(np.log(16), np.log(16384), 3)) // 64 * 64 + 64)
        want = float(predict(Gemm(m=m, n=n, k=k), spec, truth).latency_s)
        assert float(predict(Gemm(m=m, n=n, k=k), spec, prof).latency_s) == pytest.approx(want, rel=0.3)


def test_bad_measurement_files(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"op": "gemm", "m": 1}\n{not json\n')
    with pytest.raises(UserError, match="line 1: measured_s"):
        records.load([bad])
    bad.write_text('{"op": "gemm", "measured_s": 1e-6}\nnot json\n')
    with pytest.raises(UserError, match="line 2: not valid JSON"):
        records.load([bad])
    code, _, err = cli(["validate", str(tmp_path / "missing.jsonl"), "--gpu", "h200"])
    assert code == 2 and "does not exist" in err


def test_unpredictable_records_are_listed_not_dropped(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in (
        {"op": "gemm", "dtype": "bf16", "m": 64, "n": 64, "k": 64, "measured_s": 3e-6,
         "hardware": "h200-sxm"},
        {"op": "conv2d", "measured_s": 1e-5, "hardware": "h200-sxm"},
        {"op": "gemm", "dtype": "bf16", "m": 64, "n": 64, "k": 64, "measured_s": 3e-6,
         "hardware": "a100-sxm4-80gb"},
        {"op": "gemm", "m": 8, "status": "failed", "error": "out of memory"},
    )) + "\n")
    rep = validate(records.load([f]), load_spec("h200"), IDEAL, "ideal")
    reasons = " | ".join(s["reason"] for s in rep.skipped)
    assert rep.ops["gemm"]["n"] == 1
    assert "no model for op 'conv2d'" in reasons
    assert "measured on a100-sxm4-80gb" in reasons
    assert "out of memory" in reasons


def test_shipped_h200_profile_on_held_out_measurements():
    """The bundled profile against held-out H200 measurements in the repository (random
    shapes from seeds the calibration never used, and decoder layers of random widths and
    lengths). The bounds are regression guards a little above what the profile reached
    when it was fitted."""
    spec = load_spec("h200")
    prof = load_profile_file(ROOT / "hardware_specs" / "profiles" / "h200-sxm.yaml")
    meas = records.load([H200_DATA / f"holdout{s}.jsonl" for s in ("", "2", "3", "4")]
                        + [H200_DATA / "random-layers.jsonl"])
    rep = validate(meas, spec, prof, "h200-sxm", by="mode")
    ideal = validate(meas, spec, IDEAL, "ideal", by="mode")
    for op, s in rep.ops.items():
        assert s["median_ape"] < ideal.ops[op]["median_ape"], op  # calibration helps every op
    for mode in ("prefill", "decode"):
        assert rep.ops[f"decoder_layer/{mode}"]["median_ape"] < 0.05
        assert rep.ops[f"decoder_layer/{mode}"]["p90_ape"] < 0.11
    assert rep.ops["gemm"]["median_ape"] < 0.08
    assert rep.ops["attention"]["median_ape"] < 0.07
    assert rep.ops["attention"]["p90_ape"] < 0.19
    assert rep.ops["moe"]["median_ape"] < 0.07
    assert rep.ops["copy"]["median_ape"] < 0.04
    assert rep.ops["rmsnorm"]["median_ape"] < 0.04
    assert rep.ops["rmsnorm"]["p90_ape"] < 0.12
    assert rep.ops["allreduce"]["median_ape"] < 0.07


def test_shipped_h200_profile_on_held_out_grouped_gemms():
    """PyTorch's fp8 grouped GEMM, fitted under its own key, against 80 random expert GEMMs
    the fit never saw (holdout-grouped-gemm.jsonl, looked at once): better than without
    its key; the bf16 ones, from the MoE layers' fit, likewise checked. Regression guards
    a little above what the profile reached."""
    spec = load_spec("h200")
    prof = load_profile_file(ROOT / "hardware_specs" / "profiles" / "h200-sxm.yaml")
    meas = records.load([H200_DATA / "holdout-grouped-gemm.jsonl"])
    rep = validate(meas, spec, prof, "h200-sxm", by="backend")
    assert rep.ops["grouped_gemm/scaled_grouped_mm"]["median_ape"] < 0.06
    assert rep.ops["grouped_gemm/grouped_mm"]["median_ape"] < 0.11
    unkeyed = prof.model_copy(deep=True)
    del unkeyed.kernels["grouped_gemm"]["fp8:scaled_grouped_mm"]
    assert validate(meas, spec, unkeyed, "h200-sxm", by="backend").ops[
        "grouped_gemm/scaled_grouped_mm"]["median_ape"] > 0.1


def test_an_engines_fp8_experts_keep_the_layers_fit():
    """The measured PyTorch kernel's key prices that kernel only: an MoE layer's fp8 expert
    GEMM (an engine's fused kernel) takes the dtype's own parameters."""
    from rooflinesim.ops.moe import GroupedGemm

    spec = load_spec("h200")
    prof = load_profile_file(ROOT / "hardware_specs" / "profiles" / "h200-sxm.yaml")
    assert "fp8:scaled_grouped_mm" in prof.kernels["grouped_gemm"]
    shape = dict(rows=65536, n=512, k=7168, experts=256, dtype="fp8")
    engine = predict(GroupedGemm(**shape), spec, prof).latency_s
    torch_kernel = predict(GroupedGemm(**shape, backend="scaled_grouped_mm"), spec, prof).latency_s
    unkeyed = prof.model_copy(deep=True)
    del unkeyed.kernels["grouped_gemm"]["fp8:scaled_grouped_mm"]
    assert predict(GroupedGemm(**shape), spec, unkeyed).latency_s == pytest.approx(engine, rel=1e-12)
    assert torch_kernel > 1.05 * engine  # (PyTorch's kernel measured slower at this shape)


def test_shipped_h200_profile_on_held_out_block_fp8_kernels():
    """The block-scaled fp8 kernels (Triton Linear layers and fused-MoE expert GEMMs), fitted
    under their own keys, against 80 random shapes the fit never saw (holdout-block-fp8.jsonl,
    looked at once): far better than the per-tensor fp8 fits they would take without the
    keys. Regression guards a little above what the profile reached."""
    spec = load_spec("h200")
    prof = load_profile_file(ROOT / "hardware_specs" / "profiles" / "h200-sxm.yaml")
    meas = records.load([H200_DATA / "holdout-block-fp8.jsonl"])
    rep = validate(meas, spec, prof, "h200-sxm")
    assert rep.ops["block_gemm"]["median_ape"] < 0.055
    assert rep.ops["fused_moe"]["median_ape"] < 0.06
    unkeyed = prof.model_copy(deep=True)
    del unkeyed.kernels["gemm"]["fp8:triton-block-fp8"]
    del unkeyed.kernels["grouped_gemm"]["fp8:triton-fused-moe-fp8"]
    before = validate(meas, spec, unkeyed, "h200-sxm").ops
    assert before["block_gemm"]["median_ape"] > 0.25 and before["fused_moe"]["median_ape"] > 0.2



def test_shipped_h200_profile_on_held_out_16_bit_fused_moe_kernels():
    """The engines' fused MoE kernel over 16-bit experts, fitted under its own key from bf16
    shapes, against 57 random shapes the fit never saw (holdout-fused-moe16.jsonl, bf16 and
    fp16, looked at once): fp16 takes the bf16 kernel's fit. Without the key the experts would
    be priced as PyTorch's grouped GEMM, 27-37% off. Guards a little above what was reached."""
    spec = load_spec("h200")
    prof = load_profile_file(ROOT / "hardware_specs" / "profiles" / "h200-sxm.yaml")
    meas = records.load([H200_DATA / "holdout-fused-moe16.jsonl"])
    rep = validate(meas, spec, prof, "h200-sxm", by="dtype").ops
    assert rep["fused_moe/bf16"]["n"] == 27 and rep["fused_moe/fp16"]["n"] == 30
    assert rep["fused_moe/bf16"]["median_ape"] < 0.05 and rep["fused_moe/fp16"]["median_ape"] < 0.04
    unkeyed = prof.model_copy(deep=True)
    del unkeyed.kernels["grouped_gemm"]["bf16:triton-fused-moe"]
    before = validate(meas, spec, unkeyed, "h200-sxm", by="dtype").ops
    assert before["fused_moe/bf16"]["median_ape"] > 0.2 and before["fused_moe/fp16"]["median_ape"] > 0.2



def test_shipped_h200_profile_on_held_out_fused_add_rmsnorm_kernels():
    """The residual add fused into RMSNorm (a Triton program per row, the engines' kernel
    class), fitted under the memory key add_rmsnorm, against 48 shapes at widths the fit
    never saw (holdout-add-rmsnorm.jsonl, CUDA graphs, looked at once). Priced as the plain
    RMSNorm over twice the rows, as before the key, the small ones were about 3x too long."""
    from rooflinesim.ops.memory import Norm

    spec = load_spec("h200")
    prof = load_profile_file(ROOT / "hardware_specs" / "profiles" / "h200-sxm.yaml")
    meas = records.load([H200_DATA / "holdout-add-rmsnorm.jsonl"])
    rep = validate(meas, spec, prof, "h200-sxm").ops["add_rmsnorm"]
    assert rep["n"] == 48 and rep["median_ape"] < 0.04 and rep["p90_ape"] < 0.12
    op = records.to_op({"op": "add_rmsnorm", "dtype": "bf16", "tokens": 8, "hidden": 8192})
    assert isinstance(op, Norm) and op.kind == "add_rmsnorm"
    assert float(op.work().hbm_bytes) == 4 * 8 * 8192 * 2 + 8192 * 2
    fused = predict(op, spec, prof).latency_s
    old = predict(Norm(tokens=16, hidden=8192), spec, prof).latency_s  # (the former price: the same bytes)
    assert 1.9e-6 < fused < 2.6e-6 and old > 2.5 * fused  # (2.19 us measured: calib-add-rmsnorm.jsonl)


def test_16_bit_fused_moe_records_take_the_fused_kernels_key_fp16_the_bf16_one():
    from rooflinesim.ops.moe import FUSED_MOE, GroupedGemm

    rec = {"op": "fused_moe", "dtype": "bf16", "tokens": 16, "topk": 2, "experts": 8, "n": 28672, "k": 4096,
           "input": "token", "experts_touched": 8, "row_tiles_128": 8}
    bf16 = records.to_op(rec)
    assert isinstance(bf16, GroupedGemm) and bf16.backend == FUSED_MOE and bf16.dtype == "bf16"
    assert bf16.work().kernels == 1
    fp16 = records.to_op({**rec, "dtype": "fp16"})
    assert fp16.dtype == "fp16" and fp16.backend == FUSED_MOE
    spec = load_spec("h200")
    prof = load_profile_file(ROOT / "hardware_specs" / "profiles" / "h200-sxm.yaml")
    assert "bf16:triton-fused-moe" in prof.kernels["grouped_gemm"]
    assert "fp16:triton-fused-moe" not in prof.kernels["grouped_gemm"]
    # (fp16 runs at bf16's rate on the H200: the bf16 kernel's fit prices both alike)
    assert predict(fp16, spec, prof).latency_s == pytest.approx(predict(bf16, spec, prof).latency_s, rel=1e-9)
    plain = GroupedGemm(rows=32, n=28672, k=4096, experts=8, dtype="bf16")
    assert predict(plain, spec, prof).latency_s != pytest.approx(predict(bf16, spec, prof).latency_s, rel=0.01)


def test_the_deepseek_moe_blocks_gemms_measured_whole_land_on_the_model():
    """moe-layer.jsonl (benchmarks/moe_layer_check.py, measured on the H200, and again in a new
    process: moe-layer-repeat.jsonl): the MoE
    half of a DeepSeek-V3 TP8 layer run whole in one CUDA graph, the real router's scores
    routing the tokens. Its five GEMMs against predict model's kernels for a prefill of as
    many tokens, at 64 to 8,192 tokens: within 8% (they were 0.94-1.03x)."""
    from rooflinesim.models.config import load_config
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.models.workload import predict_model

    gemms = {"router": "moe_router", "experts_gate_up": "moe_experts_gate_up", "experts_down": "moe_experts_down",
             "shared_gate_up": "shared_gate_up_proj", "shared_down": "shared_down_proj"}
    spec = load_spec("h200")
    prof = load_profile_file(ROOT / "hardware_specs" / "profiles" / "h200-sxm.yaml")
    blocks = []
    for name in ("moe-layer.jsonl", "moe-layer-repeat.jsonl"):  # (the second: a new process, later)
        rows = [json.loads(line) for line in (H200_DATA / name).read_text().splitlines()]
        blocks += [r for r in rows if "tokens" in r]
    assert [r["tokens"] for r in blocks] == [64, 1024, 2048, 8192] * 2
    for rec in blocks:
        r = predict_model(load_config("deepseek-v3"), spec, prof, Deployment(tp=8, weights="fp8"), batch=1,
                          prompt=rec["tokens"], gen=2)
        ops = {o["op"]: o["time_s"] / o["count"] for o in r.as_dict()["prefill"]["ops"]}
        measured = sum(rec["steps_s"][k] for k in gemms)
        priced = sum(ops[v] for v in gemms.values())
        assert 0.92 < measured / priced < 1.08, (rec["tokens"], measured, priced)
        assert abs(rec["whole_s"] / rec["sum_of_steps_s"] - 1) < 0.08  # (the steps compose)


def test_block_fp8_records_become_the_keyed_ops():
    """A block_gemm record is a GEMM of the block-scaled kernel; a fused_moe record a grouped
    GEMM over its routed rows and the experts and row tiles its routing drew."""
    from rooflinesim.ops.gemm import BLOCK_GEMM
    from rooflinesim.ops.moe import BLOCK_MOE, GroupedGemm

    gemm = records.to_op({"op": "block_gemm", "dtype": "fp8", "m": 8, "n": 2112, "k": 7168})
    assert isinstance(gemm, Gemm) and gemm.backend == BLOCK_GEMM and gemm.dtype == "fp8"
    moe = records.to_op({"op": "fused_moe", "dtype": "fp8", "tokens": 4, "topk": 8, "experts": 256,
                                  "n": 512, "k": 7168, "input": "token", "experts_touched": 31,
                                  "row_tiles_128": 31})
    assert isinstance(moe, GroupedGemm) and moe.backend == BLOCK_MOE
    assert (moe.rows, moe.experts, moe.row_tiles) == (32, 31, 31)
    assert moe.work().kernels == 1  # (the align step is a kernel of its own)


def test_validate_splits_by_a_record_field():
    meas = records.load([H200_DATA / "random-layers.jsonl"])
    spec = load_spec("h200")
    rep = validate(meas, spec, load_profile_file(ROOT / "hardware_specs" / "profiles" / "h200-sxm.yaml"),
                   "h200-sxm", by="mode")
    assert set(rep.ops) == {"decoder_layer/prefill", "decoder_layer/decode"}
    assert sum(s["n"] for s in rep.ops.values()) == len(rep.rows)


def _gemms(shapes):
    return [{"op": "gemm", "dtype": "bf16", "m": m, "n": n, "k": k, "batch": 1, "hardware": "h200-sxm",
             "measured_s": 1e-5} for m, n, k in shapes]


def test_gemm_stride_regimes_fit_apart_when_measured_enough():
    """GEMMs with strides under 16 bytes fit their own regimes (rules.GEMM_REGIMES); a regime
    with too few measurements of a format joins the coarser one it refines."""
    spec = load_spec("h200")
    aligned = _gemms((64 * i, 4096, 4096) for i in range(1, 31))
    odd_tall = lambda count: _gemms((100 + i, 4097, 1000) for i in range(count))  # noqa: E731
    odd_skinny = _gemms((1 + i % 8, 4097, 999 + 2 * i) for i in range(10))
    four_byte_skinny = _gemms((2, 4096, 1002 + 8 * i) for i in range(5))

    def sizes(recs):
        return {g.name: sum(1 for r in recs if g.select(r))
                for g in fit._groups(records.Measurements(records=recs), spec) if g.family == "gemm"}

    few = sizes(aligned + odd_tall(10) + odd_skinny + four_byte_skinny)
    assert few == {"gemm/bf16": 35, "gemm/bf16:align2": 20}  # 4-byte skinny ones in the main fit
    many = sizes(aligned + odd_tall(25) + odd_skinny + four_byte_skinny)
    assert many == {"gemm/bf16": 35, "gemm/bf16:align2": 10, "gemm/bf16:align2_tiled": 25}
    main = next(g for g in fit._groups(records.Measurements(records=aligned + odd_tall(25)), spec)
                if g.name == "gemm/bf16")
    assert "align8_compute" not in main.free  # no 4-8-byte strides to fit them on


# ------------------------------------------------------------------ hardware names


def _as_measured_on(path, hardware, tmp_path, memory_bytes=None, n=None):
    """A copy of a measurement file whose header and records name ``hardware`` (as the
    harness writes what torch reports), optionally with another memory size."""
    out = []
    for line in Path(path).read_text().splitlines()[:n]:
        rec = json.loads(line)
        target = rec["run"] if "run" in rec else rec
        target["hardware"] = hardware
        if "run" in rec and memory_bytes is not None:
            rec["run"]["total_memory_bytes"] = memory_bytes
        out.append(json.dumps(rec))
    f = tmp_path / f"{len(list(tmp_path.iterdir()))}.jsonl"
    f.write_text("\n".join(out) + "\n")
    return f


def test_validate_accepts_the_device_name_torch_reports(tmp_path):
    f = _as_measured_on(H200_DATA / "quick.jsonl", "NVIDIA H200", tmp_path)
    meas = records.load([f])
    rep = validate(meas, load_spec("h200"), IDEAL, "ideal")
    assert len(rep.rows) == len(meas.records)
    assert all(s["reason"].startswith("failed measurement") for s in rep.skipped)
    code, out, err = cli(["validate", str(f), "--gpu", "NVIDIA H200", "--worst", "0"])
    assert code == 0, err
    assert f"{len(meas.records)} records predicted on h200-sxm" in out
    rep = validate(meas, load_spec("h100"), IDEAL, "ideal")  # and other GPUs' records are not
    assert not rep.rows and {s["reason"] for s in rep.skipped
                             if not s["reason"].startswith("failed")} == {
        "measured on NVIDIA H200 (h200-sxm), not h100-sxm"}


def test_a_shared_device_name_is_read_by_the_memory_the_run_reports(tmp_path):
    """ROCm's generic 'AMD Radeon Graphics' is the MI300X or the MI325X: the run header's
    total_memory_bytes decides, and the report says so."""
    src = H200_DATA / "quick.jsonl"
    f = _as_measured_on(src, "AMD Radeon Graphics", tmp_path, memory_bytes=255.98 * 2**30, n=20)
    meas = records.load([f])
    rep = validate(meas, load_spec("mi325x"), IDEAL, "ideal")
    assert len(rep.rows) == len(meas.records)
    assert len(rep.notes) == 1 and "read as mi325x" in rep.notes[0]
    rep = validate(meas, load_spec("mi300x"), IDEAL, "ideal")
    assert not rep.rows and "(mi325x), not mi300x" in rep.skipped[0]["reason"]
    code, out, _ = cli(["validate", str(f), "--gpu", "mi325x", "--worst", "0"])
    assert code == 0 and "note: 'AMD Radeon Graphics' with 256 GiB of memory read as mi325x" in out
    # without a memory size the records cannot be placed, and the reason says why
    bare = tmp_path / "bare.jsonl"
    bare.write_text("".join(line + "\n" for line in f.read_text().splitlines()
                            if '"run"' not in line))
    rep = validate(records.load([bare]), load_spec("mi325x"), IDEAL, "ideal")
    assert not rep.rows and "only the memory size" in rep.skipped[0]["reason"]


# ------------------------------------------------------------------ nothing to fit or predict


def test_calibrate_from_nothing_is_an_error(tmp_path):
    other = _as_measured_on(H200_DATA / "quick.jsonl", "NVIDIA H200", tmp_path, n=30)
    few = tmp_path / "few.jsonl"
    few.write_text("\n".join(json.dumps(r) for r in _gemms([(64, 64, 64), (128, 64, 64)])
                             + [{"op": "conv2d", "hardware": "h200-sxm", "measured_s": 1e-5}] * 4) + "\n")
    prof = tmp_path / "p.yaml"
    for files, gpu, needle in (
        ([other], "h100", "none of the 29 measurements was taken on h100-sxm: measured on NVIDIA H200"),
        ([few], "h200", "nothing to fit on h200-sxm: no kernel family has the 3 predictable records"),
    ):
        code, out, err = cli(["calibrate", *map(str, files), "--gpu", gpu, "-o", str(prof)])
        assert code == 2 and needle in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert not prof.exists()


def test_validate_with_nothing_predicted_is_an_error(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps({"op": "conv2d", "hardware": "h200-sxm", "measured_s": 1e-5}) + "\n")
    code, out, err = cli(["validate", str(f), "--gpu", "h200"])
    assert code == 2 and "no record could be predicted on h200-sxm: no model for op 'conv2d'" in err
    assert len(err.strip().splitlines()) == 1 and not out


def test_a_profile_says_which_families_its_records_fitted(tmp_path):
    """Per family, the records that fitted it; a family without records keeps the ideal
    profile's parameters, and the profile file and every prediction say so."""
    spec = load_spec("h200")
    recs = _gemms([(m, n, k) for m in (64, 512, 4096) for n in (1024, 4096) for k in (1024, 8192)])
    for r, t in zip(recs, np.linspace(1, 2, len(recs))):
        r["measured_s"] = 1e-5 * t
    two = [{"op": "attention", "batch": 1, "heads": 8, "seq_q": 1, "seq_kv": s, "head_dim": 128,
            "hardware": "h200-sxm", "measured_s": 1e-5} for s in (1024, 2048)]
    prof, _ = fit.fit_profile(records.Measurements(records=recs + two), spec, folds=3)
    prov = prof.provenance
    assert prov["records_per_family"]["gemm"] == len(recs)
    assert prov["records_per_family"]["attention"] == 0
    assert set(prov["prior_kept"]) == {"memory", "attention", "grouped_gemm", "sequence", "collective"}
    assert prov["prior_kept"]["attention"].startswith("2 predictable records, fewer than the 3")
    assert prov["prior_kept"]["memory"].startswith("no records")
    path = tmp_path / "gemm-only.yaml"
    fit.write_profile(prof, path)
    assert load_profile_file(path).provenance["prior_kept"] == prov["prior_kept"]
    assert "prior_kept" in path.read_text()
    code, out, err = cli(["predict", "attention", "--gpu", "h200", "--profile", str(path)])
    assert code == 0, err
    assert "fitted on h200-sxm; ideal for want of records: memory, attention" in out
    code, out, _ = cli(["predict", "gemm", "--gpu", "h200", "-m", "8", "-n", "8", "-k", "8"])
    assert "want of records" not in out  # the shipped profile fitted every family


def test_every_fitted_parameter_states_its_unit_prior_and_bounds():
    # the fit reads its priors and bounds from the profile's own fields (no second
    # registry): each prior lies within its bounds and is a value the field accepts
    from rooflinesim.calibration.profile import FAMILY_PARAMS, CollectiveParams, HostParams, fit_ranges, unit_of

    for model in (*FAMILY_PARAMS.values(), CollectiveParams, HostParams):
        ranges = fit_ranges(model)
        assert ranges, model
        for name, r in ranges.items():
            lo, hi = r["bounds"]
            assert lo <= r["prior"] <= hi, (model.__name__, name)
            assert unit_of(model, name), (model.__name__, name)
            model(**{name: r["prior"]})  # (within the field's own constraints)
    gemm = FAMILY_PARAMS["gemm"]
    assert unit_of(gemm, "launch_s") == "s" and unit_of(gemm, "compute_efficiency") == "1"
    assert set(fit.PARAMS) == {n for m in (*FAMILY_PARAMS.values(), CollectiveParams) for n in fit_ranges(m)}


@pytest.mark.parametrize("kernels, needle", [
    ({"gemm": {"bf16": {"compute_efficiency": 0.7, "rows_per_sm": 4}}},
     "gemm.bf16.rows_per_sm is not a parameter of the gemm family"),
    ({"attention": {"sdpa-flash": {"tile_n": 64}}}, "attention.sdpa-flash.tile_n is not a parameter"),
    ({"gemms": {"bf16": {}}}, "unknown kernel family 'gemms'"),
    ({"memory": {"copy": {"launch_s": "fast"}}}, "memory.copy.launch_s: Input should be a valid number"),
])
def test_a_profile_entry_takes_its_own_familys_parameters(tmp_path, kernels, needle):
    # each family has its own parameters: a field of another family is one clear
    # sentence and exit code 2, not a value silently ignored
    import yaml

    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"gpu": "h200-sxm", "kind": "fitted", "kernels": kernels}))
    code, out, err = cli(["predict", "gemm", "-m", "64", "-n", "64", "-k", "64", "--gpu", "h200",
                          "--profile", str(path)])
    assert code == 2 and needle in err and "Traceback" not in out + err, err
    assert len(err.strip().splitlines()) == 1


def test_a_partial_calibration_keeps_the_transferred_profile_where_it_has_no_records(tmp_path):
    """calibrate --base (auto by default): a GPU measured with a few suites (here the H100's
    quick suite) keeps the profile it would get unmeasured (the H200's, transferred) for every
    kernel key, collective and host key its records do not reach, where --base none leaves the
    ideal roofline's; its own keys are fitted alike either way."""
    from rooflinesim.calibration.profile import transferred_profile

    quick = ROOT / "benchmarks" / "measurements" / "h100-sxm" / "calib-quick.jsonl"
    paths = {b: tmp_path / f"{b}.yaml" for b in ("auto", "none")}
    printed = {}
    for b, path in paths.items():
        code, printed[b], err = cli(["calibrate", str(quick), "--gpu", "h100-sxm", "-o", str(path), "--folds", "2",
                                     "--base", b])
        assert code == 0, err
    based, bare = (load_profile_file(paths[b]) for b in ("auto", "none"))
    lent = transferred_profile(load_spec("h100-sxm"))
    assert based.provenance["base"] == "transferred from h200-sxm" and "base" not in bare.provenance
    assert based.provenance["prior_kept"]["collective"] == \
        "no records; its parameters stay those of the profile transferred from h200-sxm"
    fp8_moe = based.kernels["grouped_gemm"]["fp8:triton-fused-moe-fp8"]  # (no quick-suite record is one)
    assert fp8_moe.model_dump() == pytest.approx(lent.kernels["grouped_gemm"]["fp8:triton-fused-moe-fp8"].model_dump(),
                                                 rel=1e-3)
    assert "fp8:triton-fused-moe-fp8" not in bare.kernels.get("grouped_gemm", {})
    assert set(based.collectives) == set(lent.collectives) and not bare.collectives
    assert based.kernels["gemm"]["bf16"].model_dump() == pytest.approx(bare.kernels["gemm"]["bf16"].model_dump(),
                                                                      rel=1e-3)
    assert based.kernels["gemm"]["bf16"] != lent.kernels["gemm"]["bf16"]  # (fitted to the H100's own records)
    code, out, err = cli(["predict", "gemm", "--gpu", "h100-sxm", "--profile", str(paths["auto"]),
                          "-m", "8", "-n", "8", "-k", "8"])
    assert code == 0 and "transferred from h200-sxm for want of records: collective" in out, err
    # the error the collectives keep is the transferred profile's too (serve's intervals read it)
    assert based.validation["base_cross_validated_from"] == "transferred from h200-sxm"
    assert set(based.validation["base_cross_validated"]) >= {"allreduce", "block_gemm", "fused_moe"}
    assert "base_cross_validated" not in bare.validation and "base_cross_validated_from" not in bare.validation
    from rooflinesim.serve.simulate import family_sigmas

    assert family_sigmas(based)["collective"] == pytest.approx(family_sigmas(lent)["collective"], rel=1e-3)
    assert "collective" not in family_sigmas(bare)
    assert "with that profile's cross-validated error" in printed["auto"]
    assert "cross-validated error)" not in printed["none"]
    code, _, err = cli(["calibrate", str(quick), "--gpu", "h100-sxm", "-o", str(tmp_path / "x.yaml"),
                        "--base", "nope"])
    assert code == 2 and "no profile named 'nope'" in err and "Traceback" not in err


def test_a_fit_over_a_base_carries_the_bases_error_where_it_validated_nothing(tmp_path):
    """calibrate over a base: a GPU measured with GEMMs alone (the H100 quick suite's) has a
    sigma for every family the base has; a family with no records of its own gets the base's,
    an op of a fitted family its fit did not validate (block_gemm) the base's error for that op;
    the written profile reloads with it."""
    from dataclasses import replace

    from rooflinesim.calibration.profile import transferred_profile
    from rooflinesim.serve.residual import log_sigma
    from rooflinesim.serve.simulate import family_sigmas

    spec = load_spec("h100-sxm")
    base = transferred_profile(spec, lender_other_than=spec.name)
    meas = records.load([ROOT / "benchmarks" / "measurements" / "h100-sxm" / "calib-quick.jsonl"])
    gemms = replace(meas, records=[r for r in meas.records if r["op"] == "gemm"])
    prof, cv = fit.fit_profile(gemms, spec, folds=2, base=base, base_label="transferred from h200-sxm")
    assert set(cv) == {"gemm"}
    carried = prof.validation["base_cross_validated"]
    assert "gemm" not in carried and carried["attention"] == base.validation["cross_validated"]["attention"]
    assert prof.validation["base_cross_validated_from"] == "transferred from h200-sxm"
    mine, lent = family_sigmas(prof), family_sigmas(base)
    assert set(mine) == set(lent) == {"gemm", "attention", "moe", "memory", "collective"}
    for family in ("attention", "moe", "memory", "collective"):
        assert mine[family] == pytest.approx(lent[family], rel=1e-9)
    # gemm: the larger of its own gemm error and the base's block_gemm error
    own, lent_block = (log_sigma(np.log1p(s["median_ape"]), np.log1p(s["p90_ape"]))
                       for s in (cv["gemm"], carried["block_gemm"]))
    assert mine["gemm"] == pytest.approx(max(own, lent_block), rel=1e-9)
    path = tmp_path / "gemm-only.yaml"
    fit.write_profile(prof, path)
    again = load_profile_file(path)
    assert set(again.validation["base_cross_validated"]) == set(carried)
    assert family_sigmas(again) == pytest.approx(mine, rel=1e-3)


def test_a_kernel_below_the_copys_share_keeps_its_bandwidth_on_a_gpu_of_the_same_sms():
    """The transfer within one architecture (calibration.lending): a kernel the H200 ran below
    its contiguous copy's share of the HBM is bound by its SMs, so on the H100 SXM (the same
    132 SMs and clock, 70% of the bandwidth) it keeps the bandwidth it had, up to the copy's
    share; a kernel at that share keeps its share, as does the fp32 cast (HBM-bound); another
    architecture keeps every share."""
    from rooflinesim.calibration.lending import HBM_BOUND

    h200 = resolve_profile(load_spec("h200"), None)
    h100, a100 = (resolve_profile(load_spec(g), None) for g in ("h100-sxm", "a100"))
    ceiling = h200.params("memory", "copy").memory_efficiency
    factor = 4.8 / 3.35  # same SMs x clock
    grouped = h200.params("grouped_gemm", "fp8:scaled_grouped_mm").memory_efficiency
    assert grouped < ceiling / factor
    assert h100.params("grouped_gemm", "fp8:scaled_grouped_mm").memory_efficiency == pytest.approx(grouped * factor)
    rmsnorm = h200.params("memory", "rmsnorm").memory_efficiency
    assert ceiling / factor < rmsnorm < ceiling
    assert h100.params("memory", "rmsnorm").memory_efficiency == pytest.approx(ceiling)
    for family, key in (("gemm", "bf16"), ("memory", "copy"), *HBM_BOUND):
        assert h100.params(family, key).memory_efficiency == h200.params(family, key).memory_efficiency
        assert a100.params(family, key).memory_efficiency == h200.params(family, key).memory_efficiency
    assert a100.params("grouped_gemm", "fp8:scaled_grouped_mm").memory_efficiency == grouped
    # the cached path of the CLI transfers alike
    from rooflinesim import fastpath

    view = fastpath.profile(fastpath.spec("h100-sxm"), None)
    assert view.params("grouped_gemm", "fp8:scaled_grouped_mm").memory_efficiency == pytest.approx(grouped * factor)


def test_the_transferred_profile_on_h100_moe_layers_and_grouped_gemms_measured_after_it():
    """Measured on an H100 SXM after the rule above was set (calib-moe.jsonl,
    holdout-grouped-gemm.jsonl: the H200's shapes), the transferred profile lands as the
    fitted one does on the H200; with the shares kept as they were, 23-32% slow. Regression
    guards a little above what it reached."""
    spec = load_spec("h100-sxm")
    meas = records.load([ROOT / "benchmarks" / "measurements" / "h100-sxm" / f for f in
                         ("calib-moe.jsonl", "holdout-grouped-gemm.jsonl")])
    rep = validate(meas, spec, resolve_profile(spec, None), "transferred", by="dtype")
    assert rep.ops["moe/bf16"]["median_ape"] < 0.06
    assert rep.ops["grouped_gemm/bf16"]["median_ape"] < 0.10
    assert rep.ops["grouped_gemm/fp8"]["median_ape"] < 0.06
    assert abs(rep.ops["moe/bf16"]["bias"]) < 0.06
