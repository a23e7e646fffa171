"""GPU numerics of the fused Lloyd step (ffi/kmeans/kernels/kmeans.cuh) against a float64 reference.

Skipped without a CUDA device and a CUDA build (conftest.py). The cases of
test_kmeans_fused.py (odd sizes, ties, NaN, weights), every kernel variant
(element type x k padded to 4..32 x row class of 32..2048 vectors, which is
one warp per row, several warps, or a thread-block cluster per row) at its
largest shape and at an odd one (the element-wise load path), n = 1 and
primes, large n, fewer blocks than the GPU holds (a small workspace), bitwise
reproducibility, and k-means through the kernel against the jnp path. The f32
tensor-core steps (kmeans_mma.cuh: 64 <= d <= 256, and kmeans_wide.cuh: 260 <= d
<= 4096 over a thread-block cluster; d % 4 == 0, k >= 9) get their own sizes,
data far from the origin, and NaN/Inf rows, weights and centroids against the
CPU target (the same formulas in plain f32 loops).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import FLOAT_DTYPES
from _kmeans_reference import check_step, data

import jax_tsm2
from jax_tsm2 import _ffi
from jax_tsm2.clustering import core, fused, kmeans, lloyd_step

pytestmark = pytest.mark.gpu
dtype_ids = lambda d: jnp.dtype(d).name

_step = jax.jit(fused.ffi_step)


def _supported(dtype, d, k):
    return fused.fused_supported(dtype, d, k)


@pytest.mark.parametrize("d", (1, 3, 17, 33, 256, 1000, 4096, 4099))
@pytest.mark.parametrize("k", (1, 2, 5, 16, 32))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_kernel_matches_float64_reference(dtype, d, k):
    if not _supported(dtype, d, k):
        pytest.skip(f"the kernel does not take {jnp.dtype(dtype).name} d={d} k={k}")
    rng = np.random.default_rng(d * 100 + k)
    x, c, w = data(rng, 1009, d, k, dtype)
    check_step(_step(x, c, w), x, c, w)


@pytest.mark.parametrize("n", (1, 2, 31, 97, 4099))
@pytest.mark.parametrize(("d", "k"), [(3, 5), (256, 16), (1000, 7), (4096, 16)])
def test_odd_n(n, d, k):
    rng = np.random.default_rng(n + d + k)
    x, c, w = data(rng, n, d, k, jnp.float32)
    check_step(_step(x, c, w), x, c, w)


def _variants():
    out = []
    for dtype in FLOAT_DTYPES:
        per_vec = 2 if jnp.dtype(dtype).itemsize == 8 else 4  # elements per vector
        for kp in (4, 8, 16, 32):
            for cls in range(7):
                dc = min((32 << cls) * per_vec, 4096)
                if (32 << cls) * per_vec > 4096 * 2 or not _supported(dtype, dc, kp):
                    continue
                for d, k in ((dc, kp), (dc // 2 + 1, kp // 2 + 1)):
                    out.append(pytest.param(dtype, d, k, id=f"{jnp.dtype(dtype).name}-d{d}-k{k}"))
    return sorted(set(out), key=lambda p: p.id)


@pytest.mark.parametrize(("dtype", "d", "k"), _variants())
def test_every_variant(dtype, d, k):
    rng = np.random.default_rng(d + 7 * k)
    x, c, w = data(rng, 4099, d, k, dtype)
    check_step(_step(x, c, w), x, c, w)


@pytest.mark.parametrize(
    ("dtype", "d", "k"),
    [(jnp.float32, 256, 16), (jnp.float32, 1000, 32), (jnp.float32, 3, 5), (jnp.float64, 256, 16),
     (jnp.bfloat16, 512, 16), (jnp.float32, 4096, 16), (jnp.float16, 2050, 32)],
    ids=["f32-256-16", "f32-1000-32", "f32-3-5", "f64-256-16", "bf16-512-16", "f32-4096-16",
         "f16-2050-32"],
)  # fmt: skip
def test_large_n(dtype, d, k):
    rng = np.random.default_rng(11)
    x, c, w = data(rng, 100_001, d, k, dtype)
    check_step(_step(x, c, w), x, c, w)


def test_ties_and_nan_as_jnp():
    c = jnp.array([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, 5.0]], jnp.float32)
    x = jnp.array([[0.0, 0.0], [0.0, 3.0], [1.0, 0.0], [2.0, 0.0], [-1.0, 0.0]], jnp.float32)
    s = lloyd_step(x, c, impl="ffi")
    assert s.labels.tolist() == [0, 3, 0, 0, 1]
    np.testing.assert_array_equal(np.asarray(s.mind), [1.0, 4.0, 0.0, 1.0, 0.0])
    xn = x.at[1, 0].set(np.nan)
    assert lloyd_step(xn, c, impl="ffi").labels.tolist() == [0, 0, 0, 0, 1]
    assert np.isnan(float(lloyd_step(xn, c, impl="ffi").mind[1]))


@pytest.mark.parametrize("d", (256, 1000, 4096))
def test_bitwise_reproducible(d):
    rng = np.random.default_rng(3)
    x, c, w = data(rng, 200_003 if d < 4096 else 50_021, d, 16, jnp.float32)
    a, b = _step(x, c, w), _step(x, c, w)
    for f in a._fields:
        np.testing.assert_array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)))


@pytest.mark.parametrize("d", (64, 4096))  # one warp per row; a cluster per row
def test_small_workspace_uses_fewer_blocks(d):
    rng = np.random.default_rng(4)
    n, k = 50_021 if d < 4096 else 5_003, 8
    x, c, w = data(rng, n, d, k, jnp.float32)
    per_block = (k * d + k + 1) * 4
    shapes = (
        jax.ShapeDtypeStruct((n,), jnp.int32),
        jax.ShapeDtypeStruct((n,), jnp.float32),
        jax.ShapeDtypeStruct((k, d), jnp.float32),
        jax.ShapeDtypeStruct((k,), jnp.float32),
        jax.ShapeDtypeStruct((), jnp.float32),
        jax.ShapeDtypeStruct((3 * per_block,), jnp.uint8),
    )
    out = jax.jit(lambda x, c, w: jax.ffi.ffi_call(_ffi.KMEANS_TARGET, shapes)(x, c, w))(x, c, w)
    check_step(fused.LloydStep(*out[:5]), x, c, w)


def test_unsupported_shape_falls_back_to_the_jnp_path():
    # The FFI call itself refuses it at trace time (test_kmeans_fused.py): an
    # error returned by a CUDA handler has crashed jax 0.11.
    x, c = jnp.ones((100, 4097), jnp.float32), jnp.ones((4, 4097), jnp.float32)
    s = lloyd_step(x, c)
    assert s.labels.tolist() == [0] * 100 and float(s.counts[0]) == 100.0


def test_kmeans_through_the_kernel_matches_the_jnp_path():
    rng = np.random.default_rng(9)
    centres = rng.normal(scale=6.0, size=(16, 64))
    x = jnp.asarray(centres[rng.integers(0, 16, 60_013)] + rng.normal(size=(60_013, 64)))
    init = x[:16]
    with jax_tsm2.custom_call_mode("never"):
        ref = kmeans(jax.random.key(0), x, 16, init=init, max_iter=30)
    got = kmeans(jax.random.key(0), x, 16, init=init, max_iter=30)
    np.testing.assert_array_equal(np.asarray(got.labels), np.asarray(ref.labels))
    np.testing.assert_allclose(np.asarray(got.centroids), np.asarray(ref.centroids), rtol=1e-10)
    assert int(got.n_iter) == int(ref.n_iter)


# The f32 tensor-core step: every row class (64, 128, 256), one and two
# 16-centroid tiles, d just past a class and not a multiple of 16.
# Past d = 64 the CUDA-core step takes k < 9.
@pytest.mark.parametrize(
    ("d", "k"),
    [
        (d, k)
        for d in (4, 12, 16, 36, 60, 64, 68, 100, 128, 132, 200, 252, 256)
        for k in (1, 3, 8, 9, 16, 17, 32)
        if k >= 9 or d <= 64
    ],
)
def test_tensor_core_step_matches_float64_reference(d, k):
    assert _ffi.kmeans_plan(jnp.float32, 4099, d, k)["step"] == "tensor_cores"
    rng = np.random.default_rng(d * 37 + k)
    x, c, w = data(rng, 4099, d, k, jnp.float32)
    check_step(_step(x, c, w), x, c, w)


# The cluster step for wide rows (kmeans_wide.cuh): clusters of 1 to 8
# blocks of 512 columns, the last one part-filled, k from 9 to 16.
@pytest.mark.parametrize("d", (260, 388, 512, 516, 1000, 1024, 1028, 1536, 2052, 3000, 4092, 4096))
@pytest.mark.parametrize("k", (9, 13, 16))
def test_cluster_step_matches_float64_reference(d, k):
    assert _ffi.kmeans_plan("float32", 1, d, k)["step"] == "tensor_cores_cluster"
    rng = np.random.default_rng(d * 37 + k)
    x, c, w = data(rng, 2053, d, k, jnp.float32)
    check_step(_step(x, c, w), x, c, w)


@pytest.mark.parametrize(
    ("n", "d"),
    [
        (1, 256),
        (63, 256),
        (64, 256),
        (65, 256),
        (1000, 256),
        (100_003, 256),
        (1, 4096),
        (15, 4096),
        (16, 4096),
        (17, 4096),
        (241, 2048),
        (30_011, 4096),
        (17, 260),
        (4_099, 772),
    ],
)
def test_tensor_core_step_odd_n(n, d):
    # Tiles of 16 rows for the cluster step, split between 15 or more clusters.
    rng = np.random.default_rng(n)
    x, c, w = data(rng, n, d, 16, jnp.float32)
    check_step(_step(x, c, w), x, c, w)


@pytest.mark.parametrize("d", (256, 4096))
@pytest.mark.parametrize("offset", (0.0, 30.0))
def test_tensor_core_step_keeps_f32_accuracy(d, offset):
    # check_step's bound allows for any f32 summation order; this one is 8x
    # tighter on the distances (32 eps (||x||^2 + ||c||^2), typical f32 error
    # being ~sqrt(d) eps), which an operand split that dropped a cross term
    # (errors of ~2^-11 per product) or plain TF32 would exceed.
    rng = np.random.default_rng(5)
    x, c, w = data(rng, 8009 if d <= 256 else 1009, d, 16, jnp.float32)
    x, c = x + offset, c + offset
    s = _step(x, c, w)
    x64, c64 = np.asarray(x, np.float64), np.asarray(c, np.float64)
    labels = np.asarray(s.labels)
    dist = ((x64[:, None, :] - c64[None, :, :]) ** 2).sum(-1)
    scale = (x64**2).sum(1) + (c64**2).sum(1).max()
    eps = float(np.finfo(np.float32).eps)
    chosen = dist[np.arange(len(labels)), labels]
    assert (chosen <= dist.min(1) + 64 * eps * scale).all()
    err = np.abs(np.asarray(s.mind, np.float64) - chosen) / scale
    assert err.max() <= 32 * eps, f"mind off by {err.max() / eps:.1f} eps of ||x||^2 + ||c||^2"


_cpu_step = jax.jit(functools.partial(fused.ffi_step, check=False))


def _on_cpu(*arrays):
    cpu = jax.devices("cpu")[0]
    return [jax.device_put(a, cpu) for a in arrays]


# d = 388 and 1028: the cluster step with one block (its control warps label)
# and with three (tiles owned by ranks 0, 1, 2 in turn).
@pytest.mark.parametrize(
    ("d", "k"), [(64, 17), (256, 17), (388, 12), (1028, 9), (2048, 16), (4096, 13)]
)
@pytest.mark.parametrize("bad_centroid", (False, True), ids=("finite-c", "inf-c"))
def test_tensor_core_step_non_finite_as_the_cpu_target(d, k, bad_centroid):
    # A NaN or Inf times a zero of the one-hot would poison every cluster on
    # the tensor cores: such rows and centroids take the CUDA-core path.
    rng = np.random.default_rng(d)
    x, c, w = data(rng, 1000, d, k, jnp.float32)
    x = x.at[3, 5].set(np.nan).at[70, 0].set(np.inf).at[200, d - 1].set(-np.inf)
    x = x.at[500].set(1e20)  # finite, but ||x||^2 overflows
    w = w.at[300].set(np.nan).at[400].set(1e30)
    if bad_centroid:
        c = c.at[2, 1].set(np.inf)
    got = _step(x, c, w)
    with jax.default_device(jax.devices("cpu")[0]):
        ref = _cpu_step(*_on_cpu(x, c, w))
    labels = np.asarray(got.labels)
    np.testing.assert_array_equal(labels, np.asarray(ref.labels))
    # Finite values differ by rounding only: the expanded form's bound for
    # mind (as check_step), summation bounds for the rest.
    x64, c64, w64 = (np.asarray(a, np.float64) for a in (x, c, w))
    n = x64.shape[0]
    eps = float(np.finfo(np.float32).eps)
    with np.errstate(over="ignore", invalid="ignore"):
        scale = (x64**2).sum(1) + (c64**2).sum(1)[labels]
        wx = np.abs(w64[:, None] * x64)
    onehot = np.eye(k)[labels]
    finite = lambda a: np.where(np.isfinite(a), a, 0.0)
    bounds = {
        "mind": 4 * (d + 4) * eps * scale,
        "sums": 2 * (n + 2) * eps * (onehot.T @ finite(wx)),
        "counts": 2 * (n + 2) * eps * (onehot.T @ finite(np.abs(w64))),
        "inertia": 2 * (n + 2) * eps * float(finite(np.abs(w64) * scale).sum()),
    }
    for f, bound in bounds.items():
        a, b = np.asarray(getattr(got, f), np.float64), np.asarray(getattr(ref, f), np.float64)
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=f)
        np.testing.assert_array_equal(np.isposinf(a), np.isposinf(b), err_msg=f)
        np.testing.assert_array_equal(np.isneginf(a), np.isneginf(b), err_msg=f)
        fin = np.isfinite(a) & np.isfinite(b)
        err = np.abs(a - b)[fin]
        assert (err <= np.broadcast_to(bound, a.shape)[fin]).all(), f"{f} off by {err.max():.3g}"


# ------------------------------------------------- the end of an iteration: tsm2_kmeans_update


def _update_case(rng, n, d, k, dtype, empty, tie=False, zero_weight=False):
    """An iteration's state with the clusters in ``empty`` emptied."""
    acc = fused.acc_dtype(dtype)
    x = jnp.asarray(rng.normal(size=(n, d)) * 3 + 1, dtype)
    labels = rng.integers(0, k, n).astype(np.int32)
    keep = min(set(range(k)) - set(empty))
    labels[np.isin(labels, empty)] = keep
    w = rng.uniform(0.5, 2.0, n)
    if zero_weight:  # a cluster of zero-weight points counts as empty but donates them
        w[labels == labels[0]] = 0.0
    mind = rng.uniform(0.0, 10.0, n)
    if tie:  # the farthest distance three times: lower indices first
        mind[[n // 2, 5, n - 1]] = 20.0
    onehot = np.eye(k)[labels] * w[:, None]
    x64 = np.asarray(x, np.float64)
    sums = onehot.T @ x64
    counts = onehot.sum(0)
    c_old = rng.normal(size=(k, d))
    # _new_centroids_jnp's (and ffi_update's) order
    return tuple(
        jnp.asarray(a, t)
        for a, t in (
            (sums, acc), (counts, acc), (x, dtype), (w, acc), (labels, jnp.int32), (mind, acc),
            (c_old, acc),
        )
    )  # fmt: skip


def _rule_on_cpu(*args):
    k = args[-1].shape[0]
    with jax.default_device(jax.devices("cpu")[0]):
        f = jax.jit(lambda *a: core._new_centroids_jnp(*a, k, None))
        return np.asarray(f(*_on_cpu(*args)))


_update = jax.jit(fused.ffi_update)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
@pytest.mark.parametrize(
    ("n", "d", "k", "empty", "opts"),
    [
        (1000, 7, 5, (), {}),
        (1000, 7, 5, (2,), {}),
        (4099, 256, 16, (0, 3, 15), {"tie": True}),
        (997, 33, 9, (4,), {"zero_weight": True}),
        (3, 4, 6, (1, 3, 4, 5), {}),  # more empty clusters than points
        (20_011, 4096, 16, (7,), {}),
    ],
)
def test_update_follows_the_jnp_rule(dtype, n, d, k, empty, opts):
    rng = np.random.default_rng(n + d + k)
    args = _update_case(rng, n, d, k, dtype, empty, **opts)
    got = np.asarray(_update(*args), np.float64)
    ref = _rule_on_cpu(*args)
    counts = np.asarray(args[1])
    assert (counts == 0).sum() >= len(empty)
    tol = 1e-12 if dtype == jnp.float64 else 1e-5
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    if not empty and counts.min() > 0:  # the division alone, correctly rounded (IEEE)
        sums = np.asarray(args[0])
        np.testing.assert_array_equal(got, sums / counts[:, None])


def test_update_under_vmap_runs_per_element():
    rng = np.random.default_rng(5)
    cases = [_update_case(rng, 500, 6, 4, jnp.float32, e) for e in ((), (1,), (0, 2))]
    batched = [jnp.stack(col) for col in zip(*cases, strict=True)]
    got = np.asarray(jax.jit(jax.vmap(fused.ffi_update))(*batched))
    for i, case in enumerate(cases):
        np.testing.assert_allclose(got[i], _rule_on_cpu(*case), rtol=1e-5, atol=1e-5)


def test_kmeans_relocates_an_empty_cluster_on_the_gpu():
    rng = np.random.default_rng(11)
    x = jnp.asarray(rng.normal(size=(30_011, 64)) + 6 * rng.integers(0, 4, (30_011, 1)),
                    jnp.float32)  # fmt: skip
    init = x[:5].at[4].set(1e4)  # nobody's closest: empty in the first iteration
    text = (
        jax.jit(lambda x, c: kmeans(jax.random.key(0), x, 5, init=c, max_iter=20))
        .trace(x, init)
        .lower()
        .as_text()
    )
    assert "stablehlo.custom_call @tsm2_kmeans_update" in text
    got = kmeans(jax.random.key(0), x, 5, init=init, max_iter=20)
    with jax_tsm2.custom_call_mode("never"):
        ref = kmeans(jax.random.key(0), x, 5, init=init, max_iter=20)
    assert float(jnp.abs(got.centroids).max()) < 100  # the far centroid moved
    np.testing.assert_array_equal(np.asarray(got.labels), np.asarray(ref.labels))
    np.testing.assert_allclose(np.asarray(got.centroids), np.asarray(ref.centroids), rtol=1e-4,
                               atol=1e-4)  # fmt: skip
    assert int(got.n_iter) == int(ref.n_iter)
