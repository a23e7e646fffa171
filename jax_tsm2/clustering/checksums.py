"""Checks of a Lloyd step's outputs against invariants of the data, and their thresholds.

``kmeans(..., fault_tolerance=True)`` checks every step (``LloydStep``: labels, ``mind``,
``sums``, ``counts``) without another pass over ``x``. Once per run it computes, from the
centred data ``xc``, weights ``w`` and ``x_sq = ||xc||^2`` (:func:`invariants`):
``t = sum_i w_i xc_i`` and ``a = sum_i w_i |xc_i|`` (``(d,)``), ``W = sum_i w_i``,
``X2 = sum_i w_i x_sq_i``, ``Q4 = sum_i w_i^2 x_sq_i^2`` and ``W2 = sum_i w_i^2``. Each
iteration then tests (:func:`check`), with ``cc`` the centroids as the product sees them
(rounded to ``x``'s dtype):

- *columns*: ``|sum_j sums[j, c] - t_c| <= tau_c`` for every column ``c``;
- *counts*: ``|sum_j counts_j - W| <= tau_w``;
- *distances*: ``I = sum_i w_i mind_i`` against ``R = X2 - 2 sum_j cc_j . sums_j +
  sum_j counts_j ||cc_j||^2``, which equals ``sum_i w_i ||xc_i - cc_{l_i}||^2`` exactly for
  any labels ``l``: a distance lowered until it wins the argmin makes ``I`` smaller than
  ``R`` by the difference between the row's true and reported distances.

``I`` is summed here (:func:`accurate_sum`), not taken from the step: the step adds ``n``
positive terms in an order it chooses, whose rounding (up to ``~u sqrt(n) I`` for a
sequential sum) would hide any one row's distance. Reading ``mind`` and ``w`` costs ``2n``
values, ``2 / d`` of the step's reads of ``x``.

**Rounding model.** ``u`` is the unit roundoff of the accumulation dtype (``2^-24`` for
f32, bf16 and f16 data, ``2^-53`` for f64); ``u_in = 2^-10`` bounds the relative rounding
of each operand of a TF32 product (``precision="tensorfloat32"``: to nearest in the tiled
kernel, truncated in cuBLAS; 0 otherwise: bf16/f16 products are exact in f32). A sum of
``m`` terms ``y_r`` in any order errs by ``sum_r delta_r s_r`` over its ``<= 2m`` roundings
(products, partial sums ``s_r``), ``|delta_r| <= u``. Modelling the ``delta_r`` as
independent and zero-mean (Higham and Mary, SIAM J. Sci. Comput. 2019), the error is
sub-Gaussian with variance proxy ``u^2 sum_r s_r^2 <= u^2 m (sum |y_r|)^2``, and
``P(|error| > lambda sqrt(V)) <= 2 exp(-lambda^2 / 2)``. Per check:

- columns: the clusters' sums are independent sums of ``n_j`` terms with
  ``sum_j n_j A_jc^2 <= n a_c^2``: ``V_c = u^2 n a_c^2``;
- counts: ``V_w = u^2 n W^2``; with unit weights (``sample_weight=None``) counts are
  integers, exact below ``2^p`` (``p`` the accumulation dtype's precision): then
  ``tau_w = 0.5`` and a count that is not an integer fails too;
- distances: each row's ``mind`` (a dot product of ``d`` terms, ``||x||^2``, ``||c||^2``,
  two additions) errs by at most ``(d + 3) u (x_sq + 2 |x . c| + c_sq) <=
  2 (d + 3) u (x_sq + c_sq)``; rows are independent, so ``V_a = 8 (d + 3) u^2 (Q4 +
  cmax^2 W2)`` with ``cmax = max_j ||cc_j||^2`` (and ``8 u_in^2 (Q4 + cmax^2 W2)`` more
  for TF32). The sums' own errors enter ``R`` as ``2 cc_j . Delta_j``: ``V_b = 4 u^2 n
  sum_c (max_j |cc_jc| a_c)^2``, and weighted counts' as ``||cc_j||^2 Delta N_j``:
  ``u^2 n cmax^2 W^2``. Terms that are not random are added outside the square root: the
  step's ``||c_j||^2`` is shared by the cluster's rows (``gamma_d sum_j counts_j
  ||cc_j||^2``), TF32 truncation's mean (``2 u_in |sum_j cc_j . sums_j|``), and the
  rounding of ``I`` and ``R`` themselves.

``lambda = 8`` (:data:`LAMBDA`) puts the bound at ``2.5e-14`` per check; a run of 300
iterations at ``d = 4096`` makes about ``1.2e6`` checks, so the model's false-positive
rate is about ``3e-8`` per run. The proxies are upper bounds (a rounding error's ``u^2``
for a variance of at most ``u^2 / 3``; partial sums as large as the whole absolute sum),
which leaves a margin of several times on top, measured in
``tests/test_kmeans_fault_tolerance.py`` and ``benchmarks/kmeans_fault_tolerance.py``.

**Ceiling.** The random part of each threshold never exceeds the worst-case bound for any
order and any data (``gamma_m = m u / (1 - m u)``): ``gamma_n a_c``, ``gamma_n W``,
``2 gamma_{d+3} (X2 + sum_j counts_j ||cc_j||^2) + 2 gamma_n sum_c max_j |cc_jc| a_c`` (plus
``6 u_in (X2 + ...)`` for TF32 and ``gamma_n cmax W`` for weighted counts).
Small ``n`` is where the ceiling binds.

**What the model assumes.** Independent rounding errors. Rows repeated exactly many times
and summed one after the other round the same way each time and drift linearly in the
count; the kernels and XLA's products sum in blocks of rows and add the partials, which
keeps such runs short, but a dataset of a few points repeated millions of times can exceed
``tau_c``. A false positive costs a redone iteration (bounded, then ``fault_unresolved``).

**Invariants' own error.** Computed in f64 when ``jax_enable_x64`` is on and the
accumulation dtype is f32; otherwise by a compensated sum (:func:`accurate_sum`: a reduction
of error-free ``TwoSum`` pairs), whose error is ``O(u^2 n)`` of the absolute sum: far below
the step's.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = [
    "LAMBDA",
    "MAX_REDOS",
    "CheckResult",
    "Invariants",
    "accurate_sum",
    "check",
    "check_dtype",
    "invariants",
]

LAMBDA = 8.0  # 2 exp(-LAMBDA^2 / 2) = 2.5e-14 per check
U_TF32 = 2.0**-10  # an operand's relative rounding in a TF32 product, truncation included

#: Consecutive failed checks after which a run stops with ``fault_unresolved`` set: a
#: transient fault does not repeat, so more failures mean a persistent one.
MAX_REDOS = 3


def check_dtype(acc: Any) -> np.dtype:
    """The dtype the checks compute in: f64 where it is on and ``acc`` is f32, else ``acc``.

    Example:
        >>> check_dtype("float64").name
        'float64'
    """
    acc = jnp.dtype(acc)
    if acc == jnp.float32 and jax.config.jax_enable_x64:
        return jnp.dtype(jnp.float64)
    return acc


def _two_sum(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``s = fl(a + b)`` and its exact error ``e``: ``a + b = s + e`` (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def accurate_sum(v: jax.Array, axis: int = 0) -> jax.Array:
    """Sum of ``v`` over ``axis``, accurate to ``O(u^2 n)`` of ``sum |v|`` in ``v``'s dtype.

    One reduction of (sum, error) pairs: every addition keeps its exact error (``TwoSum``)
    and carries the errors along, so the result does not depend on the order XLA adds in
    (a pair addition is associative to ``O(u^2)``). In f64 where x64 is on and ``v`` is f32:
    then a plain f64 sum is far more accurate than anything it is compared with.

    Example:
        >>> import jax.numpy as jnp
        >>> float(accurate_sum(jnp.array([1e8, 1.0, -1e8, 1.0], jnp.float32)))
        2.0
    """
    dt = check_dtype(v.dtype)
    if dt != v.dtype:
        return jnp.sum(v.astype(dt), axis=axis)

    def add(p, q):
        s, e = _two_sum(p[0], q[0])
        return s, e + (p[1] + q[1])

    zero = jnp.zeros((), dt)
    hi, lo = lax.reduce((v, jnp.zeros_like(v)), (zero, zero), add, (axis,))
    return hi + lo


class Invariants(NamedTuple):
    """What a run's checks compare against, computed once from the centred data.

    Attributes:
      t: ``(d,)`` ``sum_i w_i xc_i``.
      a: ``(d,)`` ``sum_i w_i |xc_i|``.
      total: ``W = sum_i w_i``.
      x2: ``sum_i w_i ||xc_i||^2`` (from ``x_sq``).
      q4: ``sum_i w_i^2 ||xc_i||^4``.
      w2: ``sum_i w_i^2``.
      n: number of rows (over all shards).
    """

    t: jax.Array
    a: jax.Array
    total: jax.Array
    x2: jax.Array
    q4: jax.Array
    w2: jax.Array
    n: jax.Array


def invariants(xc: jax.Array, x_sq: jax.Array, w: jax.Array, axis_name: Any = None) -> Invariants:
    """The :class:`Invariants` of centred data ``xc`` ``(n, d)``, with ``psum`` over
    ``axis_name`` when the rows are sharded (one extra read of ``xc`` per run)."""
    dt = check_dtype(w.dtype)
    xw = xc.astype(dt) * w.astype(dt)[:, None]
    ws, sq = w.astype(dt), x_sq.astype(dt)
    parts = (
        accurate_sum(xw),
        accurate_sum(jnp.abs(xw)),
        accurate_sum(ws),
        accurate_sum(ws * sq),
        accurate_sum((ws * sq) ** 2),
        accurate_sum(ws * ws),
        jnp.asarray(xc.shape[0], dt),
    )
    if axis_name is not None:
        parts = tuple(lax.psum(p, axis_name) for p in parts)
    return Invariants(*parts)


class CheckResult(NamedTuple):
    """One step's checks: ``ok`` (all passed) and each check's worst ``|residual| /
    threshold`` (``columns``, ``counts``, ``distances``, and ``rows``: the fused kernel's
    per-row distance check, 0 where the step ran without it; above 1 fails)."""

    ok: jax.Array
    columns: jax.Array
    counts: jax.Array
    distances: jax.Array
    rows: jax.Array | float = 0.0


def with_rows(res: CheckResult, row_faults: jax.Array, row_margin: jax.Array) -> CheckResult:
    """``res`` with the checked kernel's per-row distance check folded in: ``row_faults``
    rows failed it (the step fails unless 0), ``row_margin`` the worst ratio of a finite
    row's residual to its threshold (``rows``; infinite where a row failed, as a row whose
    distance sum is not finite has no ratio).

    Example:
        >>> import jax.numpy as jnp
        >>> r = CheckResult(jnp.bool_(True), 0.1, 0.2, 0.3)
        >>> bool(with_rows(r, jnp.int32(0), jnp.float32(0.5)).ok)
        True
        >>> float(with_rows(r, jnp.int32(1), jnp.float32(0.5)).rows)
        inf
    """
    failed = row_faults != 0
    rows = jnp.where(failed, jnp.float32(jnp.inf), row_margin.astype(jnp.float32))
    return res._replace(ok=res.ok & ~failed, rows=rows)


def _ratio(residual: jax.Array, tau: jax.Array) -> jax.Array:
    """``|residual| / tau``: 0 for an exact zero residual (even where ``tau`` is 0: a column
    of zeros), infinite for any other residual against a zero threshold, NaN for NaN."""
    r = jnp.abs(residual)
    return jnp.where(r == 0, 0, r / jnp.where(tau > 0, tau, 0))


def _gamma(m: Any, u: float) -> jax.Array:
    mu = m * u
    return jnp.where(mu < 1, mu / (1 - mu), jnp.inf)


def check(
    inv: Invariants,
    cc: jax.Array,
    sums: jax.Array,
    counts: jax.Array,
    inertia: jax.Array,
    *,
    data_dtype: Any,
    precision: str = "float32",
    unit_weights: bool = False,
) -> CheckResult:
    """Check a step's global ``sums`` ``(k, d)``, ``counts`` ``(k,)`` and ``inertia``
    (``accurate_sum(w * mind)``, over all shards) against ``inv``; ``cc`` ``(k, d)`` are the
    centroids as the step's product saw them. O(k d), no pass over the data.

    Example:
        >>> import jax.numpy as jnp
        >>> x = jnp.array([[0.0, 1.0], [2.0, 3.0], [4.0, 1.0]])
        >>> x_sq, w = jnp.sum(x * x, 1), jnp.ones(3)
        >>> c = jnp.array([[1.0, 2.0], [4.0, 1.0]])
        >>> sums, counts = jnp.array([[2.0, 4.0], [4.0, 1.0]]), jnp.array([2.0, 1.0])
        >>> r = check(invariants(x, x_sq, w), c, sums, counts, jnp.float64(4.0),
        ...           data_dtype=x.dtype, unit_weights=True)
        >>> bool(r.ok)
        True
        >>> bool(check(invariants(x, x_sq, w), c, sums.at[0, 1].add(0.5), counts,
        ...            jnp.float64(4.0), data_dtype=x.dtype, unit_weights=True).ok)
        False
    """
    acc = jnp.dtype(sums.dtype)
    dt = check_dtype(acc)
    u = float(np.finfo(acc).eps) / 2
    uc = float(np.finfo(dt).eps) / 2  # the checks' own arithmetic
    u_in = U_TF32 if (precision == "tensorfloat32" and jnp.dtype(data_dtype) == jnp.float32) else 0
    k, d = sums.shape
    n = inv.n
    sums, counts, cc = sums.astype(dt), counts.astype(dt), cc.astype(dt)
    sqrt_n = jnp.sqrt(n)

    # columns
    col = accurate_sum(sums) - inv.t
    tau_c = jnp.minimum(LAMBDA * u * sqrt_n * inv.a, _gamma(n, u) * inv.a)
    tau_c = tau_c + 2 * uc * (k * jnp.sum(jnp.abs(sums), axis=0) + inv.a)
    r_col = _ratio(col, tau_c)

    # counts
    cnt = accurate_sum(counts) - inv.total
    if unit_weights:
        exact = inv.total < 2.0 ** np.finfo(acc).nmant
        tau_w = jnp.where(exact, 0.5, _gamma(n, u) * inv.total)
    else:
        tau_w = jnp.minimum(LAMBDA * u * sqrt_n * inv.total, _gamma(n, u) * inv.total)
    tau_w = tau_w + 2 * uc * k * inv.total
    r_cnt = _ratio(cnt, tau_w)
    if unit_weights:  # exact integers: a fraction anywhere is a fault, however small
        fraction = jnp.any(counts != jnp.round(counts))
        r_cnt = jnp.where(exact & fraction, jnp.inf, r_cnt)

    # distances
    c_sq = jnp.sum(cc * cc, axis=1)
    cross = accurate_sum((cc * sums).reshape(-1))
    nc = accurate_sum(counts * c_sq)
    rhs = inv.x2 - 2 * cross + nc
    cmax = jnp.max(c_sq)
    cabs = jnp.max(jnp.abs(cc), axis=0)
    spread = inv.q4 + cmax**2 * inv.w2
    v = 8 * ((d + 3) * u * u + u_in * u_in) * spread
    v += 4 * u * u * n * jnp.sum((cabs * inv.a) ** 2)
    worst = 2 * (_gamma(d + 3, u) + 3 * u_in) * (inv.x2 + nc)
    worst += 2 * _gamma(n, u) * jnp.sum(cabs * inv.a)
    if not unit_weights:
        v += u * u * n * (cmax * inv.total) ** 2
        worst += _gamma(n, u) * cmax * inv.total
    tau_d = jnp.minimum(LAMBDA * jnp.sqrt(v), worst)
    tau_d += _gamma(d, u) * nc + 2 * u_in * jnp.abs(cross)  # shared by a cluster's rows
    tau_d += 4 * uc * (inv.x2 + 2 * jnp.sum(jnp.abs(cc * sums)) + nc) + 2 * u * inertia
    r_dist = _ratio(inertia.astype(dt) - rhs, tau_d)

    r_col_max = jnp.max(r_col)
    ok = (r_col_max <= 1) & (r_cnt <= 1) & (r_dist <= 1)
    # A NaN anywhere (a flipped exponent can make one) fails: comparisons with NaN are False.
    return CheckResult(ok, r_col_max, r_cnt, r_dist)
