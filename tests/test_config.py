"""The custom-call switch: environment variable, setter, context manager, jit cache key."""

from __future__ import annotations

import os
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import ffi_matmul, import_with_env

import jax_tsm2


def test_default_is_auto():
    if os.environ.get("JAX_TSM2_CUSTOM_CALL"):
        pytest.skip("JAX_TSM2_CUSTOM_CALL is set in this environment")
    assert jax_tsm2.get_custom_call_mode() == "auto"


def test_setter_and_jax_config():
    jax_tsm2.set_custom_call_mode("never")
    assert jax_tsm2.get_custom_call_mode() == "never"
    jax.config.update("jax_tsm2_custom_call", "always")
    assert jax_tsm2.get_custom_call_mode() == "always"


def test_context_manager_nests_and_restores_on_error():
    jax_tsm2.set_custom_call_mode("auto")
    with jax_tsm2.custom_call_mode("always"):
        assert jax_tsm2.get_custom_call_mode() == "always"
        with pytest.raises(RuntimeError), jax_tsm2.custom_call_mode("never"):
            assert jax_tsm2.get_custom_call_mode() == "never"
            raise RuntimeError("boom")
        assert jax_tsm2.get_custom_call_mode() == "always"
    assert jax_tsm2.get_custom_call_mode() == "auto"


def test_context_manager_is_thread_local():
    seen = []
    with jax_tsm2.custom_call_mode("always"):
        t = threading.Thread(target=lambda: seen.append(jax_tsm2.get_custom_call_mode()))
        t.start()
        t.join()
    assert seen == ["auto"]


@pytest.mark.parametrize("bad", ["ALWAYS", "on", "", None, 1])
def test_invalid_modes_are_rejected(bad):
    with pytest.raises(ValueError, match="auto"):
        jax_tsm2.set_custom_call_mode(bad)
    with pytest.raises(ValueError, match="auto"), jax_tsm2.custom_call_mode(bad):
        pass


def _run_with_env(value: str):
    return import_with_env("JAX_TSM2_CUSTOM_CALL", value, "jax_tsm2.get_custom_call_mode()")


def test_environment_variable():
    out = _run_with_env("always")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "always"


def test_bad_environment_variable_names_the_variable():
    out = _run_with_env("sometimes")
    assert out.returncode != 0
    assert "JAX_TSM2_CUSTOM_CALL" in out.stderr and "'sometimes'" in out.stderr


def _ffi_reference(a, b):
    """The CPU FFI target called directly: what mode 'always' must compute, bit for bit."""
    return ffi_matmul(a, b, kernel=0)


def test_flipping_the_switch_recompiles_a_jitted_function():
    """The mode is part of jit's cache key: no stale executable after a flip.

    XLA's dot and the plain-loop reference target add in different orders, so
    on wide-ranging data their f32 results differ in the last bits; each call's
    result shows which executable ran.
    """
    rng = np.random.default_rng(7)
    a = jnp.asarray(rng.standard_normal((16, 2048)) * 10 ** rng.uniform(-3, 3, (16, 2048)), "f4")
    b = jnp.asarray(rng.standard_normal((2048, 4)), "f4")
    via_xla = np.asarray(jax.jit(jnp.matmul)(a, b))
    via_ffi = np.asarray(jax.jit(_ffi_reference)(a, b))
    assert (via_xla != via_ffi).any(), "test data does not tell the two paths apart"

    traces = []

    @jax.jit
    def f(x, y):
        traces.append(jax_tsm2.get_custom_call_mode())
        return jax_tsm2.matmul(x, y)

    with jax_tsm2.custom_call_mode("never"):
        np.testing.assert_array_equal(np.asarray(f(a, b)), via_xla)
        assert "custom_call" not in f.lower(a, b).as_text()
    with jax_tsm2.custom_call_mode("always"):
        np.testing.assert_array_equal(np.asarray(f(a, b)), via_ffi)
        assert "stablehlo.custom_call @tsm2_matmul" in f.lower(a, b).as_text()
    with jax_tsm2.custom_call_mode("never"):
        np.testing.assert_array_equal(np.asarray(f(a, b)), via_xla)  # cached, not stale
    jax_tsm2.set_custom_call_mode("always")  # the global setter takes part too
    np.testing.assert_array_equal(np.asarray(f(a, b)), via_ffi)
    # One trace per mode, reused when a mode comes back.
    assert traces.count("never") == 1 and traces.count("always") == 1


def test_flipping_the_switch_changes_eager_dispatch():
    """Op-by-op calls (the primitive's impl) follow the switch too."""
    rng = np.random.default_rng(7)
    a = jnp.asarray(rng.standard_normal((16, 2048)) * 10 ** rng.uniform(-3, 3, (16, 2048)), "f4")
    b = jnp.asarray(rng.standard_normal((2048, 4)), "f4")
    via_xla = np.asarray(jnp.matmul(a, b))
    via_ffi = np.asarray(jax.jit(_ffi_reference)(a, b))
    with jax_tsm2.custom_call_mode("never"):
        np.testing.assert_array_equal(np.asarray(jax_tsm2.matmul(a, b)), via_xla)
    with jax_tsm2.custom_call_mode("always"):
        np.testing.assert_array_equal(np.asarray(jax_tsm2.matmul(a, b)), via_ffi)
