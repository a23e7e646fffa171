"""The work on one chunk of a streamed k-means pass, shared by both ways of streaming: the
chunk-by-chunk copies of :mod:`~jax_tsm2.clustering.out_of_core` and the single-program
passes of :mod:`~jax_tsm2.clustering.program_passes`. Each function is jitted on its own, so
the two paths run the same compiled work per chunk and add their results in the same order.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jax_tsm2.clustering import core

__all__ = ["centre", "merge_candidates", "moments", "step", "weights"]


def weights(w: jax.Array, rows: int, dtype: Any) -> jax.Array:
    """A chunk's row weights: ``w`` itself, or ones on its ``w`` real rows (a count)."""
    if w.ndim == 0:
        return (jnp.arange(rows) < w).astype(dtype)
    return w.astype(dtype)


@jax.jit
def moments(x, w):
    """Weight, weighted mean and centred sum of squares of one chunk (for Chan's merge)."""
    xa = x.astype(core._acc_dtype(x.dtype))
    wa = weights(w, x.shape[0], xa.dtype)
    total = jnp.sum(wa)
    mean = jnp.sum(wa[:, None] * xa, axis=0) / jnp.where(total > 0, total, 1)
    m2 = jnp.sum(wa[:, None] * (xa - mean) ** 2, axis=0)
    return total, mean, m2


def centre(x, w, mu):
    """The chunk centred on the data's mean (rounded to its dtype), its rows' squared norms
    and its row weights."""
    acc = core._acc_dtype(x.dtype)
    xc = core._rounded(x.astype(acc) - mu, x.dtype)
    return xc, core._sq_norms(xc), weights(w, x.shape[0], acc)


@functools.partial(jax.jit, static_argnames="precision")
def step(x, w, c, mu, labels_old, precision="float32"):
    """One chunk's share of an iteration: sums, weights, inertia, changed labels, and the
    chunk's k points farthest from their centres (padding rows never among them)."""
    k = c.shape[0]
    xc, x_sq, wa = centre(x, w, mu)
    s = core._step(xc, x_sq, wa, c, k, precision=precision)
    mind = jnp.where(wa > 0, s.mind, -1)
    far, idx = lax.top_k(mind, min(k, x.shape[0]))
    changed = jnp.sum((s.labels != labels_old) & (wa > 0))
    cand = (far, xc[idx].astype(c.dtype), wa[idx], s.labels[idx])
    return s.sums, s.counts, s.inertia, changed, s.labels, cand


@jax.jit
def merge_candidates(a, b):
    """The k farthest of two candidate sets."""
    k = a[0].shape[0]
    both = tuple(jnp.concatenate([u, v]) for u, v in zip(a, b, strict=True))
    top, idx = lax.top_k(both[0], k)
    return (top, *(p[idx] for p in both[1:]))
