"""GPU: signed zeros, NaN and Inf through every CUDA kernel of tsm2_matmul, as jnp gives them.

Skipped without a CUDA device and a CUDA build (conftest.py). Each case calls the FFI
target with an explicit kernel id and layout on a shape whose plan takes the variant it
names (asserted where the plan says it), with operands holding rows of signed zeros, +Inf,
-Inf and NaN (``_helpers.special_operands``), and compares with jnp's rule
(``_helpers.assert_specials_as_jnp``: a product of contraction length 1 keeps its sign,
any other zero sum is +0) and bit for bit with ``jnp.matmul`` on the same GPU. That covers
the accumulators' start, the ends of the contraction (zero-filled tiles), the bytes of
neighbouring rows that the streaming tiles copy with a row (never a term), the k-groups
and row groups, the split sums, and k = 1 kept off the tensor cores.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import (
    FLOAT_DTYPES,
    HALF_DTYPES,
    assert_specials_as_jnp,
    ffi_product,
    special_operands,
)

import jax_tsm2
from jax_tsm2 import routing

pytestmark = pytest.mark.gpu
dtype_ids = lambda d: jnp.dtype(d).name

NN, NT, TN = 0, 1, 2
R, L, S, T = (routing.KERNEL_IDS[k] for k in ("tsm2r", "tsm2l", "tsm2s", "tsm2t"))
_run = jax.jit(ffi_product, static_argnums=(2, 3, 4))


def split_plan(dtype, kernel, m, k, n):
    from jax_tsm2._ffi import _tsm2_ext

    sms = jax.devices()[0].core_count
    return _tsm2_ext.split_plan(jnp.dtype(dtype).name, kernel, 1, m, k, n, sms)


def bits(x):
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}")


def run_case(dtype, kernel, layout, m, k, n, seed=0):
    rng = np.random.default_rng(seed + m + k + n)
    a, b = special_operands(rng, m, k, n, dtype)
    x = a.T if layout == TN else a
    y = b.T if layout == NT else b
    got = _run(jnp.asarray(x, dtype), jnp.asarray(y, dtype), kernel, layout, None)
    assert_specials_as_jnp(got, a, b)
    want = np.asarray(jnp.matmul(jnp.asarray(a, dtype), jnp.asarray(b, dtype)))
    nan = np.isnan(want.astype(np.float64))
    zero = want.astype(np.float64) == 0
    np.testing.assert_array_equal(np.isnan(np.asarray(got, np.float64)), nan)
    np.testing.assert_array_equal(bits(got)[zero], bits(want)[zero], "zeros differ from jnp's")


# (kernel, layout, m, k, n): R and L tiles (k past a chunk, k inside one, k = 1, k not
# a whole 16-byte vector, so rows start anywhere in a vector), L's row-per-thread kernel
# (rows of 16 bytes), S and T on their CUDA-core kernels with one split and with many.
STREAMING = [
    (R, NN, 1025, 1, 9),
    (R, NN, 1025, 1000, 9),
    (R, NT, 1025, 37, 16),
    (L, NN, 1025, 1, 8),
    (L, NN, 1025, 13, 8),
    (L, NT, 1025, 64, 33),
    (L, NN, 4099, 4, 4),  # f32 rows of 16 bytes: the row-per-thread kernel
    (L, NN, 4099, 8, 5),  # bf16/f16 rows of 16 bytes
    (R, NN, 1025, 1001, 51),  # rows that start mid-vector, a chunk that ends inside k
    (R, NT, 515, 4099, 41),
    (R, NT, 515, 4096, 41),  # rows of whole vectors: sm_90's tensor-map ring, split tiles
    (L, NN, 1025, 37, 5),  # a tile's span copied as covering vectors
    (L, NT, 1025, 10, 42),
]
SPLIT_CUDA_CORES = [
    (S, NN, 8, 1, 200),
    (S, NN, 13, 20_011, 129),  # many splits, added by the split sum
    (T, TN, 7, 1, 9),
    (T, TN, 9, 200_003, 5),  # many splits
    (T, TN, 12, 1001, 7),  # a contraction that ends inside a stage
]


@pytest.mark.parametrize(("kernel", "layout", "m", "k", "n"), STREAMING, ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_streaming_kernels(dtype, kernel, layout, m, k, n):
    run_case(dtype, kernel, layout, m, k, n)


@pytest.mark.parametrize(("kernel", "layout", "m", "k", "n"), SPLIT_CUDA_CORES, ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_split_kernels_on_cuda_cores(dtype, kernel, layout, m, k, n):
    plan = split_plan(dtype, kernel, m, k, n)
    if plan["mma"] or plan["cluster"] or plan["tma"]:
        pytest.skip(f"{jnp.dtype(dtype).name} {m}x{k}x{n} takes a tensor-core variant: {plan}")
    run_case(dtype, kernel, layout, m, k, n)


# T on tensor cores (tn_mma.cuh f64, tn_tf32.cuh f32, tn_half.cuh bf16/f16): output tiles
# with edges >= 16; a contraction inside one stage, and one over many splits that ends
# inside a stage (k = 1 takes the CUDA-core kernel: an MMA would lose a -0 product's sign).
# S on tensor cores (small_left_mma.cuh) and over clusters (small_left_cluster.cuh, f32 on
# CUDA cores).
@pytest.mark.parametrize("k", [1, 37, 20_011])
@pytest.mark.parametrize(("m", "n"), [(64, 64), (200, 16), (16, 200)], ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_tn_tensor_core_tiles(dtype, m, n, k):
    plan = split_plan(dtype, T, m, k, n)
    if k == 1:
        assert not plan["mma"], plan
    elif not plan["mma"]:
        pytest.skip(f"{jnp.dtype(dtype).name} {m}x{k}x{n} stays on the CUDA cores: {plan}")
    run_case(dtype, T, TN, m, k, n)


@pytest.mark.parametrize(
    ("variant", "m", "k", "n"),
    [
        ("mma", 8, 1020, 10_000),
        ("cluster", 8, 1000, 4000),
        ("cluster", 13, 4104, 8),
    ],
    ids=str,
)
@pytest.mark.parametrize("dtype", [*HALF_DTYPES, jnp.float32], ids=dtype_ids)
def test_small_left_variants(dtype, variant, m, k, n):
    plan = split_plan(dtype, S, m, k, n)
    if not plan[variant]:
        pytest.skip(f"{jnp.dtype(dtype).name} {m}x{k}x{n} does not take {variant}: {plan}")
    run_case(dtype, S, NN, m, k, n)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=dtype_ids)
def test_small_left_single_products_stay_off_the_tensor_cores(dtype):
    m, k, n = 13, 1, 9001
    assert not split_plan(dtype, S, m, k, n)["mma"]
    run_case(dtype, S, NN, m, k, n)


# S by tensor maps (small_left_tma.cuh, bf16/f16): the boxes' zero fill past the end of
# the contraction, as well as a contraction ending inside a stage.
TMA_SHAPES = [(8, 1000, 4104), (16, 24, 8456), (3, 4096, 4096)]


@pytest.mark.parametrize(("m", "k", "n"), TMA_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=dtype_ids)
def test_small_left_tensor_maps(dtype, m, k, n):
    assert split_plan(dtype, S, m, k, n)["tma"]
    run_case(dtype, S, NN, m, k, n)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize("mode", ["always", "prefer"])
def test_the_router_s_choices_keep_signed_zeros(dtype, mode):
    """Through jax_tsm2.matmul: an outer product (k = 1) keeps the sign of each product,
    whatever kernel (or XLA's multiply) the mode picks."""
    vals = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 3.0])
    a = jnp.asarray(np.tile(vals, 128)[:, None], dtype)  # (1024, 1)
    b = jnp.asarray(vals[None, ::-1], dtype)
    with jax_tsm2.custom_call_mode(mode):
        got = jax.jit(jax_tsm2.matmul)(a, b)
    assert_specials_as_jnp(got, np.asarray(a, np.float64), np.asarray(b, np.float64))
