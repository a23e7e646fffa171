"""The fused row check on the GPU (tsm2_abft_rows: ffi/abft/launch_rows.cu, the row stream with
row statistics and ffi/abft/kernels/row_check.cuh).

Skipped without a CUDA device and a CUDA build (conftest.py). Every width the check
instantiates (n of 1, 2, 4, 8 and 16 columns), odd and prime sizes, k past one split of B in
shared memory, every dtype and every kind of clean data of tests/_abft_reference.py: C against
a float64 reference and no row flagged. Bits flipped in C inside the check's kernel: detected,
located and repaired. abft_matmul(..., fused=True) takes the fused check where decide_fused
says so.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _abft_reference import CLEAN_KINDS, random_operands
from _helpers import FLOAT_DTYPES, as_f64, assert_close_to_reference, rand

from jax_tsm2 import abft, abft_calls

pytestmark = pytest.mark.gpu
dtype_ids = lambda d: jnp.dtype(d).name


def _rows(a, b, inject=None):
    return jax.jit(lambda a, b: abft_calls.rows(a, b, inject=inject))(a, b)


def _widths(dtype):
    return (1, 2, 3, 7, 8, 16) if jnp.dtype(dtype) == jnp.float32 else (1, 2, 3, 7, 8)


@pytest.mark.parametrize(("m", "k"), [(1, 64), (37, 257), (1031, 4099), (263, 20_011)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_product_matches_float64_reference_and_is_clean(dtype, m, k):
    rng = np.random.default_rng(m + k)
    for n in _widths(dtype):
        a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
        c, (errors, corrected, row, col, _, uncorrectable) = _rows(a, b)
        assert c.dtype == (jnp.float64 if dtype == jnp.float64 else jnp.float32)
        assert_close_to_reference(c, a, b)
        assert (int(errors), bool(corrected), int(row), int(col)) == (0, False, -1, -1), n
        assert not bool(uncorrectable)


@pytest.mark.parametrize("kind", CLEAN_KINDS)
@pytest.mark.parametrize("dtype", (jnp.float32, jnp.float64, jnp.bfloat16), ids=dtype_ids)
def test_no_clean_product_is_flagged(dtype, kind):
    rng = np.random.default_rng(len(kind))
    for m, k, n in [(301, 512, 5), (64, 3001, 2)]:
        a, b = random_operands(rng, kind, 1, m, k, n, dtype)
        _, (errors, *_) = _rows(a[0], b[0])
        assert int(errors) == 0, (kind, m, k, n)


@pytest.mark.parametrize("bit", (30, 27, 24, 22))
@pytest.mark.parametrize(("m", "k", "n"), [(97, 512, 6), (2048, 20_011, 3)])
@pytest.mark.parametrize("dtype", (jnp.float32, jnp.bfloat16), ids=dtype_ids)
def test_a_flipped_bit_is_detected_located_and_repaired(dtype, m, k, n, bit):
    rng = np.random.default_rng(bit)
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    clean, _ = _rows(a, b)
    row, col = m // 3, n - 1
    c, (errors, corrected, r, j, moved, uncorrectable) = _rows(a, b, inject=(row, col, bit))
    assert (int(r), int(j), bool(corrected), bool(uncorrectable)) == (row, col, True, False)
    assert int(errors) == 1
    flipped = np.asarray(clean)[row, col].view(np.uint32) ^ np.uint32(1 << bit)
    expected = np.float64(flipped.view(np.float32)) - np.float64(clean[row, col])
    # The repair recomputes in f64: the clean entry and the recomputed one differ by rounding.
    np.testing.assert_allclose(float(moved), expected, rtol=1e-5, atol=1e-5 * abs(clean[row, col]))
    assert_close_to_reference(c, a, b)


@pytest.mark.parametrize("bit", (62, 55, 51))
def test_a_flipped_bit_of_an_f64_product_is_repaired(bit):
    rng = np.random.default_rng(bit)
    a, b = rand(rng, (500, 700), jnp.float64), rand(rng, (700, 4), jnp.float64)
    c, (errors, corrected, r, j, _, _) = _rows(a, b, inject=(499, 0, bit))
    assert (int(errors), bool(corrected), int(r), int(j)) == (1, True, 499, 0)
    assert_close_to_reference(c, a, b)


def test_abft_matmul_fused_takes_the_fused_check_where_decide_fused_says_so():
    rng = np.random.default_rng(3)
    a, b = rand(rng, (4099, 1031), jnp.float32), rand(rng, (1031, 8), jnp.float32)
    assert abft.decide_fused(a, b).target == "kernels"
    run = jax.jit(abft.abft_matmul, static_argnames=("inject", "fused"))
    text = run.lower(a, b, fused=True).as_text()
    assert "tsm2_abft_rows" in text and "tsm2_abft_encode" not in text
    assert "tsm2_abft_rows" not in run.lower(a, b).as_text()  # opt-in
    c, v = run(a, b, inject=(17, 5, 29), fused=True)
    assert (int(v.row), int(v.col), bool(v.corrected)) == (17, 5, True)
    np.testing.assert_allclose(as_f64(c), as_f64(a) @ as_f64(b), rtol=1e-4, atol=1e-3)
    narrow = rand(rng, (4099, 16), jnp.float32), rand(rng, (16, 8), jnp.float32)
    with pytest.raises(ValueError, match="too short"):
        abft.abft_matmul(*narrow, fused=True)
