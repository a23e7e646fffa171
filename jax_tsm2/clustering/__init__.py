"""k-means on jax_tsm2: a functional core, a scikit-learn style estimator, a CLI.

The two entry points are also at the top of the package: ``jax_tsm2.kmeans`` (the function)
and ``jax_tsm2.KMeans``; everything else is here, ``jax_tsm2.clustering.lloyd_step`` and the
rest (the subpackage has its own name so that the function does not hide it).

``kmeans``, ``assign`` and ``kmeans_plusplus`` (``jax_tsm2.clustering.core``) are
pure JAX functions that run under ``jit``, ``vmap`` and ``shard_map``;
``KMeans`` (``jax_tsm2.clustering.estimator``) wraps them in scikit-learn's
estimator interface; ``python -m jax_tsm2.clustering`` clusters a bundled or
generated dataset and can compare against scikit-learn.

Each iteration is one pass over the data (``lloyd_step``): on CUDA a fused
kernel computes labels, distances and cluster sums reading the data once for
``k <= 32`` (``jax_tsm2.clustering.fused``), and a tiled assignment and cluster
sums read it twice for any other ``k`` (``jax_tsm2.clustering.tiled``);
elsewhere the distance and update products are tall-and-skinny products through
``jax_tsm2.matmul``.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jax_tsm2.clustering import kmeans
  >>> x = jnp.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]])
  >>> float(kmeans(jax.random.key(0), x, 2).inertia)
  1.0
"""

from jax_tsm2.clustering.core import (
    INIT_METHODS,
    KMeansState,
    LloydStep,
    assign,
    kmeans,
    kmeans_plusplus,
    lloyd_step,
    sq_distances,
)
from jax_tsm2.clustering.estimator import KMeans

__all__ = [
    "INIT_METHODS",
    "KMeans",
    "KMeansState",
    "LloydStep",
    "assign",
    "kmeans",
    "kmeans_plusplus",
    "lloyd_step",
    "sq_distances",
]
