"""Lloyd's k-means as pure JAX functions: ``kmeans``, ``assign``, ``kmeans_plusplus``.

Every function here is pure and traceable: ``kmeans`` runs under ``jax.jit``
(with ``k``, ``init`` as a string, ``n_init`` and ``max_iter`` static), under
``jax.vmap`` and, with ``axis_name``, under ``shard_map`` with the points
sharded over devices.

An iteration needs, from one pass over the data, labels, distances, the
weighted sum and total weight of each cluster and the inertia
(:func:`lloyd_step`). On CUDA, for k <= 32 (d <= 4096), one fused kernel computes
them reading ``x`` once (``jax_tsm2.clustering.fused``); for any other k and d, a
tiled assignment and a pass of cluster sums read it twice
(``jax_tsm2.clustering.tiled``). Otherwise (CPU, f64 at large k, custom-call mode
``"never"``) the two heavy products are tall-and-skinny and both go through
``jax_tsm2.matmul``:

* assignment: ``||x - c||^2 = ||x||^2 - 2 x.c + ||c||^2``, where ``-2 x.c`` is
  ``(n, d) @ (d, k)``, computed in one function, ``_cross``;
* update: centroid sums as ``onehot(labels, weighted).T @ x``, a ``(k, n) @
  (n, d)`` product, instead of XLA's scatter-add (slow on GPUs for this shape);
  cluster weights are column sums of the same one-hot matrix.

Numerics: ``||x||^2`` is computed once per call, distances are clamped at zero,
bf16/f16 inputs accumulate in f32 (``preferred_element_type``), and the data
are centred on their weighted mean before clustering (centroids are shifted back
at the end), so that data far from the origin do not lose their distances to
cancellation in the expanded form.

Behaviour follows scikit-learn's ``KMeans(algorithm="lloyd")``: greedy
k-means++ with ``2 + int(log(k))`` local trials, ``tol`` relative to the mean
per-feature variance of the data and compared with the squared centroid shift,
strict convergence when no label changes, empty clusters relocated to the points
farthest from their centres, sample weights honoured everywhere, and a final
assignment against the returned centroids. Differences are listed in
``kmeans``'s docstring.
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_tsm2.api import matmul
from jax_tsm2.clustering import checksums, faults, fused, tiled
from jax_tsm2.clustering.step_result import LloydStep

__all__ = [
    "INIT_METHODS",
    "KMeansState",
    "LloydStep",
    "assign",
    "kmeans",
    "kmeans_plusplus",
    "lloyd_step",
    "sq_distances",
]

INIT_METHODS = ("k-means++", "random")

_HIGHEST = lax.Precision.HIGHEST


class KMeansState(NamedTuple):
    """The result of :func:`kmeans` (a pytree: every field is an array).

    Attributes:
      centroids: ``(k, d)`` cluster centres, in the accumulation dtype (f32 for
        bf16/f16 data, else the data's dtype).
      labels: ``(n,)`` int32 index of the closest centroid of each point.
      inertia: weighted sum of squared distances of points to their centroid.
      n_iter: number of Lloyd iterations run (int32).
      converged: True when the run stopped on ``tol`` or on unchanged labels
        rather than on ``max_iter``.
      inertia_history: ``(max_iter,)`` inertia of the assignment made in each
        iteration (against the centroids entering it), NaN after the last one.
      faults_detected: with ``fault_tolerance``, the number of steps whose checks failed
        and that were redone (int32, summed over restarts); else None.
      fault_unresolved: with ``fault_tolerance``, True when a step failed its checks
        ``checksums.MAX_REDOS + 1`` times in a row and the run stopped there (any
        restart); else None.
    """

    centroids: jax.Array
    labels: jax.Array
    inertia: jax.Array
    n_iter: jax.Array
    converged: jax.Array
    inertia_history: jax.Array
    # Last and defaulted, so that code building or unpacking the first six still works.
    faults_detected: jax.Array | None = None
    fault_unresolved: jax.Array | None = None


# ---------------------------------------------------------------- helpers


_acc_dtype = fused.acc_dtype  # f32 for bf16/f16, the dtype itself otherwise


def _as_float(x: Any) -> jax.Array:
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    return x


# Input checks, with scikit-learn's messages. Values are checked only where they are
# known: under jit, vmap or shard_map the data are tracers, and non-finite data or bad
# weights then give NaN results instead of an error.


def _count(value: Any, name: str) -> int:
    """A positive integer argument (Python or NumPy int, not bool), else ValueError."""
    try:
        if isinstance(value, bool):
            raise TypeError
        count = operator.index(value)
    except TypeError:
        count = None
    if count is None or count < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return count


def _check_samples(x: jax.Array, who: str) -> None:
    """``x`` is ``(n, d)`` with n, d >= 1 and, where its values are known, finite."""
    _check_shape(x, who)
    _check_finite(x, "X")


def _check_shape(x: jax.Array, who: str) -> None:
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D (n_samples, n_features), got shape {x.shape}")
    for size, what in ((x.shape[0], "sample(s)"), (x.shape[1], "feature(s)")):
        if size == 0:
            raise ValueError(
                f"Found array with 0 {what} (shape={x.shape}) while a minimum of 1 is "
                f"required by {who}."
            )


def _known(x: Any) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _check_finite(x: jax.Array, name: str) -> None:
    if not _known(x):
        return
    nan, inf = jax.device_get((jnp.isnan(x).any(), jnp.isinf(x).any()))
    if nan:
        raise ValueError(f"Input {name} contains NaN.")
    if inf:
        raise ValueError(
            f"Input {name} contains infinity or a value too large for {np.dtype(x.dtype)!r}."
        )


def _check_weights(w: jax.Array, n: int, sharded: bool) -> None:
    """``(n,)``, finite and non-negative where known, and (unsharded) not all zero."""
    if w.shape != (n,):
        raise ValueError(f"sample_weight must have shape ({n},), got {w.shape}")
    if not _known(w):
        return
    _check_finite(w, "sample_weight")
    negative, total = jax.device_get((jnp.any(w < 0), jnp.sum(w)))
    if negative:
        raise ValueError("Negative values in data passed to `sample_weight`")
    if total == 0 and not sharded:  # a shard may hold only zero weights
        raise ValueError("Sample weights must contain at least one non-zero number.")


def _as_weights(sample_weight: Any, x: jax.Array) -> jax.Array:
    return jnp.asarray(sample_weight, _acc_dtype(x.dtype))


def _psum(x: jax.Array, axis_name: Any) -> jax.Array:
    return x if axis_name is None else lax.psum(x, axis_name)


def _varying(x: jax.Array, axis_name: Any) -> jax.Array:
    """Mark a replicated value as device-varying (shard_map's type system)."""
    return x if axis_name is None else lax.pcast(x, axis_name, to="varying")


# The product precision of each distance precision (tiled.PRECISIONS) on the jnp path:
# "tensorfloat32" lets XLA multiply f32 in TF32 on GPUs, as the tiled kernel's fast mode.
_JNP_PRECISION = {"float32": _HIGHEST, "tensorfloat32": lax.Precision.DEFAULT}


def _cross(x: jax.Array, c: jax.Array, precision: str = "float32") -> jax.Array:
    """``x @ c.T`` with accumulation in ``_acc_dtype(x.dtype)``: the assignment's product.

    ``x`` is ``(n, d)`` (tall), ``c`` is ``(k, d)`` (few rows).
    """
    acc = _acc_dtype(x.dtype)
    return matmul(
        x, c.astype(x.dtype).T, precision=_JNP_PRECISION[precision], preferred_element_type=acc
    )


def _sq_norms(x: jax.Array) -> jax.Array:
    xa = x.astype(_acc_dtype(x.dtype))
    return jnp.sum(xa * xa, axis=1)


def _sq_dist(x: jax.Array, x_sq: jax.Array, c: jax.Array, precision: str = "float32") -> jax.Array:
    """``(n, k)`` squared distances, clamped at zero; ``x_sq`` is ``_sq_norms(x)``."""
    acc = _acc_dtype(x.dtype)
    cc = _rounded(c, x.dtype).astype(acc)  # the centroids the product actually sees
    c_sq = jnp.sum(cc * cc, axis=1)
    d = x_sq[:, None] - 2 * _cross(x, c, precision) + c_sq[None, :]
    return jnp.maximum(d, 0)


def _assign_sq(
    x: jax.Array, x_sq: jax.Array, c: jax.Array, precision: str = "float32"
) -> tuple[jax.Array, jax.Array]:
    d = _sq_dist(x, x_sq, c, precision)
    labels = jnp.argmin(d, axis=1).astype(jnp.int32)
    return labels, jnp.take_along_axis(d, labels[:, None], axis=1)[:, 0]


def _assign(
    x: jax.Array, x_sq: jax.Array, c: jax.Array, precision: str = "float32"
) -> tuple[jax.Array, jax.Array]:
    """``(labels, mind)``: through the kernel the step's decision names where there is one
    (``fused.assign``: the tiled assignment never writes the ``n x k`` distances, which
    at large k do not fit in memory), else ``_assign_sq``."""
    fallback = lambda x_, x_sq_, c_: _assign_sq(x_, x_sq_, c_, precision)
    return fused.assign(x, x_sq, c, fallback=fallback, precision=precision)


def _global_top_k(values: jax.Array, payloads: tuple, k: int, axis_name: Any):
    """The ``k`` largest ``values`` over all shards, with the matching payload rows."""
    kk = min(k, values.shape[0])
    top, idx = lax.top_k(values, kk)
    rows = tuple(p[idx] for p in payloads)
    if axis_name is not None:
        top = lax.all_gather(top, axis_name, tiled=True)
        rows = tuple(lax.all_gather(r, axis_name, tiled=True) for r in rows)
        top, idx = lax.top_k(top, k)
        # Equal on every device already; pmax of equal values is exact and marks
        # them replicated (device-invariant) for shard_map's type checks.
        top = lax.pmax(top, axis_name)
        rows = tuple(lax.pmax(r[idx], axis_name) for r in rows)
    return top, rows


def _sample_rows(u: jax.Array, p: jax.Array, x: jax.Array, axis_name: Any) -> jax.Array:
    """Rows of ``x`` drawn with probability ``p / sum(p)``, by inverse CDF at ``u`` in [0, 1).

    The same rule as scikit-learn's ``searchsorted(cumsum(p), u * total)``; with
    ``axis_name`` the cumulative sum runs over all shards in device order.
    """
    cs = jnp.cumsum(p)
    n = x.shape[0]
    if axis_name is None:
        idx = jnp.clip(jnp.searchsorted(cs, u * cs[-1]), 0, n - 1)
        return x[idx]
    totals = lax.all_gather(cs[-1], axis_name)
    me = lax.axis_index(axis_name)
    offset = jnp.sum(jnp.where(jnp.arange(totals.shape[0]) < me, totals, 0))
    r = u * jnp.sum(totals) - offset
    last = me == totals.shape[0] - 1
    owned = ((r >= 0) & (r < cs[-1])) | (last & (r >= cs[-1]))
    idx = jnp.clip(jnp.searchsorted(cs, r), 0, n - 1)
    return lax.psum(jnp.where(owned[:, None], x[idx], 0), axis_name)


def _rounded(v, dtype):
    """``v.astype(dtype)``, which every consumer sees rounded.

    XLA may keep a value narrowed to bf16/f16 in its wider form inside a fusion (excess
    precision, allowed by default on GPUs), so a reduction fused with the rounding would see
    ``v`` unrounded while the kernels read the rounded array: the checks of
    ``fault_tolerance`` then compare sums of two different data sets, and the squared norms
    disagree with the kernels' distances. The barrier makes the rounded array the one value
    they all read.
    """
    out = v.astype(dtype)
    return lax.optimization_barrier(out) if out.dtype != v.dtype else out


def _prepare(x, sample_weight, axis_name):
    """Centre ``x`` on its weighted mean: returns ``(xc, x_sq, w, mu, mean_var)``."""
    x = _as_float(x)
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D (n_samples, n_features), got shape {x.shape}")
    acc = _acc_dtype(x.dtype)
    n, d = x.shape
    if sample_weight is None:
        w = jnp.ones((n,), acc)
    else:
        w = jnp.asarray(sample_weight, acc)
        if w.shape != (n,):
            raise ValueError(f"sample_weight must have shape ({n},), got {w.shape}")
    xa = x.astype(acc)
    total = _psum(jnp.sum(w), axis_name)
    mu = _psum(jnp.sum(w[:, None] * xa, axis=0), axis_name) / total
    xc = _rounded(xa - mu, x.dtype)
    x_sq = _sq_norms(xc)
    mean_var = _psum(jnp.sum(w * x_sq), axis_name) / (total * d)
    return xc, x_sq, w, mu, mean_var


# ---------------------------------------------------------------- init


def _kmeans_plusplus_centered(key, xc, x_sq, w, k, n_local_trials, axis_name):
    acc = _acc_dtype(xc.dtype)
    d = xc.shape[1]
    trials = n_local_trials if n_local_trials is not None else 2 + int(math.log(k))
    key, sub = jax.random.split(key)
    c0 = _sample_rows(jax.random.uniform(sub, (1,), acc), w, xc, axis_name)[0].astype(acc)
    closest = _sq_dist(xc, x_sq, c0[None])[:, 0]
    centers = jnp.zeros((k, d), acc).at[0].set(c0)

    def body(j, carry):
        centers, closest, key = carry
        key, sub = jax.random.split(key)
        u = jax.random.uniform(sub, (trials,), acc)
        cand = _sample_rows(u, w * closest, xc, axis_name).astype(acc)
        dc = jnp.minimum(closest[:, None], _sq_dist(xc, x_sq, cand))
        pots = _psum(jnp.sum(w[:, None] * dc, axis=0), axis_name)
        best = jnp.argmin(pots)
        return centers.at[j].set(cand[best]), dc[:, best], key

    centers, _, _ = lax.fori_loop(1, k, body, (centers, closest, key))
    return centers


def _random_centered(key, xc, w, k, axis_name):
    """k distinct points drawn with probability proportional to weight (Gumbel top-k)."""
    acc = _acc_dtype(xc.dtype)
    if axis_name is not None:
        key = jax.random.fold_in(key, lax.axis_index(axis_name))
    g = jax.random.gumbel(key, w.shape, acc)
    scores = jnp.where(w > 0, jnp.log(jnp.where(w > 0, w, 1)) + g, -jnp.inf)
    _, (rows,) = _global_top_k(scores, (xc,), k, axis_name)
    return rows.astype(acc)


def kmeans_plusplus(
    key: jax.Array,
    x: Any,
    k: int,
    sample_weight: Any = None,
    *,
    n_local_trials: int | None = None,
    axis_name: Any = None,
) -> jax.Array:
    """Greedy k-means++ seeding (scikit-learn's rule): ``k`` initial centroids.

    The first centre is drawn with probability proportional to weight; each next
    one is the best (lowest weighted potential) of ``n_local_trials`` candidates
    (default ``2 + int(log(k))``) drawn with probability proportional to
    ``weight * D(x)^2``.

    Unlike ``sklearn.cluster.kmeans_plusplus`` this returns only the centres,
    not their indices (indices are not meaningful when points are sharded).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> x = jnp.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]])
      >>> c = kmeans_plusplus(jax.random.key(0), x, 2)
      >>> sorted(float(v) for v in c[:, 0])
      [0.0, 10.0]
    """
    k = _count(k, "k")
    if n_local_trials is not None:
        n_local_trials = _count(n_local_trials, "n_local_trials")
    x = _as_float(x)
    _check_samples(x, "kmeans_plusplus")
    if sample_weight is not None:
        sample_weight = _as_weights(sample_weight, x)
        _check_weights(sample_weight, x.shape[0], axis_name is not None)
    return _kmeans_plusplus_jit(key, x, sample_weight, k, n_local_trials, axis_name)


@functools.partial(jax.jit, static_argnums=(3, 4, 5))
def _kmeans_plusplus_jit(key, x, sample_weight, k, n_local_trials, axis_name):
    xc, x_sq, w, mu, _ = _prepare(x, sample_weight, axis_name)
    return _kmeans_plusplus_centered(key, xc, x_sq, w, k, n_local_trials, axis_name) + mu


# ---------------------------------------------------------------- Lloyd


def _cluster_sums(xc, w, labels, k, acc):
    """This shard's weighted sums ``(k, d)`` and weights ``(k,)`` per cluster (no scatter-add)."""
    onehot = (labels[:, None] == jnp.arange(k, dtype=labels.dtype)).astype(acc) * w[:, None]
    sums = matmul(onehot.T, xc.astype(acc), precision=_HIGHEST)
    return sums, jnp.sum(onehot, axis=0)


def _lloyd_step_jnp(xc, x_sq, w, c, k, precision="float32") -> LloydStep:
    """The unfused step: distances through ``_cross``, sums through the one-hot product."""
    labels, mind = _assign_sq(xc, x_sq, c, precision)
    sums, counts = _cluster_sums(xc, w, labels, k, c.dtype)
    return LloydStep(labels, mind, sums, counts, jnp.sum(w * mind))


def _step(xc, x_sq, w, c, k, impl="auto", precision="float32") -> LloydStep:
    """One pass over ``xc``: a kernel where one applies, else ``_lloyd_step_jnp``."""
    fallback = lambda x, c_, w_: _lloyd_step_jnp(x, x_sq, w_, c_, k, precision)
    return fused.step(xc, c, w, fallback=fallback, impl=impl, x_sq=x_sq, precision=precision)


def _update(xc, w, labels, mind, c_old, k, axis_name):
    """New centroids from labels: one-hot sums (no scatter-add), empty clusters relocated."""
    sums, counts = _cluster_sums(xc, w, labels, k, c_old.dtype)
    return _new_centroids(
        _psum(sums, axis_name), _psum(counts, axis_name), xc, w, labels, mind, c_old, k, axis_name
    )


def _iteration(xc, x_sq, w, c, k, axis_name, impl="auto", precision="float32"):
    """One Lloyd iteration: ``(labels, mind, inertia, new centroids)``."""
    s = _step(xc, x_sq, w, c, k, impl, precision)
    sums, counts = _psum(s.sums, axis_name), _psum(s.counts, axis_name)
    c_new = _new_centroids(sums, counts, xc, w, s.labels, s.mind, c, k, axis_name)
    return s.labels, s.mind, _psum(s.inertia, axis_name), c_new


def _new_centroids(sums, counts, xc, w, labels, mind, c_old, k, axis_name):
    """Centroids from the global ``sums`` and ``counts``, with empty clusters relocated.

    On one device the rule runs in one kernel on CUDA (``fused.update``),
    whose check for an empty cluster stays on the GPU; sharded, and on CPU,
    it is the jnp rule below.
    """
    args = (sums, counts, xc, w, labels, mind, c_old)
    if axis_name is None:
        rule = functools.partial(_new_centroids_jnp, k=k, axis_name=None)
        return fused.update(*args, fallback=rule)
    return _new_centroids_jnp(*args, k, axis_name)


def _new_centroids_jnp(sums, counts, xc, w, labels, mind, c_old, k, axis_name):
    """The jnp form of :func:`_new_centroids` (the kernel follows it)."""
    acc = c_old.dtype

    # scikit-learn's rule: the j-th empty cluster (in index order) takes the j-th
    # point farthest from its centre; that point's weight leaves its old cluster.
    def relocate(sc):
        sums, counts = sc
        empty = counts == 0
        _, (pts, pw, plab) = _global_top_k(mind, (xc.astype(acc), w, labels), k, axis_name)
        rank = jnp.where(empty, jnp.cumsum(empty) - 1, 0)
        contrib = jnp.where(empty[:, None], pw[rank][:, None] * pts[rank], 0)
        wcon = jnp.where(empty, pw[rank], 0)
        move = ((plab[rank][:, None] == jnp.arange(k)) & empty[:, None]).astype(acc)
        sums = jnp.where(empty[:, None], contrib, sums) - move.T @ contrib
        counts = jnp.where(empty, wcon, counts) - move.T @ wcon
        return sums, counts

    # With no empty cluster the rule changes nothing (it subtracts exact zeros),
    # so skip its top-k over all n distances, a pass of its own on a GPU.
    # counts is replicated (psum), so every shard takes the same branch.
    sums, counts = lax.cond(jnp.any(counts == 0), relocate, lambda sc: sc, (sums, counts))

    safe = jnp.where(counts > 0, counts, 1)
    return jnp.where((counts > 0)[:, None], sums / safe[:, None], c_old)


def _initial(key, xc, x_sq, w, init_c, k, init_kind, axis_name):
    if init_kind == "k-means++":
        return _kmeans_plusplus_centered(key, xc, x_sq, w, k, None, axis_name)
    if init_kind == "random":
        return _random_centered(key, xc, w, k, axis_name)
    return init_c.astype(_acc_dtype(xc.dtype))


def _single_run(key, xc, x_sq, w, init_c, tol_abs, *, k, init_kind, max_iter, axis_name, precision):
    acc = _acc_dtype(xc.dtype)
    c0 = _initial(key, xc, x_sq, w, init_c, k, init_kind, axis_name)

    def cond(carry):
        i, _, _, stop, _ = carry
        return (i < max_iter) & ~stop

    def body(carry):
        i, c, labels_old, _, hist = carry
        labels, _, inertia, c_new = _iteration(xc, x_sq, w, c, k, axis_name, precision=precision)
        hist = hist.at[i].set(inertia)
        changed = _psum(jnp.sum(labels != labels_old), axis_name)
        shift = jnp.sum((c_new - c) ** 2)
        return i + 1, c_new, labels, (changed == 0) | (shift <= tol_abs), hist

    carry = _loop_start(c0, xc.shape[0], max_iter, acc, axis_name)
    n_iter, c, _, stop, hist = lax.while_loop(cond, body, carry)
    labels, mind = _assign(xc, x_sq, c, precision)
    inertia = _psum(jnp.sum(w * mind), axis_name)
    return c, labels, inertia, n_iter, stop, hist


def _loop_start(c0, n, max_iter, acc, axis_name):
    """Lloyd's loop carry before the first iteration: iteration, centroids, labels (none
    yet), stop, inertia history."""
    return (
        jnp.int32(0),
        c0,
        _varying(jnp.full(n, -1, jnp.int32), axis_name),
        jnp.bool_(False),
        jnp.full((max_iter,), jnp.nan, acc),
    )


class _Checked(NamedTuple):
    """What fault tolerance needs for every checked step of one run."""

    inv: checksums.Invariants
    unit_weights: bool  # static
    kind: str | None  # static: the injected fault's kind, or None
    persistent: bool  # static
    params: jax.Array | None  # (iteration, index, column, bit), int32


def _checked_step(xc, x_sq, w, c, k, axis_name, precision, ft: _Checked, active):
    """A step, the fault (if any) applied where ``active``, and its checks:
    ``(step, global sums, global counts, global inertia, checksums.CheckResult)``."""
    acc = _acc_dtype(xc.dtype)
    cc = _rounded(c, xc.dtype).astype(acc)  # the centroids the product sees
    inject, simulate = None, lambda s: s
    if ft.kind == "distance":
        where = active if axis_name is None else active & (lax.axis_index(axis_name) == 0)
        # The fused kernel flips the distance itself, before its per-row check and argmin;
        # the steps without that kernel get the fault's consequences simulated.
        inject = jnp.concatenate([where.astype(jnp.int32)[None], ft.params[1:].astype(jnp.int32)])

        def row_distances(row):
            return _sq_dist(xc[row][None], x_sq[row][None], c, precision)[0]

        simulate = lambda s: faults.inject_distance(s, xc, w, row_distances, where, ft.params[1:])
    plain = lambda x_, c_, w_: _lloyd_step_jnp(x_, x_sq, w_, c_, k, precision)
    s, row_faults, row_margin = fused.step_checked(
        xc, c, w, inject, fallback=plain, simulate=simulate, x_sq=x_sq, precision=precision
    )
    row_faults = _psum(row_faults, axis_name)
    row_margin = row_margin if axis_name is None else lax.pmax(row_margin, axis_name)
    sums, counts = _psum(s.sums, axis_name), _psum(s.counts, axis_name)
    if ft.kind in ("sum", "count"):
        sums, counts = faults.inject_totals(ft.kind, sums, counts, active, ft.params[1:])
    dt = checksums.check_dtype(acc)
    mind_sum = _psum(checksums.accurate_sum(w.astype(dt) * s.mind.astype(dt)), axis_name)
    res = checksums.check(
        ft.inv, cc, sums, counts, mind_sum,
        data_dtype=xc.dtype, precision=precision, unit_weights=ft.unit_weights,
    )  # fmt: skip
    res = checksums.with_rows(res, row_faults, row_margin)
    return s, sums, counts, _psum(s.inertia, axis_name), res


def _checked_iteration(xc, x_sq, w, c, k, axis_name, precision, ft: _Checked, active):
    """One checked iteration: ``(step, global inertia, ok, new centroids)``; the caller
    keeps ``c`` where ``ok`` is False."""
    s, sums, counts, inertia, res = _checked_step(xc, x_sq, w, c, k, axis_name, precision, ft,
                                                  active)  # fmt: skip
    ok = res.ok
    c_new = _new_centroids(sums, counts, xc, w, s.labels, s.mind, c, k, axis_name)
    return s, inertia, ok, c_new


def _single_run_checked(
    key, xc, x_sq, w, init_c, tol_abs, ft: _Checked, *, k, init_kind, max_iter, axis_name,
    precision,
):  # fmt: skip
    """``_single_run`` with every step checked (``checksums``) and redone when a check
    fails: the centroids stay, the iteration count does not advance. No ``lax.cond``: the
    outcome selects with ``jnp.where``, so the loop never reads a predicate on the host."""
    acc = _acc_dtype(xc.dtype)
    c0 = _initial(key, xc, x_sq, w, init_c, k, init_kind, axis_name)
    step = functools.partial(_checked_step, xc, x_sq, w, k=k, axis_name=axis_name,
                             precision=precision, ft=ft)  # fmt: skip

    def firing(i, injected):
        if ft.kind is None:
            return jnp.bool_(False)
        return (ft.params[0] == i) & (jnp.bool_(ft.persistent) | ~injected)

    def cond(carry):
        i, _, _, stop, *_ = carry
        return (i < max_iter) & ~stop

    def body(carry):
        i, c, labels_old, _, hist, n_bad, redos, injected, _ = carry
        active = firing(i, injected)
        s, inertia, ok, c_new = _checked_iteration(
            xc, x_sq, w, c, k, axis_name, precision, ft, active
        )
        changed = _psum(jnp.sum(s.labels != labels_old), axis_name)
        shift = jnp.sum((c_new - c) ** 2)
        redos = jnp.where(ok, 0, redos + 1)
        unresolved = redos > checksums.MAX_REDOS
        stop = (ok & ((changed == 0) | (shift <= tol_abs))) | unresolved
        return (
            jnp.where(ok, i + 1, i),
            jnp.where(ok, c_new, c),
            jnp.where(ok, s.labels, labels_old),
            stop,
            jnp.where(ok, hist.at[i].set(inertia), hist),
            n_bad + (~ok).astype(jnp.int32),
            redos,
            injected | active,
            unresolved,
        )

    carry = (
        *_loop_start(c0, xc.shape[0], max_iter, acc, axis_name),
        jnp.int32(0),  # failed steps
        jnp.int32(0),  # failed steps in a row
        jnp.bool_(False),  # the fault was injected
        jnp.bool_(False),  # unresolved
    )
    n_iter, c, labels, stop, hist, n_bad, _, injected, unresolved = lax.while_loop(
        cond, body, carry
    )

    # The final assignment is a whole step, so that its sums feed the distance check.
    def final_cond(carry):
        _, _, ok, tries, *_ = carry
        return ~ok & (tries <= checksums.MAX_REDOS)

    def final_body(carry):
        _, _, _, tries, n_bad, injected = carry
        active = firing(-1, injected)
        s, _, _, _, res = step(c=c, active=active)
        ok = res.ok
        return s.labels, s.mind, ok, tries + 1, n_bad + (~ok).astype(jnp.int32), injected | active

    labels, mind, ok, _, n_bad, _ = lax.while_loop(
        final_cond,
        final_body,
        (
            labels,
            _varying(jnp.zeros(xc.shape[0], acc), axis_name),
            jnp.bool_(False),
            jnp.int32(0),
            n_bad,
            injected,
        ),
    )
    # Each failure above was counted; the first try of a clean final step fails nothing.
    inertia = _psum(jnp.sum(w * mind), axis_name)
    unresolved = unresolved | ~ok
    return c, labels, inertia, n_iter, stop & ~unresolved, hist, n_bad, unresolved


@functools.partial(jax.jit, static_argnames=("k", "iters", "precision"))
def _check_ratios(key, x, sample_weight=None, init_c=None, *, k, iters, precision="float32"):
    """``(iters, 4)`` worst ``|residual| / threshold`` of the column, count, distance and
    per-row distance checks (``checksums.check``; the last 0 where the step runs without
    the fused kernel) in each of ``iters`` clean Lloyd steps from k-means++ (or ``init_c``)
    seeding: the margin of the thresholds, for tests and benchmarks."""
    xc, x_sq, w, mu, _ = _prepare(x, sample_weight, None)
    ft = _Checked(checksums.invariants(xc, x_sq, w), sample_weight is None, None, False, None)
    acc = _acc_dtype(xc.dtype)
    if init_c is None:
        c0 = _kmeans_plusplus_centered(key, xc, x_sq, w, k, None, None)
    else:
        c0 = jnp.asarray(init_c, acc) - mu

    def body(c, _):
        s, _, _, _, r = _checked_step(xc, x_sq, w, c, k, None, precision, ft, jnp.bool_(False))
        c_new = _new_centroids(s.sums, s.counts, xc, w, s.labels, s.mind, c, k, None)
        ratios = [r.columns, r.counts, r.distances, r.rows]
        return c_new, jnp.stack([jnp.asarray(v, jnp.float32) for v in ratios])

    return lax.scan(body, c0, None, length=iters)[1]


def _kmeans_impl(
    key, x, sample_weight, init_c, tol, fault_params=None,
    *, k, init_kind, n_init, max_iter, axis_name, precision,
    fault_tolerance=False, fault_kind=None, fault_persistent=False,
):  # fmt: skip
    xc, x_sq, w, mu, mean_var = _prepare(x, sample_weight, axis_name)
    tol_abs = tol * mean_var
    if init_c is not None:
        init_c = jnp.asarray(init_c, mu.dtype) - mu
    kw = dict(k=k, init_kind=init_kind, max_iter=max_iter, axis_name=axis_name,
              precision=precision)  # fmt: skip

    if fault_tolerance:
        ft = _Checked(
            checksums.invariants(xc, x_sq, w, axis_name),
            sample_weight is None, fault_kind, fault_persistent, fault_params,
        )  # fmt: skip
        run = lambda key: _single_run_checked(key, xc, x_sq, w, init_c, tol_abs, ft, **kw)
    else:
        run = lambda key: _single_run(key, xc, x_sq, w, init_c, tol_abs, **kw)

    if n_init == 1:
        outs = run(key)
    else:
        batched = jax.vmap(run)(jax.random.split(key, n_init))
        best = jnp.argmin(batched[2])
        outs = tuple(o[best] for o in batched[:6])
        if fault_tolerance:  # detections in any restart count
            outs += (jnp.sum(batched[6]), jnp.any(batched[7]))
    c, *rest = outs
    return KMeansState(c + mu, *rest)


_kmeans_jit = jax.jit(
    _kmeans_impl,
    static_argnames=(
        "k", "init_kind", "n_init", "max_iter", "axis_name", "precision",
        "fault_tolerance", "fault_kind", "fault_persistent",
    ),
)  # fmt: skip


def kmeans(
    key: jax.Array,
    x: Any,
    k: int,
    *,
    init: str | Any = "k-means++",
    n_init: int = 1,
    max_iter: int = 300,
    tol: float = 1e-4,
    sample_weight: Any = None,
    axis_name: Any = None,
    precision: str = "float32",
    fault_tolerance: bool = False,
    fault_injection: faults.FaultSpec | None = None,
) -> KMeansState:
    """Lloyd's k-means on the rows of ``x``: pure, jit-able, vmap-able, shardable.

    Args:
      key: a JAX PRNG key (used by ``"k-means++"`` and ``"random"`` init and to
        split over restarts).
      x: ``(n, d)`` data; integer data are converted to the default float dtype.
        bf16/f16 data stay in their dtype for the products, which accumulate in
        f32; centroids, distances and inertia are f32 then.
      k: number of clusters (static).
      init: ``"k-means++"`` (greedy, as scikit-learn), ``"random"`` (k distinct
        points drawn with probability proportional to weight), or a ``(k, d)``
        array of initial centroids (then ``n_init`` is taken as 1). Static when a
        string.
      n_init: independent restarts, run with ``vmap`` over split keys; the one
        with the lowest inertia is returned (static).
      max_iter: most Lloyd iterations per restart (static).
      tol: convergence when the squared centroid shift summed over clusters is
        at most ``tol * mean(var(x, axis=0))`` (weighted variance).
      sample_weight: ``(n,)`` non-negative weights, or None for all ones.
      axis_name: when called under ``shard_map`` with the points (rows of ``x``
        and ``sample_weight``) sharded over this mesh axis, sums, counts,
        inertia and variance are reduced with ``psum``; centroids and scalars
        come out replicated, labels sharded like ``x``.
      precision: how f32 distances are multiplied: ``"float32"`` (f32 accuracy) or
        ``"tensorfloat32"`` (one TF32 product, dot products off by up to ~2^-10 of
        ``sum |x_i c_i|``: faster where the arithmetic binds, large k and d; on the jnp
        path XLA's default precision). bf16, f16 and f64 data ignore it (static).
      fault_tolerance: check every step's cluster sums, counts and distances against
        invariants of the data computed once per run (``jax_tsm2.clustering.checksums``;
        one more read of ``x``), and redo a step that fails; the final assignment is
        checked too. ``faults_detected`` and ``fault_unresolved`` of the result report
        it. On clean data the result is the one without it (static).
      fault_injection: a ``jax_tsm2.clustering.faults.FaultSpec``: flip one bit of one
        step's outputs, to test ``fault_tolerance`` (which it requires).

    Returns:
      A :class:`KMeansState`.

    Raises:
      ValueError: as scikit-learn does: ``k``, ``n_init`` or ``max_iter`` not a positive
        integer (Python or NumPy), ``tol`` negative, ``x`` without samples or features,
        fewer samples than ``k``, NaN or Inf in ``x`` or ``sample_weight``, a negative
        weight, or weights that are all zero. The values are checked where they are
        known: under ``jit``, ``vmap`` or ``shard_map`` non-finite data give NaN results.

    Differences from ``sklearn.cluster.KMeans(algorithm="lloyd")``, and why:

    * ``tol`` is relative to the *weighted* variance (scikit-learn ignores the
      weights there), so that integer weights behave exactly as repeated points.
    * Randomness comes from JAX keys, so the same seed gives different
      centroids than scikit-learn's ``random_state``; from the same initial
      centroids the iterations are the same algorithm.
    * ``"random"`` init draws with probability proportional to weight without
      replacement through the Gumbel top-k trick (shard-friendly); under
      ``axis_name`` it depends on the number of shards.
    * No warning when ``n_init > 1`` with an array init; no ``copy_x``,
      ``verbose`` or ``algorithm="elkan"``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> x = jnp.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]])
      >>> s = kmeans(jax.random.key(0), x, 2)
      >>> sorted(s.centroids[:, 0].tolist()), float(s.inertia)
      ([0.0, 10.0], 1.0)
      >>> bool(s.labels[0] == s.labels[1]), bool(s.converged)
      (True, True)

      With fault tolerance, a bit flipped in a cluster sum is caught and its step redone:

      >>> from jax_tsm2.clustering.faults import FaultSpec
      >>> spec = FaultSpec(iteration=0, kind="sum", index=0, column=0, bit=30)
      >>> f = kmeans(jax.random.key(0), x, 2, fault_tolerance=True, fault_injection=spec)
      >>> int(f.faults_detected), bool(f.fault_unresolved), float(f.inertia)
      (1, False, 1.0)
    """
    k, n_init, max_iter = _count(k, "k"), _count(n_init, "n_init"), _count(max_iter, "max_iter")
    if not (isinstance(tol, (int, float, np.number)) and 0 <= tol < math.inf):
        raise ValueError(f"tol must be a non-negative number, got {tol!r}")
    x = _as_float(x)
    _check_samples(x, "kmeans")
    if axis_name is None and x.shape[0] < k:
        raise ValueError(f"n_samples={x.shape[0]} should be >= k={k}")
    if sample_weight is not None:
        sample_weight = _as_weights(sample_weight, x)
        _check_weights(sample_weight, x.shape[0], axis_name is not None)
    init_c = None
    if isinstance(init, str):
        if init not in INIT_METHODS:
            raise ValueError(f"init must be one of {INIT_METHODS} or an array, got {init!r}")
        init_kind = init
    else:
        init_c = jnp.asarray(init)
        if init_c.shape != (k, x.shape[1]):
            raise ValueError(f"init array must have shape {(k, x.shape[1])}, got {init_c.shape}")
        init_kind, n_init = "array", 1
    precision = tiled.check_precision(precision)
    fault_kind, fault_persistent, fault_params = None, False, None
    if fault_injection is not None:
        if not fault_tolerance:
            raise ValueError("fault_injection needs fault_tolerance=True")
        bits = 8 * _acc_dtype(x.dtype).itemsize
        faults.check_spec(fault_injection, x.shape[0], k, x.shape[1], bits)
        fault_kind, fault_persistent = fault_injection.kind, bool(fault_injection.persistent)
        f = fault_injection
        fault_params = jnp.array([f.iteration, f.index, f.column, f.bit], jnp.int32)
    return _kmeans_jit(
        key, x, sample_weight, init_c, tol, fault_params,
        k=k, init_kind=init_kind, n_init=n_init, max_iter=max_iter, axis_name=axis_name,
        precision=precision, fault_tolerance=bool(fault_tolerance), fault_kind=fault_kind,
        fault_persistent=fault_persistent,
    )  # fmt: skip


def assign(x: Any, centroids: Any, *, precision: str = "float32") -> tuple[jax.Array, jax.Array]:
    """Closest centroid of each row of ``x``: ``(labels, squared distances)``.

    Both are shifted by the centroids' mean first, so that points and centroids
    far from the origin keep their distances (no cancellation in
    ``||x||^2 - 2 x.c + ||c||^2``). Distances are in the accumulation dtype
    (f32 for bf16/f16) and never negative. On CUDA the tiled assignment serves
    any k without writing the ``n x k`` distances (``jax_tsm2.clustering.tiled``);
    ``precision`` as for :func:`kmeans`.

    Example:
      >>> import jax.numpy as jnp
      >>> labels, d2 = assign(jnp.array([[0.0, 1.0], [9.0, 0.0]]),
      ...                     jnp.array([[0.0, 0.0], [10.0, 0.0]]))
      >>> labels.tolist(), d2.tolist()
      ([0, 1], [1.0, 1.0])
    """
    precision = tiled.check_precision(precision)
    return _assign_jit(*_check_pair(x, centroids, "assign"), precision)


@functools.partial(jax.jit, static_argnums=2)
def _assign_jit(x, c, precision):
    xc, c = _shift_to_centroids(x, c)
    return _assign(xc, _sq_norms(xc), c, precision)


def sq_distances(x: Any, centroids: Any) -> jax.Array:
    """``(n, k)`` squared distances from each row of ``x`` to each centroid.

    Computed as :func:`assign` does (shifted by the centroids' mean, clamped
    at zero, f32 accumulation for bf16/f16).

    Example:
      >>> import jax.numpy as jnp
      >>> sq_distances(jnp.array([[0.0, 1.0]]), jnp.array([[0.0, 0.0], [3.0, 1.0]])).tolist()
      [[1.0, 9.0]]
    """
    return _sq_distances_jit(*_check_pair(x, centroids, "sq_distances"))


@jax.jit
def _sq_distances_jit(x, c):
    xc, c = _shift_to_centroids(x, c)
    return _sq_dist(xc, _sq_norms(xc), c)


def lloyd_step(
    x: Any,
    centroids: Any,
    sample_weight: Any = None,
    *,
    impl: str = "auto",
    precision: str = "float32",
) -> LloydStep:
    """One pass of Lloyd's algorithm: labels, distances, per-cluster sums and weights, inertia.

    What :func:`kmeans` computes in each iteration, before the new centroids
    (``sums / counts``, empty clusters relocated). On CUDA one fused kernel reads
    ``x`` once where it serves the shape (``k <= 32``, ``jax_tsm2.clustering.fused``),
    and the tiled assignment and sums read it twice for any other k and d (f32, bf16,
    f16: ``jax_tsm2.clustering.tiled``); elsewhere the unfused jnp path runs.

    Unlike :func:`assign`, ``x`` is used as given (no shift): :func:`kmeans`
    centres the data once before iterating, which keeps the expanded distance
    formula accurate for data far from the origin.

    Args:
      x: ``(n, d)`` data.
      centroids: ``(k, d)``; rounded to ``x``'s dtype for the distances, as
        :func:`kmeans` does.
      sample_weight: ``(n,)`` weights, or None for all ones.
      impl: ``"auto"`` (a kernel where one applies), ``"ffi"`` (force the kernel
        ``fused.kernel_for`` names, on CPU its plain-loop reference), ``"jnp"``.
      precision: how f32 distances are multiplied, as for :func:`kmeans`.

    Returns:
      A :class:`LloydStep`: ``labels`` (int32), ``mind``, ``sums`` ``(k, d)``,
      ``counts`` ``(k,)``, ``inertia``, in the accumulation dtype (f32 for
      bf16/f16 data).

    Example:
      >>> import jax.numpy as jnp
      >>> s = lloyd_step(jnp.array([[0.0, 1.0], [9.0, 0.0], [11.0, 0.0]]),
      ...                jnp.array([[0.0, 0.0], [10.0, 0.0]]))
      >>> s.labels.tolist(), s.sums.tolist(), s.counts.tolist(), float(s.inertia)
      ([0, 1, 1], [[0.0, 1.0], [20.0, 0.0]], [1.0, 2.0], 3.0)
    """
    if impl not in fused.IMPLS:
        raise ValueError(f"impl must be one of {fused.IMPLS}, got {impl!r}")
    precision = tiled.check_precision(precision)
    x, c = _check_pair(x, centroids, "lloyd_step")
    n = x.shape[0]
    if sample_weight is None:
        w = jnp.ones((n,), c.dtype)
    else:
        w = jnp.asarray(sample_weight, c.dtype)
        if w.shape != (n,):
            raise ValueError(f"sample_weight must have shape ({n},), got {w.shape}")
    return _lloyd_step_jit(x, c, w, impl, precision)


@functools.partial(jax.jit, static_argnums=(3, 4))
def _lloyd_step_jit(x, c, w, impl, precision):
    return _step(x, _sq_norms(x), w, c, c.shape[0], impl, precision)


def _check_pair(x: Any, centroids: Any, who: str) -> tuple[jax.Array, jax.Array]:
    x = _as_float(x)
    c = jnp.asarray(centroids, _acc_dtype(x.dtype))
    if x.ndim != 2 or c.ndim != 2 or x.shape[1] != c.shape[1] or c.shape[0] == 0:
        raise ValueError(
            f"need x (n, d) and centroids (k, d) with k >= 1, got {x.shape} and {c.shape}"
        )
    _check_shape(x, who)  # the same error on every path (the kernel takes no d = 0)
    return x, c


def _shift_to_centroids(x: jax.Array, c: jax.Array) -> tuple[jax.Array, jax.Array]:
    shift = jnp.mean(c, axis=0)
    return _rounded(x.astype(c.dtype) - shift, x.dtype), c - shift
