"""Passes over chunked data as one XLA program each: the chunks are read inside the program.

Where the data can be read from inside a program (host memory pinned in place and read by
``tsm2_host_rows``: :mod:`jax_tsm2.host_memory`), a pass over it is one jitted
``lax.fori_loop`` over the chunks: each iteration reads its chunk with ``read(source, i)``,
runs the same per-chunk work as the chunk-by-chunk passes of ``out_of_core`` (the same jitted
functions, in the same order, so sums add up in chunk order as there), and carries the sums.
The labels of all rows stay on the device for the whole fit (one ``int32`` per row, updated
in place), and reach the host once. Nothing inside a pass waits for the host (the pinned
reader's handler queues the copy of the chunk after each read as it launches the read).

``read`` is static (hashable) and ``source`` is its operand: the pinned reader takes none,
tests read from a device array (``lax.dynamic_slice`` of chunk ``i``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jax_tsm2.clustering import chunk_work

#: ``read(source, i) -> (rows, d)``: chunk ``i`` of the data, zeros past its last row.
Reader = Callable[[Any, jax.Array], jax.Array]

__all__ = ["Reader", "device_rows", "final", "iteration", "labels_buffer", "moments"]


def _chunk_weights(w_all: jax.Array | None, i: jax.Array, rows: int, n: int) -> jax.Array:
    """Chunk ``i``'s weights as ``out_of_core._chunk`` hands them to the step: its slice of
    the (zero-padded) weights, or without weights the count of its real rows."""
    if w_all is None:
        return jnp.clip(n - i * rows, 0, rows).astype(jnp.int32)
    return lax.dynamic_slice(w_all, (i * rows,), (rows,))


@functools.partial(jax.jit, static_argnames=("read", "rows", "chunks", "n"))
def moments(source, w_all, *, read: Reader, rows: int, chunks: int, n: int):
    """Each chunk's weight, weighted mean and centred sum of squares (``chunk_work.moments``),
    as arrays over the chunks, for the float64 merge on the host."""

    def body(i, acc):
        parts = chunk_work.moments(read(source, i), _chunk_weights(w_all, i, rows, n))
        return tuple(a.at[i].set(p) for a, p in zip(acc, parts, strict=True))

    shapes = jax.eval_shape(
        lambda i: chunk_work.moments(read(source, i), _chunk_weights(w_all, i, rows, n)),
        jnp.int32(0),
    )
    init = tuple(jnp.zeros((chunks, *s.shape), s.dtype) for s in shapes)
    return lax.fori_loop(0, chunks, body, init)


def _no_candidates(k: int, d: int, acc: Any):
    """A candidate set that every real or padding row outranks (their distances are >= -1)."""
    return (
        jnp.full((k,), -jnp.inf, acc),
        jnp.zeros((k, d), acc),
        jnp.zeros((k,), acc),
        jnp.zeros((k,), jnp.int32),
    )


@functools.partial(
    jax.jit,
    static_argnames=("read", "rows", "chunks", "n", "precision"),
    donate_argnames=("labels",),
)
def iteration(
    source, w_all, labels, c, mu, *, read: Reader, rows: int, chunks: int, n: int, precision: str
):
    """One Lloyd pass: ``(sums, counts, inertia, changed, candidates, labels)`` summed over
    the chunks in order; ``labels`` (all rows, padded to ``chunks * rows``) is updated in
    place."""
    k, d = c.shape

    def body(i, carry):
        sums, counts, inertia, changed, cand, labels = carry
        old = lax.dynamic_slice(labels, (i * rows,), (rows,))
        s, cnt, ine, ch, lab, cd = chunk_work.step(
            read(source, i), _chunk_weights(w_all, i, rows, n), c, mu, old, precision=precision
        )
        labels = lax.dynamic_update_slice(labels, lab, (i * rows,))
        cand = chunk_work.merge_candidates(cand, cd)
        changed = changed + ch.astype(changed.dtype)
        return sums + s, counts + cnt, inertia + ine, changed, cand, labels

    acc = c.dtype
    zero = (jnp.zeros_like(c), jnp.zeros(k, acc), jnp.zeros((), acc), jnp.zeros((), jnp.int32))
    return lax.fori_loop(0, chunks, body, (*zero, _no_candidates(k, d, acc), labels))


@functools.partial(
    jax.jit,
    static_argnames=("read", "rows", "chunks", "n", "precision"),
    donate_argnames=("labels",),
)
def final(
    source, w_all, labels, c, mu, *, read: Reader, rows: int, chunks: int, n: int, precision: str
):
    """The assignment against the final centroids: ``(inertia, labels)``."""

    def body(i, carry):
        inertia, labels = carry
        old = lax.dynamic_slice(labels, (i * rows,), (rows,))
        _, _, ine, _, lab, _ = chunk_work.step(
            read(source, i), _chunk_weights(w_all, i, rows, n), c, mu, old, precision=precision
        )
        return inertia + ine, lax.dynamic_update_slice(labels, lab, (i * rows,))

    return lax.fori_loop(0, chunks, body, (jnp.zeros((), c.dtype), labels))


def device_rows(source: jax.Array, i: jax.Array, *, rows: int) -> jax.Array:
    """A reader of chunks from an ``(n, d)`` device array (zeros past its end): what the
    pinned reader does, in plain JAX, so that the passes run and are tested without a GPU.

    Example:
        >>> import functools, jax.numpy as jnp
        >>> read = functools.partial(device_rows, rows=3)
        >>> read(jnp.arange(10.0).reshape(5, 2), jnp.int32(1)).tolist()
        [[6.0, 7.0], [8.0, 9.0], [0.0, 0.0]]
    """
    n = source.shape[0]
    chunks = -(-n // rows)
    padded = jnp.pad(source, ((0, chunks * rows - n), (0, 0)))
    return lax.dynamic_slice_in_dim(padded, i * rows, rows)


def labels_buffer(chunks: int, rows: int) -> jax.Array:
    """All rows' labels before the first pass (none yet: -1), padded to whole chunks."""
    return jnp.full((chunks * rows,), -1, jnp.int32)
