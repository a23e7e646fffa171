"""Loads the compiled extension and registers its XLA FFI targets with JAX.

``jax_tsm2._tsm2_ext`` is the nanobind module built from ``ffi/``. It hands
out one PyCapsule per (platform, target name); this module registers each of
them exactly once per process, when ``jax_tsm2`` is imported. A second
registration of the same name and platform would be a duplicate-handler
error in XLA, so nothing else may call ``jax.ffi.register_ffi_target`` for
these names.

Registering the CUDA targets works on a machine without a GPU: XLA keeps the
registration pending until a CUDA backend appears.
"""

from __future__ import annotations

import functools
import warnings
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
KMEANS_UPDATE_TARGET = "tsm2_kmeans_update"
KMEANS_ASSIGN_TARGET = "tsm2_kmeans_assign"
KMEANS_SUMS_TARGET = "tsm2_kmeans_sums"
COLSUMS_TARGET = "tsm2_colsums"
REPAIR_TARGET = "tsm2_repair_column"
JUDGE_TARGET = "tsm2_abft_judge"
TARGETS = (
    MATMUL_TARGET,
    KMEANS_TARGET,
    KMEANS_UPDATE_TARGET,
    KMEANS_ASSIGN_TARGET,
    KMEANS_SUMS_TARGET,
    COLSUMS_TARGET,
    REPAIR_TARGET,
    JUDGE_TARGET,
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


def _warn_on_jax_mismatch() -> None:
    built = _tsm2_ext.build_info().get("jax_version")
    if built != jax.__version__:
        warnings.warn(
            f"jax_tsm2 was built against jax {built} but jax {jax.__version__} is running; "
            "the XLA FFI API may differ. Rebuild with `pip install --no-build-isolation -e .`.",
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
    """True when this build contains the ABFT kernels (colsums, repair_column, abft_judge)."""
    cuda = _registered.get("CUDA", ())
    return all(t in cuda for t in (COLSUMS_TARGET, REPAIR_TARGET, JUDGE_TARGET))


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


@functools.cache
def _sm_count() -> int:
    if cuda_backend_present():
        return int(getattr(jax.devices("cuda")[0], "core_count", DEFAULT_SM_COUNT))
    return DEFAULT_SM_COUNT


@functools.cache
def _smem_optin() -> int:
    """Shared memory a block may opt in to on this process's GPU (an H200's without one)."""
    if cuda_backend_present() and build_has_cuda():
        return int(_tsm2_ext.device_properties(0)["smem_per_block_optin"])
    return DEFAULT_SMEM_OPTIN


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
    return _tsm2_ext.workspace_bytes(name, kernel, batch, m, k, n, _sm_count())


def kmeans_plan(dtype: Any, n: int, d: int, k: int) -> dict[str, Any]:
    """How ``tsm2_kmeans_step`` runs ``(n, d, k)``: ``supported`` (the CUDA kernel
    takes it), ``step`` (which kernel: ``"cuda_cores"``, ``"tensor_cores"`` for
    f32 rows of 64..256, ``"tensor_cores_cluster"`` for f32 rows of 260..4096
    split over a cluster of ``wide_cluster`` blocks; both need ``d % 4 == 0`` and
    ``9 <= k``, k <= 16 for the second), the CUDA-core plan's variant and
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
    return dict(_tsm2_ext.kmeans_plan(name, n, d, k, _sm_count()))


def kmeans_tiled_plan(dtype: Any, n: int, d: int, k: int) -> dict[str, Any]:
    """How the k-means step for any k runs ``(n, d, k)`` on this process's GPU (an H200
    without one): ``assign_supported`` (``tsm2_kmeans_assign`` takes f32, bf16, f16),
    ``assign_workspace_bytes``, the assignment's tiles (``row_tiles``,
    ``centroid_tiles``, ``splits``, ``resident``, ``stages``), and the sums'
    (``tsm2_kmeans_sums``) ``bucket``, ``chunks`` (its attributes), ``groups`` and
    ``sums_workspace_bytes``.

    Example:
        >>> p = kmeans_tiled_plan("float32", 10**6, 256, 1024)
        >>> p["assign_supported"], p["centroid_tiles"], p["splits"]
        (True, 8, 1)
        >>> kmeans_tiled_plan("float64", 1000, 8, 100)["assign_supported"]
        False
    """
    name = jax.numpy.dtype(dtype).name
    return dict(_tsm2_ext.kmeans_tiled_plan(name, n, d, k, _sm_count(), _smem_optin()))


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
    ``cuda_architectures``, ``xla_ffi_api_version``, ``jax_version`` it was
    built against, ``compiler``) plus ``jax_version_running``,
    ``cuda_targets_registered`` and ``targets`` ({platform: names}).

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
    return info
