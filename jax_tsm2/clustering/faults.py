"""Fault injection into a Lloyd step, to test and measure ``kmeans(..., fault_tolerance=True)``.

A :class:`FaultSpec` passed as ``kmeans(..., fault_injection=spec)`` flips one bit of one
value of one step's outputs, once (the redone step runs clean) or, with
``persistent=True``, every time that iteration's step runs:

- ``"distance"``: bit ``bit`` of the squared distance from row ``index`` to centroid
  ``column`` as the assignment holds it (the accumulation dtype). Its consequences are
  simulated from the step's outputs, as a kernel that computed the flipped value would
  have produced them: the row's ``k`` distances are recomputed with the step's formula
  (O(k d)), the flipped one replaces its entry (the step's own ``mind`` stands for the
  winner's), and the argmin is taken again; if the row changes cluster, its weighted
  contribution moves between ``sums`` and ``counts``; ``mind``, ``labels`` and
  ``inertia`` follow.
- ``"sum"``: bit ``bit`` of ``sums[index, column]`` (after the ``psum`` over shards).
- ``"count"``: bit ``bit`` of ``counts[index]`` (``column`` is ignored).

``iteration`` is the 0-based Lloyd iteration (redone iterations keep their number), or
``-1`` for the final assignment after the loop. Under ``axis_name`` a distance fault hits
row ``index`` of the first shard. Bits count from the least significant (f32: 0 to 31, 31
the sign; f64: 0 to 63). The numbers are traced: a campaign of faults of one ``kind``
compiles once.

Example:
    >>> spec = FaultSpec(iteration=2, kind="sum", index=0, column=3, bit=30)
    >>> spec.persistent
    False
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jax_tsm2.clustering.step_result import LloydStep

__all__ = ["KINDS", "FaultSpec", "flip_bit", "inject_distance", "inject_totals"]

KINDS = ("distance", "sum", "count")

_UINT = {4: jnp.uint32, 8: jnp.uint64, 2: jnp.uint16}


class FaultSpec(NamedTuple):
    """One injected bit flip (module docstring). ``kind`` and ``persistent`` are static."""

    iteration: int
    kind: str
    index: int
    column: int = 0
    bit: int = 30
    persistent: bool = False


def check_spec(spec: FaultSpec, n: int, k: int, d: int, bits: int) -> None:
    """ValueError for a spec that names no value of a step over ``n`` rows (of this shard),
    ``k`` clusters and ``d`` columns whose values have ``bits`` bits."""
    if not isinstance(spec, FaultSpec):
        raise TypeError(f"fault_injection must be a FaultSpec, got {type(spec).__name__}")
    if spec.kind not in KINDS:
        raise ValueError(f"FaultSpec.kind must be one of {KINDS}, got {spec.kind!r}")
    if spec.kind == "distance" and not 0 <= spec.index < n:
        raise ValueError(f"FaultSpec.index {spec.index} is not a row of {n}")
    if not 0 <= spec.bit < bits:
        raise ValueError(f"FaultSpec.bit {spec.bit} out of range [0, {bits})")
    if spec.kind != "distance" and not 0 <= spec.index < k:
        raise ValueError(f"FaultSpec.index {spec.index} is not a cluster of k={k}")
    col_bound = k if spec.kind == "distance" else d
    if spec.kind != "count" and not 0 <= spec.column < col_bound:
        raise ValueError(f"FaultSpec.column {spec.column} out of range [0, {col_bound})")


def flip_bit(x: jax.Array, bit: jax.Array) -> jax.Array:
    """``x`` (a float scalar or array) with bit ``bit`` of its representation flipped.

    Example:
        >>> import jax.numpy as jnp
        >>> float(flip_bit(jnp.float32(1.0), 31)), float(flip_bit(jnp.float32(1.0), 23))
        (-1.0, 0.5)
    """
    x = jnp.asarray(x)
    ut = _UINT[x.dtype.itemsize]
    bits = lax.bitcast_convert_type(x, ut)
    mask = jnp.left_shift(jnp.asarray(1, ut), jnp.asarray(bit, ut))
    return lax.bitcast_convert_type(bits ^ mask, x.dtype)


def inject_distance(
    s: LloydStep,
    xc: jax.Array,
    w: jax.Array,
    row_distances: Callable[[jax.Array], jax.Array],
    where: jax.Array,
    params: jax.Array,
) -> LloydStep:
    """``s`` as the step would have returned it had the distance ``params = (row, j, bit)``
    been flipped, where ``where`` (a traced bool) holds; ``row_distances(row)`` gives that
    row's ``(k,)`` distances by the step's formula."""
    row, j, bit = params[0], params[1], params[2]
    acc = s.mind.dtype
    old_l, old_m = s.labels[row], s.mind[row]
    drow = row_distances(row).astype(acc).at[old_l].set(old_m)
    drow = drow.at[j].set(flip_bit(drow[j], bit))
    new_l = jnp.argmin(drow).astype(jnp.int32)
    new_m = drow[new_l]
    moved = where & (new_l != old_l)
    contrib = w[row] * xc[row].astype(acc)
    k = s.sums.shape[0]
    delta = (jnp.arange(k) == new_l).astype(acc) - (jnp.arange(k) == old_l).astype(acc)
    delta = jnp.where(moved, delta, 0)
    sums = jnp.where(moved, s.sums + delta[:, None] * contrib[None, :], s.sums)
    counts = jnp.where(moved, s.counts + delta * w[row], s.counts)
    m = jnp.where(where, new_m, old_m)
    labels = s.labels.at[row].set(jnp.where(where, new_l, old_l))
    mind = s.mind.at[row].set(m)
    inertia = s.inertia + w[row] * (m - old_m)
    return LloydStep(labels, mind, sums, counts, inertia)


def inject_totals(
    kind: str, sums: jax.Array, counts: jax.Array, where: jax.Array, params: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """The global ``sums`` and ``counts`` with the ``"sum"`` or ``"count"`` fault
    ``params = (cluster, column, bit)`` applied where ``where`` holds."""
    j, c, bit = params[0], params[1], params[2]
    if kind == "sum":
        v = sums[j, c]
        return sums.at[j, c].set(jnp.where(where, flip_bit(v, bit), v)), counts
    if kind == "count":
        v = counts[j]
        return sums, counts.at[j].set(jnp.where(where, flip_bit(v, bit), v))
    return sums, counts
