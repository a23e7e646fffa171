"""kmeans(fault_tolerance=True) through the CUDA kernels: no false positives on clean runs of
the fused step (k <= 32, f32/bf16/f16/f64, tensor-core and CUDA-core variants) and of the tiled
step (any k, both precisions), the result of the run without it, and each kind of injected
fault detected and corrected.

Skipped without a CUDA device and a CUDA build (conftest.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_tsm2 import _ffi
from jax_tsm2.clustering import checksums, fused, kmeans
from jax_tsm2.clustering import core as kcore
from jax_tsm2.clustering.faults import FaultSpec

pytestmark = pytest.mark.gpu


def _blobs(n, d, k, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=4.0, size=(k, d))
    return centers[rng.integers(0, k, n)] + rng.normal(size=(n, d))


CASES = [  # n, d, k, dtype, precision: the kernel each takes in mode "auto"
    (200_000, 256, 16, jnp.float32, "float32"),  # fused, tensor cores
    (50_000, 1024, 16, jnp.float32, "float32"),  # fused, a cluster of blocks per row
    (100_000, 40, 7, jnp.float32, "float32"),  # fused, CUDA cores
    (200_000, 256, 16, jnp.bfloat16, "float32"),
    (100_000, 128, 16, jnp.float16, "float32"),
    (50_000, 64, 16, jnp.float64, "float32"),
    (100_000, 128, 300, jnp.float32, "float32"),  # tiled
    (100_000, 128, 300, jnp.float32, "tensorfloat32"),
    (100_000, 512, 64, jnp.bfloat16, "float32"),  # tiled
    (100_000, 64, 300, jnp.float16, "float32"),  # tiled
]


@pytest.mark.parametrize(("n", "d", "k", "dtype", "precision"), CASES)
def test_clean_runs_through_the_kernels(n, d, k, dtype, precision):
    x = jnp.asarray(_blobs(n, d, k), dtype)
    for seed in range(2):
        key = jax.random.key(seed)
        plain = kmeans(key, x, k, max_iter=30, precision=precision)
        ft = kmeans(key, x, k, max_iter=30, precision=precision, fault_tolerance=True)
        assert int(ft.faults_detected) == 0 and not bool(ft.fault_unresolved)
        np.testing.assert_array_equal(np.asarray(ft.labels), np.asarray(plain.labels))
        np.testing.assert_array_equal(np.asarray(ft.centroids), np.asarray(plain.centroids))
    ratios = np.asarray(kcore._check_ratios(key, x, k=k, iters=10, precision=precision))
    assert np.all(np.isfinite(ratios)) and ratios.max() < 0.25, ratios.max(axis=0)
    target = fused.decide_step(dtype, d, k, platform="cuda").target
    assert target in ("fused", "tiled"), target


@pytest.mark.parametrize("k", [16, 300])
def test_faults_detected_and_corrected_through_the_kernels(k):
    # 20,000 rows: the distance identity's threshold grows as n^1.5 (the cluster sums'
    # rounding), and at 1e5 rows it passes a lowered distance of one row unseen.
    x = jnp.asarray(_blobs(20_000, 64, k), jnp.float32)
    key, init = jax.random.key(0), x[:k]
    ref = kmeans(key, x, k, init=init, max_iter=10, tol=0.0)
    labels = np.asarray(ref.labels)
    # Row 1000 (not an initial centroid, whose distance 0 nothing can undercut) and its
    # label in the first iteration.
    first = int(kcore.assign(x, init)[0][1000])
    for spec in (
        FaultSpec(2, "sum", 3, 5, 28),
        FaultSpec(1, "count", 2, 0, 27),
        FaultSpec(0, "distance", 1000, (first + 1) % k, 30),  # lowered to (almost) zero
        FaultSpec(-1, "sum", 0, 0, 29),
    ):
        f = kmeans(key, x, k, init=init, max_iter=10, tol=0.0, fault_tolerance=True,
                   fault_injection=spec)  # fmt: skip
        assert int(f.faults_detected) == 1 and not bool(f.fault_unresolved), spec
        np.testing.assert_array_equal(np.asarray(f.labels), labels)
        np.testing.assert_allclose(np.asarray(f.centroids), np.asarray(ref.centroids), atol=1e-5)
    spec = FaultSpec(1, "sum", 0, 0, 29, persistent=True)
    f = kmeans(key, x, k, init=init, max_iter=10, fault_tolerance=True, fault_injection=spec)
    assert bool(f.fault_unresolved) and int(f.faults_detected) == checksums.MAX_REDOS + 1


@pytest.mark.parametrize(
    ("d", "k"),
    [
        (1, 1),
        (3, 2),
        (12, 3),
        (40, 8),
        (64, 16),
        (64, 24),
        (257, 31),
        (256, 16),
        (128, 20),
        (509, 13),
        (4096, 16),
    ],
)
@pytest.mark.parametrize("kind", ["normal", "uniform", "blobs"])
def test_row_check_clean_and_flipped_through_the_kernels(d, k, kind):
    """The checked kernels (CUDA cores, tensor cores for d <= 256) never fail a clean row,
    return the plain step's results, and see a flipped high bit of one distance."""
    rng = np.random.default_rng(d + k)
    x = rng.normal(size=(5003, d))
    if kind == "uniform":
        x = rng.uniform(0, 3, size=(5003, d))
    elif kind == "blobs":
        x = rng.normal(scale=6, size=(7, d))[rng.integers(0, 7, 5003)] + x
    x = jnp.asarray(x - x.mean(axis=0), jnp.float32)
    c = x[rng.choice(5003, k, replace=False)] + 0.05
    w = jnp.ones(5003, jnp.float32)
    s, faults, margin = fused.ffi_step_checked(x, c, w)
    assert int(faults) == 0 and 0 <= float(margin) < 0.5, float(margin)
    plain = fused.ffi_step(x, c, w)
    for a, b in zip(s, plain, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for bit in (30, 26, 23, 22, 21):
        row, j = int(rng.integers(5003)), int(rng.integers(k))
        f, faults, _ = fused.ffi_step_checked(x, c, w, jnp.array([1, row, j, bit], jnp.int32))
        if int(faults) == 0:  # below the threshold: the row kept its cluster
            np.testing.assert_array_equal(np.asarray(f.labels), np.asarray(s.labels))
        else:
            assert int(faults) == 1


def _row_check_data(n, d, k, kind, seed):
    """Centred f32 rows (normal, uniform or blobs), k centroids near rows, unit weights."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    if kind == "uniform":
        x = rng.uniform(0, 3, size=(n, d))
    elif kind == "blobs":
        x = rng.normal(scale=6, size=(7, d))[rng.integers(0, 7, n)] + x
    x = jnp.asarray(x - x.mean(axis=0), jnp.float32)
    c = x[rng.choice(n, k, replace=False)] + 0.05
    return x, c, jnp.ones(n, jnp.float32)


# The wide-row tensor-core step's shapes (f32, d % 4 == 0, 260 <= d <= 4096, k 9..16):
# clusters of 1 (d <= 512), 2, 4 (the last block 4 columns wide) and 8 blocks.
WIDE_D = [260, 508, 1024, 1540, 4096]
WIDE_K = [9, 13, 16]


@pytest.mark.parametrize("d", WIDE_D)
@pytest.mark.parametrize("k", WIDE_K)
def test_wide_row_step_plans_the_wide_kernel_for_the_checked_target(d, k):
    """The checked and injecting targets plan the wide-row kernel where the plain one does:
    the checked step's outputs are the plain step's bit for bit (the CUDA-core step's differ
    in rounding), and kmeans(fault_tolerance=True) routes to the checked target."""
    assert _ffi.kmeans_plan(jnp.float32, 5003, d, k)["step"] == "tensor_cores_cluster"
    assert fused.decide_step(jnp.float32, d, k, platform="cuda").target == "fused"
    # d = 509 (no whole 16-byte chunks) is not a wide-row shape: the CUDA-core step.
    assert _ffi.kmeans_plan(jnp.float32, 5003, 509, k)["step"] == "cuda_cores"


@pytest.mark.parametrize("d", WIDE_D)
@pytest.mark.parametrize("k", WIDE_K)
@pytest.mark.parametrize("kind", ["normal", "uniform", "blobs"])
def test_wide_row_check_clean_runs_equal_the_plain_step(d, k, kind):
    """The checked wide-row step fails no clean row and returns the plain step's labels,
    distances, sums, counts and inertia bit for bit (the same kernel, the same order); an
    inactive injection changes nothing. 5003 rows: the last tile is part-filled."""
    x, c, w = _row_check_data(5003, d, k, kind, d + 7 * k)
    plain = fused.ffi_step(x, c, w)
    for inject in (None, jnp.array([0, 17, 1, 30], jnp.int32)):
        s, faults, margin = fused.ffi_step_checked(x, c, w, inject)
        assert int(faults) == 0 and 0 <= float(margin) < 1, float(margin)
        for a, b in zip(s, plain, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _raising_bit(v: float) -> int:
    """The highest clear exponent bit of f32 v below the top one: setting it multiplies v
    by at least 4 (bit 24) and at most 2^64 (bit 29)."""
    bits = int(np.float32(v).view(np.int32))
    return next(b for b in range(29, 23, -1) if not (bits >> b) & 1)


@pytest.mark.parametrize("d", WIDE_D)
@pytest.mark.parametrize("k", WIDE_K)
def test_wide_row_check_sees_injected_flips(d, k):
    """A flipped exponent bit of one distance, before the check and the argmin: bit 30 of a
    distance >= 2 to another centroid makes it (almost) zero, so the row moves there; a
    clear exponent bit of the distance to its own centroid raises it. The row check counts
    exactly that row, and every other row keeps its label."""
    n = 5003
    x, c, w = _row_check_data(n, d, k, "blobs", d + 7 * k)
    plain = fused.ffi_step(x, c, w)
    labels, mind = np.asarray(plain.labels), np.asarray(plain.mind)
    # Rows of the first, a middle and the last (part-filled) tile, and of tiles that other
    # ranks of a cluster label.
    for first in (0, 5, 16 * 3 + 11, 16 * 7 + 4, n // 2, n - 3):
        # Not a row the centroids were taken from (its distance ~0.05^2 d has bit 30 clear).
        row = next(r for r in range(first, n) if mind[r] >= 2)
        own = int(labels[row])
        other = (own + 1 + row % (k - 1)) % k
        for j, bit in ((other, 30), (own, _raising_bit(mind[row]))):
            inject = jnp.array([1, row, j, bit], jnp.int32)
            s, faults, _ = fused.ffi_step_checked(x, c, w, inject)
            assert int(faults) == 1, (row, j, bit)
            got = np.asarray(s.labels)
            if j == other:
                assert got[row] == other, (row, got[row], other)
            np.testing.assert_array_equal(np.delete(got, row), np.delete(labels, row))


def test_wide_row_fault_tolerance_sees_a_distance_fault():
    """kmeans(fault_tolerance=True) at a wide-row shape runs the checked wide kernel: a
    distance lowered inside it is detected and the run ends as the clean one."""
    rng = np.random.default_rng(5)
    x = rng.normal(scale=6, size=(7, 1024))[rng.integers(0, 7, 20000)]
    x = jnp.asarray(x + rng.normal(size=x.shape), jnp.float32)
    key = jax.random.key(0)
    clean = kmeans(key, x, 16, max_iter=20, fault_tolerance=True)
    assert int(clean.faults_detected) == 0
    spec = FaultSpec(iteration=0, kind="distance", index=123, column=5, bit=30)
    f = kmeans(key, x, 16, max_iter=20, fault_tolerance=True, fault_injection=spec)
    assert int(f.faults_detected) == 1 and not bool(f.fault_unresolved)
    np.testing.assert_array_equal(np.asarray(f.labels), np.asarray(clean.labels))
    np.testing.assert_array_equal(np.asarray(f.centroids), np.asarray(clean.centroids))


@pytest.mark.parametrize("bit", [30, 23, 22])
def test_in_kernel_distance_fault_runs_end_as_the_clean_run(bit):
    rng = np.random.default_rng(bit)
    x = jnp.asarray(rng.normal(scale=6, size=(7, 256))[rng.integers(0, 7, 20000)], jnp.float32)
    x = x + jnp.asarray(rng.normal(size=x.shape), jnp.float32)
    key = jax.random.key(0)
    clean = kmeans(key, x, 16, max_iter=30, fault_tolerance=True)
    assert int(clean.faults_detected) == 0
    spec = FaultSpec(iteration=0, kind="distance", index=123, column=5, bit=bit)
    f = kmeans(key, x, 16, max_iter=30, fault_tolerance=True, fault_injection=spec)
    assert int(f.faults_detected) <= 1 and not bool(f.fault_unresolved)
    np.testing.assert_array_equal(np.asarray(f.labels), np.asarray(clean.labels))
    np.testing.assert_array_equal(np.asarray(f.centroids), np.asarray(clean.centroids))
