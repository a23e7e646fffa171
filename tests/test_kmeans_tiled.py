"""The k-means step for any k (jax_tsm2.clustering.tiled: tsm2_kmeans_assign and
tsm2_kmeans_sums) through its CPU reference targets, its plans and its routing.

The references run the CUDA targets' formulas and validation; the sums reference follows
the plan of its attributes addition for addition (test_gpu_kmeans_tiled.py checks that
the CUDA target gives the same bits). Here both are checked against a float64 NumPy
reference on odd sizes, several plans of the sums, ties, NaN and Inf, and k-means
through them against the jnp path; CUDA lowerings are inspected without a GPU.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import slow
from _kmeans_reference import TF32_REL, check_step, data

import jax_tsm2
from jax_tsm2 import _ffi, _tsm2_ext
from jax_tsm2.clustering import fused, kmeans, lloyd_step, tiled

dtype_ids = lambda d: jnp.dtype(d).name
H200_SMEM = 227 * 1024


@pytest.fixture(autouse=True)
def _on_the_cpu_device():
    """The CPU targets; on a GPU machine test_gpu_kmeans_tiled.py covers CUDA."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


def _x_sq(x):
    xa = x.astype(fused.acc_dtype(x.dtype))
    return jnp.sum(xa * xa, axis=1)


@functools.partial(jax.jit, static_argnames=("precision",))
def _step(x, c, w, precision="float32"):
    return tiled.ffi_step(x, _x_sq(x), c, w, precision=precision, check=False)


def _sums_call(x, w, labels, mind, k, bucket, chunks, piece=0):
    """tsm2_kmeans_sums with an explicit plan (its attributes; the CPU ignores the
    workspace)."""
    d = x.shape[1]
    acc = fused.acc_dtype(x.dtype)
    call = jax.ffi.ffi_call(
        _ffi.KMEANS_SUMS_TARGET,
        (
            jax.ShapeDtypeStruct((k, d), acc),
            jax.ShapeDtypeStruct((k,), acc),
            jax.ShapeDtypeStruct((), acc),
            jax.ShapeDtypeStruct((0,), jnp.uint8),
        ),
    )
    out = call(x, w.astype(acc), labels, mind.astype(acc), bucket=np.int64(bucket),
               chunks=np.int64(chunks), piece=np.int64(piece))  # fmt: skip
    return out[:3]


# ------------------------------------------------------------ the step against float64


@pytest.mark.parametrize("d", (1, slow(3), 17, slow(130)))
@pytest.mark.parametrize("k", (1, slow(2), 33, slow(129), 300))
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, slow(jnp.float16)], ids=dtype_ids)
def test_reference_step_matches_float64(dtype, d, k):
    rng = np.random.default_rng(d * 1000 + k)
    x, c, w = data(rng, 389, d, k, dtype)
    s = _step(x, c, w)
    assert s.mind.dtype == s.sums.dtype == s.inertia.dtype == jnp.float32
    check_step(s, x, c, w)


@pytest.mark.parametrize(("d", "k"), [(3, 5), (64, 257), (129, 40)])
def test_tf32_products_stay_within_their_bound(d, k):
    rng = np.random.default_rng(d + k)
    x, c, w = data(rng, 503, d, k, jnp.float32)
    x, c = x * 7.3, c * 7.3  # off the powers of two, where rounding matters
    fast = _step(x, c, w, precision="tensorfloat32")
    check_step(fast, x, c, w, extra_rel=TF32_REL)
    exact = _step(x, c, w)
    # The rounding shows: the two modes' distances differ somewhere.
    assert not np.array_equal(np.asarray(fast.mind), np.asarray(exact.mind))


def test_tf32_mode_leaves_half_inputs_exact():
    rng = np.random.default_rng(2)
    x, c, w = data(rng, 211, 19, 70, jnp.bfloat16)
    a, b = _step(x, c, w), _step(x, c, w, precision="tensorfloat32")
    for f in a._fields:
        np.testing.assert_array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)))


def test_ties_take_the_lowest_index_and_nan_ranks_first():
    c = jnp.array([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, 5.0]], jnp.float32)
    x = jnp.array([[0.0, 0.0], [0.0, 3.0], [1.0, 0.0], [2.0, 0.0], [-1.0, 0.0]], jnp.float32)
    s = _step(x, c, jnp.ones(5))
    assert s.labels.tolist() == [0, 3, 0, 0, 1]
    np.testing.assert_array_equal(np.asarray(s.mind), [1.0, 4.0, 0.0, 1.0, 0.0])
    xn = x.at[1, 0].set(np.nan)
    sn = _step(xn, c, jnp.ones(5))
    assert sn.labels.tolist() == [0, 0, 0, 0, 1] and np.isnan(float(sn.mind[1]))


@pytest.mark.parametrize("precision", tiled.PRECISIONS)
def test_non_finite_rows_and_centroids_rank_as_the_fused_reference(precision):
    # Both CPU references rank NaN first and Inf by the same formula; the tiled one
    # takes exact products for rows and centroids with a non-finite norm.
    rng = np.random.default_rng(3)
    x, c, w = data(rng, 300, 6, 40, jnp.float32)
    x = x.at[3, 1].set(np.nan).at[7, 0].set(np.inf).at[9, 5].set(-np.inf).at[11].set(1e20)
    c = c.at[5, 2].set(np.inf).at[6, 0].set(np.nan)
    got = _step(x, c, w, precision=precision)
    ref = jax.jit(functools.partial(fused.ffi_step, check=False))(x, c, w)
    # A non-finite centroid is ranked with exact products for every row: all labels agree.
    np.testing.assert_array_equal(np.asarray(got.labels), np.asarray(ref.labels))
    np.testing.assert_array_equal(np.isnan(np.asarray(got.mind)), np.isnan(np.asarray(ref.mind)))
    labels = np.asarray(got.labels)
    assert labels[3] == 0  # NaN everywhere: the first NaN
    # c[6] is NaN to every row, c[5] (an Inf) NaN where x[:, 2] > 0: NaN ranks first.
    finite = np.isfinite(np.asarray(x)).all(1) & (np.abs(np.asarray(x)) < 1e10).all(1)
    want = np.where(np.asarray(x)[:, 2] > 0, 5, 6)
    np.testing.assert_array_equal(labels[finite], want[finite])


def test_empty_and_single_rows():
    c = jnp.ones((40, 3), jnp.float32)
    s = _step(jnp.zeros((0, 3), jnp.float32), c, jnp.zeros((0,)))
    assert s.labels.shape == (0,) and float(s.inertia) == 0.0
    np.testing.assert_array_equal(np.asarray(s.sums), np.zeros((40, 3)))
    row = jnp.array([[1.0, 2.0, 2.0]], jnp.float32)
    one = _step(row, c.at[17].set(row[0]), jnp.ones(1, jnp.float32))
    assert one.labels.tolist() == [17] and float(one.mind[0]) == 0.0


# ------------------------------------------------------------ the sums and their plans


def _sums_reference(x, w, labels, k):
    x64, w64 = np.asarray(x, np.float64), np.asarray(w, np.float64)
    onehot = (np.asarray(labels)[:, None] == np.arange(k)) * w64[:, None]
    return onehot.T @ x64, onehot.sum(0), onehot.T @ np.abs(x64)


@pytest.mark.parametrize(
    ("n", "d", "k", "bucket", "chunks"),
    [
        (1, 1, 1, 1, 1),
        (997, 5, 37, 37, 1),
        (997, 5, 37, 10, 1),  # four buckets, the last part-filled
        (997, 5, 37, 10, 3),  # and three row ranges: partials added in order
        (3001, 64, 9, 4, 7),  # more chunks than whole tiles would make
        (2053, 257, 300, 31, 2),  # a row of 65 chunks: 3 groups
        (1100, 1030, 5, 2, 2),  # more chunks than threads: one group
        (50, 3, 7, 3, 50),  # chunks of one row
    ],
)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64, jnp.bfloat16], ids=dtype_ids)
def test_sums_follow_any_plan(dtype, n, d, k, bucket, chunks):
    rng = np.random.default_rng(n + d + k)
    x = jnp.asarray(rng.normal(size=(n, d)) + 2, dtype)
    acc = fused.acc_dtype(dtype)
    w = jnp.asarray(rng.uniform(0, 2, n), acc)
    labels = jnp.asarray(rng.integers(0, k, n), jnp.int32)
    mind = jnp.asarray(rng.uniform(0, 5, n), acc)
    sums, counts, inertia = _sums_call(x, w, labels, mind, k, bucket, chunks)
    ref, ref_counts, scale = _sums_reference(x, w, labels, k)
    eps = float(jnp.finfo(acc).eps)
    assert (np.abs(np.asarray(sums, np.float64) - ref) <= 2 * (n + 2) * eps * scale + 1e-300).all()
    np.testing.assert_allclose(np.asarray(counts), ref_counts, rtol=2 * (n + 2) * eps)
    want = float(np.asarray(w, np.float64) @ np.asarray(mind, np.float64))
    assert abs(float(inertia) - want) <= 2 * (n + 2) * eps * want
    # Another plan adds in another order: the same sums up to rounding, not bit for bit.
    other = _sums_call(x, w, labels, mind, k, max(1, bucket // 2), chunks + 1)
    np.testing.assert_allclose(np.asarray(other[0]), np.asarray(sums), rtol=1e-4, atol=1e-4)


def _sums_data(rng, n, d, k, dtype, skew=False):
    """Rows off zero, weights in (0.5, 2), a few labels outside [0, k), and with ``skew``
    nearly all rows in cluster k // 2."""
    acc = fused.acc_dtype(dtype)
    x = jnp.asarray(rng.normal(size=(n, d)) + 2, dtype)
    w = jnp.asarray(rng.uniform(0.5, 2, n), acc)
    labels = rng.integers(-1, k + 2, n)
    if skew:
        labels[rng.uniform(size=n) < 0.95] = k // 2
    mind = jnp.asarray(rng.uniform(0.1, 5, n), acc)
    return x, w, jnp.asarray(labels, jnp.int32), mind


def _check_sums(got, x, w, labels, mind, k):
    """sums, counts and the inertia within the sequential bound of a float64 reference."""
    sums, counts, inertia = got
    n = x.shape[0]
    ref, ref_counts, scale = _sums_reference(x, w, labels, k)
    eps = float(jnp.finfo(sums.dtype).eps)
    assert (np.abs(np.asarray(sums, np.float64) - ref) <= 2 * (n + 2) * eps * scale).all()
    np.testing.assert_allclose(np.asarray(counts), ref_counts, rtol=2 * (n + 2) * eps, atol=0)
    want = float(np.asarray(w, np.float64) @ np.asarray(mind, np.float64))
    assert abs(float(inertia) - want) <= 2 * (n + 2) * eps * want


@pytest.mark.parametrize(
    ("n", "d", "k", "piece", "chunks", "skew"),
    [
        (0, 3, 5, 64, 1, False),
        (1, 1, 1, 1, 1, False),
        (2, 3, 40, 64, 1, False),  # k > n: nearly all clusters empty
        (97, 1, 300, 5, 3, False),  # a prime, k > n, pieces of 5
        (1031, 3, 37, 64, 3, False),  # past a piece, three sort chunks
        (1031, 17, 5, 7, 2, True),  # one cluster of ~95% of rows over ~140 pieces
        (5003, 3, 9, 1, 11, True),  # pieces of one row: three merge levels
        (4099, 130, 600, 64, 9, False),  # rows past a column block of 128 f32
        (3001, 5, 70_000, 64, 6, False),  # three passes of the sort
        (512, 4, 3, 64, 512, True),  # chunks of one row
    ],
)
@pytest.mark.parametrize(
    "dtype", [jnp.float32, jnp.float64, jnp.bfloat16, jnp.float16], ids=dtype_ids
)
def test_sorted_sums_match_float64(dtype, n, d, k, piece, chunks, skew):
    rng = np.random.default_rng(n * 7 + d + k)
    x, w, labels, mind = _sums_data(rng, n, d, k, dtype, skew)
    got = _sums_call(x, w, labels, mind, k, k, chunks, piece)
    _check_sums(got, x, w, labels, mind, k)
    # Other pieces and the bucket path add in other orders: the same sums up to rounding.
    for other in (
        _sums_call(x, w, labels, mind, k, k, chunks + 1, piece * 3 + 1),
        _sums_call(x, w, labels, mind, k, min(k, 50), 2, 0),
    ):
        np.testing.assert_allclose(np.asarray(other[0]), np.asarray(got[0]), rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(np.asarray(other[1]), np.asarray(got[1]), rtol=1e-5)
        np.testing.assert_allclose(float(other[2]), float(got[2]), rtol=1e-5)


def test_sorted_sums_count_whole_weights_exactly():
    # Unit weights: every count is an integer below 2^24, exact in any order of addition,
    # so a row lost or added twice by the sort or the merges shows.
    rng = np.random.default_rng(5)
    n, k = 20_011, 1000
    labels = rng.integers(0, k, n)
    labels[: n // 2] = 17  # one cluster over half the rows: many pieces and merges
    labels[-5:] = [-3, k, k + 9, -1, 2**31 - 1]
    x = jnp.asarray(rng.normal(size=(n, 2)) + 1, jnp.float32)
    for piece, chunks in ((1, 1), (3, 40), (64, 7)):
        _, counts, _ = _sums_call(x, jnp.ones(n), jnp.asarray(labels, jnp.int32), jnp.ones(n),
                                  k, k, chunks, piece)  # fmt: skip
        want = np.bincount(labels[(labels >= 0) & (labels < k)], minlength=k)
        np.testing.assert_array_equal(np.asarray(counts), want)


def test_sorted_sums_do_not_depend_on_the_chunks():
    # The sort is stable, so its chunks change nothing but the inertia's order.
    rng = np.random.default_rng(6)
    x, w, labels, mind = _sums_data(rng, 3001, 6, 300, jnp.float32, skew=True)
    a = _sums_call(x, w, labels, mind, 300, 300, 1, 16)
    b = _sums_call(x, w, labels, mind, 300, 300, 97, 16)
    np.testing.assert_array_equal(np.asarray(a[0]), np.asarray(b[0]))
    np.testing.assert_array_equal(np.asarray(a[1]), np.asarray(b[1]))


@pytest.mark.parametrize("piece", (0, 3))
def test_sums_skip_labels_outside_the_clusters(piece):
    x = jnp.arange(12.0, dtype=jnp.float32).reshape(4, 3)
    labels = jnp.array([0, -1, 2, 7], jnp.int32)
    sums, counts, inertia = _sums_call(x, jnp.ones(4), labels, jnp.ones(4), 3, 2, 1, piece)
    np.testing.assert_array_equal(np.asarray(sums), [[0, 1, 2], [0, 0, 0], [6, 7, 8]])
    np.testing.assert_array_equal(np.asarray(counts), [1, 0, 1])
    assert float(inertia) == 4.0  # every row's w * mind, whatever its label


def test_sums_reject_bad_plans():
    x = jnp.ones((4, 3), jnp.float32)
    args = (x, jnp.ones(4), jnp.zeros(4, jnp.int32), jnp.ones(4))
    with pytest.raises(Exception, match=r"bucket and chunks must be >= 1.*bucket=0"):
        _sums_call(*args, 3, 0, 1)
    with pytest.raises(Exception, match=r"at most 65535 buckets"):
        _sums_call(*args, 70_000, 1, 1)
    for piece in (-1, 2**40):
        with pytest.raises(Exception, match=rf"piece must be >= 0.*piece={piece}\)"):
            _sums_call(*args, 3, 3, 1, piece)
    with pytest.raises(Exception, match=r"sorted path \(piece > 0\) takes 1 to 8192 chunks"):
        _sums_call(*args, 3, 3, 9000, 64)
    with pytest.raises(ValueError, match="kmeans_sums_plan: need"):
        _tsm2_ext.kmeans_sums_plan("float32", 4, 3, 3, 3, 1, -1)


def test_assign_rejects_what_the_kernel_does_not_take():
    call = jax.ffi.ffi_call(
        _ffi.KMEANS_ASSIGN_TARGET,
        (
            jax.ShapeDtypeStruct((4,), jnp.int32),
            jax.ShapeDtypeStruct((4,), jnp.float32),
            jax.ShapeDtypeStruct((16,), jnp.uint8),
        ),
    )
    x, c = jnp.ones((4, 3), jnp.float32), jnp.ones((2, 3), jnp.float32)
    with pytest.raises(Exception, match="precision must be 0"):
        call(x, jnp.ones(4, jnp.float32), c, precision=np.int32(2))
    with pytest.raises(Exception, match=r"x_sq must be f32\[n\].*x_sq=f32\[3\]"):
        call(x, jnp.ones(3, jnp.float32), c, precision=np.int32(0))
    with pytest.raises(ValueError, match="does not take x float64"):
        tiled.ffi_assign(jnp.ones((4, 3), jnp.float64), jnp.ones(4), jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="precision must be one of"):
        lloyd_step(x, c, precision="tf32")


# ------------------------------------------------------------ plans


def _plan(dtype, n, d, k, sms=132, smem=H200_SMEM):
    return _tsm2_ext.kmeans_tiled_plan(dtype, n, d, k, sms, smem)


@pytest.mark.parametrize("smem", (H200_SMEM, 163 * 1024, 99 * 1024), ids=("h200", "a100", "sm86"))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("d", (1, 64, 256, 1000, 4096, 10_000))
@pytest.mark.parametrize("k", (1, 200, 65_536))
def test_plans_fit_the_device(dtype, d, k, smem):
    p = _plan(dtype, 10**6, d, k, smem=smem)
    assert p["assign_supported"] and p["sums_supported"]
    assert p["assign_smem_bytes"] <= smem and p["sums_smem_bytes"] <= smem
    assert p["bucket"] * p["buckets"] >= k > (p["buckets"] - 1) * p["bucket"]
    assert p["stages"] >= (3 if p["resident"] else 2)
    # X stays on chip only where it is read against several centroid tiles.
    if p["resident"]:
        assert p["centroid_tiles"] >= 2
    # The sums sort the rows where one bucket does not hold all k clusters.
    bigger = _tsm2_ext.kmeans_tiled_plan(dtype, 10**6, d, k, 132, 2**40)
    assert bigger["piece"] == 0 and bigger["bucket"] == k
    if p["piece"]:
        assert p["sort_passes"] == (1 if k <= 256 else 2) and p["chunks"] == 1954
        assert p["merge_levels"] == 3  # 64 * 32^3 rows cover 10^6
    else:
        assert p["sums_smem_bytes"] <= smem


def test_plan_resident_tiles_where_they_fit():
    assert _plan("float32", 10**6, 256, 1024)["resident"]  # 8 sub-tiles of 18 KB
    assert not _plan("float32", 10**6, 512, 1024)["resident"]  # 16: streamed
    assert _plan("bfloat16", 10**6, 512, 1024)["resident"]  # 8 again
    assert not _plan("float32", 10**6, 256, 1024, smem=163 * 1024)["resident"]
    assert not _plan("float32", 10**6, 64, 128)["resident"]  # one centroid tile: nothing to keep


def test_plan_splits_the_centroid_tiles_where_rows_are_few():
    p = _plan("float32", 1000, 64, 65_536)  # 8 row tiles for 264 blocks
    assert p["splits"] == 33 and p["centroid_tiles"] == 512
    assert p["assign_workspace_bytes"] >= 33 * 1000 * 8
    assert _plan("float32", 10**6, 64, 65_536)["splits"] == 1
    assert _plan("float32", 1000, 64, 100)["splits"] == 1  # one centroid tile to split
    assert _plan("float32", 0, 64, 100)["assign_workspace_bytes"] == 16 * 25 + 16


def test_plan_sizes_the_tf32_copy_of_the_centroids():
    """f32's TF32 mode adds room for the centroids rounded to TF32 (sm_90a's warpgroup
    kernel reads them), 16-byte aligned after the assignment's workspace; other dtypes
    have no such copy."""
    for n, d, k in ((0, 64, 100), (1000, 33, 9_000), (10**6, 1024, 4096)):
        assert _plan("float32", n, d, k)["assign_tf32_copy_bytes"] == -(-k * d * 4 // 16) * 16 + 16
    assert "assign_tf32_copy_bytes" not in _plan("bfloat16", 1000, 64, 100)


def test_plan_sizes_the_refinement_of_the_default_f32_mode():
    """f32's default mode adds the same copy and, to refine the TF32 ranking to f32
    accuracy, four 4-byte columns of a row (two gaps, a runner-up, a list entry; each
    16-byte aligned), 16 bytes of counters and an 8-byte column (the listed rows'
    minima); other dtypes have none."""
    for n, d, k in ((0, 64, 100), (1003, 33, 9_000), (10**6, 1024, 4096)):
        p = _plan("float32", n, d, k)
        rows = -(-n * 4 // 16) * 16
        best = -(-n * 8 // 16) * 16
        assert p["assign_refine_bytes"] == p["assign_tf32_copy_bytes"] + 4 * rows + 16 + best
    assert "assign_refine_bytes" not in _plan("float16", 1000, 64, 100)


def test_plan_chunks_fill_the_gpu_and_size_the_partials():
    p = _plan("float32", 10**6, 64, 40)
    assert p["piece"] == 0 and p["buckets"] == 1 and p["chunks"] == 264
    per = 40 * 64 + 40 + 1
    assert p["sums_workspace_bytes"] == p["chunks"] * per * 4
    assert _plan("float32", 100, 64, 40)["chunks"] == 1  # one tile of rows


@pytest.mark.parametrize(("n", "d", "k"), [(10**6, 64, 4096), (10**6, 256, 64), (1000, 3, 70_000)])
def test_plan_sorts_where_one_bucket_does_not_hold_k(n, d, k):
    p = _plan("float32", n, d, k)
    assert p["piece"] == 64 and p["bucket"] == k and p["sums_smem_bytes"] == 0
    assert p["chunks"] == -(-n // 512)
    # The order of addition is the plan's, not the device's.
    assert _plan("float32", n, d, k, sms=16, smem=100 * 1024)["chunks"] == p["chunks"]
    # At least the labels and rows twice over (the sort's two buffers) and a partial
    # row of each piece's two slots.
    assert p["sums_workspace_bytes"] >= 16 * n + 2 * -(-n // 64) * 4 * (-(-d // 4) * 4 + 1)
    q = _tsm2_ext.kmeans_sums_plan("float32", n, d, k, k, p["chunks"], 64)
    assert q["workspace_bytes"] == p["sums_workspace_bytes"]


# ------------------------------------------------------------ routing


@pytest.mark.parametrize(
    ("dtype", "d", "k", "kernel"),
    [
        ("float32", 256, 16, "fused"),
        ("float32", 256, 32, "fused"),
        ("float32", 1024, 32, "tiled"),  # the fused step measured slower there
        ("float32", 64, 33, "tiled"),
        ("float32", 4097, 4, "tiled"),  # past the fused step's d
        ("bfloat16", 128, 65_536, "tiled"),
        ("float64", 1024, 32, "fused"),  # the tiled assignment takes no f64
        ("float64", 64, 33, None),
    ],
)
def test_kernel_for_each_shape(dtype, d, k, kernel):
    assert fused.kernel_for(dtype, d, k) == kernel
    assert fused.decide_step(dtype, d, k, platform="cuda", mode="auto").target == (kernel or "jnp")


def _targets(fn, *args, platform):
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=(platform,)).as_text()
    return re.findall(r"custom_call @(tsm2_kmeans_\w+)", text)


@pytest.mark.parametrize(
    ("n", "d", "k", "refined"),
    [
        (40_000, 64, 300, True),
        (40_000, 63, 300, False),  # rows not whole 16-byte vectors
        (40_000, 64, 100, False),  # one centroid tile
        (1_000, 64, 300, False),  # centroid tiles split over blocks
    ],
)
def test_default_f32_assignment_sizes_the_refinement_where_it_runs(n, d, k, refined):
    """The default f32 mode's workspace holds the refinement of a TF32 ranking only where
    the launcher refines (the plan's conditions); elsewhere it takes the split products,
    and the TF32 mode sizes its copy of the centroids alone."""
    f32 = jnp.float32
    x, c, x_sq = jnp.zeros((n, d), f32), jnp.zeros((k, d), f32), jnp.zeros((n,), f32)

    def workspace(precision):
        fn = lambda x, c, s: tiled.ffi_assign(x, s, c, precision=precision)
        text = jax.jit(fn).trace(x, c, x_sq).lower(lowering_platforms=("cuda",)).as_text()
        call = next(line for line in text.splitlines() if "tsm2_kmeans_assign" in line)
        return int(re.findall(r"tensor<(\d+)xui8>", call)[-1])

    p = _ffi.kmeans_tiled_plan("float32", n, d, k)
    extra = p["assign_refine_bytes"] if refined else 0
    assert workspace("float32") == p["assign_workspace_bytes"] + extra
    assert workspace("tensorfloat32") == p["assign_workspace_bytes"] + p["assign_tf32_copy_bytes"]


@pytest.mark.parametrize("precision", tiled.PRECISIONS)
def test_cuda_lowering_runs_assign_then_sums(precision):
    x, c = jnp.zeros((1000, 300), jnp.float32), jnp.zeros((100, 300), jnp.float32)
    step = lambda x, c: lloyd_step(x, c, precision=precision)
    assert _targets(step, x, c, platform="cuda") == ["tsm2_kmeans_assign", "tsm2_kmeans_sums"]
    text = jax.jit(step).trace(x, c).lower(lowering_platforms=("cuda",)).as_text()
    assert f"precision = {tiled.PRECISIONS.index(precision)} : i32" in text
    assert _targets(step, x, c, platform="cpu") == []
    with jax_tsm2.custom_call_mode("never"):
        assert _targets(step, x, c, platform="cuda") == []
    with jax_tsm2.custom_call_mode("always"):
        assert _targets(step, x, c, platform="cpu") == ["tsm2_kmeans_assign", "tsm2_kmeans_sums"]


def test_kmeans_iterates_and_assigns_through_the_tiled_kernels_on_cuda():
    x = jnp.zeros((5000, 64), jnp.float32)
    run = lambda x: kmeans(jax.random.key(0), x, 100, init="random", max_iter=3)
    got = _targets(run, x, platform="cuda")
    # the loop body's step and update, then the final assignment
    assert got == ["tsm2_kmeans_assign", "tsm2_kmeans_sums", "tsm2_kmeans_update",
                   "tsm2_kmeans_assign"]  # fmt: skip
    assert _targets(lambda x: jax_tsm2.clustering.assign(x, x[:100]), x, platform="cuda") == [
        "tsm2_kmeans_assign"
    ]


def test_explain_names_the_tiled_step():
    step, update = jax_tsm2.explain.kmeans_step((10**6, 128), 1024, dtype=jnp.float32, show=False)
    assert (step.target, update.target) == ("tiled", "kernel")
    assert "never write the n x k distances" in step.reason


# ------------------------------------------------------------ k-means through the tiled step


def _blobs(n, d, k, seed):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=8.0, size=(k, d))
    return np.asarray(centres[rng.integers(0, k, n)] + rng.normal(size=(n, d)), np.float32)


@pytest.mark.parametrize(
    "kw", [{}, slow({"weights": True}, id="weights"), slow({"n_init": 2}, id="n_init")], ids=str
)
def test_kmeans_through_the_tiled_step_matches_the_jnp_path(kw):
    x = _blobs(1500, 7, 40, seed=4)
    rng = np.random.default_rng(5)
    opts = {"max_iter": 30}
    if kw.get("weights"):
        opts["sample_weight"] = rng.uniform(0.1, 3.0, len(x)).astype(np.float32)
    if "n_init" in kw:
        opts.update(init="random", n_init=kw["n_init"])
    else:
        opts["init"] = x[rng.choice(len(x), 40, replace=False)]
    with jax_tsm2.custom_call_mode("never"):
        ref = kmeans(jax.random.key(2), x, 40, **opts)
    with jax_tsm2.custom_call_mode("always"):  # CPU: the tiled reference targets
        assert fused.decide_step("float32", 7, 40, platform="cpu").target == "tiled"
        got = kmeans(jax.random.key(2), x, 40, **opts)
    np.testing.assert_array_equal(np.asarray(got.labels), np.asarray(ref.labels))
    np.testing.assert_allclose(np.asarray(got.centroids), np.asarray(ref.centroids), rtol=1e-4,
                               atol=1e-4)  # fmt: skip
    np.testing.assert_allclose(float(got.inertia), float(ref.inertia), rtol=1e-5)
    assert int(got.n_iter) == int(ref.n_iter)


def test_kmeans_in_tf32_keeps_the_inertia():
    x = _blobs(2000, 24, 50, seed=6)
    init = x[:50]
    with jax_tsm2.custom_call_mode("always"):
        exact = kmeans(jax.random.key(0), x, 50, init=init, max_iter=20)
        fast = kmeans(jax.random.key(0), x, 50, init=init, max_iter=20, precision="tensorfloat32")
    assert abs(float(fast.inertia) - float(exact.inertia)) <= 1e-3 * float(exact.inertia)
    with pytest.raises(ValueError, match="precision must be one of"):
        kmeans(jax.random.key(0), x, 50, precision="highest")


def test_the_estimator_takes_the_precision():
    x = _blobs(600, 5, 40, seed=7)
    km = jax_tsm2.KMeans(n_clusters=40, init=x[:40], precision="tensorfloat32", max_iter=10)
    assert km.get_params()["precision"] == "tensorfloat32"
    with jax_tsm2.custom_call_mode("always"):
        labels = km.fit(x).predict(x)
    # predict ranks the same distances in TF32 from another shift (the centroids' mean,
    # not the data's): near ties may go either way.
    assert np.mean(np.asarray(labels) == np.asarray(km.labels_)) >= 0.98
    with pytest.raises(ValueError, match="precision must be one of"):
        jax_tsm2.KMeans(n_clusters=3, precision="fast").fit(x)
