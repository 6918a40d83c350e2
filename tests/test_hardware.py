"""GPU specs: every bundled file loads, golden datasheet figures, names, and user errors."""

import os
from pathlib import Path

import pytest
import yaml

from rooflinesim import hardware as hw
from rooflinesim.errors import UnknownName, UserError

SPEC_DIR = Path(__file__).resolve().parent.parent / "hardware_specs"
BUNDLED = [
    "a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-80gb", "h100-sxm", "h100-pcie", "h100-nvl",
    "h200-sxm", "gh200", "b200", "l40s", "l4", "mi300x", "mi325x",
]


@pytest.fixture(autouse=True)
def _no_user_specs(monkeypatch):
    monkeypatch.delenv(hw.ENV_VAR, raising=False)


def _raw(name: str) -> dict:
    return yaml.safe_load((SPEC_DIR / f"{name}.yaml").read_text(encoding="utf-8"))


def _raw_line(text: str, start: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(start))


def _write_variant(folder: Path, file_name: str, edit) -> Path:
    """A copy of the bundled H100 SXM spec, renamed, with ``edit`` applied to its YAML text."""
    text = (SPEC_DIR / "h100-sxm.yaml").read_text(encoding="utf-8")
    text = text.replace("name: h100-sxm", "name: test-gpu")
    text = text.replace(_raw_line(text, "aliases:"), "aliases: [tg]")
    path = folder / file_name
    path.write_text(edit(text), encoding="utf-8")
    return path


# ------------------------------------------------------------------ bundled specs


def test_bundled_names():
    assert sorted(hw.spec_names()) == sorted(BUNDLED)


@pytest.mark.parametrize("name", BUNDLED)
def test_every_bundled_spec_loads(name):
    spec = hw.load_spec(name)
    assert spec.name == name  # the file name is the canonical name
    assert hw.validate_spec_file(SPEC_DIR / f"{name}.yaml") == spec
    for group in (spec.compute, spec.memory, spec.chip, spec.interconnect):
        assert group.source.strip()


@pytest.mark.parametrize("name", BUNDLED)
def test_spec_files_use_human_units(name):
    raw = _raw(name)
    assert raw["memory"]["hbm_bandwidth"].endswith("B/s")
    assert raw["memory"]["capacity"].endswith(" GB")  # vendors state capacity in decimal GB
    assert all(isinstance(v, str) and v.endswith("S") for v in raw["compute"]["dense_peak"].values())


@pytest.mark.parametrize("name", BUNDLED)
def test_rates_are_ordered_like_dense_tensor_cores(name):
    peak = hw.load_spec(name).compute.peak_flops_per_s
    # Dense tensor rates double as the operand width halves; a sparse figure copied in
    # by mistake for one dtype would break this. 2% slack: the L40S datasheet gives
    # bf16 362 and fp8 733 TFLOPS.
    assert peak["bf16"] == peak["fp16"]
    assert peak["bf16"] == pytest.approx(2 * peak["tf32"], rel=0.02)
    if "fp8" in peak:
        assert peak["fp8"] == pytest.approx(2 * peak["bf16"], rel=0.02)
    assert peak["int8"] == pytest.approx(2 * peak["bf16"], rel=0.02)
    if "int4" in peak:
        assert peak["int4"] == pytest.approx(2 * peak["int8"], rel=0.01)
    assert peak["fp32"] < peak["bf16"]


@pytest.mark.parametrize("name", BUNDLED)
def test_derived_special_function_rate(name):
    spec = hw.load_spec(name)
    sfu, clock = spec.compute.sfu_ops_per_s, spec.chip.boost_clock_hz
    if sfu is None or clock is None:
        pytest.skip("no derived special-function rate")
    # sm80+: 16 MUFU ops per clock per SM (FA3 paper, arXiv 2407.08608, section 3).
    assert sfu == pytest.approx(16 * spec.chip.sm_count * clock, rel=0.005)


def test_l2_bandwidth_is_always_marked_estimated():
    # No vendor publishes an L2 bandwidth for these parts; a figure must say it is a guess.
    for name in BUNDLED:
        memory = hw.load_spec(name).memory
        if memory.l2_bandwidth_bytes_per_s is not None:
            assert memory.l2_bandwidth_estimated, name


def test_aliases_are_unique_across_bundled_files():
    seen: dict[str, str] = {}
    for name in BUNDLED:
        for alias in _raw(name).get("aliases", []):
            assert alias not in BUNDLED, f"alias {alias} of {name} is a canonical name"
            assert alias not in seen, f"alias {alias} in both {seen.get(alias)} and {name}"
            seen[alias] = name


# What torch.cuda.get_device_name() (and nvidia-smi, which reads the same driver field)
# reports for each bundled GPU; on ROCm, torch reports the marketing name.
DEVICE_NAMES = [
    ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"), ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"), ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H100 NVL", "h100-nvl"), ("NVIDIA H200", "h200-sxm"),
    ("NVIDIA GH200 480GB", "gh200"), ("NVIDIA B200", "b200"), ("NVIDIA L40S", "l40s"),
    ("NVIDIA L4", "l4"), ("AMD Instinct MI300X", "mi300x"), ("AMD Instinct MI325X", "mi325x"),
    ("AMD Instinct MI300X VF", "mi300x"),
]


def test_every_bundled_gpu_has_its_device_name():
    assert {spec for _, spec in DEVICE_NAMES} == set(BUNDLED)
    for name in BUNDLED:
        assert hw.load_spec(name).device_names, name


@pytest.mark.parametrize("device, canonical", DEVICE_NAMES)
def test_device_names_resolve_case_insensitively(device, canonical):
    for written in (device, device.lower(), device.upper(), f"  {device} "):
        assert hw.resolve(written) == canonical
    assert hw.load_spec(device.lower()).name == canonical


def test_shared_device_names_are_told_apart_by_memory():
    """ROCm reports 'AMD Radeon Graphics' for an Instinct GPU its device table lacks; the
    MI300X (192 GB) and the MI325X (256 GB) are both gfx942, so only memory tells."""
    shared = {d: names for d, names in hw.device_names().items() if len(names) > 1}
    assert shared == {"AMD Radeon Graphics": ["mi300x", "mi325x"]}
    with pytest.raises(UserError, match="device name of mi300x and mi325x.*memory"):
        hw.resolve("AMD Radeon Graphics")
    gib = 2**30
    assert hw.resolve("amd radeon graphics", memory_bytes=191.98 * gib) == "mi300x"
    assert hw.resolve("AMD Radeon Graphics", memory_bytes=255.98 * gib) == "mi325x"
    with pytest.raises(UserError, match="matches none of mi300x .* mi325x"):
        hw.resolve("AMD Radeon Graphics", memory_bytes=288 * gib)  # an MI355X, unbundled
    spec = hw.load_spec("mi325x")
    found, note = hw.identify("AMD Radeon Graphics", spec, 255.98 * gib)
    assert found == "mi325x" and "read as mi325x" in note and "mi300x" in note
    assert hw.identify("AMD Radeon Graphics", spec, 191.98 * gib)[0] == "mi300x"
    found, why = hw.identify("AMD Radeon Graphics", spec, None)
    assert found is None and "memory" in why


def test_a_shared_name_needs_memory_far_enough_apart():
    """Memory can decide only between GPUs whose sizes differ by more than the tolerance."""
    for device, names in hw.device_names().items():
        sizes = sorted(hw.load_spec(n).memory.capacity_bytes for n in names)
        for a, b in zip(sizes, sizes[1:]):
            assert b / a > (1 + hw.MEMORY_TOLERANCE) ** 2, device


def test_device_names_of_other_cards_are_not_guessed():
    """The H200 NVL reports its own name and has no bundled spec: it is not read as the
    SXM card, nor is a MIG slice read as the whole GPU."""
    for device in ("NVIDIA H200 NVL", "NVIDIA GH200 144G HBM3e", "NVIDIA H100 80GB HBM3 MIG 1g.10gb"):
        with pytest.raises(UnknownName, match="no spec lists that device name"):
            hw.resolve(device)


def test_device_names_are_unique_within_a_spec(tmp_path):
    path = _write_variant(tmp_path, "twice.yaml", lambda t: t.replace(
        _raw_line(t, "device_names:"), "device_names: [NVIDIA H100 80GB HBM3, nvidia h100 80gb hbm3]"))
    with pytest.raises(UserError, match="device_names: 'nvidia h100 80gb hbm3' is listed twice"):
        hw.validate_spec_file(path)


def test_a_user_spec_that_shares_a_device_name(tmp_path, monkeypatch):
    """A user's spec listing a bundled device name makes it shared: with no memory to
    tell the two apart it is an error; at equal memory the spec registered last wins."""
    _write_variant(tmp_path, "mine.yaml", lambda t: t)  # test-gpu, a copy of h100-sxm
    monkeypatch.setenv(hw.ENV_VAR, str(tmp_path))
    with pytest.raises(UserError, match="h100-sxm and test-gpu"):
        hw.resolve("NVIDIA H100 80GB HBM3")
    assert hw.resolve("NVIDIA H100 80GB HBM3", memory_bytes=79.11 * 2**30) == "test-gpu"
    assert hw.resolve("h100") == "h100-sxm"


# ------------------------------------------------------------------ golden datasheet values


DATASHEETS = yaml.safe_load((Path(__file__).parent / "data" / "datasheets.yaml").read_text())

_QUANTITIES = {
    "peak": lambda s, of: s.peak(of),
    "ridge_point": lambda s, of: s.ridge_point(of),
    "hbm_bandwidth": lambda s, _: s.memory.hbm_bandwidth_bytes_per_s,
    "capacity": lambda s, _: s.memory.capacity_bytes,
    "l2": lambda s, _: s.memory.l2_bytes,
    "l2_effective": lambda s, _: s.l2_effective_bytes,
    "sm_count": lambda s, _: s.chip.sm_count,
    "sfu_rate": lambda s, _: s.compute.sfu_ops_per_s,
    "link_bandwidth": lambda s, _: s.interconnect.link_bandwidth_bytes_per_s,
}


@pytest.mark.parametrize("fig", DATASHEETS, ids=lambda f: f"{f['gpu']}-{f['quantity']}-{f.get('of', '')}")
def test_datasheet_figure(fig):
    assert fig["source"] and isinstance(fig["value"], (int, float))  # (a source each; a number, not a string)
    got = _QUANTITIES[fig["quantity"]](hw.load_spec(fig["gpu"]), fig.get("of"))
    if fig["rel"] == 0:
        assert got == fig["value"], fig["source"]
    else:
        assert got == pytest.approx(fig["value"], rel=fig["rel"]), fig["source"]


def test_hopper_nodes_have_nvlink_sharp():
    spec = hw.load_spec("h100-sxm")
    assert spec.interconnect.nvlink_sharp and spec.interconnect.gpus_per_node == 8


def test_fp8_unsupported_on_a100():
    spec = hw.load_spec("a100")
    assert not spec.supports("fp8") and spec.supports("bf16")
    with pytest.raises(UserError) as info:
        spec.peak("fp8")
    assert str(info.value) == (
        "a100-sxm4-80gb has no fp8 tensor-core rate; "
        "it supports: fp64, fp32, tf32, bf16, fp16, int8, int4"
    )


def test_int4_unsupported_on_hopper():
    assert not hw.load_spec("h100").supports("int4")
    assert hw.load_spec("h100").supports("fp8")


def test_fp64_uses_the_tensor_rate():
    # dtypes.dtype("fp64").rate is fp64_tensor: FP64 GEMMs run on the tensor cores (67 vs 34).
    assert hw.load_spec("h100").peak("fp64") == 67e12


def test_ridge_point_levels():
    spec = hw.load_spec("h100")
    assert spec.ridge_point("bf16", level="l2") < spec.ridge_point("bf16")
    with pytest.raises(UserError):
        spec.ridge_point("bf16", level="l3")


def test_unknown_dtype():
    with pytest.raises(UnknownName):
        hw.load_spec("h100").peak("fp12")


def test_json_schema_describes_the_yaml_keys():
    schema = hw.json_schema()
    defs = schema["$defs"]
    assert set(defs["Memory"]["properties"]) >= {"capacity", "hbm_bandwidth", "l2", "l2_visible"}
    assert "dense_peak" in defs["Compute"]["properties"]
    assert "capacity_bytes" not in defs["Memory"]["properties"]
    assert all(d["additionalProperties"] is False for d in defs.values())
    assert schema["additionalProperties"] is False


# ------------------------------------------------------------------ names


@pytest.mark.parametrize(
    "alias, canonical",
    [
        ("a100", "a100-sxm4-80gb"),
        ("a100-40gb", "a100-sxm4-40gb"),
        ("a100-pcie", "a100-pcie-80gb"),
        ("h100", "h100-sxm"),
        ("h100-sxm5", "h100-sxm"),
        ("h200", "h200-sxm"),
        ("gh200-96gb", "gh200"),
        ("H100", "h100-sxm"),  # case-insensitive
        ("H100 SXM5", "h100-sxm"),  # spaces read as hyphens
        ("h100_sxm", "h100-sxm"),
        ("h100sxm", "h100-sxm"),
        ("mi300x", "mi300x"),
    ],
)
def test_resolve(alias, canonical):
    assert hw.resolve(alias) == canonical
    assert hw.load_spec(alias).name == canonical


def test_aliases_map_to_known_names():
    table = hw.aliases()
    assert table["h100"] == "h100-sxm" and table["a100"] == "a100-sxm4-80gb"
    assert set(table.values()) <= set(hw.spec_names())


def test_unknown_name_suggests_the_canonical_name():
    with pytest.raises(UnknownName) as info:
        hw.resolve("h10")
    assert str(info.value).startswith("unknown GPU 'h10'; did you mean h100-sxm")


def test_unknown_name_with_no_close_match_lists_names():
    with pytest.raises(UnknownName) as info:
        hw.load_spec("tpu-v5e")
    assert "known:" in str(info.value) and "h100-sxm" in str(info.value)


# ------------------------------------------------------------------ user files


def test_specs_dir_adds_a_gpu(tmp_path, monkeypatch):
    with pytest.raises(UnknownName):
        hw.resolve("test-gpu")
    _write_variant(tmp_path, "mine.yaml", lambda t: t.replace("bandwidth: 3.35 TB/s", "bandwidth: 1 TB/s"))
    monkeypatch.setenv(hw.ENV_VAR, str(tmp_path))
    assert "test-gpu" in hw.spec_names()
    assert hw.resolve("tg") == "test-gpu"
    assert hw.resolve("mine") == "test-gpu"  # the file name works too
    assert hw.load_spec("tg").memory.hbm_bandwidth_bytes_per_s == 1e12
    assert hw.load_spec("h100").name == "h100-sxm"  # bundled specs stay


def test_specs_dir_takes_several_directories(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    _write_variant(first, "one.yaml", lambda t: t)
    _write_variant(second, "two.yaml", lambda t: t.replace("name: test-gpu", "name: other-gpu").replace("[tg]", "[o]"))
    monkeypatch.setenv(hw.ENV_VAR, os.pathsep.join([str(first), str(second)]))
    assert {"test-gpu", "other-gpu"} <= set(hw.spec_names())


def test_specs_dir_must_be_a_directory(tmp_path, monkeypatch):
    monkeypatch.setenv(hw.ENV_VAR, str(tmp_path / "missing"))
    with pytest.raises(UserError, match="not a directory"):
        hw.spec_names()


def test_spec_files_are_registered_and_win(tmp_path):
    def edit(text):
        return text.replace("name: test-gpu", "name: h100-sxm").replace("bandwidth: 3.35 TB/s", "bandwidth: 3.072 TB/s")

    path = _write_variant(tmp_path, "override.yaml", edit)
    assert hw.load_spec("h100", spec_files=[path]).memory.hbm_bandwidth_bytes_per_s == 3.072e12
    assert hw.load_spec("h100").memory.hbm_bandwidth_bytes_per_s == 3.35e12


def test_load_by_path(tmp_path):
    path = _write_variant(tmp_path, "by-path.yaml", lambda t: t)
    assert hw.load_spec(str(path)).name == "test-gpu"
    assert hw.load_spec(path).name == "test-gpu"
    assert hw.load_spec_file(path).name == "test-gpu"
    with pytest.raises(UserError, match="no such spec file"):
        hw.load_spec(str(tmp_path / "absent.yaml"))


def test_edited_file_is_read_again(tmp_path):
    path = _write_variant(tmp_path, "edit.yaml", lambda t: t)
    assert hw.load_spec_file(path).chip.sm_count == 132
    path.write_text(path.read_text().replace("sm_count: 132", "sm_count: 114"))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert hw.load_spec_file(path).chip.sm_count == 114


BAD_FILES = {
    "bad_unit": (
        lambda t: t.replace("hbm_bandwidth: 3.35 TB/s", "hbm_bandwidth: 3.35 TB"),
        "memory.hbm_bandwidth: cannot read '3.35 TB' as a bandwidth (expected e.g. '3.35 TB/s')",
    ),
    "unknown_key": (
        lambda t: t.replace("  l2: 50 MB", "  l2: 50 MB\n  l3: 5 MB"),
        "memory.l3: unknown field; expected one of capacity, hbm_bandwidth,",
    ),
    "negative": (
        lambda t: t.replace("hbm_bandwidth: 3.35 TB/s", "hbm_bandwidth: -3.35 TB/s"),
        "memory.hbm_bandwidth: must be greater than 0, got '-3.35 TB/s'",
    ),
    "unknown_rate": (
        lambda t: t.replace("    fp8: 1979 TFLOPS", "    fp4: 3958 TFLOPS"),
        "compute.dense_peak: unknown rate 'fp4'",
    ),
    "missing": (lambda t: t.replace("  sm_count: 132\n", ""), "chip.sm_count: missing required field"),
    "bad_int": (
        lambda t: t.replace("sm_count: 132", "sm_count: many"),
        "chip.sm_count: input should be a valid integer",
    ),
    "bad_link": (lambda t: t.replace("link: nvlink4", "link: nvlink9"), "interconnect.link: input should be"),
    "sharp_on_pcie": (
        lambda t: t.replace("link: nvlink4", "link: pcie"),
        "interconnect: nvlink_sharp needs an nvlink4 or nvlink5 link",
    ),
    "not_yaml": (lambda t: "name: [\n", "not valid YAML at line 2"),
    "not_mapping": (lambda t: "- h100\n", "expected a mapping of fields at the top level"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_malformed_file_is_one_sentence_naming_the_file(case, tmp_path):
    edit, expected = BAD_FILES[case]
    path = _write_variant(tmp_path, f"{case}.yaml", edit)
    for load in (hw.load_spec_file, hw.validate_spec_file):
        with pytest.raises(UserError) as info:
            load(path)
        message = str(info.value)
        assert message.startswith(f"{path}: ") and path.name in message
        assert expected in message
        assert "\n" not in message and "validation error" not in message


@pytest.mark.parametrize("case", ["bad_unit", "not_yaml"])
def test_malformed_user_dir_file_fails_when_loaded(case, tmp_path, monkeypatch):
    edit, expected = BAD_FILES[case]
    _write_variant(tmp_path, f"{case}.yaml", edit)
    monkeypatch.setenv(hw.ENV_VAR, str(tmp_path))
    assert hw.load_spec("h100").name == "h100-sxm"  # a broken user file does not block others
    with pytest.raises(UserError) as info:
        hw.load_spec("tg" if case == "bad_unit" else case)
    assert f"{case}.yaml" in str(info.value) and expected in str(info.value)
