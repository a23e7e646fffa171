"""Algorithm-based fault tolerance (ABFT) for ``C = A @ B``: checksums, verification, correction.

Huang-Abraham style full checksums with two weight vectors on each side. ``encode`` turns the
operands into reference checksums of the product with tall-and-skinny products (``B @ W``,
``A @ (B W)``, ``W^T A``, ``(W^T A) @ B``, all through ``jax_tsm2.matmul``) plus a rigorous
rounding threshold per row and per column; ``verify`` computes the same checksums of a computed
``C`` (``C @ W`` and ``W^T C``) and the residuals; ``correct`` flags rows and columns whose
residual exceeds its threshold, locates a single faulty entry, repairs it with a functional update
and reports what it found. ``abft_matmul`` chains the four. Every step is traced JAX: the verdict
is a pytree of arrays (no host round trip, no Python branch on data), so it works under
``jax.jit`` and ``jax.vmap``. Operands are 2-D; batch with ``jax.vmap``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike, DTypeLike

from jax_tsm2.api import matmul

__all__ = [
    "Checksums",
    "Residuals",
    "Verdict",
    "abft_matmul",
    "accumulation_dtype",
    "check",
    "checksum_weights",
    "correct",
    "encode",
    "inject_error",
    "verify",
]

_FLOATS = (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64)


class Checksums(NamedTuple):
    """Reference checksums of ``A @ B`` and their rounding thresholds (from ``encode``).

    Attributes:
      row: ``(m, 2)``, ``A @ (B @ W_n)``: the row checksums the product should have.
      col: ``(2, n)``, ``(W_m^T @ A) @ B``: the column checksums it should have.
      row_threshold: ``(m,)``, the largest residual rounding alone can cause in row ``i``.
      col_threshold: ``(n,)``, the same for column ``j``.

    All in the accumulation dtype (``accumulation_dtype``).
    """

    row: jax.Array
    col: jax.Array
    row_threshold: jax.Array
    col_threshold: jax.Array


class Residuals(NamedTuple):
    """Checksums of a computed ``C`` minus the reference ones (from ``verify``).

    Attributes:
      row: ``(m, 2)``, ``C @ W_n - A @ (B @ W_n)``.
      col: ``(2, n)``, ``W_m^T @ C - (W_m^T @ A) @ B``.
      row_threshold, col_threshold: as in ``Checksums``.
      row_flags: ``(m,)`` bool, a residual of row ``i`` exceeds its threshold (or is not finite).
      col_flags: ``(n,)`` bool, the same for column ``j``.
    """

    row: jax.Array
    col: jax.Array
    row_threshold: jax.Array
    col_threshold: jax.Array
    row_flags: jax.Array
    col_flags: jax.Array


class Verdict(NamedTuple):
    """What ``correct`` / ``abft_matmul`` found; every field is an array (``vmap`` adds a dim).

    Attributes:
      errors_detected: int32, a lower bound on the number of faulty entries: the larger of the
        number of flagged rows and flagged columns, at least 2 when one row and one column are
        flagged but their weighted checksums disagree (two errors); 0 for a clean product.
      corrected: bool, exactly one error was found, located and repaired.
      row, col: int32, its location (the worst flagged row / column when uncorrectable); -1 for
        a side where nothing was flagged or located.
      magnitude: the size of the error (computed minus correct value), in the accumulation
        dtype; the repair applied when ``corrected``, else the largest row/column residual; 0
        when clean.
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

    bf16/f16 -> f32. f32 -> f64 when ``jax_enable_x64`` is on, else f32: compensated or pairwise
    sums would need a hand-written reduction instead of a (tall-and-skinny) matrix product, so we
    keep the dot and count f32 checksum rounding in the threshold instead (it is of the same order
    as the product's own rounding, so detection limits grow by a small factor, see ``encode``).
    f64 -> f64 (nothing wider on GPUs; again counted in the threshold).

    >>> accumulation_dtype(jnp.bfloat16)
    dtype('float32')
    """
    dtype = np.dtype(dtype)
    if dtype == np.float64 or (dtype == np.float32 and jax.config.jax_enable_x64):
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def checksum_weights(n: int, dtype: DTypeLike = jnp.float32) -> jax.Array:
    """The ``(n, 2)`` checksum weights: column 0 all ones, column 1 ``(j + 1) / n``.

    Ones give the plain sum (the error's size); the second, strictly increasing weight tells
    columns apart (the ratio of the two residuals of a single error is ``w2[j]``), so a row's
    residual pair alone locates the column. ``(j + 1) / n`` rather than the textbook ``j + 1``:
    it keeps ``|w2| <= |w1| = 1``, so the weighted checksum is no larger than the plain one, one
    rounding bound serves both, and nothing grows with ``n`` (``1..n`` weights would scale the
    checksums and their rounding errors by up to ``n`` and overflow f16 ranges). Values are
    distinct in f32 up to ``n = 2**24``.

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
    """Higham's gamma_n = n u / (1 - n u): the bound on a recursive sum's relative error."""
    nu = count * u
    return math.inf if nu >= 0.5 else nu / (1 - nu)


def _threshold_factors(
    dtype: np.dtype, acc: np.dtype, m: int, k: int, n: int, precision: lax.PrecisionLike
) -> tuple[float, float, float]:
    """(row factor, column factor, absolute floor) of the thresholds; see ``encode``."""
    u_acc = float(jnp.finfo(acc).eps) / 2
    # The product accumulates in the operand dtype, or f32 for bf16/f16, and rounds to dtype.
    u_prod = float(jnp.finfo(np.float64 if dtype == np.float64 else np.float32).eps) / 2
    u_out = 0.0 if dtype in (np.float32, np.float64) else float(jnp.finfo(dtype).eps) / 2
    eta = _input_rounding(dtype, precision) + _gamma(k, u_prod) + 2 * u_out
    ref = 3 * _gamma(k + 1, u_acc)
    row = 2 * (eta + 2 * _gamma(n, u_acc) + ref)
    col = 2 * (eta + 2 * _gamma(m, u_acc) + ref)
    # Gradual underflow adds absolute errors (half a subnormal per operation) that no relative
    # bound covers; a few per term of the longest sum is plenty.
    sub = max(float(jnp.finfo(dtype).smallest_subnormal), float(jnp.finfo(acc).smallest_subnormal))
    floor = 4 * (k + m + n + 2) * sub
    return row, col, floor


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


# --------------------------------------------------------------------------------------------
# encode / verify / correct


def encode(a: ArrayLike, b: ArrayLike, *, precision: lax.PrecisionLike = None) -> Checksums:
    """Reference row and column checksums of ``a @ b``, and the rounding threshold of each.

    Args:
      a: ``(m, k)`` floating-point operand.
      b: ``(k, n)`` operand.
      precision: the ``precision`` the product itself is (or will be) computed with; it sets how
        much input rounding (TF32 on GPUs at default precision) the threshold allows for. The
        checksums themselves always run at ``HIGHEST`` in ``accumulation_dtype``.

    Returns:
      ``Checksums``: ``row = A (B W_n)`` ``(m, 2)``, ``col = (W_m^T A) B`` ``(2, n)``, and the
      thresholds ``row_threshold`` ``(m,)``, ``col_threshold`` ``(n,)``.

    Threshold derivation (standard model, Higham ch. 3; ``u`` = unit roundoff). The computed
    product satisfies ``|C^ - AB| <= eta |A||B|`` with ``eta = u_in + gamma_k(u_p) + 2 u_out``
    (input rounding to TF32/bf16 if the precision allows it, accumulation in the product's
    dtype, final rounding of bf16/f16 outputs). The row residual ``r = fl(C^ w) - fl(A fl(B w))``
    then obeys ``|r| <= (eta + 2 gamma_n(u_a) + 3 gamma_{k+1}(u_a)) (|A| (|B| |w|))``: the
    product's error summed along the row, the rounding of the checksum of ``C^``
    (``|C^| <= 2|A||B|``) and of the two-step reference, with ``u_a`` the accumulation dtype's
    roundoff. Since ``|w2| <= w1 = 1`` one bound ``beta = |A| (|B| 1)`` serves both weights;
    we take twice the bracket (covering second-order terms and the rounding of ``beta`` itself)
    plus an underflow floor. Columns swap ``n`` for ``m`` and use ``(1^T |A|) |B|``. It is a
    worst-case bound, so clean products are never flagged; the price is the detection limit:
    an error is found only if it exceeds the threshold of its row or column, roughly
    ``2 eta n k mean|a| mean|b|`` for a row, i.e. about ``2 eta n sqrt(k)`` times a typical
    ``|C_ij|`` of random data (``u_p = 2**-24`` f32, ``2**-53`` f64; bf16 outputs add
    ``u_out = 2**-9``). If ``k u_p >= 1/2`` the bound is vacuous and the threshold is ``inf``.

    >>> a = jnp.ones((4, 3)); b = jnp.ones((3, 2))
    >>> cs = encode(a, b)
    >>> cs.row.shape, cs.col.shape, cs.row_threshold.shape
    ((4, 2), (2, 2), (4,))
    >>> bool((cs.row_threshold > 0).all() & (cs.row_threshold < 1e-3).all())
    True
    """
    a, b, dtype = _check_operands(a, b)
    m, k = a.shape
    n = b.shape[1]
    acc = accumulation_dtype(dtype)
    hi = lax.Precision.HIGHEST
    a_acc, b_acc = a.astype(acc), b.astype(acc)
    wn, wm = checksum_weights(n, acc), checksum_weights(m, acc)
    row = matmul(a_acc, matmul(b_acc, wn, precision=hi), precision=hi)  # (m, 2): TSM2R twice
    col = matmul(matmul(wm.T, a_acc, precision=hi), b_acc, precision=hi)  # (2, n)
    abs_a, abs_b = jnp.abs(a_acc), jnp.abs(b_acc)
    row_beta = matmul(abs_a, jnp.sum(abs_b, axis=1, dtype=acc), precision=hi)  # |A| (|B| 1)
    col_beta = matmul(jnp.sum(abs_a, axis=0, dtype=acc), abs_b, precision=hi)  # (1^T |A|) |B|
    f_row, f_col, floor = _threshold_factors(dtype, acc, m, k, n, precision)
    return Checksums(
        row=row,
        col=col,
        row_threshold=(f_row * row_beta + floor).astype(acc),
        col_threshold=(f_col * col_beta + floor).astype(acc),
    )


def verify(c: ArrayLike, checksums: Checksums) -> Residuals:
    """Checksums of a computed ``c`` minus the reference ones, and which rows/columns fail.

    Reads ``C`` for ``C @ W_n`` and ``W_m^T @ C`` (two tall-and-skinny products; a fused
    single-pass kernel is GPU work for later). A row or column is flagged when either weighted
    residual exceeds its threshold, or is not finite (NaN/Inf in ``C`` are always flagged).

    Args:
      c: the ``(m, n)`` product to check (any float dtype; converted to the checksums' dtype).
      checksums: from ``encode(a, b)``.

    Returns:
      ``Residuals``.

    >>> a = jnp.arange(12.0).reshape(4, 3); b = jnp.ones((3, 2))
    >>> res = verify(a @ b, encode(a, b))
    >>> bool(res.row_flags.any() | res.col_flags.any())
    False
    """
    acc = checksums.row.dtype
    # The barrier makes the checksums read the materialized C: without it XLA may fold the
    # conversion into the producing dot and check an unrounded (or re-derived) product instead.
    c = lax.optimization_barrier(jnp.asarray(c)).astype(acc)
    m, n = c.shape
    hi = lax.Precision.HIGHEST
    row = matmul(c, checksum_weights(n, acc), precision=hi) - checksums.row
    col = matmul(checksum_weights(m, acc).T, c, precision=hi) - checksums.col
    # ~(x <= t), not x > t: a NaN residual must flag.
    row_flags = ~jnp.all(jnp.abs(row) <= checksums.row_threshold[:, None], axis=1)
    col_flags = ~jnp.all(jnp.abs(col) <= checksums.col_threshold[None, :], axis=0)
    return Residuals(
        row, col, checksums.row_threshold, checksums.col_threshold, row_flags, col_flags
    )


def _locate_by_ratio(r: jax.Array, t: jax.Array, w2: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Index ``j`` with ``r[1] ~= w2[j] r[0]`` from one residual pair, and whether it is unique.

    A single error ``d`` at ``j`` gives ``r = (d + e1, w2[j] d + e2)`` with ``|e| <= t``, so ``j``
    is consistent iff ``|r[1] - w2[j] r[0]| <= t (1 + w2[j])``; the answer is trusted only when
    its neighbours are not consistent too (``|d|`` well above ``2 t n``).
    """
    size = w2.shape[0]
    j = jnp.clip(jnp.round(r[1] / r[0] * size) - 1, 0, size - 1)
    j = jnp.where(jnp.isfinite(j), j, 0).astype(jnp.int32)

    def consistent(idx):
        w = w2[jnp.clip(idx, 0, size - 1)]
        return (jnp.abs(r[1] - w * r[0]) <= t * (1 + w)) & (idx >= 0) & (idx < size)

    return j, consistent(j) & ~consistent(j - 1) & ~consistent(j + 1)


def correct(
    c: ArrayLike,
    residuals: Residuals,
    *,
    a: ArrayLike | None = None,
    b: ArrayLike | None = None,
) -> tuple[jax.Array, Verdict]:
    """Locate and repair a single faulty entry of ``c``; report what was found.

    One flagged row ``i`` and one flagged column ``j``: the error is at ``(i, j)`` if both
    residual pairs agree with it (``r_row[1] ~= w2[j] r_row[0]``, ``r_col[1] ~= w2[i] r_col[0]``,
    ``r_row[0] ~= r_col[0]``, all within the thresholds); otherwise at least two entries are
    wrong. Only a row (or only a column) flagged, as happens when the error is between the row
    and column detection limits: the other index comes from the weighted residual ratio, trusted
    only when it is unambiguous. More than one flagged row or column: uncorrectable.

    The repair subtracts the checksum residual (``r_row[0]`` or ``r_col[0]``, whichever side
    has the smaller threshold), which is accurate to that threshold. Given the operands ``a``
    and ``b``, the entry is instead recomputed as ``a[i] @ b[:, j]`` in the accumulation dtype
    (O(k) work; exact to rounding, and it also repairs NaN/Inf). Uncorrectable => ``c`` is
    returned unchanged.

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
    """
    c = jnp.asarray(c)
    m, n = c.shape
    acc = residuals.row.dtype
    r, s = residuals.row, residuals.col
    tr, tc = residuals.row_threshold, residuals.col_threshold
    zero_i = jnp.zeros((), jnp.int32)
    if m == 0 or n == 0:
        false = jnp.zeros((), bool)
        return c, Verdict(zero_i, false, zero_i - 1, zero_i - 1, jnp.zeros((), acc), false)

    n_rows = jnp.sum(residuals.row_flags, dtype=jnp.int32)
    n_cols = jnp.sum(residuals.col_flags, dtype=jnp.int32)

    def worst(res, thr, axis):
        # Largest residual relative to its threshold; a NaN/Inf residual counts as worst.
        score = jnp.max(jnp.abs(res), axis=axis) / jnp.maximum(thr, jnp.finfo(acc).tiny)
        return jnp.argmax(jnp.where(jnp.isfinite(score), score, jnp.inf)).astype(jnp.int32)

    i_flag, j_flag = worst(r, tr, 1), worst(s, tc, 0)
    wn, wm = checksum_weights(n, acc)[:, 1], checksum_weights(m, acc)[:, 1]
    j_ratio, j_sure = _locate_by_ratio(r[i_flag], tr[i_flag], wn)
    i_ratio, i_sure = _locate_by_ratio(s[:, j_flag], tc[j_flag], wm)

    both = (n_rows == 1) & (n_cols == 1)
    row_only = (n_rows == 1) & (n_cols == 0)
    col_only = (n_rows == 0) & (n_cols == 1)
    i = jnp.where(col_only, i_ratio, i_flag)
    j = jnp.where(row_only, j_ratio, j_flag)
    ri, sj, ti, tj = r[i], s[:, j], tr[i], tc[j]
    agree = (
        (jnp.abs(ri[1] - wn[j] * ri[0]) <= ti * (1 + wn[j]))
        & (jnp.abs(sj[1] - wm[i] * sj[0]) <= tj * (1 + wm[i]))
        & (jnp.abs(ri[0] - sj[0]) <= ti + tj)
    )
    # A single NaN/Inf entry makes exactly its row's and column's residuals non-finite.
    agree = agree | ~(jnp.isfinite(ri[0]) | jnp.isfinite(sj[0]))
    located = (both & agree) | (row_only & j_sure) | (col_only & i_sure)

    detected = jnp.maximum(n_rows, n_cols)
    detected = jnp.where(both & ~agree, jnp.maximum(detected, 2), detected)
    # The side with the smaller threshold measures the error more accurately.
    estimate = jnp.where(col_only | (both & (tj < ti)), sj[0], ri[0])
    old = c[i, j].astype(acc)
    if a is not None and b is not None:
        a_arr, b_arr = jnp.asarray(a).astype(acc), jnp.asarray(b).astype(acc)
        new = jnp.dot(a_arr[i], b_arr[:, j], precision=lax.Precision.HIGHEST)
        magnitude = old - new
    else:
        new, magnitude = old - estimate, estimate
    fixed = located & (detected == 1) & jnp.isfinite(new)
    c_out = c.at[i, j].set(jnp.where(fixed, new.astype(c.dtype), c[i, j]))

    nothing = detected == 0
    row_out = jnp.where(fixed | (n_rows > 0), i, -1)
    col_out = jnp.where(fixed | (n_cols > 0), j, -1)
    mag_out = jnp.where(
        fixed,
        magnitude,
        jnp.where(n_rows > 0, r[i_flag, 0], jnp.where(n_cols > 0, s[0, j_flag], 0)),
    )
    verdict = Verdict(
        errors_detected=detected,
        corrected=fixed,
        row=jnp.where(nothing, -1, row_out).astype(jnp.int32),
        col=jnp.where(nothing, -1, col_out).astype(jnp.int32),
        magnitude=jnp.where(nothing, 0, mag_out).astype(acc),
        uncorrectable=~nothing & ~fixed,
    )
    return c_out, verdict


def check(
    c: ArrayLike,
    checksums: Checksums,
    *,
    a: ArrayLike | None = None,
    b: ArrayLike | None = None,
) -> tuple[jax.Array, Verdict]:
    """``correct(c, verify(c, checksums), a=a, b=b)``: verify a product and repair it."""
    return correct(c, verify(c, checksums), a=a, b=b)


def abft_matmul(
    a: ArrayLike, b: ArrayLike, *, precision: lax.PrecisionLike = None
) -> tuple[jax.Array, Verdict]:
    """``jax_tsm2.matmul(a, b)`` with ABFT: the (repaired) product and a ``Verdict``.

    Encodes checksums of the operands, computes the product, verifies it, repairs a single
    faulty entry exactly (recomputing it from ``a`` and ``b``) and reports. A fault inside the
    product is not observable from the outside; to exercise detection, use ``encode`` /
    ``inject_error`` / ``check`` (as the tests do). jit-able and vmap-able (batch with
    ``jax.vmap``; operands are 2-D).

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
