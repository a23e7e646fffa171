"""k-means (jax_tsm2.kmeans, jax_tsm2.clustering): agreement with scikit-learn, weights,
relocation, numerics, jit/vmap, sharding over CPU devices, the estimator and the command line.

scikit-learn is optional: tests that compare against it skip when it is missing. The sharded test
runs in a subprocess, because ``--xla_force_host_platform_device_count`` must be set before jax
starts and this process's jax is already running (conftest).
"""

from __future__ import annotations

import doctest
import functools
import importlib
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import package_env, run_python, slow

from jax_tsm2.clustering import KMeans, assign, kmeans, kmeans_plusplus, sq_distances
from jax_tsm2.clustering import core as kcore

KEY = jax.random.key(0)


def _blobs(n=3000, d=8, k=6, seed=0, spread=4.0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=spread, size=(k, d))
    return centers[rng.integers(0, k, n)] + rng.normal(size=(n, d)), centers


def _dataset(name):
    if name == "blobs":
        return _blobs()[0], 6
    datasets = pytest.importorskip("sklearn.datasets")
    bunch = getattr(datasets, f"load_{name}")()
    return np.asarray(bunch.data, np.float64), len(np.unique(bunch.target))


def _init_from(x, k, seed=1):
    return x[np.random.default_rng(seed).choice(len(x), k, replace=False)]


def _sklearn_fit(x, init, **kw):
    cluster = pytest.importorskip("sklearn.cluster")
    k = init.shape[0]
    return cluster.KMeans(k, init=init, n_init=1, algorithm="lloyd", **kw).fit(x)


# ------------------------------------------------------------ scikit-learn agreement


@pytest.mark.parametrize("name", ["iris", slow("wine"), "digits", slow("blobs")])
def test_agrees_with_sklearn_from_same_init(name):
    x, k = _dataset(name)
    init = _init_from(x, k)
    ref = _sklearn_fit(x, init)
    s = kmeans(KEY, x, k, init=init)
    agree = np.mean(np.asarray(s.labels) == ref.labels_)
    assert agree >= 0.999, agree
    assert abs(float(s.inertia) - ref.inertia_) <= 1e-5 * ref.inertia_
    np.testing.assert_allclose(np.asarray(s.centroids), ref.cluster_centers_, rtol=1e-6, atol=1e-8)
    assert int(s.n_iter) == ref.n_iter_
    assert bool(s.converged)


def test_agrees_with_sklearn_weighted():
    x, k = _dataset("blobs")
    w = np.random.default_rng(3).uniform(0.1, 3.0, len(x))
    init = _init_from(x, k, seed=5)
    # tol=0: scikit-learn's tolerance ignores weights, ours does not (documented).
    ref = _sklearn_fit(x, init, tol=0.0).fit(x, sample_weight=w)
    s = kmeans(KEY, x, k, init=init, tol=0.0, sample_weight=w)
    assert np.mean(np.asarray(s.labels) == ref.labels_) >= 0.999
    assert abs(float(s.inertia) - ref.inertia_) <= 1e-5 * ref.inertia_


def test_empty_cluster_relocated_like_sklearn():
    x, _ = _blobs(n=500, d=4, k=3, seed=2)
    init = _init_from(x, 4, seed=0)
    init[1] = init[1] + 1e3  # never the closest: empty in the first iteration
    init[3] = init[3] - 1e3
    s = kmeans(KEY, x, 4, init=init)
    counts = np.bincount(np.asarray(s.labels), minlength=4)
    assert (counts > 0).all(), counts
    ref = _sklearn_fit(x, init)
    assert np.mean(np.asarray(s.labels) == ref.labels_) >= 0.999
    assert abs(float(s.inertia) - ref.inertia_) <= 1e-5 * ref.inertia_


def test_empty_cluster_rule_directly():
    # Points on a line; cluster 1 empty; the farthest point from its centre moves there.
    x = jnp.array([[0.0], [1.0], [2.0], [10.0]])
    w = jnp.array([1.0, 1.0, 1.0, 2.0])
    c = jnp.array([[1.0], [100.0]])
    labels, mind = kcore._assign_sq(x, kcore._sq_norms(x), c)
    new = kcore._update(x, w, labels, mind, c, 2, None)
    # cluster 0 keeps points 0..2 (mean 1), cluster 1 gets point 3 (x=10)
    np.testing.assert_allclose(np.asarray(new), [[1.0], [10.0]])


# ------------------------------------------------------------ k-means++ and weights


def test_kmeans_plusplus_quality():
    x, centers = _blobs(n=4000, d=5, k=8, seed=4, spread=20.0)
    hits = 0
    for i in range(5):
        c = np.asarray(kmeans_plusplus(jax.random.key(i), x, 8))
        nearest = np.argmin(((c[:, None] - centers[None]) ** 2).sum(-1), axis=1)
        hits += len(set(nearest.tolist())) == 8
    assert hits >= 4  # greedy k-means++ seeds one centre per well separated blob
    s = kmeans(KEY, x, 8, n_init=3)
    ideal = np.min(((x[:, None] - centers[None]) ** 2).sum(-1), axis=1).sum()
    assert float(s.inertia) <= 1.01 * ideal


def test_kmeans_plusplus_ignores_zero_weight_points():
    x, _ = _blobs(n=400, d=3, k=4, seed=6)
    w = np.zeros(len(x))
    w[:40] = 1.0
    c = np.asarray(kmeans_plusplus(jax.random.key(2), x, 5, sample_weight=w))
    d = ((c[:, None] - x[None, :40]) ** 2).sum(-1).min(axis=1)
    np.testing.assert_allclose(d, 0, atol=1e-9)


def test_integer_weights_equal_repeated_points():
    x, _ = _blobs(n=600, d=4, k=5, seed=7)
    w = np.random.default_rng(1).integers(1, 4, len(x))
    xr = np.repeat(x, w, axis=0)
    init = _init_from(x, 5, seed=3)
    a = kmeans(KEY, x, 5, init=init, sample_weight=w.astype(float))
    b = kmeans(KEY, xr, 5, init=init)
    np.testing.assert_allclose(np.asarray(a.centroids), np.asarray(b.centroids), rtol=1e-10)
    np.testing.assert_allclose(float(a.inertia), float(b.inertia), rtol=1e-10)
    assert int(a.n_iter) == int(b.n_iter)
    np.testing.assert_array_equal(np.repeat(np.asarray(a.labels), w), np.asarray(b.labels))


# ------------------------------------------------------------ numerics


def test_far_from_origin_f32():
    x, _ = _blobs(n=2000, d=6, k=4, seed=8, spread=3.0)
    init = _init_from(x, 4, seed=2)
    near = kmeans(KEY, x.astype(np.float32), 4, init=init.astype(np.float32))
    far = kmeans(KEY, (x + 1e4).astype(np.float32), 4, init=(init + 1e4).astype(np.float32))
    assert np.mean(np.asarray(near.labels) == np.asarray(far.labels)) >= 0.999
    np.testing.assert_allclose(float(far.inertia), float(near.inertia), rtol=1e-3)
    # assign() on far data: without the shift, ||x||^2 ~ 6e8 would swamp distances ~ 10 in f32
    lab_far, d_far = assign((x + 1e4).astype(np.float32), np.asarray(far.centroids))
    lab_near, d_near = assign(x.astype(np.float32), np.asarray(far.centroids) - 1e4)
    assert np.mean(np.asarray(lab_far) == np.asarray(lab_near)) >= 0.999
    np.testing.assert_allclose(np.asarray(d_far), np.asarray(d_near), rtol=1e-2, atol=1e-2)


def test_distances_nonnegative_and_exact_on_points():
    x = jnp.asarray(_blobs(n=50, d=3, k=2, seed=9)[0], jnp.float32)
    d = sq_distances(x, x[:5])
    assert float(jnp.min(d)) >= 0.0
    np.testing.assert_allclose(np.asarray(jnp.diagonal(d[:5])), 0, atol=1e-4)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, slow(jnp.float16)])
def test_low_precision_accumulates_in_f32(dtype):
    x, _ = _blobs(n=1000, d=16, k=4, seed=10, spread=6.0)
    init = _init_from(x, 4, seed=4)
    s = kmeans(KEY, jnp.asarray(x, dtype), 4, init=jnp.asarray(init, dtype))
    assert s.centroids.dtype == jnp.float32 and s.inertia.dtype == jnp.float32
    xr = np.asarray(jnp.asarray(x, dtype), np.float64)  # the same data, exactly
    ref = kmeans(KEY, xr, 4, init=np.asarray(jnp.asarray(init, dtype), np.float64))
    # the product sees bf16/f16 centroids, so points near a boundary may flip
    assert np.mean(np.asarray(s.labels) == np.asarray(ref.labels)) >= 0.97
    np.testing.assert_allclose(float(s.inertia), float(ref.inertia), rtol=2e-2)
    _, d2 = assign(jnp.asarray(x, dtype), s.centroids)
    assert d2.dtype == jnp.float32


def test_cross_uses_tsm2_matmul_with_f32_accumulation():
    x = jnp.ones((64, 8), jnp.bfloat16)
    c = jnp.ones((3, 8), jnp.float32)
    hlo = jax.jit(kcore._cross).lower(x, c).as_text()
    assert kcore._cross(x, c).dtype == jnp.float32
    assert "f32" in hlo


# ------------------------------------------------------------ state, jit, vmap


def test_state_and_history():
    x, _ = _blobs(n=800, d=4, k=3, seed=11)
    s = kmeans(KEY, x, 3, max_iter=50)
    h = np.asarray(s.inertia_history)
    n = int(s.n_iter)
    assert h.shape == (50,) and np.isnan(h[n:]).all() and not np.isnan(h[:n]).any()
    assert (np.diff(h[:n]) <= 1e-9 * h[0]).all()  # Lloyd never increases the inertia
    assert float(s.inertia) <= h[n - 1] + 1e-9 * h[0]
    s1 = kmeans(KEY, x, 3, max_iter=1)
    assert int(s1.n_iter) == 1 and not bool(s1.converged)


def test_jit_and_vmap_over_restarts():
    x, _ = _blobs(n=1000, d=5, k=4, seed=12)
    f = jax.jit(functools.partial(kmeans, k=4, max_iter=100, init="k-means++"))
    s = f(KEY, x)
    assert s.centroids.shape == (4, 5)
    keys = jax.random.split(KEY, 4)
    runs = jax.vmap(lambda key: kmeans(key, x, 4, max_iter=100))(keys)
    assert runs.centroids.shape == (4, 4, 5) and runs.labels.shape == (4, 1000)
    best = kmeans(KEY, x, 4, n_init=4, max_iter=100)
    np.testing.assert_allclose(float(best.inertia), float(jnp.min(runs.inertia)), rtol=1e-12)
    one = f(keys[2], x)  # a vmapped restart equals the single run
    np.testing.assert_allclose(float(one.inertia), float(runs.inertia[2]), rtol=1e-12)


def test_argument_errors():
    x = np.zeros((5, 2))
    with pytest.raises(ValueError, match="init"):
        kmeans(KEY, x, 2, init="bogus")
    with pytest.raises(ValueError, match="shape"):
        kmeans(KEY, x, 2, init=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="n_samples"):
        kmeans(KEY, x, 6)
    with pytest.raises(ValueError, match="2-D"):
        kmeans(KEY, np.zeros(5), 2)


# Argument checks come before the mode matters: the default run takes two of the three.
MODES = ("auto", "always", slow("never"))


def _with_nan_inf(x, value):
    x = np.array(x)
    x[3, 1] = value
    return x


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("value", "message"),
    [(np.nan, "Input X contains NaN"), (np.inf, "Input X contains infinity")],
    ids=["nan", "inf"],
)
def test_non_finite_data_is_a_value_error_as_in_scikit_learn(value, message, mode):
    import jax_tsm2

    x = _with_nan_inf(_blobs(60, 3, 2)[0], value)
    with jax_tsm2.custom_call_mode(mode):
        for fit in (
            lambda: kmeans(KEY, x, 2),
            lambda: kmeans(KEY, jnp.asarray(x, jnp.float32), 2),
            lambda: kmeans_plusplus(KEY, x, 2),
            lambda: KMeans(2, random_state=0).fit(x),
        ):
            with pytest.raises(ValueError, match=message):
                fit()
        km = KMeans(2, random_state=0).fit(_blobs(60, 3, 2)[0])
        for use in (km.predict, km.transform, km.score):
            with pytest.raises(ValueError, match=message):
                use(x)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("weights", "message"),
    [
        (lambda n: -np.ones(n), "Negative values in data passed to `sample_weight`"),
        (lambda n: np.where(np.arange(n) == 7, -1e-3, 1.0), "Negative values"),
        (lambda n: np.zeros(n), "at least one non-zero number"),
        (lambda n: np.where(np.arange(n) == 7, np.nan, 1.0), "sample_weight contains NaN"),
        (lambda n: np.where(np.arange(n) == 7, np.inf, 1.0), "sample_weight contains infinity"),
    ],
    ids=["negative", "one-negative", "all-zero", "nan", "inf"],
)
def test_bad_sample_weights_are_value_errors(weights, message, mode):
    """They gave NaN centres or silently wrong ones."""
    import jax_tsm2

    x = _blobs(60, 3, 2)[0]
    w = weights(60)
    with jax_tsm2.custom_call_mode(mode):
        for fit in (
            lambda: kmeans(KEY, x, 2, sample_weight=w),
            lambda: kmeans_plusplus(KEY, x, 2, sample_weight=w),
            lambda: KMeans(2, random_state=0).fit(x, sample_weight=w),
            lambda: KMeans(2, random_state=0).fit(x).score(x, sample_weight=w),
        ):
            with pytest.raises(ValueError, match=message):
                fit()


@pytest.mark.parametrize("mode", MODES)
def test_empty_data_is_the_same_value_error_in_every_mode(mode):
    """Zero features gave inertia 0 in one mode and an internal error in another."""
    import jax_tsm2
    from jax_tsm2.clustering import lloyd_step

    with jax_tsm2.custom_call_mode(mode):
        for shape, what in (((10, 0), "0 feature"), ((0, 3), "0 sample")):
            x = np.zeros(shape)
            c = np.zeros((2, shape[1]))
            calls = [
                (kmeans, (KEY, x, 2)),
                (kmeans_plusplus, (KEY, x, 2)),
                (KMeans(2).fit, (x,)),
                (assign, (x, c)),
                (sq_distances, (x, c)),
                (lloyd_step, (x, c)),
            ]
            for f, args in calls:
                with pytest.raises(ValueError, match=f"Found array with {what}"):
                    f(*args)


def test_numpy_integers_are_taken_wherever_python_ints_are():
    x = _blobs(200, 3, 3)[0]
    want = kmeans(KEY, x, 3, n_init=2, max_iter=50)
    got = kmeans(KEY, x, np.int64(3), n_init=np.int32(2), max_iter=np.int16(50))
    np.testing.assert_array_equal(np.asarray(got.centroids), np.asarray(want.centroids))
    np.testing.assert_array_equal(
        np.asarray(kmeans_plusplus(KEY, x, np.int64(3), n_local_trials=np.int8(4))),
        np.asarray(kmeans_plusplus(KEY, x, 3, n_local_trials=4)),
    )
    km = KMeans(np.int64(3), n_init=np.int64(2), max_iter=np.int64(50), random_state=0).fit(x)
    assert km.cluster_centers_.shape == (3, 3)
    for bad in (2.0, True, "3", 0, -1):
        with pytest.raises(ValueError, match="must be a positive int"):
            kmeans(KEY, x, bad)
        with pytest.raises(ValueError, match="must be a positive int"):
            KMeans(bad).fit(x)
    with pytest.raises(ValueError, match="tol"):
        kmeans(KEY, x, 3, tol=-1.0)


def test_under_jit_values_are_not_checked_but_shapes_are():
    """Traced data have no values to check: NaN data give a NaN inertia there."""
    x = _with_nan_inf(_blobs(60, 3, 2)[0], np.nan)
    s = jax.jit(lambda x: kmeans(KEY, x, 2, max_iter=5))(x)
    assert np.isnan(float(s.inertia))
    with pytest.raises(ValueError, match="0 feature"):
        jax.jit(lambda x: kmeans(KEY, x, 2))(np.zeros((10, 0)))


# ------------------------------------------------------------ sharded over CPU devices

_SHARDED = textwrap.dedent(
    """
    import jax, numpy as np
    jax.config.update("jax_enable_x64", True)
    from functools import partial
    from jax.sharding import PartitionSpec as P
    from jax_tsm2.clustering import kmeans
    assert jax.device_count() == 4, jax.devices()
    mesh = jax.make_mesh((4,), ("p",))
    rng = np.random.default_rng(0)
    centers = rng.normal(scale=4, size=(5, 6))
    x = centers[rng.integers(0, 5, 4000)] + rng.normal(size=(4000, 6)) + 100.0
    w = rng.uniform(0.5, 2.0, 4000)
    init = x[:5].copy(); init[4] += 1e3  # one empty cluster to relocate
    key = jax.random.key(3)
    xs_, ws_ = (jax.device_put(a, jax.NamedSharding(mesh, P("p"))) for a in (x, w))
    for kind in ("array", "k-means++"):
        kw = dict(init=init) if kind == "array" else dict(n_init=2)
        one = kmeans(key, x, 5, sample_weight=w, **kw)
        @jax.jit
        @partial(jax.shard_map, mesh=mesh, in_specs=(P("p"), P("p")),
                 out_specs=(P(), P("p"), P(), P(), P()))
        def sharded(xs, ws):
            s = kmeans(key, xs, 5, sample_weight=ws, axis_name="p", **kw)
            return s.centroids, s.labels, s.inertia, s.n_iter, s.inertia_history
        c, lab, inertia, n_iter, hist = sharded(xs_, ws_)
        np.testing.assert_allclose(np.asarray(c), np.asarray(one.centroids), rtol=1e-9)
        np.testing.assert_allclose(float(inertia), float(one.inertia), rtol=1e-9)
        np.testing.assert_array_equal(np.asarray(lab), np.asarray(one.labels))
        assert int(n_iter) == int(one.n_iter)
        print(kind, "ok", int(n_iter), float(inertia))
    """
)


@pytest.mark.slow  # a second interpreter with 4 devices; sharded_cases.py covers the step
def test_sharded_equals_one_device():
    env = package_env()
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    r = run_python(["-c", _SHARDED], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "array ok" in r.stdout and "k-means++ ok" in r.stdout


# ------------------------------------------------------------ estimator


def test_estimator_api():
    x, _ = _blobs(n=900, d=4, k=3, seed=13)
    km = KMeans(3, random_state=0, n_init=2)
    labels = km.fit_predict(x)
    assert km.cluster_centers_.shape == (3, 4) and km.n_iter_ >= 1
    np.testing.assert_array_equal(np.asarray(labels), np.asarray(km.labels_))
    np.testing.assert_array_equal(np.asarray(km.predict(x)), np.asarray(km.labels_))
    t = np.asarray(km.transform(x))
    assert t.shape == (900, 3)
    np.testing.assert_array_equal(t.argmin(axis=1), np.asarray(km.labels_))
    np.testing.assert_allclose(km.score(x), -km.inertia_, rtol=1e-10)
    np.testing.assert_allclose((t.min(axis=1) ** 2).sum(), km.inertia_, rtol=1e-8)
    assert km.get_params()["n_clusters"] == 3
    assert km.set_params(n_clusters=4).fit(x).cluster_centers_.shape == (4, 4)
    with pytest.raises(ValueError, match="not fitted"):
        KMeans(2).predict(x)


@pytest.mark.slow  # the estimator's own tests: test_kmeans_estimator.py
def test_estimator_inits_and_weights():
    x, _ = _blobs(n=500, d=3, k=3, seed=14)
    init = _init_from(x, 3)
    calls = []

    def my_init(X, n_clusters, random_state):
        calls.append((X.shape, n_clusters, type(random_state).__name__))
        return init

    a = KMeans(3, init=my_init, random_state=1).fit(x)
    b = KMeans(3, init=init).fit(x)
    assert calls == [((500, 3), 3, "RandomState")]
    np.testing.assert_allclose(np.asarray(a.cluster_centers_), np.asarray(b.cluster_centers_))
    r = KMeans(3, init="random", random_state=jax.random.key(5)).fit(x)
    assert r.inertia_ > 0
    w = np.random.default_rng(0).integers(1, 3, len(x)).astype(float)
    kw = KMeans(3, init=init).fit(x, sample_weight=w)
    kr = KMeans(3, init=init).fit(np.repeat(x, w.astype(int), axis=0))
    np.testing.assert_allclose(kw.inertia_, kr.inertia_, rtol=1e-10)
    np.testing.assert_allclose(kw.score(x, sample_weight=w), -kw.inertia_, rtol=1e-8)


def test_estimator_matches_sklearn_estimator():
    cluster = pytest.importorskip("sklearn.cluster")
    x, k = _dataset("iris")
    init = _init_from(x, k, seed=9)
    ours = KMeans(k, init=init).fit(x)
    ref = cluster.KMeans(k, init=init, n_init=1).fit(x)
    assert np.mean(np.asarray(ours.labels_) == ref.labels_) >= 0.999
    np.testing.assert_allclose(np.asarray(ours.transform(x)), ref.transform(x), rtol=1e-6)
    np.testing.assert_allclose(ours.score(x), ref.score(x), rtol=1e-8)


# ------------------------------------------------------------ docs and command line


@pytest.mark.parametrize(
    "name",
    [
        "jax_tsm2.clustering",
        "jax_tsm2.clustering.core",
        "jax_tsm2.clustering.estimator",
        "jax_tsm2.clustering.fused",
        "jax_tsm2.clustering.tiled",
        "jax_tsm2.clustering.step_result",
    ],
)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_cli_generated(capsys):
    from jax_tsm2.clustering.__main__ import main

    assert main(["--generate", "3000,4,3", "--max-iter", "20"]) == 0
    out = capsys.readouterr().out
    assert "ms per iteration" in out and "labels equal on 100.000%" in out


@pytest.mark.slow  # test_agrees_with_sklearn_from_same_init compares by default
def test_cli_compare_sklearn(capsys):
    pytest.importorskip("sklearn")
    from jax_tsm2.clustering.__main__ import main

    assert main(["--dataset", "iris", "--compare-sklearn"]) == 0
    out = capsys.readouterr().out
    assert "labels agree on 100.000%" in out
