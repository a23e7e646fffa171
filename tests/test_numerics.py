"""Numerics of jax_tsm2.matmul against a float64 NumPy reference.

Shapes come from hypothesis over sizes that break kernels (0, 1, primes, just
past powers of two), for all four float dtypes, with and without a batch (and
with the batch broadcast from either operand), through XLA's dot (mode
"never") and through the custom call (mode "always": on CPU the reference FFI
target, so primitive -> lowering -> handler -> result runs end to end).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import EDGE_SIZES, FLOAT_DTYPES, assert_close_to_reference, has_custom_call, rand
from hypothesis import assume, given
from hypothesis import strategies as st

import jax_tsm2

MODES = ("never", "always")
# The CPU reference target is plain loops: keep m*k*n*batch modest.
MAX_WORK = 1_500_000


@st.composite
def problems(draw):
    m, k, n = (draw(st.sampled_from(EDGE_SIZES)) for _ in range(3))
    batch = draw(st.sampled_from([None, 1, 3]))
    # Which operand carries the batch: both, or only one (the other is shared).
    layout = draw(st.sampled_from(["both", "a", "b"]))
    assume(m * k * n * (batch or 1) <= MAX_WORK)
    a_shape, b_shape = (m, k), (k, n)
    if batch is not None:
        if layout in ("both", "a"):
            a_shape = (batch, *a_shape)
        if layout in ("both", "b"):
            b_shape = (batch, *b_shape)
    return a_shape, b_shape


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: jnp.dtype(d).name)
@given(shapes=problems(), seed=st.integers(0, 2**16))
def test_matches_float64_reference(mode, dtype, shapes, seed):
    a_shape, b_shape = shapes
    rng = np.random.default_rng(seed)
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    with jax_tsm2.custom_call_mode(mode):
        f = jax.jit(jax_tsm2.matmul)
        c = f(a, b)
        text = f.lower(a, b).as_text()
    assert c.dtype == jnp.dtype(dtype)
    assert_close_to_reference(c, a, b)
    # The path taken must be the one asked for, or the test proves nothing.
    empty = 0 in a_shape or 0 in b_shape
    assert has_custom_call(text) == (mode == "always" and not empty)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=["bf16", "f16"])
@given(shapes=problems(), seed=st.integers(0, 2**16))
def test_half_inputs_with_f32_output(mode, dtype, shapes, seed):
    """bf16/f16 operands with preferred_element_type=f32: the kernels write f32 directly."""
    a_shape, b_shape = shapes
    rng = np.random.default_rng(seed)
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    with jax_tsm2.custom_call_mode(mode):
        f = jax.jit(lambda x, y: jax_tsm2.matmul(x, y, preferred_element_type=jnp.float32))
        c = f(a, b)
        text = f.lower(a, b).as_text()
    assert c.dtype == jnp.float32
    assert_close_to_reference(c, a, b)
    empty = 0 in a_shape or 0 in b_shape
    assert has_custom_call(text) == (mode == "always" and not empty)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ((4, 129, 257), (257, 3)),  # batch folded into m, k past a tile
        ((2, 1, 33, 65), (3, 65, 64)),  # N-D broadcast from both sides
        ((1, 13, 7), (5, 7, 65)),  # shared a, n past 64
        ((3, 31, 5), (3, 5, 1)),  # true batch, n = 1
        ((257,), (257, 7)),  # vector @ matrix
        ((65, 129), (129,)),  # matrix @ vector
        ((129,), (129,)),  # dot product
    ],
)
def test_fixed_odd_shapes(mode, a_shape, b_shape):
    rng = np.random.default_rng(0)
    a, b = rand(rng, a_shape, jnp.float32), rand(rng, b_shape, jnp.float32)
    with jax_tsm2.custom_call_mode(mode):
        c = jax.jit(jax_tsm2.matmul)(a, b)
    assert c.shape == np.matmul(np.zeros(a_shape), np.zeros(b_shape)).shape
    assert_close_to_reference(c, a, b)


@pytest.mark.parametrize("mode", MODES)
def test_eager_matches_jit(mode):
    """Op-by-op dispatch (the primitive's impl) computes what jit computes."""
    rng = np.random.default_rng(1)
    a, b = rand(rng, (2, 37, 11), jnp.float32), rand(rng, (11, 5), jnp.float32)
    with jax_tsm2.custom_call_mode(mode):
        eager = jax_tsm2.matmul(a, b)
        jitted = jax.jit(jax_tsm2.matmul)(a, b)
    assert_close_to_reference(eager, a, b)
    np.testing.assert_allclose(np.asarray(eager), np.asarray(jitted), rtol=1e-6, atol=1e-6)


def test_precision_argument_is_honoured_on_xla_path():
    """precision reaches XLA's dot unchanged (HIGHEST on the fallback path)."""
    a = jax.ShapeDtypeStruct((64, 64), jnp.float32)
    text = (
        jax.jit(lambda x, y: jax_tsm2.matmul(x, y, precision=jax.lax.Precision.HIGHEST))
        .trace(a, a)
        .lower(lowering_platforms=("cpu",))
        .as_text()
    )
    assert "precision = [HIGHEST, HIGHEST]" in text
