"""Algorithm-based fault tolerance (ABFT) for ``C = A @ B``: checksums, verification, correction.

Column checksums with two weight vectors (ones and the ramp ``(i + 1) / m``), in three passes,
one over each matrix: ``encode`` reads ``A`` once for ``W^T A`` and ``1^T |A|`` and ``B`` once
for ``(W^T A) B`` and the threshold's scales ``(1^T |A|) |B|`` and ``1^T |B|``; ``verify``
reads ``C`` once for ``W^T C`` (all scaled by a power of two, ``checksum_scale``, so that they
cannot overflow). Each pass is a weighted column sum, not a matrix product: on CUDA one call of
the ``tsm2_colsums`` kernel (``abft_calls.colsums``: two to four weight rows applied to each row of
the matrix as it streams by, one read near the bandwidth ceiling); elsewhere one XLA reduction
(a variadic ``lax.reduce`` whose terms are elementwise functions of the matrix, so XLA fuses
them and reads the matrix once). A column whose residual ``W^T C - (W^T A) B`` exceeds a
rigorous, data-dependent rounding threshold (or is not finite) is flagged. ``abft_matmul`` then
repairs a single flagged column by recomputing it from the operands (``c[:, j] = a @ b[:, j]``,
one pass over ``A``), which also locates the faulty entries; a clean product does not pay for
the recomputation. On CUDA the ``tsm2_abft_judge`` kernels (``abft_calls.judge``) do it, and
the whole judgement after the pass over ``C``: they flag the columns on the device, recompute
only when one is flagged, write the column into ``C`` in place and assemble the verdict, in
four small kernels and no host round trip. Elsewhere the repair sits in a ``lax.cond``.
(``_SUMS`` and ``_REPAIR`` select other formulations, for benchmarks/abft_overhead.py.)

What was traded for speed: the Huang-Abraham row checksums ``C W`` are gone (checking them
needs ``B`` before ``A`` and ``A`` before ``B``, a fourth pass). A fault is therefore known by
its column only; its row comes from the operands (``abft_matmul``, or ``correct(..., a=, b=)``)
or, without them, from the ratio of the two weighted residuals, which is unambiguous only for
a large error (``|d| > 4 m t_j``; neighbouring weights differ by ``1 / m``). Several faults in
one column are repaired with the operands but may be mislocated without them; faults in two or
more columns are reported as uncorrectable.

Every step is traced JAX: the verdict is a pytree of arrays (no Python branch on data, no
transfer of results), so it works under ``jax.jit`` and ``jax.vmap``. Operands are 2-D; batch
with ``jax.vmap`` (under ``vmap`` the kernels run once per batch entry, and the ``lax.cond``
becomes a select: the recomputation then runs for every entry). XLA's GPU runtime runs a
``lax.cond`` by copying its predicate to the host and waiting for it, which is why CUDA takes
the repair kernels: with the cond the host would wait once per call for all the work queued
before the verdict.

Detection and location limits, in terms of the column threshold ``t_j`` (see ``encode``):
an error ``|d| > 2 t_j`` is always flagged, one well below ``t_j`` (under about ``t_j / 2``)
never is; a flagged error is located and repaired from the operands; without them it is
located for ``|d| > 4 m t_j`` (with f32 checksums and ``m`` beyond about 1600, very large
errors blur the ratio with their own rounding and are reported uncorrectable instead).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike, DTypeLike

from jax_tsm2 import _ffi, abft_calls, config
from jax_tsm2.api import matmul
from jax_tsm2.decision import Decision

__all__ = [
    "Checksums",
    "Residuals",
    "Verdict",
    "abft_matmul",
    "accumulation_dtype",
    "check",
    "checksum_scale",
    "checksum_weights",
    "correct",
    "decide",
    "encode",
    "inject_error",
    "verify",
]

_FLOATS = (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64)


class Checksums(NamedTuple):
    """Reference column checksums of ``A @ B`` and their rounding thresholds (from ``encode``).

    Attributes:
      col: ``(2, n)``, ``s (W^T A) B`` with ``W = checksum_weights(m)`` and ``s =
        checksum_scale(m)``: the column checksums the product should have, scaled so that
        they cannot overflow where the product is finite.
      col_threshold: ``(n,)``, the largest residual rounding alone can cause in column ``j``,
        in the units of ``C`` (unscaled).
      entry_factor, entry_floor: ``()``, the rounding bound of one entry of the product:
        ``|C_ij - (AB)_ij| <= entry_factor (|A||B|)_ij + entry_floor`` (used to locate faulty
        entries against a recomputed column).

    All in the accumulation dtype (``accumulation_dtype``).
    """

    col: jax.Array
    col_threshold: jax.Array
    entry_factor: jax.Array
    entry_floor: jax.Array


class Residuals(NamedTuple):
    """Column checksums of a computed ``C`` minus the reference ones (from ``verify``).

    Attributes:
      col: ``(2, n)``, ``W^T C - (W^T A) B``, in the units of ``C`` (computed scaled, as
        ``Checksums.col``, then unscaled).
      col_threshold, entry_factor, entry_floor: as in ``Checksums``.
      col_flags: ``(n,)`` bool, a residual of column ``j`` exceeds its threshold (or is not
        finite).
    """

    col: jax.Array
    col_threshold: jax.Array
    col_flags: jax.Array
    entry_factor: jax.Array
    entry_floor: jax.Array


class Verdict(NamedTuple):
    """What ``correct`` / ``abft_matmul`` found; every field is an array (``vmap`` adds a dim).

    Attributes:
      errors_detected: int32, a lower bound on the number of faulty entries; 0 for a clean
        product. One flagged column repaired from the operands: the number of its entries that
        differ from the recomputed ones by more than their rounding bound (at least 1).
        Otherwise: the number of flagged columns.
      corrected: bool, the fault was located and repaired (with the operands: the flagged
        column was recomputed, however many entries of it were wrong).
      row: int32, the row of the (largest) faulty entry; -1 when not located.
      col: int32, the flagged column (the worst one when several are); -1 when clean.
      magnitude: computed minus correct value of entry ``(row, col)`` when located, in the
        accumulation dtype; otherwise the flagged column's residual (the sum of its errors);
        0 when clean.
      uncorrectable: bool, something was detected but not repaired (C is returned unchanged).
    """

    errors_detected: jax.Array
    corrected: jax.Array
    row: jax.Array
    col: jax.Array
    magnitude: jax.Array
    uncorrectable: jax.Array


# --------------------------------------------------------------------------------------------
# dtypes, weights, rounding model


def accumulation_dtype(dtype: DTypeLike) -> np.dtype:
    """The dtype checksums are accumulated in for products of ``dtype``.

    bf16/f16 -> f32. f32 -> f64 when ``jax_enable_x64`` is on, else f32: compensated sums would
    cost more arithmetic per element in the fused passes, so we count f32 checksum rounding in
    the threshold instead (it is of the same order as the product's own rounding, so detection
    limits grow by a small factor, see ``encode``). f64 -> f64 (nothing wider on GPUs; again
    counted in the threshold).

    >>> accumulation_dtype(jnp.bfloat16)
    dtype('float32')
    """
    dtype = np.dtype(dtype)
    if dtype == np.float64 or (dtype == np.float32 and jax.config.jax_enable_x64):
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def checksum_weights(n: int, dtype: DTypeLike = jnp.float32) -> jax.Array:
    """The ``(n, 2)`` checksum weights: column 0 all ones, column 1 ``(i + 1) / n``.

    Ones give the plain sum (the error's size); the second, strictly increasing weight tells
    rows apart (the ratio of the two residuals of a single error in row ``i`` is ``w2[i]``).
    ``(i + 1) / n`` rather than the textbook ``i + 1``: it keeps ``|w2| <= |w1| = 1``, so the
    weighted checksum is no larger than the plain one, one rounding bound serves both, and
    nothing grows with ``n`` (``1..n`` weights would scale the checksums and their rounding
    errors by up to ``n`` and overflow f16 ranges). Values are distinct in f32 up to
    ``n = 2**24``.

    >>> checksum_weights(4)
    Array([[1.  , 0.25],
           [1.  , 0.5 ],
           [1.  , 0.75],
           [1.  , 1.  ]], dtype=float32)
    """
    j = jnp.arange(1, n + 1, dtype=dtype)
    return jnp.stack([jnp.ones((n,), dtype), j / jnp.asarray(max(n, 1), dtype)], axis=1)


def _is_full_precision(precision: lax.PrecisionLike) -> bool:
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


def _input_rounding(dtype: np.dtype, precision: lax.PrecisionLike) -> float:
    """Relative error of one product term from rounding f32 operands before the multiply.

    XLA's default f32 precision rounds operands to TF32 (unit roundoff 2**-11) on NVIDIA GPUs and
    to bf16 (2**-8) on TPUs; ``(1 + u)**2 - 1`` per term. bf16/f16 products are exact in the f32
    accumulator and f64 is never rounded, so only f32 pays this.
    """
    if dtype != np.float32 or _is_full_precision(precision):
        return 0.0
    backend = jax.default_backend()
    if backend == "cpu":
        return 0.0
    u = 2.0**-11 if backend in ("gpu", "cuda", "rocm") else 2.0**-8
    return 2 * u + u * u


def _gamma(count: int, u: float) -> float:
    """Higham's gamma_n = n u / (1 - n u): the bound on any n-term sum's relative error."""
    nu = count * u
    return math.inf if nu >= 0.5 else nu / (1 - nu)


class _Rounding(NamedTuple):
    col_factor: float
    col_floor: float  # absolute, in units of the scaled checksums
    col_floor_per_b: float  # times 1^T |B| (column j), scaled units
    col_floor_per_alpha: float  # times sum(alpha), alpha = s 1^T |A|
    entry_factor: float
    entry_floor: float


def _rounding_model(
    dtype: np.dtype, acc: np.dtype, m: int, k: int, precision: lax.PrecisionLike
) -> _Rounding:
    """Relative factors and absolute (underflow) floors of the thresholds; see ``encode``."""
    u_acc = float(jnp.finfo(acc).eps) / 2
    # The product accumulates in the operand dtype, or f32 for bf16/f16, and rounds to dtype.
    prod = np.dtype(np.float64 if dtype == np.float64 else np.float32)
    u_prod = float(jnp.finfo(prod).eps) / 2
    narrow = dtype not in (np.float32, np.float64)
    u_out = float(jnp.finfo(dtype).eps) / 2 if narrow else 0.0
    eta = _input_rounding(dtype, precision) + _gamma(k, u_prod) + 2 * u_out
    # Twice each bracket: second-order terms and the rounding of |A||B| itself.
    col = 2 * (eta + 2 * _gamma(m + 1, u_acc) + _gamma(k + 1, u_acc))
    entry = 2 * (eta + _gamma(k + 1, u_acc))
    # Underflow adds absolute errors no relative bound covers. With flush-to-zero (XLA's
    # CPU dot flushes) a result below the smallest normal number ("tiny") becomes 0, so an
    # operation may lose up to tiny, not half a subnormal: k + 1 per entry of C in the
    # product's accumulator, one per rounding of C to a narrow dtype, two per weighted term
    # of the checksums. An input read as zero (denormals-are-zero) loses |a_il| |b_lj| <=
    # tiny |b_lj| (or tiny |a_il|), a term proportional to the other operand: hence the
    # floor's parts per 1^T |B| and per sum(alpha). The checksums carry the scale s of
    # ``checksum_scale``: C's own losses enter through the weights (<= s), the checksums'
    # own losses unscaled.
    s = checksum_scale(m)
    tiny_p = float(jnp.finfo(prod).tiny)
    tiny_out = float(jnp.finfo(dtype).tiny) if narrow else 0.0
    tiny_acc = float(jnp.finfo(acc).tiny)
    per_entry = (k + 1) * tiny_p + tiny_out
    entry_floor = 2 * (per_entry + (2 * k + 2) * tiny_acc)
    col_floor = 2 * (s * m * per_entry + (2 * m + 2 * k + 4) * tiny_acc)
    per_b = 2 * (s * m * tiny_p + (2 * m + 2) * tiny_acc)
    per_alpha = 2 * (tiny_p + tiny_acc)
    return _Rounding(col, col_floor, per_b, per_alpha, entry, entry_floor)


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


def _check_operands(a: ArrayLike, b: ArrayLike) -> tuple[jax.Array, jax.Array, np.dtype]:
    a, b = jnp.asarray(a), jnp.asarray(b)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(
            f"abft: operands must be 2-D (use jax.vmap for batches), got {a.shape} @ {b.shape}"
        )
    if a.shape[1] != b.shape[0]:
        raise TypeError(f"abft: contracting dimensions differ: {a.shape} @ {b.shape}")
    dtype = np.dtype(jnp.result_type(a, b))
    if dtype not in [np.dtype(d) for d in _FLOATS]:
        raise TypeError(f"abft: needs f16/bf16/f32/f64 operands, got {dtype}")
    return a, b, dtype


# Formulations benchmarks/abft_overhead.py compares on the GPU.
# _SUMS, how the checksum passes are computed: "kernel" (the tsm2_colsums FFI target, one
# read at the streaming ceiling; abft_calls.colsums), "variadic" (one XLA reduce op per pass)
# or "siblings" (one jnp.sum per term, left to XLA's sibling multi-output fusion, GPU only).
# _REPAIR, how the flagged column is recomputed: "kernel" (the tsm2_abft_judge FFI target: its
# kernels flag the columns on the device and recompute only when one is flagged), "cond" (runs
# only when one column is flagged, but XLA's GPU runtime copies the predicate to the host and
# waits for it) or "select" (always recomputed, no host wait; what vmap makes of the cond anyway).
# "auto" picks the kernels on CUDA when this build has them (``decide``; per platform at lowering,
# lax.platform_dependent), and elsewhere siblings on GPUs and the variadic reduce on CPU (on
# the H100, jax 0.11.2, XLA's variadic reduce encoded 8192^2 operands in 1.24 ms against
# 0.43 ms for sibling sums, whose fusions read each matrix twice; on CPU the variadic reduce
# is the one-pass form) and the cond. The kernels need f16/bf16/f32/f64 data (and, for the
# repair, one dtype for a, b and c); other calls take the XLA formulations in any mode.
_SUMS = "auto"
_REPAIR = "auto"
SUMS_MODES = ("auto", "kernel", "variadic", "siblings")
REPAIR_MODES = ("auto", "kernel", "cond", "select")


def _xla_sums_mode() -> str:
    if _SUMS in ("variadic", "siblings"):
        return _SUMS
    return "siblings" if jax.default_backend() == "gpu" else "variadic"


def _fused_sums(terms: Sequence[jax.Array], axis: int) -> tuple[jax.Array, ...]:
    """``tuple(jnp.sum(t, axis) for t in terms)`` as ONE variadic reduction.

    The terms are elementwise functions of one matrix; XLA fuses them into the reduction's
    input, so the matrix is read once for all of them. Separate ``jnp.sum`` calls are fused
    into one multi-output kernel by XLA's GPU sibling fusion but not on CPU; one ``reduce``
    op is one pass on every backend.
    """
    if _xla_sums_mode() == "siblings":
        return tuple(jnp.sum(t, axis=axis) for t in terms)
    zeros = tuple(jnp.zeros((), t.dtype) for t in terms)
    return tuple(lax.reduce(tuple(terms), zeros, lambda x, y: tuple(map(jnp.add, x, y)), (axis,)))


def _check_mode(name: str, value: str, modes: tuple[str, ...]) -> str:
    if value not in modes:
        raise ValueError(f"abft.{name} must be one of {modes}, got {value!r}")
    return value


def _repair_usable(a: np.dtype, b: np.dtype, c: np.dtype, acc: np.dtype) -> bool:
    """The judge kernels take one dtype for a, b and c."""
    return a == b == c and abft_calls.colsums_supported(c, acc)


def _decide(part: str, usable: bool, platform: str) -> Decision:
    """Whether ``part`` ("sums": the checksum passes; "repair": the judgement after the pass
    over C) runs the ABFT kernels on ``platform`` or XLA's formulation (``_SUMS``,
    ``_REPAIR``, the custom-call mode and the build decide; see ``decide``)."""
    name, value, modes = (
        ("_SUMS", _SUMS, SUMS_MODES) if part == "sums" else ("_REPAIR", _REPAIR, REPAIR_MODES)
    )
    setting = _check_mode(name, value, modes)
    decision = lambda target, reason: Decision(
        op=f"abft_{part}", target=target, reason=reason, platform=platform
    )
    if not usable:
        return decision("xla", "operand dtypes the kernels do not take")
    if setting == "kernel":
        return decision("kernels", f"abft.{name} = 'kernel' (CPU: the reference targets)")
    if setting != "auto":
        return decision("xla", f"abft.{name} = {setting!r}")
    if config.get_custom_call_mode() == "never":
        return decision("xla", "custom-call mode 'never'")
    if platform != "cuda":
        return decision("xla", f"XLA's formulation on {platform}")
    # Without a CUDA device this is cross-platform lowering: emit them; with one, this
    # build must contain them.
    if not _ffi.cuda_kernels_usable(_ffi.cuda_abft_available()):
        return decision("xla", "this build of jax_tsm2 has no ABFT kernels for this GPU")
    why = "one read per pass at the streaming ceiling" if part == "sums" else "no host wait"
    return decision("kernels", f"on CUDA the kernels: {why}")


def _by_platform(part: str, usable: bool, kernel, xla, *args):
    """``kernel(*args)`` where ``_decide`` says so, else ``xla(*args)``; per platform at
    lowering (``lax.platform_dependent``) where CUDA and the others differ."""
    pick = lambda d: kernel if d.target == "kernels" else xla
    on_cuda, elsewhere = (pick(_decide(part, usable, p)) for p in ("cuda", "cpu"))
    if on_cuda is elsewhere:
        return on_cuda(*args)
    return lax.platform_dependent(*args, cuda=on_cuda, default=elsewhere)


def decide(a: ArrayLike, b: ArrayLike, *, platform: str = "cuda") -> tuple[Decision, Decision]:
    """How ``abft_matmul(a, b)`` computes its checks on ``platform``: the ``Decision`` of the
    checksum passes (``op="abft_sums"``) and of the repair (``op="abft_repair"``), each
    ``"kernels"`` (``tsm2_colsums``, ``tsm2_abft_judge``) or ``"xla"`` (a fused reduction per
    pass; the repair in a ``lax.cond``). ``a`` and ``b`` may be arrays or
    ``jax.ShapeDtypeStruct``s. ``jax_tsm2.explain.abft`` shows them.

    Example:
        >>> a, b = jnp.ones((64, 32)), jnp.ones((32, 4))
        >>> [d.target for d in decide(a, b, platform="cuda")]
        ['kernels', 'kernels']
        >>> [d.target for d in decide(a, b, platform="cpu")]
        ['xla', 'xla']
    """
    dtypes = [np.dtype(x.dtype) for x in (a, b)]
    c = np.dtype(jnp.result_type(*dtypes))
    acc = accumulation_dtype(c)
    sums = all(abft_calls.colsums_supported(t, acc) for t in (*dtypes, c))
    repair = _repair_usable(*dtypes, c, acc)
    return _decide("sums", sums, platform), _decide("repair", repair, platform)


def _column_sums(
    x: jax.Array, weights: Sequence[jax.Array | float | None], abs_rows: int, acc: np.dtype
) -> tuple[jax.Array, ...]:
    """``sum_i w_q[i] f_q(x[i, :])`` for each weight ``w_q``: a vector, a float (the same for
    every row) or ``None`` (ones), with ``f_q = |.|`` where bit ``q`` of ``abs_rows`` is set:
    one pass over ``x``, in ``acc``."""
    vectors = [w for w in weights if _is_vector(w)]

    def xla(x, *ws):
        xa = x.astype(acc)
        it = iter(ws)
        terms = []
        for q, w in enumerate(weights):
            t = jnp.abs(xa) if abs_rows >> q & 1 else xa
            if _is_vector(w):
                t = next(it)[:, None] * t
            elif w is not None:
                t = jnp.asarray(w, acc) * t
            terms.append(t)
        return _fused_sums(terms, axis=0)

    def kernel(x, *ws):
        it = iter(ws)
        rows = x.shape[0]
        uniform = lambda w: jnp.full((rows,), 1.0 if w is None else w, acc)
        v = jnp.stack([next(it) if _is_vector(w) else uniform(w) for w in weights])
        return tuple(abft_calls.colsums(x, v, abs_rows=abs_rows))

    usable = abft_calls.colsums_supported(x.dtype, acc)
    return _by_platform("sums", usable, kernel, xla, x, *vectors)


def _is_vector(w: jax.Array | float | None) -> bool:
    return w is not None and not isinstance(w, float)


def _threshold(factor: float, scale: jax.Array, floor: jax.Array, acc: np.dtype) -> jax.Array:
    if math.isinf(factor):  # the bound is vacuous; inf * 0 would be NaN (a flag)
        return jnp.full(scale.shape, jnp.inf, acc)
    return (factor * scale + floor).astype(acc)


# --------------------------------------------------------------------------------------------
# encode / verify / correct


def encode(a: ArrayLike, b: ArrayLike, *, precision: lax.PrecisionLike = None) -> Checksums:
    """Reference column checksums of ``a @ b`` and the rounding threshold of each column.

    Two passes (each a ``tsm2_colsums`` call on CUDA, one fused XLA reduction elsewhere): over
    ``A`` for ``s W^T A`` ``(2, k)`` and ``alpha = s 1^T |A|`` ``(k,)``; over ``B`` for
    ``s (W^T A) B`` ``(2, n)``, ``beta = alpha |B|`` ``(n,)`` and ``1^T |B|`` ``(n,)``, all in
    ``accumulation_dtype`` and scaled by ``s = checksum_scale(m)``.

    Args:
      a: ``(m, k)`` floating-point operand.
      b: ``(k, n)`` operand.
      precision: the ``precision`` the product itself is (or will be) computed with; it sets how
        much input rounding (TF32 on GPUs at default precision) the threshold allows for.

    Returns:
      ``Checksums``: ``col = (W^T A) B`` ``(2, n)`` with ``W = checksum_weights(m)``, the
      threshold ``col_threshold`` ``(n,)`` and the per-entry rounding bound.

    Threshold derivation (standard model, Higham ch. 3; ``u`` = unit roundoff). The computed
    product satisfies ``|C^ - AB| <= eta |A||B|`` with ``eta = u_in + gamma_k(u_p) + 2 u_out``
    (input rounding to TF32/bf16 if the precision allows it, accumulation in the product's
    dtype in any order, final rounding of bf16/f16 outputs). The residual of column ``j``,
    ``r = fl(w^T C^) - fl(fl(w^T A) B)``, then obeys
    ``|r| <= (eta + 2 gamma_{m+1}(u_a) + gamma_{k+1}(u_a)) beta_j``: the product's error summed
    down the column, the rounding of the checksum of ``C^`` (``|C^| <= 2|A||B|``) and of the
    two-step reference, with ``u_a`` the accumulation dtype's roundoff. Since
    ``|w2| <= w1 = 1`` one scale ``beta = (1^T |A|) |B|`` serves both weights; we take twice
    the bracket (second-order terms, the rounding of ``beta`` itself) plus an underflow floor:
    with flush-to-zero every operation may lose up to the smallest normal number ``tiny``
    (``k + 1`` per entry of C, two per term of each checksum), and an operand flushed to zero
    loses up to ``tiny`` times the other operand, so the floor is about ``2 s (m (k + 1)
    tiny_p + m tiny_p 1^T |b_j|) + 2 (2 m + 2 k + 4) tiny_acc`` in the scaled units below.
    The checksums are scaled by ``s = checksum_scale(m)`` (a power of two, ``m s <= 1/2``), so
    that no column sum of a finite product overflows: near the top of the range (entries of
    1e38 in f32) the checksums stay finite, and where even ``beta`` overflows the bound is
    vacuous and only a non-finite C is flagged.
    It is a worst-case bound, so clean products are never flagged; the price is the detection
    limit: an error is found only if it exceeds its column's threshold, roughly
    ``2 eta m k mean|a| mean|b|``, i.e. about ``2 eta m sqrt(k)`` times a typical ``|C_ij|``
    of random data (``u_p = 2**-24`` f32, ``2**-53`` f64; TF32 inputs add ``2**-10``; bf16
    outputs add ``2**-8``). Where the checksums round like the product (f64, or f32 without
    x64) their ``2 gamma_m + gamma_k`` joins ``eta``, so the limit grows like ``m (m + k)``
    rather than ``m k``. If ``k u_p >= 1/2`` the bound is vacuous and the threshold is
    ``inf`` (only a non-finite C is flagged).

    >>> a = jnp.ones((4, 3)); b = jnp.ones((3, 2))
    >>> cs = encode(a, b)
    >>> cs.col.shape, cs.col_threshold.shape
    ((2, 2), (2,))
    >>> cs.col[0] / checksum_scale(4)  # 1^T (A B): four rows of 3
    Array([12., 12.], dtype=float32)
    >>> bool((cs.col_threshold > 0).all() & (cs.col_threshold < 1e-3).all())
    True
    """
    a, b, dtype = _check_operands(a, b)
    m, k = a.shape
    acc = accumulation_dtype(dtype)
    sc = checksum_scale(m)
    w2 = checksum_weights(m, acc)[:, 1] * jnp.asarray(sc, acc)
    s1, s2, alpha = _column_sums(a, (sc, w2, sc), 0b100, acc)  # pass over A
    # pass over B; b_abs (1^T |B|) sizes the floor of inputs flushed to zero
    ref1, ref2, beta, b_abs = _column_sums(b, (s1, s2, alpha, None), 0b1100, acc)
    model = _rounding_model(dtype, acc, m, k, precision)
    floor = (
        model.col_floor + model.col_floor_per_b * b_abs + model.col_floor_per_alpha * jnp.sum(alpha)
    )
    # In C's units (an error d in one entry moves a residual by up to d); where that is past
    # the dtype's range the threshold is inf and only a non-finite C fails (``_verify``).
    threshold = _threshold(model.col_factor, beta, floor, acc) / jnp.asarray(sc, acc)
    return Checksums(
        col=jnp.stack([ref1, ref2]),
        col_threshold=threshold,
        entry_factor=jnp.asarray(model.entry_factor, acc),
        entry_floor=jnp.asarray(model.entry_floor, acc),
    )


def _verify(c: jax.Array, checksums: Checksums) -> Residuals:
    acc = np.dtype(checksums.col.dtype)
    m = c.shape[0]
    sc = jnp.asarray(checksum_scale(m), acc)
    w2 = checksum_weights(m, acc)[:, 1] * sc
    got = jnp.stack(_column_sums(c, (checksum_scale(m), w2), 0, acc))  # pass over C
    t = checksums.col_threshold * sc  # the scaled checksums' threshold
    # A vacuous bound (inf) checks nothing but finiteness: the reference may itself have
    # overflowed there, so the residual is NaN exactly where C's checksum is not finite.
    col = jnp.where(jnp.isinf(t)[None, :], got * 0, got - checksums.col)
    # ~(x <= t), not x > t: a NaN residual must flag.
    flags = ~jnp.all(jnp.abs(col) <= t[None, :], axis=0)
    return Residuals(
        col / sc, checksums.col_threshold, flags, checksums.entry_factor, checksums.entry_floor
    )


def verify(c: ArrayLike, checksums: Checksums) -> Residuals:
    """Column checksums of a computed ``c`` minus the reference ones, and which columns fail.

    One pass over ``C`` for ``W^T C`` (a ``tsm2_colsums`` call on CUDA, one fused XLA reduction
    elsewhere). A column is flagged when either
    weighted residual exceeds its threshold, or is not finite (NaN/Inf in ``C`` always flag).

    Args:
      c: the ``(m, n)`` product to check (any float dtype; converted to the checksums' dtype).
      checksums: from ``encode(a, b)``.

    Returns:
      ``Residuals``.

    >>> a = jnp.arange(12.0).reshape(4, 3); b = jnp.ones((3, 2))
    >>> res = verify(a @ b, encode(a, b))
    >>> bool(res.col_flags.any())
    False
    >>> bool(verify((a @ b).at[1, 0].add(1.0), encode(a, b)).col_flags[0])
    True
    """
    # The barrier makes the checksums read the materialized C: without it XLA may fold the
    # conversion into the producing dot and check an unrounded (or re-derived) product instead.
    return _verify(lax.optimization_barrier(jnp.asarray(c)), checksums)


def _locate_by_ratio(r: jax.Array, t: jax.Array, w2: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Index ``i`` with ``r[1] ~= w2[i] r[0]`` from one residual pair, and whether it is unique.

    A single error ``d`` at ``i`` gives ``r = (d + e1, w2[i] d + e2)`` with ``|e| <= t``, so ``i``
    is consistent iff ``|r[1] - w2[i] r[0]| <= t (1 + w2[i])``; the answer is trusted only when
    its neighbours are not consistent too (guaranteed for ``|d| > 4 t size``). The consistent
    indices form an interval (the condition is convex in ``w``), so when it holds more than one
    index, no answer is trusted, whatever the initial guess.
    """
    size = w2.shape[0]
    i = jnp.clip(jnp.round(r[1] / r[0] * size) - 1, 0, size - 1)
    i = jnp.where(jnp.isfinite(i), i, 0).astype(jnp.int32)

    def consistent(idx):
        w = w2[jnp.clip(idx, 0, size - 1)]
        return (jnp.abs(r[1] - w * r[0]) <= t * (1 + w)) & (idx >= 0) & (idx < size)

    return i, consistent(i) & ~consistent(i - 1) & ~consistent(i + 1)


class _Repair(NamedTuple):
    column: jax.Array  # what column j of C becomes (unchanged when not repaired)
    repaired: jax.Array
    bad_entries: jax.Array
    row: jax.Array
    magnitude: jax.Array


def _judge_column(old, exact, scale, factor, floor) -> _Repair:
    """What replaces column ``old`` given its recomputation ``exact`` (and ``|A||b_j|``,
    ``scale``, for each entry's rounding bound), and which of its entries were faulty."""
    acc = factor.dtype
    diff = old.astype(acc) - exact
    bound = factor * scale + floor
    bad = ~(jnp.abs(diff) <= bound)
    row = jnp.argmax(jnp.where(jnp.isfinite(diff), jnp.abs(diff), jnp.inf)).astype(jnp.int32)
    count = jnp.sum(bad, dtype=jnp.int32)
    # "count <= m" always holds; it makes the column (hence C's in-place update) depend on
    # diff, so XLA orders the update after diff's read of C instead of copying C (select mode).
    ok = jnp.all(jnp.isfinite(exact)) & (count <= old.shape[0])
    return _Repair(
        column=jnp.where(ok, exact.astype(old.dtype), old),
        repaired=ok,
        bad_entries=count,
        row=row,
        magnitude=diff[row],
    )


def _recompute_column(a, b, old, j, factor, floor) -> _Repair:
    """Column ``j`` recomputed as ``a @ b[:, j]`` (one pass over A), and its faulty entries."""
    acc = factor.dtype
    a_acc = a.astype(acc)
    bj = lax.dynamic_index_in_dim(b, j, axis=1, keepdims=False).astype(acc)
    exact, scale = _fused_sums((a_acc * bj, jnp.abs(a_acc) * jnp.abs(bj)), axis=1)
    return _judge_column(old, exact, scale, factor, floor)


def _keep_column(a, b, old, j, factor, floor) -> _Repair:
    del a, b, j, floor
    zero = jnp.zeros((), jnp.int32)
    return _Repair(old, jnp.zeros((), bool), zero, zero - 1, jnp.zeros((), factor.dtype))


def _repair_xla(single, c, j, a, b, factor, floor):
    """The repair as XLA ops: a cond (mode "cond", and "auto" off CUDA) or a select."""
    # Only the column goes through the cond, never C itself: a C-sized cond output could
    # cost XLA a copy of C, and the update below is in place.
    old = lax.dynamic_index_in_dim(c, j, axis=1, keepdims=False)
    args = (a, b, old, j, factor, floor)
    if _REPAIR == "select":
        fix = jax.tree.map(
            lambda x, y: jnp.where(single, x, y), _recompute_column(*args), _keep_column(*args)
        )
    else:
        fix = lax.cond(single, _recompute_column, _keep_column, *args)
    c_out = lax.dynamic_update_index_in_dim(c, fix.column, j, axis=1)
    return c_out, fix._replace(column=None)


def _worst_column(s: jax.Array, t: jax.Array, flags: jax.Array):
    """Flagged columns, the worst (largest residual over threshold; NaN/Inf worst) and whether
    it is the only one."""
    n_cols = jnp.sum(flags, dtype=jnp.int32)
    score = jnp.max(jnp.abs(s), axis=0) / jnp.maximum(t, jnp.finfo(s.dtype).tiny)
    j = jnp.argmax(jnp.where(jnp.isfinite(score), score, jnp.inf)).astype(jnp.int32)
    return n_cols, j, n_cols == 1


def _assemble_verdict(n_cols, j, detected, fixed, row, magnitude, acc) -> Verdict:
    nothing = n_cols == 0
    return Verdict(
        errors_detected=detected.astype(jnp.int32),
        corrected=fixed,
        row=jnp.where(nothing, -1, row).astype(jnp.int32),
        col=jnp.where(nothing, -1, j).astype(jnp.int32),
        magnitude=jnp.where(nothing, 0, magnitude).astype(acc),
        uncorrectable=~nothing & ~fixed,
    )


def _correct_xla(c, s, t, flags, factor, floor, a, b) -> tuple[jax.Array, Verdict]:
    """``correct`` with the operands as XLA ops (the repair in a cond or a select)."""
    n_cols, j, single = _worst_column(s, t, flags)
    c_out, fix = _repair_xla(single, c, j, a, b, factor, floor)
    fixed = single & fix.repaired
    detected = jnp.where(single, jnp.maximum(fix.bad_entries, 1), n_cols)
    row = jnp.where(single, fix.row, -1)
    magnitude = jnp.where(single, fix.magnitude, s[0, j])
    return c_out, _assemble_verdict(n_cols, j, detected, fixed, row, magnitude, s.dtype)


def _correct_kernel(c, s, t, flags, factor, floor, a, b) -> tuple[jax.Array, Verdict]:
    """``correct`` with the operands as the tsm2_abft_judge target: the same verdict from four
    small kernels instead of a dozen fusions, and no host round trip."""
    del flags  # the kernel derives them from s and t as _verify does
    # The alias (operand c is result 0) writes the column in place: after the call C has no
    # other use (the pass over C comes before it), so XLA has no reason to copy it first.
    r = abft_calls.judge(s, t, factor, floor, a, b, c)
    return r.c, Verdict(*r[1:])


def correct(
    c: ArrayLike,
    residuals: Residuals,
    *,
    a: ArrayLike | None = None,
    b: ArrayLike | None = None,
) -> tuple[jax.Array, Verdict]:
    """Locate and repair a fault in one column of ``c``; report what was found.

    Exactly one flagged column ``j``:

    - with the operands ``a`` and ``b``: the column is recomputed as ``a @ b[:, j]`` in the
      accumulation dtype (one pass over ``A``) and replaces ``c[:, j]``, whatever and however
      many entries were wrong (NaN/Inf included). Entries that differed from the recomputed
      ones by more than their rounding bound are counted and the worst is reported. A clean
      product does not pay for the recomputation: on CUDA the ``tsm2_abft_judge`` kernels
      flag the columns on the device (no host wait) and write the column in place; elsewhere
      it sits in a ``lax.cond`` (which under ``jax.vmap`` becomes a select: every batch entry
      pays it). A NaN/Inf recomputation (non-finite operands) repairs nothing.
    - without them: the row comes from the ratio of the two weighted residuals, trusted only
      when unambiguous (a single error larger than about ``4 m`` times the column threshold),
      and the entry is repaired by subtracting the residual (accurate to the threshold).
      Otherwise the column is reported, the row is -1 and the fault is uncorrectable. Several
      faults in the column can look like one at another row: pass the operands when that
      matters.

    Two or more flagged columns: uncorrectable, ``errors_detected`` is the number of flagged
    columns, ``c`` is returned unchanged (as it is whenever nothing was repaired).

    Args:
      c: the ``(m, n)`` product that was verified.
      residuals: ``verify(c, encode(a, b))``.
      a, b: optionally the operands, for the exact repair.

    Returns:
      ``(c_repaired, Verdict)``; ``c_repaired`` has ``c``'s dtype.

    >>> a = jnp.arange(12.0).reshape(4, 3); b = jnp.ones((3, 2))
    >>> cs = encode(a, b)
    >>> bad = inject_error(a @ b, 2, 1, 5.0)
    >>> fixed, v = correct(bad, verify(bad, cs))
    >>> int(v.errors_detected), bool(v.corrected), int(v.row), int(v.col), float(v.magnitude)
    (1, True, 2, 1, 5.0)
    >>> bool(jnp.allclose(fixed, a @ b))
    True
    >>> bad = inject_error(bad, 0, 1, -1.0)  # a second error in the same column
    >>> fixed, v = correct(bad, verify(bad, cs), a=a, b=b)
    >>> int(v.errors_detected), bool(v.corrected), int(v.row), float(v.magnitude)
    (2, True, 2, 5.0)
    >>> bool(jnp.array_equal(fixed, a @ b))
    True
    """
    c = jnp.asarray(c)
    m, n = c.shape
    acc = residuals.col.dtype
    s, t = residuals.col, residuals.col_threshold
    zero_i = jnp.zeros((), jnp.int32)
    if m == 0 or n == 0:
        false = jnp.zeros((), bool)
        return c, Verdict(zero_i, false, zero_i - 1, zero_i - 1, jnp.zeros((), acc), false)

    if a is not None and b is not None:
        a, b, _ = _check_operands(a, b)
        if a.shape[0] != m or b.shape[1] != n:
            raise TypeError(f"abft.correct: operands {a.shape} @ {b.shape} do not give {c.shape}")
        usable = _repair_usable(a.dtype, b.dtype, c.dtype, acc)
        args = (c, s, t, residuals.col_flags, residuals.entry_factor, residuals.entry_floor, a, b)
        return _by_platform("repair", usable, _correct_kernel, _correct_xla, *args)

    n_cols, j, single = _worst_column(s, t, residuals.col_flags)
    old = lax.dynamic_index_in_dim(c, j, axis=1, keepdims=False)
    wm = checksum_weights(m, acc)[:, 1]
    # The threshold bounds the checksum rounding of a clean column; a large error adds
    # its own, up to gamma_{m+1} |error| on each weighted sum.
    slack = 2 * _gamma(m + 1, float(jnp.finfo(acc).eps) / 2) * jnp.abs(s[0, j])
    i, sure = _locate_by_ratio(s[:, j], t[j] + slack, wm)
    new = old[i].astype(acc) - s[0, j]
    fixed = single & sure & jnp.isfinite(new)
    row = jnp.where(single & sure, i, -1)
    new_column = old.at[i].set(jnp.where(fixed, new.astype(c.dtype), old[i]))
    c_out = lax.dynamic_update_index_in_dim(c, new_column, j, axis=1)
    return c_out, _assemble_verdict(n_cols, j, n_cols, fixed, row, s[0, j], acc)


def check(
    c: ArrayLike,
    checksums: Checksums,
    *,
    a: ArrayLike | None = None,
    b: ArrayLike | None = None,
) -> tuple[jax.Array, Verdict]:
    """``correct(c, verify(c, checksums), a=a, b=b)``: verify a product and repair it.

    >>> a = jnp.ones((8, 5)); b = jnp.ones((5, 3))
    >>> c, v = check(inject_error(a @ b, 6, 2, 1e3), encode(a, b), a=a, b=b)
    >>> int(v.row), int(v.col), float(v.magnitude), bool(jnp.array_equal(c, a @ b))
    (6, 2, 1000.0, True)
    """
    # One barrier feeds both the checksum pass and the repair, so the in-place column update
    # and the pass read the same buffer (see ``verify``).
    c = lax.optimization_barrier(jnp.asarray(c))
    return correct(c, _verify(c, checksums), a=a, b=b)


def abft_matmul(
    a: ArrayLike, b: ArrayLike, *, precision: lax.PrecisionLike = None
) -> tuple[jax.Array, Verdict]:
    """``jax_tsm2.matmul(a, b)`` with ABFT: the (repaired) product and a ``Verdict``.

    Encodes column checksums of the operands (one pass over ``A``, one over ``B``), computes the
    product, verifies it (one pass over ``C``) and, when exactly one column is flagged,
    recomputes that column from ``a`` and ``b`` (see ``correct``). A fault inside the product
    is not observable from the outside; to exercise detection, use ``encode`` /
    ``inject_error`` / ``check`` (as the tests do). jit-able and vmap-able (batch with
    ``jax.vmap``; operands are 2-D; under ``vmap`` the repair's ``lax.cond``, where it is one,
    runs for every entry). On CUDA the whole check is three ``tsm2_colsums`` passes and a
    ``tsm2_abft_judge`` call (four small kernels, no recomputation for a clean product): no
    host round trip.

    Args:
      a: ``(m, k)`` f16/bf16/f32/f64 operand.
      b: ``(k, n)`` operand.
      precision: as for ``jax_tsm2.matmul``; also sets the threshold's input-rounding term.

    Returns:
      ``(c, verdict)``; ``c`` has ``jnp.matmul(a, b)``'s dtype.

    >>> a = jnp.ones((64, 32)); b = jnp.ones((32, 4))
    >>> c, v = jax.jit(abft_matmul)(a, b)
    >>> c.shape, int(v.errors_detected), bool(v.uncorrectable)
    ((64, 4), 0, False)
    """
    a, b, _ = _check_operands(a, b)
    checksums = encode(a, b, precision=precision)
    c = matmul(a, b, precision=precision)
    return check(c, checksums, a=a, b=b)


def inject_error(c: ArrayLike, row: ArrayLike, col: ArrayLike, delta: ArrayLike) -> jax.Array:
    """``c`` with ``delta`` added to entry ``(row, col)`` (a simulated silent fault; for tests).

    The addition happens in ``c``'s dtype, so the injected error is ``delta`` as rounded there.

    >>> inject_error(jnp.zeros((2, 2)), 1, 0, 3.0)
    Array([[0., 0.],
           [3., 0.]], dtype=float32)
    """
    c = jnp.asarray(c)
    return c.at[row, col].add(jnp.asarray(delta).astype(c.dtype))
