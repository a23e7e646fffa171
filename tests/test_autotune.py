"""Autotuning at lowering time (jax_tsm2.autotune, jax_tsm2.tune.online) with a fake timer.

conftest.py points the tune cache at an empty directory per test, so every
test starts without entries; the H100 preset is the device, as in CI.
"""

from __future__ import annotations

import json
import os
import threading
import time
import warnings

import jax
import jax.numpy as jnp
import pytest
from _helpers import has_custom_call, import_with_env

import jax_tsm2
from jax_tsm2 import model, routing
from jax_tsm2.tune import cache, online, tuner

S = jax.ShapeDtypeStruct
H100 = model.H100_SXM
# The model sends this to XLA's dot; TSM2R is its one candidate kernel.
R_SHAPE = ((20480, 20480), (20480, 8), jnp.float32)
# The model sends this to TSM2L even with its uncalibrated margin: bf16 at k = n = 8.
L_SHAPE = ((1_000_000, 8), (8, 8), jnp.bfloat16)


class FakeTimer:
    """Seconds per target from ``times`` (an exception is raised); records every call."""

    def __init__(self, times, delay=0.0):
        self.times, self.delay, self.calls = times, delay, []

    def __call__(self, target, p, dtype, layout):
        self.calls.append((target, p, dtype, layout))
        time.sleep(self.delay)
        t = self.times[target]
        if isinstance(t, Exception):
            raise t
        return t


@pytest.fixture(autouse=True)
def fresh_online_state(monkeypatch):
    monkeypatch.setattr(online, "timer", None)
    monkeypatch.setattr(online, "_failed", set())


def use_timer(monkeypatch, times, delay=0.0):
    timer = FakeTimer(times, delay)
    monkeypatch.setattr(online, "timer", timer)
    return timer


def route(shape, autotune=True, layout="nn"):
    a_shape, b_shape, dtype = shape
    return routing.route(
        S(a_shape, dtype), S(b_shape, dtype), dtype, platform="cuda", mode="auto",
        cuda_targets=True, layout=layout, device=H100, autotune=autotune,
    )  # fmt: skip


def cache_entries():
    path = cache.cache_path(H100.key)
    return json.loads(path.read_text())["entries"] if path.exists() else {}


@pytest.mark.parametrize(
    "shape,times,model_layer,winner",
    [
        (R_SHAPE, {"tsm2r": 1e-3, "xla": 2e-3}, "model", "tsm2r"),
        (L_SHAPE, {"tsm2l": 3e-4, "tsm2r": 4e-4, "xla": 1e-4}, "model", "xla"),
    ],
    ids=["model-says-xla", "model-says-tsm2l"],
)
def test_autotune_routes_the_measured_winner_and_times_once(
    monkeypatch, shape, times, model_layer, winner
):
    before = route(shape, autotune=False)
    assert before.layer == model_layer and before.target != winner
    timer = use_timer(monkeypatch, times)
    r = route(shape)
    assert (r.target, r.layer) == (winner, "autotune"), r
    assert "autotuned at this lowering" in r.reason and str(cache.cache_path(H100.key)) in r.reason
    timed = [c[0] for c in timer.calls]
    assert sorted(timed) == sorted(times) and len(cache_entries()) == 1
    again = route(shape)
    assert (again.target, again.layer) == (winner, "tune cache")
    assert len(timer.calls) == len(timed)  # not timed again


def test_autotune_off_never_times(monkeypatch):
    timer = use_timer(monkeypatch, {"tsm2r": 1e-3, "xla": 2e-3})
    assert route(R_SHAPE, autotune=False).layer == "model"
    a, b = (S(s, R_SHAPE[2]) for s in R_SHAPE[:2])
    assert not jax_tsm2.get_autotune()
    text = jax.jit(jax_tsm2.matmul).trace(a, b).lower(lowering_platforms=("cuda",)).as_text()
    assert not has_custom_call(text)
    assert timer.calls == [] and cache_entries() == {}


def test_no_candidate_kernel_is_not_timed(monkeypatch):
    timer = use_timer(monkeypatch, {"tsm2r": 1e-3, "xla": 2e-3})
    r = route(((512, 512), (512, 512), jnp.float32))
    assert r.target == "xla" and r.layer == "rules" and "not tall-and-skinny" in r.reason
    assert timer.calls == [] and cache_entries() == {}


def test_without_a_gpu_nothing_is_timed():
    """No timer set and the H100 preset (no GPU in this process): there is nothing to time on."""
    assert online._timer_for(H100) is None
    assert online._timer_for(model.current_device()) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert route(R_SHAPE).layer == "model"
    assert cache_entries() == {}


def test_a_failing_timer_warns_and_the_model_decides(monkeypatch):
    timer = use_timer(monkeypatch, {"tsm2r": RuntimeError("no kernel"), "xla": ValueError("oom")})
    want = r"autotuning float32 nn m=20480 k=20480 n=8 .*every candidate failed.*no kernel"
    with pytest.warns(RuntimeWarning, match=want):
        r = route(R_SHAPE)
    assert r == route(R_SHAPE, autotune=False)
    assert cache_entries() == {}
    calls = len(timer.calls)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a failed shape is not retried: no second warning
        assert route(R_SHAPE).layer == "model"
    assert len(timer.calls) == calls


def test_an_error_in_tuning_itself_warns_and_the_model_decides(monkeypatch):
    use_timer(monkeypatch, {"tsm2l": 3e-4, "tsm2r": 4e-4, "xla": 1e-4})

    def read_only(*args, **kwargs):
        raise PermissionError("read-only cache directory")

    monkeypatch.setattr(cache, "store", read_only)
    with pytest.warns(RuntimeWarning, match="PermissionError: read-only cache directory"):
        r = route(L_SHAPE)
    assert (r.target, r.layer) == ("tsm2l", "model")


def test_timing_does_not_tune_again_from_inside(monkeypatch):
    """The timer's own lowerings (here: a route call from inside the timer) never tune."""
    inner = []

    def timer(target, p, dtype, layout):
        inner.append(route(L_SHAPE))
        return {"tsm2r": 1e-3, "xla": 2e-3}[target]

    monkeypatch.setattr(online, "timer", timer)
    assert route(R_SHAPE).layer == "autotune"
    assert [r.layer for r in inner] == ["model", "model"]
    assert list(cache_entries()) == ["float32/nn/1/20480/20480/8"]


def test_two_threads_time_a_shape_once(monkeypatch):
    timer = use_timer(monkeypatch, {"tsm2r": 1e-3, "xla": 2e-3}, delay=0.05)
    start, routes = threading.Barrier(2), []

    def work():
        start.wait()
        routes.append(route(R_SHAPE))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.layer for r in routes) == ["autotune", "tune cache"]
    assert {r.target for r in routes} == {"tsm2r"} and len(timer.calls) == 2


def test_explain_shows_an_autotuned_decision(monkeypatch):
    use_timer(monkeypatch, {"tsm2r": 1e-3, "xla": 2e-3})
    a, b = (S(s, R_SHAPE[2]) for s in R_SHAPE[:2])
    e = jax_tsm2.explain(a, b, mode="auto", device=H100, autotune=True, show=False)
    assert (e.path, e.layer, e.tuned) == ("tsm2r", "autotune", "tsm2r")
    assert "decided by: autotune" in str(e) and "autotuned at this lowering" in str(e)
    e = jax_tsm2.explain(a, b, mode="auto", device=H100, show=False)  # switch off: the cache
    assert (e.path, e.layer) == ("tsm2r", "tune cache")


def test_the_lowering_autotunes_under_the_switch_and_jit_recompiles(monkeypatch):
    """The switch is read at lowering and is part of jit's cache key: flipping it traces and
    lowers again, and each value's program is reused when it comes back."""
    timer = use_timer(monkeypatch, {"tsm2r": 1e-3, "xla": 2e-3})
    a, b = (S(s, R_SHAPE[2]) for s in R_SHAPE[:2])
    traces = []

    @jax.jit
    def f(x, y):
        traces.append(jax_tsm2.get_autotune())
        return jax_tsm2.matmul(x, y)

    def cuda_text():
        return f.trace(a, b).lower(lowering_platforms=("cuda",)).as_text()

    assert not has_custom_call(cuda_text()) and timer.calls == []
    with jax_tsm2.autotune():
        assert has_custom_call(cuda_text()) and len(timer.calls) == 2
    assert traces == [False, True]
    x, y = jnp.ones((64, 32)), jnp.ones((32, 8))  # on CPU: XLA's dot either way, no timing
    f(x, y)
    jax_tsm2.set_autotune(True)
    f(x, y)
    jax_tsm2.set_autotune(False)
    f(x, y)
    assert traces[2:] == [False, True] and len(timer.calls) == 2


def test_a_real_timer_runs_inside_the_lowering(monkeypatch):
    """GpuTimer jits and runs each candidate while the user's program is being lowered (here
    on CPU, the kernels being the FFI target's reference loops): the lowering survives it
    and emits what the stored entry says."""
    monkeypatch.setattr(online, "timer", tuner.GpuTimer(samples=1, max_reps=2))
    a, b = S((4096, 32), jnp.float32), S((32, 8), jnp.float32)
    with jax_tsm2.autotune():
        text = jax.jit(jax_tsm2.matmul).trace(a, b).lower(lowering_platforms=("cuda",)).as_text()
    (entry,) = cache_entries().values()
    assert set(entry["seconds"]) == {"tsm2l", "tsm2r", "xla"}
    assert has_custom_call(text) == (entry["target"] != "xla")


# -- the switch ----------------------------------------------------------------------------


def test_switch_default_setter_config_and_context_manager():
    if os.environ.get("JAX_TSM2_AUTOTUNE"):
        pytest.skip("JAX_TSM2_AUTOTUNE is set in this environment")
    assert jax_tsm2.get_autotune() is False
    jax_tsm2.set_autotune(True)
    assert jax_tsm2.get_autotune() is True
    jax.config.update("jax_tsm2_autotune", False)
    assert jax_tsm2.get_autotune() is False
    with jax_tsm2.autotune():
        assert jax_tsm2.get_autotune() is True
        with pytest.raises(RuntimeError), jax_tsm2.autotune(False):
            assert jax_tsm2.get_autotune() is False
            raise RuntimeError("boom")
        assert jax_tsm2.get_autotune() is True
        seen = []
        t = threading.Thread(target=lambda: seen.append(jax_tsm2.get_autotune()))
        t.start()
        t.join()
        assert seen == [False]  # thread-local
    assert jax_tsm2.get_autotune() is False


@pytest.mark.parametrize("bad", ["on", 1, None])
def test_switch_rejects_non_bools(bad):
    with pytest.raises(TypeError, match="True or False"):
        jax_tsm2.set_autotune(bad)
    with pytest.raises(TypeError, match="True or False"), jax_tsm2.autotune(bad):
        pass


def _run_with_env(value: str):
    return import_with_env("JAX_TSM2_AUTOTUNE", value, "jax_tsm2.get_autotune()")


@pytest.mark.parametrize("value,on", [("1", True), ("off", False), ("True", True)])
def test_environment_variable(value, on):
    out = _run_with_env(value)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(on)


def test_bad_environment_variable_says_what_to_set():
    out = _run_with_env("sometimes")
    assert out.returncode != 0
    assert "JAX_TSM2_AUTOTUNE='sometimes'" in out.stderr and "set it to 1" in out.stderr
