"""Measurement records (JSON Lines written by the harness): reading them and turning each
into the op the cost models know. Unknown fields are kept and ignored."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Unpredictable, UserError
from ..files import exists

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall")


# The largest measurement file read at once (the project's own are under a megabyte each).
MAX_FILE_BYTES = 256 * 1024 * 1024
# Record fields of a known type: text (or null), true/false (or null), numbers.
_TEXT = ("status", "dtype", "backend", "hardware", "run_id", "impl", "routing", "mode", "case_id")
_FLAGS = ("graph", "causal")
_NOT_NUMBERS = ("causal", "routing", "mode", "input")
_LARGEST = 1e18  # no shape or byte count of one kernel comes near


@dataclass
class Measurements:
    records: list[dict] = field(default_factory=list)  # status ok, with measured_s
    failed: list[dict] = field(default_factory=list)
    runs: dict[str, dict] = field(default_factory=dict)  # run_id -> provenance header
    warnings: list[str] = field(default_factory=list)  # e.g. a torn last line skipped

    def of(self, op: str) -> list[dict]:
        return [r for r in self.records if r["op"] == op]


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) <= _LARGEST


def _check_fields(rec: dict, where: str) -> None:
    """One sentence naming ``where`` for a field of the wrong type: the models read
    these fields, and a list or a string where a number belongs is not a measurement."""
    from ..files import shorten
    from ..harness.records import SHAPE_FIELDS

    def bad(key, what):
        return UserError(f"{where}: field '{key}' must be {what}, got {shorten(rec[key])}")

    if not isinstance(rec["op"], str):
        raise bad("op", "the name of an op")
    for key in _TEXT:
        if rec.get(key) is not None and not isinstance(rec[key], str):
            raise bad(key, "a string")
    for key in _FLAGS:
        if rec.get(key) is not None and not isinstance(rec[key], bool) and rec[key] not in (0, 1):
            raise bad(key, "true or false")
    if rec.get("total_memory_bytes") is not None and not _is_number(rec["total_memory_bytes"]):
        raise bad("total_memory_bytes", "a number of bytes")
    for key in SHAPE_FIELDS.get(rec["op"], ()):
        if key in rec and key not in _NOT_NUMBERS and not _is_number(rec[key]):
            raise bad(key, f"a number (at most {_LARGEST:.0e})")


def _check_run(run, where: str) -> None:
    from ..files import shorten

    if not isinstance(run, dict):
        raise UserError(f"{where}: a run header must be an object, got {shorten(run)}")
    if run.get("run_id") is not None and not isinstance(run["run_id"], str):
        raise UserError(f"{where}: the run header's run_id must be a string, got {shorten(run['run_id'])}")
    memory = run.get("total_memory_bytes")
    if memory is not None and not _is_number(memory):
        raise UserError(f"{where}: the run header's total_memory_bytes must be a number, got "
                        f"{shorten(memory)}")


def load(paths) -> Measurements:
    """The records of measurement files (JSON Lines). A problem with a record is one
    sentence naming file and line; a last line cut short (no newline, not valid JSON: a
    write that was interrupted) is skipped with a warning."""
    import json

    from ..files import read_text

    out = Measurements()
    for path in paths:
        p = Path(path)
        if os.fspath(path).strip() and not exists(p):
            raise UserError(f"measurement file '{p}' does not exist")
        text = read_text(path, "measurement", MAX_FILE_BYTES)
        lines = text.splitlines()
        read_one = False
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{p.name}, line {lineno}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                if read_one and lineno == len(lines) and not text.endswith(("\n", "\r")):
                    out.warnings.append(f"{p.name}: skipped line {lineno}, the last, which was cut "
                                        "short (a write that did not finish)")
                    continue
                raise UserError(f"{where}: not valid JSON ({e.msg})") from None
            except RecursionError:
                raise UserError(f"{where}: the JSON is nested too deeply") from None
            if not isinstance(rec, dict):
                raise UserError(f"{where}: a record must be a JSON object")
            read_one = True
            if "run" in rec and "op" not in rec:
                run = rec["run"]
                _check_run(run, where)
                out.runs[run.get("run_id") or f"{p.name}:{lineno}"] = run
                continue
            if "op" not in rec:
                raise UserError(f"{where}: a record needs an 'op' field")
            _check_fields(rec, where)
            rec["_source"] = f"{p.name}:{lineno}"
            if rec["op"] == "hf_forward" and rec.get("mode") == "trace":
                out.records += trace_kernels(rec, where)  # (the trace's kernels that a fit uses)
                continue
            if rec.get("status", "ok") != "ok":
                out.failed.append(rec)
                continue
            t = rec.get("measured_s")
            if not _is_number(t) or t <= 0:
                raise UserError(f"{where}: measured_s must be a positive number of seconds")
            out.records.append(rec)
    return out


def trace_kernels(rec: dict, where: str) -> list[dict]:
    """The copies of an op-by-op trace of transformers' forward (benchmarks/hf_forward.py
    --trace) that no harness suite times, as copy records, each kernel's duration in the
    profiled forward its measured time: PyTorch's non-vectorized elementwise path
    (``layout`` strided) in repeat_kv's copies of an expanded [b, kv_heads, repeats, keys,
    head_dim] view, RMSNorm's casts up to fp32 (``layout`` cast) and a sliding cache's
    ``torch.roll`` (``layout`` roll)."""
    if rec.get("status", "ok") != "ok":
        return []
    ops = rec.get("ops")
    if not isinstance(ops, list):
        raise UserError(f"{where}: a trace record needs its 'ops' list")
    keep = {k: rec[k] for k in ("hardware", "torch", "cuda", "sm_count", "total_memory_bytes") if k in rec}
    out = []
    for i, o in enumerate(ops):
        try:
            name, shapes, kernels = o["op"], o["shapes"], o["kernels"]
            dtypes = o.get("dtypes") or []
            if name not in ("aten::copy_", "aten::roll") or not shapes:
                continue
            first = shapes[0]
            layout, per_element = None, 2
            if name == "aten::copy_" and len(first) == 5 and dtypes[:2] == ["c10::BFloat16"] * 2:
                layout = "strided"  # repeat_kv: an expanded view copied out
            elif name == "aten::copy_" and dtypes[:2] == ["float", "c10::BFloat16"]:
                layout, per_element = "cast", 3  # a cast up to fp32: reads 2 bytes, writes 4
            elif name == "aten::roll" and len(first) >= 3:
                layout = "roll"
            if layout is None or len(kernels) != 1:
                continue
            elements = 1
            for n in first:
                elements *= int(n)
            seconds = float(kernels[0][1]) / 1e6
        except (KeyError, IndexError, TypeError, ValueError):
            raise UserError(f"{where}: op {i} of the trace is not an op, its shapes and kernels") from None
        if seconds > 0 and elements > 0:
            out.append({**keep, "op": "copy", "layout": layout, "bytes": per_element * elements, "graph": True,
                        "impl": "kernel", "mode": "profiled", "measured_s": seconds,
                        "_source": f"{rec.get('_source', where)} op {i}"})
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
    from ..ops.gemm import BLOCK_GEMM
    from ..ops.memory import COPY_LAYOUTS

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
        if op == "grouped_gemm":
            from ..ops.moe import GroupedGemm

            r, n, k, e = _need(rec, "rows", "n", "k", "experts")
            backend = rec.get("backend", "")
            return GroupedGemm(rows=r, n=n, k=k, experts=e, dtype=rec.get("dtype", "bf16"), name="grouped_gemm",
                               backend="" if backend == "grouped_mm" else backend)
        if op == "block_gemm":
            m, n, k = _need(rec, "m", "n", "k")
            return Gemm(m=m, n=n, k=k, dtype="fp8", backend=rec.get("backend", BLOCK_GEMM))
        if op == "fused_moe":
            from ..ops.moe import BLOCK_MOE, FUSED_MOE, GroupedGemm

            t, topk, n, k = _need(rec, "tokens", "topk", "n", "k")
            # (the experts that drew rows and their 128-row tiles, as the record counts them)
            dtype = rec.get("dtype", "fp8")
            return GroupedGemm(rows=t * topk, n=n, k=k, experts=rec.get("experts_touched", rec.get("experts", 1)),
                               row_tiles=rec.get("row_tiles_128"), dtype=dtype, name="fused_moe",
                               backend=rec.get("backend", BLOCK_MOE if dtype == "fp8" else FUSED_MOE))
        if op in COLLECTIVES:
            nbytes, ws = _need(rec, "bytes", "world_size")
            return Collective(kind=op, bytes=nbytes, world_size=ws, dtype=rec.get("dtype", "bf16"))
        if op == "copy":
            (nbytes,) = _need(rec, "bytes")
            layout = rec.get("layout", "contiguous")
            if layout not in COPY_LAYOUTS:
                raise Unpredictable(f"unknown copy layout '{layout}'")
            return Copy(bytes=nbytes, graph_memcpy=is_graph_memcpy(rec), layout=layout)
        if op in ("rmsnorm", "add_rmsnorm"):
            t, h = _need(rec, "tokens", "hidden")
            return Norm(tokens=t, hidden=h, dtype=rec.get("dtype", "bf16"), kind=op)
        if op == "decoder_layer":
            from ..models.layer import decoder_layer_from_record

            return decoder_layer_from_record(rec)
    except UserError as e:
        raise Unpredictable(str(e)) from None
    raise Unpredictable(f"no model for op '{op}'")

