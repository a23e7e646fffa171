"""jax_tsm2.matmul behaves exactly like jnp.matmul at the API level.

Result shapes, dtypes and weak types, broadcasting, 1-D operands, dtype
promotion (including mixed float widths and weakly typed operands),
preferred_element_type, the fallback for integer/bool/complex operands, and
the exception types for bad input.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import as_f64, has_custom_call, lowered_text, rand, slow

import jax_tsm2

SHAPE_PAIRS = [
    ((3,), (3,)),
    ((3,), (3, 4)),
    ((5, 3), (3,)),
    ((2, 5, 3), (3,)),
    ((3,), (2, 3, 4)),
    ((5, 3), (3, 4)),
    ((2, 5, 3), (3, 4)),
    ((5, 3), (2, 3, 4)),
    ((2, 5, 3), (2, 3, 4)),
    ((2, 1, 5, 3), (4, 3, 2)),
    ((1, 5, 3), (2, 3, 4)),
    ((4, 1, 5, 3), (3, 4)),
    ((2, 1, 5, 3), (1, 3, 3, 4)),
    ((2, 3, 5, 3), (2, 1, 3, 4)),
    ((2, 1, 3, 5, 3), (1, 4, 1, 3, 2)),
    ((0, 5, 3), (3, 4)),
    ((5, 0), (0, 4)),
    ((2, 5, 3), (0, 1, 3, 4)),
    ((0,), (0,)),
]


def _same_aval(got, want):
    g, w = jax.eval_shape(*got), jax.eval_shape(*want)
    assert (g.shape, g.dtype, g.weak_type) == (w.shape, w.dtype, w.weak_type), (g, w)


@pytest.mark.parametrize("mode", ["never", "always"])
@pytest.mark.parametrize(("a_shape", "b_shape"), SHAPE_PAIRS, ids=str)
def test_shapes_and_values_match_jnp(mode, a_shape, b_shape):
    rng = np.random.default_rng(0)
    a, b = rand(rng, a_shape, jnp.float64), rand(rng, b_shape, jnp.float64)
    with jax_tsm2.custom_call_mode(mode):
        _same_aval((jax_tsm2.matmul, a, b), (jnp.matmul, a, b))
        got = jax.jit(jax_tsm2.matmul)(a, b)
    want = np.matmul(as_f64(a), as_f64(b))
    assert got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


DTYPES = [
    jnp.float16,
    jnp.bfloat16,
    jnp.float32,
    jnp.float64,
    jnp.int8,
    jnp.int32,
    jnp.uint8,
    jnp.bool_,
    jnp.complex64,
]


def _dtype_pairs():
    """Every pair; the default run takes those of two floats, of one dtype, or with f32."""
    for da, db in itertools.product(DTYPES, DTYPES):
        floats = {da, db} <= set(DTYPES[:4])
        yield (da, db) if floats or da == db or jnp.float32 in (da, db) else slow(da, db)


@pytest.mark.parametrize(("da", "db"), list(_dtype_pairs()), ids=lambda d: jnp.dtype(d).name)
def test_dtype_promotion_matches_jnp(da, db):
    rng = np.random.default_rng(1)
    a = jnp.asarray(rng.integers(1, 3, (4, 3)), da)
    b = jnp.asarray(rng.integers(1, 3, (3, 2)), db)
    _same_aval((jax_tsm2.matmul, a, b), (jnp.matmul, a, b))
    got, want = jax_tsm2.matmul(a, b), jnp.matmul(a, b)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))  # small ints: exact


@pytest.mark.parametrize("weak_side", ["a", "b", "both"])
def test_weak_types_match_jnp(weak_side):
    # A weakly typed array: what jnp makes of a Python scalar broadcast to a shape.
    weak = lambda shape: jnp.broadcast_to(1.5, shape)
    strong_bf16 = lambda shape: jnp.ones(shape, jnp.bfloat16)
    a = weak((4, 3)) if weak_side in ("a", "both") else strong_bf16((4, 3))
    b = weak((3, 2)) if weak_side in ("b", "both") else strong_bf16((3, 2))
    _same_aval((jax_tsm2.matmul, a, b), (jnp.matmul, a, b))
    np.testing.assert_array_equal(np.asarray(jax_tsm2.matmul(a, b)), np.asarray(jnp.matmul(a, b)))


@pytest.mark.parametrize(
    ("dtype", "preferred"),
    [
        (jnp.bfloat16, jnp.float32),
        (jnp.float16, jnp.float32),
        (jnp.float32, jnp.float64),
        (jnp.float32, jnp.bfloat16),
        (jnp.bfloat16, jnp.bfloat16),
        (jnp.int8, jnp.int32),
        (jnp.float32, jnp.int32),
        (jnp.float32, jnp.complex64),
    ],
    ids=str,
)
def test_preferred_element_type_matches_jnp(dtype, preferred):
    rng = np.random.default_rng(2)
    a = jnp.asarray(rng.integers(1, 4, (5, 3)), dtype)
    b = jnp.asarray(rng.integers(1, 4, (3, 4)), dtype)
    f = lambda x, y: jax_tsm2.matmul(x, y, preferred_element_type=preferred)
    g = lambda x, y: jnp.matmul(x, y, preferred_element_type=preferred)
    _same_aval((f, a, b), (g, a, b))
    np.testing.assert_array_equal(np.asarray(f(a, b)), np.asarray(g(a, b)))


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.int8, jnp.bool_, jnp.complex64])
def test_unsupported_dtypes_fall_back_to_xla_even_when_forced(dtype):
    a = jax.ShapeDtypeStruct((20480, 2048), dtype)
    b = jax.ShapeDtypeStruct((2048, 8), dtype)
    with jax_tsm2.custom_call_mode("always"):
        text = lowered_text(jax_tsm2.matmul, a, b, platform="cuda")
    assert not has_custom_call(text)
    assert "dot_general" in text


def test_integer_results_are_bitwise_jnp():
    rng = np.random.default_rng(3)
    a = jnp.asarray(rng.integers(-1000, 1000, (2, 7, 9)), jnp.int32)
    b = jnp.asarray(rng.integers(-1000, 1000, (9, 4)), jnp.int32)
    with jax_tsm2.custom_call_mode("always"):
        got = jax.jit(jax_tsm2.matmul)(a, b)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(jnp.matmul(a, b)))


def test_python_and_numpy_inputs():
    a = np.arange(6.0).reshape(2, 3)
    b = np.arange(3.0)
    np.testing.assert_allclose(np.asarray(jax_tsm2.matmul(a, b)), a @ b)
    _same_aval((jax_tsm2.matmul, a, b), (jnp.matmul, a, b))


f32 = lambda *shape: np.ones(shape, np.float32)

# (a, b, what the message must name)
BAD_INPUTS = [
    pytest.param(np.float32(1.0), f32(3), ["operand 0", "ndim 0"], id="0-d a"),
    pytest.param(f32(3), np.float32(2.0), ["operand 1", "ndim 0"], id="0-d b"),
    pytest.param(f32(2, 3), f32(4, 5), ["float32[2,3]", "float32[4,5]"], id="k mismatch"),
    pytest.param(f32(3), f32(4), ["float32[3]", "float32[4]"], id="vector k mismatch"),
    pytest.param(f32(2, 3), f32(4), ["float32[2,3]", "float32[4]"], id="mat-vec mismatch"),
    pytest.param(f32(2, 2, 3), f32(3, 3, 5), ["float32[2,2,3]", "float32[3,3,5]"], id="batch"),
    pytest.param(f32(4, 2, 2, 3), f32(3, 1, 3, 5), ["float32[4,2,2,3]"], id="N-D batch"),
    pytest.param([[1.0, 2.0]], f32(2, 2), ["list"], id="list"),
]


@pytest.mark.parametrize(("a", "b", "names"), BAD_INPUTS)
def test_bad_input_raises_like_jnp(a, b, names):
    """Same exception type as jnp.matmul, raised at trace time, naming shapes and dtypes."""
    with pytest.raises(Exception) as want:
        jnp.matmul(a, b)
    with pytest.raises(want.type) as got:
        jax_tsm2.matmul(a, b)
    for name in names:
        assert name in str(got.value), (name, str(got.value))
    if not isinstance(a, list):
        with pytest.raises(want.type):
            jax.jit(jax_tsm2.matmul).trace(a, b)
