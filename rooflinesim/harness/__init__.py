"""Measurement harness: times real kernels on a GPU (or a CPU) and writes JSON Lines.

Imports only the standard library, torch and numpy, so it runs on a bare GPU machine:
``python -m rooflinesim.harness run --suite quick``.

Method
------
- **Warm-up, then CUDA events.** Each case first runs a few calls on a side stream
  (as graph capture requires), then a quick eager estimate of one call.
- **CUDA graphs** (default): ``calls`` invocations of the op are captured into one
  ``torch.cuda.CUDAGraph`` and whole replays are timed with events; per call =
  replay time / calls. ``calls`` is chosen from the eager estimate so that one replay
  lasts >= ~2 ms (at most 256, at least 1). Eager mode (``--mode eager``) times a
  Python loop of the same launches with events in the same way. If capture is
  refused, the case is timed eagerly and recorded with ``graph: false`` and
  ``graph_error``.
- **Rotated inputs, cold L2.** ``sets`` independent input sets are allocated so that
  together they span >= 4x the L2 (``L2_cache_size`` of the device; at most 64 sets
  and 16 GiB), and call i uses set i % sets, inside the graph too, so the L2 does not
  flatter the numbers (in inference the weights come from HBM). Outputs are not kept:
  the graph pool reuses their memory.
- **Random normal inputs**, never zeros (zeros run faster than real data); fp8 inputs
  are drawn in bf16 and cast (|x| < 6, inside e4m3's range); weights are scaled by
  1/sqrt(fan_in).
- **Replays.** Three warm replays, then >= 15 timed replays and >= ~0.1 s in all (at
  most 100). A record holds the median per-call time ``measured_s``, ``min_s``,
  ``max_s``, and ``calls``, ``sets``, ``replays``.
- **Kernel count.** One eager call under ``torch.profiler`` gives ``kernels`` (GPU
  kernels launched per call; memcpy/memset only for the copy op) and
  ``kernel_names`` (distinct names, cut to 120 characters). Metadata, never fatal.
- **Collectives** run in one process per GPU (NCCL, ``torch.multiprocessing``), with
  the same timing on every rank (graph capture of the collective, else eager); the
  record holds the max over ranks of the per-rank median, with ``algbw_bytes_per_s``
  and ``busbw_bytes_per_s`` by the nccl-tests conventions. NVLink multicast stays off.
- **Provenance** is written once per run as a header line ``{"run": {...}}`` (device,
  clocks from nvidia-smi, driver, torch / CUDA / cuDNN / NCCL versions, command line);
  every record carries the ``run_id``.
- **Records are appended and flushed** one by one. A re-run with the same ``--out``
  skips every case whose ``case_id`` (op, dtype, backend, timing mode, shape) is in
  the file, failed ones too unless ``--retry-failed``. A case that fails (out of
  memory, unsupported shape or backend, any exception) becomes
  ``{"status": "failed", "error": "<one line>", ...}`` and the run goes on.
- **Isolation** (default on CUDA): the loop runs in a worker process; if it crashes,
  or a case outlives ``--case-timeout``, the case is recorded as failed and a new
  worker resumes from the file.
- **CPU** (``--device cpu``): numpy (or torch on the CPU) with the host clock, the
  same replay rules, and rotation over buffers totalling >= 64 MiB.
"""
