"""jax.export of programs with jax_tsm2 products: symbolic dimensions, the safety checks
our custom calls need (jax_tsm2.disabled_safety_checks), and the round trip (serialize,
deserialize, call, grad)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import assert_close_to_reference, rand
from jax import export

import jax_tsm2
from jax_tsm2 import routing

pytest.importorskip("flatbuffers")  # jax.export's serialization needs it

F32 = jnp.float32
MODES = ("auto", "prefer", "always", "never")


def sds(shape, dtype=F32, scope=None):
    """A struct of ``shape``: a tuple, or a string of symbolic dimensions in ``scope``."""
    if isinstance(shape, str):
        shape = export.symbolic_shape(shape, scope=scope)
    return jax.ShapeDtypeStruct(shape, dtype)


PROGRAMS = {
    "matmul": (jax_tsm2.matmul, ("b, 16", (16, 8))),
    "batched": (jax_tsm2.matmul, ("b, 1000, 16", (16, 8))),
    "tn": (lambda x, y: jax_tsm2.dot_general(x, y, (((0,), (0,)), ((), ()))), ("b, 16", "b, 8")),
    "nt": (lambda x, y: jax_tsm2.dot_general(x, y, (((1,), (1,)), ((), ()))), ("b, 64", (8, 64))),
}


@pytest.mark.parametrize("program", list(PROGRAMS))
@pytest.mark.parametrize("mode", MODES)
def test_symbolic_dimensions_export_for_cuda_in_every_mode(mode, program):
    """'b' <= 16 was inconclusive inside routing: a symbolic size now routes to XLA's dot
    (the kernels are planned for static sizes), and the export needs no disabled check."""
    f, shapes = PROGRAMS[program]
    with jax_tsm2.custom_call_mode(mode):
        scope = export.SymbolicScope()  # one scope: the same "b" in both operands
        exp = export.export(jax.jit(f), platforms=["cuda"])(*(sds(s, scope=scope) for s in shapes))
    assert "custom_call @tsm2_matmul" not in exp.mlir_module()
    assert "b" in str(exp.in_avals[0].shape)


def test_routing_names_the_symbolic_dimension():
    a, b = sds("rows, 16"), sds((16, 8))
    r = routing.route(a, b, F32, platform="cuda", mode="always")
    assert r.target == "xla" and "symbolic dimension(s) rows" in r.reason
    # A rule that does not depend on the sizes still decides first.
    assert routing.route(a, b, F32, platform="cuda", mode="never").reason == "nn: mode 'never'"


def test_a_custom_call_needs_the_disabled_checks_to_export():
    a, b = sds((20480, 64)), sds((64, 8))
    f = jax.jit(jax_tsm2.matmul)
    with jax_tsm2.custom_call_mode("prefer"):
        with pytest.raises(ValueError, match="tsm2_matmul"):
            export.export(f, platforms=["cuda"])(a, b)
        exp = export.export(
            f, platforms=["cuda"], disabled_checks=jax_tsm2.disabled_safety_checks()
        )(a, b)
    assert "stablehlo.custom_call @tsm2_matmul" in exp.mlir_module()
    names = {str(c) for c in jax_tsm2.disabled_safety_checks()}
    # Every product target a program can contain: those with CPU references, and the
    # CUDA-only centroid update and reader of pinned host rows.
    cuda_only = {"tsm2_kmeans_update", "tsm2_host_rows"}
    targets = {*jax_tsm2.build_info()["targets"]["cpu"], *cuda_only}
    assert len(targets) >= 8 and len(names) == len(targets)
    for target in targets:
        assert any(n.endswith(f":{target}") or n.endswith(f"'{target}'") for n in names), target


@pytest.mark.parametrize("mode", ["always", "auto"])
def test_round_trip_serialize_deserialize_call_grad(mode):
    rng = np.random.default_rng(0)
    a, b = rand(rng, (37, 13), F32), rand(rng, (13, 5), F32)
    with jax_tsm2.custom_call_mode(mode):
        exp = export.export(
            jax.jit(jax_tsm2.matmul), disabled_checks=jax_tsm2.disabled_safety_checks()
        )(a, b)
    assert ("custom_call @tsm2_matmul" in exp.mlir_module()) == (mode == "always")
    again = export.deserialize(exp.serialize(vjp_order=1))
    assert_close_to_reference(again.call(a, b), a, b)
    loss = lambda g: lambda x, y: jnp.sum(jnp.sin(g(x, y)))
    ga, gb = jax.grad(loss(again.call), (0, 1))(a, b)
    wa, wb = jax.grad(loss(jnp.matmul), (0, 1))(a, b)
    np.testing.assert_allclose(ga, wa, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gb, wb, rtol=1e-5, atol=1e-5)


def test_a_symbolic_export_runs_for_any_size_and_differentiates():
    rng = np.random.default_rng(1)
    with jax_tsm2.custom_call_mode("always"):
        exp = export.export(jax.jit(jax_tsm2.matmul))(sds("b, 13"), sds((13, 5)))
    again = export.deserialize(exp.serialize(vjp_order=1))
    b = rand(rng, (13, 5), F32)
    for rows in (1, 7, 130):
        a = rand(rng, (rows, 13), F32)
        assert_close_to_reference(again.call(a, b), a, b)
        g = jax.grad(lambda x: jnp.sum(again.call(x, b) ** 2))(a)
        np.testing.assert_allclose(g, 2 * (a @ b) @ b.T, rtol=1e-5, atol=1e-5)
