"""The GPU the model reasons about: what the driver reports, and the few tables it does not.

``Device`` holds what ``cudaGetDeviceProperties`` and ``cudaDeviceGetAttribute``
report (through ``_tsm2_ext.device_properties``), plus an optional measured
streaming bandwidth. ``FMA_LANES`` and ``DOT_FLOPS_PER_CLK`` are the per-
architecture rates the driver does not report. ``H100_SXM`` is the preset used
where there is no GPU (cross-platform lowering, tests, documentation), so that
those decisions are deterministic.

Example:
    >>> from jax_tsm2.model.device import H100_SXM
    >>> round(H100_SXM.theoretical_bandwidth / 1e12, 2), H100_SXM.fma_lanes("f64")
    (3.35, 64)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from jax_tsm2 import _ffi
from jax_tsm2._ffi import _tsm2_ext
from jax_tsm2.model.calibration import CALIBRATION, Calibration
from jax_tsm2.tune import cache


@dataclasses.dataclass(frozen=True)
class Device:
    """What the model needs to know about a GPU.

    Everything but ``measured_bandwidth`` is what ``cudaGetDeviceProperties``
    and ``cudaDeviceGetAttribute`` report (``_tsm2_ext.device_properties``).
    ``measured_bandwidth`` (bytes/s, a streaming read), when given, replaces
    the theoretical figure scaled by ``Calibration.stream_fraction``.
    """

    name: str
    cc: tuple[int, int]
    sm_count: int
    regs_per_sm: int
    smem_per_sm: int
    smem_reserved_per_block: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    l2_bytes: int
    clock_hz: float
    memory_clock_hz: float
    memory_bus_bits: int
    measured_bandwidth: float | None = None
    source: str = "driver"
    # Opt-in shared memory per block: which kernels' rings fit (an H100's 227 KB).
    smem_per_block_optin: int = 227 * 1024

    @property
    def theoretical_bandwidth(self) -> float:
        """DRAM bytes/s: two transfers per memory clock (DDR/HBM) times the bus width."""
        return 2.0 * self.memory_clock_hz * self.memory_bus_bits / 8.0

    def bandwidth(self, cal: Calibration | None = None) -> float:
        """The streaming-read bandwidth the model uses (bytes/s)."""
        if self.measured_bandwidth:
            return float(self.measured_bandwidth)
        return self.theoretical_bandwidth * (cal or CALIBRATION).stream_fraction

    def with_bandwidth(self, bytes_per_s: float | None) -> Device:
        """This device with a measured streaming bandwidth (None: theoretical)."""
        return dataclasses.replace(self, measured_bandwidth=bytes_per_s)

    @property
    def key(self) -> str:
        """A stable identifier for per-GPU caches: name, compute capability, SM count."""
        safe = "".join(c if c.isalnum() else "-" for c in self.name).strip("-")
        return f"{safe}-sm{self.cc[0]}{self.cc[1]}-{self.sm_count}sm"

    def fma_lanes(self, acc_dtype: str) -> int:
        """FMA lanes per SM (per clock) for f32 or f64 accumulation, from ``FMA_LANES``."""
        return arch_entry(FMA_LANES, self.cc)[acc_dtype]

    def peak_fma_per_s(self, acc_dtype: str) -> float:
        return self.sm_count * self.clock_hz * self.fma_lanes(acc_dtype)

    @classmethod
    def from_properties(cls, props: dict[str, Any], measured_bandwidth: float | None = None):
        """A Device from ``_tsm2_ext.device_properties()``'s dict (clocks in kHz)."""
        return cls(
            name=str(props["name"]),
            cc=(int(props["cc_major"]), int(props["cc_minor"])),
            sm_count=int(props["sm_count"]),
            regs_per_sm=int(props["regs_per_sm"]),
            smem_per_sm=int(props["smem_per_sm"]),
            smem_reserved_per_block=int(props.get("smem_reserved_per_block", 1024)),
            max_threads_per_sm=int(props["max_threads_per_sm"]),
            max_blocks_per_sm=int(props.get("max_blocks_per_sm", 32)),
            l2_bytes=int(props["l2_bytes"]),
            clock_hz=float(props["clock_khz"]) * 1e3,
            memory_clock_hz=float(props["memory_clock_khz"]) * 1e3,
            memory_bus_bits=int(props["memory_bus_width_bits"]),
            measured_bandwidth=measured_bandwidth,
            source="driver",
            smem_per_block_optin=int(props.get("smem_per_block_optin", 227 * 1024)),
        )


# FMA lanes per SM per clock, by compute capability (the CUDA C++ Programming
# Guide's arithmetic-throughput table): f32 FMA, f64 FMA. The driver does not
# report these. An unknown architecture takes its major version's entry, or
# the newest known one below it.
FMA_LANES: dict[tuple[int, int], dict[str, int]] = {
    (7, 0): {"f32": 64, "f64": 32},
    (7, 5): {"f32": 64, "f64": 2},
    (8, 0): {"f32": 64, "f64": 32},
    (8, 6): {"f32": 128, "f64": 2},
    (8, 9): {"f32": 128, "f64": 2},
    (9, 0): {"f32": 128, "f64": 64},
    (10, 0): {"f32": 128, "f64": 64},
    (12, 0): {"f32": 128, "f64": 2},
}

# Dense dot (tensor-core) flops per SM per clock that XLA's dot can reach, by
# compute capability, for its compute-bound regime. f32 at default precision
# may use TF32 tensor cores ("tf32"); at "highest" it runs on the FMA lanes
# (2 flops each).
DOT_FLOPS_PER_CLK: dict[tuple[int, int], dict[str, int]] = {
    (7, 0): {"f16": 1024, "tf32": 128, "f32": 128, "f64": 64},
    (8, 0): {"f16": 2048, "tf32": 1024, "f32": 128, "f64": 128},
    (8, 6): {"f16": 1024, "tf32": 512, "f32": 256, "f64": 4},
    (8, 9): {"f16": 1024, "tf32": 512, "f32": 256, "f64": 4},
    (9, 0): {"f16": 4096, "tf32": 2048, "f32": 256, "f64": 256},
    (10, 0): {"f16": 8192, "tf32": 4096, "f32": 256, "f64": 256},
    (12, 0): {"f16": 2048, "tf32": 1024, "f32": 256, "f64": 4},
}


def arch_entry(table: dict[tuple[int, int], Any], cc: tuple[int, int]) -> Any:
    """``table``'s entry for compute capability ``cc``, or the nearest older one."""
    if cc in table:
        return table[cc]
    same_major = [c for c in table if c[0] == cc[0] and c <= cc]
    older = same_major or [c for c in table if c <= cc] or [min(table)]
    return table[max(older)]


# H100 SXM5 80GB as the driver reports it (NVIDIA H100 datasheet: 132 SMs,
# 1980 MHz boost, HBM3 at 2619 MHz on a 5120-bit bus = 3.35 TB/s, 50 MB L2,
# 228 KB shared memory and 64K registers per SM). The measured streaming-read
# ceiling on the benchmark machine was 3070 GB/s (92% of 3.35 TB/s;
# benchmarks/results/h100/calibration-r-l), which is what this preset uses.
H100_SXM = Device(
    name="NVIDIA H100 80GB HBM3",
    cc=(9, 0),
    sm_count=_ffi.DEFAULT_SM_COUNT,  # 132, what plans assume without a GPU
    regs_per_sm=65536,
    smem_per_sm=233472,
    smem_reserved_per_block=1024,
    max_threads_per_sm=2048,
    max_blocks_per_sm=32,
    l2_bytes=52428800,
    clock_hz=1.98e9,
    memory_clock_hz=2.619e9,
    memory_bus_bits=5120,
    measured_bandwidth=3.070e12,
    source="preset: H100 SXM5 datasheet, 3070 GB/s measured read ceiling",
)

PRESETS: dict[str, Device] = {"h100-sxm": H100_SXM}


def device_from_driver(index: int = 0, measured_bandwidth: float | None = None) -> Device:
    """The driver's description of CUDA device ``index`` (RuntimeError without CUDA)."""
    return Device.from_properties(_tsm2_ext.device_properties(index), measured_bandwidth)


def _preset_because(why: str) -> Device:
    return dataclasses.replace(H100_SXM, source=f"H100 preset ({why})")


@functools.cache
def current_device() -> Device:
    """The GPU this process would run on, or the H100 preset when there is none.

    A streaming bandwidth measured by ``python -m jax_tsm2.tune`` for this GPU
    (its cache file) replaces the theoretical one. This never raises: where
    the driver query fails the H100 preset stands in and its ``source`` says
    why (routing reports it).
    """
    if not (_ffi.cuda_backend_present() and _ffi.cuda_targets_available()):
        return _preset_because("no CUDA device in this process")
    try:
        dev = device_from_driver(0)
        if not _ffi.gpus_served():
            return _preset_because("this build of jax_tsm2 carries no code for this GPU")
    except Exception as err:  # routing must not fail on a driver error
        return _preset_because(f"the driver query failed: {type(err).__name__}: {err}")
    bw = cache.measured_bandwidth(dev.key)
    return dev.with_bandwidth(bw) if bw else dev


def resolve_device(device: Device | str | None) -> Device:
    """``device`` itself, a preset by name (``PRESETS``), or ``current_device()`` for None."""
    if device is None:
        return current_device()
    if isinstance(device, str):
        try:
            return PRESETS[device]
        except KeyError:
            raise ValueError(f"unknown device preset {device!r}; have {sorted(PRESETS)}") from None
    return device
