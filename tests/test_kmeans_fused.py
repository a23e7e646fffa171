"""The fused Lloyd step (jax_tsm2.clustering.fused, FFI target tsm2_kmeans_step) on CPU.

The CPU target is a plain-loop reference with the CUDA kernel's formulas; it is
checked here against a float64 NumPy reference on odd sizes, ties, NaN and
weights, and k-means through it is checked against the unfused jnp path.
Lowerings for CUDA are inspected without a GPU (which path is emitted where).
The same cases run on the CUDA kernel in test_gpu_kmeans.py.
"""

from __future__ import annotations

import functools
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import package_env, run_python, slow
from _kmeans_reference import check_step, data

import jax_tsm2
from jax_tsm2 import _ffi
from jax_tsm2.clustering import fused, kmeans, lloyd_step

dtype_ids = lambda d: jnp.dtype(d).name
D_SIZES = (1, slow(3), 17, 256, slow(1000))
K_SIZES = (1, slow(2), 5, slow(16), 32)

_ffi_step = jax.jit(
    functools.partial(fused.ffi_step, check=False)
)  # the CPU target takes any shape


@pytest.fixture(autouse=True)
def _on_the_cpu_device():
    """These tests are about the CPU target; on a GPU machine the unchecked shapes would
    reach the CUDA handler, whose errors crash jax 0.11 (test_gpu_kmeans.py covers CUDA)."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


@pytest.mark.parametrize("d", D_SIZES)
@pytest.mark.parametrize("k", K_SIZES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64], ids=dtype_ids)
def test_cpu_target_matches_float64_reference(dtype, d, k):
    rng = np.random.default_rng(d * 100 + k)
    x, c, w = data(rng, 1009, d, k, dtype)
    check_step(_ffi_step(x, c, w), x, c, w)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=dtype_ids)
@pytest.mark.parametrize(("d", "k"), [slow(3, 5), (17, 32), slow(256, 16)])
def test_cpu_target_half_inputs_accumulate_in_f32(dtype, d, k):
    rng = np.random.default_rng(d + k)
    x, c, w = data(rng, 211, d, k, dtype)
    s = _ffi_step(x, c, w)
    assert s.mind.dtype == s.sums.dtype == s.inertia.dtype == jnp.float32
    check_step(s, x, c, w)


def test_ties_take_the_lowest_index():
    # Exact in f32: every distance below is a small integer.
    c = jnp.array([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, 5.0]], jnp.float32)
    x = jnp.array([[0.0, 0.0], [0.0, 3.0], [1.0, 0.0], [2.0, 0.0], [-1.0, 0.0]], jnp.float32)
    want = [0, 3, 0, 0, 1]  # row 0: 1, 1, 1, 25; row 2: 0, 4, 0, 26 (ties at 0 and 2)
    for impl in ("ffi", "jnp"):
        s = lloyd_step(x, c, impl=impl)
        assert s.labels.tolist() == want, impl
        np.testing.assert_array_equal(np.asarray(s.mind), [1.0, 4.0, 0.0, 1.0, 0.0])


def test_nan_ranks_first_as_jnp_argmin():
    x = jnp.array([[0.0, 0.0], [np.nan, 1.0], [3.0, 0.0]])
    c = jnp.array([[0.0, 0.0], [3.0, 0.0]])
    a, b = lloyd_step(x, c, impl="ffi"), lloyd_step(x, c, impl="jnp")
    assert a.labels.tolist() == b.labels.tolist() == [0, 0, 1]
    assert np.isnan(float(a.mind[1])) and np.isnan(float(a.inertia))
    # A NaN centroid is "closest" to every point (row 1 is NaN everywhere: first index).
    c_nan = c.at[1, 0].set(np.nan)
    assert lloyd_step(x, c_nan, impl="ffi").labels.tolist() == [1, 0, 1]
    assert lloyd_step(x, c_nan, impl="jnp").labels.tolist() == [1, 0, 1]


def test_ffi_and_jnp_steps_agree():
    rng = np.random.default_rng(5)
    x, c, w = data(rng, 997, 33, 7, jnp.float64)
    a = lloyd_step(x, c, w, impl="ffi")
    b = lloyd_step(x, c, w, impl="jnp")
    np.testing.assert_array_equal(np.asarray(a.labels), np.asarray(b.labels))
    for f in ("mind", "sums", "counts", "inertia"):
        np.testing.assert_allclose(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)), 1e-12)


def test_vmap_over_centroids_runs_the_step_per_element():
    rng = np.random.default_rng(6)
    x, _, w = data(rng, 101, 5, 3, jnp.float64)
    cs = jnp.asarray(rng.normal(size=(4, 3, 5)))
    batched = jax.vmap(lambda c: fused.ffi_step(x, c, w, check=False))(cs)
    for i in range(4):
        one = _ffi_step(x, cs[i], w)
        for f in one._fields:
            np.testing.assert_array_equal(np.asarray(getattr(batched, f)[i]), getattr(one, f))


def test_empty_data():
    s = _ffi_step(jnp.zeros((0, 4)), jnp.ones((2, 4)), jnp.zeros((0,)))
    assert s.labels.shape == (0,) and float(s.inertia) == 0.0
    np.testing.assert_array_equal(np.asarray(s.sums), np.zeros((2, 4)))


def test_lloyd_step_argument_errors():
    x = jnp.ones((10, 3))
    with pytest.raises(ValueError, match="impl must be one of"):
        lloyd_step(x, jnp.ones((2, 3)), impl="cuda")
    with pytest.raises(ValueError, match=r"need x \(n, d\) and centroids \(k, d\)"):
        lloyd_step(x, jnp.ones((2, 4)))
    with pytest.raises(ValueError, match=r"sample_weight must have shape \(10,\)"):
        lloyd_step(x, jnp.ones((2, 3)), jnp.ones(9))


def test_ffi_step_refuses_shapes_no_cuda_kernel_takes():
    # f32 at any d and k has the tiled step; f64 past the fused step's range has no kernel.
    x64 = jnp.ones((100, 4097), jnp.float64)
    with pytest.raises(ValueError, match=r"does not take x float64\[100, 4097\] with k=4"):
        lloyd_step(x64, jnp.ones((4, 4097)), impl="ffi")
    with pytest.raises(ValueError, match="k=33"):
        lloyd_step(jnp.ones((100, 8), jnp.float64), jnp.ones((33, 8)), impl="ffi")
    with pytest.raises(ValueError, match="k=33"):
        fused.ffi_step(jnp.ones((100, 8), jnp.float32), jnp.ones((33, 8)), jnp.ones(100))
    assert lloyd_step(x64, jnp.ones((4, 4097))).labels.shape == (100,)
    s = lloyd_step(jnp.ones((100, 4097), jnp.float32), jnp.ones((4, 4097)), impl="ffi")
    assert s.labels.tolist() == [0] * 100 and float(s.counts[0]) == 100.0


@pytest.mark.skipif(
    jax.default_backend() != "cpu",
    reason="an error returned by an FFI handler segfaulted jax 0.11.2 on the GPU machine",
)
def test_target_rejects_malformed_buffers():
    call = jax.ffi.ffi_call(
        _ffi.KMEANS_TARGET,
        (
            jax.ShapeDtypeStruct((4,), jnp.int32),
            jax.ShapeDtypeStruct((4,), jnp.float64),
            jax.ShapeDtypeStruct((2, 3), jnp.float64),
            jax.ShapeDtypeStruct((2,), jnp.float64),
            jax.ShapeDtypeStruct((), jnp.float64),
            jax.ShapeDtypeStruct((0,), jnp.uint8),
        ),
    )
    with pytest.raises(Exception, match=r"w must be \[n\] in the accumulator dtype.*w=f32\[4\]"):
        call(jnp.ones((4, 3)), jnp.ones((2, 3)), jnp.ones(4, jnp.float32))


# ------------------------------------------------------------ plan and routing


def test_plan_covers_the_documented_range():
    for dtype in ("float32", "bfloat16", "float16", "float64"):
        for d in (1, 3, 33, 128, 129, 1000, 1024, 2048, 4095, 4096):
            for k in (1, 4, 5, 16, 32):
                ok = _ffi.kmeans_plan(dtype, 1000, d, k)["supported"]
                assert ok == (dtype != "float64" or d <= 2048 or k <= 16), (dtype, d, k)
        assert not _ffi.kmeans_plan(dtype, 1000, 4097, 16)["supported"]
        assert not _ffi.kmeans_plan(dtype, 1000, 256, 33)["supported"]


@pytest.mark.parametrize(
    ("dtype", "d", "k", "step"),
    [
        ("float32", 256, 16, "tensor_cores"),
        ("float32", 256, 8, "cuda_cores"),  # k <= 8: the CUDA-core step is faster
        ("float32", 128, 8, "cuda_cores"),
        ("float32", 64, 8, "tensor_cores"),  # rows of up to 64 elements: the narrow class
        ("float32", 4, 1, "tensor_cores"),
        ("float32", 36, 32, "tensor_cores"),
        ("float32", 30, 16, "cuda_cores"),  # rows not in whole 16-byte chunks
        ("float32", 260, 16, "tensor_cores_cluster"),  # one block: d <= 512
        ("float32", 1020, 16, "tensor_cores_cluster"),
        ("float32", 1024, 16, "tensor_cores_cluster"),
        ("float32", 1022, 16, "cuda_cores"),  # rows not in whole 16-byte chunks
        ("float32", 4096, 9, "tensor_cores_cluster"),
        ("float32", 4096, 8, "cuda_cores"),
        ("float32", 4096, 17, "cuda_cores"),  # two centroid tiles do not fit registers
        ("float32", 4094, 16, "cuda_cores"),  # rows not in whole 16-byte chunks
        ("bfloat16", 4096, 16, "cuda_cores"),
        ("float64", 4096, 16, "cuda_cores"),
    ],
)
def test_plan_names_the_step_kernel(dtype, d, k, step):
    p = _ffi.kmeans_plan(dtype, 1000, d, k)
    assert p["step"] == step
    if step == "tensor_cores_cluster":
        assert p["wide_cluster"] == -(-d // 512)


def test_plan_shapes_and_workspace():
    p = _ffi.kmeans_plan("float32", 10**6, 256, 16)
    assert (p["cluster"], p["warps_per_row"]) == (1, 1)  # one warp per row, no exchange
    assert p["tiles"] == -(-(10**6) // p["rows"])
    assert p["workspace_bytes"] == p["owners"] * (16 * 256 + 16 + 1) * 4
    q = _ffi.kmeans_plan("float32", 250_000, 4096, 16)
    assert q["cluster"] > 1 and q["smem_bytes"] <= 227 * 1024  # 256 KB of centroids: split
    assert q["workspace_bytes"] == q["owners"] * (16 * 4096 + 16 + 1) * 4
    assert _ffi.kmeans_plan("float32", 0, 256, 16)["workspace_bytes"] == 0


def _lowered(fn, *args, platform):
    return jax.jit(fn).trace(*args).lower(lowering_platforms=(platform,)).as_text()


def _has_step(text):
    return "stablehlo.custom_call @tsm2_kmeans_step" in text


def _has_tiled(text):
    return "stablehlo.custom_call @tsm2_kmeans_assign" in text


@pytest.mark.parametrize(
    ("d", "k", "target"),
    [
        (256, 16, "fused"),
        (256, 32, "fused"),
        (1000, 32, "tiled"),  # the fused step measured slower than the unfused path
        (4096, 16, "fused"),
        (4097, 16, "tiled"),  # past the fused step's d
        (8, 33, "tiled"),
    ],
)
def test_cuda_lowering_uses_the_kernel_where_it_applies(d, k, target):
    x, c = jnp.zeros((1000, d), jnp.float32), jnp.zeros((k, d), jnp.float32)
    step = lambda x, c: lloyd_step(x, c)
    found = lambda text: {"fused": _has_step(text), "tiled": _has_tiled(text)}
    want = {"fused": target == "fused", "tiled": target == "tiled"}
    for mode in ("auto", "prefer", "always"):
        with jax_tsm2.custom_call_mode(mode):
            assert found(_lowered(step, x, c, platform="cuda")) == want, mode
    assert not any(found(_lowered(step, x, c, platform="cpu")).values())
    with jax_tsm2.custom_call_mode("never"):
        assert not any(found(_lowered(step, x, c, platform="cuda")).values())
    with jax_tsm2.custom_call_mode("always"):
        assert found(_lowered(step, x, c, platform="cpu")) == want


def test_kmeans_iteration_is_one_fused_call_on_cuda():
    x = jnp.zeros((5000, 64), jnp.float32)
    with jax_tsm2.custom_call_mode("prefer"):
        text = _lowered(lambda x: kmeans(jax.random.key(0), x, 8, init="random", max_iter=3), x,
                        platform="cuda")  # fmt: skip
    # the loop body's, and the final assignment's
    assert text.count("stablehlo.custom_call @tsm2_kmeans_step") == 2


def test_iteration_ends_on_the_device_on_cuda():
    # The empty-cluster rule: one tsm2_kmeans_update call on CUDA (no lax.cond,
    # whose predicate XLA's GPU runtime reads on the host); the jnp rule on CPU
    # and in mode "never".
    x = jnp.zeros((5000, 64), jnp.float32)
    run = lambda x: kmeans(jax.random.key(0), x, 8, init="random", max_iter=3)
    target = "stablehlo.custom_call @tsm2_kmeans_update"
    assert _lowered(run, x, platform="cuda").count(target) == 1  # the loop body's
    assert target not in _lowered(run, x, platform="cpu")
    with jax_tsm2.custom_call_mode("never"):
        assert target not in _lowered(run, x, platform="cuda")
    plan = _ffi.kmeans_plan("float32", 0, 5000, 40)  # the update takes any shape
    assert not plan["supported"] and plan["update_workspace_bytes"] == 40 * 16


# ------------------------------------------------------------ k-means through the fused step


def _blobs(n, d, k, seed):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=6.0, size=(k, d))
    return centres[rng.integers(0, k, n)] + rng.normal(size=(n, d))


@pytest.mark.parametrize(
    "kw",
    [slow({}), {"weights": True}, slow({"n_init": 2}), slow({"init": "k-means++"})],
    ids=["array", "weights", "n_init", "k-means++"],
)
def test_kmeans_through_the_fused_step_matches_the_jnp_path(kw):
    x = _blobs(1201, 9, 6, seed=7)
    rng = np.random.default_rng(8)
    opts = {"max_iter": 50}
    if kw.get("weights"):
        opts["sample_weight"] = rng.uniform(0.1, 3.0, len(x))
    if "n_init" in kw:
        opts.update(init="random", n_init=kw["n_init"])
    elif "init" in kw:
        opts["init"] = kw["init"]
    else:
        opts["init"] = x[rng.choice(len(x), 6, replace=False)]
    with jax_tsm2.custom_call_mode("never"):
        ref = kmeans(jax.random.key(2), x, 6, **opts)
    with jax_tsm2.custom_call_mode("always"):  # CPU: the fused step's reference target
        got = kmeans(jax.random.key(2), x, 6, **opts)
    np.testing.assert_array_equal(np.asarray(got.labels), np.asarray(ref.labels))
    np.testing.assert_allclose(np.asarray(got.centroids), np.asarray(ref.centroids), rtol=1e-10)
    np.testing.assert_allclose(float(got.inertia), float(ref.inertia), rtol=1e-10)
    assert int(got.n_iter) == int(ref.n_iter)


def test_empty_cluster_relocated_through_the_fused_step():
    x = jnp.array([[0.0], [1.0], [2.0], [10.0]])
    w = jnp.array([1.0, 1.0, 1.0, 2.0])
    with jax_tsm2.custom_call_mode("always"):
        s = kmeans(jax.random.key(0), x, 2, init=jnp.array([[1.0], [100.0]]), sample_weight=w)
    np.testing.assert_allclose(np.asarray(s.centroids), [[1.0], [10.0]])


_SHARDED_FUSED = textwrap.dedent(
    """
    import jax, numpy as np
    jax.config.update("jax_enable_x64", True)
    import jax_tsm2
    from jax.sharding import Mesh, PartitionSpec as P
    from jax_tsm2.clustering import kmeans
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4 * 301, 6)) + 8 * rng.integers(0, 3, (4 * 301, 1))
    w = rng.uniform(0.5, 2.0, len(x))
    init = x[:5]
    mesh = Mesh(np.array(jax.devices()), ("p",))
    with jax_tsm2.custom_call_mode("always"):
        one = kmeans(jax.random.key(0), x, 5, init=init, sample_weight=w)
        @jax.jit
        @jax.shard_map(mesh=mesh, in_specs=(P("p"), P("p")), out_specs=(P(), P("p"), P()))
        def sharded(xs, ws):
            s = kmeans(jax.random.key(0), xs, 5, init=init, sample_weight=ws, axis_name="p")
            return s.centroids, s.labels, s.inertia
        c, lab, inertia = sharded(x, w)
        text = sharded.trace(x, w).lower().as_text()
    assert "tsm2_kmeans_step" in text
    np.testing.assert_allclose(np.asarray(c), np.asarray(one.centroids), rtol=1e-9)
    np.testing.assert_allclose(float(inertia), float(one.inertia), rtol=1e-9)
    np.testing.assert_array_equal(np.asarray(lab), np.asarray(one.labels))
    print("sharded fused ok")
    """
)


def test_sharded_fused_step_equals_one_device():
    env = package_env()
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    r = run_python(["-c", _SHARDED_FUSED], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sharded fused ok" in r.stdout
