"""``python -m rooflinesim.harness run|list [options]``: argument parsing and the entry point.

``main(argv) -> int`` never raises for a user's mistake: it prints one sentence on
stderr and returns 2.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

from ..errors import UserError
from ..files import read_text, shorten
from . import records, suites
from .runner import Options, run, runs_here, summary_table
from .supervisor import die_with_parent, supervise

DEFAULT_RESTARTS = 10
MAX_CASES_BYTES = 64 * 1024 * 1024  # a --cases file (the largest suite is under a megabyte)


class UsageError(Exception):
    """A bad command line; its message is one sentence."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def _count(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


MAX_SECONDS = 1e7  # (about 116 days: any longer is a mistake, and timers overflow on inf)


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got '{text}'") from None
    if not 0 < value <= MAX_SECONDS:  # (also NaN, and inf)
        raise argparse.ArgumentTypeError(f"expected seconds > 0 and at most {MAX_SECONDS:g}, got {text}")
    return value


def _add_run_options(p):
    p.add_argument("--suite", action="append", metavar="NAME",
                   help=f"suite to run, repeatable (default quick): {', '.join(suites.SUITE_NAMES)}")
    p.add_argument("--cases", metavar="FILE",
                   help="JSON list (or JSON Lines) of case dicts to run instead of suites")
    p.add_argument("--out", metavar="FILE.jsonl",
                   help="measurement file (default measurements-<hardware>.jsonl, the name in "
                        "lower case and hyphens); resumed if present")
    p.add_argument("--device", choices=("cuda", "cpu"),
                   help="default: cuda if available, else cpu")
    p.add_argument("--mode", choices=("graph", "eager"),
                   help="CUDA graph replays (default) or eager launches; the CPU is always eager")
    p.add_argument("--hardware", metavar="NAME",
                   help="hardware name to record (default: the device name torch reports, "
                        "which rooflinesim reads against the specs' device_names)")
    p.add_argument("--max-cases", type=_positive_int, metavar="N")
    p.add_argument("--time-budget", type=_positive_float, metavar="SECONDS",
                   help="start no new case after this many seconds")
    p.add_argument("--list", action="store_true", help="list suites, case counts, H200 estimates")
    p.add_argument("--no-resume", action="store_true", help="measure again cases already in --out")
    p.add_argument("--retry-failed", action="store_true", help="measure again failed cases")
    p.add_argument("--no-profile", action="store_true", help="skip the per-case kernel count")
    p.add_argument("--profile", action="store_true",
                   help="count each case's kernels in eager mode too (off there by default: after "
                        "a profiler pass, later eager launches in the process take longer)")
    p.add_argument("--warm-gpu-ms", type=_positive_float, default=None, metavar="MS",
                   help="before each case's timed replays, keep the GPU busy this long (an idle GPU "
                        "lowers its clock; eager launches of small kernels leave it idle)")
    p.add_argument("--builds", type=_positive_int, default=None, metavar="N",
                   help="build each case afresh (new inputs) and time it N times; the record holds the "
                        "median (default: 3 with --mode eager, whose host times move from build to build, "
                        "else 1)")
    p.add_argument("--case-timeout", type=_positive_float, default=180.0, metavar="SECONDS",
                   help="kill and record a case running longer (isolated runs; default 180)")
    iso = p.add_mutually_exclusive_group()
    iso.add_argument("--isolate", dest="isolate", action="store_true", default=None,
                     help="measure in a worker process that is restarted if it dies "
                          "(default on CUDA)")
    iso.add_argument("--no-isolate", dest="isolate", action="store_false")
    p.add_argument("--restarts", type=_count, default=DEFAULT_RESTARTS, metavar="N",
                   help=f"worker restarts allowed in an isolated run (default {DEFAULT_RESTARTS})")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--run-id", help=argparse.SUPPRESS)


def build_parser():
    parser = _Parser(prog="python -m rooflinesim.harness",
                     description="Time real GPU kernels and write JSON Lines measurements.")
    verbs = parser.add_subparsers(dest="verb", metavar="{run,list}", parser_class=_Parser)
    _add_run_options(verbs.add_parser("run", help="measure suites of cases"))
    _add_run_options(verbs.add_parser("list", help="same as run --list"))
    return parser


def main(argv=None, call_s=None) -> int:
    """``call_s(cases, world_size)``: the seconds of one call of each case, for the
    listing's estimates (given by the package's CLI, which prices them with the
    calibrated model)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        if args.verb is None:
            raise UsageError("choose a verb: run or list")
        if args.verb == "list" or args.list:
            print(list_text(args.suite or list(suites.SUITE_NAMES), call_s=call_s))
            return 0
        return _run(args, argv)
    except (UsageError, UserError) as exc:
        print(f"harness: error: {_sentence(str(exc))}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        print("harness: interrupted; run again with the same --out to resume", file=sys.stderr)
        return 130


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if text.endswith((".", "?", "!")) else text + "."


# ---------------------------------------------------------------------------- run

def _run(args, argv) -> int:
    if args.worker:  # a supervisor's worker: never outlive it (nor keep a GPU busy)
        die_with_parent()
        if os.getppid() == 1:
            return 1
    cases, suite_names = _select_cases(args)
    device, torch = _pick_device(args.device)
    mode = args.mode or "graph"
    if device == "cpu" and args.mode == "graph" and not args.worker:
        print("harness: the CPU is timed eagerly; --mode graph is ignored", file=sys.stderr)
    hardware = args.hardware or _hardware(device, torch)
    out = args.out if args.out is not None else f"measurements-{records.file_slug(hardware)}.jsonl"
    if not out.strip():
        raise UsageError("--out was given an empty path")
    if os.path.isdir(out):
        raise UsageError(f"--out {out} is a directory")
    if os.path.exists(out) and not os.path.isfile(out):
        raise UsageError(f"--out {out} is not a regular file")
    records.check_measurement_file(out)
    if not args.worker:
        _check_something_runs(cases, device, out)
    run_id = args.run_id or records.new_run_id()
    if args.no_resume and not args.worker and os.path.exists(out):
        print(f"harness: --no-resume: cases already in {out} are measured again and appended",
              file=sys.stderr)
    isolate = args.isolate if args.isolate is not None else device == "cuda"
    deadline = time.time() + args.time_budget if args.time_budget else None
    if args.worker:  # the supervisor holds the lock
        return _measure(args, argv, cases, suite_names, device, mode, hardware, out, run_id,
                        isolate, deadline)
    records.Writer(out)  # (creates the directory)
    with records.OutLock(out):
        return _measure(args, argv, cases, suite_names, device, mode, hardware, out, run_id,
                        isolate, deadline)


def _check_something_runs(cases, device, out) -> None:
    """One sentence when no case can run on this device (e.g. a GPU suite without a GPU)."""
    if cases and not any(runs_here(c, device) for c in cases):
        other = "a CUDA device" if device == "cpu" else "--device cpu"
        raise UsageError(f"nothing to measure: the {len(cases)} cases need {other}, and this run "
                         f"is on --device {device} (the suite cpu-tiny runs on a CPU); "
                         f"{out} was not written")


def _measure(args, argv, cases, suite_names, device, mode, hardware, out, run_id, isolate,
             deadline) -> int:
    if isolate and not args.worker:
        rc = supervise(_worker_args(argv), out, run_id, max(0, args.restarts), deadline,
                       args.max_cases)
    else:
        opts = Options(out=out, device=device, mode=mode, hardware=hardware, run_id=run_id,
                       suites=suite_names, argv=_public_args(argv), max_cases=args.max_cases,
                       deadline=deadline, resume=not args.no_resume,
                       retry_failed=args.retry_failed,
                       profile=not args.no_profile and (mode == "graph" or args.profile),
                       case_timeout_s=args.case_timeout, quiet=args.quiet,
                       warm_gpu_s=(args.warm_gpu_ms or 0.0) / 1e3,
                       builds=args.builds or (EAGER_BUILDS if mode == "eager" and device == "cuda" else 1))
        rc = run(cases, opts)
    if not args.worker and not args.quiet:
        if os.path.exists(out) and os.path.getsize(out):
            print(summary_table(out, run_id))
            print(f"measurements: {out}")
        else:
            print(f"harness: nothing was measured; {out} was not written", file=sys.stderr)
    return rc


EAGER_BUILDS = 3  # eager GPU cases: builds per case, the record the median (see --builds)


def _worker_args(argv):
    """The command line for a worker: the user's, less what the supervisor decides."""
    drop_with_value = {"--time-budget", "--max-cases", "--run-id"}
    out, skip = [], False
    for a in argv[1:] if argv and argv[0] in ("run", "list") else argv:
        if skip:
            skip = False
            continue
        if a in ("--isolate", "--no-isolate", "--worker"):
            continue
        if a in drop_with_value:
            skip = True
            continue
        if any(a.startswith(d + "=") for d in drop_with_value):
            continue
        out.append(a)
    return out


def _public_args(argv):
    """The command line as a user would type it (without the supervisor's own flags)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--run-id":
            skip = True
        elif a != "--worker" and not a.startswith("--run-id="):
            out.append(a)
    return out


def _select_cases(args):
    if args.cases:
        if args.suite:
            raise UsageError("give either --suite or --cases, not both")
        return _read_cases(args.cases), ["custom"]
    names = args.suite or ["quick"]
    cases = []
    for name in names:
        try:
            cases += suites.suite_cases(name)
        except KeyError:
            raise UsageError(f"unknown suite '{name}'; known: {', '.join(suites.SUITE_NAMES)}") \
                from None
    return cases, names


def _read_cases(path):
    text = read_text(path, "--cases", MAX_CASES_BYTES)
    try:
        data = json.loads(text)
    except RecursionError:
        raise UsageError(f"--cases {path} is nested too deeply") from None
    except ValueError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except RecursionError:
            raise UsageError(f"--cases {path} is nested too deeply") from None
        except ValueError:
            raise UsageError(f"--cases {path} is neither a JSON list nor JSON Lines") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise UsageError(f"--cases {path} must hold a JSON list of case objects, "
                         f"not {shorten(data)}")
    if not data:
        raise UsageError(f"--cases {path} holds no case")
    cases = []
    for i, case in enumerate(data):
        if not isinstance(case, dict):
            raise UsageError(f"case {i + 1} in {path} is not a JSON object but {shorten(case)}")
        op = case.get("op")
        if not isinstance(op, str) or op not in records.SHAPE_FIELDS:
            raise UsageError(f"case {i + 1} in {path} has no known op, got {shorten(op)} "
                             f"(known: {', '.join(records.SHAPE_FIELDS)})")
        case = suites.with_defaults(case)
        missing = [f for f in records.SHAPE_FIELDS[case["op"]]
                   if f not in case and f != "world_size"]
        if missing:
            raise UsageError(f"case {i + 1} in {path} lacks {', '.join(missing)}")
        _check_case_types(case, f"case {i + 1} in {path}")
        cases.append(dict(case, suite=case.get("suite", "custom")))
    return cases


_TEXT_FIELDS = ("dtype", "backend", "routing", "mode", "action", "suite", "input")


def _check_case_types(case: dict, where: str) -> None:
    """Shape fields are whole numbers (causal true or false), names are strings."""
    for key, value in case.items():
        if key in _TEXT_FIELDS:
            ok = isinstance(value, str)
            what = "a string"
        elif key == "causal":
            ok = isinstance(value, bool)
            what = "true or false"
        elif key in records.SHAPE_FIELDS[case["op"]]:
            ok = type(value) is int
            what = "a whole number"
        else:
            continue
        if not ok:
            raise UsageError(f"{where}: field {shorten(key)} must be {what}, got {shorten(value)}")


def _pick_device(requested):
    """(device, torch module or None)."""
    torch = None
    if requested != "cpu":
        try:
            import torch
        except Exception as exc:
            if requested == "cuda":
                raise UsageError(f"--device cuda needs torch, which failed to import "
                                 f"({type(exc).__name__})") from None
            torch = None
    if torch is not None and torch.cuda.is_available():
        return "cuda", torch
    if requested == "cuda":
        raise UsageError("--device cuda was asked for but torch sees no CUDA device")
    return "cpu", torch


def _hardware(device, torch):
    """What the device calls itself. The harness holds no table of GPU names: the specs'
    device_names are the one mapping, read where the records are (with the memory size
    of the run header for a name several GPUs share)."""
    if device != "cuda":
        return "cpu"
    return torch.cuda.get_device_name(0)


# --------------------------------------------------------------------------- list

def list_text(names, world_size=2, call_s=None) -> str:
    """Suites with case counts per op and, with ``call_s(cases, world_size)`` (the seconds
    of one call of each case), the expected harness time."""
    unknown = [n for n in names if n not in suites.SUITE_NAMES]
    if unknown:
        raise UsageError(f"unknown suite '{unknown[0]}'; known: {', '.join(suites.SUITE_NAMES)}")
    lines = [f"{'suite':<12}{'cases':>7}{'collect.':>10}{'est. H200':>11}  ops",
             f"{'':<12}{'':>7}{'(>=2 GPU)':>10}{'(min)':>11}"]
    for name in names:
        cases = suites.suite_cases(name)
        coll = [c for c in cases if c["op"] in suites.COLLECTIVE_OPS]
        local = [c for c in cases if c["op"] not in suites.COLLECTIVE_OPS]
        if name == "cpu-tiny":
            est = "(cpu)"
        elif call_s is None:
            est = "-"
        else:
            est = f"{suites.estimate_suite_s(local, call_s, 1) / 60:.1f}"
            if coll:
                est += f"+{suites.estimate_suite_s(coll, call_s, world_size) / 60:.1f}"
        ops = collections.Counter(c["op"] for c in cases)
        lines.append(f"{name:<12}{len(local):>7}{len(coll):>10}{est:>11}  "
                     + ", ".join(f"{op} {n}" for op, n in ops.items()))
    if call_s is None:
        lines.append("estimates: `rooflinesim harness run --list` prices each call with the calibrated H200 model")
    else:
        lines.append(f"estimates: each call as the calibrated H200 model predicts it in a CUDA graph, plus "
                     f"the harness's protocol ({suites.EST_CASE_OVERHEAD_S:.2f} s per case, replays by "
                     f"timing.py's rules); collectives on {world_size} GPUs after '+'")
    return "\n".join(lines)
