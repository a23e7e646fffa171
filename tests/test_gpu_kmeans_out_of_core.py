"""GPU: host data pinned in place and read in one program per pass (tsm2_host_rows), against
the chunk-by-chunk ``device_put`` path, and the release of the pinning.

Skipped without a CUDA device and a CUDA build (conftest.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jax_tsm2 import host_memory
from jax_tsm2._ffi import _tsm2_ext
from jax_tsm2.clustering import out_of_core

pytestmark = pytest.mark.gpu

DTYPES = [np.float32, np.float64, ml_dtypes.bfloat16, np.float16]


def data(rng, n, d, dtype, k=5):
    centres = rng.normal(0, 6, (k, d))
    return (centres[rng.integers(0, k, n)] + rng.normal(0, 1, (n, d)) + 30.0).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize(("n", "d", "rows"), [(1009, 64, 300), (997, 7, 128), (13, 3, 20)])
def test_host_rows_reads_every_chunk_and_zeros_past_the_end(dtype, n, d, rows):
    base = data(np.random.default_rng(n), n + 3, d, dtype)
    # A C-contiguous slice starting 3 rows in: a base address not 16-byte aligned for odd d.
    for x in (base[:n], base[3:]):
        assert host_memory.pinning_unavailable(x) is None
        with host_memory.pinned(x, rows) as read:
            f = jax.jit(read)
            chunks = -(-n // rows)
            for i in (*range(chunks), chunks, -1):
                got = np.asarray(f(jnp.int32(i)))
                want = np.zeros((rows, d), x.dtype)
                if i >= 0:
                    part = x[i * rows : (i + 1) * rows]
                    want[: len(part)] = part
                np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize(("n", "d", "rows"), [(10007, 33, 1000), (4096, 16, 4096)])
def test_reads_in_order_are_served_from_copies_made_ahead(n, d, rows):
    x = data(np.random.default_rng(d), n, d, np.float32)
    chunks = -(-n // rows)

    def want(i):
        out = np.zeros((rows, d), x.dtype)
        if 0 <= i < chunks:
            part = x[i * rows : (i + 1) * rows]
            out[: len(part)] = part
        return out

    with host_memory.pinned(x, rows) as read:
        f = jax.jit(read)
        for i in [*range(chunks), *range(chunks)]:  # two passes: the second from chunk 0 again
            np.testing.assert_array_equal(np.asarray(f(jnp.int32(i))), want(i))
        assert read.staging_counts() == (2 * chunks, 0)
        # Out of order: the copy made ahead is of another chunk, the read goes over the link.
        order = [chunks - 1, 0, 0, chunks, -1] if chunks > 1 else [0, 1, -1, 0]
        for i in order:
            np.testing.assert_array_equal(np.asarray(f(jnp.int32(i))), want(i))
        hits, misses = read.staging_counts()
        assert hits + misses == 2 * chunks + len(order) and misses >= 2, (hits, misses)

        # A pass as the fits run it: one program looping over the chunks, a step between reads.
        @jax.jit
        def column_sums(x0):
            def body(i, acc):
                return acc + jnp.sum(read(i) * x0, axis=0)

            return jax.lax.fori_loop(0, chunks, body, jnp.zeros((d,), jnp.float32))

        before = read.staging_counts()[0]
        got = np.asarray(column_sums(jnp.float32(1.0)))
        np.testing.assert_allclose(got, x.astype(np.float64).sum(0), rtol=1e-5)
        # Every read of the loop but possibly its first found its chunk copied ahead.
        assert read.staging_counts()[0] - before >= chunks - 1


@pytest.mark.parametrize("dtype", DTYPES[:3], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("weighted", [False, True])
def test_pinned_fit_equals_the_device_put_fit(dtype, weighted):
    rng = np.random.default_rng(7)
    n, d, k = 20011, 9, 6  # n prime: the last chunk short
    x = data(rng, n, d, dtype, k)
    w = rng.uniform(0, 2, n).astype(np.float32) if weighted else None
    init = np.asarray(x[rng.choice(n, k, replace=False)], np.float64)
    budget = 400_000
    path = out_of_core.stream_path(x, k, budget, weighted=weighted)
    assert path.pinned and path.plan.chunks > 2, path
    common = dict(init=init, max_iter=20, sample_weight=w, device_memory_budget=budget)
    got = out_of_core.kmeans_streamed(jax.random.key(0), x, k, **common, host_pinning=True)
    want = out_of_core.kmeans_streamed(jax.random.key(0), x, k, **common, host_pinning=False)
    rtol = 1e-2 if dtype == ml_dtypes.bfloat16 else 1e-5
    np.testing.assert_allclose(np.asarray(got.centroids), np.asarray(want.centroids), rtol=rtol)
    np.testing.assert_allclose(float(got.inertia), float(want.inertia), rtol=rtol)
    assert (got.labels == want.labels).mean() > 0.999
    assert int(got.n_iter) == int(want.n_iter)


def test_a_strided_view_falls_back_to_device_put():
    x = data(np.random.default_rng(1), 5000, 8, np.float32)
    view = x[:, :7]
    path = out_of_core.stream_path(view, 4, 100_000)
    assert not path.pinned and "C-contiguous" in path.reason
    s = out_of_core.kmeans_streamed(jax.random.key(0), view, 4, device_memory_budget=100_000)
    assert s.labels.shape == (5000,)


def _registered_by_us(x) -> bool:
    """Whether x could be registered afresh (nobody holds a registration of it); undone."""
    address = int(x.__array_interface__["data"][0])
    reg = _tsm2_ext.host_register(address, x.nbytes, 0)
    if reg["registered"]:
        _tsm2_ext.host_unregister(address, 0)
    return bool(reg["registered"])


def test_the_pinning_is_released_after_the_fit_and_after_an_exception():
    x = data(np.random.default_rng(2), 30001, 16, np.float32)
    budget = 1_000_000
    assert out_of_core.stream_path(x, 4, budget).pinned
    out_of_core.kmeans_streamed(jax.random.key(0), x, 4, device_memory_budget=budget, max_iter=3)
    assert _registered_by_us(x)

    def boom(i, inertia):
        raise KeyError("stop")

    with pytest.raises(KeyError):
        out_of_core.kmeans_streamed(
            jax.random.key(0), x, 4, device_memory_budget=budget, progress=boom
        )
    assert _registered_by_us(x)


def test_memory_registered_by_someone_else_is_used_and_left_registered():
    x = data(np.random.default_rng(3), 4099, 5, np.float32)
    address = int(x.__array_interface__["data"][0])
    reg = _tsm2_ext.host_register(address, x.nbytes, 0)
    assert reg["registered"]
    try:
        again = _tsm2_ext.host_register(address, x.nbytes, 0)
        assert not again["registered"] and again["device_ptr"] == reg["device_ptr"]
        with host_memory.pinned(x, 1000) as read:
            got = np.asarray(jax.jit(read)(jnp.int32(4)))  # 99 rows, then zeros
            np.testing.assert_array_equal(got[:99], x[4000:4099])
            assert not got[99:].any()
        # Still registered by us: registering again reports it.
        assert not _tsm2_ext.host_register(address, x.nbytes, 0)["registered"]
    finally:
        _tsm2_ext.host_unregister(address, 0)
