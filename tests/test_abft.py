"""ABFT for C = A @ B (jax_tsm2.abft): detection, location, correction, no false alarms, limits,
and one pass over each matrix.

Everything runs batched under ``jax.jit(jax.vmap(...))``: one compiled program checks hundreds of
random problems, which is both the fast way and the proof that verdicts are traced arrays.
Operands are random and never zero (magnitudes in [0.5, 1.5], random signs, or a wide
log-uniform range). Faults are injected into the computed product with ``inject_error``.
"""

from __future__ import annotations

import doctest
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _abft_reference import edge_operands
from _helpers import as_f64, slow

import jax_tsm2
from jax_tsm2 import _hlo, abft, abft_model

DTYPES = {"f32": jnp.float32, "f64": jnp.float64, "bf16": jnp.bfloat16, "f16": jnp.float16}
# (dtype, x64): all five in the slow run. By default, f32 and bf16 (the fewest mantissa
# bits, the widest thresholds); at the edges of the range, f16 (the narrowest range).
CASES = [("f32", True), slow("f32", False), slow("f64", True), ("bf16", True), slow("f16", True)]
RANGE_CASES = [
    slow("f32", True),
    slow("f32", False),
    slow("f64", True),
    slow("bf16", True),
    ("f16", True),
]


def operands(rng, batch, m, k, n, dtype, kind="signed"):
    def one(shape):
        shape = (batch, *shape)
        if kind == "positive":
            x = rng.uniform(0.5, 1.5, shape)
        else:
            if kind == "wide":  # magnitudes over two (f16: one) decades either way
                span = 1.0 if dtype == jnp.float16 else 2.0
                x = 10.0 ** rng.uniform(-span, span, shape)
            else:
                x = rng.uniform(0.5, 1.5, shape)
            x = x * rng.choice(np.array([-1.0, 1.0]), shape)
        return jnp.asarray(x, dtype)

    return one((m, k)), one((k, n))


def positions(rng, batch, m, n):
    return jnp.asarray(rng.integers(0, m, batch)), jnp.asarray(rng.integers(0, n, batch))


def signed_log_factors(rng, batch, lo, hi):
    """``s * 10**f`` with f uniform in [lo, hi] and a random sign s."""
    return jnp.asarray(10.0 ** rng.uniform(lo, hi, batch) * rng.choice([-1.0, 1.0], batch))


def product_bound(a, b):
    """A rounding tolerance for comparing a recomputed entry with the clean product."""
    out = a.dtype
    acc = jnp.float64 if out == jnp.float64 else jnp.float32
    k = a.shape[-1]
    eps = 2 * (k * float(jnp.finfo(acc).eps) + float(jnp.finfo(out).eps))
    return eps * (jnp.abs(a.astype(acc)) @ jnp.abs(b.astype(acc)))


def checksum_rounding(m, acc):
    """How much a large error's own rounding can add to a column residual (gamma_{m+1})."""
    u = float(jnp.finfo(acc).eps) / 2
    return 2 * (m + 1) * u / (1 - (m + 1) * u)


def threshold(cs, clean):
    """The clean product's column thresholds (they depend on C's column norms)."""
    return abft.verify(clean, cs).col_threshold


def assert_only_column_changed(fixed, clean, j):
    """Every column but ``j`` (per batch entry) is bitwise the clean product."""
    n = clean.shape[-1]
    other = jnp.arange(n)[None, None, :] != j[:, None, None]
    np.testing.assert_array_equal(jnp.where(other, fixed, 0), jnp.where(other, clean, 0))


# The default run forces XLA's formulations; the FFI targets' run by default in
# test_abft_detection.py (on CPU "auto" takes their references) and test_abft_calls.py.
@pytest.fixture(params=["xla", slow("kernels")])
def impl(request, monkeypatch):
    """The numerics tests run twice: with XLA's formulations forced (a variadic reduce per pass,
    summing in the accumulation dtype, and a lax.cond repair) and with the FFI targets forced
    (tsm2_abft_encode / tsm2_abft_verify for the passes, tsm2_abft_judge for the repair; on CPU
    their plain-loop references). The mode is read at trace time: caches are cleared so a
    function jitted under one mode is not reused under the other."""
    sums, repair = ("kernel", "kernel") if request.param == "kernels" else ("variadic", "cond")
    monkeypatch.setattr(abft, "_SUMS", sums)
    monkeypatch.setattr(abft, "_REPAIR", repair)
    jax.clear_caches()
    yield request.param
    jax.clear_caches()


# ---------------------------------------------------------------------------------------------
# single errors: detected, located, corrected


@pytest.mark.usefixtures("impl")
@pytest.mark.parametrize(("name", "x64"), CASES)
def test_single_error_is_repaired_from_the_operands(name, x64):
    """From 2.5x to 1e6x the column threshold (f16: 1e3x, its range is small)."""
    dtype = DTYPES[name]
    rng = np.random.default_rng(1)
    batch, m, k, n = 200, 37, 90, 23
    with jax.enable_x64(x64):
        a, b = operands(rng, batch, m, k, n, dtype)
        i, j = positions(rng, batch, m, n)
        f = signed_log_factors(rng, batch, math.log10(2.5), 3.0 if dtype == jnp.float16 else 6.0)

        def case(a, b, i, j, f):
            cs = abft.encode(a, b)
            clean = a @ b
            acc = cs.col.dtype
            bad = abft.inject_error(clean, i, j, (f * threshold(cs, clean)[j]).astype(acc))
            injected = bad[i, j].astype(acc) - clean[i, j].astype(acc)
            scale = jnp.abs(a[i].astype(acc)) @ jnp.abs(b[:, j].astype(acc))
            entry_bound = cs.entry_factor * scale + cs.entry_floor
            return clean, abft.check(bad, cs, a=a, b=b), injected, entry_bound

        clean, (fixed, v), injected, entry_bound = jax.jit(jax.vmap(case))(a, b, i, j, f)
        assert (v.errors_detected == 1).all()
        assert v.corrected.all() and not v.uncorrectable.any()
        np.testing.assert_array_equal(v.row, i)
        np.testing.assert_array_equal(v.col, j)
        # magnitude = computed - recomputed: the injected error up to one entry's rounding.
        assert (jnp.abs(v.magnitude - injected) <= entry_bound).all()
        assert_only_column_changed(fixed, clean, j)
        acc = v.magnitude.dtype
        bound = jax.vmap(product_bound)(a, b).astype(acc)
        assert (jnp.abs(fixed.astype(acc) - clean.astype(acc)) <= bound).all()


@pytest.mark.usefixtures("impl")
@pytest.mark.parametrize(("name", "x64"), CASES)
def test_single_large_error_is_located_without_the_operands(name, x64):
    """Beyond 4.1 m times the faulty column's threshold the weighted residual's ratio names
    the row. The threshold depends on C's column, and a bf16/f16 fault raises it by up to
    lambda u_out |d| (its own half-ulp): with the clean threshold t, |d| > 4.1 m t / (1 - 4 m
    lambda u_out) is enough, for columns short enough that the denominator stays positive."""
    dtype = DTYPES[name]
    rng = np.random.default_rng(2)
    batch, m, k, n = 200, 6 if dtype == jnp.bfloat16 else 37, 90, 23
    narrow = dtype in (jnp.bfloat16, jnp.float16)
    own = 4 * m * abft_model.LAMBDA * float(jnp.finfo(dtype).eps) / 2 if narrow else 0.0
    with jax.enable_x64(x64):
        a, b = operands(rng, batch, m, k, n, dtype)
        i, j = positions(rng, batch, m, n)
        lo = math.log10(4.1 * m / (1 - own))
        f = signed_log_factors(rng, batch, lo, 3.3 if dtype == jnp.float16 else 6.0)

        def case(a, b, i, j, f):
            cs = abft.encode(a, b)
            clean = a @ b
            acc = cs.col.dtype
            t = threshold(cs, clean)[j]
            bad = abft.inject_error(clean, i, j, (f * t).astype(acc))
            injected = bad[i, j].astype(acc) - clean[i, j].astype(acc)
            return clean, abft.check(bad, cs), injected, t

        clean, (fixed, v), injected, t = jax.jit(jax.vmap(case))(a, b, i, j, f)
        assert (v.errors_detected == 1).all()
        assert v.corrected.all() and not v.uncorrectable.any()
        np.testing.assert_array_equal(v.row, i)
        np.testing.assert_array_equal(v.col, j)
        # The residual measures the error to the threshold (plus the error's own rounding).
        acc = v.magnitude.dtype
        tol = t + checksum_rounding(m, acc) * jnp.abs(injected)
        assert (jnp.abs(v.magnitude - injected) <= tol).all()
        assert_only_column_changed(fixed, clean, j)
        got = jnp.take_along_axis(fixed.reshape(batch, -1), (i * n + j)[:, None], axis=1).astype(
            acc
        )[:, 0]
        want = clean[jnp.arange(batch), i, j].astype(acc)
        ulp = float(jnp.finfo(dtype).eps) * (jnp.abs(want) + tol)
        assert (jnp.abs(got - want) <= tol + ulp).all()


@pytest.mark.usefixtures("impl")
def test_error_between_detection_and_location_limits():
    """10x the threshold in a 200-row C: flagged, but the ratio cannot tell neighbouring rows
    apart (their weights differ by 1/200): uncorrectable without the operands, repaired with."""
    rng = np.random.default_rng(3)
    batch, m, k, n = 100, 200, 16, 6
    a, b = operands(rng, batch, m, k, n, jnp.float32)
    i, j = positions(rng, batch, m, n)
    s = jnp.asarray(rng.choice([-1.0, 1.0], batch))

    def case(a, b, i, j, s):
        cs = abft.encode(a, b)
        bad = abft.inject_error(a @ b, i, j, s * 10 * threshold(cs, a @ b)[j])
        return bad, abft.check(bad, cs), abft.check(bad, cs, a=a, b=b)

    bad, (c1, v1), (_, v2) = jax.jit(jax.vmap(case))(a, b, i, j, s)
    assert (v1.errors_detected == 1).all() and v1.uncorrectable.all()
    assert (v1.row == -1).all() and (v1.col == j).all()
    np.testing.assert_array_equal(c1, bad)
    assert v2.corrected.all()
    np.testing.assert_array_equal(v2.row, i)


@pytest.mark.usefixtures("impl")
def test_several_errors_in_one_column_are_repaired_from_the_operands():
    """2 to 5 errors in one column: one flagged column, recomputed; the count is exact."""
    rng = np.random.default_rng(4)
    batch, m, k, n, most = 150, 30, 50, 20, 5
    a, b = operands(rng, batch, m, k, n, jnp.float32)
    rows = jnp.asarray(np.stack([rng.permutation(m)[:most] for _ in range(batch)]))
    j = jnp.asarray(rng.integers(0, n, batch))
    count = jnp.asarray(rng.integers(2, most + 1, batch))
    f = signed_log_factors(rng, batch * most, 2.0, 4.0).reshape(batch, most)
    f = jnp.where(jnp.arange(most)[None, :] < count[:, None], f, 0.0)

    def case(a, b, rows, j, f):
        cs = abft.encode(a, b)
        clean = a @ b
        bad = clean
        t = threshold(cs, clean)
        for e in range(most):  # unused slots add 0
            bad = abft.inject_error(bad, rows[e], j, f[e] * t[j])
        acc = cs.col.dtype
        errors = bad[:, j].astype(acc) - clean[:, j].astype(acc)
        sums = jnp.sum(abft_model.row_signs(m, acc) * errors), jnp.sum(jnp.abs(errors))
        return clean, abft.check(bad, cs, a=a, b=b), abft.check(bad, cs)[1], sums, t

    clean, (fixed, v), v2, (total, total_abs), t = jax.jit(jax.vmap(case))(a, b, rows, j, f)
    np.testing.assert_array_equal(v.errors_detected, count)
    assert v.corrected.all() and not v.uncorrectable.any()
    np.testing.assert_array_equal(v.col, j)
    np.testing.assert_array_equal(v.row, rows[jnp.arange(batch), jnp.argmax(jnp.abs(f), 1)])
    assert_only_column_changed(fixed, clean, j)
    bound = jax.vmap(product_bound)(a, b)
    assert (jnp.abs(fixed - clean) <= bound).all()
    # Without the operands one column is all that is known: one detection, whose residual is
    # the random-sign sum of the errors (times the sign of the row the ratio names, if any,
    # which may be none of them).
    assert (v2.errors_detected == 1).all() and (v2.col == j).all()
    t = jnp.take_along_axis(t, j[:, None], axis=1)[:, 0]
    tol = t + checksum_rounding(m, total.dtype) * total_abs
    assert (jnp.abs(jnp.abs(v2.magnitude) - jnp.abs(total)) <= tol).all()


@pytest.mark.usefixtures("impl")
@pytest.mark.parametrize("with_operands", [True, False])
def test_errors_in_several_columns_are_uncorrectable(with_operands):
    """2 or 3 errors in distinct columns (same row or not): C unchanged, count = columns."""
    rng = np.random.default_rng(5)
    batch, m, k, n = 300, 30, 50, 20
    a, b = operands(rng, batch, m, k, n, jnp.float32)
    cols = jnp.asarray(np.stack([rng.permutation(n)[:3] for _ in range(batch)]))
    rows = jnp.asarray(rng.integers(0, m, (batch, 3)))
    rows = jnp.where((jnp.arange(batch) % 2 == 0)[:, None], rows[:, :1], rows)  # same row
    count = jnp.asarray(rng.integers(2, 4, batch))
    f = signed_log_factors(rng, batch * 3, 2.0, 4.0).reshape(batch, 3)
    f = jnp.where(jnp.arange(3)[None, :] < count[:, None], f, 0.0)

    def case(a, b, rows, cols, f):
        cs = abft.encode(a, b)
        bad = a @ b
        t = threshold(cs, bad).max()
        for e in range(3):
            bad = abft.inject_error(bad, rows[e], cols[e], f[e] * t)
        if with_operands:
            return bad, abft.check(bad, cs, a=a, b=b)
        return bad, abft.check(bad, cs)

    bad, (c, v) = jax.jit(jax.vmap(case))(a, b, rows, cols, f)
    np.testing.assert_array_equal(v.errors_detected, count)
    assert v.uncorrectable.all() and not v.corrected.any()
    assert (v.row == -1).all()
    assert ((v.col[:, None] == cols) & (jnp.arange(3)[None, :] < count[:, None])).any(1).all()
    np.testing.assert_array_equal(c, bad)


# ---------------------------------------------------------------------------------------------
# NaN and Inf


@pytest.mark.usefixtures("impl")
def test_non_finite_entry_is_repaired_only_from_the_operands():
    rng = np.random.default_rng(6)
    a, b = operands(rng, 1, 20, 30, 10, jnp.float32)
    a, b = a[0], b[0]

    def case(value):
        cs = abft.encode(a, b)
        bad = (a @ b).at[4, 7].set(value.astype(jnp.float32))
        return bad, abft.check(bad, cs), abft.check(bad, cs, a=a, b=b)

    bad, (c1, v1), (c2, v2) = jax.jit(jax.vmap(case))(jnp.asarray([jnp.nan, jnp.inf, -jnp.inf]))
    assert (v1.errors_detected == 1).all() and v1.uncorrectable.all()
    assert (v1.col == 7).all() and (v1.row == -1).all()
    np.testing.assert_array_equal(c1, bad)
    assert v2.corrected.all() and (v2.row == 4).all() and (v2.col == 7).all()
    assert (v2.errors_detected == 1).all() and not jnp.isfinite(v2.magnitude).any()
    assert (jnp.abs(c2 - a @ b) <= product_bound(a, b)).all()


@pytest.mark.usefixtures("impl")
def test_non_finite_operands_are_uncorrectable():
    """NaN in A spoils a row of C (every column flagged); Inf in B spoils one column, and
    recomputing it gives Inf/NaN again: neither is 'corrected', C comes back unchanged."""
    rng = np.random.default_rng(7)
    a, b = operands(rng, 1, 20, 30, 10, jnp.float32)
    a, b = a[0], b[0]
    for a_, b_ in ((a.at[3, 5].set(jnp.nan), b), (a, b.at[8, 2].set(jnp.inf))):
        c = a_ @ b_
        fixed, v = jax.jit(abft.check)(c, abft.encode(a_, b_), a=a_, b=b_)
        assert v.uncorrectable and not v.corrected and v.errors_detected >= 1
        np.testing.assert_array_equal(fixed, c)


# ---------------------------------------------------------------------------------------------
# no false positives


def mixed_operands(rng, batch, m, k, n, dtype):
    """A batch of signed, all-positive and wide-range problems (a third each)."""
    parts = [
        operands(rng, size, m, k, n, dtype, kind)
        for size, kind in zip(
            (batch - 2 * (batch // 3), batch // 3, batch // 3),
            ("signed", "positive", "wide"),
            strict=True,
        )
    ]
    return (jnp.concatenate([p[0] for p in parts]), jnp.concatenate([p[1] for p in parts]))


# (dtype, x64, shapes): 1000 clean products per dtype; each shape is one compiled program.
FP_CASES = {
    "f32": (True, [(600, 33, 70, 5), (400, 300, 20, 3)]),
    "f32_no_x64": (False, [(600, 24, 96, 12), (400, 257, 33, 2)]),
    "f64": (True, [(600, 64, 128, 17), (400, 8, 16, 8)]),
    "bf16": (True, [(600, 33, 70, 5), (400, 130, 9, 4)]),
    "f16": (True, [(1000, 24, 96, 12)]),
}


def checked_product(a, b):
    """The product abft_matmul returns: its sums in ``checked_dtype`` (f32 for bf16/f16),
    rounded once to the operands' dtype. (Near underflow a bf16 product made otherwise can
    differ: where subnormal terms are flushed is the product's own business.)"""
    dtype = jnp.result_type(a, b)
    return jnp.matmul(a, b, preferred_element_type=abft.checked_dtype(dtype)).astype(dtype)


@pytest.mark.usefixtures("impl")
@pytest.mark.parametrize(
    "case", [slow("f32"), slow("f32_no_x64"), slow("f64"), "bf16", slow("f16")]
)
def test_no_false_positive_over_1000_clean_products(case):
    """Under vmap the repair's cond is a select: the recomputation runs and must be discarded."""
    dtype = DTYPES[case.split("_")[0]]
    x64, shapes = FP_CASES[case]
    rng = np.random.default_rng(8)
    run = jax.jit(jax.vmap(abft.abft_matmul))
    with jax.enable_x64(x64):
        for batch, m, k, n in shapes:
            a, b = mixed_operands(rng, batch, m, k, n, dtype)
            c, v = run(a, b)
            assert c.dtype == jnp.matmul(a, b).dtype
            assert (v.errors_detected == 0).all(), (m, k, n, int(v.errors_detected.sum()))
            assert not v.corrected.any() and not v.uncorrectable.any()
            assert (v.row == -1).all() and (v.col == -1).all() and (v.magnitude == 0).all()
            np.testing.assert_array_equal(c, checked_product(a, b))


@pytest.mark.usefixtures("impl")
@pytest.mark.parametrize("kind", ["underflow", "overflow", "mixed"])
@pytest.mark.parametrize(("name", "x64"), RANGE_CASES)
def test_clean_products_at_the_edges_of_the_range_are_never_flagged(kind, name, x64):
    """Terms flushed to zero, column sums past the largest number, operands of every scale:
    a clean, finite product passes; an error of 3 thresholds in it is still found."""
    dtype = DTYPES[name]
    rng = np.random.default_rng(12)
    batch, m, k, n = 64, 37, 23, 5
    with jax.enable_x64(x64):
        a, b = edge_operands(rng, batch, m, k, n, dtype, kind)
        i, j = positions(rng, batch, m, n)

        def case(a, b, i, j):
            c, v = abft.abft_matmul(a, b)
            cs = abft.encode(a, b)
            t = threshold(cs, c)[j]
            big = abft.check(abft.inject_error(c, i, j, 3 * t), cs, a=a, b=b)[1]
            return c, v, t, big

        c, v, t, big = jax.jit(jax.vmap(case))(a, b, i, j)
        assert jnp.isfinite(c).all()
        assert (v.errors_detected == 0).all(), int((v.errors_detected > 0).sum())
        assert not v.uncorrectable.any() and (v.col == -1).all()
        np.testing.assert_array_equal(c, checked_product(a, b))
        # Where 3 thresholds fit in the dtype beside C, the fault is detected and repaired.
        # (bf16/f16 thresholds are about 1% of |A||B|: at the top of the range there is none.)
        room = jnp.isfinite(t) & (3 * t < float(jnp.finfo(dtype).max) / 4)
        assert room.any() or (kind == "overflow" and name in ("bf16", "f16"))
        assert (jnp.where(room, big.errors_detected >= 1, True)).all()
        assert (jnp.where(room, big.corrected, True)).all()


# ---------------------------------------------------------------------------------------------
# detection limits


@pytest.mark.usefixtures("impl")
def test_detection_limit_behaviour():
    """> 1.25x the column threshold: always detected (a clean residual stays far below the
    threshold, abft_model); 1e-3x: never."""
    rng = np.random.default_rng(9)
    batch, m, k, n = 300, 24, 64, 24
    a, b = operands(rng, batch, m, k, n, jnp.float32)
    i, j = positions(rng, batch, m, n)
    s = jnp.asarray(rng.choice([-1.0, 1.0], batch))

    def case(a, b, i, j, s):
        cs = abft.encode(a, b)
        c = a @ b
        t = threshold(cs, c)[j]
        big = abft.check(abft.inject_error(c, i, j, s * 1.25 * t), cs, a=a, b=b)[1]
        tiny = abft.check(abft.inject_error(c, i, j, s * 1e-3 * t), cs, a=a, b=b)[1]
        return big, tiny

    big, tiny = jax.jit(jax.vmap(case))(a, b, i, j, s)
    assert (big.errors_detected >= 1).all() and big.corrected.all()
    assert (tiny.errors_detected == 0).all()


@pytest.mark.parametrize(
    ("impl", "name", "growth"),
    [slow("kernels", "f32", (1.3, 1.5)), slow("kernels", "f64", (1.3, 1.5)),
     ("xla", "f32", (1.3, 1.5)), ("xla", "f64", (1.9, 4.0))],
    indirect=["impl"],
)  # fmt: skip
def test_threshold_grows_with_the_column_length(impl, name, growth):
    """The threshold is a root-sum-square over the column (random signs): doubling m
    multiplies it by about sqrt(2). Except where the checksums' own rounding dominates: XLA's
    formulation sums f64 data in plain f64, a worst-case term linear in m (abft_model)."""
    del impl
    rng = np.random.default_rng(10)
    a, b = operands(rng, 1, 512, 64, 8, DTYPES[name])
    a, b = a[0], b[0]
    t_full = threshold(abft.encode(a, b), a @ b)
    t_half = threshold(abft.encode(a[:256], b), a[:256] @ b)
    ratio = t_full / t_half
    assert ((ratio > growth[0]) & (ratio < growth[1])).all(), ratio


# ---------------------------------------------------------------------------------------------
# one pass over each matrix (compiled HLO; on GPU benchmarks/abft_overhead.py prints the same)


def compiled(f, *args) -> str:
    return jax.jit(f).lower(*args).compile().as_text()


@pytest.mark.parametrize("dtype", [jnp.float32, slow(jnp.float64)])
@pytest.mark.parametrize("repair", ["cond", "select"])
def test_each_matrix_is_read_by_one_fused_pass(dtype, repair, monkeypatch):
    """encode reads A once and B once, verify reads C once; in abft_matmul A and B are also
    read by the product and the repair (a conditional, or a second reduction over A when it
    always runs), C also by column slices (the in-place update), and by nothing else: no
    copy, no second reduction. (bf16 is left out: XLA's CPU dot converts its operands first.
    The passes are pinned to the variadic reduce: sibling sums fuse on GPU only.)"""
    monkeypatch.setattr(abft, "_REPAIR", repair)
    monkeypatch.setattr(abft, "_SUMS", "variadic")
    m, k, n = 96, 80, 48
    a, b = jnp.ones((m, k), dtype), jnp.ones((k, n), dtype)
    text = compiled(lambda x, y: abft.encode(x, y), a, b)
    assert _hlo.reader_kinds(text, parameter=0) == ["reduce"]
    assert _hlo.reader_kinds(text, parameter=1) == ["reduce"]
    text = compiled(lambda x, cs: abft.verify(x, cs), a @ b, abft.encode(a, b))
    assert _hlo.reader_kinds(text, parameter=0) == ["reduce"]
    text = compiled(lambda x, y: abft.abft_matmul(x, y), a, b)
    repair_kind = "conditional" if repair == "cond" else "reduce"
    assert _hlo.reader_kinds(text, parameter=0) == sorted(["product", "reduce", repair_kind])
    assert _hlo.reader_kinds(text, parameter=1) == sorted(["product", "reduce", repair_kind])
    short = {jnp.float32: "f32", jnp.float64: "f64"}[dtype]
    kinds = _hlo.reader_kinds(text, shape=f"{short}[{m},{n}]")
    assert kinds.count("reduce") == 1 and set(kinds) <= {"reduce", "slice"}, kinds


@pytest.mark.slow  # the benchmark's alternative formulation
def test_select_repair_gives_the_cond_results(monkeypatch):
    """The benchmark's alternative to the cond (always recompute, then select) is equivalent."""
    rng = np.random.default_rng(12)
    a, b = operands(rng, 1, 40, 30, 12, jnp.float32)
    a, b = a[0], b[0]
    cs = abft.encode(a, b)
    clean = a @ b
    one = abft.inject_error(clean, 7, 3, 1e3)
    two = abft.inject_error(one, 2, 9, -1e3)
    for c in (clean, one, two):
        got = {}
        for repair in ("cond", "select"):
            monkeypatch.setattr(abft, "_REPAIR", repair)
            got[repair] = jax.jit(lambda x: abft.check(x, cs, a=a, b=b))(c)
        for x, y in zip(jax.tree.leaves(got["cond"]), jax.tree.leaves(got["select"]), strict=True):
            np.testing.assert_array_equal(x, y)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="GPU XLA fuses sibling reductions")
def test_reader_count_sees_separate_passes():
    """The check can fail: on CPU, sibling jnp.sum calls stay separate passes over A."""
    a = jnp.ones((64, 32))
    text = compiled(lambda x: (jnp.sum(x, 0), jnp.sum(jnp.abs(x), 0)), a)
    assert len(_hlo.reader_kinds(text, parameter=0)) >= 2


def test_repair_is_a_cond_except_under_vmap(monkeypatch):
    monkeypatch.setattr(abft, "_REPAIR", "cond")  # "auto" is the kernel on CUDA
    a, b = jnp.ones((16, 8)), jnp.ones((8, 4))
    assert "conditional(" in compiled(abft.abft_matmul, a, b)
    assert "conditional(" not in compiled(jax.vmap(abft.abft_matmul), a[None], b[None])


def test_kernel_modes_read_each_matrix_once_and_never_copy_c(monkeypatch):
    """With the FFI targets, A and B are read by the product, the tsm2_abft_encode call and the
    judge call (which reads them only on a fault); C by the tsm2_abft_verify call and the judge
    call, whose alias writes the column in place: no copy of C, no conditional."""
    monkeypatch.setattr(abft, "_SUMS", "kernel")
    monkeypatch.setattr(abft, "_REPAIR", "kernel")
    m, k, n = 96, 80, 48
    a, b = jnp.ones((m, k), jnp.float32), jnp.ones((k, n), jnp.float32)
    text = compiled(lambda x, y: abft.abft_matmul(x, y), a, b)
    ours = ["custom-call:tsm2_abft_encode", "custom-call:tsm2_abft_judge"]
    for which in ({"parameter": 0}, {"parameter": 1}):  # and the product (a custom call on GPU)
        labels = _hlo.reader_labels(text, **which)
        assert len(labels) == 3 and sorted(x for x in labels if x in ours) == ours, labels
    c_readers = ["custom-call:tsm2_abft_judge", "custom-call:tsm2_abft_verify"]
    assert sorted(_hlo.reader_labels(text, shape=f"f32[{m},{n}]")) == c_readers
    assert "conditional(" not in text
    assert not [line for line in text.splitlines() if f"f32[{m},{n}]" in line and " copy(" in line]


def test_auto_lowers_the_passes_to_the_targets_and_the_judge_for_cuda_only():
    a, b = jnp.ones((64, 48), jnp.float32), jnp.ones((48, 8), jnp.float32)

    def lowered(platform):
        return jax.jit(abft.abft_matmul).trace(a, b).lower(lowering_platforms=(platform,))

    cuda, cpu = lowered("cuda").as_text(), lowered("cpu").as_text()
    for text in (cuda, cpu):
        assert text.count("custom_call @tsm2_abft_encode") == 1
        assert "tsm2_abft_verify_inject" not in text and "tsm2_colsums" not in text
        assert text.count("custom_call @tsm2_abft_verify") == 1
    assert cuda.count("custom_call @tsm2_abft_judge") == 1
    assert "tsm2_abft_judge" not in cpu
    with jax_tsm2.custom_call_mode("never"):
        assert "tsm2_" not in lowered("cuda").as_text()
    if jax.default_backend() == "cpu":
        # The platform switch is resolved when compiling: only the repair's cond is left.
        assert compiled(abft.abft_matmul, a, b).count(" conditional(") == 1


@pytest.mark.parametrize("dtype", [jnp.float32, slow(jnp.float64), slow(jnp.bfloat16)])
def test_judge_target_gives_the_xla_verdict(monkeypatch, dtype):
    """tsm2_abft_judge (here its CPU reference) against the XLA formulation of ``correct`` on
    clean and faulty products: one fault, two in one column, two columns, a NaN."""
    from _abft_reference import assert_verdicts_agree, judge_scenarios

    a, b, cs, products = judge_scenarios(np.random.default_rng(5), 70, 33, 13, dtype)
    results = {}
    for mode in ("kernel", "cond"):
        monkeypatch.setattr(abft, "_REPAIR", mode)
        run = jax.jit(lambda c: abft.check(c, cs, a=a, b=b))  # traced afresh per mode
        results[mode] = {name: run(c) for name, c in products.items()}
        if mode == "kernel":
            assert "tsm2_abft_judge" in run.lower(products["clean"]).as_text()
    for name in products:
        assert_verdicts_agree(results["kernel"][name], results["cond"][name], cs.col.dtype)
    assert int(results["kernel"]["two columns"][1].errors_detected) == 2
    assert bool(results["kernel"]["nan"][1].corrected)


def test_kernel_modes_take_the_xla_repair_for_mixed_dtypes(monkeypatch):
    """The repair kernel wants one dtype for A, B and C; mixed operands take the cond (the
    passes still run on the targets, after the exact promotion jnp.matmul makes too)."""
    monkeypatch.setattr(abft, "_SUMS", "kernel")
    monkeypatch.setattr(abft, "_REPAIR", "kernel")
    rng = np.random.default_rng(13)
    a, b = operands(rng, 1, 30, 20, 6, jnp.float32)
    a, b = a[0], b[0].astype(jnp.bfloat16)
    text = compiled(lambda x, y: abft.abft_matmul(x, y), a, b)
    assert "tsm2_abft_encode" in text and "tsm2_abft_judge" not in text
    cs = abft.encode(a, b)
    clean = a @ b
    fixed, v = jax.jit(lambda c: abft.check(c, cs, a=a, b=b))(abft.inject_error(clean, 5, 2, 1e3))
    assert v.corrected and int(v.row) == 5 and int(v.col) == 2
    assert (jnp.abs(fixed - clean) <= product_bound(a, b.astype(jnp.float32))).all()


@pytest.mark.parametrize(("name", "value"), [("_SUMS", "fast"), ("_REPAIR", "never")])
def test_unknown_formulation_is_an_error(name, value, monkeypatch):
    monkeypatch.setattr(abft, name, value)
    a = jnp.ones((4, 3), jnp.float32)
    with pytest.raises(ValueError, match=f"abft.{name} must be one of"):
        abft.abft_matmul(a, a.T)


# ---------------------------------------------------------------------------------------------
# API: jit, vmap, shapes, dtypes, docstrings


@pytest.mark.usefixtures("impl")
def test_abft_matmul_jit_and_shapes():
    rng = np.random.default_rng(11)
    a, b = operands(rng, 1, 50, 40, 6, jnp.float32)
    a, b = a[0], b[0]
    c, v = jax.jit(abft.abft_matmul)(a, b)
    np.testing.assert_array_equal(c, jnp.matmul(a, b))
    assert isinstance(v, abft.Verdict)
    assert all(x.shape == () for x in v)
    assert v.errors_detected.dtype == jnp.int32 and v.corrected.dtype == jnp.bool_
    with pytest.raises(ValueError, match="2-D"):
        abft.abft_matmul(a[None], b[None])
    with pytest.raises(TypeError):
        abft.abft_matmul(a, b.T)
    with pytest.raises(TypeError):
        abft.abft_matmul(jnp.ones((3, 2), jnp.int32), jnp.ones((2, 2), jnp.int32))
    with pytest.raises(TypeError, match="do not give"):
        abft.check(c, abft.encode(a, b), a=a[:10], b=b)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_half_products_are_checked_as_their_f32_sums(dtype):
    """abft_matmul returns the f32 sums rounded once to the operands' dtype, and checks the
    sums: an error of a tenth of a column's largest entry in a 1024-row column, which the
    rounded product's threshold allows for, is caught there."""
    rng = np.random.default_rng(12)
    a, b = operands(rng, 1, 1024, 256, 3, dtype)
    a, b = a[0], b[0]
    c, v = jax.jit(abft.abft_matmul)(a, b)
    sums = jnp.matmul(a, b, preferred_element_type=jnp.float32)
    assert c.dtype == dtype and int(v.errors_detected) == 0
    np.testing.assert_array_equal(as_f64(c), as_f64(sums.astype(dtype)))
    assert abft.checked_dtype(dtype) == np.float32 and abft.checked_dtype(jnp.float64) == np.float64
    delta = 0.1 * float(jnp.max(jnp.abs(sums[:, 1])))
    cs = abft.encode(a, b, out_dtype=jnp.float32)
    fixed, v = abft.check(abft.inject_error(sums, 700, 1, delta), cs, a=a, b=b)
    assert int(v.row) == 700 and int(v.col) == 1 and bool(v.corrected)
    assert float(jnp.max(jnp.abs(fixed - sums))) < 1e-3 * delta
    with pytest.raises(TypeError, match="out_dtype"):
        abft.encode(a, b, out_dtype=jnp.float64)


@pytest.mark.usefixtures("impl")
def test_empty_and_degenerate_shapes():
    for m, k, n in ((0, 3, 2), (3, 0, 2), (3, 2, 0), (1, 1, 1)):
        a, b = jnp.ones((m, k)), jnp.ones((k, n))
        c, v = jax.jit(abft.abft_matmul)(a, b)
        assert c.shape == (m, n) and int(v.errors_detected) == 0
    bad = abft.inject_error(jnp.ones((1, 1)), 0, 0, 5.0)
    fixed, v = abft.check(bad, abft.encode(jnp.ones((1, 1)), jnp.ones((1, 1))))
    assert v.corrected and int(v.row) == 0 and float(fixed[0, 0]) == 1.0


@pytest.mark.usefixtures("impl")
def test_checksums_dtypes():
    def dtypes(x):
        cs = jax.eval_shape(abft.encode, x, x.T)
        return {np.dtype(leaf.dtype).name for leaf in cs}

    assert dtypes(jnp.ones((4, 3), jnp.bfloat16)) == {"float32"}
    a32 = jnp.ones((4, 3), jnp.float32)
    with jax.enable_x64(True):
        assert dtypes(a32) == {"float64"}
    with jax.enable_x64(False):
        assert dtypes(a32) == {"float32"}


def test_docstring_examples():
    with jax.enable_x64(False):  # the examples show float32 defaults
        for module in (abft, abft_model, _hlo):
            result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
            assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize(("m", "n"), [(1, 5), (7, 1), (1, 1)])
def test_half_precision_vector_products_sum_in_f32(dtype, m, n):
    """abft.product: one rounding of the f32 sum, whatever the platform's dot does with a
    single row or column; other shapes are jax_tsm2.matmul's product itself."""
    rng = np.random.default_rng(m * 10 + n)
    a, b = (x[0] for x in operands(rng, 1, m, 301, n, dtype))
    got = abft.product(a, b)
    assert got.dtype == dtype and got.shape == (m, n)
    exact = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    scale = np.abs(np.asarray(a, np.float64)) @ np.abs(np.asarray(b, np.float64))
    u_out, u_acc = float(jnp.finfo(dtype).eps) / 2, float(jnp.finfo(jnp.float32).eps) / 2
    err = np.abs(np.asarray(got, np.float64) - exact)
    assert (err <= u_out * np.abs(exact) + 1.01 * 302 * u_acc * scale).all()
    wide = jnp.concatenate([a] * 2) if m == 1 else a
    if n > 1:
        np.testing.assert_array_equal(abft.product(wide, b), jax_tsm2.matmul(wide, b))
    with pytest.raises(ValueError, match="2-D"):
        abft.product(a[0], b)
