"""User-facing products with ``jax.numpy`` and ``jax.lax`` semantics.

``matmul`` behaves like ``jnp.matmul`` (shapes, broadcasting, dtype
promotion, weak types, errors) and ``dot_general`` like ``lax.dot_general``
(dimension numbers, result dimension order, result dtype, errors). Both
compute through the ``tsm2_matmul`` primitive by one path,
``primitive.broadcast_product``, whose lowering picks the TSM2 kernels or
XLA's dot. What does not fit the kernels' contract falls back to
``jnp.matmul`` / ``lax.dot_general`` itself, so the result is always the one
jax gives:

- integer, bool and complex operands, and float types other than f16, bf16,
  f32, f64 (e.g. float8);
- a ``preferred_element_type`` that is not one of those four float types;
- for ``dot_general``: operands of two different dtypes, and dimension
  numbers that are not one matrix product per batch entry (see its docstring).

Transposes are not materialised on our path: ``dot_general`` maps its
dimension numbers to an operand layout (nn, nt, tn), and a ``b.T`` or ``a.T``
passed to ``matmul`` is folded into the layout when the product is lowered
(``primitive.py``).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import numpy as np
from jax import lax
from jax import numpy as jnp
from jax.typing import ArrayLike, DTypeLike

from jax_tsm2 import _compat, routing
from jax_tsm2.primitive import broadcast_product


def _type_str(x: jax.Array) -> str:
    return f"{np.dtype(x.dtype).name}[{','.join(map(str, x.shape))}]"


def _check_shapes(a: jax.Array, b: jax.Array) -> None:
    """jnp.matmul's shape rules, checked in the same order (batch, then contraction)."""
    a_batch = a.shape[:-2] if a.ndim > 1 else ()
    b_batch = b.shape[:-2] if b.ndim > 1 else ()
    for x, y in zip(reversed(a_batch), reversed(b_batch), strict=False):
        if x != y and 1 not in (x, y):
            raise ValueError(
                f"Incompatible types for matmul arguments: {_type_str(a)} and {_type_str(b)} "
                f"(batch dimensions {a_batch} and {b_batch} do not broadcast)"
            )
    ka = a.shape[-1]
    kb = b.shape[-2] if b.ndim > 1 else b.shape[0]
    if ka != kb:
        raise TypeError(
            f"matmul: contracting dimensions differ: {_type_str(a)} has {ka} columns but "
            f"{_type_str(b)} has {kb} rows"
        )


def _ours(a: jax.Array, b: jax.Array, compute: np.dtype, out: np.dtype) -> bool:
    dtypes = (np.dtype(a.dtype), np.dtype(b.dtype), compute, out)
    return all(d in routing.SUPPORTED_DTYPES for d in dtypes)


def matmul(
    a: ArrayLike,
    b: ArrayLike,
    *,
    precision: lax.PrecisionLike = None,
    preferred_element_type: DTypeLike | None = None,
) -> jax.Array:
    """Matrix product with the semantics of ``jnp.matmul``; TSM2 kernels where they win.

    Args:
      a: array of shape ``(k,)`` or ``(..., m, k)``.
      b: array of shape ``(k,)`` or ``(..., k, n)``; leading dimensions
        broadcast against those of ``a``.
      precision: as for ``jnp.matmul``. The TSM2 kernels always compute at full
        precision (f32 FMAs, never TF32; f32 accumulation for bf16/f16), which
        meets any ``lax.Precision``; dot algorithms (``"BF16_BF16_F32"`` etc.)
        run on XLA's dot.
      preferred_element_type: as for ``jnp.matmul``: accumulate in and return
        this dtype. For bf16/f16 operands, ``jnp.float32`` lets the kernels
        write their f32 accumulators directly.

    Returns:
      The product; shape and dtype as ``jnp.matmul(a, b)`` would give.

    Raises:
      ValueError: an operand is 0-d, or batch dimensions do not broadcast.
      TypeError: the contracting dimensions differ, or an operand is not an array.

    Whether a call runs the TSM2 kernels or XLA's dot is decided when it is
    lowered, from its static shapes and dtypes (``jax_tsm2.routing``) and the
    custom-call mode (``jax_tsm2.custom_call_mode``): by default a kernel runs
    only where it is measured or predicted faster than XLA's dot.

    Example:
        >>> import jax, jax.numpy as jnp, jax_tsm2
        >>> a = jnp.ones((4096, 256))
        >>> b = jnp.ones((256, 8))
        >>> c = jax.jit(jax_tsm2.matmul)(a, b)  # XLA's dot or TSM2R: see routing
        >>> c.shape, float(c[0, 0])
        ((4096, 8), 256.0)
    """
    a, b = _compat.ensure_arraylike("matmul", a, b)
    for i, x in enumerate((a, b)):
        if x.ndim < 1:
            raise ValueError(
                f"matmul input operand {i} must have ndim at least 1, but it has ndim {x.ndim}"
            )
    compute, weak = _compat.result_type_and_weak(a, b)
    if preferred_element_type is None:
        out, out_weak = compute, weak
    else:
        out = _compat.canonicalize_user_dtype(preferred_element_type, "matmul")
        out_weak = False
    if not _ours(a, b, compute, out):
        return jnp.matmul(a, b, precision=precision, preferred_element_type=preferred_element_type)
    _check_shapes(a, b)
    precision = _compat.canonicalize_precision(precision)

    a = lax.convert_element_type(a, compute)  # no-op when already that dtype
    b = lax.convert_element_type(b, compute)
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    if a_vec:
        a = a[None, :]
    if b_vec:
        b = b[:, None]
    rank = max(a.ndim, b.ndim)
    a = a.reshape((1,) * (rank - a.ndim) + a.shape)
    b = b.reshape((1,) * (rank - b.ndim) + b.shape)

    c = broadcast_product(a, b, out_dtype=out, precision=precision)
    if b_vec:
        c = c[..., 0]
    if a_vec:
        c = c[..., 0] if b_vec else c[..., 0, :]
    return _compat.with_weak_type(c, out_weak)


def _index_tuple(x: Any) -> tuple[int, ...]:
    """An int or a sequence of ints as a tuple (what lax accepts for each dimension group)."""
    return tuple(int(i) for i in np.ravel(np.asarray(x, dtype=np.int64)))


def _layout_of(lhs_ndim: int, rhs_ndim: int, dimension_numbers: Any) -> tuple[str, bool] | None:
    """``(layout, fold)`` of a ``lax.dot_general`` our primitive computes, else None.

    Ours: one contracting dimension per side, no batch dimension or one at
    position 0 of both operands, and each operand a matrix besides it. Then
    lhs ``[m, k]`` with rhs ``[k, n]`` is nn, with rhs ``[n, k]`` nt, and lhs
    ``[k, m]`` with rhs ``[k, n]`` tn; lhs ``[k, m]`` with rhs ``[n, k]`` (both
    transposed) is no layout of ours. ``fold``: without batch dimensions, an
    lhs ``[..., k]`` contracted over its last dimension is the matrix
    ``[prod(...), k]`` (a free reshape; a dense layer's ``x @ W``).
    """
    (lc, rc), (lb, rb) = dimension_numbers
    lc, rc, lb, rb = map(_index_tuple, (lc, rc, lb, rb))
    nb = len(lb)
    if len(lc) != 1 or len(rc) != 1 or nb > 1 or len(rb) != nb:
        return None
    if nb == 0 and lhs_ndim > 2 and rhs_ndim == 2 and lc[0] == lhs_ndim - 1:
        return ("nn" if rc[0] == 0 else "nt"), True
    if nb and (lb[0] != 0 or rb[0] != 0):
        return None  # moving a batch dim to the front would be a transpose in memory
    if lhs_ndim != nb + 2 or rhs_ndim != nb + 2:
        return None
    flags = (lc[0] - nb == 0, rc[0] - nb == 1)  # (lhs stored [k, m], rhs stored [n, k])
    layout = {(False, False): "nn", (False, True): "nt", (True, False): "tn"}.get(flags)
    return None if layout is None else (layout, False)


def dot_general(
    lhs: ArrayLike,
    rhs: ArrayLike,
    dimension_numbers: Any,
    precision: lax.PrecisionLike = None,
    preferred_element_type: DTypeLike | None = None,
) -> jax.Array:
    """General dot product with the semantics of ``lax.dot_general``; TSM2 kernels where they win.

    Args:
      lhs, rhs: arrays.
      dimension_numbers: ``((lhs_contracting, rhs_contracting), (lhs_batch,
        rhs_batch))``, as for ``lax.dot_general``.
      precision: as for ``lax.dot_general`` (see ``matmul`` for what the kernels do).
      preferred_element_type: as for ``lax.dot_general``.

    Returns:
      What ``lax.dot_general`` returns: dimensions (batch, lhs free, rhs free),
      the same dtype and weak type.

    Raises:
      TypeError, ValueError: whatever ``lax.dot_general`` raises for these
        arguments (bad dimension numbers, mismatched sizes), at trace time.

    The ``tsm2_matmul`` primitive computes the product (routing then picks a
    kernel or XLA's dot when it is lowered) when both operands share one of
    the dtypes f16, bf16, f32, f64, the result dtype is one of them, and the
    dimension numbers describe one matrix product per batch entry: one
    contracting dimension on each side, at most one batch dimension, at
    position 0 of both operands, and each operand two-dimensional besides it.
    The contracting dimensions pick the layout, so no operand is transposed:

    - lhs ``[m, k]``, rhs ``[k, n]``: nn (``a @ b``);
    - lhs ``[m, k]``, rhs ``[n, k]``: nt (``a @ b.T``, k-means' ``X @ C.T``);
    - lhs ``[k, m]``, rhs ``[k, n]``: tn (``a.T @ b``, Gram matrices).

    Without batch dimensions, an lhs ``[..., k]`` contracted over its last
    dimension with a matrix rhs is the matrix ``[prod(...), k]`` (a reshape,
    free). Everything else is ``lax.dot_general`` itself: lhs ``[k, m]`` with rhs
    ``[n, k]`` (both transposed: the result's transpose would have to be
    written), several contracting or batch dimensions, a batch dimension not
    in front (moving it would copy the operand; XLA's dot reads it in place),
    vectors and higher ranks, mixed or non-float dtypes.

    Example:
        >>> import jax, jax.numpy as jnp, jax_tsm2
        >>> x, c = jnp.ones((1000, 16)), jnp.ones((8, 16))
        >>> jax_tsm2.dot_general(x, c, (((1,), (1,)), ((), ()))).shape  # X @ C.T: nt
        (1000, 8)
        >>> jax_tsm2.dot_general(x, x, (((0,), (0,)), ((), ()))).shape  # X.T @ X: tn
        (16, 16)
    """
    lhs, rhs = _compat.ensure_arraylike("dot_general", lhs, rhs)
    lhs, rhs = jnp.asarray(lhs), jnp.asarray(rhs)
    reference = functools.partial(
        lax.dot_general,
        dimension_numbers=dimension_numbers,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )
    want = jax.eval_shape(reference, lhs, rhs)  # lax's checks, errors and result type
    out = np.dtype(want.dtype)
    ours = _layout_of(lhs.ndim, rhs.ndim, dimension_numbers)
    same = np.dtype(lhs.dtype) == np.dtype(rhs.dtype)
    if ours is None or not same or not _ours(lhs, rhs, np.dtype(lhs.dtype), out):
        return reference(lhs, rhs)
    layout, fold = ours
    a = lhs.reshape(math.prod(lhs.shape[:-1]), lhs.shape[-1]) if fold else lhs
    c = broadcast_product(
        a,
        rhs,
        out_dtype=out,
        precision=_compat.canonicalize_precision(precision),
        layout=layout,
    ).reshape(want.shape)
    return _compat.with_weak_type(c, want.weak_type)
