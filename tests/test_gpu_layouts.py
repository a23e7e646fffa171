"""GPU numerics of the layouts: NT through TSM2R/TSM2L, the small-left S kernel
and the TN (A^T @ B) kernel, against a float64 NumPy reference.

Each case calls the FFI target directly with an explicit kernel id and
layout, so every kernel is tested on the shapes it accepts whatever routing
would choose. Skipped without a CUDA device and a CUDA build (conftest.py).
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import FLOAT_DTYPES, HALF_DTYPES, assert_close_to_reference, ffi_product, rand

pytestmark = pytest.mark.gpu
dtype_ids = lambda d: jnp.dtype(d).name

NN, NT, TN = 0, 1, 2
TSM2R, TSM2L, TSM2S, TSM2T = 0, 1, 2, 3


_run = jax.jit(ffi_product, static_argnums=(2, 3, 4))


def check(c, a, b, layout):
    """Compares with the NumPy product of the logical operands op(a), op(b)."""
    sw = lambda x: jnp.swapaxes(x, -1, -2)
    a_l = sw(a) if layout == TN else a
    b_l = sw(b) if layout == NT else b
    assert_close_to_reference(c, a_l, b_l)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize(
    ("m", "k", "n", "kernel"),
    [
        (1025, 1000, 16, TSM2R),
        (257, 31, 7, TSM2R),
        (1025, 4097, 64, TSM2R),
        (4099, 16, 16, TSM2L),
        (1000, 13, 5, TSM2L),
        (1, 64, 64, TSM2L),
    ],
)
def test_nt_through_the_streaming_kernels(dtype, m, k, n, kernel):
    rng = np.random.default_rng(m + k + n)
    a, b = rand(rng, (m, k), dtype), rand(rng, (n, k), dtype)
    check(_run(a, b, kernel, NT), a, b, NT)


# TSM2L's row-per-thread kernels (ffi/matmul/kernels/row_per_thread.cuh) take rows
# of exactly 16 or 32 bytes, or of 2, 4 or 8 bytes (several rows to a lane's vector),
# and n <= 8: every such k per dtype, n on and off the whole-vector output path (n < 8
# on rows of one vector: a warp's rows are staged and written as one run, whose last
# vector is partial for odd n), m just past a block step (1024 rows of 16 bytes, 512
# of 32), inside a warp's rows (513; for packed rows, a last vector A ends inside) and
# past a whole grid stride (264 blocks on an H100), in nn and nt, with a batch whose B
# is shared (one run over batch * m rows).
def _row_ks(dtype):
    itemsize = jnp.dtype(dtype).itemsize
    return [16 // itemsize, 32 // itemsize, *_packed_ks(dtype)]


def _packed_ks(dtype):
    """The k of rows of 2, 4 or 8 bytes."""
    itemsize = jnp.dtype(dtype).itemsize
    return [rb // itemsize for rb in (2, 4, 8) if rb >= itemsize]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize("layout", [NN, NT], ids=["nn", "nt"])
@pytest.mark.parametrize("n", [1, 3, 4, 5, 7, 8])
def test_row_per_thread_kernel(dtype, layout, n):
    rng = np.random.default_rng(n + 10 * layout)
    for k in _row_ks(dtype):
        for m in (1, 513, 1025, 270_337):
            a = rand(rng, (m, k), dtype)
            b = rand(rng, (n, k) if layout == NT else (k, n), dtype)
            check(_run(a, b, TSM2L, layout), a, b, layout)


# Packed rows past a whole step of the packed kernel (a step deals 4 groups of a
# 16-byte vector per lane over the grid, at most 264 blocks of 256 lanes on an
# H100 or H200: 8 million rows of bf16 k = 1 span several steps), fewer rows than
# one group of that grid (300007: a grid of fewer blocks, and later groups past
# the end), m of every remainder modulo the rows of a vector, and a B with values
# where the rows' order shows (an off-by-one row would fail).
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_packed_rows_past_a_grid_stride(dtype, n):
    rng = np.random.default_rng(20 + n)
    for k in _packed_ks(dtype):
        for m in (2, 3, 5, 7, 300_007, 8_388_617):
            a = rand(rng, (m, k), dtype)
            b = rand(rng, (k, n), dtype)
            check(_run(a, b, TSM2L, NN), a, b, NN)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize(("a_batch", "b_batch"), [(3, None), (3, 1), (3, 3), (None, 3)], ids=str)
@pytest.mark.parametrize("n", [6, 8])
def test_row_per_thread_kernel_batched(dtype, a_batch, b_batch, n):
    """A batch with B shared runs as one pass over batch * m rows; the others fall back."""
    rng = np.random.default_rng(7 + n)
    for k in _row_ks(dtype):
        a_shape = (1031, k) if a_batch is None else (a_batch, 1031, k)
        b_shape = (k, n) if b_batch is None else (b_batch, k, n)
        a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
        check(_run(a, b, TSM2L, NN), a, b, NN)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize("n", [3, 8])
def test_row_per_thread_kernel_writes_f32(dtype, n):
    rng = np.random.default_rng(8 + n)
    for k in _row_ks(dtype):
        a, b = rand(rng, (4099, k), dtype), rand(rng, (k, n), dtype)
        c = _run(a, b, TSM2L, NN, jnp.float32)
        assert c.dtype == jnp.float32
        check(c, a, b, NN)


# S: every m the kernel instantiates (1, 2, 4, 8, 16) and the m between them;
# n past a column tile (128 f32 columns) and not a multiple of the vector;
# k past several splits and not a multiple of a step (32 rows).
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8, 13, 16])
@pytest.mark.parametrize(("k", "n"), [(4097, 129), (33, 1031), (1, 7), (8192, 256)])
def test_small_left_kernel(dtype, m, k, n):
    rng = np.random.default_rng(m * 7 + k + n)
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    check(_run(a, b, TSM2S, NN), a, b, NN)


# S rows that are not whole copies start at every alignment and are copied as the
# 16-byte vectors that hold them (small_left.cuh windows): n at each residue of an
# 8-element vector, batch entries that start unaligned (and a shared B), the last
# window running past the end of B, NaN and Inf in B's first columns (each window's
# columns past n hold the next row's first elements, whose sums must stay unstored),
# and the tensor-core tiles (m >= 8 in bf16/f16) gathering their fragments.
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize("m", [1, 3, 8, 16])
@pytest.mark.parametrize("n", [129, 130, 131, 133, 135, 1001, 2050])
def test_small_left_windows(dtype, m, n):
    k = 299  # not a multiple of 8: neither clusters nor tensor maps
    plan = _s_plan(dtype, 3, m, k, n)
    assert not plan["cluster"] and not plan["tma"], plan
    rng = np.random.default_rng(m * 13 + n)
    a, b = rand(rng, (3, m, k), dtype), rand(rng, (3, k, n), dtype)
    check(_run(a, b, TSM2S, NN), a, b, NN)
    check(_run(a[0], b, TSM2S, NN), a[0], b, NN)
    check(_run(a, b[1], TSM2S, NN), a, b[1], NN)
    b_special = b.at[:, :, 0].set(jnp.inf).at[:, 5, 1].set(jnp.nan)
    c = np.asarray(_run(a, b_special, TSM2S, NN), np.float64)
    ref = np.asarray(a, np.float64) @ np.asarray(b_special, np.float64)
    finite = np.isfinite(ref)
    assert np.array_equal(np.isnan(c), np.isnan(ref)), "NaN only where the product has one"
    assert np.array_equal(c[~finite & ~np.isnan(ref)], ref[~finite & ~np.isnan(ref)])


# T: tiles from 4 x 4 (16 row groups) to 8 x 8 blocks of 512 x 8 and 64 x 64,
# outputs past a tile (m or n > 256 or 4096 / tile), unaligned m and n
# (element-wise staging), a contraction of 1 and one spanning many splits.
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize(
    ("k", "m", "n"),
    [
        (100_003, 16, 16),
        (20_011, 64, 64),
        (20_011, 512, 8),
        (5_003, 13, 7),
        (5_003, 1, 1),
        (1, 16, 16),
        (3_001, 600, 9),
        (3_001, 16, 300),
        (777, 100, 100),
        # 8 x 8 thread blocks on a 16-wide edge (tiles 16 x 256, 128 x 16) and
        # 32 KiB stages with tails in both edges.
        (20_011, 16, 256),
        (9_001, 128, 16),
        (4_099, 24, 120),
        # Elongated results (routing takes up to 512 * 512 entries, any aspect): many
        # tiles along m, or along n, each reading all of the other operand.
        (9_001, 2_003, 33),
        (5_003, 4_099, 7),
        (2_001, 7, 4_097),
    ],
)
def test_tn_kernel(dtype, k, m, n):
    rng = np.random.default_rng(k + m + n)
    a, b = rand(rng, (k, m), dtype), rand(rng, (k, n), dtype)
    check(_run(a, b, TSM2T, TN), a, b, TN)


# T with flat stages (ffi/matmul/split_plan.h TUsesFlat): one output tile and
# rows of A or B that are not whole 16-byte vectors, so each stage copies its
# rows as one run per operand and the runs start anywhere in a vector. Widths
# of 1, 2, primes and one short of a vector; contractions of 1, below one stage,
# and over hundreds of splits; tiles with 1 to 256 threads per row group.
FLAT_SHAPES = [
    (1, 3, 5),
    (7, 1, 1),
    (1_000, 3, 2),
    (20_011, 6, 3),
    (100_003, 11, 3),
    (300_007, 2, 21),
    (5_003, 30, 5),
    (9_001, 113, 2),
    (4_099, 1, 33),
    (2_003, 7, 255),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize(("k", "m", "n"), FLAT_SHAPES, ids=str)
def test_tn_flat_stages(dtype, k, m, n):
    assert _plan(dtype, k, m, n)["flat"], "the shape should take flat stages"
    rng = np.random.default_rng(k + m + n)
    a, b = rand(rng, (k, m), dtype), rand(rng, (k, n), dtype)
    check(_run(a, b, TSM2T, TN), a, b, TN)
    if dtype in HALF_DTYPES:
        check(_run(a, b, TSM2T, TN, jnp.float32), a, b, TN)


@functools.cache
def _flat_blocks(dtype) -> dict:
    """The first (m, n) the flat plan gives each thread block, over widths up to 520."""
    widths = [*range(1, 100), *range(100, 520, 7)]
    first = {}
    for m, n in itertools.product(widths, widths):
        p = _plan(dtype, 3001, m, n)
        if p["flat"]:
            first.setdefault((p["edge_m"], p["edge_n"]), (m, n))
    return first


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize("edge_m", [1, 2, 4, 8])
@pytest.mark.parametrize("edge_n", [1, 2, 4, 8])
def test_tn_flat_stages_every_thread_block(dtype, edge_m, edge_n):
    """Every instantiation of the flat kernel the plan uses, on a shape planned with it."""
    found = _flat_blocks(dtype).get((edge_m, edge_n))
    if found is None:
        pytest.skip("the plan gives no such block in this dtype")
    m, n = found
    rng = np.random.default_rng(edge_m * 10 + edge_n)
    a, b = rand(rng, (3001, m), dtype), rand(rng, (3001, n), dtype)
    check(_run(a, b, TSM2T, TN), a, b, TN)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((3, 5000, 5), (3, 5000, 3)), ((5000, 5), (3, 5000, 3)), ((3, 5000, 5), (5000, 3))],
    ids=str,
)
def test_tn_flat_stages_batched(dtype, a_shape, b_shape):
    """Batch entries of 5000 rows start on 16-byte boundaries in every dtype."""
    assert _plan(dtype, 5000, 5, 3)["flat"]
    rng = np.random.default_rng(6)
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    check(_run(a, b, TSM2T, TN), a, b, TN)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64], ids=dtype_ids)
def test_tn_flat_stages_keep_specials_in_their_outputs(dtype):
    """A NaN and an Inf in the last column of their rows reach only their own output row
    and column: an element read from the next row, or a tile column past the matrix
    stored, would spread them."""
    k, m, n = 100_003, 7, 3
    assert _plan(dtype, k, m, n)["flat"]
    rng = np.random.default_rng(8)
    a = np.array(rand(rng, (k, m), dtype), np.float64)
    b = np.array(rand(rng, (k, n), dtype), np.float64)
    a[50_001, m - 1] = np.nan
    b[70_001, n - 1] = np.inf
    c = np.asarray(_run(jnp.asarray(a, dtype), jnp.asarray(b, dtype), TSM2T, TN), np.float64)
    want = a.T @ b
    np.testing.assert_array_equal(np.isnan(c), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(c), np.isinf(want))
    finite = np.isfinite(want)
    scale = (np.abs(a).T @ np.abs(b))[finite]
    err = np.abs(c[finite] - want[finite])
    assert (err <= 2 * k * np.finfo(dtype).eps * scale).all(), err.max()
    np.testing.assert_array_equal(
        np.asarray(_run(jnp.asarray(a, dtype), jnp.asarray(b, dtype), TSM2T, TN)).view(np.uint8),
        np.asarray(_run(jnp.asarray(a, dtype), jnp.asarray(b, dtype), TSM2T, TN)).view(np.uint8),
    )


@pytest.mark.parametrize(("kernel", "layout"), [(TSM2T, TN), (TSM2S, NN), (TSM2R, NT)])
def test_split_reductions_are_bitwise_reproducible(kernel, layout):
    """Partial sums are added in a fixed order: two runs give identical bits."""
    rng = np.random.default_rng(5)
    shapes = {TN: ((200_003, 16), (200_003, 16)), NN: ((8, 50_000), (50_000, 257))}
    shapes[NT] = ((4099, 20_000), (16, 20_000))
    a_shape, b_shape = shapes[layout]
    a, b = rand(rng, a_shape, jnp.float32), rand(rng, b_shape, jnp.float32)
    c1 = np.asarray(_run(a, b, kernel, layout))
    c2 = np.asarray(_run(a, b, kernel, layout))
    assert np.array_equal(c1.view(np.uint32), c2.view(np.uint32))


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize(
    ("kernel", "layout", "a_shape", "b_shape"),
    [
        (TSM2S, NN, (5, 3001), (3001, 301)),
        (TSM2T, TN, (9001, 33), (9001, 17)),
        (TSM2R, NT, (1000, 257), (7, 257)),
    ],
)
def test_half_inputs_write_f32(dtype, kernel, layout, a_shape, b_shape):
    rng = np.random.default_rng(3)
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    c = _run(a, b, kernel, layout, jnp.float32)
    assert c.dtype == jnp.float32
    check(c, a, b, layout)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64], ids=dtype_ids)
@pytest.mark.parametrize(
    ("kernel", "layout", "a_shape", "b_shape"),
    [
        (TSM2S, NN, (3, 4, 999), (3, 999, 130)),  # both batched
        (TSM2S, NN, (4, 999), (3, 999, 130)),  # a shared
        (TSM2T, TN, (3, 5001, 16), (3, 5001, 9)),
        (TSM2T, TN, (5001, 16), (3, 5001, 9)),  # a shared
        (TSM2T, TN, (3, 5001, 16), (5001, 9)),  # b shared
        (TSM2R, NT, (3, 257, 129), (3, 5, 129)),
        (TSM2L, NT, (3, 1000, 16), (16, 16)),
    ],
    ids=str,
)
def test_batched_layouts(dtype, kernel, layout, a_shape, b_shape):
    rng = np.random.default_rng(4)
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    check(_run(a, b, kernel, layout), a, b, layout)


# T on TF32 tensor cores (ffi/matmul/kernels/tn_tf32.cuh): f32 output tiles of 2048+
# entries with both edges >= 16. One shape per warp-to-tile map the launcher
# has (1 x 4, 2 x 2 and 1 x 2 MMA tiles per warp), with tails in both edges.
# Edges that are not multiples of 4 stage their rows as the vectors that cover
# them, each at its offset (tn.cuh LoadTCover): 13 and 31 put rows at all four.
TF32_TILES = [
    (20_011, 64, 64),  # 64 x 64 tile, 1 x 4
    (20_011, 16, 256),  # 16 x 256, 1 x 4
    (5_003, 200, 13),  # 256 x 16, 2 x 2
    (7_001, 30, 50),  # 32 x 64, 1 x 2
    (9_001, 100, 16),  # 128 x 16, 1 x 2
    (3_001, 16, 100),  # 16 x 128, 1 x 2
    (777, 100, 100),  # 32 x 128 tiles, four of them
    (300_007, 31, 62),  # 32 x 64, rows of 124 and 248 bytes over hundreds of splits
]


def _tf32_plan(k, m, n):
    from jax_tsm2._ffi import _tsm2_ext

    sms = jax.devices()[0].core_count
    return _tsm2_ext.split_plan("float32", TSM2T, 1, m, k, n, sms)


@pytest.mark.parametrize(("k", "m", "n"), TF32_TILES, ids=str)
def test_tn_tf32_tiles(k, m, n):
    assert _tf32_plan(k, m, n)["mma"], "the shape should take the TF32 tiles"
    rng = np.random.default_rng(k + m + n)
    a, b = rand(rng, (k, m), jnp.float32), rand(rng, (k, n), jnp.float32)
    check(_run(a, b, TSM2T, TN), a, b, TN)


# T on FP64 tensor cores (ffi/matmul/kernels/tn_mma.cuh): f64 output tiles of
# 2048+ entries with both edges >= 16, including the 16-wide ones (16 x 128,
# 16 x 256, 128 x 16, 256 x 16), with tails in both edges and a contraction
# over hundreds of splits.
F64_MMA_TILES = [
    (200_003, 16, 256),  # 16 x 256, 1 x 8 MMA tiles per warp
    (20_011, 16, 130),  # 16 x 256, a tail of 2 columns
    (20_011, 13, 100),  # 16 x 128, tails in both edges
    (9_001, 128, 16),  # 128 x 16, 2 x 2
    (3_001, 600, 9),  # 256 x 16, three tiles, tails
    (20_011, 64, 64),  # 64 x 64
    (100_003, 17, 33),  # 32 x 64, rows at both offsets over hundreds of splits
]


@pytest.mark.parametrize(("k", "m", "n"), F64_MMA_TILES, ids=str)
def test_tn_f64_mma_tiles(k, m, n):
    assert _plan(jnp.float64, k, m, n)["mma"], "the shape should take the FP64 MMA tiles"
    rng = np.random.default_rng(k + m + n)
    a, b = rand(rng, (k, m), jnp.float64), rand(rng, (k, n), jnp.float64)
    check(_run(a, b, TSM2T, TN), a, b, TN)
    np.testing.assert_array_equal(
        np.asarray(_run(a, b, TSM2T, TN)), np.asarray(_run(a, b, TSM2T, TN))
    )


def _assert_positive_sums_within_64_eps(dtype, k, m, n, seed, out=None):
    """A.T @ B of positive data (uniform in [0.5, 1), stored as ``dtype``): |A|^T |B| = A^T B,
    so rounding biases add up instead of cancelling; within 64 f32 eps of the float64
    product of the stored values."""
    ka, kb = jax.random.split(jax.random.key(seed))
    a = jax.random.uniform(ka, (k, m), jnp.float32, 0.5, 1.0).astype(dtype)
    b = jax.random.uniform(kb, (k, n), jnp.float32, 0.5, 1.0).astype(dtype)
    c = np.asarray(_run(a, b, TSM2T, TN, out), np.float64)
    ref = np.asarray(a, np.float64).T @ np.asarray(b, np.float64)
    rel = np.abs(c - ref) / ref
    assert rel.max() <= 64 * np.finfo(np.float32).eps, rel.max()


def _assert_bitwise_reproducible(a, b, out=None):
    c1 = np.asarray(_run(a, b, TSM2T, TN, out))
    c2 = np.asarray(_run(a, b, TSM2T, TN, out))
    assert np.array_equal(c1.view(np.uint32), c2.view(np.uint32))


@pytest.mark.parametrize(("k", "m", "n"), [(2_000_003, 64, 64), (20_011, 16, 256)], ids=str)
def test_tn_tf32_tiles_keep_f32_accuracy(k, m, n):
    """Positive data with full mantissas, so |A|^T |B| = A^T B and rounding biases add up:
    within 64 f32 eps of the float64 product. Plain TF32, a dropped cross term (~1e-4) or
    hi*hi chains of a whole split on the truncating tensor-core adder (~1e-5 at k = 2e6)
    would fail; the CUDA-core kernel's f32 sums pass."""
    assert _tf32_plan(k, m, n)["mma"]
    _assert_positive_sums_within_64_eps(jnp.float32, k, m, n, seed=k)


def test_tn_tf32_tiles_are_bitwise_reproducible():
    rng = np.random.default_rng(6)
    a, b = rand(rng, (200_003, 64), jnp.float32), rand(rng, (200_003, 64), jnp.float32)
    _assert_bitwise_reproducible(a, b)


def _tn_operands_with_specials(seed, dtype):
    """20011 x 64 operands of TN with Inf, -Inf, NaN and a zero against an Inf placed so that
    output row 3 is +-inf, row 5 gets inf - inf, row 40 is NaN, column 9 is +-inf and
    (3, 20) is 0 * inf; returned as NumPy arrays of `dtype`."""
    rng = np.random.default_rng(seed)
    k, m, n = 20_011, 64, 64
    a = np.array(rand(rng, (k, m), jnp.float32))
    b = np.array(rand(rng, (k, n), jnp.float32))
    a[17, 3] = np.inf  # output row 3: +-inf
    a[18, 5], a[19, 5] = np.inf, -np.inf  # row 5: inf - inf = NaN where b's signs agree
    a[12_000, 40] = np.nan  # row 40: NaN
    b[30, 9] = -np.inf  # column 9: +-inf (NaN against rows 5 and 40)
    b[17, 20] = 0.0  # 0 * inf = NaN at (3, 20)
    return a.astype(dtype), b.astype(dtype)


def _assert_special_patterns(c, want):
    np.testing.assert_array_equal(np.isnan(c), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(c), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(c), np.isneginf(want))
    assert np.isnan(c[3, 20]) and np.isinf(c[3, 0]) and np.isnan(c[40]).all()


def test_tn_tf32_tiles_keep_ieee_nan_and_inf():
    """Inf splits into hi = Inf, lo = NaN on the tensor cores: blocks that meet a NaN or an
    Inf recompute with f32 FMAs, so the patterns match the float64 product's."""
    a, b = _tn_operands_with_specials(9, np.float32)
    c = np.asarray(_run(jnp.asarray(a), jnp.asarray(b), TSM2T, TN), np.float64)
    want = a.astype(np.float64).T @ b.astype(np.float64)
    _assert_special_patterns(c, want)
    fin = np.isfinite(want)
    scale = np.abs(a.astype(np.float64)).T @ np.abs(b.astype(np.float64))
    bound = 2 * a.shape[0] * np.finfo(np.float32).eps * scale
    assert (np.abs(c - want)[fin] <= bound[fin]).all()


# T on bf16/f16 tensor cores (ffi/matmul/kernels/tn_half.cuh): output tiles of 1024+
# entries with edges >= 16 x 8. One shape per tile the launcher has, with
# tails in both edges where the tile allows; an edge that is not a multiple
# of 8 (13, 50, 100, ...) is not whole 16-byte vectors of a half type, so
# those shapes stage each row as the vectors that cover it, at its own offset,
# and gather their fragments element by element (tn.cuh LoadTCover).
HALF_TILES = [
    (5_003, 13, 50),  # 16 x 64
    (5_003, 16, 100),  # 16 x 128
    (5_003, 9, 200),  # 16 x 256
    (5_003, 30, 20),  # 32 x 32
    (5_003, 30, 50),  # 32 x 64
    (5_003, 20, 100),  # 32 x 128
    (5_003, 50, 13),  # 64 x 16
    (5_003, 50, 30),  # 64 x 32
    (20_011, 64, 64),  # 64 x 64, whole vectors
    (5_003, 100, 7),  # 128 x 8
    (5_003, 100, 16),  # 128 x 16
    (5_003, 100, 20),  # 128 x 32
    (5_003, 200, 6),  # 256 x 8
    (5_003, 200, 13),  # 256 x 16
    (20_011, 512, 8),  # 512 x 8, whole vectors
    (3_001, 600, 5),  # 512 x 8, two tiles
    # Rows of 22 and 290 bytes over hundreds of splits, and 166 bytes against
    # 484 with a contraction that is not a whole number of 16-row steps.
    (300_007, 11, 145),
    (7_001, 83, 242),
]


def _plan(dtype, k, m, n):
    from jax_tsm2._ffi import _tsm2_ext

    sms = jax.devices()[0].core_count
    return _tsm2_ext.split_plan(jnp.dtype(dtype).name, TSM2T, 1, m, k, n, sms)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize(("k", "m", "n"), HALF_TILES, ids=str)
def test_tn_half_tiles(dtype, k, m, n):
    plan = _plan(dtype, k, m, n)
    assert plan["mma"], "the shape should take the half tensor-core tiles"
    rng = np.random.default_rng(k + m + n)
    a, b = rand(rng, (k, m), dtype), rand(rng, (k, n), dtype)
    check(_run(a, b, TSM2T, TN), a, b, TN)
    check(_run(a, b, TSM2T, TN, jnp.float32), a, b, TN)


# Batch entries whose rows start anywhere in a vector (37 and 45 elements a
# row), and one operand shared by every entry, on the tensor-core tiles of every
# dtype: bf16/f16 gather their fragments at the rows' offsets, f32/f64 lanes read
# their rows there.
@pytest.mark.parametrize("dtype", [*HALF_DTYPES, jnp.float32, jnp.float64], ids=dtype_ids)
@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ((3, 2_003, 37), (3, 2_003, 45)),
        ((2_003, 37), (3, 2_003, 45)),
        ((3, 2_003, 37), (2_003, 45)),
    ],
    ids=str,
)
def test_tn_mma_tiles_batched_at_every_offset(dtype, a_shape, b_shape):
    assert _plan(dtype, 2_003, 37, 45)["mma"]
    rng = np.random.default_rng(sum(a_shape) + len(b_shape))
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    check(_run(a, b, TSM2T, TN), a, b, TN)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=dtype_ids)
def test_tn_half_tiles_sum_in_f32(dtype):
    """Positive data: |A|^T |B| = A^T B, so rounding biases add up. Half products are exact
    in f32, so the f32 output must be within 64 f32 eps of the float64 product of the
    stored values. Whole-split chains on the truncating tensor-core adder (~1e-5 at
    k = 2e6) or a half-precision accumulator would fail."""
    k, m, n = 2_000_003, 64, 64
    assert _plan(dtype, k, m, n)["mma"]
    _assert_positive_sums_within_64_eps(dtype, k, m, n, seed=11, out=jnp.float32)


def test_tn_half_tiles_are_bitwise_reproducible():
    rng = np.random.default_rng(12)
    a, b = rand(rng, (200_003, 512), jnp.bfloat16), rand(rng, (200_003, 8), jnp.bfloat16)
    _assert_bitwise_reproducible(a, b, jnp.float32)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=dtype_ids)
def test_tn_half_tiles_keep_ieee_nan_and_inf(dtype):
    """The half MMAs take Inf and NaN as they come (no operand splitting): the patterns
    must match the float64 product's."""
    a, b = _tn_operands_with_specials(13, dtype)
    c = np.asarray(_run(jnp.asarray(a), jnp.asarray(b), TSM2T, TN, jnp.float32), np.float64)
    _assert_special_patterns(c, a.astype(np.float64).T @ b.astype(np.float64))


# S over clusters: 64-column tiles whose cluster of 2 blocks splits the
# contraction (small_left_cluster.cuh, n and k multiples of 8, the clusters in
# one wave; bf16/f16 on tensor cores, f32 on CUDA cores with every power-of-two
# row count of A), and bf16/f16 128-column tensor-core tiles (small_left_mma.cuh,
# m >= 8 otherwise). The plan is asserted, so each case exercises the variant
# it names.
def _s_plan(dtype, batch, m, k, n):
    from jax_tsm2._ffi import _tsm2_ext

    sms = jax.devices()[0].core_count
    return _tsm2_ext.split_plan(jnp.dtype(dtype).name, TSM2S, batch, m, k, n, sms)


S_CLUSTER_SHAPES = [
    (4096, 4032),  # 63 tiles of 2 blocks (64 take bf16/f16 to the tensor maps), no splits
    (4104, 8),  # one tile, split across clusters
    (8000, 1000),  # the last tile part-filled (1000 = 15 x 64 + 40)
    (8, 264),  # one stage: the second block has no rows; 8 columns in the last tile
    (50_000, 256),  # many stages per block, split across clusters
    (1000, 4000),  # k not a multiple of a stage (a rank's 500 rows = 3 x 128 + 116), 63 tiles
    (12_000, 3584),  # 47 stages per rank, each with its own columns of A
]
# k or n not a multiple of 8 (no clusters, no tensor maps): 16-byte rows of B
# with k % 8 == 4; odd n, element copies.
S_MMA_TILE_SHAPES = [(1020, 10_000), (1001, 9001)]


@pytest.mark.parametrize("dtype", [*HALF_DTYPES, jnp.float32], ids=dtype_ids)
@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 13, 16])
@pytest.mark.parametrize(("k", "n"), S_CLUSTER_SHAPES, ids=str)
def test_small_left_clusters(dtype, m, k, n):
    plan = _s_plan(dtype, 1, m, k, n)
    assert plan["cluster"], "the shape should take the cluster kernel"
    assert plan["mma"] == (dtype != jnp.float32), plan  # f32 stays off TF32
    rng = np.random.default_rng(m * 31 + k + n)
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    check(_run(a, b, TSM2S, NN), a, b, NN)
    if dtype != jnp.float32:
        check(_run(a, b, TSM2S, NN, jnp.float32), a, b, NN)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize("m", [8, 13, 16])
@pytest.mark.parametrize(("k", "n"), S_MMA_TILE_SHAPES, ids=str)
def test_small_left_mma_tiles(dtype, m, k, n):
    plan = _s_plan(dtype, 1, m, k, n)
    assert plan["mma"] and not plan["cluster"] and not plan["tma"], plan
    rng = np.random.default_rng(m * 37 + k + n)
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    check(_run(a, b, TSM2S, NN), a, b, NN)


# S by tensor-map copies (small_left_tma.cuh): bf16/f16 with n and k multiples
# of 8 and at least 64 column tiles, one block each: 64 columns where the
# clusters' one wave would fit, 128 beyond.
# The boxes' zero fill is the only edge handling, so the shapes put k and n
# off the stage (64 rows) and tile (128 columns) edges.
S_TMA_SHAPES = [
    (4096, 4096),  # 64 tiles of 64 columns (where the clusters' wave fits), 32 stages
    (1000, 4104),  # 64 columns: k = 7 stages of 128 + 104 rows; n = 64 tiles + 8 columns
    (1000, 8712),  # 128 columns: k = 15 stages + 40 rows; n = 68 tiles + 8 columns
    (24, 8456),  # one stage, mostly zeros; n = 66 tiles + 8
    (4096, 16_384),  # whole stages and tiles, 128 tiles
    (8192, 14_336),  # the S suite's 235 MB case, 112 tiles, 128 stages (more than the ring's 8)
]


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize("m", [1, 3, 8, 13, 16])
@pytest.mark.parametrize(("k", "n"), S_TMA_SHAPES, ids=str)
def test_small_left_tensor_maps(dtype, m, k, n):
    plan = _s_plan(dtype, 1, m, k, n)
    assert plan["tma"] and not plan["cluster"] and plan["splits"] == 1, plan
    # the next launch starts early only where it fits beside this one
    assert plan["early_dependents"] == (2 * plan["blocks"] <= jax.devices()[0].core_count), plan
    rng = np.random.default_rng(m * 41 + k + n)
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    check(_run(a, b, TSM2S, NN), a, b, NN)
    if m in (1, 16):
        check(_run(a, b, TSM2S, NN, jnp.float32), a, b, NN)


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    # both batched (3-D maps), 128 and 64 columns; A shared (a map of one batch entry)
    [((8, 5, 1000), (8, 1000, 2056)), ((9, 2048), (4, 2048, 1032))],
    ids=str,
)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=dtype_ids)
def test_small_left_tensor_maps_batched(a_shape, b_shape, dtype):
    assert _s_plan(dtype, b_shape[0], a_shape[-2], a_shape[-1], b_shape[-1])["tma"]
    rng = np.random.default_rng(9)
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    check(_run(a, b, TSM2S, NN), a, b, NN)


def test_small_left_tensor_maps_are_bitwise_reproducible():
    rng = np.random.default_rng(15)
    a, b = rand(rng, (13, 4096), jnp.bfloat16), rand(rng, (4096, 16_384), jnp.bfloat16)
    c1 = np.asarray(_run(a, b, TSM2S, NN, jnp.float32))
    c2 = np.asarray(_run(a, b, TSM2S, NN, jnp.float32))
    assert np.array_equal(c1.view(np.uint32), c2.view(np.uint32))


def test_small_left_tensor_maps_chained_products_wait_for_each_other():
    """Each product's A is the previous product's C, back to back in one jit. With
    early_dependents the next product's blocks start before this one ends; they must wait
    for all of its output (griddepcontrol.wait) or they read a half-written A."""
    k = n = 4096
    assert _s_plan(jnp.bfloat16, 1, 16, k, n)["early_dependents"]
    rng = np.random.default_rng(27)
    x = rand(rng, (16, k), jnp.bfloat16)
    # scaled by 1 / 64 (exact) so that every product's entries stay near 1
    bs = [rand(rng, (k, n), jnp.bfloat16) / 64 for _ in range(6)]

    @jax.jit
    def chain(x, bs):
        outs = []
        for b in bs:
            x = ffi_product(x, b, TSM2S, NN)
            outs.append(x)
        return outs

    prev = x
    for b, y in zip(bs, chain(x, bs), strict=True):
        check(y, prev, b, NN)
        prev = y


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((3, 5, 4096), (3, 4096, 520)), ((9, 2048), (3, 2048, 1032))],  # both batched; a shared
    ids=str,
)
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32], ids=dtype_ids)
def test_small_left_clusters_batched(a_shape, b_shape, dtype):
    assert _s_plan(dtype, b_shape[0], a_shape[-2], a_shape[-1], b_shape[-1])["cluster"]
    rng = np.random.default_rng(8)
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    check(_run(a, b, TSM2S, NN), a, b, NN)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize(("m", "k", "n"), [(16, 2_000_000, 8), (3, 200_000, 4096)], ids=str)
def test_small_left_tensor_cores_sum_in_f32(dtype, m, k, n):
    """Positive data, so rounding biases add up: the f32 output is within 64 f32 eps of the
    float64 product of the stored values (a chain of a whole warp's rows on the truncating
    tensor-core adder, or a half accumulator, would fail)."""
    plan = _s_plan(dtype, 1, m, k, n)
    assert plan["cluster"] or plan["tma"], plan  # the tensor maps at 3 x 200000 x 4096
    ka, kb = jax.random.split(jax.random.key(k + n))
    a = jax.random.uniform(ka, (m, k), jnp.float32, 0.5, 1.0).astype(dtype)
    b = jax.random.uniform(kb, (k, n), jnp.float32, 0.5, 1.0).astype(dtype)
    c = np.asarray(_run(a, b, TSM2S, NN, jnp.float32), np.float64)
    ref = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    rel = np.abs(c - ref) / ref
    assert rel.max() <= 64 * np.finfo(np.float32).eps, rel.max()


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32], ids=dtype_ids)
def test_small_left_clusters_are_bitwise_reproducible(dtype):
    rng = np.random.default_rng(14)
    a, b = rand(rng, (8, 50_000), dtype), rand(rng, (50_000, 256), dtype)
    assert _s_plan(dtype, 1, 8, 50_000, 256)["splits"] > 1
    c1 = np.asarray(_run(a, b, TSM2S, NN, jnp.float32))
    c2 = np.asarray(_run(a, b, TSM2S, NN, jnp.float32))
    assert np.array_equal(c1.view(np.uint32), c2.view(np.uint32))
