"""User-facing products with ``jax.numpy`` semantics.

``matmul`` behaves like ``jnp.matmul`` (shapes, broadcasting, dtype
promotion, weak types, errors) and computes through the ``tsm2_matmul``
primitive, whose lowering picks the TSM2 kernels or XLA's dot. What does not
fit the kernels' contract falls back to ``jnp.matmul`` itself, so the result
is always the one ``jnp.matmul`` gives:

- integer, bool and complex operands, and float types other than f16, bf16,
  f32, f64 (e.g. float8);
- a ``preferred_element_type`` that is not one of those four float types.
"""

from __future__ import annotations

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
    only where it measured faster than XLA's dot.

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
