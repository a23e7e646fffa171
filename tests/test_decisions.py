"""One decision record for every choice the library makes (jax_tsm2.decision.Decision): the
matmul router's Route, the k-means step and update, ABFT's passes and repair. The lowered
programs follow the decisions, and jax_tsm2.explain shows them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from _helpers import lowered_text

import jax_tsm2
from jax_tsm2 import abft, model, routing
from jax_tsm2.clustering import fused, lloyd_step
from jax_tsm2.decision import LAYERS, Alternative, Decision

H100 = model.H100_SXM
MODES = ("auto", "prefer", "always", "never")


def sds(shape, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype)


def test_a_route_is_the_matmul_decision_with_the_model_s_alternatives():
    a, b = sds((20480, 20480)), sds((20480, 8))
    r = routing.route(a, b, jnp.float32, platform="cuda", mode="auto", device=H100)
    assert isinstance(r, Decision) and r.op == "matmul" and r.layer in LAYERS
    assert r.layer == "model" and r.target == "xla"
    names = [alt.target for alt in r.alternatives]
    assert names[0] == r.target and "tsm2r" in names  # the chosen one first, then the others
    assert all(isinstance(alt, Alternative) and alt.seconds > 0 for alt in r.alternatives)
    prefer = routing.route(a, b, jnp.float32, platform="cuda", mode="prefer", device=H100)
    assert prefer.target == "tsm2r" and prefer.platform == "cuda"
    rule = routing.route(a, b, jnp.float32, platform="cpu", mode="auto", device=H100)
    assert rule.layer == "rules" and rule.alternatives == () and rule.platform == "cpu"
    assert "matmul on cuda: xla [model]" in str(r)


SHAPES = [(jnp.float32, 256, 16), (jnp.float32, 1024, 32), (jnp.bfloat16, 64, 8)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("dtype", "d", "k"), SHAPES, ids=str)
@pytest.mark.parametrize("platform", ["cuda", "cpu"])
def test_the_k_means_step_lowers_as_its_decision_says(platform, dtype, d, k, mode):
    x, c = jnp.ones((64, d), dtype), jnp.ones((k, d), jnp.float32)
    with jax_tsm2.custom_call_mode(mode):
        step = fused.decide_step(dtype, d, k, platform=platform)
        text = lowered_text(lloyd_step, x, c, platform=platform)
    assert step.op == "kmeans_step" and step.platform == platform
    assert ("tsm2_kmeans_step" in text) == (step.target == "fused"), step


@pytest.mark.parametrize("mode", MODES)
def test_the_k_means_update_lowers_as_its_decision_says(mode):
    x = jnp.ones((64, 8))
    f = lambda x: jax_tsm2.kmeans(jax.random.key(0), x, 3, max_iter=2).centroids
    with jax_tsm2.custom_call_mode(mode):
        update = fused.decide_update(x.dtype, 64, platform="cuda")
        text = lowered_text(f, x, platform="cuda")
    assert ("tsm2_kmeans_update" in text) == (update.target == "kernel"), update


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "dtypes",
    [(jnp.float32, jnp.float32), (jnp.bfloat16, jnp.bfloat16), (jnp.float32, jnp.bfloat16)],
)
@pytest.mark.parametrize("platform", ["cuda", "cpu"])
def test_abft_lowers_as_its_decisions_say(platform, dtypes, mode):
    a, b = jnp.ones((32, 16), dtypes[0]), jnp.ones((16, 4), dtypes[1])
    with jax_tsm2.custom_call_mode(mode):
        sums, repair = abft.decide(a, b, platform=platform)
        text = lowered_text(abft.abft_matmul, a, b, platform=platform)
    assert (sums.op, repair.op) == ("abft_sums", "abft_repair")
    assert ("tsm2_abft_encode" in text) == (sums.target == "kernels"), sums
    assert ("tsm2_abft_judge" in text) == (repair.target == "kernels"), repair


def test_explain_shows_every_kind_of_decision(capsys):
    e = jax_tsm2.explain.matmul(sds((10**6, 16)), sds((16, 16)), device=H100, show=False)
    assert isinstance(e.route, routing.Route) and e.path == e.route.target
    assert jax_tsm2.explain(sds((10**6, 16)), sds((16, 16)), device=H100, show=False) == e
    step, update = jax_tsm2.explain.kmeans_step(sds((10**6, 256)), 16, mode="auto")
    assert (step.target, update.target) == ("fused", "kernel")
    never = jax_tsm2.explain.kmeans_step((1000, 256), 16, dtype=jnp.float32, mode="never")
    assert [d.target for d in never] == ["jnp", "jnp"]
    sums, repair = jax_tsm2.explain.abft(sds((4096, 64)), sds((64, 8)), platform="cuda")
    assert (sums.target, repair.target) == ("kernels", "kernels")
    out = capsys.readouterr().out
    assert "kmeans_step on cuda: fused [measured]" in out and "abft_repair on cuda" in out
    with pytest.raises(ValueError, match="custom-call mode"):
        jax_tsm2.explain.kmeans_step((10, 2), 2, dtype=jnp.float32, mode="fast")
    with pytest.raises(ValueError, match="positive int"):
        jax_tsm2.explain.kmeans_step((10, 2), 0, dtype=jnp.float32)
    with pytest.raises(TypeError, match="non-negative integers"):
        jax_tsm2.explain.abft((-1, 2), (2, 2), dtype=jnp.float32)
