"""Fuzzing every command's arguments (README: bad input is one sentence on stderr and exit
code 2; never a traceback, a hang, NaN or inf in the output).

The command tree is walked programmatically, so a new command or option is fuzzed (and a
command without a legal base invocation here fails ``test_every_command_is_fuzzed``).
Each option gets a table of awkward values (0, negative, huge, fractional, NaN, inf, empty,
text, unicode) and hypothesis draws random combinations on top. File contents and output
paths are not fuzzed here (see test_fuzz_files.py): options naming files keep their bases.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from helpers import _Main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rooflinesim.cli.main import cli

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")  # (an overflow is a crash here)

ROOT = Path(__file__).resolve().parent.parent
SPEC = str(ROOT / "hardware_specs" / "h200-sxm.yaml")

# What Python and JSON print for numbers that are not finite: nan, inf, -inf, xinf, NaN,
# Infinity; not inside words ('info', 'inference') or file names.
NONFINITE = re.compile(r"(?i)(?<![\w./-])x?[-+]?(nan|inf|infinity)(?![\w./-])")

SLOW_S = 10.0  # no single case takes longer (a hang is stopped at HANG_S)
HANG_S = 60

# A measurement of one GEMM (the harness's record format), for `validate` and `calibrate`.
RECORD = {"op": "gemm", "dtype": "bf16", "m": 26, "n": 18688, "k": 192, "batch": 1, "backend": "cublas",
          "graph": True, "layout": "tn", "measured_s": 4.476e-06, "calls": 256, "hardware": "h200-sxm",
          "status": "ok", "case_id": "gemm|bf16|cublas|graph|m=26,n=18688,k=192,batch=1"}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    meas = d / "gemm.jsonl"
    meas.write_text("".join(json.dumps({**RECORD, "m": m, "case_id": f"c{m}"}) + "\n" for m in (26, 64, 300)))
    existing = d / "profile.yaml"
    existing.write_text("kept: true\n")  # (calibrate stops at 'exists' before it fits: fitting is slow)
    return {"MEAS": str(meas), "EXISTING": str(existing), "HTML": str(d / "roofline.html")}


# A legal invocation of every command (placeholders in capitals are the files above).
BASE = {
    ("specs", "list"): [],
    ("specs", "show"): ["h200"],
    ("specs", "validate"): [SPEC],
    ("specs", "schema"): [],
    ("predict", "gemm"): ["-m", "64", "-n", "256", "-k", "512"],
    ("predict", "attention"): ["--seq", "512"],
    ("predict", "moe"): ["--tokens", "64", "--hidden", "1024", "--ffn", "2048", "--experts", "8", "--top-k", "2"],
    ("predict", "allreduce"): ["--bytes", "1MiB"],
    ("predict", "allgather"): ["--bytes", "1MiB"],
    ("predict", "reducescatter"): ["--bytes", "1MiB"],
    ("predict", "alltoall"): ["--bytes", "1MiB"],
    ("predict", "copy"): ["--bytes", "1MiB"],
    ("predict", "norm"): ["--tokens", "8", "--hidden", "4096"],
    ("predict", "model"): ["--model", "llama-3-8b", "--prompt", "128", "--gen", "8"],
    ("fit",): ["--model", "llama-3-8b"],
    ("formula",): ["gemm"],
    ("roofline",): ["--model", "llama-3-8b", "-o", "HTML", "--force"],
    ("serve",): ["--model", "llama-3-8b", "--num-prompts", "5", "--output-len", "16", "--interval-samples", "0"],
    ("plan",): ["--model", "llama-3-8b", "--rate", "2", "--slo-tpot-p99", "50ms", "--gpu", "h100", "--weights",
                "bf16", "--max-gpus", "1", "--num-prompts", "10", "--output-len", "16", "--interval-samples", "0",
                "--jobs", "1"],
    ("calibrate",): ["MEAS", "--gpu", "h200", "-o", "EXISTING"],
    ("validate",): ["MEAS", "--gpu", "h200"],
    ("harness", "run"): ["--list"],
}
EXIT_1 = {("fit",)}  # commands that document exit code 1 (fit: the model does not fit)
BASE_EXIT = {("calibrate",): 2}  # (an existing -o: refused before the slow fit)

# options naming files (another suite fuzzes their contents), and ones that would start work
# (calibrate --force: a fit; harness --worker and --run-id are internal)
NOT_FUZZED = {"--spec-file", "--overheads", "--measured", "--output", "-o", "--png", "--plot", "--cases",
              "--out", "--worker", "--run-id", "--help"}
NOT_FUZZED_IN = {("calibrate",): {"--force"}, ("harness", "run"): {"--list"},
                 # (plan: the options that multiply its simulations; test_plan.py checks their parsing)
                 ("plan",): {"--num-prompts", "--max-gpus", "--interval-samples", "--jobs", "--gpu", "--weights",
                             "--kv-dtype", "--input-len", "--output-len", "--max-num-batched-tokens",
                             "--max-num-seqs", "--ray-address"}}

HUGE = [str(2**40), str(2**40 + 1), str(2**53), str(2**62), str(2**63), str(2**64), str(10**30), "9" * 400]
NUMBERS = ["0", "-1", "1", "3", "4096", *HUGE, "1e3", "1e30", "0.5", "-0.0", "nan", "NaN", "inf", "-inf",
           "1_000", "0x10", "", " ", "١٢"]
TEXT = ["", " ", "abc", "h100", "NVIDIA H9000", "llama-9", "bf16", "fp5", "int3", "max", "ideal", "1GiB",
        "1.5 KB", "-5 us", "nan GB", "inf s", "1e400 B", "ünïcødé", "µs", "💥", "a=b", "cuda_graphs=nan",
        "cuda_graphs=-1 GiB", "nope=1", "--json"]


def _leaves(group=cli, path=()):
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from _leaves(cmd, (*path, name))
        else:
            yield (*path, name), cmd


COMMANDS = dict(_leaves())


def _harness_options():
    """(option, kind, choices) of `harness run`, from its argparse parser."""
    from rooflinesim.harness.cli import build_parser

    run = build_parser()._subparsers._group_actions[0].choices["run"]
    for a in run._actions:
        if not a.option_strings or a.help == argparse.SUPPRESS:
            continue
        kind = "flag" if a.nargs == 0 else "number" if a.type is not None else "choice" if a.choices else "text"
        yield a.option_strings[-1], kind, tuple(a.choices or ())


def _options(path):
    """(spellings, kind, choices) of each fuzzed option of a command."""
    skip = NOT_FUZZED | NOT_FUZZED_IN.get(path, set())
    if path == ("harness", "run"):
        return [((o,), kind, ch) for o, kind, ch in _harness_options() if o not in skip]
    out = []
    for p in COMMANDS[path].params:
        if not isinstance(p, click.Option) or p.hidden or set(p.opts) & skip:
            continue
        if isinstance(p.type, click.Path):
            continue
        spellings = tuple(p.opts) + tuple(p.secondary_opts)
        if p.is_flag:
            kind = "flag"
        elif isinstance(p.type, (click.IntRange, click.FloatRange)) or p.type in (click.INT, click.FLOAT):
            kind = "number"
        elif isinstance(p.type, click.Choice):
            kind = "choice"
        else:
            kind = "text"
        out.append((spellings, kind, tuple(getattr(p.type, "choices", ()))))
    return out


def _values(kind, choices):
    if kind == "flag":
        return [None]
    if kind == "number":
        return NUMBERS
    if kind == "choice":
        return [*choices[:2], "", "nope", "ünï", "0"]
    return TEXT + ["0", "-1", "nan", "inf", str(2**64), "1e30", "0.5"]


def _with(base, option, value):
    """``base`` with ``option`` set to ``value`` (replacing the base's value, if any)."""
    args = list(base)
    if value is None and option in args:  # (a flag the base already gives)
        return args
    if option in args:
        i = args.index(option)
        del args[i:i + 2]
    return args + ([option] if value is None else [option, value])


def _base(path, files):
    return [files.get(a, a) for a in BASE[path]]


class Hang(Exception):
    pass


def _alarm(*_):
    raise Hang(f"a case ran past {HANG_S} s")


def check(path, args):
    """Run ``rooflinesim PATH ARGS`` in-process and check the promise; return the exit code."""
    argv = [*path, *args]
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_S)
    try:
        start = time.perf_counter()
        result = CliRunner().invoke(_Main(), argv)
        elapsed = time.perf_counter() - start
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    code, out, err = result.exit_code, result.stdout, result.stderr
    crash = result.exception if not isinstance(result.exception, SystemExit) else None
    assert crash is None, f"{argv}: {type(crash).__name__}: {crash}"
    allowed = {0, 2} | ({1} if path in EXIT_1 else set())
    assert code in allowed, f"{argv}: exit {code}\n{err}"
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "error" in lines[0] and "Traceback" not in err, f"{argv}: {err!r}"
    else:
        found = NONFINITE.search(out)
        assert not found, f"{argv}: printed {found.group()!r}:\n{out}"
        if code == 1:
            assert "DOES NOT FIT" in out or '"fits": false' in out, f"{argv}: exit 1\n{out}\n{err}"
    assert elapsed < SLOW_S, f"{argv}: {elapsed:.1f} s"
    return code


def test_every_command_is_fuzzed():
    assert set(COMMANDS) == set(BASE), "give each command a legal base invocation in BASE"


@pytest.mark.parametrize("path", sorted(BASE), ids=" ".join)
def test_legal_base_invocations_succeed(path, files):
    assert check(path, _base(path, files)) == BASE_EXIT.get(path, 0)


LEGAL = [
    ("predict", "gemm", "-m", "1", "-n", "4096", "-k", "4096", "--dtype", "int4", "--group-size", "64",
     "--gpu", "h200"),
    ("predict", "gemm", "-m", str(2**40), "-n", "8192", "-k", "1", "--gpu", "h200", "--json"),
    ("predict", "gemm", "-m", "8192", "-n", "8192", "-k", "8192", "--dtype", "FP8", "--gpu", "NVIDIA H200", "--eager"),
    ("predict", "attention", "--decode", "--seq", "8192", "--kv-heads", "8", "--batch", "64", "--json"),
    ("predict", "attention", "--seq", "2048", "--page-size", "16", "--variant", "fa2", "--no-causal"),
    ("predict", "moe", "--tokens", "4096", "--hidden", "4096", "--ffn", "14336", "--experts", "8", "--top-k", "2",
     "--imbalance", "1.5", "--fused", "--ep", "2"),
    ("predict", "copy", "--bytes", "16 MiB", "--eager"),
    ("predict", "copy", "--bytes", "1,048,576"),
    ("predict", "allreduce", "--bytes", "1GB", "--gpus", "8", "--gpu", "h200", "--algorithm", "nvls"),
    ("predict", "alltoall", "--bytes", "4096", "--gpus", "2", "--json"),
    ("predict", "norm", "--tokens", str(2**40), "--hidden", "1", "--kind", "softmax"),
    ("predict", "model", "--model", "llama-3-8b", "--batch", "max", "--memory-fraction", "0.5"),
    ("predict", "model", "--model", "llama-3-8b", "--eager", "--launch-overhead", "5 us", "--kv", "fp8"),
    ("predict", "model", "--model", "mixtral-8x7b", "--gpu", "h200", "--tp", "2", "--ep", "2", "--chunk", "512"),
    ("fit", "--model", "llama-3-8b", "--kv-dtype", "fp8", "--device-memory", "79.19 GiB", "--json"),
    ("fit", "--model", "llama-3-70b", "--gpu", "h100", "--set", "cuda_graphs=0"),
    ("formula", "gemm", "--crossover-gpu", "h200", "-n", "8192", "-k", "8192"),
    ("formula", "allreduce", "--latex"),
    ("specs", "show", "NVIDIA H200", "--json"),
    ("validate", "MEAS", "--gpu", "h200", "--worst", "0", "--by", "mode", "--json"),
    ("harness", "run", "--list", "--suite", "quick", "--max-cases", "3", "--time-budget", "60"),
]


@pytest.mark.parametrize("argv", LEGAL, ids=lambda a: " ".join(a[:4]))
def test_legal_inputs_exit_0(argv, files):
    path = next(p for p in BASE if tuple(argv[:len(p)]) == p)
    code = check(path, [files.get(a, a) for a in argv[len(path):]])
    assert code in ({0, 1} if path in EXIT_1 else {0})


def _table():
    for path in sorted(BASE):
        for spellings, kind, choices in _options(path):
            yield pytest.param(path, spellings[0], kind, choices, id=f"{' '.join(path)} {spellings[0]}")


@pytest.mark.parametrize("path,option,kind,choices", list(_table()))
def test_each_option_takes_awkward_values(path, option, kind, choices, files):
    base = _base(path, files)
    for value in _values(kind, choices):
        check(path, _with(base, option, value))


@pytest.mark.parametrize("path", [p for p in sorted(BASE) if any(a.param_type_name == "argument"
                                                                 and not isinstance(a.type, click.Path)
                                                                 for a in COMMANDS[p].params)],
                         ids=" ".join)
def test_positional_arguments_take_awkward_values(path, files):
    base = _base(path, files)
    for value in TEXT + ["0", "-1", "nan"]:
        check(path, [value, *base[1:]])


@pytest.mark.parametrize("option,value", [("--gpu", "h1000"), ("--gpu", "NVIDIA H9000"), ("--gpu", ""),
                                          ("--gpu", "ünï"), ("--model", "llama-9"), ("--model", ""),
                                          ("--dtype", "fp5"), ("--dtype", ""), ("--weights", "int3"),
                                          ("--kv-dtype", "int4"), ("--kv", "fp5"), ("--profile", "nope")])
def test_unknown_names_are_one_sentence(option, value, files):
    tried = 0
    for path in sorted(BASE):
        if any(option in spellings for spellings, _, _ in _options(path)) and path != ("harness", "run"):
            argv = _with(_base(path, files), option, value)
            assert check(path, argv) == 2, argv
            tried += 1
    assert tried


# a random mix of values: any integer, any float, any short text
ANY_VALUE = st.one_of(st.integers(-2**70, 2**70).map(str), st.floats().map(repr), st.sampled_from(NUMBERS + TEXT),
                      st.text(max_size=8))


@pytest.mark.parametrize("path", sorted(BASE), ids=" ".join)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data())
def test_random_combinations_of_options(path, files, data):
    options = _options(path)
    if not options:
        return
    args = _base(path, files)
    for spellings, kind, choices in data.draw(st.lists(st.sampled_from(options), min_size=1, max_size=3)):
        option = data.draw(st.sampled_from(spellings))
        if kind == "flag":
            value = None
        elif kind == "choice":
            value = data.draw(st.one_of(st.sampled_from(choices), ANY_VALUE))
        else:
            value = data.draw(ANY_VALUE)
        args = _with(args, option, value)
    check(path, args)
