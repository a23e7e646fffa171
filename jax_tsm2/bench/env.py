"""What the harness runs on: device, memory, L2 size, software versions and build info."""

from __future__ import annotations

import contextlib
import datetime
import importlib
import platform
import shlex
import subprocess
import sys
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any

import jax

# L2 sizes by device name, used only when neither torch nor cupy can report it.
_L2_BY_NAME = {"H200": 60 * 2**20, "H100": 50 * 2**20, "A100": 40 * 2**20, "V100": 6 * 2**20}
_DEFAULT_L2 = 64 * 2**20
_CPU_BUDGET = 2 * 2**30


@dataclass(frozen=True)
class Device:
    """The device the suite runs on."""

    platform: str  # "gpu", "cpu", ...
    name: str  # jax's device_kind, e.g. "NVIDIA H100 80GB HBM3"
    sm_count: int | None
    memory_limit_bytes: int | None  # JAX's allocator limit, None on CPU
    l2_bytes: int
    l2_source: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _l2_bytes(name: str, torch: ModuleType | None) -> tuple[int, str]:
    if torch is not None:
        try:
            return int(torch.cuda.get_device_properties(0).L2_cache_size), "torch"
        except Exception:
            pass
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]), "cupy"
    except Exception:
        pass
    for key, size in _L2_BY_NAME.items():
        if key in name:
            return size, "table"
    return _DEFAULT_L2, "default"


def device_info(torch: ModuleType | None = None) -> Device:
    """Describe ``jax.devices()[0]`` (torch, if given, supplies the L2 size)."""
    dev = jax.devices()[0]
    stats = None
    with contextlib.suppress(Exception):
        stats = dev.memory_stats()
    limit = int(stats["bytes_limit"]) if stats and "bytes_limit" in stats else None
    if dev.platform == "cpu":
        l2, source = _DEFAULT_L2, "default (cpu)"
    else:
        l2, source = _l2_bytes(dev.device_kind, torch)
    return Device(
        platform=dev.platform,
        name=str(dev.device_kind),
        sm_count=getattr(dev, "core_count", None),
        memory_limit_bytes=limit,
        l2_bytes=l2,
        l2_source=source,
    )


def case_budget(device: Device, fraction: float) -> int:
    """Bytes one case may hold on the device (JAX's side; torch shares the inputs)."""
    if device.memory_limit_bytes is None:
        return _CPU_BUDGET
    return int(device.memory_limit_bytes * fraction)


def _driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return out.stdout.strip().splitlines()[0] or None
    except Exception:
        return None


def versions(torch: ModuleType | None) -> dict[str, Any]:
    """Versions of Python, jax, jaxlib, jax_tsm2, torch, CUDA and the driver."""
    import jaxlib

    out: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "jax": jax.__version__,
        "jaxlib": getattr(jaxlib, "__version__", None),
        "jax_tsm2": None,
        "jax_backend_platform_version": None,
        "torch": None,
        "torch_cuda": None,
        "driver": None,
    }
    try:
        backend = importlib.import_module("jax.extend").backend.get_backend()
        out["jax_backend_platform_version"] = backend.platform_version
    except Exception:
        pass
    try:
        from importlib.metadata import version

        out["jax_tsm2"] = version("jax_tsm2")
    except Exception:
        pass
    if torch is not None:
        out["torch"] = torch.__version__
        out["torch_cuda"] = torch.version.cuda
    if jax.devices()[0].platform == "gpu":
        out["driver"] = _driver_version()
    return out


def build_info() -> dict[str, Any] | None:
    """``jax_tsm2.build_info()`` (or ``jax_tsm2._ffi.build_info()``), if it exists."""
    try:
        import jax_tsm2
    except Exception as err:
        return {"error": f"import jax_tsm2 failed: {err}"}
    owners: list[Any] = [jax_tsm2]
    with contextlib.suppress(Exception):
        owners.append(importlib.import_module("jax_tsm2._ffi"))
    for owner in owners:
        fn = getattr(owner, "build_info", None)
        if callable(fn):
            try:
                return dict(fn())
            except Exception as err:
                return {"error": f"build_info() failed: {err}"}
    return None


def git_commit(cwd: str | None = None) -> tuple[str | None, bool | None]:
    """The checkout's HEAD commit and whether tracked files differ from it, or ``(None, None)``
    outside a git checkout (an installed package, a machine without git)."""
    try:
        run = lambda *args: subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        head = run("rev-parse", "HEAD")
        dirty = run("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None, None
    return head or None, bool(dirty)


def made(argv: list[str]) -> dict[str, Any]:
    """Provenance for a result file: the UTC date, the commit of the tree that ran (and whether
    it had changes), the command line and the extension's ``build_info()``.

    Example:
        >>> sorted(made(["benchmarks/x.py", "--out", "DIR"]))
        ['build', 'command', 'commit', 'date', 'dirty']
    """
    commit, dirty = git_commit()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "dirty": dirty,
        "command": shlex.join(["python", *argv]),
        "build": build_info(),
    }


def custom_call_mode() -> str | None:
    """``jax_tsm2.get_custom_call_mode()`` (auto/always/never), if the library has it."""
    try:
        import jax_tsm2

        return str(jax_tsm2.get_custom_call_mode())
    except Exception:
        return None
