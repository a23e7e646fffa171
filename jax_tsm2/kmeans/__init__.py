"""k-means on jax_tsm2: a functional core, a scikit-learn style estimator, a CLI.

``kmeans``, ``assign`` and ``kmeans_plusplus`` (``jax_tsm2.kmeans.core``) are
pure JAX functions that run under ``jit``, ``vmap`` and ``shard_map``;
``KMeans`` (``jax_tsm2.kmeans.estimator``) wraps them in scikit-learn's
estimator interface; ``python -m jax_tsm2.kmeans`` clusters a bundled or
generated dataset and can compare against scikit-learn.

The distance step and the centroid update are tall-and-skinny products through
``jax_tsm2.matmul``; the assignment's product lives in one function
(``core._cross``) so that a fused distance-and-argmin kernel can replace it.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jax_tsm2.kmeans import kmeans
  >>> x = jnp.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]])
  >>> float(kmeans(jax.random.key(0), x, 2).inertia)
  1.0
"""

from jax_tsm2.kmeans.core import (
    INIT_METHODS,
    KMeansState,
    assign,
    kmeans,
    kmeans_plusplus,
    sq_distances,
)
from jax_tsm2.kmeans.estimator import KMeans

__all__ = [
    "INIT_METHODS",
    "KMeans",
    "KMeansState",
    "assign",
    "kmeans",
    "kmeans_plusplus",
    "sq_distances",
]
