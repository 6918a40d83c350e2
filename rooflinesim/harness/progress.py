"""Progress of a harness run: a tqdm bar on a terminal, else a plain line per case."""

from __future__ import annotations

import sys
import time

from . import records


def describe(case: dict) -> str:
    """A case on one line: op, dtype, shape, backend."""
    shape = " ".join(f"{f}={case[f]}" for f in records.SHAPE_FIELDS.get(case["op"], ())
                     if f in case and f != "world_size")
    return f"{case['op']} {case.get('dtype', '')} {shape} [{case.get('backend', '')}]"


class Progress:
    """A tqdm bar on a terminal; otherwise one plain line per finished case."""

    def __init__(self, total: int, quiet: bool = False, start: int = 0, plain: bool = False):
        self.total, self.count, self.quiet = total, start, quiet
        self.t0 = time.time()
        self.bar = None
        if not quiet and not plain and total and sys.stderr.isatty():
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, initial=start, file=sys.stderr, unit="case",
                                dynamic_ncols=True)
            except Exception:
                self.bar = None

    def begin(self, label: str) -> None:
        if self.bar is not None:
            self.bar.set_description_str(label[:70])

    def end(self, rec: dict) -> None:
        self.count += 1
        if self.bar is not None:
            self.bar.update(1)
            return
        if self.quiet:
            return
        if rec.get("status") == "ok":
            result = f"{rec['measured_s'] * 1e6:.2f} us"
        else:
            result = "FAILED " + str(rec.get("error", ""))[:160]
        width = len(str(self.total))
        print(f"[{self.count:>{width}}/{self.total}] {describe(rec)} {result} "
              f"({time.time() - self.t0:.1f} s)", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
