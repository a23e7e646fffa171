"""GPU numerics of the ABFT kernels (ffi/abft/kernels/colsums.cuh and repair_column.cuh).

Skipped without a CUDA device and a CUDA build (conftest.py). tsm2_colsums against a float64
reference for every dtype and accumulator, 1 to 4 weight rows with |.| masks, odd sizes (the
element-load path: rows not a whole number of 16-byte vectors), narrow and wide matrices (every
lanes-per-row width, one split and hundreds) and the 8192^2 benchmark shape; bitwise
reproducibility; a workspace too small for the plan. tsm2_repair_column: flag off leaves C
bitwise unchanged, flag on recomputes the column (k past a shared-memory chunk, m past the
persistent grid), a non-finite recomputation leaves C alone, no copy of C. Then
jax_tsm2.abft on the GPU, whose "auto" mode takes these kernels and tsm2_abft_judge's
(ffi/abft/kernels/judge.cuh): detection and correction, the XLA formulation's verdicts, no false
positives, reproducible verdicts. (tests/test_abft.py runs its own cases on the GPU
too, in "auto" mode.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _abft_reference import (
    acc_of,
    assert_colsums_close,
    assert_repaired,
    assert_verdicts_agree,
    edge_operands,
    judge_scenarios,
    masks,
    repair_case,
)
from _helpers import FLOAT_DTYPES, as_f64, rand

from jax_tsm2 import _ffi, _hlo, abft, abft_calls

pytestmark = pytest.mark.gpu
dtype_ids = lambda d: jnp.dtype(d).name

_colsums = jax.jit(abft_calls.colsums, static_argnames="abs_rows")
_repair = jax.jit(abft_calls.repair_column, static_argnames="acc")


@pytest.mark.parametrize("cols", (1, 3, 4, 8, 33, 129, 4097))
@pytest.mark.parametrize("rows", (1, 7, 1031, 20_011))
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
    ("rows", "cols"),
    [(8192, 8192), (1_000_000, 16), (100_003, 33), (3, 300_000), (65_537, 1)],
    ids=["8192x8192", "1e6x16", "100003x33", "3x300000", "65537x1"],
)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float64], ids=dtype_ids)
def test_colsums_large_and_narrow(dtype, rows, cols):
    rng = np.random.default_rng(rows + cols)
    m = rand(rng, (rows, cols), dtype)
    v = rand(rng, (3, rows), acc_of(dtype))
    assert_colsums_close(_colsums(m, v, abs_rows=0b100), m, v, 0b100)


@pytest.mark.parametrize(
    ("dtype", "acc"),
    [(jnp.float32, jnp.float64), (jnp.bfloat16, jnp.float64), (jnp.float16, jnp.float64),
     (jnp.float64, jnp.float32)],
    ids=["f32-f64", "bf16-f64", "f16-f64", "f64-f32"],
)  # fmt: skip
@pytest.mark.parametrize(("rows", "cols"), [(1031, 129), (4099, 4096)])
def test_colsums_accumulates_in_the_weights_dtype(dtype, acc, rows, cols):
    rng = np.random.default_rng(5)
    m = rand(rng, (rows, cols), dtype)
    for r in (2, 4):
        v = rand(rng, (r, rows), acc)
        out = _colsums(m, v, abs_rows=1)
        assert out.dtype == jnp.dtype(acc)
        assert_colsums_close(out, m, v, 1)


def test_colsums_no_rows_no_columns_and_non_finite():
    np.testing.assert_array_equal(
        _colsums(jnp.ones((0, 5), jnp.float32), jnp.ones((2, 0), jnp.float32)), np.zeros((2, 5))
    )
    assert _colsums(jnp.ones((4, 0), jnp.float32), jnp.ones((3, 4), jnp.float32)).shape == (3, 0)
    m = jnp.ones((5000, 8), jnp.float32).at[2, 1].set(jnp.nan).at[4999, 6].set(-jnp.inf)
    out = _colsums(m, jnp.ones((2, 5000), jnp.float32), abs_rows=0b10)
    assert np.isnan(out[0, 1]) and out[0, 6] == -np.inf and out[1, 6] == np.inf
    np.testing.assert_array_equal(out[:, [0, 2, 3, 4, 5, 7]], 5000.0)


@pytest.mark.parametrize(
    ("rows", "cols", "dtype"),
    [(8192, 8192, jnp.float32), (1_000_000, 16, jnp.float32), (20_011, 4097, jnp.bfloat16)],
    ids=["8192x8192-f32", "1e6x16-f32", "20011x4097-bf16"],
)
def test_colsums_bitwise_reproducible(rows, cols, dtype):
    rng = np.random.default_rng(3)
    m = rand(rng, (rows, cols), dtype)
    v = rand(rng, (3, rows), jnp.float32)
    first = np.asarray(_colsums(m, v, abs_rows=0b100))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(_colsums(m, v, abs_rows=0b100)), first)


def test_colsums_with_a_workspace_smaller_than_the_plan():
    """The handler plans fewer splits (one, with no workspace) rather than overrun it."""
    rng = np.random.default_rng(4)
    rows, cols = 50_021, 257
    m, v = rand(rng, (rows, cols), jnp.float32), rand(rng, (2, rows), jnp.float32)
    assert _ffi.colsums_plan(jnp.float32, jnp.float32, 2, rows, cols)["workspace_bytes"] > 0
    for workspace in (0, 2 * cols * 4 * 3):  # none, three splits' worth
        call = jax.ffi.ffi_call(
            _ffi.COLSUMS_TARGET,
            (jax.ShapeDtypeStruct((2, cols), jnp.float32),
             jax.ShapeDtypeStruct((workspace,), jnp.uint8)),
        )  # fmt: skip
        out = jax.jit(lambda x, w, call=call: call(x, w, abs_rows=np.int32(2))[0])(m, v)
        assert_colsums_close(out, m, v, 2)


# ---------------------------------------------------------------------------------------------
# tsm2_repair_column


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_repair_with_flag_off_leaves_c_bitwise_unchanged(dtype):
    rng = np.random.default_rng(7)
    a, b, c = repair_case(rng, 1031, 129, 9, dtype)
    bad = c.at[4, 3].add(jnp.asarray(100.0, dtype))
    for flag in (False, 0):
        r = _repair(flag, 3, a, b, bad, acc=acc_of(dtype))
        np.testing.assert_array_equal(as_f64(r.c), as_f64(bad))


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [(1, 1, 1), (7, 3, 5), (1031, 129, 4), (40, 5000, 3), (40_000, 16, 5), (33, 2049, 65)],
)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_repair_recomputes_the_column(dtype, m, k, n):
    rng = np.random.default_rng(m + k + n)
    a, b, c = repair_case(rng, m, k, n, dtype)
    j = n // 2
    bad = c.at[m // 3, j].add(jnp.asarray(50.0, dtype)).at[m - 1, j].set(jnp.nan)
    for acc in {acc_of(dtype), jnp.float64}:
        r = _repair(jnp.bool_(True), jnp.int32(j), a, b, bad, acc=acc)
        assert_repaired(r, a, b, bad, j, acc)


def test_repair_is_bitwise_reproducible_and_ignores_columns_out_of_range():
    rng = np.random.default_rng(8)
    a, b, c = repair_case(rng, 5000, 3000, 7, jnp.float32)
    bad = c.at[2, 1].add(9.0)
    first = _repair(1, 1, a, b, bad, acc=jnp.float32)
    for _ in range(3):
        again = _repair(1, 1, a, b, bad, acc=jnp.float32)
        for x, y in zip(first, again, strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for j in (-1, 7):
        np.testing.assert_array_equal(_repair(1, j, a, b, bad, acc=jnp.float32).c, bad)


def test_repair_leaves_c_unchanged_when_the_recomputation_is_not_finite():
    rng = np.random.default_rng(9)
    a, b, c = repair_case(rng, 70_000, 5, 3, jnp.float32)
    b = b.at[2, 1].set(jnp.inf)
    bad = c.at[0, 1].add(3.0)
    r = _repair(True, 1, a, b, bad, acc=jnp.float32)
    assert not np.isfinite(np.asarray(r.exact)).all()
    np.testing.assert_array_equal(r.c, bad)


def test_repair_writes_c_in_place():
    a, b = jnp.ones((4096, 512), jnp.float32), jnp.ones((512, 64), jnp.float32)

    def f(x, y, flag):
        c = jax.lax.optimization_barrier(x @ y)
        return abft_calls.repair_column(flag, 3, x, y, c, acc=jnp.float32).c

    text = jax.jit(f).lower(a, b, True).compile().as_text()
    assert _hlo.reader_labels(text, shape="f32[4096,64]") == ["custom-call:tsm2_repair_column"]


# ---------------------------------------------------------------------------------------------
# jax_tsm2.abft through the kernels


def test_auto_mode_runs_the_kernels_on_the_gpu():
    m = k = n = 1024
    a, b = jnp.ones((m, k), jnp.float32), jnp.ones((k, n), jnp.float32)
    text = jax.jit(abft.abft_matmul).lower(a, b).compile().as_text()
    ours = ["custom-call:tsm2_abft_encode", "custom-call:tsm2_abft_judge"]
    for which in ({"parameter": 0}, {"parameter": 1}):  # the product is cuBLAS's or XLA's
        labels = _hlo.reader_labels(text, **which)
        assert len(labels) == 3 and sorted(x for x in labels if x in ours) == ours, labels
    c_readers = ["custom-call:tsm2_abft_judge", "custom-call:tsm2_abft_verify"]
    assert sorted(_hlo.reader_labels(text, shape=f"f32[{m},{n}]")) == c_readers
    assert "conditional(" not in text  # no host round trip
    # Nothing but the passes, the product (XLA's may be a fusion) and the judge: no XLA
    # kernel between them.
    entry = text.split("ENTRY")[1]
    assert len([x for x in entry.splitlines() if " fusion(" in x]) <= 1, entry


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize(("m", "k", "n"), [(300, 257, 65), (2048, 1024, 16)])
def test_abft_detects_and_corrects_through_the_kernels(dtype, m, k, n):
    rng = np.random.default_rng(m + n)
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    cs = jax.jit(abft.encode)(a, b)
    clean = jax.jit(abft.abft_matmul)(a, b)[0]
    run = jax.jit(lambda c: abft.check(c, cs, a=a, b=b))
    fixed, v = run(clean)
    assert int(v.errors_detected) == 0 and not v.uncorrectable
    np.testing.assert_array_equal(as_f64(fixed), as_f64(clean))
    t = abft.verify(clean, cs).col_threshold
    for i, j in ((0, 0), (m - 1, n - 1), (m // 2, n // 3)):
        delta = 4.0 * float(t[j])  # always flagged (> 1.2x), in f16's range
        bad = abft.inject_error(clean, i, j, delta)
        fixed, v = run(bad)
        assert int(v.errors_detected) == 1 and v.corrected and not v.uncorrectable
        assert (int(v.row), int(v.col)) == (i, j)
        changed = np.any(as_f64(fixed) != as_f64(bad), axis=0)
        assert not changed[np.arange(n) != j].any()
        # The repaired column is the recomputation (full precision, unlike a TF32 product).
        want = as_f64(a) @ as_f64(b)[:, j]
        scale = np.abs(as_f64(a)) @ np.abs(as_f64(b)[:, j])
        eps = (k + 2) * float(jnp.finfo(jnp.float32).eps) + float(jnp.finfo(dtype).eps)
        assert (np.abs(as_f64(fixed[:, j]) - want) <= eps * scale).all()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize(("m", "k", "n"), [(1, 5, 3), (300, 257, 65), (5000, 64, 1100)])
def test_judge_kernels_give_the_xla_verdict(monkeypatch, dtype, m, k, n):
    """tsm2_abft_judge's kernels against the XLA formulation (the cond) on clean and faulty
    products; m = 5000 runs the recomputation over several blocks, n = 1100 the flag kernel
    over more columns than threads."""
    a, b, cs, products = judge_scenarios(np.random.default_rng(m + k), m, k, n, dtype)
    results = {}
    for mode in ("auto", "cond"):
        monkeypatch.setattr(abft, "_REPAIR", mode)
        run = jax.jit(lambda c: abft.check(c, cs, a=a, b=b))  # traced afresh per mode
        results[mode] = {name: run(c) for name, c in products.items()}
    for name in products:
        assert_verdicts_agree(results["auto"][name], results["cond"][name], cs.col.dtype)


def test_abft_no_false_positives_and_reproducible_verdicts():
    rng = np.random.default_rng(12)
    run = jax.jit(abft.abft_matmul)
    cases = [
        (jnp.float32, (4096, 4096, 64)),
        (jnp.bfloat16, (2048, 8192, 16)),
        (jnp.float64, (1000, 3000, 33)),
        (jnp.float16, (512, 512, 512)),
    ]
    for dtype, (m, k, n) in cases:
        a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
        c, v = run(a, b)
        assert int(v.errors_detected) == 0 and int(v.col) == -1, (dtype, m, k, n)
        c2, v2 = run(a, b)
        np.testing.assert_array_equal(as_f64(c), as_f64(c2))
        for x, y in zip(v, v2, strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("fused", [False, True], ids=["passes", "fused"])
@pytest.mark.parametrize("kind", ["underflow", "overflow", "mixed", "subnormal_a"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_abft_no_false_positives_at_the_edges_of_the_range(dtype, kind, fused):
    """Through the kernels (colsums, judge; or the fused row check, at a shape it takes):
    products whose terms underflow, whose column sums would overflow unscaled, of every
    scale, and an A of subnormal numbers times a large B (what a flush of subnormal inputs
    loses is proportional to B) are never flagged. The passes return XLA's product bitwise;
    the fused check its own, within the sums' rounding."""
    rng = np.random.default_rng(13)
    m, k, n = (1031, 129, 8) if fused else (1031, 77, 9)
    if kind == "subnormal_a":
        info = jnp.finfo(dtype)
        a = rng.uniform(0.1, 0.9, (m, k)) * float(info.tiny) * rng.choice([-1.0, 1.0], (m, k))
        b = rng.uniform(0.5, 1.5, (k, n)) * float(info.max) ** 0.75
        a, b = jnp.asarray(a, dtype), jnp.asarray(b, dtype)
    else:
        a, b = (x[0] for x in edge_operands(rng, 1, m, k, n, dtype, kind))
    c, v = jax.jit(lambda a, b: abft.abft_matmul(a, b, fused=fused))(a, b)
    assert int(v.errors_detected) == 0 and int(v.col) == -1, (kind, float(v.magnitude))
    if not fused:
        np.testing.assert_array_equal(as_f64(c), as_f64(jnp.matmul(a, b)))
    else:
        a64, b64 = as_f64(a), as_f64(b)
        eps = float(jnp.finfo(abft.checked_dtype(dtype)).eps)
        bound = (k + 2) * (eps * (np.abs(a64) @ np.abs(b64)) + float(jnp.finfo(dtype).tiny))
        bound += float(jnp.finfo(dtype).eps) * np.abs(a64 @ b64)  # C rounded to bf16/f16 last
        assert (np.abs(as_f64(c) - a64 @ b64) <= bound).all()


# ---------------------------------------------------------------------------------------------
# tsm2_abft_encode and tsm2_abft_verify(_inject): the checksum passes


_encode = jax.jit(abft_calls.encode, static_argnames="acc")
_verify = jax.jit(abft_calls.verify, static_argnames="inject")


def _model(dtype, m, k, acc):
    from jax_tsm2 import abft_model

    vec = abft_model.model_vector(dtype, m, k, None, acc, extended_sums=True)
    return jnp.asarray(vec, acc)


def _on_cpu(f, *args, **kw):
    """``f`` through the CPU reference targets, on copies of the operands on the CPU."""
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        return f(*(jax.device_put(x, cpu) for x in args), **kw)


# Shapes: one element; rows not a whole number of vectors (element loads); narrow (lanes < 32);
# a prime past a tile; many split rows; wide; B's rows of 32 lanes, split (its weights staged
# in shared memory); and the benchmark's.
PASS_SHAPES = [(1, 1, 1), (7, 3, 5), (1031, 129, 4), (20_011, 37, 16), (100_003, 8, 33),
               (33, 2049, 4097), (257, 3001, 640), (8192, 8192, 64)]  # fmt: skip


@pytest.mark.parametrize(("m", "k", "n"), PASS_SHAPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_encode_kernels_match_the_extended_reference(dtype, m, k, n):
    from _abft_reference import assert_stats_close

    if dtype == jnp.float64 and m * k > 10**7:
        pytest.skip("the long-double reference of an 8192^2 f64 operand takes minutes")
    rng = np.random.default_rng(m + k + n)
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    for acc in {acc_of(dtype), jnp.float64}:
        assert_stats_close(_encode(a, b, acc=acc), a, b)


# A's rows: element loads (k = 6), and rows of 32 lanes (k = 256), where a warp takes the
# subnormal branch only when one of its values is tiny; zeros are tiny too and add nothing.
@pytest.mark.parametrize(("m", "k"), [(2000, 6), (3001, 256)])
def test_encode_kernels_count_subnormal_inputs_in_the_flush_row(m, k):
    """The kernels read subnormal inputs as they are (a flush-to-zero product then loses
    them: the flush row bounds what it can lose)."""
    from _abft_reference import assert_stats_close

    rng = np.random.default_rng(11)
    a = np.array(rand(rng, (m, k), jnp.float32))  # a writable copy
    b = np.array(rand(rng, (k, 3), jnp.float32))
    a[3, 2], a[700, 0], b[4, 1] = 1e-40, -3e-39, 2e-41
    a[5, :], a[1500, 1] = 0.0, 0.0
    a, b = jnp.asarray(a), jnp.asarray(b)
    stats = _encode(a, b, acc=jnp.float64)
    assert (np.asarray(stats[6]) > 0).all()
    assert_stats_close(stats, a, b)


def _one_power_of_two_per_column(rng, rows, cols, dtype):
    """At most one nonzero per column, +-2^e with |e| <= 3 (every tenth column zero)."""
    x = np.zeros((rows, cols))
    at = rng.integers(0, rows, cols)
    val = rng.choice([-1.0, 1.0], cols) * np.exp2(rng.integers(-3, 4, cols))
    x[at, np.arange(cols)] = np.where(np.arange(cols) % 10 == 9, 0.0, val)
    return jnp.asarray(x, dtype)


# B's (k, n): one row and rows within one block's step (one split), rows split over blocks
# (k = 257, 1000, 20011); rows not a whole number of 16-byte vectors (element loads: n = 1,
# 3, 129), rows of fewer than 32 lanes (n = 64 but f64) and of 32 lanes (n = 640, 128; n = 64
# for f64), whose weights are staged in shared memory.
EXACT_SHAPES = [(k, n) for k in (1, 7, 257, 1000) for n in (1, 3, 64, 129, 640)] + [(20_011, 128)]


@pytest.mark.parametrize(("k", "n"), EXACT_SHAPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_encode_kernels_are_bitwise_the_reference_where_every_sum_is_exact(dtype, k, n):
    """With one +-2^e per column of A and of B, every sum of both passes is exact in any
    order: the kernels' outputs are bitwise the CPU reference's, so each row of B met
    its own row's weights (A's column values) whatever the plan."""
    rng = np.random.default_rng(k * 7 + n)
    m = 61
    a = _one_power_of_two_per_column(rng, m, k, dtype)
    b = _one_power_of_two_per_column(rng, k, n, dtype)
    for acc in {acc_of(dtype), jnp.float64}:
        got = np.asarray(_encode(a, b, acc=acc))
        want = np.asarray(_on_cpu(_encode, a, b, acc=acc))
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


@pytest.mark.parametrize(("m", "k", "n"), PASS_SHAPES[:-1])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_verify_kernels_give_the_reference_residuals_and_thresholds(dtype, m, k, n):
    rng = np.random.default_rng(m * 3 + n)
    a, b, c = repair_case(rng, m, k, n, dtype)
    acc = acc_of(dtype)
    stats, model = _encode(a, b, acc=acc), _model(dtype, m, k, acc)
    resid, t = _verify(c, stats, model)
    resid_ref, t_ref = _on_cpu(_verify, c, stats, model)
    eps = float(jnp.finfo(acc).eps)
    abs1 = as_f64(stats[4]) / abft.checksum_scale(m)
    assert (np.abs(as_f64(resid) - as_f64(resid_ref)) <= 4 * eps * abs1 + 1e-300).all()
    # The threshold reads sums of |C| and C^2 over the m rows, added in a tree on the GPU and
    # in a loop on the CPU: the orders differ by up to ~log2(m) roundings.
    rtol = 4 * eps * max(1.0, np.log2(m))
    np.testing.assert_allclose(as_f64(t), as_f64(t_ref), rtol=rtol)
    assert (np.abs(as_f64(resid)) <= as_f64(t)).all()


@pytest.mark.parametrize(
    ("m", "k", "n"), [(1031, 129, 4), (100_003, 8, 33), (257, 3001, 640), (8192, 8192, 64)]
)
def test_passes_are_bitwise_reproducible(m, k, n):
    rng = np.random.default_rng(3)
    a, b = rand(rng, (m, k), jnp.float32), rand(rng, (k, n), jnp.float32)
    stats = np.asarray(_encode(a, b, acc=jnp.float32))
    c = a @ b
    model = _model(jnp.float32, m, k, jnp.float32)
    first = [np.asarray(x) for x in _verify(c, stats, model)]
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(_encode(a, b, acc=jnp.float32)), stats)
        for x, y in zip(_verify(c, stats, model), first, strict=True):
            np.testing.assert_array_equal(np.asarray(x), y)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize(("m", "n"), [(40, 7), (5000, 129), (3, 4097)])
def test_verify_inject_plants_the_fault_inside_the_pass(dtype, m, n):
    """The inject variant flips the bit in C (memory) and sums the flipped value: its
    residuals are those of the faulty C."""
    rng = np.random.default_rng(13)
    k = 12
    a, b, c = repair_case(rng, m, k, n, dtype)
    acc = acc_of(dtype)
    stats, model = _encode(a, b, acc=acc), _model(dtype, m, k, acc)
    bits = 8 * jnp.dtype(dtype).itemsize
    for row, col, bit in ((0, 0, bits - 2), (m - 1, n - 1, 3), (m // 2, n // 3, bits - 1)):
        c_bad, resid, t = _verify(c, stats, model, inject=(row, col, bit))
        want = np.asarray(c).copy()
        ints = want.view(f"u{want.dtype.itemsize}")
        ints[row, col] ^= np.asarray(1 << bit, ints.dtype)
        np.testing.assert_array_equal(as_f64(c_bad), as_f64(want))
        r_plain, t_plain = _verify(jnp.asarray(want), stats, model)
        eps = float(jnp.finfo(acc).eps)
        scale = np.abs(as_f64(resid)) + as_f64(t)
        assert (np.abs(as_f64(resid) - as_f64(r_plain)) <= 4 * eps * scale).all()
        np.testing.assert_allclose(as_f64(t), as_f64(t_plain), rtol=16 * eps)


def test_production_verify_kernel_has_no_injection_code():
    """Zero cost when unused: tsm2_abft_verify launches AbftPassKernel<T, 2, false>, which is
    compiled without the injection (a separate instantiation, <T, 2, true>, does it): its
    disassembly never stores to C. (The pass over C stores nothing to global memory but its
    sums.)"""
    import pathlib
    import shutil
    import subprocess

    from jax_tsm2 import _tsm2_ext

    if shutil.which("cuobjdump") is None:
        pytest.skip("no cuobjdump")
    lib = pathlib.Path(_tsm2_ext.__file__)
    sass = subprocess.run(["cuobjdump", "-sass", str(lib)], capture_output=True, text=True).stdout
    bodies = sass.split("Function : ")
    mangled = "_ZN4tsm214AbftPassKernelIfLi2ELb{}EEEvNS_12AbftPassArgsE"
    plain = [b for b in bodies if b.startswith(mangled.format(0))]
    inject = [b for b in bodies if b.startswith(mangled.format(1))]
    assert plain and inject, [b[:80] for b in bodies if "AbftPass" in b[:80]]
    stores = lambda body: sum(1 for line in body.splitlines() if " STG" in line)
    # The injection's extra stores to global memory are absent from the production body.
    assert stores(plain[0]) < stores(inject[0]), (stores(plain[0]), stores(inject[0]))


# ---------------------------------------------------------------------------------------------
# detection bars on the GPU (tests/test_abft_detection.py's cases, through the kernels)


@pytest.mark.parametrize("name", ["f32", "f64", "bf16", "f16"])
def test_gpu_no_false_positive_over_thousands_of_clean_products(name):
    from test_abft_detection import DTYPES, false_positive_run

    total, flagged, first = false_positive_run(DTYPES[name], 2_000, seed=22)
    assert flagged == 0, f"{flagged} of {total} clean products flagged; first: {first}"


@pytest.mark.parametrize("kind", ["normal", "uniform_pos", "cauchy"])
@pytest.mark.parametrize("name", ["f32", "f64", "bf16", "f16"])
def test_gpu_single_errors_above_the_bar_are_detected_located_and_corrected(name, kind):
    from test_abft_detection import check_detection

    check_detection(name, kind, shapes=2)


@pytest.mark.parametrize("name", ["f32", "f64", "bf16", "f16"])
def test_gpu_a_bit_flipped_inside_the_pass_over_c_is_caught(name):
    from test_abft_detection import test_a_bit_flipped_inside_the_pass_over_c_is_caught as check

    check(name)


def test_gpu_tf32_products_detect_errors_above_their_own_rounding():
    """At XLA's default f32 precision the product's inputs are TF32: the threshold allows for
    that (2^-10 per operand), so a clean 2000 x 64 @ 64 x 8 product passes and an error of
    a third of the largest entry of its column is caught."""
    rng = np.random.default_rng(50)
    a = jnp.asarray(rng.standard_normal((2000, 64)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((64, 8)), jnp.float32)
    c, v = jax.jit(abft.abft_matmul)(a, b)
    assert int(v.errors_detected) == 0
    bad = c.at[1234, 5].add(jnp.abs(c[:, 5]).max() / 3)
    _, v = abft.check(bad, abft.encode(a, b), a=a, b=b)
    assert (int(v.row), int(v.col)) == (1234, 5) and bool(v.corrected), v


PASS_SWEEP = """
import sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, {tests!r})
from _abft_reference import acc_of, repair_case
from jax_tsm2 import abft_calls, abft_model

count = 0
rng = np.random.default_rng(0)
for dtype in (jnp.float32, jnp.float64, jnp.bfloat16, jnp.float16):
    acc = acc_of(dtype)
    for m, k, n in ((1, 1, 1), (7, 3, 5), (1031, 129, 4), (5000, 16, 33), (3, 40, 4097),
                    (40, 300, 640)):
        a, b, c = repair_case(rng, m, k, n, dtype)
        stats = jax.block_until_ready(abft_calls.encode(a, b, acc=acc))
        model = jnp.asarray(
            abft_model.model_vector(dtype, m, k, None, acc, extended_sums=True), acc)
        jax.block_until_ready(abft_calls.verify(c, stats, model))
        jax.block_until_ready(abft_calls.verify(c, stats, model, inject=(m - 1, n - 1, 2)))
        count += 3
print("sweep calls:", count)
"""


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck"])
def test_pass_kernels_sanitizers_report_no_errors(tmp_path, tool):
    """The pass kernels stage rows in shared memory (cp.async) and reuse it for the warps'
    reduction, and the pass over B stages its weights there for the whole warp (k = 300,
    n = 640: rows of 32 lanes, split): memcheck, racecheck and synccheck over odd shapes of
    every dtype."""
    import shutil

    from test_gpu_sanitizer import _assert_sanitizer_clean

    if shutil.which("compute-sanitizer") is None:
        pytest.skip("no compute-sanitizer")
    _assert_sanitizer_clean(tmp_path, PASS_SWEEP, tool, "AbftPass")
