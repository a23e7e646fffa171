"""float64 references for the ABFT FFI targets (tests/test_abft_calls.py, tests/test_gpu_abft.py).

Each compares a result with NumPy float64 arithmetic on the same, already rounded, inputs,
against a bound proportional to the sum of the magnitudes of the terms (how sums err).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from _helpers import as_f64


def acc_of(dtype) -> type:
    """The kernels' usual accumulator for ``dtype``: f64 for f64, f32 otherwise (other
    pairings are tested on their own)."""
    return jnp.float64 if jnp.dtype(dtype) == jnp.float64 else jnp.float32


def masks(r: int) -> list[int]:
    """|.| masks worth covering for r weight rows: none, all, alternating both ways."""
    full = 2**r - 1
    return sorted({0, full, 0b0101 & full, 0b1010 & full})


def assert_colsums_close(out, m, v, abs_rows: int) -> None:
    """``out[q] ~ sum_i v[q, i] f_q(m[i])`` within rows + 2 roundings of the accumulator."""
    m64, v64 = as_f64(m), as_f64(v)
    f = [np.abs(m64) if abs_rows >> q & 1 else m64 for q in range(v64.shape[0])]
    ref = np.stack([v64[q] @ f[q] for q in range(v64.shape[0])])
    scale = np.abs(v64) @ np.abs(m64)
    assert out.shape == ref.shape and out.dtype == v.dtype, (out.shape, out.dtype)
    # Any order of the rows (f64 data summed in f32 adds one rounding of each element,
    # also within the bound).
    bound = (m64.shape[0] + 2) * float(jnp.finfo(v.dtype).eps) * scale
    err = np.abs(as_f64(out) - ref)
    bad = ~(err <= bound + 1e-300)
    assert not bad.any(), (
        f"{bad.sum()} of {bad.size} off: worst {err.max():.3g}, bound {bound.max():.3g}"
    )


def repair_case(rng, m: int, k: int, n: int, dtype):
    """Random operands (magnitudes in [0.5, 1.5], random signs) and their product, rounded."""
    from _helpers import rand

    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    return a, b, jnp.asarray(as_f64(a) @ as_f64(b), dtype)


def assert_repaired(r, a, b, bad, j: int, acc) -> None:
    """The repair's outputs against float64: the old column, the recomputation and its scale
    within k + 1 roundings, the column replaced by the recomputation rounded once to the
    dtype, and every other column bitwise as it was."""
    k, n = a.shape[1], b.shape[1]
    want = as_f64(a) @ as_f64(b)[:, j]
    scale = np.abs(as_f64(a)) @ np.abs(as_f64(b)[:, j])
    eps = float(jnp.finfo(acc).eps)
    assert r.exact.dtype == r.scale.dtype == jnp.dtype(acc) and r.old_col.dtype == bad.dtype
    np.testing.assert_array_equal(as_f64(r.old_col), as_f64(bad[:, j]))  # NaN == NaN here
    assert (np.abs(as_f64(r.exact) - want) <= (k + 1) * eps * scale).all()
    assert (np.abs(as_f64(r.scale) - scale) <= (k + 1) * eps * scale).all()
    np.testing.assert_array_equal(as_f64(r.c[:, j]), as_f64(r.exact.astype(bad.dtype)))
    others = np.arange(n) != j
    np.testing.assert_array_equal(as_f64(r.c)[:, others], as_f64(bad)[:, others])
