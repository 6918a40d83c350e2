"""Predict measured records and report the error: per op, n, median and 90th-percentile
absolute percentage error, max, and bias (median signed error), with the worst cases.
Records that cannot be predicted are listed with the reason, never dropped silently."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import UserError
from .records import Measurements, Unpredictable, measured_on, to_op


@dataclass
class Report:
    gpu: str
    profile: str
    ops: dict = field(default_factory=dict)  # op -> stats
    skipped: list = field(default_factory=list)  # {"source", "op", "reason"}
    rows: list = field(default_factory=list)  # per record: op, label, measured, predicted, error
    notes: list = field(default_factory=list)  # how shared device names were read

    def as_dict(self, worst: int = 10) -> dict:
        return {"gpu": self.gpu, "profile": self.profile, "ops": self.ops,
                "skipped": self.skipped, "worst": self.worst(worst), "notes": self.notes}

    def worst(self, n: int = 10) -> list[dict]:
        return sorted(self.rows, key=lambda r: -abs(r["error"]))[:n]


def stats(errors) -> dict:
    e = np.asarray(errors, dtype=float)
    a = np.abs(e)
    return {"n": int(e.size), "median_ape": float(np.median(a)), "p90_ape": float(np.percentile(a, 90)),
            "max_ape": float(a.max()), "bias": float(np.median(e))}


def _group_key(rec: dict) -> tuple:
    """Records that differ only in numbers are predicted together, as arrays."""
    return tuple(sorted((k, v) for k, v in rec.items()
                        if isinstance(v, (str, bool)) and k not in _NOT_SHAPE))


def _stack(recs: list[dict]) -> dict:
    """One record whose numeric shape fields are arrays over ``recs``."""
    out = dict(recs[0])
    for k, v in recs[0].items():
        if k in _NOT_SHAPE or isinstance(v, (str, bool, list, dict)) or v is None:
            continue
        if all(k in r for r in recs):
            out[k] = np.array([r[k] for r in recs])
    return out


def is_eager(rec: dict) -> bool:
    """Whether a record timed eager launches from the host to a GPU (no CUDA graph): each
    record is priced in its mode. (The CPU harness's records, backend numpy, run where
    they are launched: there is no device to overlap.)"""
    return rec.get("graph", True) is False and rec.get("backend") != "numpy"


def predict_records(records: list[dict], spec, profile):
    """(record, predicted seconds or None, reason) for each record, in order.

    Records of one kind are predicted in one vectorized call; a group that fails is
    retried record by record so that each bad record gets its own reason. Where each
    record was measured is not checked here (``records.measured_on`` does that)."""
    from ..predict import predict

    result: list = [None] * len(records)
    groups: dict[tuple, list[int]] = {}
    for i, rec in enumerate(records):
        groups.setdefault(_group_key(rec), []).append(i)
    for idx in groups.values():
        recs = [records[i] for i in idx]
        try:
            lat = np.broadcast_to(np.asarray(predict(to_op(_stack(recs)), spec, profile,
                                                     eager=is_eager(recs[0])).latency_s,
                                             dtype=float), (len(idx),))
            for i, t in zip(idx, lat):
                result[i] = (records[i], float(t), "")
            continue
        except (Unpredictable, UserError):
            pass
        for i in idx:
            try:
                t = float(predict(to_op(records[i]), spec, profile, eager=is_eager(records[i])).latency_s)
                result[i] = (records[i], t, "")
            except (Unpredictable, UserError) as e:
                result[i] = (records[i], None, str(e).split("; ")[0][:160])
    return result


def predicted(records: list[dict], spec, profile) -> np.ndarray:
    """The predicted seconds of each record (NaN where it cannot be predicted)."""
    return np.array([np.nan if p is None else p for _, p, _ in predict_records(records, spec, profile)])


def validate(meas: Measurements, spec, profile, profile_name: str, by: str | None = None) -> Report:
    """``by``: a record field (mode, backend, dtype, ...) that splits each op's statistics."""
    mine, elsewhere, notes = measured_on(meas, spec)
    rep = Report(gpu=spec.name, profile=profile_name, skipped=elsewhere, notes=notes)
    by_op: dict[str, list[float]] = {}
    for rec, pred, reason in predict_records(mine, spec, profile):
        if pred is None:
            rep.skipped.append({"source": rec.get("_source"), "op": rec["op"], "reason": reason})
            continue
        err = pred / rec["measured_s"] - 1
        key = rec["op"] if by is None or by not in rec else f"{rec['op']}/{rec[by]}"
        by_op.setdefault(key, []).append(err)
        rep.rows.append({"op": rec["op"], "case": _case(rec), "measured_s": rec["measured_s"],
                         "predicted_s": pred, "error": err, "source": rec.get("_source")})
    for rec in meas.failed:
        rep.skipped.append({"source": rec.get("_source"), "op": rec["op"],
                            "reason": "failed measurement: "
                            + str(rec.get("error", "no reason given")).split(" | ")[0][:160]})
    rep.ops = {op: stats(errs) for op, errs in sorted(by_op.items())}
    return rep


def reasons(skipped: list[dict], n: int = 2) -> str:
    """The commonest reasons records were skipped, with their counts, as one clause."""
    count: dict[str, int] = {}
    for s in skipped:
        count[s["reason"]] = count.get(s["reason"], 0) + 1
    top = sorted(count.items(), key=lambda x: -x[1])
    text = "; ".join(f"{r} ({c} record{'s' if c > 1 else ''})" for r, c in top[:n])
    return text + (f"; and {len(top) - n} other reasons" if len(top) > n else "")


_NOT_SHAPE = {"measured_s", "min_s", "max_s", "status", "case_id", "run_id", "suite", "calls",
              "sets", "replays", "kernels", "kernel_names", "_source", "wall_s", "graph_error",
              "algbw_bytes_per_s", "busbw_bytes_per_s", "error", "hardware"}
_SKIP = {"op", "measured_s", "min_s", "max_s", "hardware", "graph", "status", "case_id", "run_id",
         "suite", "calls", "sets", "replays", "kernels", "kernel_names", "_source",
         "algbw_bytes_per_s", "busbw_bytes_per_s"}


def _case(rec: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in rec.items() if k not in _SKIP and not isinstance(v, (list, dict)))
