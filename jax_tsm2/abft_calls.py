"""The ABFT FFI targets: weighted column sums in one read, and a column repair on the device.

* ``colsums(m, v, abs_rows=...)`` (target ``tsm2_colsums``): ``out[q, :] = sum_i v[q, i] *
  f_q(m[i, :])`` for up to four weight rows ``v[q]``, with ``f_q = |.|`` where bit ``q`` of
  ``abs_rows`` is set; ``m`` is read once. ``jax_tsm2.abft``'s checksum passes are three such
  calls (over ``A``, ``B`` and ``C``).
* ``repair_column(flag, j, a, b, c, acc=...)`` (target ``tsm2_repair_column``): when the device
  scalar ``flag`` is set, recomputes column ``j`` of ``c = a @ b`` in place (accumulated in
  ``acc``); otherwise returns at once. It replaces ``lax.cond`` on GPUs, whose predicate XLA
  copies to the host and waits for.

On CUDA these are the kernels of ``ffi/kernels/colsums.cuh`` and ``ffi/kernels/repair_column.cuh``;
on CPU, plain-loop references (for tests). Every check happens here, at trace time: an error
returned by a CUDA handler has crashed jax 0.11 (benchmarks/NOTES.md). Under ``jax.vmap`` each
call runs once per batch element (``vmap_method="sequential"``). Neither has a derivative.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from jax_tsm2 import _compat, _ffi

__all__ = [
    "ACC_DTYPES",
    "MAX_WEIGHT_ROWS",
    "RepairedColumn",
    "colsums",
    "colsums_supported",
    "repair_column",
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
    if a.ndim != 2 or b.ndim != 2 or c.ndim != 2:
        raise ValueError(f"repair_column: a, b, c must be 2-D, got {a.shape}, {b.shape}, {c.shape}")
    (m, k), n = a.shape, b.shape[1]
    if b.shape[0] != k or c.shape != (m, n):
        raise TypeError(
            f"repair_column: need a (m, k), b (k, n), c (m, n); got {a.shape}, {b.shape}, {c.shape}"
        )
    if not (a.dtype == b.dtype == c.dtype and a.dtype in _ELEMENT_DTYPES):
        raise TypeError(
            "repair_column: a, b and c must share one dtype of f16/bf16/f32/f64, got "
            f"{a.dtype}, {b.dtype}, {c.dtype}"
        )
    acc = np.dtype(acc)
    if acc not in ACC_DTYPES:
        raise TypeError(f"repair_column: acc must be float32 or float64, got {acc}")
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
