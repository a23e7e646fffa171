"""Loads the compiled extension and registers its XLA FFI targets with JAX.

``jax_tsm2._tsm2_ext`` is the nanobind module built from ``ffi/``. It hands
out one PyCapsule per (platform, target name); this module registers each of
them exactly once per process, when ``jax_tsm2`` is imported. A second
registration of the same name and platform would be a duplicate-handler
error in XLA, so nothing else may call ``jax.ffi.register_ffi_target`` for
these names.

Registering the CUDA targets works on a machine without a GPU: XLA keeps the
registration pending until a CUDA backend appears. A GPU that the build
carries no code for (``build_info()["cuda_sass"]`` and ``["cuda_ptx"]``) gets
one warning, and every product then lowers to XLA's dot (``cuda_kernels_usable``).
"""

from __future__ import annotations

import functools
import os
import re
import warnings
from collections.abc import Sequence
from typing import Any

import jax

try:
    from jax_tsm2 import _tsm2_ext
except ImportError as err:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "jax_tsm2: the compiled extension jax_tsm2._tsm2_ext is missing or failed to load "
        f"({err}). Build it against the jax you run with "
        "`pip install --no-build-isolation -e .` from the repository root "
        "(README.md, section 'Building')."
    ) from err

# The kernel and layout ids of the FFI attributes `kernel` and `layout`, which
# layouts each kernel reads, and the limits routing and the model respect,
# as the extension defines them (ffi/matmul/kinds.h, ffi/module.cc).
KERNEL_IDS: dict[str, int] = {str(k): int(v) for k, v in _tsm2_ext.KERNELS.items()}
LAYOUT_IDS: dict[str, int] = {str(k): int(v) for k, v in _tsm2_ext.LAYOUTS.items()}
KERNEL_LAYOUTS: dict[str, tuple[str, ...]] = {
    str(k): tuple(str(x) for x in v) for k, v in _tsm2_ext.KERNEL_LAYOUTS.items()
}
S_MAX_M: int = int(_tsm2_ext.LIMITS["s_max_m"])  # TSM2S takes m <= S_MAX_M rows of A
DEFAULT_SM_COUNT: int = int(_tsm2_ext.LIMITS["default_sm_count"])  # an H100 SXM's, without a GPU
# Shared memory per block (opt-in) the k-means plans assume without a GPU: an H100's or H200's.
DEFAULT_SMEM_OPTIN: int = int(_tsm2_ext.LIMITS["kmeans_default_smem_optin"])

# The FFI target names the lowerings emit.
MATMUL_TARGET = "tsm2_matmul"
KMEANS_TARGET = "tsm2_kmeans_step"
KMEANS_CHECKED_TARGET = "tsm2_kmeans_step_checked"  # with the per-row distance check
KMEANS_INJECT_TARGET = "tsm2_kmeans_step_checked_inject"  # checked, with a planted fault
KMEANS_UPDATE_TARGET = "tsm2_kmeans_update"
KMEANS_ASSIGN_TARGET = "tsm2_kmeans_assign"
KMEANS_SUMS_TARGET = "tsm2_kmeans_sums"
COLSUMS_TARGET = "tsm2_colsums"
REPAIR_TARGET = "tsm2_repair_column"
JUDGE_TARGET = "tsm2_abft_judge"
ENCODE_TARGET = "tsm2_abft_encode"
VERIFY_TARGET = "tsm2_abft_verify"
VERIFY_INJECT_TARGET = "tsm2_abft_verify_inject"  # verify with a planted fault, for tests
ROWS_TARGET = "tsm2_abft_rows"  # a row-streamed product with its fused row check
HOST_ROWS_TARGET = "tsm2_host_rows"  # rows of pinned host memory (jax_tsm2.host_memory)
TARGETS = (
    MATMUL_TARGET,
    KMEANS_TARGET,
    KMEANS_CHECKED_TARGET,
    KMEANS_INJECT_TARGET,
    KMEANS_UPDATE_TARGET,
    KMEANS_ASSIGN_TARGET,
    KMEANS_SUMS_TARGET,
    COLSUMS_TARGET,
    REPAIR_TARGET,
    JUDGE_TARGET,
    ENCODE_TARGET,
    VERIFY_TARGET,
    VERIFY_INJECT_TARGET,
    ROWS_TARGET,
    HOST_ROWS_TARGET,
)


def _register_all() -> dict[str, tuple[str, ...]]:
    """Registers every target once per process; returns {platform: target names}."""
    # The record lives on the extension module, which importlib.reload of this
    # module (or of the package) does not re-create, so a reload cannot
    # register the same handlers a second time.
    done = getattr(_tsm2_ext, "_jax_tsm2_registered", None)
    if done is not None:
        return done
    done: dict[str, tuple[str, ...]] = {}
    # The product's targets, then the benchmark harness's private ones
    # (tsm2_stream_read, tsm2_device_clock), which jax_tsm2.bench calls by name.
    for registrations in (_tsm2_ext.registrations(), _tsm2_ext.harness_registrations()):
        for platform, targets in registrations.items():
            for name, capsule in targets.items():
                jax.ffi.register_ffi_target(name, capsule, platform=platform)
            done[platform] = tuple(sorted((*done.get(platform, ()), *targets)))
    _tsm2_ext._jax_tsm2_registered = done
    return done


def _release(version: str) -> tuple[int, ...]:
    """``"0.7.2"`` (or ``"0.8.0.dev20250101"``) as ``(0, 7, 2)``."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    return tuple(int(x) for x in m.groups(default="0")) if m else ()


def _warn_on_jax_mismatch() -> None:
    # XLA accepts handlers built against the FFI headers of an older jaxlib, not of a
    # newer one (FFI API 0.4 arrived with jaxlib 0.11.1): wheels are built against the
    # oldest supported jax, so only a jax older than the build's deserves a warning.
    built = _tsm2_ext.build_info().get("jax_version")
    if _release(jax.__version__) < _release(built):
        warnings.warn(
            f"jax_tsm2 was built against jax {built} but the older jax {jax.__version__} is "
            "running, whose XLA FFI API may not take its handlers. Upgrade jax, or rebuild "
            "with `pip install --no-build-isolation -e .`.",
            RuntimeWarning,
            stacklevel=3,
        )


_registered = _register_all()
_warn_on_jax_mismatch()


def registered_targets() -> dict[str, tuple[str, ...]]:
    """``{platform: target names}`` registered with XLA by this process."""
    return dict(_registered)


def cuda_targets_available() -> bool:
    """True when this build contains the CUDA kernels (and they are registered)."""
    return MATMUL_TARGET in _registered.get("CUDA", ())


def cuda_kmeans_available() -> bool:
    """True when this build contains the fused k-means step's CUDA kernel."""
    return KMEANS_TARGET in _registered.get("CUDA", ())


def cuda_kmeans_update_available() -> bool:
    """True when this build contains the k-means centroid update's CUDA kernel."""
    return KMEANS_UPDATE_TARGET in _registered.get("CUDA", ())


def cuda_kmeans_tiled_available() -> bool:
    """True when this build contains the k-means step for any k (assignment and sums)."""
    cuda = _registered.get("CUDA", ())
    return KMEANS_ASSIGN_TARGET in cuda and KMEANS_SUMS_TARGET in cuda


def cuda_abft_available() -> bool:
    """True when this build contains the ABFT kernels (colsums, repair_column, abft_judge,
    abft_encode, abft_verify)."""
    cuda = _registered.get("CUDA", ())
    names = (COLSUMS_TARGET, REPAIR_TARGET, JUDGE_TARGET, ENCODE_TARGET, VERIFY_TARGET)
    return all(t in cuda for t in names)


def cuda_abft_rows_available() -> bool:
    """True when this build contains the fused row check (``tsm2_abft_rows``)."""
    return ROWS_TARGET in _registered.get("CUDA", ())


def disabled_safety_checks() -> list[Any]:
    """The ``jax.export`` safety checks to turn off for programs with jax_tsm2's custom calls.

    ``jax.export`` refuses to serialize a custom call whose target it does not know to be
    stable across versions, and jax_tsm2's targets are not in its list: pass this as
    ``disabled_checks``. The program then runs only where jax_tsm2 is imported (which
    registers the targets), built for the same XLA FFI API as the jax that runs it.
    Shapes with symbolic dimensions (``export.symbolic_shape``) export without the
    checks too: their products route to XLA's dot, the kernels being planned for static
    sizes.

    Example (a round trip on CPU, where mode "always" emits the reference target):
        >>> import jax, jax.numpy as jnp, jax_tsm2
        >>> from jax import export
        >>> a, b = jnp.ones((8, 4)), jnp.ones((4, 2))
        >>> with jax_tsm2.custom_call_mode("always"):
        ...     exp = export.export(jax.jit(jax_tsm2.matmul), platforms=["cpu"],
        ...                         disabled_checks=jax_tsm2.disabled_safety_checks())(a, b)
        >>> "custom_call @tsm2_matmul" in exp.mlir_module()
        True
        >>> again = export.deserialize(exp.serialize(vjp_order=1))
        >>> float(again.call(a, b)[0, 0])
        4.0
        >>> jax.grad(lambda a: again.call(a, b).sum())(a)[0].tolist()
        [2.0, 2.0, 2.0, 2.0]
    """
    return [jax.export.DisabledSafetyCheck.custom_call(name) for name in TARGETS]


@functools.cache
def cuda_backend_present() -> bool:
    """True when this process has a CUDA device (JAX's ``gpu`` backend on NVIDIA)."""
    try:
        return len(jax.devices("cuda")) > 0
    except RuntimeError:
        return False


# The compute capability that plans assume without a GPU (an H100's, like DEFAULT_SM_COUNT;
# DEFAULT_SMEM_OPTIN above is its opt-in shared memory per block).
DEFAULT_CC: tuple[int, int] = (9, 0)


@functools.cache
def _sm_count() -> int:
    if cuda_backend_present():
        return int(getattr(jax.devices("cuda")[0], "core_count", DEFAULT_SM_COUNT))
    return DEFAULT_SM_COUNT


def served_by(cc: tuple[int, int], sass: Sequence[int], ptx: Sequence[int]) -> bool:
    """Whether a GPU of compute capability ``cc`` runs a build that carries machine code
    for ``sass`` and PTX for ``ptx`` (architectures as ``10 * major + minor``).

    Machine code runs on GPUs of its major version and at least its minor one; PTX is
    compiled by the driver for any GPU at least as new.

    Example:
        >>> served_by((8, 9), sass=[80, 90], ptx=[90])  # an L4 runs the sm_80 code
        True
        >>> served_by((12, 0), sass=[80, 90, 100], ptx=[100])  # an RTX 5090: the PTX
        True
        >>> served_by((7, 5), sass=[80, 90], ptx=[90])  # a T4
        False
    """
    major, minor = cc
    v = 10 * major + minor
    return any(s // 10 == major and s <= v for s in sass) or any(p <= v for p in ptx)


# A test seam shared with the C++ planners (ffi/common/device.h PretendCc):
# JAX_TSM2_PRETEND_CC="8.0" caps every GPU's compute capability, so that an H100
# plans, and is checked against the build, as an A100 would be.
PRETEND_CC_ENV = "JAX_TSM2_PRETEND_CC"


def _pretend_cap() -> tuple[int, int] | None:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", os.environ.get(PRETEND_CC_ENV, ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def device_compute_capabilities() -> list[tuple[int, int]]:
    """The compute capability of each CUDA device of this process (none without a GPU),
    capped by ``JAX_TSM2_PRETEND_CC`` where that is set.

    Tests replace this function, or set the variable, to play an older GPU.
    """
    if not cuda_backend_present():
        return []
    out = []
    for index, dev in enumerate(jax.devices("cuda")):
        cc = getattr(dev, "compute_capability", None)
        if cc is None:  # older jaxlibs: ask the driver through the extension
            props = _tsm2_ext.device_properties(index)
            out.append((int(props["cc_major"]), int(props["cc_minor"])))
        else:
            major, minor = str(cc).split(".")[:2]
            out.append((int(major), int(minor)))
    cap = _pretend_cap()
    return [min(cc, cap) for cc in out] if cap else out


def carried_architectures() -> tuple[list[int], list[int]]:
    """``(sass, ptx)``: the architectures (``10 * major + minor``) this build carries
    machine code and PTX for; both empty without the CUDA kernels."""
    info = _tsm2_ext.build_info()
    return [int(a) for a in info["cuda_sass"]], [int(a) for a in info["cuda_ptx"]]


@functools.cache
def gpus_served() -> bool:
    """True when this build carries code every CUDA device of this process runs (or there
    is no CUDA device). Otherwise warns, once per process, and products lower to XLA."""
    ccs = device_compute_capabilities()
    if not ccs:
        return True
    if not cuda_targets_available():
        return _warn_unserved(ccs, "it was built without the CUDA kernels (TSM2_CUDA=OFF)")
    sass, ptx = carried_architectures()
    unserved = sorted({cc for cc in ccs if not served_by(cc, sass, ptx)})
    if not unserved:
        return True
    carried = ", ".join([*(f"sm_{a}" for a in sass), *(f"compute_{a} (PTX)" for a in ptx)])
    why = f"it carries code for {carried} only"
    return _warn_unserved(unserved, why)


def _warn_unserved(ccs: Sequence[tuple[int, int]], why: str) -> bool:
    gpus = ", ".join(f"compute capability {major}.{minor}" for major, minor in ccs)
    warnings.warn(
        f"jax_tsm2 cannot run its kernels on this GPU ({gpus}): {why}. Every product runs "
        "on XLA's dot. Install a wheel or build for this GPU (TSM2_CUDA_ARCHITECTURES, "
        "docs/building.md).",
        RuntimeWarning,
        stacklevel=4,
    )
    return False


def cuda_kernels_usable(available: bool) -> bool:
    """Whether lowering for CUDA may emit a target that this build has when ``available``.

    Without a CUDA device this is cross-platform lowering (export, the routing tests):
    yes. With one, the build must contain the target and serve every GPU
    (``gpus_served``).
    """
    # gpus_served first: it warns once, a CPU-only build on a GPU included.
    return not cuda_backend_present() or (gpus_served() and available)


def cuda_gpu_ready() -> bool:
    """True when this process has a CUDA GPU and this build's kernels run on it."""
    return cuda_backend_present() and cuda_kernels_usable(cuda_targets_available())


@functools.cache
def _cc() -> int:
    """This process's GPU compute capability as ``10 * major + minor`` (the oldest of its
    GPUs), or the H100's without one: what the planners are asked about."""
    ccs = device_compute_capabilities() or [DEFAULT_CC]
    major, minor = min(ccs)
    return 10 * major + minor


@functools.cache
def smem_optin() -> int:
    """The opt-in shared memory per block of this process's GPUs (the least of them), or
    an H100's without one (or without the CUDA kernels): which kernels' rings fit."""
    if not (cuda_backend_present() and cuda_targets_available()):
        return DEFAULT_SMEM_OPTIN
    n = len(jax.devices("cuda"))
    return min(int(_tsm2_ext.device_properties(i)["smem_per_block_optin"]) for i in range(n))


def build_has_cuda() -> bool:
    """True when the extension was built with its CUDA kernels."""
    return bool(_tsm2_ext.build_info().get("cuda"))


def matmul_workspace_bytes(dtype: Any, kernel: int, batch: int, m: int, k: int, n: int) -> int:
    """Size of the ``workspace`` result of ``tsm2_matmul`` for this problem.

    It holds partial sums of output tiles whose contraction is split between
    blocks (``ffi/matmul/kernels/tsm2.cuh``, ``ffi/matmul/split_plan.h``); 0 when
    nothing is split. The C++ side computes it from the same plan the handler uses.
    """
    name = jax.numpy.dtype(dtype).name
    return _tsm2_ext.workspace_bytes(name, kernel, batch, m, k, n, _sm_count(), _cc(), smem_optin())


def kmeans_plan(dtype: Any, n: int, d: int, k: int) -> dict[str, Any]:
    """How ``tsm2_kmeans_step`` runs ``(n, d, k)``: ``supported`` (the CUDA kernel
    takes it), ``step`` (which kernel: ``"cuda_cores"``, ``"tensor_cores"`` for
    f32 rows of 4..256 (``9 <= k`` past 64), ``"tensor_cores_cluster"`` for f32
    rows of 260..4096 split over a cluster of ``wide_cluster`` blocks (``9 <= k
    <= 16``); both need ``d % 4 == 0``), the CUDA-core plan's variant and
    footprint, and ``workspace_bytes`` (the size of its ``workspace`` result for
    this process's GPU, or an H100 without one).

    Example:
        >>> kmeans_plan("float32", 1000, 256, 16)["supported"]
        True
        >>> kmeans_plan("float32", 1000, 4096, 16)["step"]
        'tensor_cores_cluster'
        >>> kmeans_plan("float32", 1000, 4096, 16)["supported"]  # d split over a cluster
        True
        >>> kmeans_plan("float32", 1000, 4097, 16)["supported"]  # d > 4096
        False
    """
    name = jax.numpy.dtype(dtype).name
    return dict(_tsm2_ext.kmeans_plan(name, n, d, k, _sm_count(), _cc(), smem_optin()))


def kmeans_tiled_plan(dtype: Any, n: int, d: int, k: int) -> dict[str, Any]:
    """How the k-means step for any k runs ``(n, d, k)`` on this process's GPU (an H200
    without one): ``assign_supported`` (``tsm2_kmeans_assign`` takes f32, bf16, f16),
    ``assign_workspace_bytes`` (f32 also ``assign_tf32_copy_bytes``, the room the TF32 mode
    adds for the centroids rounded to TF32, and ``assign_refine_bytes``, what the default
    mode adds on sm_90a to refine a TF32 ranking), the assignment's tiles (``row_tiles``,
    ``centroid_tiles``, ``splits``, ``resident``, ``stages``), and the sums'
    (``tsm2_kmeans_sums``) ``piece``, ``bucket``, ``chunks`` (its attributes: ``piece``
    0 where one bucket holds all k clusters, else the sorted path's piece of sorted
    rows), ``groups``, ``sort_passes``, ``merge_levels`` and ``sums_workspace_bytes``.

    Example:
        >>> p = kmeans_tiled_plan("float32", 10**6, 256, 1024)
        >>> p["assign_supported"], p["centroid_tiles"], p["splits"]
        (True, 8, 1)
        >>> kmeans_tiled_plan("float64", 1000, 8, 100)["assign_supported"]
        False
    """
    name = jax.numpy.dtype(dtype).name
    return dict(_tsm2_ext.kmeans_tiled_plan(name, n, d, k, _sm_count(), smem_optin()))


def colsums_plan(dtype: Any, acc: Any, r: int, rows: int, cols: int) -> dict[str, Any]:
    """How ``tsm2_colsums`` cuts ``rows x cols`` data with ``r`` weight rows on this process's
    GPU (or an H100 without one), and ``workspace_bytes``, the size of its ``workspace`` result.

    Example:
        >>> plan = colsums_plan("float32", "float32", 3, 8192, 8192)
        >>> plan["lanes"], plan["tile_cols"], plan["tiles"]
        (32, 128, 64)
    """
    name, acc_name = jax.numpy.dtype(dtype).name, jax.numpy.dtype(acc).name
    return dict(_tsm2_ext.colsums_plan(name, acc_name, r, rows, cols, _sm_count()))


def abft_encode_workspace(dtype: Any, m: int, k: int, n: int) -> int:
    """Bytes of ``tsm2_abft_encode``'s workspace for ``(m, k) @ (k, n)`` on this process's GPU
    (or an H100 without one): partial sums of the passes over A and B, and A's column values.

    Example:
        >>> abft_encode_workspace("float32", 8192, 8192, 8192) > 0
        True
    """
    return int(_tsm2_ext.abft_encode_workspace(jax.numpy.dtype(dtype).name, m, k, n, _sm_count()))


def abft_verify_workspace(dtype: Any, m: int, n: int) -> int:
    """Bytes of ``tsm2_abft_verify``'s workspace for an ``(m, n)`` product: the pass over C's
    partial sums (0 when it is not split).

    Example:
        >>> abft_verify_workspace("float32", 8, 8)
        0
    """
    return int(_tsm2_ext.abft_verify_workspace(jax.numpy.dtype(dtype).name, m, n, _sm_count()))


def abft_rows_workspace(dtype: Any, m: int, k: int, n: int) -> int | None:
    """Bytes of ``tsm2_abft_rows``'s workspace for ``(m, k) @ (k, n)`` on this process's GPU
    (or an H100 without one), or None where the fused row check does not take the product
    (``n`` past the row stream's widths: 16 columns for f32, 8 for the others).

    Example:
        >>> abft_rows_workspace("float32", 20480, 20480, 8) > 0
        True
        >>> abft_rows_workspace("float64", 1000, 1000, 9) is None
        True
    """
    name = jax.numpy.dtype(dtype).name
    bytes_ = _tsm2_ext.abft_rows_workspace(name, m, k, n, _sm_count(), smem_optin())
    return None if bytes_ is None else int(bytes_)


def repair_blocks(m: int) -> int:
    """Blocks of ``tsm2_repair_column`` for ``m`` rows: the length of its s32 workspace.

    Example:
        >>> repair_blocks(100), repair_blocks(10**7)
        (4, 1024)
    """
    return int(_tsm2_ext.repair_blocks(m))


def judge_state_size(m: int) -> int:
    """Length of ``tsm2_abft_judge``'s s32 state for ``m`` rows (a header and the repair's flags).

    Example:
        >>> judge_state_size(100)
        8
    """
    return int(_tsm2_ext.judge_state_size(m))


def build_info() -> dict[str, Any]:
    """What was built and what is running.

    The extension's own report (``cuda``, ``cuda_version``,
    ``cuda_architectures`` as CMake was given them, ``cuda_sass`` and
    ``cuda_ptx``: the architectures it carries machine code and PTX for, as
    ``10 * major + minor``; ``xla_ffi_api_version``, ``jax_version`` it was
    built against, ``compiler``) plus ``jax_version_running``,
    ``cuda_targets_registered``, ``targets`` ({platform: names}) and
    ``gpus_served`` (False when this process has a GPU the build cannot run
    on; products then use XLA's dot).

    Example:
        >>> import jax_tsm2
        >>> info = jax_tsm2.build_info()
        >>> sorted(info["targets"])  # doctest: +SKIP
        ['CUDA', 'cpu']
    """
    info = dict(_tsm2_ext.build_info())
    info["jax_version_running"] = jax.__version__
    info["cuda_targets_registered"] = cuda_targets_available()
    info["targets"] = registered_targets()
    info["gpus_served"] = gpus_served()
    return info
