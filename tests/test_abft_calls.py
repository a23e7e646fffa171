"""The ABFT FFI targets on CPU (jax_tsm2.abft_calls): tsm2_colsums and tsm2_repair_column.

The CPU targets are plain-loop references with the CUDA kernels' contracts; here they are
checked against float64 NumPy references on random, never-zero data (magnitudes in [0.5, 1.5],
random signs) for every dtype, 1 to 4 weight rows with |.| masks, and odd sizes. Rows whose
length is not a whole number of 16-byte vectors (cols 1, 3, 129, 4097) are the closest JAX
gets to unaligned views: every row but the first starts off a vector boundary. The same cases
run on the CUDA kernels in test_gpu_abft.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _abft_reference import acc_of, assert_colsums_close, assert_repaired, masks, repair_case
from _helpers import FLOAT_DTYPES, as_f64, rand, slow

from jax_tsm2 import _hlo, abft_calls

dtype_ids = lambda d: jnp.dtype(d).name
# The default run takes no rows, more rows than a tile, and rows of 1 and 129 entries.
ROWS = (0, slow(1), slow(7), 1031)
COLS = (1, slow(3), 129, slow(4097))


@pytest.fixture(autouse=True)
def _on_the_cpu_device():
    """These tests are about the CPU targets (test_gpu_abft.py covers CUDA)."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


_colsums = jax.jit(abft_calls.colsums, static_argnames="abs_rows")


@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_colsums_matches_float64_reference(dtype, rows, cols):
    rng = np.random.default_rng(rows * 10_000 + cols)
    m = rand(rng, (rows, cols), dtype)
    m64 = as_f64(m)
    for r in range(1, 5):
        v = rand(rng, (r, rows), acc_of(dtype))
        for mask in masks(r):
            assert_colsums_close(_colsums(m, v, abs_rows=mask), m64, v, mask)


@pytest.mark.parametrize(
    ("dtype", "acc"),
    [(jnp.float32, jnp.float64), (jnp.bfloat16, jnp.float64), (jnp.float16, jnp.float64),
     (jnp.float64, jnp.float32)],
    ids=["f32-f64", "bf16-f64", "f16-f64", "f64-f32"],
)  # fmt: skip
def test_colsums_accumulates_in_the_weights_dtype(dtype, acc):
    rng = np.random.default_rng(5)
    m = rand(rng, (1031, 129), dtype)
    v = rand(rng, (3, 1031), acc)
    out = _colsums(m, v, abs_rows=0b100)
    assert out.dtype == jnp.dtype(acc)
    assert_colsums_close(out, m, v, 0b100)


def test_colsums_of_no_rows_is_zero_and_of_no_columns_is_empty():
    v = jnp.ones((2, 0), jnp.float32)
    out = _colsums(jnp.ones((0, 5), jnp.float32), v)
    np.testing.assert_array_equal(out, np.zeros((2, 5)))
    assert _colsums(jnp.ones((4, 0)), jnp.ones((3, 4))).shape == (3, 0)


def test_colsums_nan_and_inf_propagate_to_their_column_only():
    m = jnp.ones((5, 4), jnp.float32).at[2, 1].set(jnp.nan).at[3, 2].set(-jnp.inf)
    out = _colsums(m, jnp.ones((2, 5), jnp.float32), abs_rows=0b10)
    assert np.isnan(out[0, 1]) and out[0, 2] == -np.inf and out[1, 2] == np.inf
    np.testing.assert_array_equal(out[:, [0, 3]], 5.0)


def test_colsums_under_vmap_and_jit():
    rng = np.random.default_rng(6)
    m = rand(rng, (3, 40, 9), jnp.float32)
    v = rand(rng, (3, 2, 40), jnp.float32)
    out = jax.jit(jax.vmap(lambda x, w: abft_calls.colsums(x, w, abs_rows=1)))(m, v)
    for e in range(3):
        assert_colsums_close(out[e], m[e], v[e], 1)


@pytest.mark.parametrize(
    ("m", "v", "kw", "err", "match"),
    [
        (jnp.ones((3,)), jnp.ones((1, 3)), {}, ValueError, "rows, cols"),
        (jnp.ones((3, 2), jnp.int32), jnp.ones((1, 3)), {}, TypeError, "f16/bf16/f32/f64"),
        (jnp.ones((3, 2)), jnp.ones((1, 3), jnp.float16), {}, TypeError, "accumulation"),
        (jnp.ones((3, 2)), jnp.ones((5, 3)), {}, ValueError, "1 <= r <= 4"),
        (jnp.ones((3, 2)), jnp.ones((2, 4)), {}, ValueError, "rows = m's 3"),
        (jnp.ones((3, 2)), jnp.ones((2, 3)), {"abs_rows": 4}, ValueError, r"\[0, 2\*\*2\)"),
        (jnp.ones((3, 2)), jnp.ones((2, 3)), {"abs_rows": 1.0}, ValueError, "abs_rows"),
    ],
)
def test_colsums_rejects_bad_calls_at_trace_time(m, v, kw, err, match):
    with pytest.raises(err, match=match):
        abft_calls.colsums(m, v, **kw)


# ---------------------------------------------------------------------------------------------
# tsm2_repair_column


_repair = jax.jit(abft_calls.repair_column, static_argnames="acc")


@pytest.mark.parametrize("flag", [False, 0, jnp.int32(0)])
def test_repair_with_flag_off_leaves_c_bitwise_unchanged(flag):
    rng = np.random.default_rng(7)
    a, b, c = repair_case(rng, 33, 20, 9, jnp.float32)
    bad = c.at[4, 3].add(100.0)
    r = _repair(flag, 3, a, b, bad, acc=jnp.float32)
    np.testing.assert_array_equal(r.c, bad)


@pytest.mark.parametrize(
    ("m", "k", "n"), [(1, 1, 1), (7, 3, 5), slow(1031, 129, 4), slow(40, 2500, 3)]
)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_repair_recomputes_the_column(dtype, m, k, n):
    rng = np.random.default_rng(m + k + n)
    a, b, c = repair_case(rng, m, k, n, dtype)
    j = n // 2
    bad = c.at[m // 3, j].add(jnp.asarray(50.0, dtype)).at[m - 1, j].set(jnp.nan)
    acc = acc_of(dtype)
    r = _repair(jnp.bool_(True), jnp.int32(j), a, b, bad, acc=acc)
    assert_repaired(r, a, b, bad, j, acc)


def test_repair_takes_integer_flags_and_ignores_columns_out_of_range():
    rng = np.random.default_rng(8)
    a, b, c = repair_case(rng, 10, 6, 4, jnp.float32)
    bad = c.at[2, 1].add(9.0)
    fixed = _repair(7, 1, a, b, bad, acc=jnp.float32).c
    assert np.abs(np.asarray(fixed) - np.asarray(c)).max() < 1e-5
    for j in (-1, 4):
        np.testing.assert_array_equal(_repair(1, j, a, b, bad, acc=jnp.float32).c, bad)


def test_repair_leaves_c_unchanged_when_the_recomputation_is_not_finite():
    rng = np.random.default_rng(9)
    a, b, c = repair_case(rng, 12, 5, 3, jnp.float32)
    b = b.at[2, 1].set(jnp.inf)
    bad = c.at[0, 1].add(3.0)
    r = _repair(True, 1, a, b, bad, acc=jnp.float32)
    assert not np.isfinite(np.asarray(r.exact)).all()
    np.testing.assert_array_equal(r.c, bad)


def test_repair_under_vmap_repairs_only_the_flagged_entries():
    rng = np.random.default_rng(10)
    cases = [repair_case(rng, 16, 8, 5, jnp.float32) for _ in range(4)]
    a, b, c = (jnp.stack(x) for x in zip(*cases, strict=True))
    bad = c.at[:, 3, 2].add(11.0)
    flags = jnp.array([True, False, True, False])
    out = jax.jit(jax.vmap(lambda f, x, y, z: abft_calls.repair_column(f, 2, x, y, z, acc="f4").c))(
        flags, a, b, bad
    )
    for e in range(4):
        want = c[e] if flags[e] else bad[e]
        assert np.abs(np.asarray(out[e]) - np.asarray(want)).max() < 1e-5, e


def test_repair_writes_c_in_place():
    """With C produced inside the computation and used by nothing after the call, the alias
    makes the call C's only reader besides its producer's consumers: no copy of C."""
    a, b = jnp.ones((64, 32), jnp.float32), jnp.ones((32, 16), jnp.float32)

    def f(x, y, flag):
        c = lax_barrier(x @ y)
        return abft_calls.repair_column(flag, 3, x, y, c, acc=jnp.float32).c

    text = jax.jit(f).lower(a, b, True).compile().as_text()
    assert _hlo.reader_labels(text, shape="f32[64,16]") == ["custom-call:tsm2_repair_column"]
    assert " copy(" not in text


def lax_barrier(x):
    return jax.lax.optimization_barrier(x)


@pytest.mark.parametrize(
    ("args", "kw", "err", "match"),
    [
        ((jnp.ones(2, bool), 0), {}, ValueError, "scalars"),
        ((1.0, 0), {}, TypeError, "flag must be bool"),
        ((True, 0.0), {}, TypeError, "j must be an integer"),
        ((True, 0), {"a": jnp.ones((3, 2, 1))}, ValueError, "2-D"),
        ((True, 0), {"b": jnp.ones((3, 4))}, TypeError, r"a \(m, k\)"),
        ((True, 0), {"c": jnp.ones((3, 4), jnp.float64)}, TypeError, "one dtype"),
        ((True, 0), {"acc": jnp.float16}, TypeError, "acc must be"),
    ],
)
def test_repair_rejects_bad_calls_at_trace_time(args, kw, err, match):
    f32 = jnp.float32
    ops = {"a": jnp.ones((3, 2), f32), "b": jnp.ones((2, 4), f32), "c": jnp.ones((3, 4), f32)}
    ops["acc"] = f32
    ops.update(kw)
    with pytest.raises(err, match=match):
        abft_calls.repair_column(*args, ops["a"], ops["b"], ops["c"], acc=ops["acc"])


# ---------------------------------------------------------------------------------------------
# tsm2_abft_encode, tsm2_abft_verify(_inject)


_encode = jax.jit(abft_calls.encode, static_argnames="acc")


def model_for(dtype, m, k, acc):
    from jax_tsm2 import abft_model

    return jnp.asarray(abft_model.model_vector(dtype, m, k, None, acc, extended_sums=True), acc)


@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (7, 3, 5), (130, 67, 9), (1031, 5, 4)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_encode_matches_the_extended_reference(dtype, m, k, n):
    from _abft_reference import assert_stats_close

    rng = np.random.default_rng(m * k + n)
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    for acc in {acc_of(dtype), jnp.float64}:
        assert_stats_close(_encode(a, b, acc=acc), a, b)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_verify_residuals_and_thresholds(dtype):
    """The residuals of a product against the extended reference; the threshold as
    abft_model.column_threshold computes it from the same statistics; a fault moves the
    residual of its column by its weight times the fault."""
    from _abft_reference import pass_weights

    from jax_tsm2 import abft_model

    rng = np.random.default_rng(12)
    m, k, n = 70, 33, 6
    a, b, c = repair_case(rng, m, k, n, dtype)
    acc = acc_of(dtype)
    stats, model = _encode(a, b, acc=acc), model_for(dtype, m, k, acc)
    resid, t = jax.jit(abft_calls.verify)(c, stats, model)
    s = abft_model.checksum_scale(m)
    w = pass_weights(m).astype(np.longdouble)
    exact = (w @ as_f64(c).astype(np.longdouble) - (w @ as_f64(a).astype(np.longdouble))
             @ as_f64(b).astype(np.longdouble)) / s  # fmt: skip
    eps = float(jnp.finfo(acc).eps)
    abs1 = as_f64(stats[4]) / s
    assert (np.abs(as_f64(resid) - np.asarray(exact, np.float64)) <= 4 * eps * abs1).all()
    c64 = as_f64(c)
    narrow = dtype in (jnp.bfloat16, jnp.float16)
    f = as_f64(abft_model.half_ulp(jnp.asarray(c64), dtype)) if narrow else c64
    n2 = s * np.sqrt(np.square(f).sum(0))
    want = abft_model.column_threshold(
        np.asarray(model, np.float64), as_f64(stats[4]), as_f64(stats[5]), as_f64(stats[6]),
        s * np.abs(c64).sum(0), n2) / s  # fmt: skip
    np.testing.assert_allclose(as_f64(t), np.asarray(want), rtol=8 * eps)
    assert (np.abs(as_f64(resid)) < as_f64(t)).all()
    # A fault of 10 thresholds in (5, 2): column 2's residuals move by w_5 * fault.
    bad = c.at[5, 2].add(jnp.asarray(10 * float(t[2]), dtype))
    resid2, _ = jax.jit(abft_calls.verify)(bad, stats, model)
    fault = float(as_f64(bad)[5, 2] - c64[5, 2])
    moved = as_f64(resid2)[:, 2] - as_f64(resid)[:, 2]
    np.testing.assert_allclose(moved, pass_weights(m)[:, 5] / s * fault, rtol=1e-3)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_verify_inject_flips_the_bit_in_c_and_in_its_checksum(dtype):
    rng = np.random.default_rng(13)
    m, k, n = 40, 12, 7
    a, b, c = repair_case(rng, m, k, n, dtype)
    acc = acc_of(dtype)
    stats, model = _encode(a, b, acc=acc), model_for(dtype, m, k, acc)
    bits = 8 * jnp.dtype(dtype).itemsize
    for row, col, bit in ((0, 0, bits - 2), (m - 1, n - 1, 3), (17, 3, bits - 1)):
        run = jax.jit(lambda c, s, md, inj=(row, col, bit): abft_calls.verify(c, s, md, inject=inj))
        c_bad, resid, t = run(c, stats, model)
        want = np.asarray(c).copy()
        ints = want.view(f"u{want.dtype.itemsize}")
        ints[row, col] ^= np.asarray(1 << bit, ints.dtype)
        np.testing.assert_array_equal(as_f64(c_bad), as_f64(want))
        # The residuals are those of the faulty C.
        r_plain, t_plain = jax.jit(abft_calls.verify)(jnp.asarray(want), stats, model)
        np.testing.assert_array_equal(as_f64(resid), as_f64(r_plain))
        np.testing.assert_array_equal(as_f64(t), as_f64(t_plain))


@pytest.mark.parametrize(
    ("call", "err", "match"),
    [
        (lambda: abft_calls.encode(jnp.ones((3,)), jnp.ones((3, 2)), acc=jnp.float32),
         ValueError, "2-D"),
        (lambda: abft_calls.encode(jnp.ones((0, 3)), jnp.ones((3, 2)), acc=jnp.float32),
         ValueError, "no empty"),
        (lambda: abft_calls.encode(jnp.ones((2, 3)), jnp.ones((4, 2)), acc=jnp.float32),
         TypeError, r"a \(m, k\)"),
        (lambda: abft_calls.encode(jnp.ones((2, 3)), jnp.ones((3, 2)), acc=jnp.float16),
         TypeError, "acc f32/f64"),
        (lambda: abft_calls.verify(jnp.ones((2, 3)), jnp.ones((7, 2)), jnp.ones((12,))),
         ValueError, r"stats \(7, 3\)"),
    ],
)  # fmt: skip
def test_encode_and_verify_reject_bad_calls_at_trace_time(call, err, match):
    with pytest.raises(err, match=match):
        call()
