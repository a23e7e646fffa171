"""Which GPUs a build serves: the architectures it carries, the check of the running GPU
against them (one warning and XLA's dot where it cannot run), and the plans' choices by
compute capability and shared memory.

The CPU tests play GPUs through the test seams (``_ffi.device_compute_capabilities``,
``_ffi.carried_architectures``, the planners' ``cc`` and ``smem_optin`` arguments); the
GPU tests run an H100-class GPU as an older one with ``JAX_TSM2_PRETEND_CC``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import has_custom_call, lowered_text, package_env, run_python

import jax_tsm2
from jax_tsm2 import _ffi, _tsm2_ext, model, routing
from jax_tsm2.abft import _decide as abft_decide
from jax_tsm2.clustering import fused
from jax_tsm2.problem import Problem

S, R, L = (_ffi.KERNEL_IDS[k] for k in ("tsm2s", "tsm2r", "tsm2l"))
H100_SMEM, A100_SMEM, L4_SMEM = 227 * 1024, 163 * 1024, 99 * 1024
# What the default build carries (CMakeLists.txt): sm_80, 86, 89, 90, 100 and PTX 100.
WHEEL_SASS, WHEEL_PTX = [80, 86, 89, 90, 100], [100]


@pytest.mark.parametrize(
    ("cc", "sass", "ptx", "served"),
    [
        ((8, 0), WHEEL_SASS, WHEEL_PTX, True),  # A100
        ((8, 7), WHEEL_SASS, WHEEL_PTX, True),  # Orin: the sm_86 code
        ((9, 0), WHEEL_SASS, WHEEL_PTX, True),  # H100, H200
        ((10, 3), WHEEL_SASS, WHEEL_PTX, True),  # B300: the sm_100 code
        ((12, 0), WHEEL_SASS, WHEEL_PTX, True),  # RTX 5090: the driver compiles the PTX
        ((7, 5), WHEEL_SASS, WHEEL_PTX, False),  # T4
        ((12, 0), [90], [], False),  # an H100-only build on a Blackwell card
        ((8, 6), [90], [90], False),  # PTX runs only on GPUs at least as new
        ((8, 9), [80], [], True),
        ((9, 0), [80], [], False),  # machine code stays within its major version
    ],
)
def test_served_by(cc, sass, ptx, served):
    assert _ffi.served_by(cc, sass, ptx) is served


def test_build_info_lists_the_architectures_it_carries():
    info = jax_tsm2.build_info()
    sass, ptx = info["cuda_sass"], info["cuda_ptx"]
    assert (sass, ptx) == _ffi.carried_architectures()
    if not info["cuda"]:
        assert sass == [] and ptx == []
        return
    # Every entry of the CMake list is machine code, PTX or both, and nothing else.
    want_sass, want_ptx = [], []
    for arch in info["cuda_architectures"].split(","):
        m = re.fullmatch(r"(\d+)[af]?(-real|-virtual)?", arch)
        assert m, arch
        if m.group(2) != "-virtual":
            want_sass.append(int(m.group(1)))
        if m.group(2) != "-real":
            want_ptx.append(int(m.group(1)))
    assert (sass, ptx) == (want_sass, want_ptx)
    assert min(sass + ptx) >= 80


@pytest.fixture
def unserved_gpu(monkeypatch):
    """This process as if it had a T4 (compute capability 7.5) and a CUDA build."""
    monkeypatch.setattr(_ffi, "cuda_backend_present", lambda: True)
    monkeypatch.setattr(_ffi, "cuda_targets_available", lambda: True)
    monkeypatch.setattr(_ffi, "cuda_kmeans_available", lambda: True)
    monkeypatch.setattr(_ffi, "cuda_kmeans_update_available", lambda: True)
    monkeypatch.setattr(_ffi, "cuda_abft_available", lambda: True)
    monkeypatch.setattr(_ffi, "device_compute_capabilities", lambda: [(7, 5)])
    monkeypatch.setattr(_ffi, "carried_architectures", lambda: (WHEEL_SASS, WHEEL_PTX))
    _ffi.gpus_served.cache_clear()
    model.current_device.cache_clear()
    yield
    _ffi.gpus_served.cache_clear()
    model.current_device.cache_clear()


def test_an_unserved_gpu_gets_one_warning_and_xla_everywhere(unserved_gpu):
    # Shapes no other test lowers: jit's cache would skip the routing.
    a = jax.ShapeDtypeStruct((4091, 67), jnp.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with jax_tsm2.custom_call_mode("prefer"):
            texts = [
                lowered_text(
                    jax_tsm2.matmul, a, jax.ShapeDtypeStruct((67, n), jnp.float32), platform="cuda"
                )
                for n in (3, 7)
            ]
        assert not any(has_custom_call(t) for t in texts)
        step = fused.decide_step("float32", 64, 8, platform="cuda", mode="prefer")
        assert step.target == "jnp"
        assert fused.decide_update("float32", 1000, platform="cuda", mode="prefer").target == "jnp"
        assert abft_decide("sums", True, "cuda").target == "xla"
        assert jax_tsm2.build_info()["gpus_served"] is False
    mine = [w for w in caught if "cannot run its kernels" in str(w.message)]
    assert len(mine) == 1, [str(w.message) for w in caught]
    text = str(mine[0].message)
    assert "compute capability 7.5" in text and "sm_80" in text and "compute_100" in text


def test_mode_always_on_an_unserved_gpu_says_why(unserved_gpu):
    a = jax.ShapeDtypeStruct((4089, 59), jnp.float32)
    b = jax.ShapeDtypeStruct((59, 6), jnp.float32)
    with (
        warnings.catch_warnings(),
        jax_tsm2.custom_call_mode("always"),
        pytest.raises(RuntimeError, match="no CUDA targets for this GPU"),
    ):
        warnings.simplefilter("ignore")
        lowered_text(jax_tsm2.matmul, a, b, platform="cuda")


def test_a_served_gpu_gets_no_warning(monkeypatch):
    monkeypatch.setattr(_ffi, "cuda_backend_present", lambda: True)
    monkeypatch.setattr(_ffi, "cuda_targets_available", lambda: True)
    monkeypatch.setattr(_ffi, "device_compute_capabilities", lambda: [(8, 9), (9, 0)])
    monkeypatch.setattr(_ffi, "carried_architectures", lambda: (WHEEL_SASS, WHEEL_PTX))
    _ffi.gpus_served.cache_clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert _ffi.gpus_served()
            assert _ffi.cuda_kernels_usable(True) and not _ffi.cuda_kernels_usable(False)
    finally:
        _ffi.gpus_served.cache_clear()


def test_one_unserved_gpu_of_several_is_enough_to_fall_back(monkeypatch):
    monkeypatch.setattr(_ffi, "cuda_backend_present", lambda: True)
    monkeypatch.setattr(_ffi, "cuda_targets_available", lambda: True)
    monkeypatch.setattr(_ffi, "device_compute_capabilities", lambda: [(9, 0), (7, 0)])
    monkeypatch.setattr(_ffi, "carried_architectures", lambda: ([90], []))
    _ffi.gpus_served.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match=r"compute capability 7\.0\): .* sm_90 only"):
            assert not _ffi.gpus_served()
    finally:
        _ffi.gpus_served.cache_clear()


def test_a_cpu_only_build_on_a_gpu_says_so(monkeypatch):
    monkeypatch.setattr(_ffi, "cuda_backend_present", lambda: True)
    monkeypatch.setattr(_ffi, "cuda_targets_available", lambda: False)
    monkeypatch.setattr(_ffi, "device_compute_capabilities", lambda: [(9, 0)])
    _ffi.gpus_served.cache_clear()
    try:
        # Shapes no other test lowers: jit's cache would skip the routing.
        a = jax.ShapeDtypeStruct((4093, 61), jnp.float32)
        b = jax.ShapeDtypeStruct((61, 5), jnp.float32)
        with (
            pytest.warns(RuntimeWarning, match="built without the CUDA kernels"),
            jax_tsm2.custom_call_mode("prefer"),
        ):
            assert not has_custom_call(lowered_text(jax_tsm2.matmul, a, b, platform="cuda"))
    finally:
        _ffi.gpus_served.cache_clear()


@pytest.mark.parametrize(
    ("value", "cap"), [("8.0", (8, 0)), (" 12.1 ", (12, 1)), ("", None), ("sm_80", None)]
)
def test_pretend_cc_parses(monkeypatch, value, cap):
    monkeypatch.setenv(_ffi.PRETEND_CC_ENV, value)
    assert _ffi._pretend_cap() == cap


# bf16 1 x 4096 x 4096 takes the tensor-map kernel on an H100; f32 4 x 4096 x 1024 the
# cluster kernel.
@pytest.mark.parametrize(
    ("dtype", "m", "k", "n", "sm90_kernel"),
    [("bfloat16", 1, 4096, 4096, "tma"), ("float32", 4, 4096, 1024, "cluster")],
)
def test_s_plans_take_the_sm90_kernels_only_where_they_run(dtype, m, k, n, sm90_kernel):
    h100 = _tsm2_ext.split_plan(dtype, S, 1, m, k, n, 132, cc=90, smem_optin=H100_SMEM)
    assert h100[sm90_kernel]
    b200 = _tsm2_ext.split_plan(dtype, S, 1, m, k, n, 148, cc=100, smem_optin=H100_SMEM)
    assert b200[sm90_kernel]
    for cc, smem, sms in ((80, A100_SMEM, 108), (89, L4_SMEM, 58), (120, L4_SMEM, 170)):
        plan = _tsm2_ext.split_plan(dtype, S, 1, m, k, n, sms, cc=cc, smem_optin=smem)
        assert not plan["tma"] and not plan["cluster"], (cc, plan)
        ws = _tsm2_ext.workspace_bytes(dtype, S, 1, m, k, n, sms, cc=cc, smem_optin=smem)
        assert ws == plan["workspace_bytes"]


@pytest.mark.parametrize("sms", [58, 108, 132, 170])
def test_s_split_plans_stay_in_one_wave(sms):
    """The CUDA-core and tensor-core S plans split the contraction into as many ranges as
    one wave of four blocks per SM holds, never a few blocks more (a second wave of a few
    blocks takes as long as the first); on the device PlanS takes fewer where fewer fit."""
    rng = np.random.default_rng(sms)
    for _ in range(300):
        dtype = rng.choice(["float32", "float64", "bfloat16", "float16"])
        m, k, n = int(rng.integers(1, 17)), int(rng.integers(1, 30000)), int(rng.integers(1, 20000))
        plan = _tsm2_ext.split_plan(dtype, S, 1, m, k, n, sms, cc=80, smem_optin=A100_SMEM)
        blocks = plan["tiles_n"] * plan["splits"]
        assert plan["splits"] == 1 or blocks <= 4 * sms, (dtype, m, k, n, plan)
        assert plan["splits"] * plan["split_len"] >= k > (plan["splits"] - 1) * plan["split_len"]


@pytest.mark.parametrize(
    ("cc", "smem", "steps"),
    [
        (90, H100_SMEM, {64: "tensor_cores", 512: "tensor_cores_cluster"}),
        (80, A100_SMEM, {64: "cuda_cores", 256: "cuda_cores", 512: None, 4096: None}),
        (86, L4_SMEM, {64: "cuda_cores", 256: None, 4096: None}),
        (120, L4_SMEM, {64: "cuda_cores", 4096: None}),
    ],
)
def test_kmeans_plans_follow_the_gpu(cc, smem, steps):
    """f32, k = 16: the tensor-core steps need the H100's shared memory (and clusters for
    the wide rows); elsewhere the CUDA-core step where its plan fits, else XLA (None)."""
    for d, step in steps.items():
        plan = _tsm2_ext.kmeans_plan("float32", 1000, d, 16, 100, cc=cc, smem_optin=smem)
        assert plan["supported"] is (step is not None), (d, plan)
        if step is not None:
            assert plan["step"] == step and plan["smem_bytes"] <= smem


@pytest.mark.parametrize(
    ("dtype", "k", "n", "tensor_cores"),
    [
        ("bfloat16", 31, 7, True),  # one chunk: the images alone
        ("float16", 1000, 51, True),  # chunks split between blocks: images and partial sums
        ("bfloat16", 1000, 4, False),  # n <= 4 stays on the CUDA cores
        ("bfloat16", 1, 9, False),  # k = 1 too (a single product's signed zero)
        ("float32", 1000, 51, True),  # three TF32 products, B in two planes
        ("float32", 1000, 8, False),  # f32 up to n = 8 stays on the CUDA cores
        ("float64", 1000, 51, True),  # DMMA, on sm_90 only (the tensor-map ring)
        ("float64", 1000, 8, False),  # f64 up to n = 8 stays on the CUDA cores
    ],
)
def test_r_workspace_holds_b_images_where_the_tensor_cores_run(dtype, k, n, tensor_cores):
    """The tensor-core R tile (sm_80 and later; f64 from sm_90) reads B rearranged into the
    workspace, ahead of the partial sums: per batch entry an image per (n-tile, chunk of 256
    bytes of each row), f32's rounded up to 1,024 bytes (swizzle atoms), the whole rounded up
    to 256 bytes; below sm_80, and off its shapes, the workspace is the CUDA-core tile's.
    f64 keeps room for the CUDA-core tile's partial sums too (it takes rows that cannot be
    tensor-mapped), and ``tile_config`` describes an sm_80 GPU's tiles, where f64 stays on
    the CUDA cores."""
    sms = 132
    ws = {
        cc: _tsm2_ext.workspace_bytes(dtype, R, 3, 700, k, n, sms, cc, H100_SMEM) for cc in (75, 90)
    }
    images = ws[90] - ws[75] if tensor_cores else 0
    nt = -(-max(n, 1) // 8) * 8 if n > 4 else n
    isz = jnp.dtype(dtype).itemsize
    chunk, planes = 256 // isz, 2 if isz == 4 else 1
    stage = planes * nt * (chunk + 16 // isz) * isz
    if isz == 4:
        stage = -(-stage // 1024) * 1024
    per_batch = -(-k // chunk) * -(-n // nt) * stage
    if tensor_cores:
        acc = 8 if isz == 8 else 4
        partials = 0 if k <= chunk else 2 * 128 * nt * acc * 4 * sms
        if isz == 8:
            partials = max(partials, ws[75])
        assert ws[90] == partials + -(-3 * per_batch // 256) * 256
        assert images > 0
    else:
        assert ws[90] == ws[75]
    assert _tsm2_ext.tile_config(dtype, R, k, n)["mma"] is (tensor_cores and isz != 8)


def test_the_tensor_core_r_tile_is_modelled_only_where_it_fits():
    """Where two stages of the tensor-core R tile do not fit the GPU's shared memory (the
    wide n-tiles on 99 KB parts), the plan runs the CUDA-core tile, and the model says so."""
    p = Problem(None, 20_000, 4096, 64)
    tile = _tsm2_ext.tile_config("bfloat16", R, p.k, p.n)["mma_tile"]
    assert L4_SMEM < tile["smem_bytes"] <= H100_SMEM
    for smem, tensor_cores in ((H100_SMEM, True), (L4_SMEM, False)):
        dev = dataclasses.replace(model.H100_SXM, cc=(8, 9), smem_per_block_optin=smem)
        pred = model.predict(p, "bfloat16", "nn", "tsm2r", device=dev)
        assert pred.params["tensor_cores"] is tensor_cores
    old = dataclasses.replace(model.H100_SXM, cc=(7, 5))
    assert model.predict(p, "bfloat16", "nn", "tsm2r", device=old).params["tensor_cores"] is False


def test_tiles_that_do_not_fit_the_gpu_route_elsewhere():
    """f32 n = 32: the R tile needs more shared memory than an L4's 99 KB."""
    p, dt = Problem(None, 1_000_000, 256, 32), jnp.float32
    assert routing.tile_smem_bytes(p, "float32", "tsm2r") > L4_SMEM
    a = jax.ShapeDtypeStruct((p.m, p.k), dt)
    b = jax.ShapeDtypeStruct((p.k, p.n), dt)
    l4 = dataclasses.replace(model.H100_SXM, cc=(8, 9), smem_per_block_optin=L4_SMEM)
    for mode in ("prefer", "always", "auto"):
        r = routing.route(a, b, dt, platform="cuda", mode=mode, device=l4)
        assert r.target == "xla", (mode, r.reason)
    assert (
        "shared memory" in routing.route(a, b, dt, platform="cuda", mode="prefer", device=l4).reason
    )
    h100 = routing.route(a, b, dt, platform="cuda", mode="prefer", device=model.H100_SXM)
    assert h100.target == "tsm2r"


def test_an_older_jax_than_the_build_warns(monkeypatch):
    built = jax_tsm2.build_info()["jax_version"]
    monkeypatch.setattr(jax, "__version__", "0.0.1")
    with pytest.warns(RuntimeWarning, match=f"built against jax {re.escape(built)}"):
        _ffi._warn_on_jax_mismatch()
    monkeypatch.setattr(jax, "__version__", "99.0.0")  # newer: XLA takes older handlers
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _ffi._warn_on_jax_mismatch()


# --- on a GPU ---------------------------------------------------------------------------

_PRETEND_CHILD = """
import json, warnings
warnings.simplefilter("always")
import jax, jax.numpy as jnp, numpy as np
import jax_tsm2
from jax_tsm2 import _ffi
rng = np.random.default_rng(7)
out = {"served": jax_tsm2.build_info()["gpus_served"], "cc": _ffi.device_compute_capabilities()}
checks = []
for dtype, m, k, n in [("bfloat16", 1, 4096, 4096), ("float16", 3, 4104, 4096),
                       ("float32", 4, 4096, 1024), ("float32", 1000003, 64, 8)]:
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    ja, jb = jnp.asarray(a, dtype), jnp.asarray(b, dtype)
    with jax_tsm2.custom_call_mode("prefer"):
        f = jax.jit(jax_tsm2.matmul)
        hlo = f.lower(ja, jb).as_text()
        c = np.asarray(f(ja, jb), np.float64)
    want = np.asarray(ja, np.float64) @ np.asarray(jb, np.float64)
    err = float(np.max(np.abs(c - want)) / (np.max(np.abs(want)) + 1e-30))
    checks.append({"shape": [dtype, m, k, n], "custom_call": "tsm2_matmul" in hlo, "err": err})
out["checks"] = checks
print("RESULT " + json.dumps(out))
"""


def _run_pretending(cc: str) -> tuple[dict, str]:
    proc = run_python(["-c", _PRETEND_CHILD], env=package_env(JAX_TSM2_PRETEND_CC=cc))
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT ")), proc.stderr


@pytest.mark.gpu
def test_gpu_this_gpu_is_served():
    info = jax_tsm2.build_info()
    assert info["gpus_served"] is True
    for cc in _ffi.device_compute_capabilities():
        assert _ffi.served_by(cc, info["cuda_sass"], info["cuda_ptx"])


def _skip_without_sm80_code():
    info = jax_tsm2.build_info()
    if not _ffi.served_by((8, 0), info["cuda_sass"], info["cuda_ptx"]):
        pytest.skip(f"this build carries no code an A100 runs: sass {info['cuda_sass']}")


@pytest.mark.gpu
def test_gpu_plans_as_an_a100_would_and_stay_correct():
    """JAX_TSM2_PRETEND_CC=8.0: the S products that take the tensor-map and cluster kernels
    on sm_90 run on the sm_80 kernels instead, through the custom call, within bf16/f16/f32
    accuracy of a float64 reference."""
    _skip_without_sm80_code()
    out, stderr = _run_pretending("8.0")
    assert out["served"] is True and all(tuple(cc) <= (8, 0) for cc in out["cc"])
    assert "cannot run its kernels" not in stderr
    for c in out["checks"]:
        assert c["custom_call"], c
        tol = 1e-5 if c["shape"][0] == "float32" else 2e-2
        assert c["err"] < tol, c


@pytest.mark.gpu
def test_gpu_an_unserved_gpu_runs_on_xla_with_one_warning():
    """JAX_TSM2_PRETEND_CC=7.5 (a T4, which no build serves): one warning, no custom call,
    XLA's results."""
    out, stderr = _run_pretending("7.5")
    assert out["served"] is False
    assert stderr.count("cannot run its kernels") == 1, stderr[-3000:]
    for c in out["checks"]:
        assert not c["custom_call"], c
        # XLA's dot at default precision multiplies f32 in TF32 on a GPU (10-bit mantissas).
        tol = 2e-3 if c["shape"][0] == "float32" else 2e-2
        assert c["err"] < tol, c


@pytest.mark.gpu
def test_gpu_kmeans_plans_as_an_a100_would():
    """f32 rows of 512, k = 16 take the cluster step on sm_90; as an A100 the cluster step
    is not planned for them, and k-means gives what the jnp path gives either way."""
    _skip_without_sm80_code()
    code = """
import json, numpy as np, jax, jax.numpy as jnp, jax_tsm2
from jax_tsm2 import _ffi
rng = np.random.default_rng(3)
x = jnp.asarray(rng.standard_normal((5000, 512)).astype(np.float32))
inertia = {}
for mode in ("always", "never"):
    with jax_tsm2.custom_call_mode(mode):
        inertia[mode] = float(jax_tsm2.kmeans(jax.random.key(0), x, 16, max_iter=5).inertia)
print("RESULT " + json.dumps({"plan": _ffi.kmeans_plan("float32", 5000, 512, 16),
      "inertia": inertia}))
"""
    for cc, wide in (("9.0", True), ("8.0", False)):
        proc = run_python(["-c", code], env=package_env(JAX_TSM2_PRETEND_CC=cc))
        assert proc.returncode == 0, proc.stderr[-3000:]
        line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
        out = json.loads(line.removeprefix("RESULT "))
        # The cap is on the compute capability only: shared memory stays this GPU's, so the
        # CUDA-core step (one block per row) may still fit as an A100; the cluster step may not.
        assert out["plan"]["supported"] or not wide, out
        assert (out["plan"].get("step") == "tensor_cores_cluster") is wide, out
        fused_run, jnp_run = out["inertia"]["always"], out["inertia"]["never"]
        assert abs(fused_run - jnp_run) <= 1e-4 * abs(jnp_run), out
