"""jax_tsm2.matmul and the tsm2_matmul primitive under JAX transformations.

vmap (an in_axes matrix with None and negative axes, nested vmap), autodiff
(check_grads in forward and reverse mode to second order, through XLA and
through the forced custom call), jit caching, scan, checkpoint, vmap(grad).
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import rand, slow
from jax.test_util import check_grads

import jax_tsm2
from jax_tsm2.primitive import tsm2_matmul

V = 3  # vmapped size


# The transformations act on the primitive whatever the mode; the mode picks the lowering
# of the transformed program. The default run takes the custom call's, the slow run both.
@pytest.fixture(params=[slow("never"), "always"])
def mode(request):
    with jax_tsm2.custom_call_mode(request.param):
        yield request.param


def _insert_axis(shape, axis):
    if axis is None:
        return tuple(shape)
    shape = list(shape)
    shape.insert(axis % (len(shape) + 1), V)
    return tuple(shape)


def _in_axes(rank):
    """None, first, last and a negative middle axis for an operand of this rank."""
    return sorted({None, 0, rank, -1, -2}, key=str)


# Each case runs every in_axes pair (up to 24 compiled programs): the default run takes
# the broadcast batch.
VMAP_CASES = [
    slow((5, 3), (3, 4)),  # 2-D @ 2-D
    slow((2, 5, 3), (3, 4)),  # N-D @ 2-D
    slow((5, 3), (2, 3, 4)),  # 2-D @ N-D
    slow((2, 5, 3), (2, 3, 4)),  # N-D @ N-D
    ((1, 5, 3), (2, 3, 4)),  # broadcast batch
    slow((3,), (3, 4)),  # vector @ matrix
    slow((5, 3), (3,)),  # matrix @ vector
]


@pytest.mark.parametrize(("a_shape", "b_shape"), VMAP_CASES, ids=str)
def test_vmap_in_axes_matrix(mode, a_shape, b_shape):
    rng = np.random.default_rng(0)
    for ia, ib in itertools.product(_in_axes(len(a_shape)), _in_axes(len(b_shape))):
        if ia is None and ib is None:
            continue
        a = rand(rng, _insert_axis(a_shape, ia), jnp.float64)
        b = rand(rng, _insert_axis(b_shape, ib), jnp.float64)
        got = jax.jit(jax.vmap(jax_tsm2.matmul, in_axes=(ia, ib)))(a, b)
        want = jax.vmap(jnp.matmul, in_axes=(ia, ib))(a, b)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"{ia=} {ib=}")


PRIMITIVE_CASES = [
    slow((5, 3), (3, 4)),
    slow((2, 5, 3), (3, 4)),
    slow((5, 3), (2, 3, 4)),
    slow((2, 5, 3), (2, 3, 4)),
    ((1, 5, 3), (2, 3, 4)),  # batch-1 operand shared across the batch
    slow((2, 5, 3), (1, 3, 4)),
]


def _primitive_reference(a, b):
    """The primitive's semantics: a batch-1 operand broadcasts."""
    return jnp.matmul(a, b)


@pytest.mark.parametrize(("a_shape", "b_shape"), PRIMITIVE_CASES, ids=str)
def test_vmap_of_the_primitive(mode, a_shape, b_shape):
    rng = np.random.default_rng(1)
    for ia, ib in itertools.product(_in_axes(len(a_shape)), _in_axes(len(b_shape))):
        if ia is None and ib is None:
            continue
        a = rand(rng, _insert_axis(a_shape, ia), jnp.float64)
        b = rand(rng, _insert_axis(b_shape, ib), jnp.float64)
        got = jax.vmap(tsm2_matmul, in_axes=(ia, ib))(a, b)
        want = jax.vmap(_primitive_reference, in_axes=(ia, ib))(a, b)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"{ia=} {ib=}")


def test_nested_vmap(mode):
    rng = np.random.default_rng(2)
    a = rand(rng, (2, 5, 7, 3), jnp.float64)  # vmapped over axes 0 (outer), 1 (inner)
    b = rand(rng, (3, 4, 2), jnp.float64)  # vmapped over its last axis (outer) only
    inner = jax.vmap(jax_tsm2.matmul, in_axes=(0, None))
    outer = jax.vmap(inner, in_axes=(0, -1))
    want = jax.vmap(jax.vmap(jnp.matmul, in_axes=(0, None)), in_axes=(0, -1))(a, b)
    np.testing.assert_allclose(jax.jit(outer)(a, b), want, rtol=1e-12, atol=1e-12)
    triple = jax.vmap(jax.vmap(jax.vmap(jax_tsm2.matmul, (None, 0)), (0, None)), (1, 0))
    c = rand(rng, (5, 2, 7, 3), jnp.float64)
    d = rand(rng, (2, 4, 3, 6), jnp.float64)
    want = jax.vmap(jax.vmap(jax.vmap(jnp.matmul, (None, 0)), (0, None)), (1, 0))(c, d)
    np.testing.assert_allclose(triple(c, d), want, rtol=1e-12, atol=1e-12)


def test_vmap_out_axes_and_sizes(mode):
    rng = np.random.default_rng(3)
    a, b = rand(rng, (7, 3, 0 + 5), jnp.float64), rand(rng, (5, 2), jnp.float64)
    got = jax.vmap(jax_tsm2.matmul, in_axes=(1, None), out_axes=-1)(a, b)
    want = jax.vmap(jnp.matmul, in_axes=(1, None), out_axes=-1)(a, b)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


GRAD_CASES = [
    slow((5, 3), (3, 4)),
    slow((2, 5, 3), (3, 4)),  # b shared across the batch: its cotangent sums over it
    slow((5, 3), (2, 3, 4)),  # a shared
    slow((2, 5, 3), (2, 3, 4)),
    slow((1, 5, 3), (2, 3, 4)),
    ((2, 1, 5, 3), (3, 3, 4)),
    slow((3,), (3, 4)),
    slow((2, 4, 3), (3,)),
]


@pytest.mark.parametrize(("a_shape", "b_shape"), GRAD_CASES, ids=str)
def test_check_grads_second_order(mode, a_shape, b_shape):
    rng = np.random.default_rng(4)
    a, b = rand(rng, a_shape, jnp.float64), rand(rng, b_shape, jnp.float64)
    check_grads(jax_tsm2.matmul, (a, b), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize(("a_shape", "b_shape"), PRIMITIVE_CASES, ids=str)
def test_check_grads_of_the_primitive(mode, a_shape, b_shape):
    rng = np.random.default_rng(5)
    a, b = rand(rng, a_shape, jnp.float64), rand(rng, b_shape, jnp.float64)
    check_grads(tsm2_matmul, (a, b), order=2, modes=("fwd", "rev"))


def test_third_order_derivative(mode):
    rng = np.random.default_rng(6)
    a, b = rand(rng, (4, 3), jnp.float64), rand(rng, (3, 2), jnp.float64)
    f = lambda x: jnp.sum(jnp.sin(jax_tsm2.matmul(x, b)))
    g = lambda x: jnp.sum(jnp.sin(jnp.matmul(x, b)))
    d3 = lambda h: jax.jacfwd(jax.jacrev(jax.grad(h)))(a)
    np.testing.assert_allclose(d3(f), d3(g), rtol=1e-10, atol=1e-10)


def test_grads_use_the_custom_call_when_forced():
    a = jax.ShapeDtypeStruct((64, 32), jnp.float32)
    b = jax.ShapeDtypeStruct((32, 8), jnp.float32)
    loss = lambda x, y: jnp.sum(jax_tsm2.matmul(x, y) ** 2)
    with jax_tsm2.custom_call_mode("always"):
        text = jax.jit(jax.grad(loss, (0, 1))).trace(a, b).lower().as_text()
    # forward, d/da and d/db: three products, all custom calls
    assert text.count("stablehlo.custom_call @tsm2_matmul") == 3
    assert "dot_general" not in text


@pytest.mark.parametrize("dtype", [jnp.bfloat16, slow(jnp.float16)])
def test_half_precision_grads_with_f32_output(mode, dtype):
    rng = np.random.default_rng(7)
    a, b = rand(rng, (6, 33), dtype), rand(rng, (33, 5), dtype)

    def loss(fn):
        return lambda x, y: jnp.sum(jnp.cos(fn(x, y, preferred_element_type=jnp.float32)))

    got = jax.grad(loss(jax_tsm2.matmul), (0, 1))(a, b)
    want = jax.grad(loss(jnp.matmul), (0, 1))(a, b)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype == dtype
        np.testing.assert_allclose(
            np.asarray(g, np.float32), np.asarray(w, np.float32), rtol=2e-2, atol=2e-2
        )


def test_jvp_and_vjp_match_jnp(mode):
    rng = np.random.default_rng(8)
    a, b = rand(rng, (2, 5, 3), jnp.float64), rand(rng, (3, 4), jnp.float64)
    ta, tb = rand(rng, a.shape, jnp.float64), rand(rng, b.shape, jnp.float64)
    got = jax.jvp(jax_tsm2.matmul, (a, b), (ta, tb))
    want = jax.jvp(jnp.matmul, (a, b), (ta, tb))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    out, pullback = jax.vjp(jax_tsm2.matmul, a, b)
    out_ref, pullback_ref = jax.vjp(jnp.matmul, a, b)
    np.testing.assert_allclose(out, out_ref, rtol=1e-12, atol=1e-12)
    ct = rand(rng, out.shape, jnp.float64)
    for g, w in zip(pullback(ct), pullback_ref(ct), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_jit_does_not_retrace():
    traces = []

    @jax.jit
    def f(x, y):
        traces.append(1)
        return jax_tsm2.matmul(x, y)

    rng = np.random.default_rng(9)
    a, b = rand(rng, (8, 5), jnp.float32), rand(rng, (5, 3), jnp.float32)
    f(a, b)
    f(a + 1, b)
    assert len(traces) == 1
    g = jax.jit(lambda x, y: jax_tsm2.matmul(x, y))  # a fresh function: its own cache
    g(a, b)
    g(a, b - 1)
    assert g._cache_size() == 1


def test_primitive_params_are_hashable():
    a = jax.ShapeDtypeStruct((4, 3), jnp.float32)
    jaxpr = jax.make_jaxpr(lambda x: jax_tsm2.matmul(x, x.T, precision="highest"))(a)
    (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "tsm2_matmul"]
    hash(tuple(sorted(eqn.params.items())))
    assert eqn.params["out_dtype"] == np.dtype("float32")


def test_scan(mode):
    rng = np.random.default_rng(10)
    ws = rand(rng, (4, 6, 6), jnp.float64)
    x0 = rand(rng, (9, 6), jnp.float64)

    def run(mm):
        def step(x, w):
            y = jnp.tanh(mm(x, w))
            return y, jnp.sum(y)

        return lambda x, w: jax.lax.scan(step, x, w)

    got, want = run(jax_tsm2.matmul)(x0, ws), run(jnp.matmul)(x0, ws)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    loss = lambda mm: lambda x, w: jnp.sum(run(mm)(x, w)[0])
    gg = jax.grad(loss(jax_tsm2.matmul), (0, 1))(x0, ws)
    gw = jax.grad(loss(jnp.matmul), (0, 1))(x0, ws)
    for g, w in zip(gg, gw, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


def test_checkpoint(mode):
    rng = np.random.default_rng(11)
    a, b = rand(rng, (7, 5), jnp.float64), rand(rng, (5, 3), jnp.float64)

    def loss(mm):
        block = jax.checkpoint(lambda x, y: jnp.sin(mm(x, y)))
        return lambda x, y: jnp.sum(block(x, y) ** 2)

    got = jax.jit(jax.grad(loss(jax_tsm2.matmul), (0, 1)))(a, b)
    want = jax.grad(loss(jnp.matmul), (0, 1))(a, b)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_vmap_of_grad(mode):
    rng = np.random.default_rng(12)
    xs = rand(rng, (4, 6, 5), jnp.float64)  # per-example inputs
    w = rand(rng, (5, 2), jnp.float64)

    def per_example(mm):
        return jax.grad(lambda w, x: jnp.sum(jnp.tanh(mm(x, w)) ** 2))

    got = jax.jit(jax.vmap(per_example(jax_tsm2.matmul), in_axes=(None, 0)))(w, xs)
    want = jax.vmap(per_example(jnp.matmul), in_axes=(None, 0))(w, xs)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
