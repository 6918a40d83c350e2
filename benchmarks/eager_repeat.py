"""How far the same cases measured in two processes differ: per op, the ratio of the
second measurement to the first over the cases both files hold (median, 10th and 90th
percentiles). Eager launches are paced by the host, and the host time of a call differs
from process to process; this is the floor no model of it can beat.

    python benchmarks/eager_repeat.py A.jsonl B.jsonl [A2.jsonl B2.jsonl ...]

With no arguments it compares the H200 eager files measured twice: the same suites with
the harness before and after it emptied its allocator between cases, and the thirteenth
held-out set before and after that change.
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


def main(argv) -> None:
    pairs = ([(Path(a), Path(b)) for a, b in zip(argv[::2], argv[1::2])] if argv
             else [(DATA / f"{a}.jsonl", DATA / f"{b}.jsonl") for a, b in PAIRS])
    print("| files | op | cases | median ratio | 10th | 90th |\n|---|---|---|---|---|---|")
    for a, b in pairs:
        for op, (n, med, lo, hi) in compare(a, b).items():
            print(f"| {a.stem} -> {b.stem} | {op} | {n} | {med:.2f} | {lo:.2f} | {hi:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
