"""The fused step's per-row distance check (``tsm2_kmeans_step_checked``) through its CPU
reference target: clean data never fails it, a flipped distance that matters is detected,
and fault-tolerant runs with an in-kernel distance fault end as the clean run does."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tsm2
from jax_tsm2.clustering import fused, kmeans
from jax_tsm2.clustering.faults import FaultSpec

KINDS = ("normal", "uniform", "blobs", "offset")


def _data(kind: str, n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "normal":
        return rng.normal(size=(n, d))
    if kind == "uniform":
        return rng.uniform(0.0, 3.0, size=(n, d))
    if kind == "blobs":
        centers = rng.normal(scale=6.0, size=(7, d))
        return centers[rng.integers(0, 7, n)] + rng.normal(size=(n, d))
    return 1e3 + rng.normal(size=(n, d))  # a large common offset


def _centred(kind: str, n: int, d: int, seed: int) -> jnp.ndarray:
    """The data as ``kmeans`` hands it to the step: centred on its mean. The check's
    threshold grows with ``||x||^2 + ||c||^2``, so a large common offset left in would
    hide distances (as it hides them from the f32 distances themselves)."""
    x = _data(kind, n, d, seed)
    return jnp.asarray(x - x.mean(axis=0), jnp.float32)


def _step(x, c, inject=None):
    with jax_tsm2.custom_call_mode("always"):
        return fused.ffi_step_checked(x, c, jnp.ones(x.shape[0], x.dtype), inject, check=False)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("d", [1, 3, 64, 257])
@pytest.mark.parametrize("k", [1, 2, 16, 31])
def test_clean_steps_never_fail_and_match_the_plain_step(kind, d, k):
    x = jnp.asarray(_data(kind, 301, d, seed=d * 100 + k), jnp.float32)
    rng = np.random.default_rng(k)
    c = x[rng.choice(301, k, replace=False)] + 0.1 * jnp.asarray(rng.normal(size=(k, d)), x.dtype)
    s, faults, margin = _step(x, c)
    assert int(faults) == 0
    assert 0 <= float(margin) < 0.5, float(margin)
    with jax_tsm2.custom_call_mode("always"):
        plain = fused.ffi_step(x, c, jnp.ones(301, jnp.float32), check=False)
    for a, b in zip(s, plain, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_float64_clean_and_flipped():
    x = jnp.asarray(_data("blobs", 200, 33, 1))
    with jax.enable_x64(True):
        x = jnp.asarray(_data("blobs", 200, 33, 1), jnp.float64)
        c = x[:9]
        _, faults, margin = _step(x, c)
        assert int(faults) == 0 and float(margin) < 0.5
        _, faults, _ = _step(x, c, jnp.array([1, 50, 4, 60], jnp.int32))
        assert int(faults) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_high_bit_flips_are_detected_or_change_nothing(kind):
    d, k, n = 40, 16, 257
    x = _centred(kind, n, d, seed=7)
    c = x[:k] + 0.05
    clean, _, _ = _step(x, c)
    rng = np.random.default_rng(11)
    dist = np.asarray(
        jnp.sum(x * x, 1)[:, None] - 2 * x @ c.T + jnp.sum(c * c, 1)[None], np.float64
    )
    missed = 0
    for bit in [22, 21, 20, *range(23, 32)]:
        for _ in range(6):
            row, j = int(rng.integers(n)), int(rng.integers(k))
            s, faults, _ = _step(x, c, jnp.array([1, row, j, bit], jnp.int32))
            if int(faults) == 0:
                missed += 1
                # Undetected: the row kept its cluster (the flip was below the threshold).
                np.testing.assert_array_equal(np.asarray(s.labels), np.asarray(clean.labels))
            else:
                assert int(faults) == 1
        # An inactive injection is the clean step.
    s, faults, _ = _step(x, c, jnp.array([0, 3, 2, 30], jnp.int32))
    assert int(faults) == 0
    np.testing.assert_array_equal(np.asarray(s.labels), np.asarray(clean.labels))
    # Distances far above the threshold: every flip of a high bit is seen.
    assert missed == 0, (missed, float(dist.min()))


def test_lowest_mantissa_bit_is_detected_or_masked():
    x = jnp.asarray(_data("normal", 200, 24, 3), jnp.float32)
    c = x[:6]
    clean, _, _ = _step(x, c)
    for row in range(0, 200, 23):
        for j in range(6):
            s, faults, _ = _step(x, c, jnp.array([1, row, j, 0], jnp.int32))
            if int(faults) == 0:
                np.testing.assert_array_equal(np.asarray(s.labels), np.asarray(clean.labels))


@pytest.mark.parametrize("bit", [30, 26, 23, 22])
def test_run_with_an_in_kernel_distance_fault_ends_as_the_clean_run(bit):
    x = jnp.asarray(_data("blobs", 600, 12, 5), jnp.float32)
    key = jax.random.key(0)
    with jax_tsm2.custom_call_mode("always"):
        clean = kmeans(key, x, 7, max_iter=30, fault_tolerance=True)
        assert int(clean.faults_detected) == 0
        rng = np.random.default_rng(bit)
        detected = 0
        for _ in range(3):
            spec = FaultSpec(
                iteration=int(rng.integers(0, min(3, int(clean.n_iter)))), kind="distance",
                index=int(rng.integers(600)), column=int(rng.integers(7)), bit=bit,
            )  # fmt: skip
            f = kmeans(key, x, 7, max_iter=30, fault_tolerance=True, fault_injection=spec)
            # A flip of a tiny distance can stay below the threshold; then it changed nothing.
            assert int(f.faults_detected) <= 1 and not bool(f.fault_unresolved)
            detected += int(f.faults_detected)
            np.testing.assert_array_equal(np.asarray(f.labels), np.asarray(clean.labels))
            np.testing.assert_array_equal(np.asarray(f.centroids), np.asarray(clean.centroids))
        assert detected >= 2
