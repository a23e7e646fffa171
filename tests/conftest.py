"""Shared pytest setup: float64 on, a deterministic hypothesis profile, the `gpu` marker.

- x64 is enabled for the whole suite so that float64 is a real dtype under test
  (and the reference for the others).
- Hypothesis runs the "ci" profile by default: derandomized (the same examples
  every run, so CI is deterministic) and modest in size. Set
  HYPOTHESIS_PROFILE=dev locally for more, randomized examples.
- Tests marked `gpu` are skipped unless this process has a CUDA device and the
  extension was built with the CUDA targets.
- The autotuner's cache directory points at an empty temporary directory, so
  that routing in mode "auto" never depends on the machine's own tune cache.
"""

from __future__ import annotations

import os

import jax
import pytest
from hypothesis import HealthCheck, settings

jax.config.update("jax_enable_x64", True)

import jax_tsm2  # noqa: E402  (after x64: importing registers the FFI targets)
from jax_tsm2 import _ffi  # noqa: E402

settings.register_profile(
    "ci",
    max_examples=12,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def gpu_unavailable_reason() -> str | None:
    if not _ffi.cuda_backend_present():
        return "no CUDA device in this process"
    if not _ffi.cuda_targets_available():
        return "jax_tsm2 was built without the CUDA targets (TSM2_CUDA=OFF?)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = gpu_unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _empty_tune_cache(tmp_path_factory, monkeypatch):
    from jax_tsm2.tune import cache

    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path_factory.mktemp("tune_cache")))


@pytest.fixture(autouse=True)
def _restore_custom_call_mode():
    """A test that sets the global mode or autotune switch must not leak it into the next."""
    before, autotune = jax_tsm2.get_custom_call_mode(), jax_tsm2.get_autotune()
    yield
    jax_tsm2.set_custom_call_mode(before)
    jax_tsm2.set_autotune(autotune)
