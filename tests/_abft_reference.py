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
    m64, v64 = as_f64(m), as_f64(v)  # m may come as float64 already (loops convert once)
    m_abs = np.abs(m64)
    f = [m_abs if abs_rows >> q & 1 else m64 for q in range(v64.shape[0])]
    ref = np.stack([v64[q] @ f[q] for q in range(v64.shape[0])])
    scale = np.abs(v64) @ m_abs
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


def judge_scenarios(rng, m: int, k: int, n: int, dtype):
    """Operands, their checksums and products to judge: clean, one fault, two faults in one
    column, faults in two columns, a NaN. Each fault is 8 column thresholds (always flagged)."""
    from _helpers import rand

    from jax_tsm2 import abft

    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    cs = abft.encode(a, b)
    clean = abft.abft_matmul(a, b)[0]
    t = abft.verify(clean, cs).col_threshold
    big = lambda j: 8.0 * float(t[j])
    j1, j2 = n // 3, n - 1
    one = abft.inject_error(clean, m // 2, j1, big(j1))
    products = {
        "clean": clean,
        "one fault": one,
        "two in one column": abft.inject_error(one, 0, j1, -big(j1)),
        "two columns": abft.inject_error(one, m - 1, j2, big(j2)),
        "nan": abft.inject_error(clean, 1, j2, float("nan")),
    }
    return a, b, cs, products


def assert_verdicts_agree(kernel, xla, acc) -> None:
    """A judgement through tsm2_abft_judge against the XLA formulation's: the same verdict (the
    magnitude within the rounding of a recomputation) and the same product (the repaired
    column within it too: the two recompute in different orders)."""
    (c_k, v_k), (c_x, v_x) = kernel, xla
    for field in ("errors_detected", "corrected", "row", "col", "uncorrectable"):
        assert int(getattr(v_k, field)) == int(getattr(v_x, field)), (field, v_k, v_x)
    assert v_k.magnitude.dtype == v_x.magnitude.dtype == jnp.dtype(acc)
    mk, mx = float(v_k.magnitude), float(v_x.magnitude)
    assert (np.isnan(mk) and np.isnan(mx)) or abs(mk - mx) <= 1e-3 * max(abs(mx), 1.0), (v_k, v_x)
    np.testing.assert_allclose(as_f64(c_k), as_f64(c_x), rtol=1e-3, atol=1e-3)


def edge_operands(rng, batch, m, k, n, dtype, kind):
    """Operands whose product sits at an edge of the dtype's range (random signs, never zero).

    - "underflow": terms of the product straddle the smallest normal number of the product's
      accumulator (or of a narrow output), where flush-to-zero drops them;
    - "overflow": entries of C up to about half the largest finite number, so that a plain
      column sum of C overflows;
    - "mixed": rows of A and columns of B scaled by powers of two over most of the range,
      and a few entries of A subnormal.
    """
    info = jnp.finfo(dtype)
    sign = lambda shape: rng.choice(np.array([-1.0, 1.0]), shape)
    mag = lambda shape: rng.uniform(0.5, 1.5, shape)
    a_shape, b_shape = (batch, m, k), (batch, k, n)
    if kind == "underflow":
        half = np.log2(float(info.tiny)) / 2
        a = 2.0 ** (half + rng.uniform(-2, 1, a_shape)) * mag(a_shape) * sign(a_shape)
        b = 2.0 ** (half + rng.uniform(-2, 1, b_shape)) * mag(b_shape) * sign(b_shape)
    elif kind == "overflow":
        top = np.sqrt(float(info.max) / (4.5 * k))
        a, b = top * mag(a_shape) * sign(a_shape), top * mag(b_shape) * sign(b_shape)
    else:
        span = 6 if dtype == jnp.float16 else 50
        rows = 2.0 ** rng.integers(-span, span, (batch, m, 1))
        cols = 2.0 ** rng.integers(-span, span, (batch, 1, n))
        a = rows * mag(a_shape) * sign(a_shape)
        b = cols * mag(b_shape) * sign(b_shape)
        sub = rng.random(a_shape) < 0.05
        a = np.where(sub, float(info.tiny) / 8 * sign(a_shape), a)
    return jnp.asarray(a, dtype), jnp.asarray(b, dtype)


# Distributions of the detection tests and of benchmarks/abft_detection.py's products.
CLEAN_KINDS = (
    "normal",
    "uniform",
    "uniform_pos",
    "cauchy",
    "lognormal",
    "rowscale",
    "illcond",
    "underflow",
    "overflow",
    "constant",
    "duprows",
    "fewvals",
)
# Well-conditioned kinds, where an error relative to C's entries is a meaningful target (in an
# ill-conditioned product the rounding itself is large against |C|; near underflow the
# absolute floors are).
DETECT_KINDS = ("normal", "uniform", "uniform_pos", "cauchy", "lognormal", "rowscale")


def random_operands(rng, kind: str, batch: int, m: int, k: int, n: int, dtype):
    """``(batch, m, k)`` and ``(batch, k, n)`` operands of one kind (``CLEAN_KINDS``), finite in
    ``dtype`` and with a finite product: heavy tails are clipped to ``sqrt(max / 4k)``."""
    if kind in ("underflow", "overflow"):
        return edge_operands(rng, batch, m, k, n, dtype, kind)
    info = jnp.finfo(dtype)
    top = float(np.sqrt(float(info.max) / (4.0 * max(k, 1))))
    sign = lambda shape: rng.choice(np.array([-1.0, 1.0]), shape)
    sa, sb = (batch, m, k), (batch, k, n)
    if kind == "normal":
        a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    elif kind == "uniform":
        a, b = rng.uniform(-1, 1, sa), rng.uniform(-1, 1, sb)
    elif kind == "uniform_pos":
        a, b = rng.uniform(0.5, 1.5, sa), rng.uniform(0.5, 1.5, sb)
    elif kind == "cauchy":
        a, b = rng.standard_cauchy(sa), rng.standard_cauchy(sb)
    elif kind == "lognormal":
        a, b = rng.lognormal(0, 2, sa) * sign(sa), rng.lognormal(0, 2, sb) * sign(sb)
    elif kind == "rowscale":  # rows of A and columns of B over many binades
        span = 4 if dtype == jnp.float16 else 20
        a = rng.standard_normal(sa) * 2.0 ** rng.integers(-span, span + 1, (batch, m, 1))
        b = rng.standard_normal(sb) * 2.0 ** rng.integers(-span, span + 1, (batch, 1, n))
    elif kind == "illcond":  # rows of A sum to 0 and B is all ones up to 1e-3: C cancels
        a = rng.standard_normal(sa)
        if k > 1:
            a[..., -1] = -a[..., :-1].sum(-1)
        b = 1.0 + 1e-3 * rng.standard_normal(sb)
    elif kind == "constant":  # one value each, repeated: rounding errors drift coherently
        vals = np.array([0.1, 1 / 3, 0.7, 1.1, 2.3])
        a = np.broadcast_to(rng.choice(vals, (batch, 1, 1)), sa).copy()
        b = np.broadcast_to(rng.choice(vals, (batch, 1, 1)), sb).copy()
    elif kind == "duprows":  # every row of A the same: identical rounding in every row of C
        a = np.broadcast_to(rng.standard_normal((batch, 1, k)), sa).copy()
        b = rng.standard_normal(sb)
    elif kind == "fewvals":
        a = rng.choice(np.array([0.1, 0.3, 0.7]), sa)
        b = rng.choice(np.array([1.1, -0.9]), sb)
    else:
        raise ValueError(f"unknown kind {kind!r}")
    a, b = np.clip(a, -top, top), np.clip(b, -top, top)
    return jnp.asarray(a, dtype), jnp.asarray(b, dtype)


# ---------------------------------------------------------------------------------------------
# tsm2_abft_encode and tsm2_abft_verify against float64 / extended NumPy


def pass_weights(m: int) -> np.ndarray:
    """``(2, m)`` weights of the passes as the targets compute them: ``s e_i`` and
    ``s e_i (i + 1) (1 / m)`` in f64."""
    from jax_tsm2 import abft_model

    s = abft_model.checksum_scale(m)
    e = np.asarray(abft_model.row_signs(m, jnp.float64), np.float64)
    w1 = s * e
    return np.stack([w1, w1 * (np.arange(1, m + 1, dtype=np.float64) * (1.0 / m))])


def reference_stats(a, b) -> np.ndarray:
    """``Checksums.stats`` of ``a @ b`` in long double (the reference sums), float64 rows; the
    low parts (rows 2-3) are 0 and rows 0-1 hold the whole values."""
    from jax_tsm2 import abft_model

    a64, b64 = as_f64(a), as_f64(b)
    m = a64.shape[0]
    s = abft_model.checksum_scale(m)
    w = pass_weights(m).astype(np.longdouble)
    ref = np.asarray((w @ a64.astype(np.longdouble)) @ b64.astype(np.longdouble), np.float64)
    abs1 = s * (np.abs(a64).sum(0) @ np.abs(b64))
    norm = s * np.sqrt(np.square(a64).sum(0) @ np.square(b64))
    tiny = float(jnp.finfo(a.dtype).tiny)
    sub_a = np.where(np.abs(a64) < tiny, np.abs(a64), 0).sum(0)
    sub_b = np.where(np.abs(b64) < tiny, np.abs(b64), 0)
    flush = s * (sub_a @ np.abs(b64) + np.abs(a64).sum(0) @ sub_b)
    zero = np.zeros_like(abs1)
    return np.stack([ref[0], ref[1], zero, zero, abs1, norm, flush])


def assert_stats_close(stats, a, b) -> None:
    """The encode target's stats against ``reference_stats``: the reference checksums (high
    plus low parts) within the sums' and the result's rounding of the terms' 1-norm, the
    scales within a relative 1e-6 (f32 results) or 1e-12."""
    want = reference_stats(a, b)
    got = as_f64(stats)
    acc_eps = float(jnp.finfo(stats.dtype).eps)
    abs1 = want[4]
    ref = got[0:2] + got[2:4]
    tol = (4 * acc_eps**2 + 1e-13) * abs1 + 1e-300
    assert (np.abs(ref - want[0:2]) <= tol).all(), (np.abs(ref - want[0:2]) / abs1).max()
    rel = 4 * acc_eps + 1e-12
    for row in (4, 5, 6):
        assert (np.abs(got[row] - want[row]) <= rel * np.abs(want[row]) + 1e-300).all(), row
