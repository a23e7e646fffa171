"""k-means on data in host memory, streamed to the device in chunks: ``kmeans_streamed``.

For data larger than the device's memory, or than a budget the user sets: the points stay
in host memory (a NumPy array or a ``numpy.memmap``) and every pass over them brings them to
the device chunk by chunk, one of two ways (``stream_path`` picks):

* pinned: the array is page-locked in place for the fit (:mod:`jax_tsm2.host_memory`) and a
  pass is one XLA program (:mod:`jax_tsm2.clustering.program_passes`) that reads each chunk
  inside the program, a copy engine bringing the next chunk while the current one's step
  runs; the labels stay on the device until the end.
* copied: ``jax.device_put`` of each chunk from pageable memory and one jitted step per
  chunk; the copy of the next chunk is issued before the current chunk's step runs (JAX
  dispatches both asynchronously); the labels go back to host memory every pass.

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

import contextlib
import dataclasses
import logging
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_tsm2.clustering import chunk_work, core, program_passes

__all__ = ["StreamPath", "StreamPlan", "kmeans_streamed", "plan_chunks", "stream_path"]

_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class StreamPlan:
    """How a pass over host data is cut: ``rows`` per chunk, ``chunks`` of them."""

    rows: int
    chunks: int
    bytes_per_row: int


def plan_chunks(
    n: int, d: int, k: int, dtype: Any, budget_bytes: int, *, resident_bytes_per_row: int = 0
) -> StreamPlan:
    """Rows per chunk so that two chunks in flight and their step fit ``budget_bytes``.

    A row costs its bytes twice (the copy and the centred copy the step reads), its squared
    norm, weight, label and distance, and, should the step fall back to XLA's products, a row
    of ``k`` distances. Two chunks are in flight (one copying, one computing); on the pinned
    path the second chunk's share holds the two device buffers the next chunks are copied
    into ahead of their reads (:mod:`jax_tsm2.host_memory`). Besides,
    ``resident_bytes_per_row`` of every row (padded to whole chunks) stay on the device for
    the whole fit: the labels (and weights) of the single-program passes.

    Example:
        >>> p = plan_chunks(10**8, 64, 1024, "float32", 8 << 30)
        >>> p.rows * p.chunks >= 10**8, 2 * p.rows * p.bytes_per_row <= 8 << 30
        (True, True)
        >>> q = plan_chunks(10**8, 64, 1024, "float32", 8 << 30, resident_bytes_per_row=4)
        >>> q.rows < p.rows, 2 * q.rows * q.bytes_per_row + 4 * q.rows * q.chunks <= 8 << 30
        (True, True)
    """
    itemsize = np.dtype(dtype).itemsize
    acc = 8 if itemsize == 8 else 4
    per_row = 2 * d * itemsize + 4 * acc + k * acc
    fixed = 4 * k * d * acc  # centroids, sums, candidates, the new centroids
    # chunks * rows <= n + rows: the resident rows cost n of them plus one per chunk row.
    rows = (budget_bytes - fixed - n * resident_bytes_per_row) // (
        2 * per_row + resident_bytes_per_row
    )
    if rows < 1:
        kept = f" and {resident_bytes_per_row} bytes of each of {n} rows" * bool(
            resident_bytes_per_row
        )
        raise ValueError(
            f"device_memory_budget={budget_bytes} bytes holds no chunk of {d}-feature rows "
            f"at k={k}{kept}: it needs at least "
            f"{fixed + 2 * per_row + (n + 1) * resident_bytes_per_row} bytes"
        )
    rows = int(min(rows, n))
    return StreamPlan(rows, max(1, math.ceil(n / rows)), per_row)


def _chunk(x: np.ndarray, w: np.ndarray | None, i: int, rows: int):
    """Chunk ``i`` on the device, padded to ``rows`` with rows of weight zero: ``(x, w)``,
    where without sample weights ``w`` is the count of real rows (``chunk_work.weights`` makes the
    weights on the device, so they do not cross the link)."""
    lo = min(i * rows, x.shape[0])
    hi = min(lo + rows, x.shape[0])
    xs = np.ascontiguousarray(x[lo:hi])
    if hi - lo < rows:
        xs = np.concatenate([xs, np.zeros((rows - (hi - lo), x.shape[1]), x.dtype)])
    if w is None:
        return jax.device_put(xs), jax.device_put(np.int32(hi - lo))
    ws = np.zeros(rows, np.float32)
    ws[: hi - lo] = w[lo:hi]
    return jax.device_put(xs), jax.device_put(ws)


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


def _streamed_moments(x, w, plan) -> list[tuple]:
    """Each chunk's ``chunk_work.moments``, copied chunk by chunk."""

    def add(acc, xc, wc, i):
        parts = chunk_work.moments(xc, wc)
        return [*acc, parts], parts[0]

    return _passes(x, w, plan, add, [])


def _merge_moments(parts, d: int):
    """Weighted mean, mean per-feature variance and total weight of chunks' moments, merged
    in float64 in chunk order (Chan's rule)."""
    parts = [tuple(np.asarray(a, np.float64) for a in p) for p in parts]
    total, mean, m2 = 0.0, np.zeros(d), np.zeros(d)
    for t, mu, s in parts:
        if t == 0:
            continue
        delta = mu - mean
        both = total + t
        mean = mean + delta * (t / both)
        m2 = m2 + s + delta**2 * (total * t / both)
        total = both
    return mean, float(np.mean(m2 / total)), total


def _mean_and_variance(x, w, plan):
    """Weighted mean and mean per-feature variance over all chunks, merged in float64."""
    return _merge_moments(_streamed_moments(x, w, plan), x.shape[1])


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


class _CopiedPasses:
    """Passes that copy each chunk from host memory with ``jax.device_put`` (``_passes``),
    one jitted step per chunk; the labels live in host memory."""

    def __init__(self, x, w, plan: StreamPlan, precision: str):
        self.x, self.w, self.plan, self.precision = x, w, plan, precision
        self.labels = np.full(plan.chunks * plan.rows, -1, np.int32)
        self.pending: list = []

    def _flush(self) -> None:
        # Labels come back with asynchronous copies, written out once the pass is queued.
        rows = self.plan.rows
        for i, lab in enumerate(self.pending):
            self.labels[i * rows : (i + 1) * rows] = np.asarray(lab)
        self.pending = []

    def moments(self) -> list:
        return _streamed_moments(self.x, self.w, self.plan)

    def _old(self, i: int) -> jax.Array:
        return jax.device_put(self.labels[i * self.plan.rows : (i + 1) * self.plan.rows])

    def iteration(self, c, mu):
        self._flush()

        def step(carry, xc, wc, i):
            sums, counts, inertia, changed, cand, out = carry
            s, cnt, ine, ch, lab, cd = chunk_work.step(
                xc, wc, c, mu, self._old(i), precision=self.precision
            )
            lab.copy_to_host_async()
            cand = cd if cand is None else chunk_work.merge_candidates(cand, cd)
            return (sums + s, counts + cnt, inertia + ine, changed + ch, cand, _keep(out, lab)), ine

        k, acc = c.shape[0], c.dtype
        zero = (jnp.zeros_like(c), jnp.zeros(k, acc), jnp.zeros((), acc), jnp.zeros((), jnp.int32))
        *out, self.pending = _passes(self.x, self.w, self.plan, step, (*zero, None, []))
        return tuple(out)

    def final(self, c, mu):
        self._flush()

        def step(carry, xc, wc, i):
            inertia, out = carry
            _, _, ine, _, lab, _ = chunk_work.step(
                xc, wc, c, mu, self._old(i), precision=self.precision
            )
            lab.copy_to_host_async()
            return (inertia + ine, _keep(out, lab)), ine

        inertia, self.pending = _passes(
            self.x, self.w, self.plan, step, (jnp.zeros((), c.dtype), [])
        )
        return inertia

    def host_labels(self) -> np.ndarray:
        self._flush()
        return self.labels


class _ProgramPasses:
    """Passes that are one XLA program each, reading the chunks inside it with ``read``
    (``program_passes``); the labels live on the device until ``host_labels``."""

    def __init__(self, read, source, w, n: int, plan: StreamPlan, precision: str):
        self.pp = program_passes
        self.source = source
        self.kw = {"read": read, "rows": plan.rows, "chunks": plan.chunks, "n": n}
        padded = plan.chunks * plan.rows
        self.w_all = None if w is None else jnp.asarray(np.pad(w, (0, padded - n)))
        self.labels = program_passes.labels_buffer(plan.chunks, plan.rows)
        self.precision = precision

    def moments(self) -> list:
        parts = self.pp.moments(self.source, self.w_all, **self.kw)
        return list(zip(*(np.asarray(p) for p in parts), strict=True))

    def iteration(self, c, mu):
        *out, self.labels = self.pp.iteration(
            self.source, self.w_all, self.labels, c, mu, precision=self.precision, **self.kw
        )
        return tuple(out)

    def final(self, c, mu):
        inertia, self.labels = self.pp.final(
            self.source, self.w_all, self.labels, c, mu, precision=self.precision, **self.kw
        )
        return inertia

    def host_labels(self) -> np.ndarray:
        return np.asarray(self.labels)


@dataclasses.dataclass(frozen=True)
class StreamPath:
    """How ``kmeans_streamed`` reads host data: ``pinned`` (pinned in place and read inside
    one program per pass) or copied chunk by chunk with ``jax.device_put``, the ``plan`` of
    chunks it uses, and ``reason``, why it does not pin (None when it does)."""

    pinned: bool
    plan: StreamPlan
    reason: str | None = None


def stream_path(
    x: np.ndarray,
    k: int,
    device_memory_budget: int,
    *,
    weighted: bool = False,
    host_pinning: bool | None = None,
) -> StreamPath:
    """The path ``kmeans_streamed`` takes for ``x`` (see its ``host_pinning``).

    Pinning needs a CUDA build on a CUDA device, a C-contiguous NumPy array of a float dtype,
    and room in the budget for the labels (and weights) of all rows besides the chunks; by
    default a ``numpy.memmap`` is not pinned (that would read all of it into locked memory).
    ``host_pinning=True`` raises ValueError where it cannot pin.

    Example (no GPU here: the copied path):
        >>> import numpy as np
        >>> p = stream_path(np.ones((1000, 4), np.float32), 3, 64 << 10)
        >>> p.pinned, p.plan.chunks > 1, p.reason is not None
        (False, True, True)
    """
    n, d = x.shape
    copied = plan_chunks(n, d, k, x.dtype, device_memory_budget)
    if host_pinning is False:
        return StreamPath(False, copied, "host_pinning=False")
    from jax_tsm2 import host_memory

    why = host_memory.pinning_unavailable(x)
    if why is None and host_pinning is None and isinstance(x, np.memmap):
        why = "x is a numpy.memmap (pinning reads all of it into locked memory; host_pinning=True)"
    plan = None
    if why is None:
        resident = 4 + 4 * weighted  # labels, weights
        try:
            plan = plan_chunks(
                n, d, k, x.dtype, device_memory_budget, resident_bytes_per_row=resident
            )
        except ValueError as err:
            why = f"the labels of all rows do not fit the budget ({err})"
    if plan is not None and plan.chunks * plan.rows >= 2**31:
        why = "more than 2^31 - 1 rows (int32 indices)"
    if why is not None:
        if host_pinning:
            raise ValueError(f"host_pinning=True, but x cannot be pinned: {why}")
        return StreamPath(False, copied, why)
    return StreamPath(True, plan)


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
    host_pinning: bool | None = None,
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
      host_pinning: whether to pin ``x`` in place (``cudaHostRegister``) for the fit and read
        it inside one program per pass at the host link's DMA rate: None (default) where it
        can (a C-contiguous array, not a memmap, a CUDA build on a CUDA device, room for the
        labels of all rows on the device; :func:`stream_path` says which path a call takes),
        True to require it (ValueError where it cannot), False to copy chunk by chunk with
        ``jax.device_put``. Pinning is released when the fit returns or raises.

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
    if host_pinning not in (None, True, False):
        raise ValueError(f"host_pinning must be None, True or False, got {host_pinning!r}")
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
    budget = int(device_memory_budget)
    path = stream_path(x, k, budget, weighted=w is not None, host_pinning=host_pinning)
    with contextlib.ExitStack() as stack:
        passes = None
        if path.pinned:
            from jax_tsm2 import host_memory

            try:
                # Released on every way out of the fit, once the device's queued work is done.
                rows = stack.enter_context(host_memory.pinned(x, path.plan.rows))
            except RuntimeError as err:  # the driver refused (e.g. a locked-memory limit)
                if host_pinning:
                    raise
                _log.info("kmeans_streamed: copying chunk by chunk: %s", err)
                path = StreamPath(False, plan_chunks(*x.shape, k, x.dtype, budget))
            else:
                passes = _ProgramPasses(
                    _PinnedReader(rows), None, w, x.shape[0], path.plan, precision
                )
        elif path.reason:
            _log.info("kmeans_streamed: copying chunk by chunk: %s", path.reason)
        if passes is None:
            passes = _CopiedPasses(x, w, path.plan, precision)
        return _fit(passes, key, x, k, w, init, max_iter, tol, init_size, progress)


@dataclasses.dataclass(frozen=True)
class _PinnedReader:
    """``program_passes.Reader`` of pinned host memory (``source`` is unused)."""

    rows: Any  # host_memory.HostRows

    def __call__(self, source, i):
        return self.rows(i)


def _fit(passes, key, x, k, w, init, max_iter, tol, init_size, progress):
    """Lloyd's loop over ``passes`` (``_CopiedPasses`` or ``_ProgramPasses``)."""
    acc = core._acc_dtype(jnp.dtype(x.dtype))
    mu64, mean_var, _ = _merge_moments(passes.moments(), x.shape[1])
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
    tol_abs = tol * mean_var
    history: list[float] = []
    converged = False
    it = 0
    for it in range(1, max_iter + 1):
        sums, counts, inertia, changed, cand = passes.iteration(c, mu)
        c_new = _new_centroids(sums, counts, cand, c)
        shift = float(jnp.sum((c_new - c) ** 2))
        history.append(float(inertia))
        c = c_new
        if progress is not None:
            progress(it, history[-1])
        if int(changed) == 0 or shift <= tol_abs:
            converged = True
            break

    inertia = passes.final(c, mu)
    labels = passes.host_labels()
    hist = jnp.full((max_iter,), jnp.nan, acc).at[: len(history)].set(jnp.asarray(history, acc))
    return core.KMeansState(c + mu, labels[:n], inertia, jnp.int32(it), jnp.bool_(converged), hist)


def _init_centroids(key, sample, ws, k, init, dtype, acc):
    """Initial centroids, relative to the full data's mean, from a sample centred on it."""
    xs = jnp.asarray(sample, dtype)
    if init == "k-means++":
        return jnp.asarray(core.kmeans_plusplus(key, xs, k, sample_weight=ws), acc)
    w = jnp.ones(xs.shape[0], acc) if ws is None else jnp.asarray(ws, acc)
    return core._random_centered(key, xs.astype(acc), w, k, None)
