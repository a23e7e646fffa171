"""``jax_tsm2.KMeans`` as a scikit-learn estimator: scikit-learn's own estimator
checks, pipelines, model selection, cloning and the notebook display."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import run_python

sklearn = pytest.importorskip("sklearn")

from sklearn.base import clone  # noqa: E402
from sklearn.datasets import make_blobs  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402
from sklearn.metrics import adjusted_rand_score, make_scorer  # noqa: E402
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from jax_tsm2 import KMeans  # noqa: E402
from jax_tsm2.clustering.estimator import EXPECTED_FAILED_CHECKS  # noqa: E402

ARI = make_scorer(adjusted_rand_score)


def _blobs(n=301, d=5, k=4, seed=0):
    """Separated blobs with features on very different scales (what a scaler is for)."""
    x, y = make_blobs(n, n_features=d, centers=k, cluster_std=0.6, random_state=seed)
    return x * np.logspace(0, 3, d), y


def _sq_dist64(x, c):
    x = np.asarray(x, np.float64)
    c = np.asarray(c, np.float64)
    return ((x[:, None, :] - c[None, :, :]) ** 2).sum(-1)


@pytest.mark.slow  # scikit-learn's whole conformance suite
def test_check_estimator_passes():
    from sklearn.utils.estimator_checks import check_estimator

    try:
        results = check_estimator(
            KMeans(), on_fail=None, expected_failed_checks=EXPECTED_FAILED_CHECKS
        )
    except TypeError:  # scikit-learn < 1.6: failures declared by the _xfail_checks tag
        check_estimator(KMeans())
        return
    by_status = {}
    for r in results:
        by_status.setdefault(r["status"], []).append(r["check_name"])
    failed = [(r["check_name"], r["exception"]) for r in results if r["status"] == "failed"]
    assert not failed
    assert len(by_status["passed"]) >= 40
    # the declared failures still fail: a declaration that no longer applies is stale
    assert sorted(by_status.get("xfail", [])) == sorted(EXPECTED_FAILED_CHECKS)


def test_tags():
    get_tags = getattr(sklearn.utils, "get_tags", None)
    if get_tags is None:
        pytest.skip("scikit-learn < 1.6 has no __sklearn_tags__")

    tags = get_tags(KMeans())
    assert tags.estimator_type == "clusterer"
    assert tags.transformer_tags is not None
    assert "float32" in tags.transformer_tags.preserves_dtype
    assert not tags.input_tags.sparse and not tags.input_tags.allow_nan


def test_not_fitted_and_feature_count_errors():
    x, _ = _blobs()
    km = KMeans(3, random_state=0)
    for method in (km.predict, km.transform, km.score):
        with pytest.raises(NotFittedError, match="not fitted"):
            method(x)
    km.fit(x)
    assert km.n_features_in_ == 5
    for bad in (x[:, :3], jnp.asarray(x[:, :3])):  # NumPy and JAX inputs alike
        with pytest.raises(ValueError, match="X has 3 features, but KMeans is expecting 5"):
            km.predict(bad)
    with pytest.raises(ValueError, match="2D array"):
        km.predict(x[0])


def test_jax_arrays_keep_their_dtype_and_numpy_is_converted_as_in_scikit_learn():
    x, _ = _blobs(n=203, d=3, k=3, seed=4)
    x = x / x.std(0)
    km = KMeans(3, random_state=0).fit(x)
    assert km.cluster_centers_.dtype == jnp.float64
    for data, dtype in ((x.astype(np.float32), jnp.float32), (x.astype(np.int64), jnp.float64)):
        t = km.transform(data)
        assert t.dtype == dtype
        ref = np.sqrt(_sq_dist64(data, km.cluster_centers_))
        np.testing.assert_allclose(np.asarray(t, np.float64), ref, rtol=2e-5, atol=1e-5)
    xb = jnp.asarray(x, jnp.bfloat16)
    kb = KMeans(3, random_state=0).fit(xb)
    assert kb.cluster_centers_.dtype == jnp.float32  # bf16 products, f32 accumulation
    assert adjusted_rand_score(np.asarray(kb.labels_), np.asarray(km.labels_)) > 0.99


def test_pipeline_with_standard_scaler():
    x, y = _blobs()
    pipe = make_pipeline(StandardScaler(), KMeans(4, random_state=0)).fit(x)
    xs = StandardScaler().fit_transform(x)
    km = KMeans(4, random_state=0).fit(xs)
    np.testing.assert_allclose(
        np.asarray(pipe[-1].cluster_centers_), np.asarray(km.cluster_centers_), rtol=1e-12
    )
    labels = np.asarray(pipe.predict(x))
    np.testing.assert_array_equal(labels, np.asarray(pipe[-1].labels_))
    assert adjusted_rand_score(y, labels) > 0.99
    t = np.asarray(pipe.transform(x))
    np.testing.assert_allclose(t**2, _sq_dist64(xs, km.cluster_centers_), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(pipe.score(x), -km.inertia_, rtol=1e-10)
    # unscaled, the largest feature decides alone and the blobs are not recovered as well
    raw = KMeans(4, random_state=0).fit(x)
    assert adjusted_rand_score(y, np.asarray(raw.labels_)) < adjusted_rand_score(y, labels)


@pytest.mark.slow  # 15 fits of a pipeline
def test_grid_search_over_n_clusters():
    x, y = _blobs(n=300, k=4)  # equal folds: one compilation per n_clusters
    pipe = make_pipeline(StandardScaler(), KMeans(random_state=0, n_init=3))
    grid = {"kmeans__n_clusters": [2, 3, 4, 5, 6]}
    ari = GridSearchCV(pipe, grid, scoring=ARI, cv=3).fit(x, y)
    assert np.all(np.isfinite(ari.cv_results_["mean_test_score"]))
    assert ari.best_params_ == {"kmeans__n_clusters": 4}  # the true number of blobs
    assert ari.best_score_ > 0.99
    # the estimator's own score (negative inertia on the held-out fold) is finite,
    # and more clusters never fit the held-out blobs worse
    own = GridSearchCV(pipe, grid, cv=3).fit(x)
    scores = own.cv_results_["mean_test_score"]
    assert np.all(np.isfinite(scores)) and np.all(scores < 0)
    assert np.all(np.diff(scores) > 0)
    assert own.best_params_ == {"kmeans__n_clusters": 6}
    assert own.best_estimator_[-1].cluster_centers_.shape == (6, 5)


@pytest.mark.slow  # model selection: with the grid search
def test_cross_val_score_is_the_held_out_negative_inertia():
    x, y = _blobs(n=250)
    km = KMeans(4, random_state=0)
    cv = KFold(5, shuffle=True, random_state=0)
    scores = cross_val_score(km, x, cv=cv)
    assert scores.shape == (5,) and np.all(np.isfinite(scores))
    for score, (train, test) in zip(scores, cv.split(x), strict=True):
        fitted = clone(km).fit(x[train])
        want = _sq_dist64(x[test], fitted.cluster_centers_).min(axis=1).sum()
        np.testing.assert_allclose(score, -want, rtol=1e-9)
    ari = cross_val_score(km, x, y, cv=cv, scoring=ARI)
    assert np.all(ari > 0.95)


def test_clone():
    x, _ = _blobs(n=157, d=3, k=3, seed=2)
    km = KMeans(3, init="random", n_init=3, max_iter=17, tol=1e-3, random_state=5)
    fitted = km.fit(x)
    copy = clone(fitted)
    assert copy is not fitted and copy.get_params() == km.get_params()
    assert not hasattr(copy, "cluster_centers_")
    with pytest.raises(NotFittedError):
        copy.predict(x)
    copy.fit(x)
    np.testing.assert_array_equal(
        np.asarray(copy.cluster_centers_), np.asarray(fitted.cluster_centers_)
    )
    assert copy.set_params(n_clusters=2).fit(x).cluster_centers_.shape == (2, 3)
    with pytest.raises(ValueError, match="Invalid parameter 'n_cluster'"):
        km.set_params(n_cluster=2)


def test_notebook_display():
    km = KMeans(5, random_state=0, max_iter=20)
    assert repr(km) == "KMeans(max_iter=20, n_clusters=5, random_state=0)"
    html = km._repr_html_()
    assert "KMeans" in html and "max_iter" in html and "<style" in html
    assert "text/html" in km._repr_mimebundle_()
    pipe = make_pipeline(StandardScaler(), km)
    html = pipe._repr_html_()
    assert "StandardScaler" in html and "KMeans" in html


def test_without_scikit_learn_the_estimator_still_fits_and_predicts():
    code = """
import sys
sys.modules["sklearn"] = None  # as if scikit-learn were not installed
import numpy as np
from jax_tsm2 import KMeans
x = np.random.default_rng(0).normal(size=(101, 3)) + np.repeat([[0.0], [9.0]], [50, 51], 0)
km = KMeans(3, random_state=0)
try:
    km.predict(x)
except ValueError as e:
    assert "not fitted" in str(e)
else:
    raise AssertionError("predict before fit")
km.set_params(n_clusters=2).fit(x)
assert km.get_params()["n_clusters"] == 2 and km.n_features_in_ == 3
assert sorted(np.bincount(np.asarray(km.predict(x))).tolist()) == [50, 51]
assert repr(km).startswith("KMeans(n_clusters=2, init='k-means++'")
print("ok")
"""
    r = run_python(["-c", code])  # the jax_tsm2 this process imported, wherever it is
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
