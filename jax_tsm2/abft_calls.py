"""The ABFT FFI targets: weighted column sums in one read, and a column repair on the device.

* ``colsums(m, v, abs_rows=...)`` (target ``tsm2_colsums``): ``out[q, :] = sum_i v[q, i] *
  f_q(m[i, :])`` for up to four weight rows ``v[q]``, with ``f_q = |.|`` where bit ``q`` of
  ``abs_rows`` is set; ``m`` is read once. ``jax_tsm2.abft``'s checksum passes are three such
  calls (over ``A``, ``B`` and ``C``).
* ``repair_column(flag, j, a, b, c, acc=...)`` (target ``tsm2_repair_column``): when the device
  scalar ``flag`` is set, recomputes column ``j`` of ``c = a @ b`` in place (accumulated in
  ``acc``); otherwise returns at once. It replaces ``lax.cond`` on GPUs, whose predicate XLA
  copies to the host and waits for.
* ``judge(resid, threshold, factor, floor, a, b, c)`` (target ``tsm2_abft_judge``): everything
  ``jax_tsm2.abft.correct`` does with the operands after the checksum pass over ``C`` (which
  columns fail, the repair of a single failing one, the verdict) in four small kernels rather
  than a dozen XLA fusions.
* ``encode(a, b, acc=...)`` (target ``tsm2_abft_encode``): ``jax_tsm2.abft.Checksums.stats``,
  from one pass over ``A`` and one over ``B`` (``ffi/abft/checksum.h``); ``verify(c, stats,
  model)`` (target ``tsm2_abft_verify``): the residuals and thresholds of ``c``, from one pass
  over ``C``; with ``inject=(row, col, bit)`` (target ``tsm2_abft_verify_inject``) the pass
  first flips that bit of ``C`` in its read and writes it back, and returns ``C`` too.

On CUDA these are the kernels of ``ffi/abft/kernels/colsums.cuh``, ``repair_column.cuh``,
``judge.cuh`` and ``passes.cuh``; on CPU, plain-loop references. Every check happens here, at trace
time: an error returned by a CUDA handler has crashed the process under jax 0.11. Under
``jax.vmap`` each call runs once per batch element (``vmap_method="sequential"``). None has a
derivative.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike, DTypeLike

from jax_tsm2 import _compat, _ffi, abft_model

__all__ = [
    "ACC_DTYPES",
    "MAX_WEIGHT_ROWS",
    "RepairedColumn",
    "colsums",
    "colsums_supported",
    "encode",
    "judge",
    "repair_column",
    "rows",
    "rows_supported",
    "verify",
]

MAX_WEIGHT_ROWS = 4
ACC_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_ELEMENT_DTYPES = tuple(jnp.dtype(t) for t in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64))


def colsums_supported(dtype: DTypeLike, acc: DTypeLike) -> bool:
    """Whether ``tsm2_colsums`` takes data of ``dtype`` with weights and sums in ``acc``.

    >>> colsums_supported(jnp.bfloat16, jnp.float32), colsums_supported(jnp.int32, jnp.float32)
    (True, False)
    """
    return jnp.dtype(dtype) in _ELEMENT_DTYPES and np.dtype(acc) in ACC_DTYPES


def colsums(m: ArrayLike, v: ArrayLike, *, abs_rows: int = 0) -> jax.Array:
    """Weighted column sums ``out[q, :] = sum_i v[q, i] * f_q(m[i, :])``, reading ``m`` once.

    Args:
      m: ``(rows, cols)`` data, f16/bf16/f32/f64.
      v: ``(r, rows)`` weights, ``1 <= r <= 4``, f32 or f64: the accumulation dtype (every
        product and sum is taken in it, whatever ``m``'s dtype).
      abs_rows: bit mask; weight row ``q`` multiplies ``|m|`` where bit ``q`` is set.

    Returns:
      ``(r, cols)`` in ``v``'s dtype. On CUDA the sums' order is fixed by the shape and the
      GPU alone (bitwise reproducible); it differs from the CPU reference's.

    >>> m = jnp.array([[-1.0, 2.0], [3.0, -4.0]], jnp.float32)
    >>> v = jnp.array([[1.0, 1.0], [1.0, 1.0]], jnp.float32)
    >>> colsums(m, v, abs_rows=0b10)  # plain sums, then sums of |m|
    Array([[ 2., -2.],
           [ 4.,  6.]], dtype=float32)
    """
    m, v = jnp.asarray(m), jnp.asarray(v)
    if m.ndim != 2 or v.ndim != 2:
        raise ValueError(
            f"colsums: m must be (rows, cols) and v (r, rows), got m{m.shape} and v{v.shape}"
        )
    if not colsums_supported(m.dtype, v.dtype):
        raise TypeError(
            f"colsums: m must be f16/bf16/f32/f64 and v f32/f64 (the accumulation dtype), "
            f"got m {m.dtype} and v {v.dtype}"
        )
    r, rows = v.shape
    if not 1 <= r <= MAX_WEIGHT_ROWS or rows != m.shape[0]:
        raise ValueError(
            f"colsums: v must be (r, rows) with 1 <= r <= {MAX_WEIGHT_ROWS} and rows = m's "
            f"{m.shape[0]}, got v{v.shape} for m{m.shape}"
        )
    if not isinstance(abs_rows, (int, np.integer)) or not 0 <= abs_rows < 2**r:
        raise ValueError(f"colsums: abs_rows must be an int in [0, 2**{r}), got {abs_rows!r}")
    cols = m.shape[1]
    workspace = _ffi.colsums_plan(m.dtype, v.dtype, r, rows, cols)["workspace_bytes"]
    # Under shard_map the results vary over the axes the operands vary over.
    m, v = _compat.match_varying(m, v)
    out = lambda shape, dtype: _compat.shape_dtype_struct(shape, dtype, m)
    call = jax.ffi.ffi_call(
        _ffi.COLSUMS_TARGET,
        (out((r, cols), v.dtype), out((workspace,), jnp.uint8)),
        vmap_method="sequential",
    )
    return call(m, v, abs_rows=np.int32(abs_rows))[0]


def _check_repair_operands(name: str, a: jax.Array, b: jax.Array, c: jax.Array, acc) -> np.dtype:
    """Shapes and dtypes of ``c = a @ b`` for the repair targets; returns ``acc`` as a dtype."""
    if a.ndim != 2 or b.ndim != 2 or c.ndim != 2:
        raise ValueError(f"{name}: a, b, c must be 2-D, got {a.shape}, {b.shape}, {c.shape}")
    (m, k), n = a.shape, b.shape[1]
    if b.shape[0] != k or c.shape != (m, n):
        raise TypeError(
            f"{name}: need a (m, k), b (k, n), c (m, n); got {a.shape}, {b.shape}, {c.shape}"
        )
    if not (a.dtype == b.dtype == c.dtype and a.dtype in _ELEMENT_DTYPES):
        raise TypeError(
            f"{name}: a, b and c must share one dtype of f16/bf16/f32/f64, got "
            f"{a.dtype}, {b.dtype}, {c.dtype}"
        )
    acc = np.dtype(acc)
    if acc not in ACC_DTYPES:
        raise TypeError(f"{name}: acc must be float32 or float64, got {acc}")
    return acc


class RepairedColumn(NamedTuple):
    """What ``repair_column`` returns.

    Attributes:
      c: ``c`` with column ``j`` replaced by ``exact`` rounded to ``c``'s dtype when ``flag``
        was set and every entry of ``exact`` is finite; otherwise ``c`` unchanged.
      old_col: ``(m,)``, column ``j`` of ``c`` before the repair.
      exact: ``(m,)``, ``a @ b[:, j]`` in the accumulation dtype.
      scale: ``(m,)``, ``|a| @ |b[:, j]|`` in the accumulation dtype (for rounding bounds).

    ``old_col``, ``exact`` and ``scale`` are written only when ``flag`` is set: otherwise their
    contents are undefined, so mask them with the flag.
    """

    c: jax.Array
    old_col: jax.Array
    exact: jax.Array
    scale: jax.Array


def repair_column(
    flag: ArrayLike,
    j: ArrayLike,
    a: ArrayLike,
    b: ArrayLike,
    c: ArrayLike,
    *,
    acc: DTypeLike,
) -> RepairedColumn:
    """Recompute column ``j`` of ``c = a @ b`` on the device when the device scalar ``flag`` is set.

    Without a host round trip: the kernels read ``flag`` and ``j`` themselves and return at
    once when ``flag`` is 0 (the cost is then two kernel launches). The result ``c`` aliases
    the operand ``c`` (``input_output_aliases``): XLA writes the column in place when ``c`` has
    no other use after the call, and copies ``c`` first otherwise (so the semantics are those
    of a pure function either way).

    Args:
      flag: bool or integer scalar (array); repair when nonzero.
      j: integer scalar (array), the column; out of ``[0, n)`` means no repair.
      a: ``(m, k)``; ``b``: ``(k, n)``; ``c``: ``(m, n)``; one dtype (f16/bf16/f32/f64).
      acc: the accumulation dtype, f32 or f64.

    Returns:
      ``RepairedColumn(c, old_col, exact, scale)``.

    >>> a = jnp.ones((3, 2), jnp.float32); b = jnp.ones((2, 4), jnp.float32)
    >>> bad = (a @ b).at[1, 2].set(7.0)
    >>> r = repair_column(True, 2, a, b, bad, acc=jnp.float32)
    >>> r.c[:, 2]
    Array([2., 2., 2.], dtype=float32)
    >>> r.old_col, r.exact
    (Array([2., 7., 2.], dtype=float32), Array([2., 2., 2.], dtype=float32))
    """
    flag, j = jnp.asarray(flag), jnp.asarray(j)
    a, b, c = jnp.asarray(a), jnp.asarray(b), jnp.asarray(c)
    if flag.shape != () or j.shape != ():
        raise ValueError(f"repair_column: flag and j must be scalars, got {flag.shape}, {j.shape}")
    if not (flag.dtype == jnp.bool_ or jnp.issubdtype(flag.dtype, jnp.integer)):
        raise TypeError(f"repair_column: flag must be bool or an integer, got {flag.dtype}")
    if not jnp.issubdtype(j.dtype, jnp.integer):
        raise TypeError(f"repair_column: j must be an integer, got {j.dtype}")
    acc = _check_repair_operands("repair_column", a, b, c, acc)
    (m, _), n = a.shape, b.shape[1]
    if flag.dtype != jnp.bool_:
        flag = flag.astype(jnp.int32)
    j = j.astype(jnp.int32)
    flag, j, a, b, c = _compat.match_varying(flag, j, a, b, c)
    out = lambda shape, dtype: _compat.shape_dtype_struct(shape, dtype, c)
    call = jax.ffi.ffi_call(
        _ffi.REPAIR_TARGET,
        (
            out((m, n), c.dtype),
            out((m,), c.dtype),
            out((m,), acc),
            out((m,), acc),
            out((_ffi.repair_blocks(m),), jnp.int32),
        ),
        vmap_method="sequential",
        # Operand 4 (c) and result 0 share one buffer: the column is written in place.
        input_output_aliases={4: 0},
    )
    c_out, old_col, exact, scale, _ = call(flag, j, a, b, c)
    return RepairedColumn(c_out, old_col, exact, scale)


class Judgement(NamedTuple):
    """What ``judge`` returns: the (repaired) product and the fields of ``abft.Verdict``."""

    c: jax.Array
    errors_detected: jax.Array
    corrected: jax.Array
    row: jax.Array
    col: jax.Array
    magnitude: jax.Array
    uncorrectable: jax.Array


def judge(
    resid: ArrayLike,
    threshold: ArrayLike,
    factor: ArrayLike,
    floor: ArrayLike,
    a: ArrayLike,
    b: ArrayLike,
    c: ArrayLike,
) -> Judgement:
    """``jax_tsm2.abft.correct(c, residuals, a=a, b=b)`` as one FFI call, for ``m, n >= 1``.

    A column fails when a residual exceeds its threshold (or is not finite); when exactly one
    fails, the worst (largest residual over threshold, first on ties) is recomputed as
    ``a @ b[:, j]`` in ``resid``'s dtype and written into ``c`` in place (``c`` aliases the
    result, as for ``repair_column``); the entries that differed by more than
    ``factor * |a||b[:, j]| + floor`` are counted and the largest is located. The verdict is
    assembled as ``correct`` does it.

    Args:
      resid: ``(2, n)`` residuals ``W^T C - (W^T A) B`` in the accumulation dtype (f32/f64).
      threshold: ``(n,)`` their bounds; ``factor``, ``floor``: scalars of the entry bound.
      a: ``(m, k)``; ``b``: ``(k, n)``; ``c``: ``(m, n)``; one dtype (f16/bf16/f32/f64).

    Returns:
      ``Judgement(c, errors_detected, corrected, row, col, magnitude, uncorrectable)``.

    >>> a = jnp.ones((3, 2), jnp.float32); b = jnp.ones((2, 4), jnp.float32)
    >>> bad = (a @ b).at[1, 2].set(7.0)
    >>> resid = jnp.zeros((2, 4)).at[:, 2].set(5.0)  # column 2 sums 5 too high
    >>> j = judge(resid, jnp.full((4,), 1e-3), 1e-6, 0.0, a, b, bad)
    >>> j.c[:, 2], int(j.errors_detected), int(j.row), int(j.col), float(j.magnitude)
    (Array([2., 2., 2.], dtype=float32), 1, 1, 2, 5.0)
    """
    resid, threshold = jnp.asarray(resid), jnp.asarray(threshold)
    a, b, c = jnp.asarray(a), jnp.asarray(b), jnp.asarray(c)
    acc = _check_repair_operands("judge", a, b, c, resid.dtype)
    (m, _), n = a.shape, b.shape[1]
    if m == 0 or n == 0:
        raise ValueError(f"judge: needs m, n >= 1, got a{a.shape} and b{b.shape}")
    if resid.shape != (2, n) or threshold.shape != (n,) or threshold.dtype != acc:
        raise ValueError(
            f"judge: resid must be (2, n) and threshold (n,) in one float dtype, n = {n}; got "
            f"resid{resid.shape} {resid.dtype} and threshold{threshold.shape} {threshold.dtype}"
        )
    factor, floor = jnp.asarray(factor, acc), jnp.asarray(floor, acc)
    if factor.shape != () or floor.shape != ():
        raise ValueError(f"judge: factor, floor must be scalars, got {factor.shape}, {floor.shape}")
    operands = _compat.match_varying(resid, threshold, factor, floor, a, b, c)
    out = lambda shape, dtype: _compat.shape_dtype_struct(shape, dtype, c)
    scalar_i, scalar_b = out((), jnp.int32), out((), jnp.bool_)
    call = jax.ffi.ffi_call(
        _ffi.JUDGE_TARGET,
        (
            out((m, n), c.dtype),
            scalar_i,
            scalar_b,
            scalar_i,
            scalar_i,
            out((), acc),
            scalar_b,
            out((m,), c.dtype),
            out((m,), acc),
            out((m,), acc),
            out((_ffi.judge_state_size(m),), jnp.int32),
        ),
        vmap_method="sequential",
        input_output_aliases={6: 0},  # c is written in place, as in repair_column
    )
    return Judgement(*call(*operands)[:7])


def _check_pass_data(name: str, x: jax.Array, acc) -> np.dtype:
    if x.ndim != 2 or min(x.shape) < 1:
        raise ValueError(f"{name}: needs a 2-D operand with no empty dimension, got {x.shape}")
    acc = np.dtype(acc)
    if x.dtype not in _ELEMENT_DTYPES or acc not in ACC_DTYPES:
        raise TypeError(
            f"{name}: data must be f16/bf16/f32/f64 and acc f32/f64, got {x.dtype} and {acc}"
        )
    return acc


def encode(a: ArrayLike, b: ArrayLike, *, acc: DTypeLike) -> jax.Array:
    """``jax_tsm2.abft.Checksums.stats`` of ``a @ b``: one pass over ``a``, one over ``b``.

    Args:
      a: ``(m, k)``; ``b``: ``(k, n)``; one dtype (f16/bf16/f32/f64), no empty dimension.
      acc: the dtype of the result (f32 or f64); the sums themselves run in f64, or in
        double-double for f64 data.

    Returns:
      ``(7, n)`` in ``acc`` (rows: ``ffi/abft/checksum.h``, ``AbftStat``).

    >>> a = jnp.ones((4, 3), jnp.float32); b = jnp.ones((3, 2), jnp.float32)
    >>> encode(a, b, acc=jnp.float32)[4]  # s sum_i sum_l |a_il b_lj| = 12 / 8
    Array([1.5, 1.5], dtype=float32)
    """
    a, b = jnp.asarray(a), jnp.asarray(b)
    acc = _check_pass_data("encode", a, acc)
    _check_pass_data("encode", b, acc)
    if b.shape[0] != a.shape[1] or a.dtype != b.dtype:
        raise TypeError(
            f"encode: need a (m, k) and b (k, n) of one dtype, got {a.shape} "
            f"{a.dtype} and {b.shape} {b.dtype}"
        )
    (m, k), n = a.shape, b.shape[1]
    workspace = _ffi.abft_encode_workspace(a.dtype, m, k, n)
    a, b = _compat.match_varying(a, b)
    out = lambda shape, dtype: _compat.shape_dtype_struct(shape, dtype, a)
    call = jax.ffi.ffi_call(
        _ffi.ENCODE_TARGET,
        (out((7, n), acc), out((workspace,), jnp.uint8)),
        vmap_method="sequential",
    )
    return call(a, b)[0]


def verify(
    c: ArrayLike,
    stats: ArrayLike,
    model: ArrayLike,
    *,
    inject: tuple[int, int, int] | None = None,
) -> tuple[jax.Array, ...]:
    """The checksum residuals of ``c`` and their thresholds (``C``'s units), from one pass.

    Args:
      c: ``(m, n)`` f16/bf16/f32/f64, no empty dimension.
      stats: ``(7, n)`` from ``encode``; ``model``: ``(12,)``
        (``jax_tsm2.abft_model.model_vector``); both in one dtype, f32 or f64.
      inject: ``(row, col, bit)``: first flip bit ``bit`` of ``c[row, col]`` in the pass's
        own read and write it back (``tsm2_abft_verify_inject``; ``c`` is then aliased to
        the first result, so XLA copies it first where it has other uses).

    Returns:
      ``(resid (2, n), threshold (n,))`` in ``stats``' dtype; with ``inject``,
      ``(c_with_fault, resid, threshold)``.

    >>> a = jnp.ones((4, 3), jnp.float32); b = jnp.ones((3, 2), jnp.float32)
    >>> from jax_tsm2 import abft_model
    >>> model = abft_model.model_vector(jnp.float32, 4, 3, None, jnp.float32, extended_sums=True)
    >>> resid, t = verify(a @ b, encode(a, b, acc=jnp.float32), jnp.asarray(model, jnp.float32))
    >>> resid
    Array([[0., 0.],
           [0., 0.]], dtype=float32)
    """
    c, stats, model = jnp.asarray(c), jnp.asarray(stats), jnp.asarray(model)
    acc = _check_pass_data("verify", c, stats.dtype)
    (m, n) = c.shape
    if stats.shape != (7, n) or model.shape != (12,) or model.dtype != acc:
        raise ValueError(
            f"verify: need stats (7, {n}) and model (12,) of one dtype for c{c.shape}, got "
            f"stats{stats.shape} {stats.dtype} and model{model.shape} {model.dtype}"
        )
    workspace = _ffi.abft_verify_workspace(c.dtype, m, n)
    c, stats, model = _compat.match_varying(c, stats, model)
    out = lambda shape, dtype: _compat.shape_dtype_struct(shape, dtype, c)
    results = (out((2, n), acc), out((n,), acc), out((workspace,), jnp.uint8))
    if inject is None:
        call = jax.ffi.ffi_call(_ffi.VERIFY_TARGET, results, vmap_method="sequential")
        return tuple(call(c, stats, model)[:2])
    row, col, bit = (int(x) for x in inject)
    call = jax.ffi.ffi_call(
        _ffi.VERIFY_INJECT_TARGET,
        (out((m, n), c.dtype), *results),
        vmap_method="sequential",
        input_output_aliases={0: 0},  # the fault is written into c
    )
    attrs = {"inject_row": np.int64(row), "inject_col": np.int64(col), "inject_bit": np.int32(bit)}
    return tuple(call(c, stats, model, **attrs)[:3])


def rows_supported(dtype: DTypeLike, m: int, k: int, n: int) -> bool:
    """Whether ``tsm2_abft_rows`` takes an ``(m, k) @ (k, n)`` product of ``dtype`` data:
    f16/bf16/f32/f64, no empty dimension, ``n`` within the row stream's widths (16
    columns for f32, 8 for the others), and sums short enough
    for the rounding model (``k u < 0.1``)."""
    dtype = np.dtype(dtype)
    if dtype not in _ELEMENT_DTYPES or min(m, k, n) < 1:
        return False
    u = float(np.finfo(np.float64 if dtype == np.float64 else np.float32).eps) / 2
    return k * u < 0.1 and _ffi.abft_rows_workspace(dtype, m, k, n) is not None


def rows(
    a: ArrayLike,
    b: ArrayLike,
    *,
    inject: tuple[int, int, int] | None = None,
) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    """``a @ b`` with the fused row check (``tsm2_abft_rows``): one read of ``a``.

    The row stream (``ffi/matmul/kernels/row_stream.cuh``) computes each row of ``C`` with its
    checksum ``a_i . (b w)`` (``w``: ``abft_model.column_weights(b)``) and the magnitudes of
    its rounding bound from the same loads; the kernel that adds its splits compares every row
    with its threshold (``abft_model.row_model_vector``), and flagged rows are recomputed from
    ``a`` and ``b`` on the device (at most 32 of them; past that the product is reported
    uncorrectable and left as computed). On CPU a plain-loop reference computes the same; XLA's
    CPU runtime flushes subnormals to zero, so its threshold allows for that
    (``row_model_vector(..., flush=True)``), where the CUDA kernels underflow gradually.

    Args:
      a: ``(m, k)``; ``b``: ``(k, n)``; one dtype, ``rows_supported``.
      inject: ``(row, col, bit)``: flip bit ``bit`` of ``C[row, col]`` as the check's kernel
        stores it, before the check (tests).

    Returns:
      ``(c, (errors_detected, corrected, row, col, magnitude, uncorrectable))``: ``c`` in the
      accumulation dtype (f32 for f16/bf16/f32 data), the verdict as
      ``jax_tsm2.abft.Verdict``'s fields.

    >>> a, b = jnp.ones((8, 64)), jnp.ones((64, 2))
    >>> c, verdict = rows(a, b, inject=(3, 1, 30))
    >>> float(c[3, 1]), [int(v) for v in verdict[:4]]  # errors, corrected, row, col
    (64.0, [1, 1, 3, 1])
    """
    a, b = jnp.asarray(a), jnp.asarray(b)
    (m, k), n = a.shape, b.shape[-1]
    if a.ndim != 2 or b.ndim != 2 or b.shape[0] != k or a.dtype != b.dtype:
        raise TypeError(
            f"rows: need a (m, k) and b (k, n) of one dtype, got {a.shape} {a.dtype} and "
            f"{b.shape} {b.dtype}"
        )
    if not rows_supported(a.dtype, m, k, n):
        raise ValueError(f"rows: tsm2_abft_rows does not take {a.dtype} ({m}, {k}) @ ({k}, {n})")
    acc = np.dtype(np.float64 if a.dtype == np.float64 else np.float32)
    if inject is not None:
        row, col, bit = (int(x) for x in inject)
        if not (0 <= row < m and 0 <= col < n and 0 <= bit < 8 * acc.itemsize):
            raise ValueError(
                f"rows: inject {inject} must name an entry of the ({m}, {n}) product and a bit "
                f"of its {acc} value"
            )
    workspace = _ffi.abft_rows_workspace(a.dtype, m, k, n)
    weights = abft_model.column_weights(b, acc)
    a, b, weights = _compat.match_varying(a, b, weights)
    out = lambda shape, dtype: _compat.shape_dtype_struct(shape, dtype, a)
    results = (
        out((m, n), acc),
        out((), jnp.int32),
        out((), jnp.bool_),
        out((), jnp.int32),
        out((), jnp.int32),
        out((), acc),
        out((), jnp.bool_),
        out((workspace,), jnp.uint8),
    )
    row, col, bit = inject if inject is not None else (-1, -1, 0)
    attrs = {
        "b_t": False,
        "inject_row": np.int64(row),
        "inject_col": np.int64(col),
        "inject_bit": np.int32(bit),
    }

    def call(flush: bool):
        model = abft_model.row_model_vector(a.dtype, m, k, n, flush=flush)
        target = jax.ffi.ffi_call(_ffi.ROWS_TARGET, results, vmap_method="sequential")
        return lambda a, b, w: tuple(target(a, b, w, model=model, **attrs)[:7])

    c, *verdict = lax.platform_dependent(a, b, weights, cuda=call(False), default=call(True))
    return c, tuple(verdict)
