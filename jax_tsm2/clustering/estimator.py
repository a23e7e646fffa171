"""``KMeans``: scikit-learn's estimator interface over :func:`jax_tsm2.clustering.kmeans`.

The estimator keeps scikit-learn's parameter names, defaults and fitted
attributes (``cluster_centers_``, ``labels_``, ``inertia_``, ``n_iter_``), so it
drops into code written for ``sklearn.cluster.KMeans``; the work runs in JAX
(jit-compiled, on the default device), with the tall-and-skinny products through
``jax_tsm2.matmul``. It does not depend on scikit-learn.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_tsm2.clustering import core

__all__ = ["KMeans"]


class KMeans:
    """K-means clustering (Lloyd's algorithm) with scikit-learn's interface.

    Args:
      n_clusters: number of clusters.
      init: ``"k-means++"`` (greedy, scikit-learn's rule), ``"random"``, a
        ``(n_clusters, n_features)`` array, or a callable
        ``init(X, n_clusters, random_state) -> array`` (``random_state`` is a
        ``numpy.random.RandomState``, as scikit-learn passes).
      n_init: restarts (run in parallel with ``vmap``), or ``"auto"``: 1 for
        ``"k-means++"``, an array or a callable, 10 for ``"random"`` (as
        scikit-learn).
      max_iter: most iterations per restart.
      tol: relative tolerance on the squared centroid shift (times the mean
        per-feature variance of the data).
      random_state: None, an int seed, or a JAX PRNG key.

    Fitted attributes: ``cluster_centers_``, ``labels_``, ``inertia_``,
    ``n_iter_``, ``n_features_in_``, plus ``converged_``,
    ``inertia_history_`` and ``state_`` (the full :class:`KMeansState`).

    Differences from ``sklearn.cluster.KMeans``, and why:

    * Fitted arrays and the results of ``predict``/``transform`` are JAX
      arrays (``np.asarray`` converts); they stay on the device for JAX users.
    * Randomness comes from a JAX key made from ``random_state``, so the same
      seed gives different (equally valid) seeds than scikit-learn; from the
      same initial centroids the algorithm and results are the same.
    * ``tol`` uses the sample-weighted variance (scikit-learn's ignores the
      weights), so integer weights act exactly as repeated points.
    * Only ``algorithm="lloyd"``; no ``verbose`` or ``copy_x`` (JAX never
      modifies its input); no warning for ``n_init > 1`` with an array init.
    * bf16/f16 data keep their dtype in the products and accumulate in f32;
      centres are then f32 (scikit-learn would upcast the data to f32/f64).

    Example:
      >>> import numpy as np
      >>> X = np.array([[1, 2], [1, 4], [1, 0], [10, 2], [10, 4], [10, 0]], float)
      >>> km = KMeans(n_clusters=2, random_state=0).fit(X)
      >>> sorted(np.asarray(km.cluster_centers_)[:, 0].tolist())
      [1.0, 10.0]
      >>> bool(km.predict(np.array([[0.0, 0.0]]))[0] == km.labels_[0])
      True
      >>> float(km.score(X)) == -float(km.inertia_)
      True
    """

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        init: str | Any = "k-means++",
        n_init: int | str = "auto",
        max_iter: int = 300,
        tol: float = 1e-4,
        random_state: Any = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    # scikit-learn's parameter protocol (enough for clone() and grid searches)
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's parameters, as scikit-learn's ``get_params``."""
        names = ("n_clusters", "init", "n_init", "max_iter", "tol", "random_state")
        return {n: getattr(self, n) for n in names}

    def set_params(self, **params: Any) -> KMeans:
        """Set constructor parameters, as scikit-learn's ``set_params``."""
        valid = self.get_params()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(f"invalid parameter {name!r} for KMeans")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        return f"KMeans(n_clusters={self.n_clusters}, init={self.init!r}, n_init={self.n_init!r})"

    def _key_and_rng(self) -> tuple[jax.Array, np.random.RandomState]:
        rs = self.random_state
        if rs is None:
            seed = int(np.random.default_rng().integers(0, 2**31 - 1))
        elif isinstance(rs, (int, np.integer)):
            seed = int(rs)
        else:  # a JAX key
            key = (
                rs
                if jnp.issubdtype(rs.dtype, jax.dtypes.prng_key)
                else jax.random.wrap_key_data(rs)
            )
            seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
            return key, np.random.RandomState(seed)
        return jax.random.key(seed), np.random.RandomState(seed)

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> KMeans:
        """Compute the clustering of ``X`` (``(n_samples, n_features)``); ``y`` is ignored."""
        x = core._as_float(X)
        core._check_samples(x, "KMeans")  # before a callable init sees X
        n_clusters = core._count(self.n_clusters, "n_clusters")
        key, rng = self._key_and_rng()
        init = self.init
        if callable(init):
            init = jnp.asarray(init(np.asarray(x), n_clusters, rng))
        if isinstance(init, str):
            n_init = self.n_init
            if n_init == "auto":
                n_init = 10 if init == "random" else 1
        else:
            n_init = 1
        state = core.kmeans(
            key,
            x,
            n_clusters,
            init=init,
            n_init=n_init,
            max_iter=self.max_iter,
            tol=self.tol,
            sample_weight=sample_weight,
        )
        self.state_ = state
        self.cluster_centers_ = state.centroids
        self.labels_ = state.labels
        self.inertia_ = float(state.inertia)
        self.n_iter_ = int(state.n_iter)
        self.converged_ = bool(state.converged)
        self.inertia_history_ = state.inertia_history[: self.n_iter_]
        self.n_features_in_ = x.shape[1]
        return self

    def _check_fitted(self, X: Any) -> jax.Array:
        if not hasattr(self, "cluster_centers_"):
            raise ValueError("this KMeans instance is not fitted yet; call fit first")
        x = core._as_float(X)
        if x.ndim != 2 or x.shape[1] != self.n_features_in_:
            raise ValueError(f"X must have shape (n, {self.n_features_in_}), got {x.shape}")
        core._check_samples(x, "KMeans")
        return x

    def predict(self, X: Any) -> jax.Array:
        """Index of the closest cluster centre for each row of ``X``."""
        return core.assign(self._check_fitted(X), self.cluster_centers_)[0]

    def fit_predict(self, X: Any, y: Any = None, sample_weight: Any = None) -> jax.Array:
        """``fit(X)`` then the training labels (``labels_``)."""
        return self.fit(X, sample_weight=sample_weight).labels_

    def transform(self, X: Any) -> jax.Array:
        """``(n_samples, n_clusters)`` Euclidean distances to the cluster centres."""
        return jnp.sqrt(core.sq_distances(self._check_fitted(X), self.cluster_centers_))

    def fit_transform(self, X: Any, y: Any = None, sample_weight: Any = None) -> jax.Array:
        """``fit(X)`` then ``transform(X)``."""
        return self.fit(X, sample_weight=sample_weight).transform(X)

    def score(self, X: Any, y: Any = None, sample_weight: Any = None) -> float:
        """Negative (weighted) inertia of ``X`` against the fitted centres."""
        x = self._check_fitted(X)
        _, d2 = core.assign(x, self.cluster_centers_)
        if sample_weight is None:
            return -float(jnp.sum(d2))
        w = jnp.asarray(sample_weight, d2.dtype)
        core._check_weights(w, x.shape[0], sharded=False)
        return -float(jnp.sum(w * d2))
