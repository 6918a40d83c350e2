"""GPU op builders: from a case dict to ``fn(i)``, which runs call i on input set i % sets.

Each op has ``set_bytes(case)``, the bytes of one independent input set (what the
rotation spreads over the L2), and ``build(torch, case, device, sets)``, which
allocates the sets with random normal data (never zeros) and returns a ``Built``.
Weights are scaled by 1/sqrt(fan_in) as at initialisation, so activations stay in
range. Builders raise on anything unsupported; the runner turns that into a failure
record.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable

from .suites import ELEMENT_BYTES, MLA_KEY_DIM

ATTENTION_BACKEND_ENUMS = {
    "sdpa-flash": "FLASH_ATTENTION",
    "sdpa-cudnn": "CUDNN_ATTENTION",
    "sdpa-efficient": "EFFICIENT_ATTENTION",
    "sdpa-math": "MATH",
}
SDPA_BACKEND_NAMES = {v: k for k, v in ATTENTION_BACKEND_ENUMS.items()}
RMS_EPS = 1e-6


@dataclass
class Built:
    """What the runner times: fn(i), plus how to describe and run it."""

    fn: Callable[[int], object]
    backend: str | None = None  # the backend actually used, when it refines the case's
    context: object | None = None  # a context manager held around warm-up, timing, profiling
    extra: dict = field(default_factory=dict)  # additional record fields
    include_copies: bool = False  # memcpy/memset kernels are the op itself (copy)


def torch_dtype(torch, name):
    return {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
            "fp16": torch.float16, "fp8": torch.float8_e4m3fn, "uint8": torch.uint8,
            "fp64": torch.float64}[name]


def randn(torch, shape, dtype_name, device, scale=1.0):
    """Random normal data; fp8 is drawn in bf16 and cast (|x| < 6, far inside e4m3's 448)."""
    if dtype_name == "fp8":
        t = torch.randn(shape, device=device, dtype=torch.bfloat16)
        if scale != 1.0:
            t.mul_(scale)
        return t.to(torch.float8_e4m3fn)
    t = torch.randn(shape, device=device, dtype=torch_dtype(torch, dtype_name))
    if scale != 1.0:
        t.mul_(scale)
    return t


# ----------------------------------------------------------------------------- GEMM

def gemm_set_bytes(c):
    return c["batch"] * (c["m"] * c["k"] + c["n"] * c["k"]) * ELEMENT_BYTES[c["dtype"]]


@contextlib.contextmanager
def tf32_matmul(torch, enabled: bool):
    """TF32 for cuBLAS float32 matmuls on or off for the block, then restored."""
    matmul = torch.backends.cuda.matmul
    try:
        old = bool(matmul.allow_tf32)
    except RuntimeError:  # torch refuses to read it after mixed legacy/new API use
        old = False
    # The legacy switch also sets the newer fp32_precision in torch >= 2.9; reading the
    # new one back checks that the switch took effect.
    matmul.allow_tf32 = enabled
    precision = getattr(matmul, "fp32_precision", None)
    if isinstance(precision, str) and (precision == "tf32") != enabled:
        raise RuntimeError(f"TF32 switch did not take effect (fp32_precision={precision})")
    try:
        yield
    finally:
        matmul.allow_tf32 = old


def build_gemm(torch, c, device, sets):
    b, m, n, k, dt = c["batch"], c["m"], c["n"], c["k"], c["dtype"]
    if min(b, m, n, k) < 1:
        raise ValueError(f"gemm needs positive sizes, got batch={b} m={m} n={n} k={k}")
    lead = (b,) if b > 1 else ()
    a = [randn(torch, lead + (m, k), dt, device) for _ in range(sets)]
    w = [randn(torch, lead + (n, k), dt, device) for _ in range(sets)]
    if dt == "fp8":
        if b != 1:
            raise ValueError("fp8 gemm is measured with batch 1 only")
        scale_a = torch.ones((), device=device, dtype=torch.float32)
        scale_b = torch.ones((), device=device, dtype=torch.float32)

        def fn(i):
            j = i % sets
            # _scaled_mm wants the second operand column-major: W^T of a row-major W.
            return torch._scaled_mm(a[j], w[j].t(), scale_a=scale_a, scale_b=scale_b,
                                    out_dtype=torch.bfloat16)
    elif b > 1:
        def fn(i):
            j = i % sets
            return torch.bmm(a[j], w[j].transpose(1, 2))
    else:
        def fn(i):
            j = i % sets
            return torch.mm(a[j], w[j].t())
    ctx = tf32_matmul(torch, dt == "tf32") if dt in ("fp32", "tf32") else None
    return Built(fn, context=ctx, extra={"layout": "tn"})


# ------------------------------------------------------------------------ attention

def attention_set_bytes(c):
    e = ELEMENT_BYTES[c["dtype"]]
    b, h, kv, sq, skv, d = (c[x] for x in ("batch", "heads", "kv_heads", "seq_q", "seq_kv",
                                           "head_dim"))
    return e * (b * h * sq * d + 2 * b * kv * skv * d)


def sdpa_backend_enum(torch, name):
    from torch.nn.attention import SDPBackend

    try:
        return getattr(SDPBackend, ATTENTION_BACKEND_ENUMS[name])
    except (KeyError, AttributeError):
        raise ValueError(f"unknown or unavailable attention backend '{name}'") from None


def build_attention(torch, c, device, sets):
    from torch.nn.attention import sdpa_kernel

    b, h, kv, sq, skv, d = (c[x] for x in ("batch", "heads", "kv_heads", "seq_q", "seq_kv",
                                           "head_dim"))
    if c["backend"] == "flashmla":
        return build_flashmla(torch, c, device, sets)
    if kv < 1 or h % kv:
        raise ValueError(f"heads={h} is not a multiple of kv_heads={kv}")
    if c["causal"] and sq != skv:
        raise ValueError("causal attention is measured with seq_q == seq_kv only")
    enum = sdpa_backend_enum(torch, c["backend"])
    dt = c["dtype"]
    q = [randn(torch, (b, h, sq, d), dt, device) for _ in range(sets)]
    k = [randn(torch, (b, kv, skv, d), dt, device) for _ in range(sets)]
    v = [randn(torch, (b, kv, skv, d), dt, device) for _ in range(sets)]
    kwargs = {"is_causal": bool(c["causal"])}
    if kv != h:
        kwargs["enable_gqa"] = True  # never expanded by hand: a refusal is a result
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def fn(i):
        j = i % sets
        return sdpa(q[j], k[j], v[j], **kwargs)
    return Built(fn, context=sdpa_kernel([enum]))


MLA_PAGE = 64  # FlashMLA's cache block (tokens)
MLA_VALUE_DIM = 512


def build_flashmla(torch, c, device, sets):
    """FlashMLA's decode (suites.mla_decode: ``heads`` is twice the query heads, ``head_dim``
    half the 576-wide latent key) over a paged cache whose blocks are scattered, as an
    engine's are; its scheduling metadata made once, as an engine makes it once a step for
    every layer. Checked on its first set against attention computed in float32 over the
    first sequences."""
    try:
        from flash_mla import flash_mla_with_kvcache, get_mla_metadata
    except ImportError:
        raise ValueError("the flashmla backend needs FlashMLA's extension on PYTHONPATH "
                         "(benchmarks/flashmla_build.py builds it)") from None
    b, h2, kv, sq, skv, d = (c[x] for x in ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim"))
    if kv != 1 or sq != 1 or h2 % 2 or 2 * d != MLA_KEY_DIM:
        raise ValueError(f"a flashmla case is one query token over one latent KV head of {MLA_KEY_DIM} "
                         f"(heads = 2 x query heads, head_dim = {MLA_KEY_DIM // 2})")
    hq, dk = h2 // 2, MLA_KEY_DIM
    pages = -(-skv // MLA_PAGE)
    lens = torch.full((b,), skv, dtype=torch.int32, device=device)
    meta, splits = get_mla_metadata(lens, hq, 1)
    data = []
    for _ in range(sets):
        cache = randn(torch, (b * pages, MLA_PAGE, 1, dk), "bf16", device)
        table = torch.randperm(b * pages, device=device).to(torch.int32).view(b, pages)
        data.append((randn(torch, (b, 1, hq, dk), "bf16", device), cache, table))

    def fn(i):
        q, cache, table = data[i % sets]
        return flash_mla_with_kvcache(q, cache, table, lens, MLA_VALUE_DIM, meta, splits, causal=True)[0]

    q, cache, table = data[0]
    out = fn(0)
    errs = []
    for i in range(min(b, 2)):
        keys = cache[table[i].long()].reshape(-1, dk)[:skv].float()
        p = torch.softmax(q[i, 0].float() @ keys.t() * dk ** -0.5, dim=-1)
        ref = p @ keys[:, :MLA_VALUE_DIM]
        errs.append(float((out[i, 0].float() - ref).norm() / ref.norm()))
    if not max(errs) < 2e-2:
        raise RuntimeError(f"FlashMLA disagrees with float32 attention at {c} (relative error {max(errs):.3g})")
    return Built(fn, extra={"query_heads": hq, "page_size": MLA_PAGE, "check_rel_error": max(errs),
                            "sm_parts": int(meta.shape[0])})


def sdpa_choice(torch, q, k, v, is_causal, enable_gqa):
    """Name of the backend SDPA's default dispatch picks for these inputs."""
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return "sdpa-default"
    try:
        if enable_gqa:
            idx = int(choose(q, k, v, None, 0.0, is_causal, enable_gqa=True))
        else:
            idx = int(choose(q, k, v, None, 0.0, is_causal))
        from torch.nn.attention import SDPBackend

        for name, member in SDPBackend.__members__.items():
            if int(member.value) == idx:
                return SDPA_BACKEND_NAMES.get(name, "sdpa-" + name.lower())
    except Exception:
        pass
    return "sdpa-default"


# ------------------------------------------------------------------------------ MoE

def moe_set_bytes(c):
    t, hd, f, e = c["tokens"], c["hidden"], c["ffn"], c["experts"]
    return 2 * (t * hd + e * hd + e * 2 * f * hd + e * hd * f)


def build_moe(torch, c, device, sets):
    grouped_mm = (getattr(torch, "_grouped_mm", None)
                  or getattr(torch.nn.functional, "grouped_mm", None))
    if grouped_mm is None:
        raise RuntimeError("torch._grouped_mm is not available in this torch")
    t, hd, f, e, top_k = (c[x] for x in ("tokens", "hidden", "ffn", "experts", "top_k"))
    if hd % 8 or f % 8:
        raise ValueError("grouped_mm needs hidden and ffn multiples of 8 (16-byte strides)")
    if not 1 <= top_k <= e or e >= 1024:
        raise ValueError(f"need 1 <= top_k <= experts < 1024, got top_k={top_k} experts={e}")
    if c["routing"] not in ("random", "balanced"):
        raise ValueError(f"unknown routing '{c['routing']}'")
    layers = [_moe_weights(torch, t, hd, f, e, device) for _ in range(sets)]
    ones = torch.ones(t * top_k, device=device, dtype=torch.int64)
    # Round-robin: pair p = token*top_k + slot goes to expert p % E, so each expert gets
    # the same count (+-1) and a token's top_k experts are distinct.
    balanced = (torch.arange(t * top_k, device=device) % e).view(t, top_k)
    silu = torch.nn.functional.silu

    def layer(x, w_router, w13_t, w2_t):
        logits = torch.mm(x, w_router.t())  # [T, E]
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        top_w, top_i = torch.topk(probs, top_k, dim=-1)
        if c["routing"] == "balanced":
            top_i = balanced
        top_w = top_w / top_w.sum(dim=-1, keepdim=True)
        flat = top_i.reshape(-1)
        order = torch.argsort(flat, stable=True)  # token-expert pairs sorted by expert
        # tokens per expert on the device, no host sync (graph-capturable)
        counts = torch.zeros(e, device=device, dtype=torch.int64).scatter_add_(0, flat, ones)
        offs = torch.cumsum(counts, 0).to(torch.int32)  # cumulative end offsets
        token = torch.div(order, top_k, rounding_mode="floor")
        xs = x.index_select(0, token)  # permute: [T*k, H]
        gate_up = grouped_mm(xs, w13_t, offs=offs)  # [T*k, 2F]
        act = silu(gate_up[:, :f]) * gate_up[:, f:]  # SwiGLU: [T*k, F]
        y = grouped_mm(act, w2_t, offs=offs)  # [T*k, H]
        weight = top_w.reshape(-1).index_select(0, order).to(y.dtype).unsqueeze(1)
        return torch.zeros_like(x).index_add_(0, token, y * weight)  # combine: [T, H]

    def fn(i):
        return layer(*layers[i % sets])
    return Built(fn, backend="grouped_mm")


def _moe_weights(torch, t, hd, f, e, device):
    x = randn(torch, (t, hd), "bf16", device)
    w_router = randn(torch, (e, hd), "bf16", device, hd ** -0.5)
    # Expert weights stored [E, N, K] like Linear weights; grouped_mm gets the
    # transposed views [E, K, N] (column-major in the last two dims).
    w13 = randn(torch, (e, 2 * f, hd), "bf16", device, hd ** -0.5)
    w2 = randn(torch, (e, hd, f), "bf16", device, f ** -0.5)
    return x, w_router, w13.transpose(1, 2), w2.transpose(1, 2)


def _checked(got, ref, what):
    """The relative error of ``got`` against its fp32 reference, rounded for the record;
    a result further off than 3% is not the op it claims to be, and fails the case."""
    err = float((got.float() - ref).norm() / ref.norm().clamp(min=1e-30))
    if not err < 3e-2:
        raise RuntimeError(f"{what} result off its reference: relative error {err:.3g}")
    return round(err, 6)


# --------------------------------------------------------------------- grouped GEMM

def grouped_gemm_set_bytes(c):
    e = ELEMENT_BYTES[c["dtype"]]
    return e * (c["rows"] * c["k"] + c["experts"] * c["n"] * c["k"])


def group_ends(torch, rows, experts, device):
    """Cumulative end offsets of ``rows`` split as evenly as whole rows allow over
    ``experts`` groups (the first rows % experts groups one row more)."""
    base, extra = divmod(rows, experts)
    sizes = [base + (g < extra) for g in range(experts)]
    ends, at = [], 0
    for size in sizes:
        at += size
        ends.append(at)
    return torch.tensor(ends, device=device, dtype=torch.int32)


def build_grouped_gemm(torch, c, device, sets):
    """One grouped GEMM as an MoE layer's experts run it: ``rows`` routed rows (sorted by
    expert, spread evenly over ``experts``), each group times its expert's [n, k] weight.
    bf16 through torch._grouped_mm; fp8 (e4m3 operands, one scale per row of the input and
    per output column of each weight, bf16 out) through torch._scaled_grouped_mm, its
    operands quantized before timing. The first set is checked against a bf16 product
    of the same (dequantized) operands."""
    r, n, k, e, dt = c["rows"], c["n"], c["k"], c["experts"], c["dtype"]
    if min(r, n, k, e) < 1 or e > r:
        raise ValueError(f"grouped gemm needs 1 <= experts <= rows and positive sizes, got {c}")
    if n % 16 or k % 16:
        raise ValueError("grouped gemm needs n and k multiples of 16 (16-byte strides)")
    offs = group_ends(torch, r, e, device)
    if dt == "bf16":
        grouped = getattr(torch, "_grouped_mm", None)
        if grouped is None:
            raise RuntimeError("torch._grouped_mm is not available in this torch")
        a = [randn(torch, (r, k), "bf16", device) for _ in range(sets)]
        w = [randn(torch, (e, n, k), "bf16", device, k ** -0.5) for _ in range(sets)]

        def fn(i):
            j = i % sets
            return grouped(a[j], w[j].transpose(1, 2), offs=offs)
        check = (fn(0), a[0].float(), w[0].float())
        backend = "grouped_mm"
    elif dt == "fp8":
        scaled = getattr(torch, "_scaled_grouped_mm", None)
        if scaled is None:
            raise RuntimeError("torch._scaled_grouped_mm is not available in this torch")
        fp8, top = torch.float8_e4m3fn, 448.0

        def quantize(x):  # (one scale per row of the last dimension)
            s = x.float().abs().amax(dim=-1).clamp(min=1e-12) / top
            return (x.float() / s.unsqueeze(-1)).to(fp8), s

        a, sa, w, sw = [], [], [], []
        for _ in range(sets):
            q, s = quantize(randn(torch, (r, k), "bf16", device))
            a.append(q)
            sa.append(s)
            q, s = quantize(randn(torch, (e, n, k), "bf16", device, k ** -0.5))
            w.append(q)
            sw.append(s)

        def fn(i):
            j = i % sets
            return scaled(a[j], w[j].transpose(1, 2), sa[j], sw[j], offs=offs, out_dtype=torch.bfloat16)
        check = (fn(0), a[0].float() * sa[0][:, None], w[0].float() * sw[0][:, :, None])
        backend = "scaled_grouped_mm"
    else:
        raise ValueError(f"grouped gemm dtype must be bf16 or fp8, got {dt}")
    out, a0, w0 = check
    ref = torch.empty(r, n, device=device, dtype=torch.float32)
    lo = 0
    for g, hi in enumerate(offs.tolist()):
        ref[lo:hi] = a0[lo:hi] @ w0[g].t()
        lo = hi
    return Built(fn, backend=backend, extra={"check_rel_error": _checked(out, ref, "grouped gemm")})


# ------------------------------------------------------------ block-scaled fp8 (Triton)

BLOCK = 128  # the checkpoints' scale block (1 x 128 activation groups, 128 x 128 weight blocks)


def _quantize_groups(torch, x):
    """e4m3 values and one fp32 scale per 1 x 128 group along the last dimension of x
    (its size a multiple of 128)."""
    g = x.float().reshape(*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK)
    s = g.abs().amax(dim=-1).clamp(min=1e-12) / 448.0
    return (g / s.unsqueeze(-1)).to(torch.float8_e4m3fn).reshape(x.shape), s


def _quantize_blocks(torch, w):
    """e4m3 values and one fp32 scale per 128 x 128 block of the last two dimensions of
    w [..., n, k] (k a multiple of 128; n padded to whole blocks, then cut back)."""
    *lead, n, k = w.shape
    nb = -(-n // BLOCK)
    full = torch.zeros(*lead, nb * BLOCK, k, device=w.device, dtype=torch.float32)
    full[..., :n, :] = w.float()
    b = full.reshape(*lead, nb, BLOCK, k // BLOCK, BLOCK)
    s = b.abs().amax(dim=(-3, -1)).clamp(min=1e-12) / 448.0
    q = (b / s[..., :, None, :, None]).to(torch.float8_e4m3fn).reshape(*lead, nb * BLOCK, k)
    return q[..., :n, :].contiguous(), s.contiguous()


def _dequantized(x, s, rows_per_scale):
    """x (e4m3) times its scales, as fp32: ``rows_per_scale`` 1 (activation groups) or 128
    (weight blocks) along the second-last dimension."""
    f = s.repeat_interleave(BLOCK, dim=-1)[..., :x.shape[-1]]
    if rows_per_scale > 1:
        f = f.repeat_interleave(rows_per_scale, dim=-2)[..., :x.shape[-2], :]
    return x.float() * f


def _block_quantized_sets(torch, sets, a_shape, w_shape, device):
    """``sets`` independent inputs of a block-scaled GEMM: (activations, their 1 x 128
    group scales, weights, their 128 x 128 block scales), one list each; weights scaled
    by 1/sqrt(k) as at initialisation."""
    k = w_shape[-1]
    a, sa, w, sw = [], [], [], []
    for _ in range(sets):
        q, s = _quantize_groups(torch, randn(torch, a_shape, "bf16", device))
        a.append(q)
        sa.append(s)
        q, s = _quantize_blocks(torch, randn(torch, w_shape, "bf16", device, k ** -0.5))
        w.append(q)
        sw.append(s)
    return a, sa, w, sw


def _fastest_config(fns):
    """The key of the fastest of {config: fn()}, each timed by Triton's bench loop over a
    CUDA graph of its calls (the engines' tuning step; timed eagerly, kernels of a few
    microseconds would be ranked by their launches): the harness then times the winner as
    it times everything."""
    from triton.testing import do_bench_cudagraph

    times = {cfg: do_bench_cudagraph(fn, rep=20) for cfg, fn in fns.items()}
    return min(times, key=times.get)


def block_gemm_set_bytes(c):
    return c["m"] * c["k"] + c["n"] * c["k"] + 4 * (c["m"] + c["n"]) * c["k"] // BLOCK


def build_block_gemm(torch, c, device, sets):
    """A Linear layer of a checkpoint with 128 x 128 fp8 weight blocks, as vLLM's and
    SGLang's Triton kernel runs it (``triton_fp8.block_gemm``): activations quantized per
    1 x 128 group before timing, bf16 out; the tile configuration the fastest for the
    shape. Checked against an fp32 product of the dequantized operands."""
    m, n, k = c["m"], c["n"], c["k"]
    if c.get("dtype", "fp8") != "fp8" or min(m, n, k) < 1 or k % BLOCK:
        raise ValueError(f"block gemm needs fp8, positive sizes and k a multiple of {BLOCK}, got {c}")
    from . import triton_fp8

    a, sa, w, sw = _block_quantized_sets(torch, sets, (m, k), (n, k), device)
    out = [torch.empty(m, n, device=device, dtype=torch.bfloat16) for _ in range(sets)]

    def run(j, cfg):
        return triton_fp8.block_gemm(a[j], sa[j], w[j], sw[j], out[j], cfg)
    configs = [cfg for cfg in triton_fp8.CONFIGS if cfg[0] <= max(16, 2 * m)]
    best = _fastest_config({cfg: (lambda cfg=cfg: run(0, cfg)) for cfg in configs})

    def fn(i):
        return run(i % sets, best)
    ref = _dequantized(a[0], sa[0], 1) @ _dequantized(w[0], sw[0], BLOCK).t()
    return Built(fn, backend="triton-block-fp8",
                 extra={"check_rel_error": _checked(fn(0), ref, "block gemm"), "config": list(best),
                        "configs_tried": len(configs)})


def fused_moe_set_bytes(c):
    rows = c["tokens"] * (c["topk"] if c["input"] == "row" else 1)
    return (rows * c["k"] + c["experts"] * c["n"] * c["k"]) * ELEMENT_BYTES[c.get("dtype", "fp8")]


def build_fused_moe(torch, c, device, sets):
    """One expert GEMM of an MoE layer as the engines' fused MoE Triton kernel runs it:
    experts stored in 128 x 128 fp8 blocks (dtype fp8, ``triton_fp8.fused_moe``) or in 16
    bits (bf16 or fp16, ``triton_moe.fused_moe``, no scales). Each of ``tokens`` tokens
    picks ``topk`` distinct experts of ``experts`` uniformly at random (seeded), the routed
    rows are sorted by expert and padded to the row tile before timing (the engines' align
    step, a kernel of its own), and the GEMM reads each token's row (``input`` "token":
    gate and up) or each routed row (``input`` "row": down, times its routing weight). The
    tile configuration is the fastest for the shape. A sample of routed rows is checked
    against fp32 products of the (dequantized) operands."""
    t, topk, e, n, k, kind = c["tokens"], c["topk"], c["experts"], c["n"], c["k"], c["input"]
    dt = c.get("dtype", "fp8")
    sixteen = dt in ("bf16", "fp16")
    step = 8 if sixteen else BLOCK
    if min(t, topk, e, n, k) < 1 or topk > e or k % step or kind not in ("token", "row"):
        raise ValueError(f"fused moe needs positive sizes, topk <= experts, k a multiple of {step} "
                         f"and input 'token' or 'row', got {c}")
    from . import triton_fp8

    gen = torch.Generator(device=device)
    gen.manual_seed(1234 + t)
    choices = torch.rand(t, e, device=device, generator=gen).topk(topk, dim=1).indices.to(torch.int32)
    rows = t * (topk if kind == "row" else 1)
    if sixteen:
        from . import triton_moe

        a = [randn(torch, (rows, k), dt, device) for _ in range(sets)]
        w = [randn(torch, (e, n, k), dt, device, k ** -0.5) for _ in range(sets)]
        out_dtype, space, backend = torch_dtype(torch, dt), triton_moe.CONFIGS, "triton-fused-moe"

        def call(j, cfg, route, weights):
            return triton_moe.fused_moe(a[j], w[j], out[j], route, cfg, kind == "token", weights)

        def operands():  # (set 0's A and a function giving an expert's W, in fp32)
            return a[0].float(), lambda x: w[0][x].float()
    else:
        a, sa, w, sw = _block_quantized_sets(torch, sets, (rows, k), (e, n, k), device)
        out_dtype, space, backend = torch.bfloat16, triton_fp8.CONFIGS, "triton-fused-moe-fp8"

        def call(j, cfg, route, weights):
            return triton_fp8.fused_moe(a[j], sa[j], w[j], sw[j], out[j], route, cfg, kind == "token", weights)

        def operands():
            return _dequantized(a[0], sa[0], 1), lambda x: _dequantized(w[0][x], sw[0][x], BLOCK)
    weights = torch.rand(t * topk, device=device, dtype=torch.float32) if kind == "row" else None
    out = [torch.zeros(t * topk, n, device=device, dtype=out_dtype) for _ in range(sets)]
    configs = [cfg for cfg in space if cfg[0] <= max(16, 2 * t * topk // e)]
    # (the align step's sorted rows, for each row tile a configuration tried has)
    routes = {bm: triton_fp8.sort_routes(torch, choices.long(), e, bm) for bm in {cfg[0] for cfg in configs}}

    def run(j, cfg):
        return call(j, cfg, routes[cfg[0]], weights)
    best = _fastest_config({cfg: (lambda cfg=cfg: run(0, cfg)) for cfg in configs})

    def fn(i):
        return run(i % sets, best)
    got = fn(0).float()
    pick = torch.randperm(t * topk, device=device, generator=gen)[:64]
    a0, w0 = operands()
    expert = choices.reshape(-1)
    ref = torch.stack([(a0[r // topk if kind == "token" else r] @ w0(expert[r]).t())
                       * (weights[r] if weights is not None else 1.0) for r in pick.tolist()])
    err = _checked(got[pick], ref, "fused moe")
    counts = torch.bincount(choices.reshape(-1).long(), minlength=e)
    return Built(fn, backend=backend,
                 extra={"check_rel_error": err, "config": list(best), "configs_tried": len(configs),
                        "experts_touched": int((counts > 0).sum()), "routed_rows": t * topk,
                        "row_tiles_128": int(((counts + 127) // 128).sum()),
                        "padded_rows": int(routes[best[0]][0].numel())})


# --------------------------------------------------------------------------- memory

def copy_set_bytes(c):
    return 2 * c["bytes"]  # source and destination


def build_copy(torch, c, device, sets):
    nbytes, dt = c["bytes"], c["dtype"]
    elem = ELEMENT_BYTES[dt]
    if nbytes < 1 or nbytes % elem:
        raise ValueError(f"copy of {nbytes} bytes is not a whole number of {dt} elements")
    n = nbytes // elem
    if dt == "uint8":
        src = [torch.randint(1, 256, (n,), device=device, dtype=torch.uint8) for _ in range(sets)]
    else:
        src = [randn(torch, (n,), dt, device) for _ in range(sets)]
    dst = [torch.empty_like(s) for s in src]

    # An elementwise kernel reads and writes the bytes on the SMs, as a layer's copies
    # run. A contiguous copy_ is a cudaMemcpyAsync, which a CUDA graph records as a memcpy
    # node: from about 512 MiB those run at 2.7 TB/s where a kernel or a stream memcpy
    # reaches 4.2 TB/s on the H200 (benchmarks/copy_modes.py, copy-modes.jsonl).
    def fn(i):
        j = i % sets
        return torch.mul(src[j], 1, out=dst[j])
    return Built(fn, extra={"impl": "kernel"})


def rmsnorm_set_bytes(c):
    return 2 * (c["tokens"] * c["hidden"] + c["hidden"])


def build_rmsnorm(torch, c, device, sets):
    t, hd = c["tokens"], c["hidden"]
    rms_norm = getattr(torch.nn.functional, "rms_norm", None)
    if rms_norm is None:
        raise RuntimeError("torch.nn.functional.rms_norm is not available in this torch")
    x = [randn(torch, (t, hd), "bf16", device) for _ in range(sets)]
    w = [randn(torch, (hd,), "bf16", device, 0.1).add_(1.0) for _ in range(sets)]

    def fn(i):
        j = i % sets
        return rms_norm(x[j], (hd,), w[j], eps=RMS_EPS)
    return Built(fn)


def add_rmsnorm_set_bytes(c):
    return 2 * (3 * c["tokens"] * c["hidden"] + c["hidden"])  # x, the residual, the output; the weight


def build_add_rmsnorm(torch, c, device, sets):
    """The residual add fused into RMSNorm as the engines run it between a layer's blocks
    (``triton_norm.fused_add_rms_norm``: a program per row; the residual updated in place,
    the normalized sum written). Checked on the first set against torch before timing."""
    t, hd = c["tokens"], c["hidden"]
    from . import triton_norm

    x = [randn(torch, (t, hd), "bf16", device) for _ in range(sets)]
    res = [randn(torch, (t, hd), "bf16", device) for _ in range(sets)]
    w = [randn(torch, (hd,), "bf16", device, 0.1).add_(1.0) for _ in range(sets)]
    out = [torch.empty_like(a) for a in x]
    rows = min(t, 64)
    r0 = res[0][:rows].clone()
    triton_norm.fused_add_rms_norm(x[0][:rows], r0, w[0], out[0][:rows], RMS_EPS)
    s = x[0][:rows].float() + res[0][:rows].float()
    want = torch.nn.functional.rms_norm(s, (hd,), w[0].float(), eps=RMS_EPS)
    if not torch.allclose(out[0][:rows].float(), want, rtol=2e-2, atol=2e-2) or \
            not torch.allclose(r0.float(), s, rtol=1e-2, atol=1e-2):
        raise RuntimeError(f"the fused add-RMSNorm kernel disagrees with torch at {c}")

    def fn(i):
        j = i % sets
        return triton_norm.fused_add_rms_norm(x[j], res[j], w[j], out[j], RMS_EPS)
    return Built(fn)


# -------------------------------------------------------------------- decoder layer

def _decoder_params(c):
    hd, h, kv, d, f = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"], c["ffn"]
    return (h + 2 * kv) * d * hd + hd * h * d + 2 * f * hd + hd * f + 2 * hd


def _decoder_tokens(c):
    return c["batch"] * c["seq"] if c["mode"] == "prefill" else c["batch"]


def decoder_set_bytes(c):
    b, kv, d, s = c["batch"], c["kv_heads"], c["head_dim"], c["seq"]
    kv_cache = 2 * b * kv * (s + 1) * d if c["mode"] == "decode" else 0
    return 2 * (_decoder_params(c) + _decoder_tokens(c) * c["hidden"] + kv_cache)


def _split_heads(qkv, batch, seq, h, kv, d):
    """qkv [batch*seq, (h+2kv)*d] -> q [b, h, s, d], k and v [b, kv, s, d] (views)."""
    q, k, v = qkv.split([h * d, kv * d, kv * d], dim=-1)
    return (q.view(batch, seq, h, d).transpose(1, 2), k.view(batch, seq, kv, d).transpose(1, 2),
            v.view(batch, seq, kv, d).transpose(1, 2))


def build_decoder_layer(torch, c, device, sets):
    mode, b, s = c["mode"], c["batch"], c["seq"]
    hd, h, kv, d, f = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"], c["ffn"]
    if mode not in ("prefill", "decode"):
        raise ValueError(f"unknown decoder_layer mode '{mode}'")
    if kv < 1 or h % kv:
        raise ValueError(f"heads={h} is not a multiple of kv_heads={kv}")
    F = torch.nn.functional
    gqa = kv != h
    extra = {"enable_gqa": True} if gqa else {}
    causal = mode == "prefill"
    layers = [_decoder_weights(torch, c, device) for _ in range(sets)]

    def layer(x, ln1, w_qkv, w_o, ln2, w13, w2, k_cache, v_cache):
        hn = F.rms_norm(x, (hd,), ln1, eps=RMS_EPS)
        qkv = torch.mm(hn, w_qkv.t())
        if causal:
            q, k, v = _split_heads(qkv, b, s, h, kv, d)
        else:  # one new token per sequence: write its K and V at position seq
            q, k, v = _split_heads(qkv, b, 1, h, kv, d)
            k_cache[:, :, s:s + 1].copy_(k)
            v_cache[:, :, s:s + 1].copy_(v)
            k, v = k_cache, v_cache
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **extra)
        o = o.transpose(1, 2).reshape(x.shape[0], h * d)
        x = x + torch.mm(o, w_o.t())
        hn = F.rms_norm(x, (hd,), ln2, eps=RMS_EPS)
        gate_up = torch.mm(hn, w13.t())
        act = F.silu(gate_up[:, :f]) * gate_up[:, f:]
        return x + torch.mm(act, w2.t())

    def fn(i):
        return layer(*layers[i % sets])

    # Which SDPA kernel the default dispatch picks, on tensors shaped as in the layer.
    seq_q = s if causal else 1
    probe = torch.empty(b * seq_q, (h + 2 * kv) * d, device=device, dtype=torch.bfloat16)
    q, k, v = _split_heads(probe, b, seq_q, h, kv, d)
    if not causal:
        k, v = layers[0][7], layers[0][8]
    backend = sdpa_choice(torch, q, k, v, causal, gqa)
    del probe, q, k, v
    return Built(fn, backend=backend)


def _decoder_weights(torch, c, device):
    mode, b, s = c["mode"], c["batch"], c["seq"]
    hd, h, kv, d, f = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"], c["ffn"]

    def w(rows, cols):
        return randn(torch, (rows, cols), "bf16", device, cols ** -0.5)

    def norm_weight():
        return randn(torch, (hd,), "bf16", device, 0.1).add_(1.0)

    x = randn(torch, (_decoder_tokens(c), hd), "bf16", device)
    if mode == "decode":
        k_cache = randn(torch, (b, kv, s + 1, d), "bf16", device)
        v_cache = randn(torch, (b, kv, s + 1, d), "bf16", device)
    else:
        k_cache = v_cache = None
    return (x, norm_weight(), w((h + 2 * kv) * d, hd), w(hd, h * d), norm_weight(),
            w(2 * f, hd), w(hd, f), k_cache, v_cache)


BUILDERS = {
    "gemm": (gemm_set_bytes, build_gemm),
    "attention": (attention_set_bytes, build_attention),
    "moe": (moe_set_bytes, build_moe),
    "grouped_gemm": (grouped_gemm_set_bytes, build_grouped_gemm),
    "block_gemm": (block_gemm_set_bytes, build_block_gemm),
    "fused_moe": (fused_moe_set_bytes, build_fused_moe),
    "copy": (copy_set_bytes, build_copy),
    "rmsnorm": (rmsnorm_set_bytes, build_rmsnorm),
    "add_rmsnorm": (add_rmsnorm_set_bytes, build_add_rmsnorm),
    "decoder_layer": (decoder_set_bytes, build_decoder_layer),
}


# ---------------------------------------------------------------------- kernel count

def count_kernels(torch, fn, include_copies=False, name_limit=120):
    """(kernels launched by one eager call, distinct kernel names) from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn(0)
        torch.cuda.synchronize()
    names = [evt.name for evt in prof.events() if _is_kernel(evt, include_copies)]
    distinct = list(dict.fromkeys(n[:name_limit] for n in names))
    return len(names), distinct


def _is_kernel(evt, include_copies):
    if str(getattr(evt, "device_type", "")).rsplit(".", 1)[-1] != "CUDA":
        return False
    activity = getattr(evt, "activity_type", None)
    if isinstance(activity, str) and activity:
        return activity == "kernel" or (include_copies and activity in ("gpu_memcpy",
                                                                         "gpu_memset"))
    name = evt.name or ""
    if name.startswith(("Memcpy", "Memset")):
        return include_copies
    return not name.startswith(("aten::", "ProfilerStep"))  # annotations on the GPU row
