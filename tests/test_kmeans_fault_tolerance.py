"""kmeans(fault_tolerance=True): no false positives on clean runs, the same result as without
it, injected faults detected and corrected, the redo bound, the estimator's parameter.

Clean runs cover f32, bf16, f16, f64, weights, TF32 products, heavy tails, mixed column scales,
a near-empty cluster, repeated rows and n = 2e5; detection is tested exhaustively over the
bits of a step's sums and counts at the check (``checksums.check``) and end to end through
``kmeans`` for each kind of fault.
"""

from __future__ import annotations

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import package_env, run_python, slow

import jax_tsm2
from jax_tsm2.clustering import KMeans, checksums, kmeans
from jax_tsm2.clustering import core as kcore
from jax_tsm2.clustering.faults import FaultSpec, flip_bit

KEY = jax.random.key(0)


def _blobs(n=3000, d=8, k=6, seed=0, spread=4.0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=spread, size=(k, d))
    return centers[rng.integers(0, k, n)] + rng.normal(size=(n, d))


def _data(name, seed=0):
    """``(x, k, weights or None)`` of each clean case."""
    rng = np.random.default_rng(seed)
    if name == "blobs":
        return _blobs(seed=seed), 6, None
    if name == "heavy":  # Student t with 1.5 degrees of freedom: infinite variance
        return rng.standard_t(1.5, size=(5000, 16)), 8, None
    if name == "scales":  # columns from 1e-3 to 1e3
        return _blobs(4000, 12, 5, seed) * np.logspace(-3, 3, 12), 5, None
    if name == "offset":  # far from the origin: centring must hold it
        return _blobs(4000, 12, 5, seed) + 1e4, 5, None
    if name == "near_empty":  # a cluster of two points far away
        x = np.concatenate([_blobs(3000, 8, 5, seed), 100 + rng.normal(size=(2, 8))])
        return x, 6, None
    if name == "weights":
        return _blobs(seed=seed), 6, rng.exponential(size=3000)
    if name == "repeated":  # ten points, each 2000 times
        return np.repeat(_blobs(10, 8, 3, seed), 2000, axis=0) * 0.1, 3, None
    if name == "large":
        return _blobs(200_000, 32, 16, seed), 16, None
    raise ValueError(name)


CLEAN = [
    ("blobs", jnp.float32, "float32"),
    ("heavy", jnp.float32, "float32"),
    ("weights", jnp.bfloat16, "float32"),
    ("scales", jnp.float64, "float32"),
    ("near_empty", jnp.float32, "tensorfloat32"),
    slow("offset", jnp.bfloat16, "float32"),
    slow("offset", jnp.float32, "float32"),
    slow("repeated", jnp.float32, "float32"),
    slow("heavy", jnp.bfloat16, "float32"),
    slow("heavy", jnp.float64, "float32"),
    slow("weights", jnp.float32, "tensorfloat32"),
    slow("near_empty", jnp.float16, "float32"),
    slow("large", jnp.float32, "float32"),
    slow("large", jnp.bfloat16, "float32"),
]


def _weights(w, x):
    return None if w is None else jnp.asarray(w, kcore._acc_dtype(x.dtype))


@pytest.mark.parametrize(("name", "dtype", "precision"), CLEAN)
def test_clean_run_has_no_detection_and_the_same_result(name, dtype, precision):
    x, k, w = _data(name)
    x = jnp.asarray(x, dtype)
    w = _weights(w, x)
    for seed in range(3):
        key = jax.random.key(seed)
        plain = kmeans(key, x, k, sample_weight=w, precision=precision, max_iter=50)
        ft = kmeans(
            key, x, k, sample_weight=w, precision=precision, max_iter=50, fault_tolerance=True
        )
        assert int(ft.faults_detected) == 0 and not bool(ft.fault_unresolved)
        np.testing.assert_array_equal(np.asarray(ft.centroids), np.asarray(plain.centroids))
        np.testing.assert_array_equal(np.asarray(ft.labels), np.asarray(plain.labels))
        assert int(ft.n_iter) == int(plain.n_iter) and bool(ft.converged) == bool(plain.converged)
        assert plain.faults_detected is None and plain.fault_unresolved is None
    # The margin: the worst clean residual stays far below its threshold.
    ratios = np.asarray(kcore._check_ratios(KEY, x, w, k=k, iters=8, precision=precision))
    assert np.all(np.isfinite(ratios)) and ratios.max() < 0.25, ratios.max(axis=0)


@pytest.mark.parametrize("mode", ["always", slow("never")])
def test_clean_run_through_the_kernels_reference_targets(mode):
    x = jnp.asarray(_blobs(2000, 40, 40), jnp.float32)
    with jax_tsm2.custom_call_mode(mode):
        for k in (5, 40):  # the fused step's reference, the tiled step's
            plain = kmeans(KEY, x, k, max_iter=20)
            ft = kmeans(KEY, x, k, max_iter=20, fault_tolerance=True)
            assert int(ft.faults_detected) == 0
            np.testing.assert_array_equal(np.asarray(ft.centroids), np.asarray(plain.centroids))


def test_clean_run_without_x64_uses_compensated_sums():
    x = _blobs(5000, 16, 8) * np.logspace(-2, 2, 16)
    with jax.enable_x64(False):
        x32 = jnp.asarray(x, jnp.float32)
        for seed in range(3):
            ft = kmeans(jax.random.key(seed), x32, 8, fault_tolerance=True)
            assert int(ft.faults_detected) == 0
        ratios = np.asarray(kcore._check_ratios(KEY, x32, k=8, iters=8))
        assert ratios.max() < 0.25
        spec = FaultSpec(iteration=1, kind="sum", index=3, column=5, bit=18)
        f = kmeans(KEY, x32, 8, fault_tolerance=True, fault_injection=spec)
        assert int(f.faults_detected) == 1


def test_accurate_sum_matches_float64():
    rng = np.random.default_rng(3)
    v = (rng.standard_cauchy(100_003) * rng.choice([1e-3, 1.0, 1e4], 100_003)).astype(np.float32)
    ref = np.sum(v.astype(np.float64))
    with jax.enable_x64(False):
        got = float(checksums.accurate_sum(jnp.asarray(v)))
        naive = float(jnp.sum(jnp.asarray(v)))
    scale = np.abs(v).sum()
    assert abs(got - ref) <= np.finfo(np.float32).eps * abs(ref) + 1e-12 * scale
    assert abs(got - ref) <= abs(naive - ref) or abs(naive - ref) == 0
    x = rng.normal(size=(1001, 7))  # f64 takes the compensated path: exact to ~u^2
    got = np.asarray(checksums.accurate_sum(jnp.asarray(x)))
    np.testing.assert_allclose(got, np.sum(x, axis=0), rtol=1e-15, atol=1e-13)


# ------------------------------------------------------------ detection at the check


def _clean_step(x, k, dtype=jnp.float32, w=None, seed=0):
    """Centred data, invariants and one clean step from k-means++ centroids."""
    x = jnp.asarray(x, dtype)
    wa = _weights(w, x)
    xc, x_sq, ww, _, _ = kcore._prepare(x, wa, None)
    c = kcore._kmeans_plusplus_centered(jax.random.key(seed), xc, x_sq, ww, k, None, None)
    s = kcore._step(xc, x_sq, ww, c, k)
    acc = kcore._acc_dtype(xc.dtype)
    cc = c.astype(xc.dtype).astype(acc)
    dt = checksums.check_dtype(acc)
    mind_sum = checksums.accurate_sum(ww.astype(dt) * s.mind.astype(dt))
    inv = checksums.invariants(xc, x_sq, ww)
    return xc, x_sq, ww, cc, s, inv, mind_sum


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, slow(jnp.float64)])
@pytest.mark.parametrize("weighted", [False, True])
def test_every_sum_flip_of_size_1e3_of_its_column_is_detected(dtype, weighted):
    rng = np.random.default_rng(1)
    x = _blobs(2000, 6, 5) * np.array([1, 1e-2, 1e2, 1, 3, 0.3])
    w = rng.exponential(size=2000) if weighted else None
    _, _, _, cc, s, inv, mind_sum = _clean_step(x, 5, dtype, w)
    bits = 64 if s.sums.dtype == jnp.float64 else 32
    k, d = s.sums.shape
    jj, cols, bb = (a.ravel() for a in np.meshgrid(range(k), range(d), range(bits), indexing="ij"))

    def detected(j, c, b):
        sums = s.sums.at[j, c].set(flip_bit(s.sums[j, c], b))
        r = checksums.check(inv, cc, sums, s.counts, mind_sum, data_dtype=dtype,
                            unit_weights=w is None)  # fmt: skip
        return ~r.ok, jnp.abs(sums[j, c] - s.sums[j, c])

    found, size = jax.vmap(detected)(jj, cols, bb)
    found, size = np.asarray(found), np.asarray(size)
    colmax = np.abs(np.asarray(s.sums)).max(axis=0)[cols]
    big = ~(size < 1e-3 * colmax)  # NaN and inf sizes count as big
    assert big.sum() > len(big) // 4  # the test covers many flips
    missed = big & ~found
    assert not missed.any(), np.stack([jj[missed], cols[missed], bb[missed]], axis=1)


def _count_flips(s, check):
    """check(counts) for every single-bit flip of every count, as arrays over the flips,
    with each flip's size."""
    k = s.counts.shape[0]
    bits = 64 if s.counts.dtype == jnp.float64 else 32
    jj, bb = (a.ravel() for a in np.meshgrid(range(k), range(bits), indexing="ij"))

    def one(j, b):
        counts = s.counts.at[j].set(flip_bit(s.counts[j], b))
        return check(counts), jnp.abs(counts[j] - s.counts[j])

    r, size = jax.vmap(one)(jj, bb)
    return r, np.asarray(size), np.stack([jj, bb], axis=1)


def test_every_count_flip_is_detected_with_unit_weights():
    _, _, _, cc, s, inv, mind_sum = _clean_step(_blobs(3000, 8, 6), 6)
    r, _, flips = _count_flips(
        s,
        lambda counts: checksums.check(
            inv, cc, s.sums, counts, mind_sum, data_dtype=jnp.float32, unit_weights=True
        ),
    )
    # Counts of unit weights are exact integers: every flip that changes one fails.
    bad = np.asarray(r.ok) | ~(np.asarray(r.counts) > 1)
    assert not bad.any(), flips[bad]


def test_weighted_count_flips_of_size_1e3_are_detected():
    w = np.random.default_rng(2).exponential(size=3000)
    _, _, _, cc, s, inv, mind_sum = _clean_step(_blobs(3000, 8, 6), 6, w=w)
    top = float(jnp.max(s.counts))
    r, size, flips = _count_flips(
        s,
        lambda counts: checksums.check(inv, cc, s.sums, counts, mind_sum, data_dtype=jnp.float32),
    )
    big = ~(size < 1e-3 * top)  # NaN and inf sizes count as big
    assert big.sum() > len(big) // 4  # the test covers many flips
    missed = big & np.asarray(r.ok)
    assert not missed.any(), flips[missed]


# ------------------------------------------------------------ end to end


X = jnp.asarray(_blobs(3000, 8, 6), jnp.float32)
CLEAN_RUN = None


def _clean():
    global CLEAN_RUN
    if CLEAN_RUN is None:
        CLEAN_RUN = kmeans(KEY, X, 6)
    return CLEAN_RUN


def _same_as_clean(f):
    ref = _clean()
    np.testing.assert_array_equal(np.asarray(f.labels), np.asarray(ref.labels))
    np.testing.assert_allclose(np.asarray(f.centroids), np.asarray(ref.centroids), atol=1e-4)
    np.testing.assert_allclose(float(f.inertia), float(ref.inertia), rtol=1e-5)


@pytest.mark.parametrize("kind", ["sum", "count"])
def test_sum_and_count_faults_are_detected_and_corrected(kind):
    rng = np.random.default_rng(4)
    for _ in range(4):
        spec = FaultSpec(
            iteration=int(rng.integers(0, 3)),
            kind=kind,
            index=int(rng.integers(0, 6)),
            column=int(rng.integers(0, 8)),
            bit=int(rng.integers(24, 31)),  # exponent bits: far above any threshold
        )
        f = kmeans(KEY, X, 6, fault_tolerance=True, fault_injection=spec)
        assert int(f.faults_detected) == 1 and not bool(f.fault_unresolved), spec
        _same_as_clean(f)


def _distances(x, c):
    xc = np.asarray(x, np.float64)
    return ((xc[:, None, :] - np.asarray(c, np.float64)[None]) ** 2).sum(-1)


def test_downward_distance_flip_that_wins_is_detected_and_corrected():
    # Rows whose distance to another centroid, with its exponent's top bit cleared (a value
    # below 2^-126 * ...: essentially zero), wins the argmin in the first iteration.
    ref = _clean()
    labels = np.asarray(ref.labels)
    for row in (0, 17, 1234):
        j = int((labels[row] + 1) % 6)
        spec = FaultSpec(iteration=0, kind="distance", index=row, column=j, bit=30)
        f = kmeans(KEY, X, 6, fault_tolerance=True, fault_injection=spec)
        assert int(f.faults_detected) == 1 and not bool(f.fault_unresolved), row
        _same_as_clean(f)


def test_upward_flip_of_the_winner_is_not_detected_and_lloyd_reassigns():
    # Raising the winner's distance moves the row to its second-nearest centroid with a
    # correct distance: the identity still holds, so nothing is detected (a documented
    # limitation); the next iteration assigns the row again and the run ends as the clean one.
    ref = _clean()
    for row in (3, 99):
        j = int(np.asarray(ref.labels)[row])
        spec = FaultSpec(iteration=1, kind="distance", index=row, column=j, bit=30)
        f = kmeans(KEY, X, 6, fault_tolerance=True, fault_injection=spec)
        assert int(f.faults_detected) == 0
        _same_as_clean(f)


def test_fault_in_the_final_assignment_is_detected():
    for spec in (
        FaultSpec(iteration=-1, kind="sum", index=2, column=1, bit=29),
        FaultSpec(iteration=-1, kind="distance", index=5, column=0, bit=30),
    ):
        f = kmeans(KEY, X, 6, fault_tolerance=True, fault_injection=spec)
        assert int(f.faults_detected) == 1 and not bool(f.fault_unresolved)
        _same_as_clean(f)


@pytest.mark.parametrize("iteration", [1, -1])
def test_persistent_fault_stops_after_the_redo_bound(iteration):
    spec = FaultSpec(iteration, "sum", 0, 0, 29, persistent=True)
    f = kmeans(KEY, X, 6, max_iter=100, fault_tolerance=True, fault_injection=spec)
    assert bool(f.fault_unresolved) and not bool(f.converged)
    assert int(f.faults_detected) == checksums.MAX_REDOS + 1
    if iteration == 1:
        assert int(f.n_iter) == 1  # stopped where the fault persisted


def test_restarts_under_vmap_count_faults_of_every_restart():
    spec = FaultSpec(iteration=0, kind="sum", index=0, column=0, bit=29)
    f = kmeans(KEY, X, 6, n_init=3, fault_tolerance=True, fault_injection=spec)
    assert int(f.faults_detected) == 3 and not bool(f.fault_unresolved)
    g = kmeans(KEY, X, 6, n_init=3)
    np.testing.assert_allclose(np.asarray(f.centroids), np.asarray(g.centroids), atol=1e-4)


def test_under_jit():
    run = jax.jit(lambda x: kmeans(KEY, x, 6, fault_tolerance=True))
    f = run(X)
    assert int(f.faults_detected) == 0
    _same_as_clean(f)


def test_bad_fault_arguments():
    with pytest.raises(ValueError, match="needs fault_tolerance"):
        kmeans(KEY, X, 6, fault_injection=FaultSpec(0, "sum", 0))
    with pytest.raises(ValueError, match="kind"):
        kmeans(KEY, X, 6, fault_tolerance=True, fault_injection=FaultSpec(0, "labels", 0))
    with pytest.raises(ValueError, match="cluster"):
        kmeans(KEY, X, 6, fault_tolerance=True, fault_injection=FaultSpec(0, "sum", 6))
    with pytest.raises(ValueError, match="column"):
        kmeans(KEY, X, 6, fault_tolerance=True, fault_injection=FaultSpec(0, "sum", 0, 8))
    with pytest.raises(ValueError, match="row"):
        kmeans(KEY, X, 6, fault_tolerance=True, fault_injection=FaultSpec(0, "distance", 3000))
    with pytest.raises(ValueError, match="bit"):
        kmeans(KEY, X, 6, fault_tolerance=True, fault_injection=FaultSpec(0, "sum", 0, 0, 32))
    with pytest.raises(TypeError, match="FaultSpec"):
        kmeans(KEY, X, 6, fault_tolerance=True, fault_injection=(0, "sum", 0, 0, 1))


_SHARDED = textwrap.dedent(
    """
    from functools import partial
    import jax, numpy as np
    from jax.sharding import PartitionSpec as P
    from jax_tsm2.clustering import KMeansState, kmeans
    from jax_tsm2.clustering.faults import FaultSpec
    rng = np.random.default_rng(0)
    centers = rng.normal(scale=4, size=(6, 8))
    xn = (centers[rng.integers(0, 6, 3000)] + rng.normal(size=(3000, 8))).astype(np.float32)
    mesh = jax.make_mesh((2,), ("p",))
    x = jax.device_put(xn, jax.NamedSharding(mesh, P("p")))
    init = xn[:6]
    one = kmeans(jax.random.key(0), xn, 6, init=init)
    specs = KMeansState(*([P()] + [P("p")] + [P()] * 6))
    for spec in (None, FaultSpec(1, "sum", 0, 0, 29), FaultSpec(0, "distance", 7, 2, 30),
                 FaultSpec(1, "count", 1, 0, 3)):
        @jax.jit
        @partial(jax.shard_map, mesh=mesh, in_specs=P("p"), out_specs=specs)
        def run(xs):
            return kmeans(jax.random.key(0), xs, 6, init=init, axis_name="p",
                          fault_tolerance=True, fault_injection=spec)
        s = run(x)
        assert int(s.faults_detected) == (spec is not None), (spec, s.faults_detected)
        assert not bool(s.fault_unresolved)
        np.testing.assert_array_equal(np.asarray(s.labels), np.asarray(one.labels))
        np.testing.assert_allclose(np.asarray(s.centroids), np.asarray(one.centroids),
                                   atol=1e-5)
    print("sharded ok")
    """
)


@pytest.mark.slow  # a second interpreter with 2 devices
def test_sharded_detects_and_corrects():
    env = package_env(JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    ).strip()
    r = run_python(["-c", _SHARDED], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sharded ok" in r.stdout


# ------------------------------------------------------------ estimator


def test_estimator_fault_tolerance():
    km = KMeans(6, random_state=0, fault_tolerance=True)
    assert km.get_params()["fault_tolerance"] is True
    km.fit(np.asarray(X))
    assert km.n_faults_detected_ == 0 and km.fault_unresolved_ is False
    plain = KMeans(6, random_state=0).fit(np.asarray(X))
    np.testing.assert_array_equal(np.asarray(km.labels_), np.asarray(plain.labels_))
    assert not hasattr(plain, "n_faults_detected_")
    with pytest.raises(ValueError, match="fault_tolerance"):
        KMeans(2, fault_tolerance=True, device_memory_budget=1).fit(np.asarray(X))


@pytest.mark.parametrize("name", ["jax_tsm2.clustering.checksums", "jax_tsm2.clustering.faults"])
def test_docstring_examples(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
