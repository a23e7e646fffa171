"""k-means over host data streamed in chunks: the in-memory algorithm, chunk by chunk."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tsm2
from jax_tsm2.clustering import KMeans, out_of_core


def blobs(rng, n, d, k, dtype=np.float32):
    centres = rng.normal(0, 8, (k, d))
    x = centres[rng.integers(0, k, n)] + rng.normal(0, 1, (n, d)) + 100.0  # off the origin
    return x.astype(dtype)


def budget_for_chunks(n, d, k, chunks):
    p = out_of_core.plan_chunks(n, d, k, "float32", 1 << 40)
    return 2 * (n // chunks) * p.bytes_per_row + 4 * k * d * 4


SHAPES = [(3001, 7, 5, 5), (997, 1, 3, 2), (513, 33, 17, 9)]  # (n, d, k, chunks at least)


@pytest.mark.parametrize(("n", "d", "k", "chunks"), SHAPES)
def test_streamed_equals_in_memory_from_the_same_centroids(n, d, k, chunks):
    rng = np.random.default_rng(n + d)
    x = blobs(rng, n, d, k)
    init = x[rng.choice(n, k, replace=False)].astype(np.float64)
    want = jax_tsm2.kmeans(jax.random.key(0), jnp.asarray(x), k, init=init, max_iter=50)
    budget = budget_for_chunks(n, d, k, chunks)
    assert out_of_core.plan_chunks(n, d, k, "float32", budget).chunks >= chunks
    got = out_of_core.kmeans_streamed(
        jax.random.key(0), x, k, init=init, max_iter=50, device_memory_budget=budget
    )
    np.testing.assert_allclose(got.centroids, want.centroids, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(float(got.inertia), float(want.inertia), rtol=1e-5)
    assert (got.labels == np.asarray(want.labels)).mean() > 0.999
    assert int(got.n_iter) == int(want.n_iter) and bool(got.converged) == bool(want.converged)


def test_weights_and_an_empty_cluster_as_in_memory():
    rng = np.random.default_rng(3)
    n, d, k = 1201, 4, 4
    x = blobs(rng, n, d, 3)
    w = rng.uniform(0, 2, n).astype(np.float32)
    w[::7] = 0
    init = np.concatenate([x[:3], np.full((1, d), 1e4)]).astype(np.float64)  # one far away
    want = jax_tsm2.kmeans(
        jax.random.key(0), jnp.asarray(x), k, init=init, max_iter=20, sample_weight=w
    )
    got = out_of_core.kmeans_streamed(
        jax.random.key(0),
        x,
        k,
        init=init,
        max_iter=20,
        sample_weight=w,
        device_memory_budget=budget_for_chunks(n, d, k, 4),
    )
    assert np.isfinite(np.asarray(got.centroids)).all()
    np.testing.assert_allclose(got.centroids, want.centroids, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(float(got.inertia), float(want.inertia), rtol=1e-5)


def test_init_on_a_sample_and_progress():
    rng = np.random.default_rng(5)
    x = blobs(rng, 4000, 5, 6)
    seen = []
    got = out_of_core.kmeans_streamed(
        jax.random.key(1),
        x,
        6,
        device_memory_budget=budget_for_chunks(4000, 5, 6, 3),
        init_size=500,
        progress=lambda i, inertia: seen.append((i, inertia)),
    )
    assert [i for i, _ in seen] == list(range(1, int(got.n_iter) + 1))
    ref = jax_tsm2.kmeans(jax.random.key(1), jnp.asarray(x), 6, n_init=4)
    assert float(got.inertia) <= 1.05 * float(ref.inertia)


def test_bad_arguments():
    x = np.ones((10, 3), np.float32)
    with pytest.raises(ValueError, match="holds no chunk"):
        out_of_core.kmeans_streamed(jax.random.key(0), x, 2, device_memory_budget=16)
    with pytest.raises(ValueError, match="should be >= k"):
        out_of_core.kmeans_streamed(jax.random.key(0), x, 11, device_memory_budget=1 << 20)
    with pytest.raises(ValueError, match="2-D"):
        out_of_core.kmeans_streamed(jax.random.key(0), x[0], 2, device_memory_budget=1 << 20)
    with pytest.raises(ValueError, match="non-negative"):
        out_of_core.kmeans_streamed(
            jax.random.key(0), x, 2, device_memory_budget=1 << 20, sample_weight=-np.ones(10)
        )
    with pytest.raises(ValueError, match="init array"):
        out_of_core.kmeans_streamed(
            jax.random.key(0), x, 2, device_memory_budget=1 << 20, init=np.ones((3, 3))
        )


def test_the_estimator_streams_data_over_its_budget(tmp_path):
    rng = np.random.default_rng(7)
    x = blobs(rng, 2000, 6, 4)
    mm = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32, shape=x.shape)
    mm[:] = x
    mm.flush()
    init = x[:4].astype(np.float64)
    streamed = KMeans(4, init=init, device_memory_budget=x.nbytes // 3).fit(mm)
    assert isinstance(streamed.labels_, np.ndarray)  # stayed on the host
    in_memory = KMeans(4, init=init).fit(x)
    np.testing.assert_allclose(
        streamed.cluster_centers_, in_memory.cluster_centers_, rtol=1e-5, atol=1e-4
    )
    assert streamed.get_params()["device_memory_budget"] == x.nbytes // 3
    with pytest.raises(ValueError, match="device_memory_budget"):
        KMeans(4, device_memory_budget=-1).fit(x)


def test_the_estimator_passes_host_pinning_to_the_stream():
    rng = np.random.default_rng(8)
    x = blobs(rng, 1500, 5, 3)
    budget = x.nbytes // 3
    copied = KMeans(3, init=x[:3], device_memory_budget=budget, host_pinning=False).fit(x)
    assert copied.get_params()["host_pinning"] is False
    auto = KMeans(3, init=x[:3], device_memory_budget=budget).fit(x)
    np.testing.assert_allclose(copied.cluster_centers_, auto.cluster_centers_, rtol=1e-6)
    if out_of_core.stream_path(x, 3, budget).pinned:
        pytest.skip("this host pins: host_pinning=True does not raise here")
    with pytest.raises(ValueError, match="host_pinning=True"):
        KMeans(3, device_memory_budget=budget, host_pinning=True).fit(x)
    with pytest.raises(ValueError, match="host_pinning must be"):
        KMeans(3, device_memory_budget=budget, host_pinning="yes").fit(x)
