"""k-means on data in host memory, streamed to the device in chunks: ``kmeans_streamed``.

For data larger than the device's memory, or than a budget the user sets: the points stay
in host memory (a NumPy array or a ``numpy.memmap``) and every pass over them copies them to
the device chunk by chunk. The copy of the next chunk is issued before the current chunk's
step runs (JAX dispatches both asynchronously), so the host link and the GPU work at the
same time, and an iteration costs about one copy of the data.

Per chunk the same Lloyd step as in memory runs (``core._step``: the fused or tiled kernels
on a GPU), returning the chunk's cluster sums, weights and inertia, which add up over the
chunks, and the chunk's points farthest from their centres, kept for scikit-learn's rule for
empty clusters. Chunks have one shape (the last is padded with rows of weight zero), so the
step compiles once.

Where it differs from :func:`jax_tsm2.kmeans` on the same data:

* k-means++ (or ``"random"``) runs on a uniform sample of ``init_size`` rows, as
  scikit-learn's ``MiniBatchKMeans`` initializes (an array init is taken as it is).
* One restart (``n_init`` is not taken).
* Sums over the chunks are added in the chunks' order, so results equal the in-memory
  run's to floating-point tolerance, not bit for bit.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_tsm2.clustering import core

__all__ = ["StreamPlan", "kmeans_streamed", "plan_chunks"]


@dataclasses.dataclass(frozen=True)
class StreamPlan:
    """How a pass over host data is cut: ``rows`` per chunk, ``chunks`` of them."""

    rows: int
    chunks: int
    bytes_per_row: int


def plan_chunks(n: int, d: int, k: int, dtype: Any, budget_bytes: int) -> StreamPlan:
    """Rows per chunk so that two chunks in flight and their step fit ``budget_bytes``.

    A row costs its bytes twice (the copy and the centred copy the step reads), its squared
    norm, weight, label and distance, and, should the step fall back to XLA's products, a row
    of ``k`` distances. Two chunks are in flight (one copying, one computing).

    Example:
        >>> p = plan_chunks(10**8, 64, 1024, "float32", 8 << 30)
        >>> p.rows * p.chunks >= 10**8, 2 * p.rows * p.bytes_per_row <= 8 << 30
        (True, True)
    """
    itemsize = np.dtype(dtype).itemsize
    acc = 8 if itemsize == 8 else 4
    per_row = 2 * d * itemsize + 4 * acc + k * acc
    fixed = 4 * k * d * acc  # centroids, sums, candidates, the new centroids
    rows = (budget_bytes - fixed) // (2 * per_row)
    if rows < 1:
        raise ValueError(
            f"device_memory_budget={budget_bytes} bytes holds no chunk of {d}-feature rows "
            f"at k={k}: it needs at least {fixed + 2 * per_row} bytes"
        )
    rows = int(min(rows, n))
    return StreamPlan(rows, max(1, math.ceil(n / rows)), per_row)


def _chunk(x: np.ndarray, w: np.ndarray | None, i: int, rows: int):
    """Chunk ``i`` on the device, padded to ``rows`` with rows of weight zero: ``(x, w)``,
    where without sample weights ``w`` is the count of real rows (``_weights`` makes the
    weights on the device, so they do not cross the link)."""
    lo, hi = i * rows, min((i + 1) * rows, x.shape[0])
    xs = np.ascontiguousarray(x[lo:hi])
    if hi - lo < rows:
        xs = np.concatenate([xs, np.zeros((rows - (hi - lo), x.shape[1]), x.dtype)])
    if w is None:
        return jax.device_put(xs), jax.device_put(np.int32(hi - lo))
    ws = np.zeros(rows, np.float32)
    ws[: hi - lo] = w[lo:hi]
    return jax.device_put(xs), jax.device_put(ws)


def _weights(w: jax.Array, rows: int, dtype: Any) -> jax.Array:
    """A chunk's row weights: ``w`` itself, or ones on its ``w`` real rows (a count)."""
    if w.ndim == 0:
        return (jnp.arange(rows) < w).astype(dtype)
    return w.astype(dtype)


def _passes(x, w, plan: StreamPlan, fn: Callable, carry):
    """``carry, done = fn(carry, x_chunk, w_chunk, i)`` over every chunk, in order.

    Chunk i's work is queued before chunk i + 1 is copied, so that the GPU computes while
    the copy runs (``jax.device_put`` from pageable host memory holds the calling thread
    until its copy is done). The copy starts only once chunk i - 1's work (``done``, an
    array its step produced) has finished, so that at most two chunks hold device memory.
    """
    cur = _chunk(x, w, 0, plan.rows)
    prev_done = None
    for i in range(plan.chunks):
        carry, done = fn(carry, *cur, i)
        if i + 1 < plan.chunks:
            if prev_done is not None:
                prev_done.block_until_ready()
            cur = _chunk(x, w, i + 1, plan.rows)
        prev_done = done
    return carry


@jax.jit
def _moments(x, w):
    """Weight, weighted mean and centred sum of squares of one chunk (for Chan's merge)."""
    xa = x.astype(core._acc_dtype(x.dtype))
    wa = _weights(w, x.shape[0], xa.dtype)
    total = jnp.sum(wa)
    mean = jnp.sum(wa[:, None] * xa, axis=0) / jnp.where(total > 0, total, 1)
    m2 = jnp.sum(wa[:, None] * (xa - mean) ** 2, axis=0)
    return total, mean, m2


def _mean_and_variance(x, w, plan):
    """Weighted mean and mean per-feature variance over all chunks, merged in float64."""

    def add(acc, xc, wc, i):
        parts = _moments(xc, wc)
        return [*acc, parts], parts[0]

    parts = [tuple(np.asarray(a, np.float64) for a in p) for p in _passes(x, w, plan, add, [])]
    total, mean, m2 = 0.0, np.zeros(x.shape[1]), np.zeros(x.shape[1])
    for t, mu, s in parts:
        if t == 0:
            continue
        delta = mu - mean
        both = total + t
        mean = mean + delta * (t / both)
        m2 = m2 + s + delta**2 * (total * t / both)
        total = both
    return mean, float(np.mean(m2 / total)), total


def _centre(x, w, mu):
    acc = core._acc_dtype(x.dtype)
    xc = core._rounded(x.astype(acc) - mu, x.dtype)
    return xc, core._sq_norms(xc), _weights(w, x.shape[0], acc)


@functools.partial(jax.jit, static_argnames="precision")
def _chunk_step(x, w, c, mu, labels_old, precision="float32"):
    """One chunk's share of an iteration: sums, weights, inertia, changed labels, and the
    chunk's k points farthest from their centres (padding rows never among them)."""
    k = c.shape[0]
    xc, x_sq, wa = _centre(x, w, mu)
    s = core._step(xc, x_sq, wa, c, k, precision=precision)
    mind = jnp.where(wa > 0, s.mind, -1)
    far, idx = lax.top_k(mind, min(k, x.shape[0]))
    changed = jnp.sum((s.labels != labels_old) & (wa > 0))
    cand = (far, xc[idx].astype(c.dtype), wa[idx], s.labels[idx])
    return s.sums, s.counts, s.inertia, changed, s.labels, cand


@jax.jit
def _merge_candidates(a, b):
    """The k farthest of two candidate sets."""
    k = a[0].shape[0]
    both = tuple(jnp.concatenate([u, v]) for u, v in zip(a, b, strict=True))
    top, idx = lax.top_k(both[0], k)
    return (top, *(p[idx] for p in both[1:]))


@jax.jit
def _new_centroids(sums, counts, cand, c_old):
    """scikit-learn's rule, as ``core._new_centroids_jnp`` applies it, from the candidates."""
    k = c_old.shape[0]
    _, pts, pw, plab = cand
    empty = counts == 0
    rank = jnp.where(empty, jnp.cumsum(empty) - 1, 0)
    contrib = jnp.where(empty[:, None], pw[rank][:, None] * pts[rank], 0)
    wcon = jnp.where(empty, pw[rank], 0)
    move = ((plab[rank][:, None] == jnp.arange(k)) & empty[:, None]).astype(sums.dtype)
    sums = jnp.where(empty[:, None], contrib, sums) - move.T @ contrib
    counts = jnp.where(empty, wcon, counts) - move.T @ wcon
    safe = jnp.where(counts > 0, counts, 1)
    return jnp.where((counts > 0)[:, None], sums / safe[:, None], c_old)


def _keep(out: list, lab: jax.Array) -> list:
    """``out`` with ``lab`` appended and the chunk before it moved to the host, so that its
    device buffer can go (this waits for that chunk's step, as ``_passes`` does before the
    next copy anyway)."""
    if out:
        out[-1] = np.asarray(out[-1])
    return [*out, lab]


def kmeans_streamed(
    key: jax.Array,
    x: np.ndarray,
    k: int,
    *,
    device_memory_budget: int,
    init: str | Any = "k-means++",
    max_iter: int = 300,
    tol: float = 1e-4,
    sample_weight: np.ndarray | None = None,
    init_size: int | None = None,
    progress: Callable[[int, float], None] | None = None,
    precision: str = "float32",
) -> core.KMeansState:
    """Lloyd's k-means over host data, streamed in chunks that fit ``device_memory_budget``.

    Args:
      key: JAX PRNG key for the init.
      x: ``(n, d)`` NumPy array or memmap in host memory (f32, f64, bf16 or f16).
      k: number of clusters.
      device_memory_budget: bytes of device memory the chunks and the step may use.
      init: ``"k-means++"`` or ``"random"`` (on a sample of ``init_size`` rows), or a
        ``(k, d)`` array of initial centroids.
      max_iter, tol: as :func:`jax_tsm2.kmeans` (``tol`` times the weighted mean
        per-feature variance bounds the squared centroid shift).
      sample_weight: ``(n,)`` non-negative weights or None.
      init_size: rows sampled for the init (default ``max(100_000, 10 * k)``).
      progress: called as ``progress(iteration, inertia)`` after each iteration.
      precision: how f32 distances are multiplied, as :func:`jax_tsm2.kmeans` takes it.

    Returns:
      A :class:`~jax_tsm2.clustering.core.KMeansState` whose ``labels`` are a NumPy array
      in host memory (the final assignment against the returned centroids).

    Example:
        >>> import jax, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> x = np.concatenate([rng.normal(0, 1, (500, 3)), rng.normal(20, 1, (500, 3))])
        >>> s = kmeans_streamed(jax.random.key(0), x.astype(np.float32), 2,
        ...                     device_memory_budget=64 << 10)  # two chunks of 681 rows
        >>> sorted(np.abs(np.round(np.asarray(s.centroids)[:, 0])).tolist())
        [0.0, 20.0]
        >>> s.labels.shape, bool(s.converged)
        ((1000,), True)
    """
    k = core._count(k, "k")
    max_iter = core._count(max_iter, "max_iter")
    if not (isinstance(tol, (int, float, np.number)) and 0 <= tol < math.inf):
        raise ValueError(f"tol must be a non-negative number, got {tol!r}")
    x = x if isinstance(x, np.ndarray) else np.asarray(x)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"x must be 2-D with samples and features, got shape {x.shape}")
    if x.shape[0] < k:
        raise ValueError(f"n_samples={x.shape[0]} should be >= k={k}")
    if not np.issubdtype(x.dtype, np.floating) and x.dtype.name not in ("bfloat16",):
        x = x.astype(np.float32)
    w = None
    if sample_weight is not None:
        w = np.asarray(sample_weight, np.float32)
        if w.shape != (x.shape[0],):
            raise ValueError(f"sample_weight must have shape ({x.shape[0]},), got {w.shape}")
        if not np.isfinite(w).all() or (w < 0).any():
            raise ValueError("sample_weight must be finite and non-negative")
        if not w.any():
            raise ValueError("sample_weight must not be all zero")
    acc = core._acc_dtype(jnp.dtype(x.dtype))
    plan = plan_chunks(x.shape[0], x.shape[1], k, x.dtype, int(device_memory_budget))

    mu64, mean_var, _ = _mean_and_variance(x, w, plan)
    mu = jnp.asarray(mu64, acc)
    rng = np.random.default_rng(int(jax.random.randint(key, (), 0, 2**31 - 1)))
    size = init_size if init_size is not None else max(100_000, 10 * k)
    if isinstance(init, str):
        if init not in core.INIT_METHODS:
            raise ValueError(f"init must be one of {core.INIT_METHODS} or an array, got {init!r}")
        rows = np.sort(rng.choice(x.shape[0], min(x.shape[0], max(size, k)), replace=False))
        sample = np.asarray(x[rows], np.float64) - mu64
        ws = None if w is None else w[rows]
        c = _init_centroids(key, sample, ws, k, init, x.dtype, acc)
    else:
        c0 = np.asarray(init, np.float64)
        if c0.shape != (k, x.shape[1]):
            raise ValueError(f"init array must have shape {(k, x.shape[1])}, got {c0.shape}")
        c = jnp.asarray(c0 - mu64, acc)

    n = x.shape[0]
    labels = np.full(plan.chunks * plan.rows, -1, np.int32)
    tol_abs = tol * mean_var
    history: list[float] = []
    converged = False

    def pass_labels(chunk_labels):
        # Labels come back with asynchronous copies, written out once the pass is queued.
        for i, lab in enumerate(chunk_labels):
            labels[i * plan.rows : (i + 1) * plan.rows] = np.asarray(lab)

    def iteration(carry, xc, wc, i):
        sums, counts, inertia, changed, cand, out = carry
        old = jax.device_put(labels[i * plan.rows : (i + 1) * plan.rows])
        s, cnt, ine, ch, lab, cd = _chunk_step(xc, wc, c, mu, old, precision=precision)
        lab.copy_to_host_async()
        cand = cd if cand is None else _merge_candidates(cand, cd)
        return (sums + s, counts + cnt, inertia + ine, changed + ch, cand, _keep(out, lab)), ine

    it = 0
    for it in range(1, max_iter + 1):
        zero = (jnp.zeros_like(c), jnp.zeros(k, acc), jnp.zeros((), acc), jnp.zeros((), jnp.int32))
        sums, counts, inertia, changed, cand, out = _passes(
            x, w, plan, iteration, (*zero, None, [])
        )
        c_new = _new_centroids(sums, counts, cand, c)
        shift = float(jnp.sum((c_new - c) ** 2))
        history.append(float(inertia))
        pass_labels(out)
        c = c_new
        if progress is not None:
            progress(it, history[-1])
        if int(changed) == 0 or shift <= tol_abs:
            converged = True
            break

    def final(carry, xc, wc, i):
        inertia, out = carry
        old = jax.device_put(labels[i * plan.rows : (i + 1) * plan.rows])
        _, _, ine, _, lab, _ = _chunk_step(xc, wc, c, mu, old, precision=precision)
        lab.copy_to_host_async()
        return (inertia + ine, _keep(out, lab)), ine

    inertia, out = _passes(x, w, plan, final, (jnp.zeros((), acc), []))
    pass_labels(out)
    hist = jnp.full((max_iter,), jnp.nan, acc).at[: len(history)].set(jnp.asarray(history, acc))
    return core.KMeansState(c + mu, labels[:n], inertia, jnp.int32(it), jnp.bool_(converged), hist)


def _init_centroids(key, sample, ws, k, init, dtype, acc):
    """Initial centroids, relative to the full data's mean, from a sample centred on it."""
    xs = jnp.asarray(sample, dtype)
    if init == "k-means++":
        return jnp.asarray(core.kmeans_plusplus(key, xs, k, sample_weight=ws), acc)
    w = jnp.ones(xs.shape[0], acc) if ws is None else jnp.asarray(ws, acc)
    return core._random_centered(key, xs.astype(acc), w, k, None)
