"""What one pass over the data returns (:class:`LloydStep`), and the dtype it accumulates in.

Shared by the step's implementations: the fused kernel (``jax_tsm2.clustering.fused``),
the tiled assignment and sums (``jax_tsm2.clustering.tiled``) and the jnp path
(``jax_tsm2.clustering.core``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["LloydStep", "acc_dtype"]


class LloydStep(NamedTuple):
    """What one Lloyd iteration needs from a pass over the data.

    Attributes:
      labels: ``(n,)`` int32 closest centroid.
      mind: ``(n,)`` squared distance to it, in the accumulation dtype.
      sums: ``(k, d)`` weighted sum of each cluster's rows.
      counts: ``(k,)`` total weight of each cluster.
      inertia: weighted sum of ``mind``.
    """

    labels: jax.Array
    mind: jax.Array
    sums: jax.Array
    counts: jax.Array
    inertia: jax.Array


def acc_dtype(dtype: Any) -> np.dtype:
    """Accumulation dtype of the step: f32 for bf16/f16, the dtype itself otherwise.

    Example:
        >>> acc_dtype("bfloat16").name, acc_dtype("float64").name
        ('float32', 'float64')
    """
    dtype = jnp.dtype(dtype)
    if dtype in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
        return jnp.dtype(jnp.float32)
    return dtype
