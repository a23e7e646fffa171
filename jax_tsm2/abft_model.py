"""The rounding model behind ``jax_tsm2.abft``'s detection threshold.

A clean product ``C^ = fl(A B)`` differs from ``A B`` by rounding errors ``E``; the checksum
residual of column ``j`` is ``r_j = w^T E[:, j]`` plus the checksums' own rounding. A column is
flagged when ``|r_j|`` exceeds a threshold ``t_j``; ``t_j`` must be above every clean residual
(no false positives) and as low as possible (the smallest error it detects). This module
derives ``t_j`` and computes the constants both formulations (the FFI targets, whose CPU
reference and CUDA kernels share ``ffi/abft/checksum.h``, and XLA's) evaluate it with.

**Random-sign weights.** Row ``i`` weighs ``s e_i`` and ``s e_i (i + 1) / m`` with signs
``e_i = +-1`` from a fixed hash of ``i`` (``row_signs``) and the power of two
``s = checksum_scale(m)``. For *any* fixed error vector ``E[:, j]`` (however correlated its
entries: repeated rows, a rounding bias shared by a whole column), ``sum_i e_i E_ij`` is a
sum of independent zero-mean terms, and Hoeffding's inequality gives
``P(|sum_i e_i c_i E_ij| > lambda ||c E_j||_2) <= 2 exp(-lambda^2 / 2)`` for weights
``|c_i| <= 1``. The signs are fixed (results are reproducible); the probability is over the
choice of hash, i.e. for data that does not conspire with it.

**Errors of one entry.** With ``t_l = a_il b_lj`` (``k`` terms), ``C = sum_l t_l``,
``T2 = sum_l t_l^2`` and unit roundoffs ``u_p`` (the product's accumulator: f32 for
f32/bf16/f16 data, f64 for f64), ``u_in`` (rounding of each operand before the multiply: TF32
at XLA's default f32 precision on GPUs, ``2^-10`` relative, truncation included; bf16 on TPUs)
and ``u_out`` (rounding of a bf16/f16 result):

- *accumulation*: each of the ``<= 2k`` roundings of a sum of ``k`` terms (products, then
  partial sums ``s_r``) errs by ``delta_r s_r``, ``|delta_r| <= u_p``. Modelling the
  ``delta_r`` of one dot product as independent and zero-mean (Higham and Mary, SIAM J. Sci.
  Comput. 2019), the error is sub-Gaussian with variance proxy ``u_p^2 sum_r s_r^2``, and
  ``sum_r s_r^2 <= (k + 1) (T2 + C^2)`` covers partial sums that drift linearly towards ``C``
  (same-sign terms) and random walks of ``T2 / k`` per step (mixed signs), in any summation
  order, with heavy-tailed terms (a large term counts once per later partial sum);
- *coherent drift*: rounding errors are not independent when the terms repeat (a row of
  0.1s summed in f32 drifts by about ``0.16 k u_p |C|``, every step rounding the same way),
  so ``((k + 2) / 4) u_p kappa_j (2 - kappa_j) |C|`` per entry is allowed for on top, with
  ``kappa_j = ||C[:, j]||_1 / sum_i sum_l |t_l|`` the fraction of the terms' magnitude that
  survives in ``C``. Where terms do not cancel (``kappa_j = 1``) the partial sums grow to
  ``|C|`` and the worst coherent case is a repeated term: each step errs by at most half an
  ulp of its partial sum, and not the same way in neighbouring binades (an offset that rounds
  one binade by half an ulp rounds the binade below by almost nothing), so that ``k`` copies
  of any value drift by at most ``(k + 2) / 4 u_p |C|`` in recursive summation, the worst
  order (exhaustively over the 2^23 f32 significands for ``k <= 600``, and on samples of
  exact f32 products and of f64 values up to ``k = 4096``: up to 2.5% above it for
  ``k < 64``, which the ``c_C`` term covers), and by about half of it or less in blocked
  orders; ``(k + 1) / 2 u_p |C|``, every step rounding by a whole ``u_p`` of its partial sum,
  is twice what any repeated term reaches. Where terms cancel, partial sums wander far above
  ``kappa_j |C|`` (few-valued data with a small mean drift with them), beyond that analysis:
  the factor ``2 - kappa_j`` returns the allowance to ``(k + 2) / 2 u_p kappa_j |C|`` as
  ``kappa_j -> 0`` (about ``1 / sqrt(k)`` for random signs, where it costs a few percent);
- *input rounding*: ``sum_l (theta_a + theta_b) t_l`` with ``|theta| <= u_in``: a common part
  (a bias, as truncation has) of at most ``(2 u_in + u_in^2) |C|`` and a fluctuating part with
  proxy ``2 u_in^2 T2``;
- *output rounding* (bf16/f16): at most half an ulp of ``C^_ij``, computed exactly from ``C^``.

Summed over a column with the random signs, all of it is bounded, with probability at least
``1 - 2 exp(-lambda^2 / 2)``, by ``lambda sqrt(V_j)`` with
``V_j = c_Q N_q^2 + (c_C + (drift kappa_j (2 - kappa_j))^2) N_c^2 + N_u^2``:
``N_q^2 = sum_i sum_l t^2`` (from the passes over A and B), ``N_c = ||C^[:, j]||_2`` and
``N_u^2`` the sum of the squared half-ulps (from the pass over C). ``lambda = 6.6`` puts the
bound at ``7e-10`` per check, two checks per column; the model's proxies (a bounded error's
``u^2`` for its variance ``u^2 / 3``, ``k + 1`` roundings of partial sums as large as ``|C|``)
leave a margin on top, which is what covers rows that repeat exactly (then the errors, not
only the signs, are shared). Measured on XLA's CPU product over the distributions of
``tests/test_abft_detection.py`` (constant matrices and repeated rows included), clean
residuals stay below half the threshold; the largest ratios come from products of one or two
terms, where the worst case (below) is the tighter bound and holds with a factor 2 to spare.

**Absolute terms**, added outside the square root: underflow (a product or a partial sum
flushed to zero loses at most the smallest normal number: ``2 s m (2k + 1) tiny``), terms an
input flushed to zero loses (the flush row of the passes: the mass of subnormal inputs times
the other operand), and the checksums' own rounding. The kernels sum in f64 (f32, bf16, f16
data) or double-double (f64 data), so theirs is ``2 gamma_{m+k+2}`` of a much smaller unit
roundoff; XLA's formulation sums in the accumulation dtype and pays ``2 gamma_{m+k+2}(u_acc)
(||C||_1 + sum |t|)``: with f32 checksums (f32 data without ``jax_enable_x64``) the bound
grows with ``m`` like the worst case.

**Ceiling.** The threshold never exceeds the worst-case bound ``2 (eta + 2 gamma_{m+1} +
gamma_{k+1}) sum_i sum_l |t_l|`` (``eta`` the product's worst relative error per entry,
Higham ch. 3), which holds for any data; where a statistic overflows, the ceiling alone
remains, and where that overflows the threshold is infinite and only a non-finite ``C`` is
flagged.

Detection: a single error ``d`` is flagged once ``|d| > t_j + |clean residual|``, so any
``|d| > 1.2 t_j`` is, with the margin above; ``tests/test_abft_detection.py`` and
``benchmarks/abft_detection.py`` measure what that means against the size of ``C``'s entries.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import DTypeLike

__all__ = [
    "LAMBDA",
    "accumulation_dtype",
    "checksum_scale",
    "checksum_weights",
    "column_threshold",
    "column_weights",
    "guarded_norm",
    "half_ulp",
    "model_vector",
    "row_model_vector",
    "row_signs",
    "row_threshold",
]

LAMBDA = 6.6  # 2 exp(-LAMBDA^2 / 2) = 6.9e-10 per check

# The model vector's entries (ffi/abft/checksum.h, AbftModel): names in order.
MODEL_FIELDS = (
    "lambda",
    "terms_sq",
    "c_sq",
    "drift",
    "c_per_n2",
    "output",
    "floor",
    "flush",
    "rounding",
    "ceiling",
    "inflate",
    "scale",
)

# Precision bits and smallest normal exponent of the narrow outputs (HalfUlp in checksum.h).
_NARROW = {np.dtype(jnp.bfloat16): (8, -126), np.dtype(jnp.float16): (11, -14)}


def accumulation_dtype(dtype: DTypeLike) -> np.dtype:
    """The dtype the checksums of products of ``dtype`` are stored in.

    bf16/f16 -> f32. f32 -> f64 when ``jax_enable_x64`` is on, else f32. f64 -> f64. (The FFI
    targets sum in f64 or double-double whatever this says; XLA's formulation sums in it.)

    >>> accumulation_dtype(jnp.bfloat16)
    dtype('float32')
    """
    dtype = np.dtype(dtype)
    if dtype == np.float64 or (dtype == np.float32 and jax.config.jax_enable_x64):
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def checksum_scale(m: int) -> float:
    """``2**-(ceil(log2 m) + 1)``: the power of two the checksums of ``m`` rows are scaled by.

    A plain column sum of ``m`` finite entries can overflow (64 entries of 1e38 in f32);
    with weights of at most this, no weighted sum of ``m`` finite entries exceeds half the
    largest, so the checksums of a finite product are finite. Scaling by a power of two is
    exact; what it pushes below the smallest normal number is in the threshold's floor.

    >>> checksum_scale(1), checksum_scale(4), checksum_scale(5)
    (0.5, 0.125, 0.0625)
    """
    return 2.0 ** -((max(int(m), 1) - 1).bit_length() + 1)


def row_signs(n: int, dtype: DTypeLike = jnp.float32) -> jax.Array:
    """The checksum signs ``e_i = +-1`` of rows ``0 .. n-1``: bit 0 of murmur3's finalizer of
    ``i ^ 0x9e3779b9`` (``RowSign`` in ``ffi/abft/checksum.h``), 1 meaning -1.

    >>> row_signs(6)
    Array([ 1., -1., -1., -1.,  1., -1.], dtype=float32)
    """
    h = jnp.arange(n, dtype=jnp.uint32) ^ jnp.uint32(0x9E3779B9)
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    h = h ^ (h >> 16)
    return jnp.where((h & 1) == 1, -1.0, 1.0).astype(dtype)


def checksum_weights(n: int, dtype: DTypeLike = jnp.float32) -> jax.Array:
    """The ``(n, 2)`` checksum weights: ``e_i`` and ``e_i (i + 1) / n`` (``row_signs``).

    The signs make each residual a random-sign sum of the entries' rounding errors (see the
    module docstring); the ramp tells rows apart: a single error in row ``i`` gives residuals
    whose ratio is ``(i + 1) / n``. ``(i + 1) / n`` rather than ``i + 1`` keeps every weight
    in ``[-1, 1]``, so one scale bounds both sums and nothing grows with ``n``. Distinct in
    f32 up to ``n = 2**24``.

    >>> checksum_weights(4)
    Array([[ 1.  ,  0.25],
           [-1.  , -0.5 ],
           [-1.  , -0.75],
           [-1.  , -1.  ]], dtype=float32)
    """
    e = row_signs(n, dtype)
    ramp = jnp.arange(1, n + 1, dtype=dtype) / jnp.asarray(max(n, 1), dtype)
    return jnp.stack([e, e * ramp], axis=1)


def _is_full_precision(precision) -> bool:
    """Whether an f32 product runs with f32 inputs (no TF32/bf16 rounding of the operands)."""
    if precision is None:
        precision = jax.config.jax_default_matmul_precision
        if precision is None:
            return False
    if isinstance(precision, (tuple, list)):
        return all(_is_full_precision(p) for p in precision)
    if isinstance(precision, lax.Precision):
        return precision == lax.Precision.HIGHEST
    name = str(precision).lower()
    return name in ("highest", "float32", "precision.highest") or "f32_f32_f32" in name


def input_rounding(dtype: DTypeLike, precision) -> float:
    """Largest relative change rounding one f32 operand can make before the multiply.

    XLA's default f32 precision feeds TF32 (10 mantissa bits) to the tensor cores on NVIDIA
    GPUs: ``2^-10`` covers truncation as well as rounding to nearest (``2^-11``); TPUs round
    to bf16 (``2^-8``). bf16/f16 products are exact in the f32 accumulator and f64 is never
    rounded, so only f32 pays this.
    """
    if np.dtype(dtype) != np.float32 or _is_full_precision(precision):
        return 0.0
    backend = jax.default_backend()
    if backend == "cpu":
        return 0.0
    return 2.0**-10 if backend in ("gpu", "cuda", "rocm") else 2.0**-8


def _gamma(count: int, u: float) -> float:
    """Higham's gamma_n = n u / (1 - n u): the bound on any n-term sum's relative error."""
    nu = count * u
    return math.inf if nu >= 0.5 else nu / (1 - nu)


class EntryBound(NamedTuple):
    """``|C^_ij - (AB)_ij| <= factor (|A||B|)_ij + floor``: the worst case of one entry."""

    factor: float
    floor: float


def _narrow_output(dtype: np.dtype, out: DTypeLike | None) -> bool:
    """Whether a product of ``dtype`` operands is checked after rounding to bf16/f16: its
    ``C`` is ``dtype`` (``out`` None or ``dtype``), not the f32 sums before rounding."""
    return dtype in _NARROW and (out is None or np.dtype(out) == dtype)


def _product_units(
    dtype: np.dtype, out: DTypeLike | None = None
) -> tuple[float, float, float, float]:
    """(u_p, u_out, tiny_p, tiny_out) of products of ``dtype`` checked in ``out``."""
    prod = np.dtype(np.float64 if dtype == np.float64 else np.float32)
    narrow = _narrow_output(dtype, out)
    u_out = float(jnp.finfo(dtype).eps) / 2 if narrow else 0.0
    tiny_out = float(jnp.finfo(dtype).tiny) if narrow else 0.0
    return float(jnp.finfo(prod).eps) / 2, u_out, float(jnp.finfo(prod).tiny), tiny_out


def entry_bound(
    dtype: DTypeLike, k: int, precision, acc: DTypeLike, out: DTypeLike | None = None
) -> EntryBound:
    """The worst-case bound of one entry of a product of ``k`` terms (twice the first-order
    bracket: second-order terms and the rounding of ``|A||B|`` itself), recomputed in
    ``acc``: what the repair compares each entry of a recomputed column against. ``out``: the
    dtype ``C`` is checked in (None: ``dtype``; f32 for bf16/f16 sums before rounding)."""
    dtype, acc = np.dtype(dtype), np.dtype(acc)
    u_p, u_out, tiny_p, tiny_out = _product_units(dtype, out)
    u_in = input_rounding(dtype, precision)
    u_acc, tiny_acc = float(jnp.finfo(acc).eps) / 2, float(jnp.finfo(acc).tiny)
    eta = 2 * u_in + u_in**2 + _gamma(k, u_p) + 2 * u_out
    factor = 2 * (eta + _gamma(k + 1, u_acc))
    floor = 2 * ((k + 1) * tiny_p + tiny_out + (2 * k + 2) * tiny_acc)
    return EntryBound(factor, floor)


def model_vector(
    dtype: DTypeLike,
    m: int,
    k: int,
    precision,
    acc: DTypeLike,
    *,
    extended_sums: bool,
    out: DTypeLike | None = None,
) -> np.ndarray:
    """The constants of the threshold (``MODEL_FIELDS``, ``AbftModel`` in checksum.h) for an
    ``(m, k)`` product of ``dtype``, as float64; ``extended_sums``: the checksums are summed in
    f64 / double-double (the FFI targets) rather than in ``acc`` (XLA's formulation); ``out``:
    the dtype ``C`` is checked in (None: ``dtype``; f32 for bf16/f16 products checked on their
    f32 sums before rounding, which leaves out the output rounding's terms).

    >>> v = model_vector(jnp.float32, 100, 50, None, jnp.float32, extended_sums=True)
    >>> float(dict(zip(MODEL_FIELDS, v))["lambda"]), len(v)
    (6.6, 12)
    """
    dtype, acc = np.dtype(dtype), np.dtype(acc)
    u_p, u_out, tiny_p, tiny_out = _product_units(dtype, out)
    u_in = input_rounding(dtype, precision)
    u_acc, tiny_acc = float(jnp.finfo(acc).eps) / 2, float(jnp.finfo(acc).tiny)
    if extended_sums:  # f64 sums (f32/bf16/f16 data) or double-double (f64 data)
        u_sum = 2.0**-104 if dtype == np.float64 else 2.0**-53
        tiny_sum = float(np.finfo(np.float64).tiny)
    else:
        u_sum, tiny_sum = u_acc, tiny_acc
    s = checksum_scale(m)
    narrow = _narrow_output(dtype, out)
    coherent_in = (2 * u_in + u_in**2) * (1 + u_out)
    floor = 2 * (s * m * (2 * k + 1) * tiny_p + s * m * tiny_out + (2 * m + 2 * k + 4) * tiny_sum)
    eta = 2 * u_in + u_in**2 + _gamma(k, u_p) + 2 * u_out
    ceiling = 2 * (eta + 2 * _gamma(m + 1, u_sum) + _gamma(k + 1, u_sum))
    # The sums' own rounding: the signed checksums and the references err by at most
    # gamma_{m+k+2} of the terms they add (||C||_1 + the terms' 1-norm); the low halves
    # the references are stored with leave u_acc^2 of them.
    rounding = 2 * _gamma(m + k + 2, u_sum) + 2 * u_acc**2
    # The stored statistics and the threshold are rounded to acc, each once (and XLA's
    # formulation sums its statistics in acc too).
    inflate = 4 * u_acc + 2 * _gamma(m + k + 2, u_sum)
    p_out = _NARROW[dtype][0] if narrow else 0
    values = {
        "lambda": LAMBDA,
        "terms_sq": (k + 1) * u_p**2 + 2 * u_in**2,
        "c_sq": (k + 1) * u_p**2 + coherent_in**2,
        "drift": (k + 2) / 4 * u_p,
        "c_per_n2": 2.0 ** (p_out + 1) if narrow else 1.0,
        "output": 1.0 if narrow else 0.0,
        # Stored in acc, a floor must not be a subnormal number a flush would zero.
        "floor": max(floor, tiny_acc),
        "flush": 2.0,
        "rounding": rounding,
        "ceiling": ceiling,
        "inflate": inflate,
        "scale": s,
    }
    return np.array([values[f] for f in MODEL_FIELDS], np.float64)


def guarded_norm(sq: jax.Array, abs1: jax.Array) -> jax.Array:
    """``sqrt(sq)`` where the sum of squares is trustworthy, else its bound ``abs1``
    (``GuardedNorm`` in checksum.h): past ``tiny * 2**64`` the squares lost to underflow
    cannot matter, and an infinite sum overflowed."""
    floor = float(jnp.finfo(sq.dtype).tiny) * 2.0**64
    ok = (sq >= floor) & (sq < jnp.inf)
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, sq, 0)), abs1)


def half_ulp(x: jax.Array, dtype: DTypeLike) -> jax.Array:
    """Half the spacing of ``dtype`` (bf16 or f16) at each ``x`` (values of ``dtype`` held
    wider): the most rounding to ``dtype`` can have moved a value; 0 at 0 and non-finite
    ``x`` (``HalfUlp`` in checksum.h)."""
    p, emin = _NARROW[np.dtype(dtype)]
    ax = jnp.abs(x)
    _, e = jnp.frexp(jnp.where(ax > 0, ax, 1))
    hu = jnp.ldexp(jnp.ones_like(ax), jnp.maximum(e - 1, emin) - p)
    return jnp.where((ax > 0) & (ax < jnp.inf), hu, 0)


def column_threshold(model: jax.Array, abs1, norm, flush, c_abs, n2) -> jax.Array:
    """The threshold of each column in the checksums' scaled units (``ColumnThreshold`` in
    checksum.h): ``min(lambda sqrt(V), ceiling) + floors`` from the statistics."""
    f = dict(zip(MODEL_FIELDS, model, strict=True))
    nc = f["c_per_n2"] * n2
    # A clean column has c_abs <= abs1 (up to rounding); the cap keeps a large fault, which
    # raises c_abs, from raising the drift term quadratically.
    kappa = jnp.where(abs1 > 0, jnp.fmin(c_abs / jnp.where(abs1 > 0, abs1, 1), 1), 0)
    # A repeated term's sharp drift without cancellation, back to twice it as kappa -> 0.
    drift = f["drift"] * kappa * (2 - kappa)
    var = f["terms_sq"] * norm * norm + (f["c_sq"] + drift * drift) * nc * nc
    var = var + f["output"] * n2 * n2
    common = f["floor"] + f["flush"] * flush + f["rounding"] * (c_abs + abs1)
    modelled = f["lambda"] * jnp.sqrt(var) + common
    worst = f["ceiling"] * abs1 + common
    return jnp.fmin(modelled, worst) * (1 + f["inflate"])


# --------------------------------------------------------------------------------------------
# the fused row check (tsm2_abft_rows; ffi/abft/row_check.h)

#: Entries of the row check's model vector, in order (``RowModel`` in row_check.h).
ROW_MODEL_FIELDS = (
    "lambda",
    "var",
    "drift",
    "sum_rounding",
    "floor",
    "ceiling",
    "inflate",
    "sq_tiny",
    "entry_factor",
    "entry_floor",
)

#: The false-positive rate a product's row check is sized for (all its rows together).
ROW_FALSE_POSITIVE_RATE = 1e-10


def row_model_vector(
    dtype: DTypeLike, m: int, k: int, n: int, *, flush: bool = False
) -> np.ndarray:
    """The constants of the fused row check of an ``(m, k) @ (k, n)`` product (f64, in the
    order of ``ROW_MODEL_FIELDS``).

    The product runs on CUDA cores in the accumulation dtype (f32 for f32, bf16 and f16 data,
    whose products are exact in f32; f64 for f64), so there is no input rounding. Row ``i``'s
    residual ``sum_j w_j C_ij - A_i . s`` (``w_j`` the column weights, powers of two;
    ``s = B w`` staged as two parts, so that its own rounding is of order ``u^2``) is the
    rounding of ``n + 2`` dot products of ``k`` terms, each modelled as in the module docstring
    (variance proxy ``u^2 (k + 1) (T2 + C^2)``, drift ``(k + 2)/4 u kappa (2 - kappa) |C|``),
    added as if fully correlated (``sqrt(n + 2)``: a row has no random signs). ``lambda`` is
    sized so that a sub-Gaussian tail past it has probability below
    ``ROW_FALSE_POSITIVE_RATE`` over all ``m (n + 2)`` dot products. On top: the rounding of
    ``s``'s two parts and of the check's own f64 sums, underflow (per operation half the
    smallest subnormal where subnormals are kept, as in the CUDA kernels; the smallest normal
    number with ``flush``, for XLA's CPU runtime, which flushes them to zero), and the worst
    case (twice Higham's ``gamma_{k+1}`` on the terms' 1-norm) as the ceiling.

    >>> v = row_model_vector(jnp.float32, 20480, 20480, 8)
    >>> round(float(v[0]), 1), v.dtype  # lambda sqrt(n + 2)
    (26.8, dtype('float64'))
    """
    dtype = np.dtype(dtype)
    acc = np.dtype(np.float64 if dtype == np.float64 else np.float32)
    u, tiny = float(np.finfo(acc).eps) / 2, float(np.finfo(acc).tiny)
    # An operation that underflows errs by at most half the smallest subnormal, or by the
    # smallest normal number where subnormals are flushed to zero.
    sub = tiny if flush else float(np.finfo(acc).smallest_subnormal) / 2
    u_check = float(np.finfo(np.float64).eps) / 2
    lam = max(LAMBDA, math.sqrt(2 * math.log(2 * max(m, 1) * (n + 2) / ROW_FALSE_POSITIVE_RATE)))
    values = {
        "lambda": lam * math.sqrt(n + 2),
        "var": u * u * (k + 1),
        "drift": (k + 2) / 4 * u,
        "sum_rounding": 2 * u * u + 2 * _gamma(n + 3, u_check),
        "floor": 2 * (2 * k + 2) * sub,
        "ceiling": 2 * _gamma(k + 1, u),
        "inflate": 2 * _gamma(k + n + 2, u) + 4 * u,
        "sq_tiny": tiny * 2.0**24 if acc == np.float32 else 2.0**-958,
        "entry_factor": 2 * (_gamma(k, u) + u),
        "entry_floor": 2 * (2 * k + 2) * sub,
    }
    return np.asarray([values[f] for f in ROW_MODEL_FIELDS], np.float64)


def column_weights(b: jax.Array, acc: DTypeLike) -> jax.Array:
    """The fused row check's column weights: ``2^-e_j`` with ``max_l |b_lj| = f 2^e_j``,
    ``f`` in ``[1/2, 1)``, so that every column's largest entry weighs about 1 and a row's
    checksum treats columns of any scale alike. Powers of two in ``acc`` (the weighting is
    exact), clamped to the normal range; a column of zeros or with a non-finite entry
    weighs 1.

    >>> column_weights(jnp.array([[3.0, 0.25], [-8.0, 0.0]]), jnp.float32)
    Array([0.0625, 2.    ], dtype=float32)
    """
    acc = np.dtype(acc)
    top = jnp.max(jnp.abs(b.astype(acc)), axis=0)
    _, e = jnp.frexp(top)
    limit = 120 if acc == np.float32 else 1000
    w = jnp.ldexp(jnp.ones_like(top), -jnp.clip(e, -limit, limit))
    return jnp.where(jnp.isfinite(top) & (top > 0), w, jnp.ones_like(top))


def row_threshold(model, abs1, abs_ch, sq, c_abs, c_sq, ch, weight_sum):
    """Each row's threshold as ``RowThreshold`` in ffi/abft/row_check.h computes it (numpy or
    jax arrays of f64, broadcast together), for column weights ``w`` and ``s = B w``:
    ``abs1 = |A| (|B| w)``, ``abs_ch = |A| |s|``, ``sq = A^2 ((B^2) w^2 + s^2)``,
    ``c_abs``/``c_sq`` the 1-norm and squared 2-norm of the row of ``C w``, ``ch`` the row's
    checksum, ``weight_sum = sum(max(w, 1)) + 2`` (the floor is per unit of weight).

    >>> v = row_model_vector(np.float32, 4, 3, 2)
    >>> float(row_threshold(v, 6.0, 6.0, 24.0, 6.0, 18.0, 6.0, 4.0)) < 1e-4
    True
    """
    xp = jnp if any(isinstance(x, jax.Array) for x in (abs1, sq, c_abs)) else np
    f = dict(zip(ROW_MODEL_FIELDS, model, strict=True))
    # A fault in C or in the checksum cannot raise the threshold past what the terms allow.
    c_abs = xp.fmin(c_abs, 2 * abs1)
    c_sq = xp.fmin(c_sq, 4 * abs1 * abs1)
    ch = xp.fmin(xp.abs(ch), 2 * abs_ch)
    mass = abs1 + abs_ch
    t2 = xp.where((sq >= f["sq_tiny"]) & (sq < np.inf), sq, mass * mass)
    kappa = xp.where(abs1 > 0, xp.minimum(c_abs / xp.where(abs1 > 0, abs1, 1), 1.0), 0.0)
    kappa_ch = xp.where(
        abs_ch > 0, xp.minimum(xp.abs(ch) / xp.where(abs_ch > 0, abs_ch, 1), 1.0), 0.0
    )
    var = f["var"] * (t2 + c_sq + ch * ch)
    drift = f["drift"] * (kappa * (2 - kappa) * c_abs + kappa_ch * (2 - kappa_ch) * xp.abs(ch))
    common = f["sum_rounding"] * (abs1 + c_abs) + f["floor"] * weight_sum
    modelled = f["lambda"] * xp.sqrt(var) + drift + common
    worst = f["ceiling"] * mass + common
    return xp.fmin(modelled, worst) * (1 + f["inflate"])
