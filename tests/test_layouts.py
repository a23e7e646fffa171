"""Operand layouts (nn, nt, tn) and ``jax_tsm2.dot_general``.

- The primitive in every layout and dtype against a float64 NumPy product, at
  odd sizes (0, 1, primes), batched and with a shared operand, through the CPU
  reference target (mode "always") and XLA's dot (mode "never").
- ``dot_general`` against ``lax.dot_general``: values, shapes, dtypes, weak
  types and errors over many dimension numbers, and which of them reach the
  primitive (and in which layout).
- Transpose folding: ``matmul(a, b.T)`` and ``matmul(a.T, b)`` compile to the
  custom call in layouts nt and tn with no transpose left.
- Autodiff in every layout (``check_grads`` to second order), and the lowered
  gradient of a least-squares loss: nn forward, tn backward.
- vmap with both operands batched: one batched custom call.
"""

from __future__ import annotations

import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import (
    as_f64,
    assert_close_to_reference,
    has_custom_call,
    lowered_text,
    rand,
    slow,
)
from jax import lax
from jax.test_util import check_grads

import jax_tsm2
from jax_tsm2 import routing
from jax_tsm2.primitive import tsm2_matmul

S = jax.ShapeDtypeStruct
LAYOUTS = ("nn", "nt", "tn")


def layouts_of(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"layout = (\d+) : i32", text)]


def kernels_of(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"kernel = (\d+) : i32", text)]


def stored(layout: str, a_mat: tuple[int, int], b_mat: tuple[int, int]):
    """Stored shapes of op(a) [m, k] and op(b) [k, n] in ``layout``."""
    (m, k), (_, n) = a_mat, b_mat
    return ((k, m) if layout == "tn" else (m, k)), ((n, k) if layout == "nt" else (k, n))


def logical(x, transposed: bool) -> np.ndarray:
    """The float64 matrix an operand stands for (its stored array, transposed or not)."""
    x = as_f64(x)
    return np.swapaxes(x, -1, -2) if transposed else x


# ---------------------------------------------------------------------------
# the primitive in each layout vs a float64 reference

SIZES = [
    (0, 3, 5),
    (4, 0, 3),
    (1, 1, 1),
    (13, 5, 1),
    (3, 31, 7),
    (17, 2, 33),
    (5, 67, 3),
    (5, 9, 67),  # nn: S (m <= 16, n > 64)
]
# (a batch, b batch): None = rank 2
BATCHES = [(None, None), (3, 3), (3, None), (None, 3), (1, 3), (3, 1)]


# Every dtype runs in test_numerics.py; here the default run takes f32 through the custom
# call (XLA's dot in each layout: test_dot_general_matches_lax).
@pytest.mark.parametrize("mode", ["always", slow("never")])
@pytest.mark.parametrize(
    "dtype",
    [jnp.float32, slow(jnp.float64), slow(jnp.bfloat16), slow(jnp.float16)],
    ids=lambda d: jnp.dtype(d).name,
)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_matches_float64_reference(layout, dtype, mode):
    rng = np.random.default_rng(LAYOUTS.index(layout))
    fn = jax.jit(lambda a, b: tsm2_matmul(a, b, layout=layout))
    a_t, b_t = layout == "tn", layout == "nt"
    cases = [(s, (None, None)) for s in SIZES] + [((7, 11, 5), bb) for bb in BATCHES[1:]]
    for (m, k, n), (ba, bb) in cases:
        sa, sb = stored(layout, (m, k), (k, n))
        a = rand(rng, sa if ba is None else (ba, *sa), dtype)
        b = rand(rng, sb if bb is None else (bb, *sb), dtype)
        with jax_tsm2.custom_call_mode(mode):
            c = fn(a, b)
            text = lowered_text(fn, a, b)
        empty = 0 in (m, k, n)
        assert has_custom_call(text) == (mode == "always" and not empty), (layout, m, k, n)
        if has_custom_call(text):
            assert layouts_of(text) == [routing.LAYOUT_IDS[layout]]
        assert c.dtype == dtype
        assert_close_to_reference(c, logical(a, a_t), logical(b, b_t), k=k)


@pytest.mark.parametrize(("layout", "kernel"), [("nn", 2), ("nt", 0), ("tn", 3)])
def test_cpu_reference_target_runs_each_kernel_id(layout, kernel):
    """Mode "always" on CPU passes the routed kernel id to the reference target, which checks
    that the kernel takes the layout (ffi/matmul_problem.h CheckKernel)."""
    rng = np.random.default_rng(11)
    sa, sb = stored(layout, (5, 9), (9, 67))
    a, b = rand(rng, sa, jnp.float64), rand(rng, sb, jnp.float64)
    fn = jax.jit(lambda x, y: tsm2_matmul(x, y, layout=layout))
    with jax_tsm2.custom_call_mode("always"):
        assert kernels_of(lowered_text(fn, a, b)) == [kernel]
        c = fn(a, b)
    assert_close_to_reference(c, logical(a, layout == "tn"), logical(b, layout == "nt"))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_half_operands_write_f32(layout):
    rng = np.random.default_rng(10)
    sa, sb = stored(layout, (9, 37), (37, 5))
    a, b = rand(rng, sa, jnp.bfloat16), rand(rng, sb, jnp.bfloat16)
    with jax_tsm2.custom_call_mode("always"):
        c = jax.jit(lambda x, y: tsm2_matmul(x, y, out_dtype=jnp.float32, layout=layout))(a, b)
    assert c.dtype == jnp.float32
    assert_close_to_reference(c, logical(a, layout == "tn"), logical(b, layout == "nt"))


def test_primitive_rejects_bad_layouts_and_shapes():
    a = jnp.ones((4, 3))
    with pytest.raises(ValueError, match="layout"):
        tsm2_matmul(a, a, layout="tt")
    with pytest.raises(TypeError, match=r"layout nt.*\[4, 3\].*\[3, 4\]"):
        tsm2_matmul(a, jnp.ones((3, 4)), layout="nt")
    with pytest.raises(TypeError, match="layout tn"):
        tsm2_matmul(a, jnp.ones((3, 4)), layout="tn")


# ---------------------------------------------------------------------------
# dot_general vs lax.dot_general


def _dn(lc, rc, lb=(), rb=()):
    return ((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)))


# (lhs shape, rhs shape, dimension numbers, the layout ours should take or None for XLA)
DOT_CASES = [
    ((5, 3), (3, 4), _dn([1], [0]), "nn"),
    ((5, 3), (4, 3), _dn([1], [1]), "nt"),
    ((3, 5), (3, 4), _dn([0], [0]), "tn"),
    ((3, 5), (4, 3), _dn([0], [1]), None),  # TT
    ((2, 5, 3), (2, 3, 4), _dn([2], [1], [0], [0]), "nn"),
    ((2, 5, 3), (2, 4, 3), _dn([2], [2], [0], [0]), "nt"),
    ((2, 3, 5), (2, 3, 4), _dn([1], [1], [0], [0]), "tn"),
    ((2, 3, 5), (2, 4, 3), _dn([1], [2], [0], [0]), None),  # batched TT
    ((1, 5, 3), (1, 3, 4), _dn([2], [1], [0], [0]), "nn"),  # batch of one
    ((5, 2, 3), (2, 3, 4), _dn([2], [1], [1], [0]), None),  # batch in the middle
    ((5, 3, 2), (3, 4, 2), _dn([1], [0], [2], [2]), None),  # batch last
    ((5, 3, 2), (2, 4, 3), _dn([1], [2], [2], [0]), None),
    ((5, 3, 6), (3, 6, 4), _dn([1, 2], [0, 1]), None),  # two contracting dims
    ((2, 7, 5, 3), (2, 7, 3, 4), _dn([3], [2], [0, 1], [0, 1]), None),  # two batch dims
    ((3,), (3, 4), _dn([0], [0]), None),  # vector
    ((5, 3), (3,), _dn([1], [0]), None),
    ((2, 5, 3), (3, 4), _dn([2], [0]), "nn"),  # leading free lhs dims fold into m
    ((2, 5, 3), (4, 3), _dn([2], [1]), "nt"),
    ((3, 2, 5), (3, 4), _dn([0], [0]), None),  # ... but only when k is last
    ((5, 3), (2, 3, 4), _dn([1], [1]), None),
    ((5, 3), (3, 4), _dn([], []), None),  # outer product
    ((0, 3), (3, 4), _dn([1], [0]), "nn"),
    ((3, 0), (3, 4), _dn([0], [0]), "tn"),
    ((5, 0), (4, 0), _dn([1], [1]), "nt"),
    ((2, 0, 3), (2, 3, 4), _dn([2], [1], [0], [0]), "nn"),
    ((0, 5, 3), (0, 4, 3), _dn([2], [2], [0], [0]), "nt"),
]


def _same_aval(got, want):
    g, w = got, want
    assert (g.shape, g.dtype, g.weak_type) == (w.shape, w.dtype, w.weak_type), (g, w)


def _tsm2_layouts(jaxpr) -> list[str]:
    return [e.params["layout"] for e in jaxpr.eqns if e.primitive.name == "tsm2_matmul"]


@pytest.mark.parametrize("mode", ["never", "always"])
@pytest.mark.parametrize(("ls", "rs", "dn", "layout"), DOT_CASES, ids=str)
def test_dot_general_matches_lax(mode, ls, rs, dn, layout):
    rng = np.random.default_rng(20)
    lhs, rhs = rand(rng, ls, jnp.float64), rand(rng, rs, jnp.float64)
    ours = lambda x, y: jax_tsm2.dot_general(x, y, dn)
    ref = lambda x, y: lax.dot_general(x, y, dn)
    _same_aval(jax.eval_shape(ours, lhs, rhs), jax.eval_shape(ref, lhs, rhs))
    assert _tsm2_layouts(jax.make_jaxpr(ours)(lhs, rhs)) == ([layout] if layout else [])
    with jax_tsm2.custom_call_mode(mode):
        got = jax.jit(ours)(lhs, rhs)
    want = np.asarray(ref(lhs, rhs))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("dl", "dr", "preferred"),
    [
        (jnp.float32, jnp.float32, None),
        (jnp.bfloat16, jnp.bfloat16, jnp.float32),
        (jnp.float16, jnp.float16, jnp.float32),
        (jnp.float32, jnp.float32, jnp.float64),
        (jnp.bfloat16, jnp.bfloat16, None),
        (jnp.float32, jnp.bfloat16, None),  # mixed: lax's rule, XLA's dot
        (jnp.float16, jnp.float64, None),
        (jnp.int8, jnp.int8, jnp.int32),
        (jnp.int32, jnp.int32, None),
        (jnp.complex64, jnp.complex64, None),
        (jnp.float32, jnp.float32, jnp.int32),
        (jnp.bool_, jnp.bool_, None),
    ],
    ids=str,
)
@pytest.mark.parametrize("dn", [_dn([1], [0]), slow(_dn([1], [1])), _dn([0], [0])], ids=str)
def test_dot_general_dtypes_match_lax(dl, dr, preferred, dn):
    rng = np.random.default_rng(21)
    lhs = jnp.asarray(rng.integers(1, 4, (5, 5)), dl)
    rhs = jnp.asarray(rng.integers(1, 4, (5, 5)), dr)
    ours = lambda x, y: jax_tsm2.dot_general(x, y, dn, preferred_element_type=preferred)
    ref = lambda x, y: lax.dot_general(x, y, dn, preferred_element_type=preferred)
    try:
        want_aval = jax.eval_shape(ref, lhs, rhs)
    except TypeError as err:  # lax refuses it: so must we, with the same type
        with pytest.raises(type(err)):
            ours(lhs, rhs)
        return
    _same_aval(jax.eval_shape(ours, lhs, rhs), want_aval)
    with jax_tsm2.custom_call_mode("always"):
        got = jax.jit(ours)(lhs, rhs)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(ref(lhs, rhs)))  # small ints: exact


def test_dot_general_weak_types_and_precision_match_lax():
    weak = jnp.broadcast_to(1.5, (4, 3))
    strong = jnp.ones((4, 3), jnp.float32)
    for x, y in itertools.product((weak, strong), repeat=2):
        for prec in (None, "highest", lax.Precision.DEFAULT):
            ours = jax.eval_shape(
                lambda p, q, prec=prec: jax_tsm2.dot_general(p, q, _dn([1], [1]), prec), x, y
            )
            ref = jax.eval_shape(
                lambda p, q, prec=prec: lax.dot_general(p, q, _dn([1], [1]), prec), x, y
            )
            _same_aval(ours, ref)


def test_dot_general_takes_numpy_and_int_dimension_numbers():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(4, 3)
    got = jax_tsm2.dot_general(a, b, ((1, 1), ((), ())))
    np.testing.assert_allclose(np.asarray(got), a @ b.T)
    got = jax_tsm2.dot_general(a, b, ((np.array([1]), [1]), ([], [])))
    np.testing.assert_allclose(np.asarray(got), a @ b.T)


f32 = lambda *shape: jnp.ones(shape, jnp.float32)
BAD_DOT = [
    (f32(5, 3), f32(4, 2), _dn([1], [0])),  # sizes differ
    (f32(5, 3), f32(3, 4), _dn([2], [0])),  # no such dim
    (f32(2, 5, 3), f32(3, 3, 4), _dn([2], [1], [0], [0])),  # batch sizes differ
    (f32(2, 5, 3), f32(2, 3, 4), _dn([2], [1], [0], [])),  # batch counts differ
    (f32(5, 3), f32(3, 4), _dn([1, 0], [0])),  # contracting counts differ
]


@pytest.mark.parametrize(("lhs", "rhs", "dn"), BAD_DOT, ids=str)
def test_dot_general_errors_like_lax(lhs, rhs, dn):
    with pytest.raises(Exception) as want:
        lax.dot_general(lhs, rhs, dn)
    assert want.type in (TypeError, ValueError)
    with pytest.raises(want.type) as got:
        jax.jit(lambda x, y: jax_tsm2.dot_general(x, y, dn)).trace(lhs, rhs)
    assert str(got.value) == str(want.value)
    with pytest.raises(TypeError):
        jax_tsm2.dot_general([[1.0]], f32(1, 1), _dn([1], [0]))


# ---------------------------------------------------------------------------
# transpose folding at lowering time


def _compiled(f, *args) -> str:
    return jax.jit(f).lower(*args).compile().as_text()


def _has_transpose(hlo: str) -> bool:
    return re.search(r"\btranspose\(", hlo) is not None


@pytest.mark.parametrize(
    ("f", "a_shape", "b_shape", "layout"),
    [
        (lambda a, b: jax_tsm2.matmul(a, b.T), (64, 32), (8, 32), 1),
        (lambda a, b: jax_tsm2.matmul(a.T, b), (100, 4), (100, 3), 2),
        (lambda a, b: a @ b.T, (64, 32), (8, 32), None),  # jnp: not ours
        (lambda a, b: jax_tsm2.matmul(a, jnp.swapaxes(b, -1, -2)), (2, 9, 5), (2, 3, 5), 1),
        (lambda a, b: jax_tsm2.matmul(jnp.swapaxes(a, -1, -2), b), (2, 9, 5), (2, 9, 3), 2),
        (lambda a, b: jax_tsm2.matmul(a, jnp.transpose(b, (1, 0, 2))), (9, 5), (5, 2, 3), None),
    ],
)
def test_transpose_folds_into_the_layout(f, a_shape, b_shape, layout):
    rng = np.random.default_rng(30)
    a, b = rand(rng, a_shape, jnp.float64), rand(rng, b_shape, jnp.float64)
    with jax_tsm2.custom_call_mode("always"):
        hlo = _compiled(f, a, b)
        got = jax.jit(f)(a, b)
    np.testing.assert_allclose(np.asarray(got), np.asarray(f(a, b)), rtol=1e-12, atol=1e-12)
    if layout is not None:
        assert re.findall(r"layout = (\d+) : i32", hlo) == [str(layout)], hlo
        assert not _has_transpose(hlo), hlo


def test_transpose_of_both_folds_one_and_keeps_the_other():
    """a.T @ b.T is no layout of ours: b's transpose folds (nt), a's stays."""
    rng = np.random.default_rng(31)
    a, b = rand(rng, (5, 9), jnp.float64), rand(rng, (3, 5), jnp.float64)
    f = lambda x, y: jax_tsm2.matmul(x.T, y.T)
    with jax_tsm2.custom_call_mode("always"):
        text = _compiled(f, a, b)
        got = jax.jit(f)(a, b)
    assert layouts_of(text) == [1] and text.count('custom_call_target="tsm2_matmul"') == 1
    np.testing.assert_allclose(np.asarray(got), as_f64(a).T @ as_f64(b).T, rtol=1e-12)


def test_folding_on_cuda_follows_routing():
    """Routing decides on the folded layout: X @ C.T runs L in nt, A.T @ B runs T in tn."""
    x, c = S((100_000, 16), jnp.float32), S((8, 16), jnp.float32)
    with jax_tsm2.custom_call_mode("prefer"):
        text = lowered_text(lambda p, q: jax_tsm2.matmul(p, q.T), x, c, platform="cuda")
        assert (kernels_of(text), layouts_of(text)) == ([1], [1])
        text = lowered_text(lambda p, q: jax_tsm2.matmul(p.T, q), x, x, platform="cuda")
        assert (kernels_of(text), layouts_of(text)) == ([3], [2])
    with jax_tsm2.custom_call_mode("auto"):  # the model: TSM2T 11 us, XLA's dot 14.5 us
        text = lowered_text(lambda p, q: jax_tsm2.matmul(p.T, q), x, x, platform="cuda")
        assert (kernels_of(text), layouts_of(text)) == ([3], [2])
        small = S((1000, 16), jnp.float32)  # launch-bound either way: XLA's dot
        text = lowered_text(lambda p, q: jax_tsm2.matmul(p.T, q), small, small, platform="cuda")
        assert not has_custom_call(text)
        # Never the unfolded nn route (TSM2R on a materialized A^T, measured 1.5x
        # slower): the folded tn one or XLA's dot. TSM2T's element copies are predicted
        # at 159 us against XLA's dot's 206, inside the uncalibrated margin: XLA's dot.
        a, b = S((1_025_463, 47), jnp.float32), S((1_025_463, 2), jnp.float32)
        text = lowered_text(lambda p, q: jax_tsm2.matmul(p.T, q), a, b, platform="cuda")
        assert (kernels_of(text), layouts_of(text)) in (([], []), ([3], [2]))


# ---------------------------------------------------------------------------
# autodiff

# The default run: a batch-1 operand broadcast against a batch of 2.
GRAD_BATCHES = [
    slow((None, None)),
    slow((2, 2)),
    slow((2, None)),
    slow((None, 2)),
    (1, 2),
    slow((2, 1)),
]


@pytest.mark.parametrize("mode", [slow("never"), "always"])
@pytest.mark.parametrize("batches", GRAD_BATCHES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_check_grads_in_each_layout(layout, batches, mode):
    rng = np.random.default_rng(40)
    sa, sb = stored(layout, (5, 3), (3, 4))
    ba, bb = batches
    a = rand(rng, sa if ba is None else (ba, *sa), jnp.float64)
    b = rand(rng, sb if bb is None else (bb, *sb), jnp.float64)
    f = lambda x, y: tsm2_matmul(x, y, layout=layout)
    with jax_tsm2.custom_call_mode(mode):
        check_grads(f, (a, b), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("dn", [_dn([1], [0]), _dn([1], [1]), _dn([0], [0])], ids=str)
def test_dot_general_grads_match_lax(dn):
    rng = np.random.default_rng(41)
    b_shape = (5, 6) if dn == _dn([1], [1]) else (6, 5)
    a, b = rand(rng, (6, 6), jnp.float64), rand(rng, b_shape, jnp.float64)
    loss = lambda dot: lambda x, y: jnp.sum(jnp.sin(dot(x, y, dn)))
    with jax_tsm2.custom_call_mode("always"):
        got = jax.jit(jax.grad(loss(jax_tsm2.dot_general), (0, 1)))(a, b)
    want = jax.grad(loss(lax.dot_general), (0, 1))(a, b)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cotangents_use_layouts_not_transposes(layout):
    """d/da and d/db of each layout are products in the other layouts (table in primitive.py)."""
    sa, sb = stored(layout, (64, 32), (32, 8))
    a, b = S(sa, jnp.float32), S(sb, jnp.float32)
    loss = lambda x, y: jnp.sum(tsm2_matmul(x, y, layout=layout) ** 2)
    with jax_tsm2.custom_call_mode("always"):
        text = jax.jit(jax.grad(loss, (0, 1))).trace(a, b).lower().as_text()
    want = {"nn": [0, 1, 2], "nt": [1, 0, 2], "tn": [2, 1, 0]}[layout]  # forward, d/da, d/db
    got = layouts_of(text)
    assert got[0] == want[0] and sorted(got[1:]) == sorted(want[1:]), got
    assert "stablehlo.transpose" not in text and "dot_general" not in text


def test_least_squares_grad_runs_nn_forward_and_tn_backward():
    """||A x - y||^2 with A tall: the lowered gradient has the custom call in nn (A x) and
    tn (A^T r), on CPU in mode "always" and on CUDA in mode "prefer" (TSM2L then TSM2T)."""
    a, x, y = S((100_000, 32), jnp.float32), S((32,), jnp.float32), S((100_000,), jnp.float32)
    loss = lambda x, a, y: jnp.sum((jax_tsm2.matmul(a, x) - y) ** 2)
    grad = jax.grad(loss)
    with jax_tsm2.custom_call_mode("always"):
        cpu = lowered_text(grad, x, a, y, platform="cpu")
    assert layouts_of(cpu) == [0, 2], cpu
    assert "stablehlo.transpose" not in cpu and "dot_general" not in cpu
    with jax_tsm2.custom_call_mode("prefer"):
        cuda = lowered_text(grad, x, a, y, platform="cuda")
    assert (layouts_of(cuda), kernels_of(cuda)) == ([0, 2], [1, 3]), cuda
    assert "stablehlo.transpose" not in cuda
    # and it computes the right gradient (small sizes, CPU reference target)
    rng = np.random.default_rng(42)
    av, xv, yv = (rand(rng, s, jnp.float64) for s in ((53, 7), (7,), (53,)))
    with jax_tsm2.custom_call_mode("always"):
        g = jax.jit(grad)(xv, av, yv)
    a64, x64, y64 = as_f64(av), as_f64(xv), as_f64(yv)
    np.testing.assert_allclose(np.asarray(g), 2 * a64.T @ (a64 @ x64 - y64), rtol=1e-12)


def test_weight_grad_of_a_dense_layer_is_tn():
    """dL/dW of X @ W over a big batch X is X^T @ G: layout tn, no transpose of X."""
    x, w = S((4096, 64), jnp.float32), S((64, 16), jnp.float32)
    loss = lambda w, x: jnp.sum(jnp.tanh(jax_tsm2.matmul(x, w)))
    with jax_tsm2.custom_call_mode("always"):
        text = lowered_text(jax.grad(loss), w, x)
    assert layouts_of(text) == [0, 2] and "stablehlo.transpose" not in text


# ---------------------------------------------------------------------------
# vmap


@pytest.mark.parametrize("layout", LAYOUTS)
def test_vmap_with_both_operands_batched_is_one_batched_call(layout):
    sa, sb = stored(layout, (9, 5), (5, 3))
    f = jax.vmap(lambda x, y: tsm2_matmul(x, y, layout=layout))
    a, b = S((4, *sa), jnp.float32), S((4, *sb), jnp.float32)
    with jax_tsm2.custom_call_mode("always"):
        text = lowered_text(f, a, b)
    assert text.count("stablehlo.custom_call @tsm2_matmul") == 1
    args = "tensor<4x{}x{}xf32>, tensor<4x{}x{}xf32>".format(*sa, *sb)
    assert f"({args}) -> (tensor<4x9x3xf32>, " in text, text
    assert layouts_of(text) == [routing.LAYOUT_IDS[layout]]
    assert "stablehlo.while" not in text


@pytest.mark.parametrize("mode", [slow("never"), "always"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_vmap_in_each_layout_matches_reference(layout, mode):
    rng = np.random.default_rng(50)
    sa, sb = stored(layout, (5, 3), (3, 4))
    for ia, ib in [(0, 0), (0, None), (None, 0), (-1, 1), (1, None), (None, -1)]:
        a = rand(rng, sa if ia is None else tuple(np.insert(sa, ia % 3, 2)), jnp.float64)
        b = rand(rng, sb if ib is None else tuple(np.insert(sb, ib % 3, 2)), jnp.float64)
        f = jax.vmap(lambda x, y: tsm2_matmul(x, y, layout=layout), in_axes=(ia, ib))
        ref = jax.vmap(lambda x, y: _ref(x, y, layout), in_axes=(ia, ib))
        with jax_tsm2.custom_call_mode(mode):
            got = jax.jit(f)(a, b)
        np.testing.assert_allclose(got, ref(a, b), rtol=1e-12, atol=1e-12, err_msg=f"{ia=} {ib=}")


def _ref(x, y, layout):
    x = jnp.swapaxes(x, -1, -2) if layout == "tn" else x
    y = jnp.swapaxes(y, -1, -2) if layout == "nt" else y
    return jnp.matmul(x, y)


def test_vmap_of_tn_over_a_alone_shares_b():
    """tn stores a as [k, m]: a vmapped a cannot fold into m, so it is a batched call with b
    shared (batch stride 0), not a copy of b."""
    f = jax.vmap(lambda x, y: tsm2_matmul(x, y, layout="tn"), in_axes=(0, None))
    with jax_tsm2.custom_call_mode("always"):
        text = lowered_text(f, S((4, 100, 9), jnp.float32), S((100, 3), jnp.float32))
    assert "(tensor<4x100x9xf32>, tensor<100x3xf32>) -> (tensor<4x9x3xf32>, " in text, text
