"""How far the same cases measured in two processes differ: per op, the ratio of the
second measurement to the first over the cases both files hold (median, 10th and 90th
percentiles). Eager launches are paced by the host, and the host time of a call differs
from process to process; this is the floor no model of it can beat.

    python benchmarks/eager_repeat.py A.jsonl B.jsonl [A2.jsonl B2.jsonl ...]

With no arguments it compares the H200 eager files measured twice: the same suites with
the harness before and after it emptied its allocator between cases, and the thirteenth
held-out set before and after that change.

    python benchmarks/eager_repeat.py --repeats [FILE ...]

measures the same cases in several processes (default: the sixteenth held-out set, eager,
six times: plain, pinned to one core, with the SM clock read, and twice after a busy burst
that keeps the GPU at its working clock) and reports per op: how far one run lies from
the median of the others (the floor that a model of one run's host time cannot beat), and
the bundled H200 profile's error against each case's median over the runs.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "measurements" / "h200-sxm"
PAIRS = [("eager-quick", "eager2-quick"), ("eager-memory", "eager2-memory"), ("eager-moe", "eager2-moe"),
         ("eager-decoder", "eager2-decoder"), ("eager-holdout13", "eager-holdout13b")]


def _cases(path: Path) -> dict:
    out = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line) if line.strip() else {}
        if rec.get("status") == "ok" and "op" in rec:
            out[rec["case_id"]] = rec
    return out


def compare(a: Path, b: Path) -> dict:
    first, second = _cases(a), _cases(b)
    ratios = defaultdict(list)
    for case in first.keys() & second.keys():
        ratios[first[case]["op"]].append(second[case]["measured_s"] / first[case]["measured_s"])
    return {op: (len(r), *np.percentile(r, [50, 10, 90])) for op, r in sorted(ratios.items())}


REPEATS = ["eager-holdout16", "eager-holdout16b", "eager-holdout16-pinned", "eager-holdout16c",
           "eager-holdout16-warm", "eager-holdout16-warm2"]


def repeats(paths: list[Path]) -> None:
    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.calibration.validate import predicted, stats
    from rooflinesim.hardware import load_spec

    runs = [_cases(p) for p in paths]
    common = sorted(set.intersection(*(set(r) for r in runs)))
    spec = load_spec("h200-sxm")
    medians, floor = [], defaultdict(list)
    for case in common:
        times = np.array([r[case]["measured_s"] for r in runs])
        for i, t in enumerate(times):
            floor[runs[0][case]["op"]].append(t / np.median(np.delete(times, i)) - 1)
        medians.append({**runs[0][case], "measured_s": float(np.median(times)), "hardware": "h200-sxm"})
    pred = predicted(medians, spec, resolve_profile(spec, None))
    model = defaultdict(list)
    for rec, p in zip(medians, pred):
        if np.isfinite(p):
            model[rec["op"]].append(p / rec["measured_s"] - 1)
    print(f"{len(common)} cases in all {len(runs)} runs")
    print("| op | cases | one run vs the others' median: median / p90 | profile vs the median of runs: median / p90 |")
    print("|---|---|---|---|")
    for op in sorted(floor):
        f, m = stats(floor[op]), stats(model[op]) if model[op] else None
        right = f"{100 * m['median_ape']:.1f}% / {100 * m['p90_ape']:.1f}%" if m else "-"
        print(f"| {op} | {m['n'] if m else 0} | {100 * f['median_ape']:.1f}% / {100 * f['p90_ape']:.1f}% | {right} |")


def main(argv) -> None:
    if argv[:1] == ["--repeats"]:
        return repeats([Path(a) for a in argv[1:]] or [DATA / f"{n}.jsonl" for n in REPEATS])
    pairs = ([(Path(a), Path(b)) for a, b in zip(argv[::2], argv[1::2])] if argv
             else [(DATA / f"{a}.jsonl", DATA / f"{b}.jsonl") for a, b in PAIRS])
    print("| files | op | cases | median ratio | 10th | 90th |\n|---|---|---|---|---|---|")
    for a, b in pairs:
        for op, (n, med, lo, hi) in compare(a, b).items():
            print(f"| {a.stem} -> {b.stem} | {op} | {n} | {med:.2f} | {lo:.2f} | {hi:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
