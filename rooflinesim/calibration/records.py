"""Measurement records (JSON Lines written by the harness): reading them and turning each
into the op the cost models know. Unknown fields are kept and ignored."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall")


@dataclass
class Measurements:
    records: list[dict] = field(default_factory=list)  # status ok, with measured_s
    failed: list[dict] = field(default_factory=list)
    runs: dict[str, dict] = field(default_factory=dict)  # run_id -> provenance header

    def of(self, op: str) -> list[dict]:
        return [r for r in self.records if r["op"] == op]


def load(paths) -> Measurements:
    out = Measurements()
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise UserError(f"measurement file '{p}' does not exist")
        for lineno, line in enumerate(p.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{p.name}, line {lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise UserError(f"{p.name}, line {lineno}: a record must be a JSON object")
            if "run" in rec and "op" not in rec:
                run = rec["run"]
                out.runs[run.get("run_id", f"{p.name}:{lineno}")] = run
                continue
            if "op" not in rec:
                raise UserError(f"{p.name}, line {lineno}: a record needs an 'op' field")
            rec["_source"] = f"{p.name}:{lineno}"
            if rec.get("status", "ok") != "ok":
                out.failed.append(rec)
                continue
            t = rec.get("measured_s")
            if not isinstance(t, (int, float)) or t <= 0:
                raise UserError(f"{p.name}, line {lineno}: measured_s must be a positive number of seconds")
            out.records.append(rec)
    return out


def is_graph_memcpy(rec: dict) -> bool:
    """A copy record that timed a contiguous copy_ in a CUDA graph: a memcpy node (the
    harness's copies before it timed them as kernels, ``impl`` "kernel")."""
    return (rec.get("op") == "copy" and rec.get("graph", True) is not False
            and rec.get("impl", "memcpy") == "memcpy" and rec.get("backend") != "numpy")


def measured_on(meas: Measurements, spec) -> tuple[list[dict], list[dict], list[str]]:
    """The records measured on ``spec`` (or naming no GPU); the others, as skipped entries
    {source, op, reason}; and notes on device names that only memory size told apart.

    A record's ``hardware`` is a spec name, an alias or the device name torch reports
    (rooflinesim.hardware.identify); the memory size is the record's own
    ``total_memory_bytes`` or that of its run header."""
    from ..hardware import identify

    mine, others, notes = [], [], []
    seen: dict[tuple, tuple] = {}
    for rec in meas.records:
        name = rec.get("hardware")
        if name is None:
            mine.append(rec)
            continue
        memory = rec.get("total_memory_bytes") or meas.runs.get(rec.get("run_id"), {}).get(
            "total_memory_bytes")
        if (name, memory) not in seen:
            seen[name, memory] = identify(str(name), spec, memory)
            if seen[name, memory][0] is not None and seen[name, memory][1]:
                notes.append(seen[name, memory][1])
        found, why = seen[name, memory]
        if found == spec.name:
            mine.append(rec)
            continue
        what = name if found in (None, name) else f"{name} ({found})"
        others.append({"source": rec.get("_source"), "op": rec["op"],
                       "reason": why if found is None and why else f"measured on {what}, not {spec.name}"})
    return mine, others, notes


class Unpredictable(Exception):
    """A record the models cannot predict; the message says why."""


def _need(rec, *names):
    missing = [n for n in names if n not in rec]
    if missing:
        raise Unpredictable(f"missing field(s) {', '.join(missing)}")
    return [rec[n] for n in names]


def _flag(v):
    import numpy as np

    return bool(v) if np.ndim(v) == 0 else np.asarray(v, dtype=bool)


def to_op(rec: dict):
    """The op a record measured."""
    from ..attention_kernels import from_record
    from ..ops import Attention, Collective, Copy, Gemm, MoE, Norm

    op = rec["op"]
    try:
        if op == "gemm":
            m, n, k = _need(rec, "m", "n", "k")
            return Gemm(m=m, n=n, k=k, batch=rec.get("batch", 1), dtype=rec.get("dtype", "bf16"))
        if op == "attention":
            b, h, sq, skv, d = _need(rec, "batch", "heads", "seq_q", "seq_kv", "head_dim")
            return Attention(batch=b, heads=h, kv_heads=rec.get("kv_heads", h), seq_q=sq, seq_kv=skv,
                             head_dim=d, causal=_flag(rec.get("causal", False)),
                             dtype=rec.get("dtype", "bf16"), **from_record(rec.get("backend")))
        if op == "moe":
            t, h, f, e, k = _need(rec, "tokens", "hidden", "ffn", "experts", "top_k")
            routing = {"random": "uniform", "balanced": "balanced"}.get(rec.get("routing", "random"))
            if routing is None:
                raise Unpredictable(f"unknown routing '{rec.get('routing')}'")
            return MoE(tokens=t, hidden=h, ffn=f, experts=e, top_k=k, routing=routing,
                       dtype=rec.get("dtype", "bf16"))
        if op in COLLECTIVES:
            nbytes, ws = _need(rec, "bytes", "world_size")
            return Collective(kind=op, bytes=nbytes, world_size=ws, dtype=rec.get("dtype", "bf16"))
        if op == "copy":
            (nbytes,) = _need(rec, "bytes")
            return Copy(bytes=nbytes, graph_memcpy=is_graph_memcpy(rec))
        if op == "rmsnorm":
            t, h = _need(rec, "tokens", "hidden")
            return Norm(tokens=t, hidden=h, dtype=rec.get("dtype", "bf16"))
        if op == "decoder_layer":
            from ..models.layer import decoder_layer_from_record

            return decoder_layer_from_record(rec)
    except UserError as e:
        raise Unpredictable(str(e)) from None
    raise Unpredictable(f"no model for op '{op}'")

