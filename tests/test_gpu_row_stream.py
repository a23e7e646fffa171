"""GPU numerics of the row stream (``ffi/matmul/kernels/row_stream.cuh``): TSM2R on one
product of width n <= 16 (f32) or 8 (f64, bf16, f16), rows of A of 256 bytes or more.

Every width the launcher instantiates (B's rows of 1, 2, 4, 8, 16) with n filling it and
one short of it; rows that start at every offset within a 16-byte vector (k just off a
multiple of the vector: rows repeat their offset every 1, 2, 4 or 8 rows); m just past a
group of rows and a whole number of groups; k long enough to split over several ranges
(B's rows of a split fill a block's shared memory); layouts nn and nt; bf16/f16 writing
f32. Each result is checked against a float64 reference on random data. Skipped without a
CUDA device and a CUDA build (conftest.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import (
    FLOAT_DTYPES,
    HALF_DTYPES,
    assert_close_to_reference,
    ffi_product,
    rand,
    special_operands,
)

from jax_tsm2 import _ffi
from jax_tsm2._ffi import _tsm2_ext

pytestmark = pytest.mark.gpu
dtype_ids = lambda d: jnp.dtype(d).name

NN, NT = 0, 1
TSM2R = 0
_run = jax.jit(ffi_product, static_argnums=(2, 3, 4))


def _widths(dtype):
    widest = 16 if jnp.dtype(dtype).itemsize == 4 else 8
    return [w for w in (1, 2, 4, 8, 16) if w <= widest]


def _plan(dtype, m, k, n):
    """The row stream's plan for this GPU, asserting that it runs the shape."""
    name = jnp.dtype(dtype).name
    plan = _tsm2_ext.row_stream_plan(name, m, k, n, _ffi._sm_count(), _ffi.smem_optin())
    assert plan is not None, f"the row stream does not take {name} {m}x{k}x{n}"
    return plan


def _check(dtype, m, k, n, layout, seed, out_dtype=None):
    rng = np.random.default_rng(seed)
    a = rand(rng, (m, k), dtype)
    b = rand(rng, (n, k) if layout == NT else (k, n), dtype)
    c = _run(a, b, TSM2R, layout, out_dtype)
    if out_dtype is not None:
        assert c.dtype == out_dtype
    assert_close_to_reference(c, a, b.T if layout == NT else b)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize("layout", [NN, NT], ids=["nn", "nt"])
def test_every_width_and_row_offset(dtype, layout):
    vec = 16 // jnp.dtype(dtype).itemsize
    k0 = 512 // jnp.dtype(dtype).itemsize  # rows of 512 bytes
    for width in _widths(dtype):
        for n in sorted({width, max(1, width - 1)}):
            # Offsets repeating every 1, 2, 4, 8 rows (as many as the vector allows).
            for dk in sorted({0, vec // 2, vec // 4, 1} - {vec}):
                k = k0 + dk
                for m in (1, 1024 + 3):
                    plan = _plan(dtype, m, k, n)
                    assert plan["period"] == vec // np.gcd(vec, dk) if dk else plan["period"] == 1
                    _check(dtype, m, k, n, layout, seed=width * 1000 + dk * 10 + m)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize("n", [1, 5, 8])
def test_contraction_split_over_shared_memory(dtype, n):
    """k whose B rows do not fit one block's shared memory: several splits, summed in order."""
    k = 200_003 if n == 1 else 60_013
    m = 513
    plan = _plan(dtype, m, k, n)
    assert plan["splits"] > 1 and plan["splits"] * plan["k_chunk"] >= k
    _check(dtype, m, k, n, NN, seed=n)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_many_rows(dtype):
    """More row groups than the grid has warps, and rows past the last whole group."""
    m, k, n = 200_003, 260, 3
    _plan(dtype, m, k, n)
    _check(dtype, m, k, n, NN, seed=7)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize("layout", [NN, NT], ids=["nn", "nt"])
def test_half_inputs_write_f32(dtype, layout):
    _plan(dtype, 1001, 3001, 8)
    _check(dtype, 1001, 3001, 8, layout, seed=11, out_dtype=jnp.float32)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_special_values_stay_in_their_rows(dtype):
    """Signed zeros, NaN and Inf: IEEE results where known, and a NaN or Inf never reaches a
    neighbouring row through the bytes a covering vector shares with it."""
    m, k, n = 64, 1031, 5
    _plan(dtype, m, k, n)
    rng = np.random.default_rng(3)
    a64, b64 = special_operands(rng, m, k, n, dtype)
    a, b = jnp.asarray(a64, dtype), jnp.asarray(b64, dtype)
    c_out = _run(a, b, TSM2R, NN, None)
    c = np.asarray(c_out).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    assert np.array_equal(np.isnan(c), np.isnan(ref))
    assert np.array_equal(np.isinf(c), np.isinf(ref))
    # Rows of zeros: a sum of k > 1 products that are all zero is +0, as XLA's sums are.
    zeros = c[:4][np.isfinite(ref[:4])]
    assert zeros.size > 0 and (zeros == 0).all() and not np.signbit(zeros).any()
    # Elsewhere (the rows of A and columns of B without NaN or Inf), the float64 bound.
    rows = np.isfinite(a64).all(axis=1)
    cols = np.isfinite(b64).all(axis=0)
    assert rows.sum() > m // 2 and cols.sum() >= n - 1
    assert_close_to_reference(c_out[rows][:, cols], a[rows], b[:, cols])


def test_splits_are_bitwise_reproducible():
    rng = np.random.default_rng(9)
    a, b = rand(rng, (2049, 100_001), jnp.float32), rand(rng, (100_001, 7), jnp.float32)
    assert _plan(jnp.float32, 2049, 100_001, 7)["splits"] > 1
    c1 = np.asarray(_run(a, b, TSM2R, NN, None))
    c2 = np.asarray(_run(a, b, TSM2R, NN, None))
    assert np.array_equal(c1.view(np.uint32), c2.view(np.uint32))
