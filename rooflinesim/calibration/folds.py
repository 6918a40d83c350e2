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


def held_out(records, folds: int, fit, predict) -> np.ndarray:
    """Each record's prediction by a fit that never saw its shape: ``fit(train)`` gives
    what ``predict(test, fitted)`` predicts with (NaN where a fold leaves fewer than 3
    records to fit)."""
    fold = folds_over_shapes(records, min(folds, len({shape_key(r) for r in records})))
    held = np.full(len(records), np.nan)
    for f in sorted(set(fold)):
        train = [r for r, g in zip(records, fold) if g != f]
        test = [i for i, g in enumerate(fold) if g == f]
        if len(train) < 3:
            continue
        held[test] = predict([records[i] for i in test], fit(train))
    return held
