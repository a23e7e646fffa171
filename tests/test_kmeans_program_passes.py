"""k-means over chunked data as one program per pass (program_passes), against the copied path.

The single-program passes read their chunks with an injectable reader; here a plain-JAX one
(``program_passes.device_rows``) stands in for the pinned host reader (``tsm2_host_rows``,
GPU only), so the passes, the choice of path and the release of the pinning run without a GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jax_tsm2 import host_memory
from jax_tsm2.clustering import out_of_core, program_passes


def blobs(rng, n, d, k, dtype=np.float32):
    centres = rng.normal(0, 6, (k, d))
    return (centres[rng.integers(0, k, n)] + rng.normal(0, 1, (n, d)) + 50.0).astype(dtype)


def fit(passes, x, k, w, init, max_iter=30):
    return out_of_core._fit(passes, jax.random.key(0), x, k, w, init, max_iter, 1e-4, None, None)


def both(x, k, budget, w=None, init=None, max_iter=30):
    """The same fit through the copied passes and the single-program passes, one plan."""
    n, d = x.shape
    plan = out_of_core.plan_chunks(n, d, k, x.dtype, budget)
    read = functools.partial(program_passes.device_rows, rows=plan.rows)
    copied = out_of_core._CopiedPasses(x, w, plan, "float32")
    program = out_of_core._ProgramPasses(read, jnp.asarray(x), w, n, plan, "float32")
    return plan, fit(copied, x, k, w, init, max_iter), fit(program, x, k, w, init, max_iter)


def assert_same(a, b, rtol):
    np.testing.assert_allclose(np.asarray(b.centroids), np.asarray(a.centroids), rtol=rtol)
    np.testing.assert_allclose(float(b.inertia), float(a.inertia), rtol=rtol)
    np.testing.assert_array_equal(b.labels, a.labels)
    assert int(b.n_iter) == int(a.n_iter) and bool(b.converged) == bool(a.converged)
    np.testing.assert_allclose(np.asarray(b.inertia_history), np.asarray(a.inertia_history), rtol)


def budget_for(n, d, k, rows, dtype=np.float32):
    p = out_of_core.plan_chunks(n, d, k, dtype, 1 << 40)
    return 2 * rows * p.bytes_per_row + 4 * k * d * 8  # the fixed part at its largest


@pytest.mark.parametrize(
    ("n", "d", "k", "rows", "dtype"),
    [
        (1009, 7, 5, 200, np.float32),  # n prime: the last chunk short
        (997, 3, 4, 2000, np.float32),  # n < rows: one chunk
        (613, 33, 9, 128, np.float64),
        (401, 16, 6, 100, ml_dtypes.bfloat16),
    ],
)
def test_program_passes_equal_the_copied_passes(n, d, k, rows, dtype):
    rng = np.random.default_rng(n + d)
    x = blobs(rng, n, d, k, dtype)
    init = np.asarray(x[rng.choice(n, k, replace=False)], np.float64)
    plan, a, b = both(x, k, budget_for(n, d, k, rows, dtype), init=init)
    # Several chunks, the last one short, unless one chunk holds every row.
    assert plan.chunks == 1 if rows >= n else (plan.chunks > 2 and n % plan.rows)
    assert_same(a, b, rtol=1e-6)


def test_weights_and_an_empty_cluster():
    rng = np.random.default_rng(3)
    n, d, k = 1201, 4, 4
    x = blobs(rng, n, d, 3)
    w = rng.uniform(0, 2, n).astype(np.float32)
    w[::7] = 0
    init = np.concatenate([x[:3], np.full((1, d), 1e4)]).astype(np.float64)  # one far away
    plan, a, b = both(x, k, budget_for(n, d, k, 300), w=w, init=init, max_iter=10)
    assert plan.chunks >= 4 and n % plan.rows
    assert np.isfinite(np.asarray(b.centroids)).all()
    assert_same(a, b, rtol=1e-6)


def test_moments_per_chunk_as_copied():
    rng = np.random.default_rng(1)
    x = blobs(rng, 503, 5, 3)
    w = rng.uniform(0, 1, 503).astype(np.float32)
    plan = out_of_core.plan_chunks(503, 5, 3, x.dtype, budget_for(503, 5, 3, 100))
    read = functools.partial(program_passes.device_rows, rows=plan.rows)
    for weights in (None, w):
        copied = out_of_core._CopiedPasses(x, weights, plan, "float32").moments()
        program = out_of_core._ProgramPasses(read, jnp.asarray(x), weights, 503, plan, "float32")
        got = program.moments()
        assert len(got) == len(copied) == plan.chunks
        for g, c in zip(got, copied, strict=True):
            for u, v in zip(g, c, strict=True):
                np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-6)


def test_device_rows_pads_the_last_chunk_with_zeros():
    x = jnp.asarray(np.random.default_rng(0).normal(size=(7, 3)), jnp.float32)
    read = jax.jit(functools.partial(program_passes.device_rows, rows=3))
    np.testing.assert_array_equal(read(x, jnp.int32(1)), x[3:6])
    last = np.asarray(read(x, jnp.int32(2)))
    np.testing.assert_array_equal(last[:1], x[6:])
    assert not last[1:].any()


# ---------------------------------------------------------------- the choice of path


@pytest.mark.skipif(
    host_memory.pinning_unavailable(np.ones((2, 2), np.float32)) is None,
    reason="this machine pins host memory (a CUDA build on a CUDA device)",
)
def test_without_a_gpu_the_fit_copies_chunk_by_chunk():
    x = np.ones((1000, 4), np.float32)
    path = out_of_core.stream_path(x, 3, 64 << 10)
    assert not path.pinned and path.reason
    assert path.plan == out_of_core.plan_chunks(1000, 4, 3, x.dtype, 64 << 10)
    assert out_of_core.stream_path(x, 3, 64 << 10, host_pinning=False).reason == (
        "host_pinning=False"
    )
    with pytest.raises(ValueError, match="host_pinning=True"):
        out_of_core.stream_path(x, 3, 64 << 10, host_pinning=True)
    with pytest.raises(ValueError, match="host_pinning"):
        out_of_core.kmeans_streamed(
            jax.random.key(0), x, 3, device_memory_budget=64 << 10, host_pinning="yes"
        )


def test_pinning_unavailable_names_the_reason():
    x = np.ones((6, 4), np.float32)
    assert "C-contiguous" in host_memory.pinning_unavailable(x[:, :2])
    assert "dtype" in host_memory.pinning_unavailable(x.astype(np.int32))
    assert "NumPy" in host_memory.pinning_unavailable([[1.0]])


@pytest.fixture
def pinnable(monkeypatch):
    """Pretends pinning is available: ``host_memory.pinned`` yields a reader of a device
    copy of the data and records what it was asked and whether it was released."""
    seen = {"entered": 0, "exited": 0, "refuse": False}

    @dataclasses.dataclass(eq=False)
    class Rows:
        data: jax.Array
        rows: int

        def __call__(self, i):
            return program_passes.device_rows(self.data, i, rows=self.rows)

    @contextlib.contextmanager
    def pinned(x, rows):
        if seen["refuse"]:
            raise RuntimeError("cudaHostRegister failed: refused")
        seen["entered"] += 1
        try:
            yield Rows(jnp.asarray(x), rows)
        finally:
            seen["exited"] += 1

    monkeypatch.setattr(host_memory, "pinning_unavailable", lambda x: None)
    monkeypatch.setattr(host_memory, "pinned", pinned)
    return seen


def test_the_pinned_path_fits_as_the_copied_one_and_releases(pinnable):
    rng = np.random.default_rng(11)
    n, d, k = 1511, 6, 5
    x = blobs(rng, n, d, k)
    init = x[rng.choice(n, k, replace=False)].astype(np.float64)
    budget = budget_for(n, d, k, 400) + 8 * n  # room for the labels of all rows
    path = out_of_core.stream_path(x, k, budget)
    assert path.pinned and path.reason is None and path.plan.chunks > 1
    got = out_of_core.kmeans_streamed(
        jax.random.key(0), x, k, init=init, device_memory_budget=budget
    )
    assert pinnable == {"entered": 1, "exited": 1, "refuse": False}
    want = out_of_core.kmeans_streamed(
        jax.random.key(0), x, k, init=init, device_memory_budget=budget, host_pinning=False
    )
    assert pinnable["entered"] == 1
    np.testing.assert_allclose(np.asarray(got.centroids), np.asarray(want.centroids), rtol=1e-5)
    np.testing.assert_allclose(float(got.inertia), float(want.inertia), rtol=1e-5)
    assert isinstance(got.labels, np.ndarray) and (got.labels == want.labels).mean() > 0.999


def test_the_pinning_is_released_when_the_fit_raises(pinnable):
    x = blobs(np.random.default_rng(2), 900, 3, 2)
    budget = budget_for(900, 3, 2, 300) + 8 * 900

    def boom(i, inertia):
        raise KeyError("stop")

    with pytest.raises(KeyError, match="stop"):
        out_of_core.kmeans_streamed(
            jax.random.key(0), x, 2, device_memory_budget=budget, progress=boom
        )
    assert pinnable["entered"] == pinnable["exited"] == 1


def test_a_refused_pinning_copies_instead_unless_required(pinnable):
    x = blobs(np.random.default_rng(4), 700, 3, 2)
    budget = budget_for(700, 3, 2, 300) + 8 * 700
    pinnable["refuse"] = True
    s = out_of_core.kmeans_streamed(jax.random.key(0), x, 2, device_memory_budget=budget)
    assert s.labels.shape == (700,)
    with pytest.raises(RuntimeError, match="refused"):
        out_of_core.kmeans_streamed(
            jax.random.key(0), x, 2, device_memory_budget=budget, host_pinning=True
        )


def test_memmaps_and_tight_budgets_are_not_pinned_by_default(pinnable, tmp_path):
    x = blobs(np.random.default_rng(5), 1000, 4, 3)
    mm = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=x.dtype, shape=x.shape)
    mm[:] = x
    budget = budget_for(1000, 4, 3, 250) + 8 * 1000
    assert "memmap" in out_of_core.stream_path(mm, 3, budget).reason
    assert out_of_core.stream_path(mm, 3, budget, host_pinning=True).pinned
    tight = budget_for(1000, 4, 3, 10) + 100  # chunks of 10 rows, no room for 4 bytes a row
    p = out_of_core.stream_path(x, 3, tight)
    assert not p.pinned and "labels of all rows" in p.reason


def test_a_pinned_pass_lowers_for_cuda_to_one_loop_reading_with_tsm2_host_rows():
    rows = host_memory.HostRows(0x7F12_3456_7000, 10007, 1000, (16,), "float32")
    assert rows.staging_counts() is None  # never read: nothing staged
    read = out_of_core._PinnedReader(rows)
    c, mu = jnp.zeros((8, 16), jnp.float32), jnp.zeros(16, jnp.float32)
    kw = dict(read=read, rows=1000, chunks=11, n=10007)
    labels = program_passes.labels_buffer(11, 1000)
    text = (
        program_passes.iteration.trace(None, None, labels, c, mu, precision="float32", **kw)
        .lower(lowering_platforms=("cuda",))
        .as_text()
    )
    assert text.count("custom_call @tsm2_host_rows") == 1 and "stablehlo.while" in text
    assert "host_ptr = 139716164218880 : ui64" in text and "row_bytes = 64 : i64" in text
