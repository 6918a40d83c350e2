"""How uniform top-k routing spreads a MoE layer's tokens over its experts.

Each of T tokens picks k distinct experts of E uniformly at random. An expert's load (the
rows it computes) is then Binomial(T, k/E), and the E loads add up to T*k, so they are
negatively dependent: the busiest expert carries more than the largest of E independent
binomials would (about sqrt(E/(E-1)) times the excess over the mean, at large T).

The expected busiest load is E[max] = sum over c = 0..T-1 of P(max > c). P(max <= c) is
computed for E independent loads of a distribution f conditioned on their sum being T*k:

    P(max <= c) = F(c)^E * P(sum of E draws of f truncated at c = Tk) / P(sum of E draws of f = Tk)

with F the cumulative distribution of f, and

* k = 1: f is Poisson(T/E); exact (a multinomial is independent Poissons given their sum);
* k > 1: f(l) is Binomial(T, k/E)(l) * exp((l - mu)^2 / (2 E var)), mu and var the
  binomial's mean and variance: the column-sum factor of the count of 0-1 matrices with
  given row and column sums (Canfield, Greenhill & McKay, J. Combin. Theory A 115 (2008)
  32-66), the rows being the tokens (k ones each) and the columns the experts.

Each sum's probability of T*k is that of the binomial with the sum's mean and variance
(a lattice distribution, exact where the truncated draw is 0 or 1). Loads are summed over a
window around the mean wide enough for tails of e^-24, in at most ``POINTS`` blocks of
equal width (one load per block while the window is narrow). Against sampled routings the
result is within 0.7% for 8-256 experts, top-k 1-8 and 1-16,384 tokens (tests/test_routing.py,
benchmarks/busiest_expert_mc.py); with fewer experts the sums' binomial is cruder: within
1.5% for 4 and 6 experts, 4% for 2.

Predictions call this with a few token counts at a time, for experts and top-k that stay
fixed: the numbers are then read off a curve over token counts, computed once per (experts,
top-k) and kept (``_curve``; within 0.2% of the direct computation); arrays of experts or
top-k are computed directly (:func:`busiest_direct`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..symbolic import numeric_only

POINTS = 64  # blocks of loads summed over
TAIL = 24.0  # window: mean +- the Bernstein deviation of a tail probability e^-TAIL
CURVE_EXACT = 64  # the curve holds every token count up to this one,
CURVE_STEPS = 8  # then this many per doubling,
CURVE_DOUBLINGS = 24  # up to CURVE_END tokens
CURVE_END = CURVE_EXACT * 2.0**CURVE_DOUBLINGS  # about 1e9
# past CURVE_EXACT, t is at CURVE_STEPS log2(t) + this
_CURVE_OFFSET = CURVE_EXACT - 1 - CURVE_STEPS * np.log2(CURVE_EXACT)


def expected_touched(tokens, experts, top_k):
    """Expected experts with at least one token under uniform top-k routing."""
    return experts * (1 - (1 - top_k / experts) ** tokens)


def expected_busiest(tokens, experts, top_k):
    """Expected rows of the busiest expert under uniform top-k routing (see the module's
    notes). Numbers and arrays only: for sympy arguments, an undefined function of them."""
    return numeric_only("busiest", _busiest, tokens, experts, top_k)


def _busiest(tokens, experts, top_k):
    t = np.maximum(np.asarray(tokens, dtype=float), 0.0)
    if np.ndim(experts) or np.ndim(top_k):  # (a sweep over experts or top-k)
        return busiest_direct(t, experts, top_k)
    excess, step = _curve(float(experts), float(top_k))
    mean = t * min(float(top_k) / float(experts), 1.0)
    # the curve's position of t: one point per token up to CURVE_EXACT, then CURVE_STEPS
    # per doubling; read off linearly in between, and as the square root of the tokens past
    # its end (the Gaussian limit)
    at = np.where(t <= CURVE_EXACT, t - 1,
                  CURVE_STEPS * np.log2(np.maximum(t, 1.0)) + _CURVE_OFFSET)
    at = np.minimum(np.maximum(at, 0.0), excess.size - 1 - 1e-9)
    i = at.astype(np.intp)
    x = (excess[i] + step[i] * (at - i)) * np.sqrt(np.maximum(t, CURVE_END) * (1 / CURVE_END))
    return _bounded(mean + x, t, mean)


def _bounded(rows, t, mean):
    """``rows`` within what any routing gives: at least the mean load, rounded up (the loads
    are whole and add up to T*k), and one row when there are tokens; at most T."""
    low = np.maximum(np.ceil(mean * (1 - 1e-12)), np.minimum(t, 1.0))
    out = np.minimum(np.maximum(rows, low), t)
    return out[()] if out.ndim == 0 else out


@lru_cache(maxsize=64)
def _curve(experts: float, top_k: float) -> tuple[np.ndarray, np.ndarray]:
    """The busiest expert's rows over the mean load at 1, 2, ..., CURVE_EXACT tokens and
    then CURVE_STEPS points per doubling up to CURVE_END tokens, for one (experts, top-k);
    and the steps between them."""
    tokens = np.concatenate([np.arange(1.0, CURVE_EXACT + 1),
                             CURVE_EXACT * 2.0 ** (np.arange(1, CURVE_STEPS * CURVE_DOUBLINGS + 1)
                                                   / CURVE_STEPS)])
    excess = busiest_direct(tokens, experts, top_k) - tokens * min(top_k / experts, 1.0)
    return excess, np.diff(excess, append=excess[-1])


def busiest_direct(tokens, experts, top_k):
    """:func:`expected_busiest` computed for every element (numpy arrays, broadcast); at a
    fractional token count, linear between the whole counts around it."""
    t, e, k = np.broadcast_arrays(np.maximum(np.asarray(tokens, dtype=float), 0.0),
                                  np.asarray(experts, dtype=float), np.asarray(top_k, dtype=float))
    whole = np.floor(t)
    both = _busiest_whole(np.stack([whole, whole + 1]), e, k)
    return both[0] + (both[1] - both[0]) * (t - whole)


def _busiest_whole(tokens, experts, top_k):
    """The expected busiest rows at whole token counts."""
    t = tokens[..., None]
    e = np.asarray(experts, dtype=float)[..., None]
    k = np.asarray(top_k, dtype=float)[..., None]
    every = k >= e  # each token goes to every expert
    p = np.where(every, 0.5, k / e)
    q = 1 - p
    mean = t * p
    var = np.maximum(mean * q, 1e-300)
    spread = var * e / np.maximum(e - 1, 1)  # f's variance (Gaussian limit)
    half = TAIL / 3 + np.sqrt(TAIL * TAIL / 9 + 2 * TAIL * spread)
    lo = np.maximum(0.0, np.floor(mean - half))
    h = np.maximum(1.0, np.ceil((np.minimum(t, np.ceil(mean + half)) - lo + 1) / POINTS))
    j = np.arange(POINTS)
    first = lo + h * j  # the first load of each block
    y = first + (h - 1) / 2 - mean  # block centre, from the mean
    # f's log ratio over one load at the half-integer below each block, times the block width
    below = np.maximum(first - 0.5, 0.5)
    ratio = np.maximum(np.where(k == 1, mean, (t - below + 0.5) * p / q), 1e-300) / (below + 0.5)
    tilt = np.where(k == 1, 0.0, (below - mean) / (e * var))
    step = np.where(j > 0, (np.log(ratio) + tilt) * h, 0.0)
    lw = np.cumsum(step, axis=-1)
    w = np.where(first <= t, np.exp(np.maximum(lw - np.max(lw, axis=-1, keepdims=True), -600.0)), 0.0)
    # f's mass, mean and variance up to the end of each block (the last: all of f)
    mass = np.cumsum(w, axis=-1)
    m1 = np.cumsum(w * y, axis=-1) / mass
    m2 = np.cumsum(w * y * y, axis=-1) / mass
    v = np.maximum(m2 - m1 * m1 + (h * h - 1) / 12, 1e-300)
    n = t * k
    sums = _log_binomial_at(e * (mean + m1), e * v, n)
    log_below = e * np.log(mass / mass[..., -1:]) + sums - sums[..., -1:]  # ln P(max <= c)
    c = first + h - 1  # the last load of each block
    tail = np.where(c < np.ceil(mean * (1 - 1e-12)), 1.0,
                    np.where(c >= t, 0.0, -np.expm1(np.minimum(log_below, 0.0))))  # P(max > c)
    before = np.concatenate([np.ones_like(tail[..., :1]), tail[..., :-1]], axis=-1)
    # sum of P(max > c) over the loads of each block: the trapezoid between block ends
    rows = lo[..., 0] + np.sum(h * (before + tail) / 2 + (tail - before) / 2, axis=-1)
    rows = np.where(every[..., 0], t[..., 0], rows)
    return _bounded(rows, t[..., 0], mean[..., 0])


def _log_binomial_at(mean, var, n):
    """ln P(Y = n) + ln n! for Y binomial with the given mean and variance (taken as a Poisson
    where the variance is not below the mean), without cancellation at many trials."""
    mean = np.maximum(mean, 1e-300)
    p = np.clip(1 - var / mean, 1e-12, 1 - 1e-12)
    z = mean / p + 1 - n  # trials - n + 1
    possible = z > 0
    z = np.where(possible, z, 1.0)
    # ln Gamma(z + n) - ln Gamma(z) by Stirling's series at z + 3 and z + 3 + n, shifted down
    a = z + 3
    b = a + n
    series = _stirling_tail(b) - _stirling_tail(a)
    shift = np.log(z * (z + 1) * (z + 2) / ((b - 3) * (b - 2) * (b - 1)))
    # n ln(trials + 4) + n ln p kept together as n ln(mean + 4 p): finite as p -> 0
    out = ((a - 0.5) * np.log1p(n / a) + n * np.log(mean + 4 * p) - n + series + shift
           + (z - 1) * np.log1p(-p))
    return np.where(possible, out, -1e300)  # (a finite stand-in for ln 0)


def _stirling_tail(x):
    """ln Gamma(x) - ((x - 1/2) ln x - x + ln(2 pi)/2), for x >= 3 (error below 1e-6)."""
    x2 = x * x
    return (1 / 12 - (1 / 360 - 1 / (1260 * x2)) / x2) / x


def sample_loads(tokens: int, experts: int, top_k: int, samples: int, rng) -> np.ndarray:
    """Loads of the experts, [samples, experts], in ``samples`` independent routings of
    ``tokens`` tokens that each pick ``top_k`` distinct experts uniformly: an exact sampler,
    the reference the expected values are tested against."""
    if tokens * top_k <= 16 * experts:  # (few picks: pick them; else expert by expert)
        return _sample_by_token(tokens, experts, top_k, samples, rng)
    return _sample_by_expert(tokens, experts, top_k, samples, rng)


def _sample_by_token(tokens, experts, top_k, samples, rng):
    """Each token's experts by Floyd's algorithm (a uniform k-subset in k draws)."""
    picks = np.empty((samples, tokens, top_k), dtype=np.int64)
    for j in range(top_k):
        last = experts - top_k + j
        r = rng.integers(0, last + 1, size=(samples, tokens))
        taken = (picks[..., :j] == r[..., None]).any(axis=-1)
        picks[..., j] = np.where(taken, last, r)
    rows = np.arange(samples)[:, None, None] * experts + picks
    return np.bincount(rows.ravel(), minlength=samples * experts).reshape(samples, experts)


def _sample_by_expert(tokens, experts, top_k, samples, rng):
    """Expert by expert: of the tokens with r experts still to pick among the R experts
    left, each picks this one with probability r/R."""
    left = np.zeros((samples, top_k + 1), dtype=np.int64)  # tokens by picks still to make
    left[:, top_k] = tokens
    loads = np.empty((samples, experts), dtype=np.int64)
    r = np.arange(1, top_k + 1)
    for e in range(experts):
        picked = rng.binomial(left[:, 1:], np.minimum(r / (experts - e), 1.0))
        loads[:, e] = picked.sum(axis=1)
        left[:, 1:] -= picked
        left[:, :-1] += picked
    return loads
