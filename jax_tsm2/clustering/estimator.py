"""``KMeans``: a scikit-learn estimator over :func:`jax_tsm2.clustering.kmeans`.

The estimator is built on scikit-learn's ``BaseEstimator``, ``ClusterMixin`` and
``TransformerMixin`` and keeps its parameter names, defaults and fitted attributes
(``cluster_centers_``, ``labels_``, ``inertia_``, ``n_iter_``), so it drops into
pipelines, grid searches and code written for ``sklearn.cluster.KMeans``; the work
runs in JAX (jit-compiled, on the default device), with the tall-and-skinny
products through ``jax_tsm2.matmul``. Without scikit-learn installed the same class
works on its own (parameters, fitting, prediction), only without the mixins.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_tsm2.clustering import core, out_of_core

try:
    from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
    from sklearn.utils.validation import check_is_fitted
except ImportError:  # scikit-learn is optional for the package
    BaseEstimator = ClusterMixin = TransformerMixin = None

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _sk_validate_data
except ImportError:
    _sk_validate_data = None

__all__ = ["EXPECTED_FAILED_CHECKS", "KMeans"]

#: scikit-learn's estimator checks that ``KMeans`` is known to fail, with the reason
#: (pass to ``check_estimator(..., expected_failed_checks=...)``; older scikit-learn
#: reads them from the estimator's ``_xfail_checks`` tag). scikit-learn's own
#: ``KMeans`` fails the same check for the same reason.
EXPECTED_FAILED_CHECKS = {
    "check_sample_weight_equivalence_on_dense_data": (
        "k-means++ and random seeding draw rows at random, so a weighted point and "
        "its repetitions are drawn differently: the fit from the same seed starts "
        "elsewhere and may reach another local optimum or another label order"
    ),
}

_PARAMS = (
    "n_clusters",
    "init",
    "n_init",
    "max_iter",
    "tol",
    "random_state",
    "precision",
    "device_memory_budget",
    "host_pinning",
    "fault_tolerance",
)

if BaseEstimator is None:

    class NotFittedError(ValueError, AttributeError):
        """Raised by a method that needs a fitted estimator, as scikit-learn's."""

    def check_is_fitted(estimator: Any) -> None:
        if not any(k.endswith("_") and not k.startswith("__") for k in vars(estimator)):
            raise NotFittedError(
                f"This {type(estimator).__name__} instance is not fitted yet. Call 'fit' "
                "with appropriate arguments before using this estimator."
            )

    class _Base:
        """scikit-learn's parameter protocol, for use without scikit-learn."""

        def get_params(self, deep: bool = True) -> dict[str, Any]:
            return {n: getattr(self, n) for n in _PARAMS}

        def set_params(self, **params: Any) -> Any:
            for name, value in params.items():
                if name not in _PARAMS:
                    raise ValueError(f"invalid parameter {name!r} for {type(self).__name__}")
                setattr(self, name, value)
            return self

        def __repr__(self) -> str:
            args = ", ".join(f"{n}={getattr(self, n)!r}" for n in _PARAMS)
            return f"{type(self).__name__}({args})"

    _BASES: tuple[type, ...] = (_Base,)
else:
    _BASES = (ClusterMixin, TransformerMixin, BaseEstimator)


def _validate(est: Any, X: Any, reset: bool, on_device: bool = True) -> Any:
    """``X`` checked as scikit-learn checks it, as a JAX array.

    JAX arrays stay where they are, in their dtype (bf16/f16 included): copying
    device data to the host to check them would cost more than the fit. Everything
    else (NumPy, lists, data frames, sparse matrices) goes through scikit-learn's
    ``validate_data``, which also records ``n_features_in_``/``feature_names_in_``,
    and is then copied to the device unless ``on_device`` is False.
    """
    if isinstance(X, jax.Array) or BaseEstimator is None:
        x = core._as_float(X)
        core._check_samples(x, type(est).__name__)
        if reset:
            est.n_features_in_ = x.shape[1]
        elif x.shape[1] != est.n_features_in_:
            raise ValueError(
                f"X has {x.shape[1]} features, but {type(est).__name__} is expecting "
                f"{est.n_features_in_} features as input."
            )
        return x
    kw = dict(accept_sparse=False, dtype=[np.float64, np.float32], reset=reset)
    if _sk_validate_data is not None:
        x = _sk_validate_data(est, X, **kw)
    else:  # scikit-learn < 1.6
        x = est._validate_data(X, **kw)
    return jnp.asarray(x) if on_device else x


def _device_bytes() -> int | None:
    """Memory of the default device, where JAX reports it (GPUs), else None."""
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # backends without memory statistics
        return None
    return None if not stats else stats.get("bytes_limit")


class KMeans(*_BASES):
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
      device_memory_budget: bytes of device memory ``fit`` may use for data held in host
        memory (a NumPy array or memmap). Larger data stay on the host and are streamed
        to the device in chunks each iteration
        (:func:`jax_tsm2.clustering.out_of_core.kmeans_streamed`; one restart, init on a
        sample). None: stream only data larger than half of the device's memory, with
        that half as the budget.
      host_pinning: for streamed data, whether ``fit`` page-locks ``X`` in place and has the
        GPU read it (``kmeans_streamed``'s ``host_pinning``): None pins where it can (not a
        memmap), True pins or raises ValueError, False copies chunk by chunk.
      precision: how f32 distances are multiplied on the GPU: ``"float32"`` (f32
        accuracy) or ``"tensorfloat32"`` (one TF32 product: faster at large k and d, dot
        products off by up to ~2^-10 of ``sum |x_i c_i|``); see
        :func:`jax_tsm2.clustering.kmeans`.
      fault_tolerance: check each iteration's cluster sums, counts and distances against
        invariants of the data and redo an iteration that fails (``kmeans``'s
        ``fault_tolerance``; in-memory fits only).

    Fitted attributes: ``cluster_centers_``, ``labels_``, ``inertia_``,
    ``n_iter_``, ``n_features_in_``, plus ``converged_``,
    ``inertia_history_`` and ``state_`` (the full :class:`KMeansState`); with
    ``fault_tolerance``, ``n_faults_detected_`` (steps redone) and ``fault_unresolved_``
    (True when a fault persisted past the redo bound and the fit stopped there).

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
    * JAX arrays are taken as they are, on their device: bf16/f16 data keep
      their dtype in the products and accumulate in f32, and centres are then
      f32. Other inputs (NumPy, lists, data frames) are checked and converted by
      scikit-learn's ``validate_data`` to f64 or f32, as scikit-learn does.
    * ``check_estimator`` passes except the checks in
      :data:`EXPECTED_FAILED_CHECKS` (which scikit-learn's ``KMeans`` fails too).

    Methods that need a fitted estimator raise scikit-learn's
    ``NotFittedError`` before ``fit``.

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
        device_memory_budget: int | None = None,
        host_pinning: bool | None = None,
        precision: str = "float32",
        fault_tolerance: bool = False,
    ) -> None:
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.device_memory_budget = device_memory_budget
        self.host_pinning = host_pinning
        self.precision = precision
        self.fault_tolerance = fault_tolerance

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        # transform keeps f32 data in f32 (and f64 in f64 where JAX has x64 on)
        preserved = ["float64", "float32"] if jax.config.jax_enable_x64 else ["float32"]
        tags.transformer_tags.preserves_dtype = preserved
        return tags

    if _sk_validate_data is None:  # scikit-learn < 1.6 reads tags from _more_tags

        def _more_tags(self) -> dict[str, Any]:
            return {"_xfail_checks": dict(EXPECTED_FAILED_CHECKS)}

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
        budget = self._streaming_budget(X)
        x = _validate(self, X, reset=True, on_device=budget is None)  # before init sees X
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
        if budget is not None and self.fault_tolerance:
            raise ValueError(
                "fault_tolerance is not available for data streamed from the host "
                "(device_memory_budget); fit data that fit in device memory"
            )
        if budget is not None:
            state = out_of_core.kmeans_streamed(
                key,
                x,
                n_clusters,
                device_memory_budget=budget,
                init=init,
                max_iter=self.max_iter,
                tol=self.tol,
                sample_weight=None if sample_weight is None else np.asarray(sample_weight),
                precision=self.precision,
                host_pinning=self.host_pinning,
            )
        else:
            state = core.kmeans(
                key,
                x,
                n_clusters,
                init=init,
                n_init=n_init,
                max_iter=self.max_iter,
                tol=self.tol,
                sample_weight=sample_weight,
                precision=self.precision,
                fault_tolerance=bool(self.fault_tolerance),
            )
        self.state_ = state
        self.cluster_centers_ = state.centroids
        self.labels_ = state.labels
        self.inertia_ = float(state.inertia)
        self.n_iter_ = int(state.n_iter)
        self.converged_ = bool(state.converged)
        self.inertia_history_ = state.inertia_history[: self.n_iter_]
        if state.faults_detected is not None:
            self.n_faults_detected_ = int(state.faults_detected)
            self.fault_unresolved_ = bool(state.fault_unresolved)
        return self

    def _streaming_budget(self, X: Any) -> int | None:
        """The device-memory budget to stream ``X`` with, or None to fit it in memory."""
        if isinstance(X, jax.Array) or not hasattr(X, "nbytes"):
            return None
        budget = self.device_memory_budget
        if budget is None:
            limit = _device_bytes()
            budget = None if limit is None else limit // 2
        elif not (isinstance(budget, (int, np.integer)) and budget > 0):
            raise ValueError(f"device_memory_budget must be a positive int, got {budget!r}")
        return int(budget) if budget is not None and X.nbytes > budget else None

    def _check_fitted(self, X: Any) -> jax.Array:
        check_is_fitted(self)
        return _validate(self, X, reset=False)

    def predict(self, X: Any) -> jax.Array:
        """Index of the closest cluster centre for each row of ``X``."""
        x = self._check_fitted(X)
        return core.assign(x, self.cluster_centers_, precision=self.precision)[0]

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
        _, d2 = core.assign(x, self.cluster_centers_, precision=self.precision)
        if sample_weight is None:
            return -float(jnp.sum(d2))
        w = jnp.asarray(sample_weight, d2.dtype)
        core._check_weights(w, x.shape[0], sharded=False)
        return -float(jnp.sum(w * d2))
