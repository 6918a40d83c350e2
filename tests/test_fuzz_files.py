"""Every file reader and output writer of the CLI against bad files: random bytes, random
text, random JSON and YAML structures, truncations of valid files, and a table of known
traps (not UTF-8, anchor bombs, deep nesting, huge sizes, wrong types, torn lines, paths
that cannot be written). Each must end in exit code 2 and one sentence on stderr, quickly;
the files the project ships (and copies of them) must still be accepted."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "hardware_specs" / "h100-sxm.yaml"
PROFILE = ROOT / "hardware_specs" / "profiles" / "h200-sxm.yaml"
OVERHEADS = ROOT / "rooflinesim" / "data" / "memory_overheads.yaml"
CONFIG = ROOT / "rooflinesim" / "models" / "presets" / "llama-3-8b.json"
MEASURED = ROOT / "benchmarks" / "measurements" / "h200-sxm" / "calib-gemm.jsonl"

FUZZ = settings(max_examples=30, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SLOW_S = 10.0  # far above what one rejection takes; a hang or a blow-up would pass it


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def measured(work):
    """A small copy of a real measurement file (its header and the first gemm records)."""
    lines = MEASURED.read_text().splitlines(keepends=True)[:25]
    path = work / "measured.jsonl"
    path.write_text("".join(lines))
    return path


# The command that reads a file of each kind; {} is the file's path.
READERS = {
    "spec": ["specs", "validate", "{}"],
    "gpu-path": ["predict", "gemm", "--gpu", "{}", "-m", "64", "-n", "64", "-k", "64"],
    "spec-file": ["predict", "gemm", "--spec-file", "{}", "--gpu", "h100", "-m", "64", "-n", "64",
                  "-k", "64"],
    "profile": ["predict", "gemm", "--gpu", "h100", "--profile", "{}", "-m", "64", "-n", "64",
                "-k", "64"],
    "overheads": ["fit", "--model", "llama-3-8b", "--gpu", "h100", "--overheads", "{}"],
    "measurements": ["validate", "{}", "--gpu", "h200", "--profile", "ideal"],
    "calibrate": ["calibrate", "{}", "--gpu", "h200", "-o", "{out}", "--force"],
    "roofline": ["roofline", "--model", "llama-3-8b", "--gpu", "h200", "--measured", "{}",
                 "-o", "{out}", "--force"],
    "config": ["predict", "model", "--model", "{}", "--gpu", "h100"],
    "cases": ["harness", "run", "--device", "cpu", "--quiet", "--cases", "{}", "--out", "{out}"],
    "harness-out": ["harness", "run", "--device", "cpu", "--quiet", "--suite", "cpu-tiny",
                    "--max-cases", "1", "--out", "{}"],
}
SUFFIX = {"spec": ".yaml", "gpu-path": ".yaml", "spec-file": ".yaml", "profile": ".yaml",
          "overheads": ".yaml", "config": ".json", "cases": ".json"}


def _args(reader, path, out):
    return [a.replace("{}", str(path)).replace("{out}", str(out)) for a in READERS[reader]]


def _run(reader, path, out):
    start = time.monotonic()
    code, stdout, stderr = run_cli(_args(reader, path, out))
    return code, stdout, stderr, time.monotonic() - start


def assert_one_sentence(code, stderr, elapsed, what=""):
    assert code == 2, (what, code, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, (what, stderr)
    line = lines[0]
    assert "Traceback" not in stderr and "nan" not in line.split(": ", 1)[-1].split(), (what, line)
    assert line.startswith(("error: ", "harness: error: ")), (what, line)
    text = line.split("error: ", 1)[1]
    assert 10 <= len(text) <= 1000 and text[0].strip(), (what, line)
    assert elapsed < SLOW_S, (what, elapsed)


def _write(work, reader, data: bytes, name="input"):
    path = work / f"{name}-{reader}{SUFFIX.get(reader, '.jsonl')}"
    path.write_bytes(data)
    out = work / f"out-{reader}"
    for p in (out, Path(str(out) + ".lock")):
        p.unlink(missing_ok=True)
    return path, out


def check_rejected(work, reader, data: bytes, what=""):
    path, out = _write(work, reader, data)
    code, _, stderr, elapsed = _run(reader, path, out)
    assert_one_sentence(code, stderr, elapsed, what or data[:80])


def check_rejected_or_accepted(work, reader, data: bytes):
    """A truncation of a valid file may still be valid: exit 0, or 2 with one sentence
    (a warning line at most when accepted)."""
    path, out = _write(work, reader, data)
    code, _, stderr, elapsed = _run(reader, path, out)
    if code == 0:
        assert "Traceback" not in stderr and len(stderr.strip().splitlines()) <= 1, stderr
        assert elapsed < SLOW_S
    else:
        assert_one_sentence(code, stderr, elapsed, data[-80:])


# ----------------------------------------------------------------- the controls


@pytest.mark.parametrize("reader, source", [
    ("spec", SPEC), ("gpu-path", SPEC), ("spec-file", SPEC), ("profile", PROFILE),
    ("overheads", OVERHEADS), ("config", CONFIG),
])
def test_a_copy_of_a_bundled_file_is_accepted(work, reader, source):
    path, out = _write(work, reader, source.read_bytes(), name="copy")
    code, stdout, stderr, _ = _run(reader, path, out)
    assert code == 0 and stdout and "error" not in stderr, stderr


def test_a_copy_of_a_measurement_file_is_accepted(work, measured):
    for reader in ("measurements", "calibrate"):
        path, out = _write(work, reader, measured.read_bytes(), name="copy")
        code, stdout, stderr, _ = _run(reader, path, out)
        assert code == 0 and stdout and not stderr.strip(), (reader, stderr)


def test_a_valid_case_file_runs(work):
    cases = [{"op": "copy", "dtype": "uint8", "bytes": 4096, "backend": "numpy"}]
    path, out = _write(work, "cases", json.dumps(cases).encode(), name="copy")
    code, _, stderr, _ = _run("cases", path, out)
    assert code == 0 and "error" not in stderr
    assert len(out.read_text().splitlines()) == 2  # the run header and one record


# ----------------------------------------------------------- hypothesis: random input

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)
ALL_READERS = sorted(READERS)


@FUZZ
@given(reader=st.sampled_from(ALL_READERS), data=st.binary(min_size=1, max_size=600))
def test_random_bytes(work, reader, data):
    if not _legal(reader, data):
        check_rejected(work, reader, data)


@FUZZ
@given(reader=st.sampled_from(ALL_READERS), text=st.text(min_size=1, max_size=300))
def test_random_text(work, reader, text):
    if not _legal(reader, text.encode("utf-8")):
        check_rejected(work, reader, text.encode("utf-8"))


@FUZZ
@given(reader=st.sampled_from(ALL_READERS), value=JSON, as_lines=st.booleans())
def test_random_json_structures(work, reader, value, as_lines):
    text = json.dumps(value)
    if as_lines and isinstance(value, list):
        text = "\n".join(json.dumps(v) for v in value) + "\n"
    if not text.strip() or (reader == "harness-out" and isinstance(value, dict) and "run" in value):
        return
    if reader in ("overheads", "profile") and _empty_yaml(text):
        return  # an empty overheads file keeps every default, an empty profile is ideal
    check_rejected(work, reader, text.encode("utf-8"))


def _legal(reader: str, data: bytes) -> bool:
    """The few random files that are legal: a blank --out (a fresh measurement file) or
    overlay (nothing to draw), an empty overheads file (every default) or profile (ideal)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return False
    if reader in ("harness-out", "roofline"):
        return not text.strip()
    return reader in ("overheads", "profile") and _empty_yaml(text)


def _empty_yaml(text: str) -> bool:
    import yaml

    try:
        return yaml.safe_load(text) in (None, {})
    except yaml.YAMLError:
        return False


@FUZZ
@given(reader=st.sampled_from(["spec", "profile", "overheads", "gpu-path"]), value=JSON,
       encoding=st.sampled_from(["utf-8", "utf-16", "latin-1"]))
def test_random_yaml_structures(work, reader, value, encoding):
    import yaml

    text = yaml.safe_dump(value, allow_unicode=True)
    if reader in ("overheads", "profile") and value in (None, {}):
        return  # an empty overheads file keeps every default, an empty profile is ideal
    try:
        data = text.encode(encoding)
    except UnicodeEncodeError:
        return
    check_rejected(work, reader, data)


_CUTS = st.floats(min_value=0.0, max_value=0.999)


@FUZZ
@given(cut=_CUTS, reader=st.sampled_from(["spec", "profile", "overheads", "config"]))
def test_truncations_of_valid_files(work, cut, reader):
    source = {"spec": SPEC, "profile": PROFILE, "overheads": OVERHEADS, "config": CONFIG}[reader]
    data = source.read_bytes()
    check_rejected_or_accepted(work, reader, data[: int(cut * len(data))] or b"{")


@FUZZ
@given(cut=_CUTS)
def test_truncations_of_a_measurement_file(work, measured, cut):
    data = measured.read_bytes()
    check_rejected_or_accepted(work, "measurements", data[: max(1, int(cut * len(data)))])


# -------------------------------------------------------------- table: known traps


def _bomb(levels=9, width=9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def _spec_with(extra: str) -> bytes:
    return (SPEC.read_text() + extra).encode()


_HEADER = json.dumps({"run": {"run_id": "r1", "hardware": "NVIDIA H200"}})
_GEMM = {"op": "gemm", "dtype": "bf16", "m": 64, "n": 64, "k": 64, "batch": 1, "backend": "cublas",
         "graph": True, "measured_s": 1e-5, "hardware": "h200", "run_id": "r1"}


def _jsonl(*objs) -> bytes:
    return "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs).encode()


TRAPS = [
    # not UTF-8
    ("spec", SPEC.read_text().encode("utf-16"), "not UTF-8"),
    ("spec", "notes: café\n".encode("latin-1") + SPEC.read_bytes(), "not UTF-8"),
    ("gpu-path", b"\x00\x01\x02\xff" * 50, "not UTF-8"),
    ("spec-file", SPEC.read_text().encode("utf-16"), "not UTF-8"),
    ("profile", PROFILE.read_text().encode("utf-16"), "not UTF-8"),
    ("overheads", "cuda_graphs: 1 GiB # é\n".encode("latin-1"), "not UTF-8"),
    ("measurements", _HEADER.encode("utf-16"), "not UTF-8"),
    ("calibrate", b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8"),
    ("roofline", b"\xff" * 10, "not UTF-8"),
    ("config", CONFIG.read_text().encode("utf-16"), "not UTF-8"),
    ("cases", '[{"op": "copy", "bytes": 64}]'.encode("utf-16"), "not UTF-8"),
    ("harness-out", (_HEADER + "\n").encode("utf-16"), "not UTF-8"),
    # YAML: anchor bombs, self-reference, deep nesting, values quoted in full
    ("spec", (_bomb() + "notes: *a9\n").encode(), "aliases"),
    ("spec", ("notes: &n [*n]\n" + SPEC.read_text()).encode(), "alias"),
    ("profile", _bomb().encode(), "aliases"),
    ("overheads", _bomb().encode(), "aliases"),
    ("spec", b"[" * 100_000, "YAML"),
    ("spec", b"a:\n" + b"- " * 20_000 + b"x\n", "YAML"),
    ("spec", _spec_with(f"notes: [{', '.join(['x' * 100] * 200)}]\n"), "notes"),
    # JSON: not an object, deep nesting, wrong types, huge sizes
    ("measurements", _jsonl(5), "JSON object"),
    ("measurements", _jsonl([]), "JSON object"),
    ("measurements", _jsonl('"x"'), "JSON object"),
    ("measurements", _jsonl({"run": 5}), "run header"),
    ("measurements", _jsonl({"run": {"run_id": [1]}}), "run_id"),
    ("measurements", b"[" * 100_000 + b"\n", "nested too deeply"),
    ("measurements", _jsonl(_HEADER, dict(_GEMM, m=None)), "'m'"),
    ("measurements", _jsonl(_HEADER, dict(_GEMM, m=[64])), "'m'"),
    ("measurements", _jsonl(_HEADER, dict(_GEMM, m="64")), "'m'"),
    ("measurements", _jsonl(_HEADER, dict(_GEMM, m=10**400)), "'m'"),
    ("measurements", _jsonl(_HEADER, dict(_GEMM, measured_s="1e-5")), "measured_s"),
    ("measurements", _jsonl(_HEADER, dict(_GEMM, measured_s=None)), "measured_s"),
    ("measurements", _jsonl(_HEADER, dict(_GEMM, op=5)), "'op'"),
    ("measurements", _jsonl(_HEADER, dict(_GEMM, backend=["x"])), "'backend'"),
    ("measurements", _jsonl(_HEADER, dict(_GEMM, hardware={"a": 1})), "'hardware'"),
    ("measurements", _jsonl(_HEADER, dict(_GEMM, total_memory_bytes="big")), "total_memory"),
    ("measurements", _jsonl(_HEADER, '{"op": "gemm", "m', _GEMM), "line 2"),
    ("calibrate", _jsonl(_HEADER, dict(_GEMM, dtype=7)), "'dtype'"),
    ("roofline", _jsonl([1, 2]), "JSON object"),
    ("config", json.dumps(dict(json.loads(CONFIG.read_text()), num_hidden_layers=1e9)).encode(),
     "at most 10,000"),
    ("config", json.dumps(dict(json.loads(CONFIG.read_text()), hidden_size=10**12)).encode(),
     "at most 1,000,000"),
    ("config", json.dumps(dict(json.loads(CONFIG.read_text()), vocab_size=10**9)).encode(),
     "at most 10,000,000"),
    ("config", json.dumps(dict(json.loads(CONFIG.read_text()), intermediate_size=10**15)).encode(),
     "intermediate_size"),
    ("config", json.dumps(dict(json.loads(CONFIG.read_text()), num_attention_heads=[32])).encode(),
     "num_attention_heads"),
    ("config", json.dumps(dict(json.loads(CONFIG.read_text()), rope_theta="x" * 10_000)).encode(),
     "rope_theta"),
    ("config", b"[" * 100_000, "nested too deeply"),
    ("config", b"5", "JSON object"),
    ("cases", b"5", "JSON list"),
    ("cases", b"[5]", "not a JSON object"),
    ("cases", b'[{"op": 3}]', "no known op"),
    ("cases", b'[{"op": ["gemm"]}]', "no known op"),
    ("cases", b'[{"op": "gemm", "m": "8", "n": 8, "k": 8}]', "whole number"),
    ("cases", b'[{"op": "copy", "bytes": 8, "dtype": {}}]', "dtype"),
    ("cases", b"[" * 100_000, "nested too deeply"),
    ("cases", b"[]", "no case"),
    ("harness-out", b"my notes about the run\n", "not a measurement file"),
    ("harness-out", b"5\n", "not a measurement file"),
]


@pytest.mark.parametrize("reader, data, says", TRAPS,
                         ids=[f"{i}-{r}-{s.split()[0]}" for i, (r, _, s) in enumerate(TRAPS)])
def test_known_traps(work, reader, data, says):
    path, out = _write(work, reader, data)
    code, _, stderr, elapsed = _run(reader, path, out)
    assert_one_sentence(code, stderr, elapsed, says)
    assert says in stderr, stderr
    assert len(stderr) < 600  # values are quoted cut short, never whole


def test_a_torn_last_line_is_skipped_with_a_warning(work, measured):
    data = measured.read_bytes() + b'{"op": "gemm", "m": 64, "n'
    path, out = _write(work, "measurements", data)
    code, stdout, stderr, _ = _run("measurements", path, out)
    assert code == 0 and stdout
    assert stderr.startswith("warning:") and "cut short" in stderr and len(stderr.splitlines()) == 1


def test_file_readers_refuse_directories_devices_and_empty_paths(work):
    for reader in ("spec", "profile", "overheads", "measurements", "config", "cases"):
        for target in (work, "/dev/zero", "", "9" * 400, work / ("9" * 300 + ".yaml")):  # (names too long to look up)
            if target == "" and reader in ("spec", "measurements"):
                continue  # click refuses an empty argument itself (one sentence too)
            code, _, stderr = run_cli(_args(reader, target, work / "o"))
            assert code == 2 and len(stderr.strip().splitlines()) == 1, (reader, target, stderr)
            assert "Traceback" not in stderr


def test_a_file_over_the_size_bound_is_refused(work):
    path, out = _write(work, "spec", b"# padding\n" * 200_000)
    code, _, stderr, elapsed = _run("spec", path, out)
    assert_one_sentence(code, stderr, elapsed)
    assert "more than the 1 MiB" in stderr


# ------------------------------------------------------------------------- writers

_WRITERS = {
    "roofline -o": ["roofline", "--model", "llama-3-8b", "--gpu", "h100", "-o", "{}"],
    "roofline --png": ["roofline", "--model", "llama-3-8b", "--gpu", "h100", "-o", "{ok}", "--png", "{}"],
    "validate --plot": ["validate", "{measured}", "--gpu", "h200", "--profile", "ideal", "--plot", "{}"],
    "calibrate -o": ["calibrate", "{measured}", "--gpu", "h200", "-o", "{}"],
    "harness --out": ["harness", "run", "--device", "cpu", "--quiet", "--suite", "cpu-tiny",
                      "--max-cases", "1", "--out", "{}"],
}


@pytest.mark.parametrize("writer", sorted(_WRITERS))
@pytest.mark.parametrize("where", ["missing directory", "a directory", "empty", "under a file",
                                   "exists", "a name too long"])
def test_output_paths_that_cannot_be_written(work, measured, writer, where):
    existing = work / "existing.out"
    existing.write_text("something the user wrote\n")
    target = {"missing directory": work / "no" / "such" / "dir" / "f.out", "a directory": work,
              "empty": "", "under a file": existing / "f.out", "exists": existing,
              "a name too long": work / ("9" * 300 + ".out")}[where]
    if writer == "harness --out" and where == "missing directory":
        return  # the harness creates the directory of its measurement file
    ok = work / "fresh.html"
    ok.unlink(missing_ok=True)
    args = [a.replace("{}", str(target)).replace("{ok}", str(ok)).replace("{measured}", str(measured))
            for a in _WRITERS[writer]]
    start = time.monotonic()
    code, _, stderr = run_cli(args)
    assert_one_sentence(code, stderr, time.monotonic() - start, (writer, where))
    assert existing.read_text() == "something the user wrote\n"  # nothing lost
    assert not ok.exists()  # no half of the output written before the error


def test_validate_plot_overwrites_only_with_force(work, measured):
    plot = work / "plot.html"
    plot.write_text("keep me")
    args = ["validate", str(measured), "--gpu", "h200", "--profile", "ideal", "--plot", str(plot)]
    code, _, stderr = run_cli(args)
    assert code == 2 and "--force" in stderr and plot.read_text() == "keep me"
    code, _, stderr = run_cli(args + ["--force"])
    assert code == 0 and "<html>" in plot.read_text()


def test_a_measurement_file_with_nothing_to_overlay_is_refused(work):
    empty = work / "empty.jsonl"
    empty.write_text("\n")
    code, _, err = run_cli(["roofline", "--model", "llama-3-8b", "--gpu", "h200", "--measured", str(empty),
                            "-o", str(work / "chart.html")])
    assert code == 2 and "no successful measurement" in err and len(err.strip().splitlines()) == 1
    assert not (work / "chart.html").exists()
