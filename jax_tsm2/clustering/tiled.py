"""The Lloyd step for any k: a tiled assignment and cluster sums (by buckets or sorted rows).

Two FFI calls make the step where the fused kernel (``jax_tsm2.clustering.fused``, k <= 32)
does not serve:

* ``tsm2_kmeans_assign`` (``ffi/kmeans/kernels/kmeans_assign.cuh``): labels and squared
  distances from the product ``X C^T`` on tensor cores in tiles of 128 rows x 128
  centroids, ranked by ``||c||^2 - 2 x.c`` (the distance is ``max(||x||^2 + that, 0)``);
  each row keeps its closest centroid in registers, and the ``n x k`` distances are never
  written. f32 data multiply as three products of split TF32 operands, which keeps f32
  accuracy (``precision="float32"``, the default), or as one TF32 product
  (``precision="tensorfloat32"``: about 3x the arithmetic rate; both operands rounded to
  nearest TF32, so dot products are off by up to ~2^-10 of ``sum |x_i c_i|``); bf16 and
  f16 products are exact. Ties go to the lowest index and NaN ranks first, as
  ``jnp.argmin``; rows and centroids with a non-finite norm are ranked with exact products.
* ``tsm2_kmeans_sums``: the weighted sum and weight of each cluster and the inertia.
  Where one block's shared memory holds the sums of all ``k`` clusters
  (``ffi/kmeans/kernels/kmeans_sums.cuh``), blocks own ranges of rows and add them in
  row order, and a second pass adds the blocks' partials in order. Elsewhere
  (``kmeans_sums_sorted.cuh``) the rows are sorted by label (a stable radix sort) and
  added over pieces of ``piece`` sorted rows, whose partials a fixed tree of merges adds
  in order, so a cluster of nearly all rows is still added by many warps. No
  floating-point atomics: bitwise reproducible, the same bits as the CPU reference
  (``bucket``, ``chunks`` and ``piece`` are attributes, so both follow one plan).

``x`` is read once by each call where its tile stays on chip (``kmeans_tiled_plan``'s
``resident``) or ``k`` is at most 128: two reads per iteration.

Example (the CPU reference targets, as ``custom_call_mode("always")`` runs them):
    >>> import jax.numpy as jnp
    >>> x = jnp.array([[0.0, 1.0], [9.0, 0.0], [11.0, 0.0]], jnp.float32)
    >>> c = jnp.array([[0.0, 0.0], [10.0, 0.0]], jnp.float32)
    >>> s = ffi_step(x, jnp.sum(x * x, 1), c, jnp.ones(3, jnp.float32), check=False)
    >>> s.labels.tolist(), s.sums.tolist(), float(s.inertia)
    ([0, 1, 1], [[0.0, 1.0], [20.0, 0.0]], 3.0)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_tsm2 import _compat, _ffi
from jax_tsm2.clustering.step_result import LloydStep, acc_dtype

__all__ = [
    "PRECISIONS",
    "assign_supported",
    "check_precision",
    "ffi_assign",
    "ffi_step",
    "ffi_sums",
    "step_supported",
    "sums_supported",
]

#: How f32 distances are multiplied: ``"float32"`` (split products, f32 accuracy) or
#: ``"tensorfloat32"`` (one TF32 product: faster where the arithmetic binds).
PRECISIONS = ("float32", "tensorfloat32")

_ASSIGN_DTYPES = tuple(jnp.dtype(t) for t in (jnp.float32, jnp.bfloat16, jnp.float16))
_SUMS_DTYPES = (*_ASSIGN_DTYPES, jnp.dtype(jnp.float64))


def check_precision(precision: Any) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`, else ValueError.

    Example:
        >>> check_precision("tensorfloat32")
        'tensorfloat32'
    """
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


def assign_supported(dtype: Any, d: int, k: int) -> bool:
    """Whether ``tsm2_kmeans_assign`` takes ``(n, d)`` data of ``dtype`` with ``k`` clusters
    (f32, bf16, f16; any d and k that fit 32-bit indices).

    Example:
        >>> assign_supported("float32", 4097, 65536), assign_supported("float64", 8, 100)
        (True, False)
    """
    if jnp.dtype(dtype) not in _ASSIGN_DTYPES or d < 1 or k < 1:
        return False
    return bool(_ffi.kmeans_tiled_plan(dtype, 0, d, k)["assign_supported"])


def sums_supported(dtype: Any, d: int, k: int) -> bool:
    """Whether ``tsm2_kmeans_sums`` takes ``(n, d)`` data of ``dtype`` with ``k`` clusters.

    Example:
        >>> sums_supported("float64", 3, 100)
        True
    """
    if jnp.dtype(dtype) not in _SUMS_DTYPES or d < 1 or k < 1:
        return False
    return bool(_ffi.kmeans_tiled_plan(dtype, 0, d, k)["sums_supported"])


def step_supported(dtype: Any, d: int, k: int) -> bool:
    """Whether the two calls take the shape: :func:`assign_supported` and
    :func:`sums_supported`.

    Example:
        >>> step_supported("bfloat16", 1000, 5000)
        True
    """
    return assign_supported(dtype, d, k) and sums_supported(dtype, d, k)


def _out(x: jax.Array):
    return lambda shape, dtype: _compat.shape_dtype_struct(shape, dtype, x)


def ffi_assign(
    x: jax.Array,
    x_sq: jax.Array,
    c: jax.Array,
    *,
    precision: str = "float32",
    check: bool = True,
) -> tuple[jax.Array, jax.Array]:
    """The ``tsm2_kmeans_assign`` FFI call: ``(labels, mind)`` of ``x`` ``(n, d)`` against
    ``c`` ``(k, d)`` (cast to ``x.dtype``), given ``x_sq = ||x||^2`` per row (f32).

    With ``check`` a shape or dtype the CUDA kernel does not take is a ``ValueError`` at
    trace time (an error returned by a CUDA handler has crashed the process under
    jax 0.11); the CPU reference takes the same.
    """
    precision = check_precision(precision)
    n, d = x.shape
    k = c.shape[0]
    if check and not assign_supported(x.dtype, d, k):
        raise ValueError(
            f"tsm2_kmeans_assign: does not take x {x.dtype}{list(x.shape)} with k={k} "
            "(it takes float32, bfloat16 and float16); use impl='auto' or 'jnp'"
        )
    plan = _ffi.kmeans_tiled_plan(x.dtype, n, d, k)
    workspace = plan.get("assign_workspace_bytes", 16)
    if precision == "tensorfloat32":
        # Room for the centroids rounded to TF32, which sm_90a's warpgroup kernel reads.
        workspace += plan.get("assign_tf32_copy_bytes", 0)
    elif d % 4 == 0 and plan.get("splits") == 1 and plan.get("centroid_tiles", 0) >= 2:
        # f32 at f32 accuracy on that kernel where the launcher refines its TF32 ranking
        # (rows of whole 16-byte vectors, one item a row tile, two centroid tiles or more):
        # the same copy and 24 bytes a row (ffi/kmeans/kernels/kmeans_assign_refine.cuh).
        # Elsewhere, or without the room, it takes the split products.
        workspace += plan.get("assign_refine_bytes", 0)
    c = c.astype(x.dtype)
    x_sq = x_sq.astype(jnp.float32)
    x, x_sq, c = _compat.match_varying(x, x_sq, c)
    out = _out(x)
    call = jax.ffi.ffi_call(
        _ffi.KMEANS_ASSIGN_TARGET,
        (
            out((n,), jnp.int32),
            out((n,), jnp.float32),
            out((workspace,), jnp.uint8),
        ),
        vmap_method="sequential",
    )
    labels, mind, _ = call(x, x_sq, c, precision=np.int32(PRECISIONS.index(precision)))
    return labels, mind


def ffi_sums(
    x: jax.Array, w: jax.Array, labels: jax.Array, mind: jax.Array, k: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The ``tsm2_kmeans_sums`` FFI call: ``(sums (k, d), counts (k,), inertia)`` of ``x``
    with weights ``w``, ``labels`` (outside ``[0, k)`` count nowhere) and distances
    ``mind`` (``inertia = sum(w * mind)``), in the accumulation dtype.
    """
    n, d = x.shape
    if not sums_supported(x.dtype, d, k):
        raise ValueError(f"tsm2_kmeans_sums: does not take x {x.dtype}{list(x.shape)} with k={k}")
    acc = acc_dtype(x.dtype)
    plan = _ffi.kmeans_tiled_plan(x.dtype, n, d, k)
    w, mind = w.astype(acc), mind.astype(acc)
    labels = labels.astype(jnp.int32)
    x, w, labels, mind = _compat.match_varying(x, w, labels, mind)
    out = _out(x)
    call = jax.ffi.ffi_call(
        _ffi.KMEANS_SUMS_TARGET,
        (
            out((k, d), acc),
            out((k,), acc),
            out((), acc),
            out((plan["sums_workspace_bytes"],), jnp.uint8),
        ),
        vmap_method="sequential",
    )
    sums, counts, inertia, _ = call(
        x,
        w,
        labels,
        mind,
        bucket=np.int64(plan["bucket"]),
        chunks=np.int64(plan["chunks"]),
        piece=np.int64(plan["piece"]),
    )
    return sums, counts, inertia


def ffi_step(
    x: jax.Array,
    x_sq: jax.Array,
    c: jax.Array,
    w: jax.Array,
    *,
    precision: str = "float32",
    check: bool = True,
) -> LloydStep:
    """One Lloyd step in two calls: :func:`ffi_assign`, then :func:`ffi_sums`."""
    labels, mind = ffi_assign(x, x_sq, c, precision=precision, check=check)
    sums, counts, inertia = ffi_sums(x, w, labels, mind, c.shape[0])
    return LloydStep(labels, mind, sums, counts, inertia)
