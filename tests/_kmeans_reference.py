"""A float64 NumPy reference for one Lloyd step and the check of a LloydStep against it.

The kernels compute ``||x - c||^2`` in the expanded form in the accumulation
dtype (f32 for f32/bf16/f16 data, f64 for f64), so their distances differ from
the exact ones by rounding. The check allows for that, proportionally to
``||x||^2 + ||c||^2`` (the size of the terms that cancel), and no more:

* every label must be an argmin of the exact distances up to that bound, and
  the exact argmin wherever the two closest centroids are further apart;
* ``mind`` must be the exact distance to the chosen centroid up to the bound;
* ``sums``, ``counts`` and ``inertia`` must be the float64 sums over the rows
  with the step's own labels, up to a rounding bound on those sums.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def acc_eps(dtype) -> float:
    return float(jnp.finfo(jnp.float64 if jnp.dtype(dtype) == jnp.float64 else jnp.float32).eps)


def data(rng: np.random.Generator, n: int, d: int, k: int, dtype, *, weights: bool = True):
    """Points around k random centres, centroids near some of the points, weights in [0, 2]."""
    centres = rng.normal(scale=3.0, size=(k, d))
    x = centres[rng.integers(0, k, n)] + rng.normal(size=(n, d))
    c = x[rng.choice(n, k, replace=n < k)] + 0.1 * rng.normal(size=(k, d))
    w = rng.uniform(0.0, 2.0, n) if weights else np.ones(n)
    w[rng.random(n) < 0.1] = 0.0  # zero weights count nowhere
    acc = jnp.float64 if jnp.dtype(dtype) == jnp.float64 else jnp.float32
    return jnp.asarray(x, dtype), jnp.asarray(c, dtype), jnp.asarray(w, acc)


def _distances(x64, c64, x_sq, c_sq, exact: bool) -> np.ndarray:
    """Squared distances in float64. For f64 data, term by term (the expanded form's
    rounding would be the size of the bound); otherwise expanded, whose rounding,
    ~(d + 2) f64 eps of ``||x||^2 + ||c||^2``, is ~1e-9 of the f32 bound and takes a
    matrix product instead of an n x k x d array (52 GB at n = 1e5, d = 4096)."""
    if not exact:
        return np.maximum(x_sq[:, None] + c_sq[None, :] - 2.0 * (x64 @ c64.T), 0.0)
    return np.stack([((x64 - cj) ** 2).sum(1) for cj in c64], axis=1)


# How far TF32 products (``precision="tensorfloat32"``) may move a distance, relative to
# ``||x||^2 + ||c||^2``: operands rounded to 11 significant bits err by 2^-11 each, so a
# product by ~2^-10 and the dot by 2^-10 sum |x_i c_i| <= 2^-11 (||x||^2 + ||c||^2);
# twice that in the distance, and a factor 2 of slack.
TF32_REL = 2.0**-9


def check_step(step, x, c, w, *, extra_rel: float = 0.0) -> None:
    """Asserts that ``step`` (a LloydStep) is a Lloyd step of ``x`` against ``c``, weights ``w``.

    ``extra_rel`` widens the distance bound by that fraction of ``||x||^2 + ||c||^2``
    (``TF32_REL`` for TF32 products)."""
    x64 = np.asarray(jnp.asarray(x).astype(jnp.float64))
    c64 = np.asarray(jnp.asarray(c).astype(x.dtype).astype(jnp.float64))
    w64 = np.asarray(w, np.float64)
    n, d = x64.shape
    k = c64.shape[0]
    eps = acc_eps(x.dtype)
    labels = np.asarray(step.labels)
    assert labels.shape == (n,) and labels.dtype == np.int32
    assert ((labels >= 0) & (labels < k)).all(), "labels out of range"

    x_sq, c_sq = (x64**2).sum(1), (c64**2).sum(1)
    dist = _distances(x64, c64, x_sq, c_sq, x.dtype == jnp.float64)
    bound = (4 * (d + 4) * eps + extra_rel) * (x_sq[:, None] + c_sq[None, :]) + 1e-300
    rows = np.arange(n)
    best = dist.min(1)
    chosen = dist[rows, labels]
    slack = bound[rows, labels] + bound[rows, dist.argmin(1)]
    bad = chosen > best + slack
    assert not bad.any(), (
        f"{bad.sum()} rows not assigned to a closest centroid, e.g. row {bad.argmax()}"
    )
    if k > 1:
        second = np.partition(dist, 1, axis=1)[:, 1]
        clear = second - best > 2 * bound.max(1)
        exact = dist.argmin(1)
        wrong = clear & (labels != exact)
        assert not wrong.any(), (
            f"{wrong.sum()} clear-cut rows mislabelled, e.g. row {wrong.argmax()}"
        )

    mind = np.asarray(step.mind, np.float64)
    assert (mind >= 0).all(), "negative distances"
    off = np.abs(mind - chosen) > bound[rows, labels]
    assert not off.any(), (
        f"{off.sum()} distances off, e.g. row {off.argmax()}: {mind[off.argmax()]}"
    )

    onehot = (labels[:, None] == np.arange(k)).astype(np.float64) * w64[:, None]
    sums_ref = onehot.T @ x64
    sums_bound = 2 * (n + 2) * eps * (onehot.T @ np.abs(x64)) + 1e-300
    sums = np.asarray(step.sums, np.float64)
    assert sums.shape == (k, d)
    err = np.abs(sums - sums_ref)
    assert (err <= sums_bound).all(), f"sums off by {err.max():.3g} (bound {sums_bound.max():.3g})"
    counts = np.asarray(step.counts, np.float64)
    np.testing.assert_allclose(counts, onehot.sum(0), rtol=2 * (n + 2) * eps, atol=1e-300)
    inertia_ref = float(w64 @ chosen)
    inertia_bound = float(w64 @ bound[rows, labels]) + 2 * (n + 2) * eps * inertia_ref
    assert abs(float(step.inertia) - inertia_ref) <= inertia_bound + 1e-300, (
        float(step.inertia),
        inertia_ref,
    )
