"""NaN, Inf and signed zeros as in jnp.matmul; empty dimensions give correctly shaped zeros."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import (
    FLOAT_DTYPES,
    assert_specials_as_jnp,
    has_custom_call,
    lowered_text,
    rand,
    slow,
    special_operands,
)
from jax import lax

import jax_tsm2

MODES = ("never", "always")
dtype_ids = lambda d: jnp.dtype(d).name
# The shape and sign cases below run for every dtype in the slow run, f32 and bf16 by default.
SOME_DTYPES = [jnp.float32, slow(jnp.float64), jnp.bfloat16, slow(jnp.float16)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_nan_and_inf_propagate(mode, dtype):
    rng = np.random.default_rng(0)
    a = np.array(rand(rng, (9, 70), jnp.float64))
    b = np.array(rand(rng, (70, 5), jnp.float64))
    a[1, 3] = np.nan  # row 1 of c: all NaN
    a[4, 10] = np.inf  # row 4: +-inf, sign from b[10, :]
    a[6, 11], a[6, 12] = np.inf, -np.inf  # row 6: inf - inf = NaN where b agrees in sign
    b[20, 2] = -np.inf  # column 2: +-inf (or NaN against row 1)
    b[30, 3] = 0.0  # 0 * inf would be NaN: row 4 has inf at k=10 only, so no effect
    a_j, b_j = jnp.asarray(a, dtype), jnp.asarray(b, dtype)
    with jax_tsm2.custom_call_mode(mode):
        got = np.asarray(jax.jit(jax_tsm2.matmul)(a_j, b_j), np.float64)
    want = np.asarray(jnp.matmul(a_j, b_j), np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    assert np.isnan(got[1]).all() and np.isinf(got[4]).any() and np.isinf(got[:, 2]).any()


@pytest.mark.parametrize("mode", MODES)
def test_zero_times_inf_is_nan(mode):
    a = jnp.asarray([[0.0, 1.0]], jnp.float32)
    b = jnp.asarray([[np.inf], [1.0]], jnp.float32)
    with jax_tsm2.custom_call_mode(mode):
        assert np.isnan(jax.jit(jax_tsm2.matmul)(a, b)[0, 0])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", SOME_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ((0, 5), (5, 3)),
        ((4, 0), (0, 3)),  # k = 0: zeros, not garbage
        ((4, 5), (5, 0)),
        ((0, 0), (0, 0)),
        ((0, 4, 5), (5, 3)),
        ((2, 4, 0), (2, 0, 3)),
        ((3, 1, 4, 5), (0, 5, 3)),
        ((0,), (0,)),
        ((0,), (0, 3)),
    ],
    ids=str,
)
def test_empty_dimensions(mode, dtype, a_shape, b_shape):
    a, b = jnp.ones(a_shape, dtype), jnp.ones(b_shape, dtype)
    with jax_tsm2.custom_call_mode(mode):
        got = jax.jit(jax_tsm2.matmul)(a, b)
    want = jnp.matmul(a, b)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got, np.float64), 0.0)
    assert not np.signbit(np.asarray(got, np.float64)).any()  # an empty sum is +0, as in jnp


@pytest.mark.parametrize("mode", MODES)
def test_empty_gradients(mode):
    a, b = jnp.ones((4, 0), jnp.float32), jnp.ones((0, 3), jnp.float32)
    with jax_tsm2.custom_call_mode(mode):
        ga, gb = jax.grad(lambda x, y: jnp.sum(jax_tsm2.matmul(x, y)), (0, 1))(a, b)
    assert ga.shape == (4, 0) and gb.shape == (0, 3)


# Layouts as lax.dot_general dimension numbers over logical a (m, k), b (k, n).
DIMS = {
    "nn": (((1,), (0,)), ((), ())),
    "nt": (((1,), (1,)), ((), ())),
    "tn": (((0,), (0,)), ((), ())),
}


def stored(a, b, layout):
    """The logical operands as the layout stores them."""
    return (a.T if layout == "tn" else a), (b.T if layout == "nt" else b)


@pytest.mark.parametrize("layout", list(DIMS))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_a_single_term_keeps_its_sign_as_in_jnp(dtype, layout):
    """k = 1: no sum, each entry is one product (XLA computes it as a multiply). Started from
    +0, the custom call turned -0 * 1 into +0 (-0 + +0 = +0); its sums start from -0."""
    vals = np.array([0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, np.nan])
    a = jnp.asarray(vals[:, None], dtype)  # (8, 1)
    b = jnp.asarray(vals[None, ::-1], dtype)  # (1, 8)
    x, y = stored(a, b, layout)
    f = lambda x, y: jax_tsm2.dot_general(x, y, DIMS[layout])
    with jax_tsm2.custom_call_mode("always"):
        assert has_custom_call(lowered_text(f, x, y))
        got = np.asarray(jax.jit(f)(x, y))
    # XLA computes a k = 1 product as a multiply: the reference is jnp's on the CPU, the
    # custom call runs wherever the default device is (the GPU kernels, on a GPU).
    with jax.default_device(jax.devices("cpu")[0]):
        want = np.asarray(lax.dot_general(np.asarray(x), np.asarray(y), DIMS[layout]))
    bits = lambda z: z.view(f"u{z.dtype.itemsize}")
    nan = np.isnan(want.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float64)), nan)
    np.testing.assert_array_equal(bits(got)[~nan], bits(want)[~nan])
    assert np.signbit(got.astype(np.float64)[1, 5])  # a[1] * b[5] = -0 * 1


def test_the_reported_outer_product():
    a, b = jnp.array([[-0.0], [0.0]]), jnp.array([[1.0, -1.0]])
    with jax_tsm2.custom_call_mode("always"):
        got = np.asarray(jax.jit(jax_tsm2.matmul)(a, b))
    np.testing.assert_array_equal(np.signbit(got), [[True, False], [False, True]])
    with jax.default_device(jax.devices("cpu")[0]):
        want = np.asarray(jnp.matmul(np.asarray(a), np.asarray(b)))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("k", [2, 3, 17])
@pytest.mark.parametrize("layout", list(DIMS))
@pytest.mark.parametrize("dtype", SOME_DTYPES, ids=dtype_ids)
def test_zero_sums_are_signed_as_jnp_signs_them(dtype, layout, k):
    """Rows of signed zeros against columns of one sign: a zero sum of two or more terms is
    +0 even where every term is -0 (XLA's GEMMs start from +0), bit for bit as jnp's; NaN
    and Inf where the float64 product has them."""
    rng = np.random.default_rng(k)
    a, b = special_operands(rng, 9, k, 5, dtype)
    x, y = stored(jnp.asarray(a, dtype), jnp.asarray(b, dtype), layout)
    f = lambda x, y: jax_tsm2.dot_general(x, y, DIMS[layout])
    with jax_tsm2.custom_call_mode("always"):
        got = jax.jit(f)(x, y)
    assert_specials_as_jnp(got, a, b)
    want = np.asarray(jax.jit(lambda x, y: lax.dot_general(x, y, DIMS[layout]))(x, y))
    zero = want.astype(np.float64) == 0
    np.testing.assert_array_equal(np.signbit(np.asarray(got, np.float64))[zero], False)
    np.testing.assert_array_equal(np.signbit(want.astype(np.float64))[zero], False)
