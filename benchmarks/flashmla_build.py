"""Build FlashMLA's Hopper decode kernel as a PyTorch extension, for the harness's
``flashmla`` attention cases:

    python benchmarks/flashmla_build.py --src FLASHMLA_DIR --out BUILD_DIR

FLASHMLA_DIR is a checkout of deepseek-ai/FlashMLA at commit 9edee0c (2025-04-29: the
kernel of its 2025-04-22 performance update, the one vLLM and SGLang vendored through
2025) with NVIDIA/cutlass's ``include/`` at the submodule's commit e94e888 (CUTLASS 3.9) in
``csrc/cutlass/include``, which is what

    git clone https://github.com/deepseek-ai/FlashMLA && git -C FlashMLA checkout 9edee0c
    git -C FlashMLA submodule update --init csrc/cutlass

gives (the GPU's machine needs only the files: copy the directory there). The flags are FlashMLA's setup.py's (sm_90a, fast math, C++17).
BUILD_DIR then holds ``flash_mla_cuda`` (the compiled module) and FlashMLA's ``flash_mla``
Python package: put it on PYTHONPATH for ``python -m rooflinesim.harness``. Needs nvcc,
ninja and a Hopper GPU's toolchain (sm_90a); a few minutes on 16 cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

SOURCES = ("csrc/flash_api.cpp", "csrc/kernels/get_mla_metadata.cu", "csrc/kernels/mla_combine.cu",
           "csrc/kernels/splitkv_mla.cu")
NVCC_FLAGS = ["-O3", "-std=c++17", "-DNDEBUG", "-D_USE_MATH_DEFINES", "-Wno-deprecated-declarations",
              "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__",
              "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "--expt-relaxed-constexpr", "--expt-extended-lambda",
              "--use_fast_math", "-gencode", "arch=compute_90a,code=sm_90a", "--threads", "8"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    src, out = args.src.resolve(), args.out.resolve()
    missing = [s for s in SOURCES if not (src / s).is_file()]
    if missing or not (src / "csrc/cutlass/include/cute").is_dir():
        print(f"error: {src} is not a FlashMLA checkout with CUTLASS's include/ in csrc/cutlass "
              f"(missing: {', '.join(missing) or 'csrc/cutlass/include/cute'})", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
    from torch.utils.cpp_extension import load

    from torch.utils.cpp_extension import CUDA_HOME

    # (CUDA 13 keeps libcu++'s headers, which CUTLASS includes from host code too, under include/cccl)
    cccl = [str(p) for p in (Path(CUDA_HOME or "/usr/local/cuda") / "include" / "cccl",) if p.is_dir()]
    t0 = time.perf_counter()
    load(name="flash_mla_cuda", sources=[str(src / s) for s in SOURCES],
         extra_cflags=["-O3", "-std=c++17", "-DNDEBUG", "-Wno-deprecated-declarations"],
         extra_cuda_cflags=NVCC_FLAGS, extra_include_paths=[str(src / "csrc"), str(src / "csrc/cutlass/include"), *cccl],
         build_directory=str(out), verbose=False)
    shutil.copytree(src / "flash_mla", out / "flash_mla", dirs_exist_ok=True)
    print(f"built flash_mla_cuda in {time.perf_counter() - t0:.0f} s into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
