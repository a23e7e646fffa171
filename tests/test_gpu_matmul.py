"""GPU numerics: the CUDA TSM2 kernels against a float64 NumPy reference.

Skipped without a CUDA device and a CUDA build (conftest.py). Each shape runs
through the FFI target directly with each kernel id (so both kernels are
tested on every shape they accept, whatever routing would choose) and
through jax_tsm2.matmul in "auto" and "always" modes.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import (
    FLOAT_DTYPES,
    HALF_DTYPES,
    as_f64,
    assert_close_to_reference,
    ffi_matmul,
    has_custom_call,
    rand,
)
from hypothesis import given
from hypothesis import strategies as st

import jax_tsm2
from jax_tsm2 import routing

pytestmark = pytest.mark.gpu

TSM2R, TSM2L = routing.KERNEL_IDS["tsm2r"], routing.KERNEL_IDS["tsm2l"]
dtype_ids = lambda d: jnp.dtype(d).name

M_SIZES = (1, 2, 7, 63, 64, 65, 129, 255, 257, 1000, 4099)
K_SIZES = (1, 2, 3, 5, 7, 13, 15, 16, 17, 31, 63, 64, 65, 127, 129, 257, 1023, 4097)
N_SIZES = (1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 129)


def kernels_for(k: int, n: int) -> list[int]:
    """TSM2R is correct for any k and n; TSM2L is meant for a small B."""
    small_b = k <= routing.TSM2L_MAX_K and n <= routing.TSM2L_MAX_N
    return [TSM2R, TSM2L] if small_b else [TSM2R]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@given(
    m=st.sampled_from(M_SIZES),
    k=st.sampled_from(K_SIZES),
    n=st.sampled_from(N_SIZES),
    seed=st.integers(0, 2**16),
)
def test_kernels_on_odd_shapes(dtype, m, k, n, seed):
    rng = np.random.default_rng(seed)
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    for kernel in kernels_for(k, n):
        assert_close_to_reference(jax.jit(ffi_matmul, static_argnums=2)(a, b, kernel), a, b)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize("n_tile", [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64])
def test_every_tile_variant(dtype, n_tile):
    """Each n-tile the launcher can pick (ffi/matmul/tiles.h kNTiles), deterministically.

    n = n_tile fills the tile's columns, n_tile - 1 leaves one unused. R tiles: a long k
    (chunks split between blocks) and a short one. L tiles: k filling 1, 2, 4 and 8
    16-byte vectors per row (rows read 16 bytes at a time), and a k whose rows are not
    whole vectors (read element by element). m is just past a multiple of every tile.
    """
    itemsize = jnp.dtype(dtype).itemsize
    l_ks = [v * 16 // itemsize for v in (1, 2, 4, 8)] + [16 // itemsize * 2 - 1]
    cases = [(TSM2R, k) for k in (1000, 31)] + [(TSM2L, k) for k in l_ks if k <= 64]
    rng = np.random.default_rng(n_tile)
    for n in sorted({n_tile, max(1, n_tile - 1)}):
        for kernel, k in cases:
            a, b = rand(rng, (1025, k), dtype), rand(rng, (k, n), dtype)
            c = jax.jit(ffi_matmul, static_argnums=2)(a, b, kernel)
            assert_close_to_reference(c, a, b)


# bf16/f16 R tensor-core tiles on rows that are not whole 16-byte vectors: the MMAs read A's
# fragments in element pairs from the rows as staged (tsm2_mma.cuh MmaStage). An odd k puts
# consecutive rows at every even offset; a k past a chunk (128 elements) gives whole chunks
# and a last one that ends inside k; n from three to eight 8-column MMA tiles; batch entries
# that start mid-vector, with B shared or not.
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=dtype_ids)
@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ((300, 1001), (1001, 40)),
        ((257, 4099), (4099, 64)),
        ((129, 129), (129, 24)),
        ((1000, 20001), (20001, 17)),
        ((3, 130, 1001), (1001, 40)),
        ((3, 130, 1001), (3, 1001, 33)),
    ],
    ids=str,
)
def test_r_half_tensor_core_tile_on_rows_off_vectors(dtype, a_shape, b_shape):
    from jax_tsm2._ffi import _tsm2_ext

    k, n = b_shape[-2:]
    assert _tsm2_ext.tile_config(jnp.dtype(dtype).name, TSM2R, k, n)["mma"]
    rng = np.random.default_rng(sum(a_shape) + n)
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    assert_close_to_reference(jax.jit(ffi_matmul, static_argnums=2)(a, b, TSM2R), a, b)


# The tensor-core R tiles' last row tile at every fill: a tail of 128-row tiles ending inside
# each 16-row warp, alone and after whole tiles, so that its copy-out runs with part of a
# warp idle (the staging and the copy to C are shared by the tile's warps). Rows of whole
# vectors (the tensor-map ring on sm_90) and not (the cp.async ring); n = 5 stages C packed,
# n = 8 in whole vectors. Tails ending 17 to 31 rows past a warp boundary are the fills that
# need the tensor-map tile's consumer barriers unaligned (tsm2_mma_tma.cuh ConsumerSync).
@pytest.mark.parametrize(
    ("dtype", "ks", "ns"),
    [
        (jnp.bfloat16, (24, 23), (5, 8)),
        (jnp.float16, (24, 64, 23), (5, 8)),
        (jnp.float32, (24, 23), (12, 16)),
        (jnp.float64, (24,), (12,)),
    ],
    ids=lambda v: jnp.dtype(v).name if not isinstance(v, tuple) else str(v),
)
def test_r_tensor_core_tile_tail_rows(dtype, ks, ns):
    from jax_tsm2._ffi import _tsm2_ext

    rng = np.random.default_rng(len(ks) * 10 + ns[0])
    for k in ks:
        for n in ns:
            # f64 takes the tensor-core tile on sm_90 only (tile_config reports sm_80's).
            if dtype != jnp.float64:
                assert _tsm2_ext.tile_config(jnp.dtype(dtype).name, TSM2R, k, n)["mma"]
            for m in (18, 33, 50, 63, 85, 100, 127, 2 * 128 + 50, 3 * 128 + 127):
                a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
                c = jax.jit(ffi_matmul, static_argnums=2)(a, b, TSM2R)
                assert_close_to_reference(c, a, b)


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [
        (1, 36, 64),
        (65, 100, 56),
        (100, 2052, 64),
        (129, 64, 40),
        (1025, 4, 24),
        (300, 20000, 64),
        (257, 20000, 33),
        (4099, 1000, 16),
    ],
)
def test_r_f32_tensor_core_tile_keeps_f32_accuracy(m, k, n):
    """f32 TSM2R past n = 8: three TF32 products of split operands (warpgroup MMAs on sm_90a).

    k is a multiple of 4 (rows of whole 16-byte vectors: the tensor-map ring); m = 1, 65,
    100 and 129 leave a row tile's second warpgroup empty or part-filled. Besides the
    worst-case bound, the largest error must stay within 4x that of NumPy's float32
    product plus 2^-18 of the products' root sum of squares (the split's own error is up
    to 2^-20 of each term of A, in random directions). One plain TF32 product (2^-11 a
    term) or sums left to drift in the tensor cores' truncating accumulation over all of
    k would exceed it.
    """
    rng = np.random.default_rng(m * 7 + k * 3 + n)
    a, b = rand(rng, (m, k), jnp.float32), rand(rng, (k, n), jnp.float32)
    c = jax.jit(ffi_matmul, static_argnums=2)(a, b, TSM2R)
    assert_close_to_reference(c, a, b)
    a64, b64 = as_f64(a), as_f64(b)
    ref = a64 @ b64
    err = np.abs(as_f64(c) - ref).max()
    err32 = np.abs(np.asarray(a) @ np.asarray(b) - ref).max()
    slack = 2.0**-18 * np.sqrt(np.square(a64) @ np.square(b64)).max()
    assert err <= 4 * err32 + slack, (err, err32, slack)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize(("m", "k", "n"), [(1000, 257, 7), (4099, 13, 64), (65, 4097, 33)])
def test_half_inputs_write_f32(dtype, m, k, n):
    rng = np.random.default_rng(1)
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    for kernel in kernels_for(k, n):
        c = jax.jit(ffi_matmul, static_argnums=(2, 3))(a, b, kernel, jnp.float32)
        assert c.dtype == jnp.float32
        assert_close_to_reference(c, a, b)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ((3, 257, 129), (3, 129, 5)),  # batched both
        ((3, 257, 129), (129, 5)),  # b shared (stride 0)
        ((257, 13), (4, 13, 9)),  # a shared
        ((1, 65, 31), (5, 31, 64)),  # batch-1 a broadcast
        ((5, 1000, 17), (1, 17, 3)),  # batch-1 b broadcast
    ],
    ids=str,
)
def test_batched_with_broadcast(dtype, a_shape, b_shape):
    rng = np.random.default_rng(2)
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    k, n = a_shape[-1], b_shape[-1]
    for kernel in kernels_for(k, n):
        # NumPy's matmul broadcasts a batch of 1 (or a missing one) the same way.
        assert_close_to_reference(jax.jit(ffi_matmul, static_argnums=2)(a, b, kernel), a, b)


def test_autotune_times_the_candidates_inside_the_lowering():
    """With autotuning on, the first lowering of a shape times TSM2L, TSM2R and XLA's dot on
    this GPU (jitted products run while the user's program is being lowered), stores the
    winner, emits what it says, and the product is right; the next lowering reads the entry
    without timing again."""
    from jax_tsm2.tune import cache

    rng = np.random.default_rng(12)
    a, b = rand(rng, (300_007, 16), jnp.float32), rand(rng, (16, 16), jnp.float32)
    dev = jax_tsm2.model.current_device()
    with jax_tsm2.autotune():
        lowered = jax.jit(jax_tsm2.matmul).lower(a, b)
        c = lowered.compile()(a, b)
    (entry,) = json.loads(cache.cache_path(dev.key).read_text())["entries"].values()
    assert set(entry["seconds"]) == {"tsm2l", "tsm2r", "xla"}
    assert all(0 < t < 1e-2 for t in entry["seconds"].values()), entry
    assert has_custom_call(lowered.as_text()) == (entry["target"] != "xla")
    if entry["target"] == "xla":  # XLA's dot at default precision (TF32): same as jnp's
        np.testing.assert_array_equal(np.asarray(c), np.asarray(jax.jit(jnp.matmul)(a, b)))
    else:
        assert_close_to_reference(c, a, b)
    mtime = cache.cache_path(dev.key).stat().st_mtime_ns
    with jax_tsm2.autotune():
        again = jax.jit(lambda a, b: jax_tsm2.matmul(a, b) + 0).lower(a, b).as_text()
    assert cache.cache_path(dev.key).stat().st_mtime_ns == mtime
    assert has_custom_call(again) == (entry["target"] != "xla")


# "prefer" and "always" run the kernels for these shapes; "auto" sends them to
# XLA's dot (measured faster), whose f32 default precision is TF32.
@pytest.mark.parametrize("mode", ["prefer", "always"])
@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((20000, 1000), (1000, 8)), ((100_003, 16), (16, 16)), ((4, 4099, 257), (257, 33))],
    ids=str,
)
def test_matmul_api_on_gpu(mode, a_shape, b_shape):
    rng = np.random.default_rng(3)
    a, b = rand(rng, a_shape, jnp.float32), rand(rng, b_shape, jnp.float32)
    with jax_tsm2.custom_call_mode(mode):
        f = jax.jit(jax_tsm2.matmul)
        c = f(a, b)
        assert has_custom_call(f.lower(a, b).as_text())
    assert_close_to_reference(c, a, b)


@pytest.fixture
def prefer_kernels():
    with jax_tsm2.custom_call_mode("prefer"):
        yield


def test_grad_and_vmap_on_gpu(prefer_kernels):
    """The autodiff plumbing on CUDA (transposes, the sum over a shared b's batch)."""
    rng = np.random.default_rng(4)
    a, b = rand(rng, (4, 2000, 300), jnp.float32), rand(rng, (300, 8), jnp.float32)
    # HIGHEST: the cotangent ct @ b^T (n = 300) routes to XLA's dot, which on
    # an H100 would use TF32 at the default precision, as jnp.matmul does.
    loss = lambda x, y: jnp.sum(jnp.sin(jax_tsm2.matmul(x, y, precision="highest")))
    ga, gb = jax.jit(jax.grad(loss, (0, 1)))(a, b)
    # float64 references; the bound scales with |terms| summed (8 for ga,
    # 8000 for gb), far below what a wrong transpose or batch sum would give.
    a64, b64 = as_f64(a), as_f64(b)
    ct = np.cos(a64 @ b64)
    ga_ref, gb_ref = ct @ b64.T, np.einsum("bmk,bmn->kn", a64, ct)
    ga_scale = np.abs(ct) @ np.abs(b64).T
    gb_scale = np.einsum("bmk,bmn->kn", np.abs(a64), np.abs(ct))
    assert (np.abs(as_f64(ga) - ga_ref) <= 1e-4 * ga_scale).all()
    assert (np.abs(as_f64(gb) - gb_ref) <= 1e-4 * gb_scale).all()
    b3 = rand(rng, (3, 300, 8), jnp.float32)
    v = jax.jit(jax.vmap(jax_tsm2.matmul, in_axes=(None, 0)))(a[0], b3)
    assert v.shape == (3, 2000, 8)
    assert_close_to_reference(v, a[0], b3)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_special_values_on_gpu(dtype):
    rng = np.random.default_rng(5)
    a = np.array(rand(rng, (300, 60), jnp.float64))  # k <= 64: both kernels apply
    b = np.array(rand(rng, (60, 5), jnp.float64))
    a[1, 3], a[4, 10], b[20, 2] = np.nan, np.inf, -np.inf
    a_j, b_j = jnp.asarray(a, dtype), jnp.asarray(b, dtype)
    want = np.asarray(jnp.matmul(a_j, b_j), np.float64)
    for kernel in (TSM2R, TSM2L):
        got = np.asarray(jax.jit(ffi_matmul, static_argnums=2)(a_j, b_j, kernel), np.float64)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


@pytest.mark.parametrize(("m", "k", "n"), [(0, 5, 3), (7, 0, 3), (7, 5, 0)])
def test_empty_through_the_ffi_target(m, k, n):
    a, b = jnp.ones((m, k), jnp.float32), jnp.ones((k, n), jnp.float32)
    for kernel in (TSM2R, TSM2L):
        c = jax.jit(ffi_matmul, static_argnums=2)(a, b, kernel)
        assert c.shape == (m, n)
        np.testing.assert_array_equal(np.asarray(c), 0.0)


# ---------------------------------------------------------------------------
# more than 2^31 elements in one operand: 64-bit indexing


def _sampled_rows_match(a, b, c, rows):
    a_rows = as_f64(a[rows])
    ref = a_rows @ as_f64(b)
    scale = np.abs(a_rows) @ np.abs(as_f64(b))
    err = np.abs(as_f64(c[rows]) - ref)
    bound = 2 * (a.shape[1] * float(jnp.finfo(jnp.float32).eps) + 2.0**-23) * scale
    assert (err <= bound).all(), f"worst error {err.max():.3g} at rows {rows}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("m", "k", "kernel"),
    [
        (2**25 + 7, 64, TSM2L),  # 2^31 + 448 bf16 elements (4.3 GB)
        (2**25 + 7, 64, TSM2R),
        (2**20 + 3, 2048, TSM2R),  # 2^31 + 6144 elements
    ],
)
def test_more_than_2_pow_31_elements(m, k, kernel):
    assert m * k > 2**31
    key_a, key_b = jax.random.split(jax.random.key(0))
    make_a = jax.jit(
        lambda key: jax.random.uniform(key, (m, k), jnp.float32, 0.5, 1.5).astype(jnp.bfloat16)
    )
    a = make_a(key_a)
    b = jax.random.uniform(key_b, (k, 8), jnp.float32, -1.5, 1.5).astype(jnp.bfloat16)
    c = jax.jit(ffi_matmul, static_argnums=(2, 3))(a, b, kernel, jnp.float32)
    rng = np.random.default_rng(6)
    rows = np.unique(np.concatenate([[0, 1, m // 2, m - 2, m - 1], rng.integers(0, m, 64)]))
    _sampled_rows_match(a, b, c, jnp.asarray(rows))
    del a, c
