"""Routing: which products become the tsm2 custom call, per platform and mode.

The decision is visible in the StableHLO that jit lowers for CUDA, which any
machine can produce: `jax.jit(f).trace(...).lower(lowering_platforms=("cuda",))`.
`routing.route` is also tested directly at its thresholds.
"""

from __future__ import annotations

import dataclasses
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import has_custom_call, lowered_text

import jax_tsm2
from jax_tsm2 import _ffi, model, routing
from jax_tsm2.model import device as model_device
from jax_tsm2.tune import cache, calibrate

S = jax.ShapeDtypeStruct
F32 = jnp.float32


def kernel_ids(text: str) -> list[int]:
    return [int(k) for k in re.findall(r"kernel = (\d+) : i32", text)]


def cuda_text(f, *args, mode="prefer"):
    with jax_tsm2.custom_call_mode(mode):
        return lowered_text(f, *args, platform="cuda")


@pytest.mark.parametrize(
    ("a", "b", "kernel"),
    [
        (S((20480, 20480), F32), S((20480, 8), F32), 0),  # TSM2R
        (S((1_000_000, 16), F32), S((16, 16), F32), 1),  # TSM2L
        (S((4096, 256), jnp.bfloat16), S((256, 64), jnp.bfloat16), 0),
        (S((1_000_000, 8), jnp.float64), S((8, 8), jnp.float64), 1),
        (S((8, 4096, 512), F32), S((512, 8), F32), 0),
    ],
)
def test_tall_and_skinny_uses_custom_call_on_cuda(a, b, kernel):
    text = cuda_text(jax_tsm2.matmul, a, b)
    assert has_custom_call(text)
    assert kernel_ids(text) == [kernel]
    assert "dot_general" not in text


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (S((512, 512), F32), S((512, 512), F32)),  # square
        (S((4096, 512), F32), S((512, 65), F32)),  # n just past TSM2R_MAX_N
        (S((4096, 16), F32), S((16, 128), F32)),  # k small but n large
        (S((0, 512), F32), S((512, 8), F32)),  # empty
        (S((4096, 0), F32), S((0, 8), F32)),  # k = 0
    ],
)
def test_other_shapes_use_xla_dot_on_cuda(a, b):
    text = cuda_text(jax_tsm2.matmul, a, b)
    assert not has_custom_call(text)


def test_modes_on_cuda():
    tall = (S((20480, 2048), F32), S((2048, 8), F32))
    square = (S((512, 512), F32), S((512, 512), F32))
    assert has_custom_call(cuda_text(jax_tsm2.matmul, *tall, mode="prefer"))
    assert not has_custom_call(cuda_text(jax_tsm2.matmul, *tall, mode="never"))
    assert not has_custom_call(cuda_text(jax_tsm2.matmul, *square, mode="auto"))
    forced = cuda_text(jax_tsm2.matmul, *square, mode="always")
    assert has_custom_call(forced) and kernel_ids(forced) == [0]  # TSM2R is correct for any n


def test_cpu_uses_xla_unless_forced():
    a, b = S((4096, 512), F32), S((512, 8), F32)
    assert not has_custom_call(lowered_text(jax_tsm2.matmul, a, b, platform="cpu"))
    with jax_tsm2.custom_call_mode("always"):
        assert has_custom_call(lowered_text(jax_tsm2.matmul, a, b, platform="cpu"))


def test_output_dtype_decides():
    a, b = S((8192, 512), jnp.bfloat16), S((512, 8), jnp.bfloat16)
    to_f32 = lambda x, y: jax_tsm2.matmul(x, y, preferred_element_type=jnp.float32)
    to_f64 = lambda x, y: jax_tsm2.matmul(x, y, preferred_element_type=jnp.float64)
    assert has_custom_call(cuda_text(to_f32, a, b))  # the kernels write f32 from bf16
    assert not has_custom_call(cuda_text(to_f64, a, b, mode="always"))  # they cannot write f64


def test_dot_algorithm_goes_to_xla():
    a, b = S((8192, 512), F32), S((512, 8), F32)
    f = lambda x, y: jax_tsm2.matmul(x, y, precision="BF16_BF16_F32")
    assert not has_custom_call(cuda_text(f, a, b, mode="always"))


def test_batch_folds_into_m_in_the_custom_call():
    """(8, 4096, 512) @ (512, 8): one call on a 32768 x 512 operand, no batch loop."""
    text = cuda_text(jax_tsm2.matmul, S((8, 4096, 512), F32), S((512, 8), F32))
    assert text.count("stablehlo.custom_call @tsm2_matmul") == 1
    assert "(tensor<32768x512xf32>, tensor<512x8xf32>) -> (tensor<32768x8xf32>, " in text


def test_vmap_over_a_folds_into_m():
    f = jax.vmap(jax_tsm2.matmul, in_axes=(0, None))
    text = cuda_text(f, S((4, 8192, 512), F32), S((512, 8), F32))
    assert "(tensor<32768x512xf32>, tensor<512x8xf32>) -> (tensor<32768x8xf32>, " in text


def test_vmap_over_b_is_one_batched_call_with_shared_a():
    f = jax.vmap(jax_tsm2.matmul, in_axes=(None, 0))
    text = cuda_text(f, S((8192, 512), F32), S((4, 512, 8), F32))
    assert "(tensor<8192x512xf32>, tensor<4x512x8xf32>) -> (tensor<4x8192x8xf32>, " in text


# ---------------------------------------------------------------------------
# routing.route itself


def route(a_shape, b_shape, *, dtype=F32, out=None, platform="cuda", mode="prefer", **kw):
    # The H100 preset unless a test says otherwise: the same decisions on any machine.
    kw.setdefault("device", model.H100_SXM)
    return routing.route(
        S(a_shape, dtype),
        S(b_shape, dtype),
        out or dtype,
        platform=platform,
        mode=mode,
        **kw,
    )


@pytest.mark.parametrize(
    ("k", "n", "target"),
    [
        (routing.TSM2L_MAX_K, routing.TSM2L_MAX_N, "tsm2l"),
        (1, 1, "tsm2l"),
        (routing.TSM2L_MAX_K + 1, routing.TSM2R_MAX_N, "tsm2r"),
        (routing.TSM2L_MAX_K + 1, 1, "tsm2r"),
        (routing.TSM2L_MAX_K, routing.TSM2L_MAX_N + 1, "xla"),
        (4096, routing.TSM2R_MAX_N + 1, "xla"),
    ],
)
def test_route_thresholds(k, n, target):
    r = route((100_000, k), (k, n))
    assert r.target == target, r
    assert r.reason
    assert r.kernel == routing.KERNEL_IDS.get(target)
    assert r.custom_call == (target != "xla")


def test_route_is_xla_for_other_platforms_and_missing_targets():
    assert route((8192, 512), (512, 8), platform="rocm").target == "xla"
    assert route((8192, 512), (512, 8), platform="tpu", mode="always").target == "xla"
    r = route((8192, 512), (512, 8), cuda_targets=False)
    assert r.target == "xla" and "CUDA" in r.reason


def test_auto_leaves_f64_matrix_vector_products_to_xla():
    """On the H100's validation grid XLA's f64 dot read [1, k] @ [k, n] once (1.06-1.37
    passes) and beat TSM2S by 1.12-1.16x; the same shapes in f32 still go to TSM2S (XLA read
    them three times)."""
    f64 = jnp.float64
    for a, b in [((1, 4087), (4087, 5830)), ((1, 7559), (7559, 5521))]:
        assert route(a, b, dtype=f64, mode="auto").target == "xla"
        assert route(a, b, dtype=F32, mode="auto").target == "tsm2s"
    # Large enough that A must be read: XLA's one pass wins over TSM2R in f64 too.
    assert route((13612, 6966), (6966, 1), dtype=f64, mode="auto").target == "xla"


def test_auto_without_a_calibration_takes_only_wide_predicted_wins():
    """Mode "auto" with no calibration: the model decides, and a kernel must be predicted
    faster than XLA's dot by the wide uncalibrated margin."""
    bf16 = jnp.bfloat16
    # A^T @ B: XLA's dot reads tn operands three times over, TSM2T once.
    r = route((1_000_000, 512), (1_000_000, 8), mode="auto", layout="tn")
    assert r.target == "tsm2t" and r.layer == "model", r
    for a, b, dtype in [
        ((1_000_000, 8), (8, 8), F32),  # measured on an H100: TSM2L 1.34x slower than XLA's dot
        ((1_000_000, 8), (8, 8), jnp.float64),  # 1.23x slower
        ((1_000_000, 16), (16, 16), bf16),  # 1.60x slower
        ((20480, 20480), (20480, 8), F32),  # TSM2R 1.08x slower
    ]:
        r = route(a, b, dtype=dtype, mode="auto")
        assert r.target == "xla" and r.layer == "model", r
        assert "model: XLA's dot predicted" in r.reason
    for a, b, layout in [
        ((1_000_000, 8), (8, 8), "nn"),
        ((1_000_000, 8), (8, 8), "nt"),
        ((20480, 20480), (20480, 8), "nn"),
        ((1_000_000, 8), (1_000_000, 8), "tn"),
    ]:
        for dtype in (F32, bf16):
            r = route(a, b, dtype=dtype, mode="auto", layout=layout)
            if r.target != "xla":
                name = jnp.dtype(dtype).name
                c = model.choose(r.problem, name, layout, device=model.H100_SXM, margin=0.0)
                assert c.xla.seconds > c.best.seconds * (1 + calibrate.UNCALIBRATED_MARGIN)
    assert route((1_000_000, 8), (8, 8), mode="prefer").target == "tsm2l"
    assert route((20480, 20480), (20480, 8), mode="prefer").target == "tsm2r"
    tall = (S((20480, 2048), F32), S((2048, 8), F32))
    assert not has_custom_call(cuda_text(jax_tsm2.matmul, *tall, mode="auto"))


def _calibrated(tmp_path, monkeypatch, factors):
    """A GPU (the H100 preset's properties, as if read from the driver) with a calibration
    whose probes measured each target at ``factors`` times the model's prediction."""
    monkeypatch.setenv("JAX_TSM2_CACHE_DIR", str(tmp_path))
    dev = dataclasses.replace(model.H100_SXM, source="driver")

    # The GPU's per-call floor is the launch its calibration measures, as the corrections
    # assume (calibrate.measured_floor): launch-bound probes then measure the factor too.
    cal = calibrate.measured_floor(model.CALIBRATION, 5e-6)

    def timer(target, p, dtype, layout):
        t = model.predict(p, dtype, layout, target, device=dev, calibration=cal).seconds
        return t * factors.get(target, 1.0)

    probes = calibrate.design(per_cell=6, families=("L", "TN"), dtypes=("float32",))
    data = calibrate.measure(
        probes, timer, dev, read_bytes_per_s=dev.measured_bandwidth, launch_seconds=5e-6, log=None
    )
    return dev, calibrate.store(data)


def test_auto_takes_this_gpus_calibration(tmp_path, monkeypatch):
    """With a calibration, its measurements decide: the same shape goes to TSM2L where its
    probes measured the kernel fast, and to XLA's dot where they measured it slow."""
    shape = ((1_000_000, 8), (8, 8))
    dev, path = _calibrated(tmp_path, monkeypatch, {"tsm2l": 0.4, "tsm2r": 0.4})
    r = route(*shape, mode="auto", device=dev)
    assert (r.target, r.layer) == ("tsm2l", "calibration"), r
    assert str(path) in r.reason and "calibration" in r.reason
    assert "other kernels" not in r.reason  # it timed this build's
    # A calibration that timed another build's kernels still decides, and says so.
    doc = json.loads(path.read_text())
    doc["made"]["kernels"] = "0" * 12
    path.write_text(json.dumps(doc))
    r = route((999_999, 8), (8, 8), mode="auto", device=dev)
    assert (r.target, r.layer) == ("tsm2l", "calibration"), r
    assert "timed other kernels (digest 000000000000)" in r.reason
    assert "python -m jax_tsm2.tune --calibrate" in r.reason
    dev, path = _calibrated(tmp_path, monkeypatch, {"tsm2l": 3.0, "tsm2r": 3.0, "xla": 0.5})
    r = route(*shape, mode="auto", device=dev)
    assert (r.target, r.layer) == ("xla", "calibration"), r
    # A GPU without a calibration file: the model, and the reason names the command.
    monkeypatch.setenv("JAX_TSM2_CACHE_DIR", str(tmp_path / "empty"))
    other = dataclasses.replace(dev, name="Some Other GPU")
    r = route(*shape, mode="auto", device=other)
    assert r.layer == "model" and "python -m jax_tsm2.tune --calibrate" in r.reason


def test_a_calibration_of_another_gpu_is_not_used(tmp_path, monkeypatch):
    dev, path = _calibrated(tmp_path, monkeypatch, {"tsm2l": 0.4})
    other = dataclasses.replace(dev, sm_count=dev.sm_count - 2)  # another key
    (tmp_path / calibrate.file_name(other.key)).write_text(path.read_text())
    with pytest.warns(RuntimeWarning, match="not this one"):
        r = route((1_000_000, 8), (8, 8), mode="auto", device=other)
    assert r.layer == "model"


@pytest.mark.skipif(_ffi.cuda_backend_present(), reason="this process has a GPU")
def test_auto_without_a_gpu_reasons_about_the_h100_preset():
    """Cross-platform lowering on a CPU-only machine: deterministic, and the reason says so."""
    r = route((20480, 20480), (20480, 8), mode="auto", device=None)
    assert "[device: H100 preset (no CUDA device in this process)]" in r.reason
    same = route((20480, 20480), (20480, 8), mode="auto")
    assert same.target == r.target and "preset" not in same.reason


def test_auto_survives_a_failing_driver_query(monkeypatch):
    def broken(index=0, measured_bandwidth=None):
        raise OSError("driver gone")

    monkeypatch.setattr(_ffi, "cuda_backend_present", lambda: True)
    monkeypatch.setattr(_ffi, "cuda_targets_available", lambda: True)
    monkeypatch.setattr(model_device, "device_from_driver", broken)
    model.current_device.cache_clear()
    try:
        r = route((1_000_000, 16), (1_000_000, 16), mode="auto", layout="tn", device=None)
        assert r.target == "tsm2t"
        assert "H100 preset (the driver query failed: OSError: driver gone)" in r.reason
    finally:
        model.current_device.cache_clear()


def test_auto_uses_a_tune_cache_entry_first(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path))
    H = model.H100_SXM
    dev = {"key": H.key, "name": H.name, "cc": [9, 0], "sm_count": 132}
    entries = {
        cache.entry_key("float32", "nn", None, 1_000_000, 8, 8): {"target": "tsm2l"},
        cache.entry_key("bfloat16", "nn", None, 1_000_000, 8, 8): {"target": "xla"},
        cache.entry_key("float32", "nn", None, 100, 4096, 4096): {"target": "tsm2s"},
    }
    path = cache.store(dev, entries)
    r = route((1_000_000, 8), (8, 8), mode="auto", device=H)
    assert r.target == "tsm2l" and r.layer == "tune cache" and str(path) in r.reason
    r = route((1_000_000, 8), (8, 8), dtype=jnp.bfloat16, mode="auto", device=H)
    assert r.target == "xla" and r.layer == "tune cache"  # over the measured win
    # TSM2S cannot take m = 100: the entry is not used; no kernel is eligible.
    r = route((100, 4096), (4096, 4096), mode="auto", device=H)
    assert r.target == "xla" and r.layer == "rules" and "not tall-and-skinny" in r.reason
    # Another GPU's key finds no entry.
    other = dataclasses.replace(H, name="Another GPU")
    assert route((1_000_000, 8), (8, 8), mode="auto", device=other).layer == "model"
    # Modes other than auto do not read the cache.
    assert route((1_000_000, 8), (8, 8), dtype=jnp.bfloat16, mode="prefer").target == "tsm2l"


def test_the_model_picks_among_eligible_kernels():
    """TSM2L and TSM2R both take k, n <= 64; the model decides, ties go to TSM2L."""
    names, why = routing.candidates(routing.Problem(None, 10_000, 64, 64), "nn")
    assert names == ("tsm2l", "tsm2r") and "TSM2L" in why and "TSM2R" in why
    r = route((100_000, 60), (60, 3), dtype=jnp.float64)  # the model: R 21 us, L 25 us
    assert r.target == "tsm2r" and "model picks tsm2r" in r.reason
    # f64 k = n = 64: TSM2L on DMMA, launch-bound at 11 us, against R's 28 us.
    assert route((10_000, 64), (64, 64), dtype=jnp.float64).target == "tsm2l"
    r = route((100_000, 16), (16, 16))  # L 11 us, R 13 us
    assert r.target == "tsm2l" and "model picks tsm2l" in r.reason
    # bf16 k = n = 64: TSM2L on tensor cores, 13 us against R's 24 us.
    assert route((100_000, 64), (64, 64), dtype=jnp.bfloat16).target == "tsm2l"
    # Launch-bound both (11 us): an exact tie goes to the first candidate.
    assert route((10_000, 64), (64, 8), dtype=jnp.bfloat16).target == "tsm2l"
    assert routing.candidates(routing.Problem(None, 8, 64, 8), "nt")[0] == ("tsm2l", "tsm2r")


def test_model_decisions_are_cached():
    routing._model_choice.cache_clear()
    for _ in range(3):
        route((777_777, 24), (24, 24), mode="auto")
    info = routing._model_choice.cache_info()
    assert (info.misses, info.hits) == (1, 2)


def test_route_cpu():
    assert route((64, 64), (64, 64), platform="cpu").target == "xla"
    assert route((64, 64), (64, 64), platform="cpu", mode="always").custom_call


def test_route_rejects_mixed_and_unsupported_dtypes():
    r = routing.route(
        S((64, 64), F32), S((64, 8), jnp.bfloat16), F32, platform="cuda", mode="always"
    )
    assert r.target == "xla"
    r = route((64, 64), (64, 8), dtype=jnp.int32, mode="always")
    assert r.target == "xla"
    r = route((64, 64), (64, 8), dtype=F32, out=jnp.float16, mode="always")
    assert r.target == "xla" and "cannot write" in r.reason


def test_route_batched_problem():
    r = route((3, 1000, 512), (1, 512, 8))
    assert r.problem == routing.Problem(batch=3, m=1000, k=512, n=8)
    assert r.target == "tsm2r"
    assert route((0, 10, 512), (512, 8)).target == "xla"  # empty batch


def test_problem_of_rejects_bad_shapes():
    with pytest.raises(TypeError, match="rank 2 or 3"):
        routing.problem_of((2, 3, 4, 5), (5, 6))
    with pytest.raises(TypeError, match="contracting"):
        routing.problem_of((2, 3), (4, 5))
    with pytest.raises(TypeError, match="batch"):
        routing.problem_of((2, 3, 4), (3, 4, 5))


def test_route_is_pure_and_hashable():
    a, b = route((8192, 512), (512, 8)), route((8192, 512), (512, 8))
    assert a == b and hash(a) == hash(b)
    with pytest.raises(AttributeError):
        a.target = "xla"


def test_multi_platform_lowering():
    """Exported for both platforms: XLA's dot on CPU, the custom call on CUDA."""
    a, b = S((8192, 512), F32), S((512, 8), F32)
    with jax_tsm2.custom_call_mode("prefer"):
        lowered = jax.jit(jax_tsm2.matmul).trace(a, b).lower(lowering_platforms=("cpu", "cuda"))
    text = lowered.as_text()
    assert has_custom_call(text) and "dot_general" in text


def test_kernel_attribute_is_i32():
    text = cuda_text(jax_tsm2.matmul, S((8192, 512), F32), S((512, 8), F32))
    assert "kernel = 0 : i32" in text
    assert np.int32(routing.KERNEL_IDS["tsm2l"]) == 1


# ---------------------------------------------------------------------------
# layouts and the S and T kernels


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "layout", "target"),
    [
        ((100_000, 16), (16, 16), "nt", "tsm2l"),  # X @ C.T, centroids small
        ((100_000, 512), (8, 512), "nt", "tsm2r"),
        ((100_000, 512), (65, 512), "nt", "xla"),
        ((8, 512), (4096, 512), "nt", "xla"),  # S takes nn only
        ((routing.TSM2S_MAX_M, 4096), (4096, 4096), "nn", "tsm2s"),  # small left
        ((routing.TSM2S_MAX_M + 1, 4096), (4096, 4096), "nn", "xla"),
        ((1, 64), (64, 65), "nn", "tsm2s"),
        ((1, 64), (64, 64), "nn", "tsm2l"),  # L first where B is small
        ((1_000_000, 16), (1_000_000, 16), "tn", "tsm2t"),  # Gram matrix
        ((1_000_000, 512), (1_000_000, 512), "tn", "tsm2t"),
        ((1_000_000, 2000), (1_000_000, 32), "tn", "tsm2t"),  # a randomized SVD's A.T @ Q
        ((1_000_000, 8), (1_000_000, 32768), "tn", "tsm2t"),  # 512 * 512 outputs
        ((1_000_000, 513), (1_000_000, 512), "tn", "xla"),  # one past
        ((1_000_000, 8), (1_000_000, 32769), "tn", "xla"),
        ((3, 1000, 16), (3, 1000, 4), "tn", "tsm2t"),
    ],
)
def test_route_layouts(a_shape, b_shape, layout, target):
    r = route(a_shape, b_shape, layout=layout)
    assert r.target == target, r
    assert r.layout == layout and r.reason.startswith(f"{layout}:"), r.reason
    assert r.layout_id == routing.LAYOUT_IDS[layout]
    if r.custom_call:
        assert layout in routing.KERNEL_LAYOUTS[target]


def test_always_forces_a_kernel_that_takes_the_layout():
    assert route((1000, 600), (1000, 600), layout="tn", mode="always").target == "tsm2t"
    assert route((1000, 600), (700, 600), layout="nt", mode="always").target == "tsm2r"
    assert route((100, 600), (600, 700), layout="nn", mode="always").target == "tsm2r"
    for a, b, layout in [((64, 64), (64, 64), "nt"), ((64, 64), (64, 64), "tn")]:
        r = route(a, b, layout=layout, platform="cpu", mode="always")
        assert r.custom_call and layout in routing.KERNEL_LAYOUTS[r.target]


def test_auto_in_each_layout():
    """Without a calibration the model decides in every layout, with its wide margin."""
    bf16 = jnp.bfloat16
    assert route((8, 4096), (4096, 4096), mode="auto").target == "xla"
    # XLA's dot reads tn operands three times over: TSM2T, in every float dtype.
    for dtype in (jnp.float32, jnp.float64, bf16):
        r = route((1_000_000, 512), (1_000_000, 8), dtype=dtype, mode="auto", layout="tn")
        assert r.target == "tsm2t" and r.layer == "model", r
    # A small contraction: launch-bound either way, XLA's dot keeps it.
    assert route((1000, 16), (1000, 16), mode="auto", layout="tn").target == "xla"


def test_problem_of_reads_the_layout():
    assert routing.problem_of((3, 10), (2, 10), "nt") == routing.Problem(None, 3, 10, 2)
    assert routing.problem_of((4, 10, 3), (1, 10, 2), "tn") == routing.Problem(4, 3, 10, 2)
    with pytest.raises(TypeError, match="layout nt"):
        routing.problem_of((3, 10), (10, 2), "nt")
    with pytest.raises(ValueError, match="layout"):
        routing.problem_of((3, 10), (10, 2), "tt")


@pytest.mark.parametrize(
    ("f", "a", "b", "kernel", "layout"),
    [
        (lambda x, c: jax_tsm2.matmul(x, c.T), S((100_000, 16), F32), S((8, 16), F32), 1, 1),
        (lambda x, y: jax_tsm2.matmul(x.T, y), S((100_000, 16), F32), S((100_000, 4), F32), 3, 2),
        (jax_tsm2.matmul, S((8, 4096), F32), S((4096, 4096), F32), 2, 0),  # small left: S
        (
            lambda x, c: jax_tsm2.dot_general(x, c, (((1,), (1,)), ((), ()))),
            S((100_000, 512), jnp.bfloat16),
            S((8, 512), jnp.bfloat16),
            0,
            1,
        ),
    ],
)
def test_layouts_on_cuda(f, a, b, kernel, layout):
    text = cuda_text(f, a, b)
    assert kernel_ids(text) == [kernel]
    assert [int(x) for x in re.findall(r"layout = (\d+) : i32", text)] == [layout]


# ---------------------------------------------------------------------------
# safety: routing against every committed H100 measurement


def _model_check():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "model_check.py"
    if not (path.parent / "results").exists():  # an sdist leaves the measurements out
        pytest.skip("benchmarks/results is not in this source tree")
    spec = importlib.util.spec_from_file_location("model_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _committed_routes(mc):
    import json

    routes = []
    for f in mc.committed_files():
        doc = json.loads(f.read_text())
        label = mc.file_label(f)
        routes += [dict(r, file=label) for r in mc.routing_check(doc, model.H100_SXM, label)]
    return routes


def test_auto_never_picks_a_kernel_that_measured_slower_than_xla():
    """For every committed H100 case where our forced kernel measured more than 10%
    slower than jnp.matmul, mode "auto" on the (uncalibrated) H100 preset must not run
    that kernel; where a kernel measured more than twice as fast, it must not be left to
    XLA's dot even without a calibration."""
    mc = _model_check()
    routes = _committed_routes(mc)
    # Records of bf16/f16 TSM2R past n = 4 timed the CUDA-core tile, records of
    # products the row stream now runs timed a row tile, and records of L products
    # TSM2L's tensor-core tile now runs (f64 included) timed the CUDA-core tile: they do
    # not count (model_check.superseded).
    assert len(routes) >= 56
    slower = [r for r in routes if r["kernel_over_xla"] > 1.10]
    assert len(slower) >= 14  # L at k = n = 8, the wide R and NT cases, f32 S at m >= 4
    bad = [r for r in routes if r["target"] in r["slow_kernels"]]
    assert not bad, [(r["file"], r["case"], r["dtype"], r["target"]) for r in bad]
    faster = [r for r in routes if r["kernel_over_xla"] < 1 / 2.0]
    missed = [r for r in faster if r["target"].replace("+", "").replace("xla", "") == ""]
    assert len(faster) >= 5  # the TN suite and the gradient products
    assert not missed, [(r["file"], r["case"], r["dtype"]) for r in missed]


def test_the_safety_check_can_fail(monkeypatch):
    """The check above flags a router that runs every eligible kernel (mode "prefer")."""
    mc = _model_check()
    real = routing.route
    monkeypatch.setattr(routing, "route", lambda *a, **kw: real(*a, **dict(kw, mode="prefer")))
    routes = _committed_routes(mc)
    slow = [r for r in routes if r["slowdown"] is not None and r["slowdown"] > 0.10]
    assert len(slow) >= 14


@pytest.mark.gpu
def test_auto_on_this_h100_decides_as_on_the_preset():
    """On a real H100 the model reasons about the driver's description of it (and a
    tuned bandwidth, if any): every committed case must route as on the preset."""
    dev = model.current_device()
    assert dev.source == "driver", dev.source
    if "H100" not in dev.name:
        pytest.skip(f"not an H100: {dev.name}")
    mc = _model_check()
    import json

    for f in mc.committed_files():
        doc = json.loads(f.read_text())
        here = [r["target"] for r in mc.routing_check(doc, dev)]
        preset = [r["target"] for r in mc.routing_check(doc, model.H100_SXM)]
        assert here == preset, f


def _grid_fit():
    import importlib.util
    import pathlib
    import sys

    bench = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
    if not (bench / "results").exists():  # an sdist leaves the measurements out
        pytest.skip("benchmarks/results is not in this source tree")
    sys.path.insert(0, str(bench))  # grid_fit imports model_check
    spec = importlib.util.spec_from_file_location("grid_fit", bench / "grid_fit.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_routing_on_the_committed_grids():
    """Routing within 1.10x of the best path on the H100 validation grids (two random
    grids), simulated with the committed calibration: ``routing.route`` picks from each
    shape, the pick's measured time is compared with the better of the best forced kernel
    and XLA's dot. Shapes whose records timed a kernel since replaced are left out (a pick
    there cannot be scored): TSM2R or TSM2L records of products the row stream now runs,
    TSM2L records of products its tensor-core tile now runs, TSM2T records of products it
    now runs with flat stages, and f32/f64 TSM2T records of tensor-core tiles on rows that
    are not whole vectors, which it now stages as covering vectors; 150 of 226. Of the other
    76, 68 within 1.10x (before the row stream: 209 of 226; in-sample, both grids were
    fitted).

    The tensor-core TSM2S makes the model pick TSM2S for three bf16 shapes the grids timed
    with the CUDA-core kernel (S 15x5591x19026, 15x10183x10698, 9x2227x2336), which the
    recorded times count as misses; measured with the tensor-core kernel the pick ran
    1.78x, 1.78x and 1.25x faster than XLA's dot."""
    gf = _grid_fit()
    within = shapes = 0
    for f in gf.GRIDS:
        ev = gf.evaluate(gf.load(f), model.CALIBRATION)
        for w, _, _, n in ev["routing"].values():
            within, shapes = within + w, shapes + n
    assert shapes == 76
    assert within >= 68


def test_the_grid_simulator_routes_from_the_shape_alone(monkeypatch):
    """grid_fit.route asks routing.route, mode auto, with no tune cache; the measured
    records only score the pick."""
    gf = _grid_fit()
    cases = gf.load(gf.GRIDS[1])
    s = next(c for c in cases if c["jnp"]["case"] == "S:10x18809x1806" and "tsm2s" in c)
    assert gf.route(s, model.CALIBRATION) == "tsm2s"  # measured 2.2x faster than XLA
    for c in cases:
        c.pop("tsm2s", None)
    assert gf.route(s, model.CALIBRATION) == "tsm2s"  # the same without its record
    assert gf._ratio(s, "tsm2s") != gf._ratio(s, "tsm2s")  # unmeasured pick: NaN, a miss
    # A product the row stream now runs is left out: its record timed a row tile.
    assert not any(c["jnp"]["case"] == "NT:12973x6236x4" for c in cases)


def test_the_tsm2t_refit_touches_only_its_block():
    gf = _grid_fit()
    assert {f[1] for f in gf.TSM2T_FITTED} == {"tsm2t"}
    fields = {f[0] for f in gf.TSM2T_FITTED}
    assert fields == {"scalar_elems_per_clk", "split_eta_stream", "split_eta_fma", "route_margin"}
    from jax_tsm2.model import calibration as calib

    cal = model.CALIBRATION
    assert cal.split_eta("tsm2t") == (calib.TSM2T_ETA_STREAM, calib.TSM2T_ETA_FMA)
    assert cal.scalar_rate("tsm2t") == calib.TSM2T_SCALAR_ELEMS_PER_CLK
    assert cal.margin("tsm2t") == calib.TSM2T_ROUTE_MARGIN


def test_an_uncalibrated_gpu_keeps_xla_unless_a_kernel_beats_its_best_case(tmp_path, monkeypatch):
    """A real GPU with no calibration: the model's XLA is another GPU's, so a kernel must
    beat XLA's dot at its best (one pass at the bandwidth). Block power iteration's
    20000 x 20000 x 8 f32 went to TSM2R on an H200 by the H100's model and ran 1.25x slower
    than XLA's dot; here it stays on XLA's dot, as does everything the model wins only by
    charging XLA's dot extra passes."""
    monkeypatch.setenv("JAX_TSM2_CACHE_DIR", str(tmp_path))
    gpu = dataclasses.replace(model.H100_SXM, name="Uncalibrated GPU", source="driver")
    preset = route((20480, 20480), (20480, 8), mode="auto")
    for a, b, layout in [
        ((20000, 20000), (20000, 8), "nn"),
        ((1_000_000, 512), (1_000_000, 8), "tn"),
    ]:
        r = route(a, b, mode="auto", layout=layout, device=gpu)
        assert (r.target, r.layer) == ("xla", "model"), r
        assert "python -m jax_tsm2.tune --calibrate" in r.reason
    # the same tn product on the preset (no GPU in the process) keeps the model's choice
    assert route((1_000_000, 512), (1_000_000, 8), mode="auto", layout="tn").target == "tsm2t"
    assert preset.layer == "model"
    # With calibrations turned off, the reason says that rather than asking to calibrate.
    monkeypatch.setenv("JAX_TSM2_CALIBRATION", "off")
    r = route((20000, 20000), (20000, 8), mode="auto", device=gpu)
    assert r.layer == "model" and "turned off by JAX_TSM2_CALIBRATION" in r.reason
