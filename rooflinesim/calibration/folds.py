"""Cross-validation folds over shapes: every record of one shape falls in one fold, so a
shape is never predicted by a fit that saw it."""

from __future__ import annotations

import numpy as np


def shape_key(rec: dict) -> tuple:
    skip = {"dtype", "backend", "measured_s", "min_s", "max_s", "status", "case_id", "run_id",
            "suite", "graph", "calls", "sets", "replays", "kernels", "kernel_names", "_source",
            "hardware", "algbw_bytes_per_s", "busbw_bytes_per_s", "error"}
    return tuple(sorted((k, v) for k, v in rec.items()
                        if k not in skip and not isinstance(v, (list, dict))))


def folds_over_shapes(records, k: int, seed: int = 0):
    keys = sorted({shape_key(r) for r in records})
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(keys))
    fold_of = {keys[i]: j % k for j, i in enumerate(order)}
    return [fold_of[shape_key(r)] for r in records]
