"""Predict measured records and report the error: per op, n, median and 90th-percentile
absolute percentage error, max, and bias (median signed error), with the worst cases.
Records that cannot be predicted are listed with the reason, never dropped silently."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import UserError
from .records import Measurements, Unpredictable, to_op


@dataclass
class Report:
    gpu: str
    profile: str
    ops: dict = field(default_factory=dict)  # op -> stats
    skipped: list = field(default_factory=list)  # {"source", "op", "reason"}
    rows: list = field(default_factory=list)  # per record: op, label, measured, predicted, error

    def as_dict(self, worst: int = 10) -> dict:
        return {"gpu": self.gpu, "profile": self.profile, "ops": self.ops,
                "skipped": self.skipped, "worst": self.worst(worst)}

    def worst(self, n: int = 10) -> list[dict]:
        return sorted(self.rows, key=lambda r: -abs(r["error"]))[:n]


def stats(errors) -> dict:
    e = np.asarray(errors, dtype=float)
    a = np.abs(e)
    return {"n": int(e.size), "median_ape": float(np.median(a)), "p90_ape": float(np.percentile(a, 90)),
            "max_ape": float(a.max()), "bias": float(np.median(e))}


def predict_records(records: list[dict], spec, profile):
    """(record, predicted seconds or None, reason) for each record."""
    from ..timing import predict

    out = []
    for rec in records:
        hw = rec.get("hardware")
        if hw and hw not in (spec.name, *getattr(spec, "aliases", [])):
            out.append((rec, None, f"measured on {hw}, not {spec.name}"))
            continue
        try:
            op = to_op(rec)
            t = float(predict(op, spec, profile).latency_s)
        except (Unpredictable, UserError) as e:
            out.append((rec, None, str(e)))
            continue
        out.append((rec, t, ""))
    return out


def validate(meas: Measurements, spec, profile, profile_name: str) -> Report:
    rep = Report(gpu=spec.name, profile=profile_name)
    by_op: dict[str, list[float]] = {}
    for rec, pred, reason in predict_records(meas.records, spec, profile):
        if pred is None:
            rep.skipped.append({"source": rec.get("_source"), "op": rec["op"], "reason": reason})
            continue
        err = pred / rec["measured_s"] - 1
        by_op.setdefault(rec["op"], []).append(err)
        rep.rows.append({"op": rec["op"], "case": _case(rec), "measured_s": rec["measured_s"],
                         "predicted_s": pred, "error": err, "source": rec.get("_source")})
    for rec in meas.failed:
        rep.skipped.append({"source": rec.get("_source"), "op": rec["op"],
                            "reason": f"failed measurement: {rec.get('error', 'no reason given')}"})
    rep.ops = {op: stats(errs) for op, errs in sorted(by_op.items())}
    return rep


_SKIP = {"op", "measured_s", "min_s", "max_s", "hardware", "graph", "status", "case_id", "run_id",
         "suite", "calls", "sets", "replays", "kernels", "kernel_names", "_source",
         "algbw_bytes_per_s", "busbw_bytes_per_s"}


def _case(rec: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in rec.items() if k not in _SKIP and not isinstance(v, (list, dict)))
