"""The fused row check (tsm2_abft_rows) on CPU, through its plain-loop reference target: the
same threshold, check, repair and verdict as the CUDA kernels (tests/test_gpu_abft_rows.py),
summed in another order. abft_matmul(..., fused=True) takes it on CPU too.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _abft_reference import CLEAN_KINDS, random_operands
from _helpers import FLOAT_DTYPES, assert_close_to_reference, rand

import jax_tsm2
from jax_tsm2 import abft, abft_calls

dtype_ids = lambda d: jnp.dtype(d).name


def _rows(a, b, inject=None):
    return jax.jit(lambda a, b: abft_calls.rows(a, b, inject=inject))(a, b)


@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (5, 64, 2), (37, 257, 5), (64, 1031, 8)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_product_matches_float64_reference_and_is_clean(dtype, m, k, n):
    rng = np.random.default_rng(m + k + n)
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    c, (errors, corrected, row, col, magnitude, uncorrectable) = _rows(a, b)
    assert c.dtype == (jnp.float64 if dtype == jnp.float64 else jnp.float32)
    assert_close_to_reference(c, a, b)
    assert (int(errors), bool(corrected), int(row), int(col)) == (0, False, -1, -1)
    assert float(magnitude) == 0.0 and not bool(uncorrectable)


@pytest.mark.parametrize("kind", CLEAN_KINDS)
@pytest.mark.parametrize("dtype", (jnp.float32, jnp.float64, jnp.float16), ids=dtype_ids)
def test_no_clean_product_is_flagged(dtype, kind):
    rng = np.random.default_rng(len(kind))
    for m, k, n in [(41, 300, 5), (9, 2003, 2)]:
        a, b = random_operands(rng, kind, 1, m, k, n, dtype)
        _, (errors, *_) = _rows(a[0], b[0])
        assert int(errors) == 0, (kind, m, k, n)


@pytest.mark.parametrize("bit", (31, 30, 26, 23, 21))
@pytest.mark.parametrize("dtype", (jnp.float32, jnp.bfloat16), ids=dtype_ids)
def test_a_flipped_bit_is_detected_located_and_repaired(dtype, bit):
    rng = np.random.default_rng(bit)
    m, k, n = 50, 600, 6
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    clean, _ = _rows(a, b)
    c, (errors, corrected, row, col, moved, uncorrectable) = _rows(a, b, inject=(17, 4, bit))
    assert (int(errors), bool(corrected), int(row), int(col)) == (1, True, 17, 4)
    assert not bool(uncorrectable)
    flipped = np.asarray(clean)[17, 4].view(np.uint32) ^ np.uint32(1 << bit)
    expected = np.float64(flipped.view(np.float32)) - np.float64(clean[17, 4])
    # The repair recomputes in f64: the clean entry and the recomputed one differ by rounding.
    np.testing.assert_allclose(float(moved), expected, rtol=1e-5, atol=1e-5 * abs(clean[17, 4]))
    assert_close_to_reference(c, a, b)


def test_a_flip_below_the_threshold_is_left_as_it_is():
    """The lowest mantissa bit of a large entry moves it far less than the row's rounding
    bound: the row passes, and C keeps the flipped value."""
    rng = np.random.default_rng(0)
    a, b = rand(rng, (20, 4000), jnp.float32), rand(rng, (4000, 3), jnp.float32)
    clean, _ = _rows(a, b)
    c, (errors, *_) = _rows(a, b, inject=(3, 0, 0))
    assert int(errors) == 0
    assert np.asarray(c)[3, 0].view(np.uint32) == np.asarray(clean)[3, 0].view(np.uint32) ^ 1


def test_f64_flips_are_repaired():
    rng = np.random.default_rng(5)
    a, b = rand(rng, (30, 500), jnp.float64), rand(rng, (500, 4), jnp.float64)
    for bit in (62, 52, 45):
        c, (errors, corrected, row, col, _, _) = _rows(a, b, inject=(29, 3, bit))
        assert (int(errors), bool(corrected), int(row), int(col)) == (1, True, 29, 3), bit
        assert_close_to_reference(c, a, b)


@pytest.mark.parametrize("dtype", (jnp.float32, jnp.bfloat16), ids=dtype_ids)
def test_abft_matmul_fused_agrees_with_the_passes(dtype):
    rng = np.random.default_rng(1)
    a, b = rand(rng, (300, 256), dtype), rand(rng, (256, 6), dtype)
    assert abft.decide_fused(a, b).target == "kernels"
    fused = jax.jit(lambda a, b: abft.abft_matmul(a, b, fused=True))
    text = fused.lower(a, b).as_text()
    assert "tsm2_abft_rows" in text and "tsm2_abft_encode" not in text
    c, v = fused(a, b)
    assert c.dtype == dtype and int(v.errors_detected) == 0 and int(v.row) == -1
    fault = jax.jit(abft.abft_matmul, static_argnames=("inject", "fused"))
    c2, v2 = fault(a, b, inject=(123, 5, 30), fused=True)
    assert (int(v2.row), int(v2.col), bool(v2.corrected)) == (123, 5, True)
    np.testing.assert_allclose(np.asarray(c2, np.float64), np.asarray(c, np.float64), rtol=1e-5)
    p, pv = fault(a, b, inject=(123, 5, 30))  # the passes, the default
    assert (int(pv.row), int(pv.col), bool(pv.corrected)) == (123, 5, True)
    np.testing.assert_allclose(np.asarray(p, np.float64), np.asarray(c, np.float64), rtol=2e-2)


def test_abft_matmul_fused_under_vmap():
    rng = np.random.default_rng(2)
    a, b = rand(rng, (3, 40, 128), jnp.float32), rand(rng, (3, 128, 5), jnp.float32)
    c, v = jax.jit(jax.vmap(lambda a, b: abft.abft_matmul(a, b, fused=True)))(a, b)
    assert c.shape == (3, 40, 5) and v.errors_detected.shape == (3,)
    assert not np.asarray(v.errors_detected).any()
    for i in range(3):
        assert_close_to_reference(c[i], a[i], b[i])


def test_decide_fused_names_why():
    sds = lambda shape, dt=jnp.float32: jax.ShapeDtypeStruct(shape, dt)
    ok = abft.decide_fused(sds((4096, 1024)), sds((1024, 16)))
    assert ok.target == "kernels", ok.reason
    assert "does not take" in abft.decide_fused(sds((4096, 1024)), sds((1024, 17))).reason
    f64 = abft.decide_fused(sds((4096, 1024), jnp.float64), sds((1024, 9), jnp.float64))
    assert "does not take" in f64.reason  # past f64's 8 columns
    assert "too short" in abft.decide_fused(sds((4096, 32)), sds((32, 8))).reason
    with jax_tsm2.custom_call_mode("never"):
        never = abft.decide_fused(sds((4096, 1024)), sds((1024, 8)))
    assert never.target == "xla" and "never" in never.reason


def test_bad_calls_raise_naming_the_problem():
    a, b = jnp.ones((8, 64), jnp.float32), jnp.ones((64, 2), jnp.float32)
    with pytest.raises(ValueError, match="inject"):
        abft_calls.rows(a, b, inject=(8, 0, 3))
    with pytest.raises(ValueError, match="inject"):
        abft_calls.rows(a, b, inject=(0, 0, 32))
    with pytest.raises(ValueError, match="does not take"):
        abft_calls.rows(a, jnp.ones((64, 17), jnp.float32))
    with pytest.raises(TypeError, match="one dtype"):
        abft_calls.rows(a, b.astype(jnp.float16))


def test_abft_matmul_fused_argument():
    rng = np.random.default_rng(4)
    a, b = rand(rng, (64, 128), jnp.float32), rand(rng, (128, 4), jnp.float32)
    lowered = lambda **kw: jax.jit(lambda a, b: abft.abft_matmul(a, b, **kw)).lower(a, b)
    assert "tsm2_abft_rows" in lowered(fused=True).as_text()
    assert "tsm2_abft_rows" not in lowered(fused=False).as_text()
    assert "tsm2_abft_rows" not in lowered().as_text()  # opt-in
    narrow = rand(rng, (64, 16), jnp.float32), rand(rng, (16, 4), jnp.float32)
    with pytest.raises(ValueError, match="too short"):
        abft.abft_matmul(*narrow, fused=True)
