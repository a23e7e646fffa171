"""The performance model: which kernel and tile a product should run, how long it should take, why.

This is the row-major counterpart of the paper's model (sections 3.1.8-3.1.9,
Algorithm 5). From a device description (``Device``: what the CUDA driver
reports, or a preset) and a problem (batch, m, k, n, dtype, layout) it
estimates, for each candidate kernel with the tile the launcher would run
(read from ``ffi/tile_configs.h`` through ``_tsm2_ext.tile_config``, never
re-derived here):

- occupancy: blocks per SM from threads, shared memory and registers, as
  ``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` would find them;
- bytes moved through DRAM and the bytes a ring keeps in flight per SM;
- the compute rate the tile can sustain, and so whether it is memory- or
  compute-bound (the paper's t2 threshold);
- a predicted time, and XLA's dot's predicted time beside it.

The equations (seconds; ``BW`` is the device's streaming-read bandwidth)::

    t_mem  = bytes / (BW * eta_stream * min(1, inflight / (BW * latency)))
    t_cmp  = (FMAs_padded / (SMs_active * clock * rate) + epilogue cycles / clock)
    rate   = min(fma_lanes, smem_bytes_per_clk * rows_per_thread / acc_bytes)
             * min(1, warps_per_SM / warps_to_hide_latency) * eta_tile
    t      = max(t_floor, t_launch + (t_mem**P + t_cmp**P) ** (1 / P))

``rate`` is FMAs per clock per SM. Each thread reads its B values from
shared memory as 16-byte broadcasts and feeds ``rows_per_thread`` rows' FMAs
with each, so a tile with one row per thread is bounded by the shared-memory
pipe (32 f32 FMA per clock per SM on an H100, measured 31-33) well below the
FMA pipe (128); register blocking raises the bound. The soft maximum with
``P`` = 4 models the partial overlap of streaming and computing near the
threshold. XLA's dot is modelled as a stream at a measured fraction of the
read ceiling (``XLA_STREAM_EFFICIENCY``), or the dtype's dot peak when that is
slower.

Only what the driver does not report is tabulated: FMA lanes per SM per
architecture (``FMA_LANES``) and dense dot throughput. The calibration
constants (``Calibration``) were fitted to the H100 runs in
``benchmarks/results/h100-2026-11-22b`` and are checked by
``benchmarks/model_check.py``.

Example:
    >>> from jax_tsm2 import model
    >>> p = model.predict((20480, 20480, 8), "float32", "nn", "tsm2r", device=model.H100_SXM)
    >>> p.bound, round(p.t2_threshold)
    ('memory', 44)
    >>> round(p.seconds * 1e3, 2)  # measured 0.631 ms on an H100
    0.63
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from jax_tsm2 import _ffi
from jax_tsm2._ffi import _tsm2_ext
from jax_tsm2.routing import Problem

KERNEL_NAMES: dict[int, str] = {0: "tsm2r", 1: "tsm2l", 2: "tsm2s", 3: "tsm2t"}
KERNEL_IDS: dict[str, int] = {v: k for k, v in KERNEL_NAMES.items()}
LAYOUTS = ("nn", "nt", "tn")
# Which kernels take which layout (ffi/matmul_kinds.h).
KERNELS_FOR_LAYOUT: dict[str, tuple[str, ...]] = {
    "nn": ("tsm2r", "tsm2l", "tsm2s"),
    "nt": ("tsm2r", "tsm2l"),
    "tn": ("tsm2t",),
}
S_MAX_M = 16  # split_plans.h kSMaxM


# --------------------------------------------------------------------------- device


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
        return _arch_entry(FMA_LANES, self.cc)[acc_dtype]

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


def _arch_entry(table: dict[tuple[int, int], Any], cc: tuple[int, int]) -> Any:
    if cc in table:
        return table[cc]
    same_major = [c for c in table if c[0] == cc[0] and c <= cc]
    older = same_major or [c for c in table if c <= cc] or [min(table)]
    return table[max(older)]


# H100 SXM5 80GB as the driver reports it (NVIDIA H100 datasheet: 132 SMs,
# 1980 MHz boost, HBM3 at 2619 MHz on a 5120-bit bus = 3.35 TB/s, 50 MB L2,
# 228 KB shared memory and 64K registers per SM). The measured streaming-read
# ceiling on the benchmark machine was 3070 GB/s (92% of 3.35 TB/s;
# benchmarks/results/h100-2026-11-22b), which is what this preset uses.
H100_SXM = Device(
    name="NVIDIA H100 80GB HBM3",
    cc=(9, 0),
    sm_count=132,
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


@functools.cache
def current_device() -> Device:
    """The GPU this process would run on, or the H100 preset when there is none.

    A streaming bandwidth measured by ``python -m jax_tsm2.tune`` for this GPU
    (its cache file) replaces the theoretical one.
    """
    if not (_ffi.cuda_backend_present() and _ffi.cuda_targets_available()):
        return H100_SXM
    try:
        dev = device_from_driver(0)
    except RuntimeError:
        return H100_SXM
    from jax_tsm2.tune import cache  # a cycle at import time otherwise

    bw = cache.measured_bandwidth(dev.key)
    return dev.with_bandwidth(bw) if bw else dev


def resolve_device(device: Device | str | None) -> Device:
    if device is None:
        return current_device()
    if isinstance(device, str):
        try:
            return PRESETS[device]
        except KeyError:
            raise ValueError(f"unknown device preset {device!r}; have {sorted(PRESETS)}") from None
    return device


# ---------------------------------------------------------------------- calibration


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Constants the driver cannot give, fitted to benchmarks/results/h100-2026-11-22b.

    - ``stream_fraction``: measured read ceiling / theoretical DRAM bandwidth
      (3070 / 3352 GB/s on the H100); used when no bandwidth was measured.
    - ``eta_stream``: the fraction of the read ceiling our ring sustains when it
      has enough bytes in flight (R f32 n = 1: 91%).
    - ``latency_s``: the effective loaded latency of a ring stage: an SM needs
      ``BW * latency / SMs`` bytes in flight to stream at ``eta_stream``
      (the L tiles with ~72 KB in flight per SM reached 76-81%, those with
      96 KB 89%).
    - ``smem_bytes_per_clk``: the shared-memory pipe; a warp's 16-byte
      broadcast read costs a full 128-byte wavefront per quarter-warp.
    - ``warps_to_hide``: resident warps per SM at which a tile issues at its
      full rate (bf16 L 64x64, 4 warps per SM, reached 66%).
    - ``eta_tile``: achieved fraction of ``rate`` per (accumulator, tile
      kind); the half types on R tiles measured at 55-60% of the f32 rate.
    - ``epilogue_cycles_per_byte``: SM cycles per byte of accumulators a tile
      writes through shared memory at its end (k-group reduction: scalar,
      6; L output staging: 16-byte vectors, 1).
    - ``t_floor``, ``t_launch``: the per-call floor of one jitted product in the
      harness's steady-state timing (host dispatch overlaps the GPU, so the
      floor is a max, ~9 us for both our kernels and XLA's dot at 1e5 rows),
      and the launch cost on top of the streaming time (our handler plans
      each call: ~3.5 us; XLA's dot ~1.5 us).
    - ``fixup_s``: the second launch that adds split tiles' partial sums.
    - ``P``: the soft-maximum exponent joining t_mem and t_cmp.
    """

    stream_fraction: float = 0.916
    eta_stream: float = 0.92
    latency_s: float = 3.6e-6
    smem_bytes_per_clk: float = 128.0
    warps_to_hide: float = 6.0
    eta_tile: tuple[tuple[str, float], ...] = (
        ("f32/R", 1.0),
        ("f32/L", 1.0),
        ("f64/R", 1.15),
        ("f64/L", 1.0),
        ("half/R", 0.58),
        ("half/L", 1.0),
    )
    epilogue_cycles_per_byte: tuple[float, float] = (6.0, 1.0)
    inflight_exponent: float = 0.5
    t_floor: float = 11.0e-6
    t_launch: float = 3.5e-6
    fixup_s: float = 1.5e-6
    P: float = 4.0
    xla_t_floor: float = 10.0e-6
    xla_t_launch: float = 1.5e-6

    def eta(self, key: str) -> float:
        return dict(self.eta_tile)[key]


CALIBRATION = Calibration()

# XLA's dot as a stream: the fraction of the read ceiling it reached
# (jax 0.11.2, H100: 90-99% on the R and L suites; bf16/f16 with k, n <= 8 at
# 50-55%, the one region where our TSM2L wins).
XLA_STREAM_EFFICIENCY = 0.96
XLA_SMALL_HALF_EFFICIENCY = 0.55
# Of DOT_FLOPS_PER_CLK when compute-bound: the harness's 8192^3 ceilings were
# 707 TF bf16 (66%), 59 TF f64 (88%), and f32 "highest" R n = 64 reached 39 TF.
XLA_DOT_EFFICIENCY = 0.65


# -------------------------------------------------------------------------- problem


def _itemsize(dtype: Any) -> int:
    return np.dtype(dtype).itemsize


def _dtype_name(dtype: Any) -> str:
    from jax import numpy as jnp  # bfloat16 as a numpy dtype

    return jnp.dtype(dtype).name


def _acc(dtype_name: str) -> str:
    return "f64" if dtype_name == "float64" else "f32"


def problem_from(problem_or_shapes: Any, layout: str = "nn") -> Problem:
    """The canonical sizes of a product.

    Accepts a ``routing.Problem``, ``(m, k, n)``, ``(batch, m, k, n)``, or a
    pair of operand shapes (or objects with ``.shape``) as stored in
    ``layout``: nn ``a[.., m, k] b[.., k, n]``, nt ``a[.., m, k] b[.., n, k]``,
    tn ``a[.., k, m] b[.., k, n]``.

    Example:
        >>> problem_from(((8, 100), (8, 4)), "tn")
        Problem(batch=None, m=100, k=8, n=4)
    """
    if isinstance(problem_or_shapes, Problem):
        return problem_or_shapes
    x = tuple(problem_or_shapes)
    if len(x) == 2 and not all(isinstance(v, (int, np.integer)) for v in x):
        a, b = (tuple(getattr(s, "shape", s)) for s in x)
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if len(a) not in (2, 3) or len(b) not in (2, 3):
            raise TypeError(f"operands must have rank 2 or 3, got shapes {a} and {b}")
        if layout == "nn":
            (m, k), (kb, n) = a[-2:], b[-2:]
        elif layout == "nt":
            (m, k), (n, kb) = a[-2:], b[-2:]
        else:
            (k, m), (kb, n) = a[-2:], b[-2:]
        if k != kb:
            raise TypeError(f"contracting dimensions differ for layout {layout}: {a} and {b}")
        batch = None
        if len(a) == 3 or len(b) == 3:
            batch = max(a[0] if len(a) == 3 else 1, b[0] if len(b) == 3 else 1)
        return Problem(batch, int(m), int(k), int(n))
    if len(x) == 3:
        return Problem(None, *(int(v) for v in x))
    if len(x) == 4:
        return Problem(int(x[0]), *(int(v) for v in x[1:]))
    raise TypeError(f"expected a Problem, (m, k, n), (batch, m, k, n) or two shapes; got {x!r}")


# ----------------------------------------------------------------------- prediction


@dataclasses.dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    limiter: str  # "threads", "shared memory", "registers", "blocks"
    registers_per_thread: int


@dataclasses.dataclass(frozen=True)
class Prediction:
    """The model's estimate for one kernel (or XLA's dot) on one problem."""

    kernel: str  # "tsm2r", "tsm2l", "tsm2s", "tsm2t" or "xla"
    dtype: str
    layout: str
    problem: Problem
    seconds: float
    bytes: int  # DRAM bytes moved
    bound: str  # "memory", "compute" or "launch"
    t_mem: float
    t_cmp: float
    t_overhead: float  # seconds - the soft maximum of t_mem and t_cmp
    occupancy: Occupancy | None
    params: dict[str, Any]
    t2_threshold: float  # n above which the product is compute-bound at peak FMA rate
    tile_threshold: float | None  # the same for the tile's sustainable rate
    reason: str
    supported: bool = True

    @property
    def bandwidth(self) -> float:
        """Bytes per second the predicted time implies."""
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def kernel_id(self) -> int | None:
        return KERNEL_IDS.get(self.kernel)


def _soft_max(a: float, b: float, p: float) -> float:
    hi = max(a, b)
    if hi <= 0:
        return 0.0
    return hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)


def _total(body: float, launch: float, floor: float, t_mem: float, t_cmp: float):
    """(seconds, bound) of a call whose work takes ``body`` after a ``launch`` cost."""
    if floor > launch + body:
        return floor, "launch"
    return launch + body, "memory" if t_mem >= t_cmp else "compute"


def _per_row_ratio(p: Problem) -> float:
    """FMAs per element of the streamed operands, the quantity the t2 threshold bounds.

    For R (k large) this is ~n; for L it is k*n/(k+n) (A and C rows both stream).
    """
    return p.k * p.n / (p.k + p.n) if p.k <= 4 * p.n else float(p.n)


def t2_threshold(device: Device, dtype: Any, cal: Calibration = CALIBRATION) -> float:
    """n at which a product that streams A once turns compute-bound at the peak FMA rate.

    ``peak FMA/s * itemsize / BW``: f32 on an H100 about 44; f64 (half the
    FMA rate, twice the bytes) the same 44; bf16 (f32 FMAs on 2-byte elements)
    about 22.
    """
    name = _dtype_name(dtype)
    return device.peak_fma_per_s(_acc(name)) * _itemsize(name) / device.bandwidth(cal)


def _occupancy(dev: Device, threads: int, smem: int, regs: int, min_blocks: int) -> Occupancy:
    regs = min(255, max(regs, 24))
    regs_alloc = -(-regs // 8) * 8
    by = {
        "threads": dev.max_threads_per_sm // threads,
        "blocks": dev.max_blocks_per_sm,
        "shared memory": dev.smem_per_sm // (smem + dev.smem_reserved_per_block),
        "registers": max(min_blocks, dev.regs_per_sm // (regs_alloc * threads)),
    }
    limiter = min(by, key=lambda k: by[k])
    blocks = max(1, by[limiter])
    return Occupancy(blocks, blocks * threads // 32, limiter, regs)


def _tsm2_tile_prediction(
    p: Problem, dtype: str, layout: str, kernel: str, dev: Device, cal: Calibration
) -> Prediction:
    isz = _itemsize(dtype)
    acc = _acc(dtype)
    acc_b = 8 if acc == "f64" else 4
    t = _tsm2_ext.tile_config(dtype, KERNEL_IDS[kernel], p.k, p.n)
    nt, rows, rpt, kg = t["n_tile"], t["rows"], t["rows_per_thread"], t["k_groups"]
    batch = p.batch or 1
    n_tiles = -(-p.n // nt)
    row_tiles = -(-p.m // rows)
    chunks = -(-p.k // t["chunk_k"])
    units = batch * n_tiles * row_tiles * chunks
    # Registers: accumulators and one B row per thread, A vectors, ~40 for
    # addresses and loop state; __launch_bounds__ caps them at min_blocks.
    regs = 40 + (rpt * nt + nt) * (acc_b // 4) + rpt * 4
    if t["min_blocks"] > 1:
        regs = min(regs, dev.regs_per_sm // (t["threads"] * t["min_blocks"]))
    occ = _occupancy(dev, t["threads"], t["smem_bytes"], regs, t["min_blocks"])
    blocks = min(units, occ.blocks_per_sm * dev.sm_count)
    if chunks > 1:
        blocks = min(blocks, 4 * dev.sm_count)  # the workspace is sized for 4 blocks per SM
    active_sms = min(dev.sm_count, blocks)
    blocks_per_active_sm = max(1, blocks // max(active_sms, 1))
    warps = min(occ.warps_per_sm, blocks_per_active_sm * t["threads"] // 32)

    # DRAM bytes: A once per n-tile (once if it fits in half of L2), B once,
    # C once, and the partial sums of split tiles (written and read).
    a_bytes = batch * p.m * p.k * isz
    a_reads = n_tiles if a_bytes > dev.l2_bytes // 2 else 1
    b_bytes = (p.batch or 1) * p.k * p.n * isz
    c_bytes = batch * p.m * p.n * isz
    split = chunks > 1 and blocks > 1
    ws_bytes = 2 * blocks * 2 * rows * nt * acc_b if split else 0
    dram = a_bytes * a_reads + b_bytes + c_bytes + ws_bytes

    bw = dev.bandwidth(cal)
    a_stage_data = rows * min(p.k, t["chunk_k"]) * isz  # padding is not fetched
    inflight = active_sms * blocks_per_active_sm * (t["stages"] - 1) * a_stage_data
    need = bw * cal.latency_s * active_sms / dev.sm_count
    stream = cal.eta_stream * min(1.0, inflight / need) ** cal.inflight_exponent
    stream *= active_sms / dev.sm_count
    t_mem = dram / (bw * stream)

    fma_lanes = dev.fma_lanes(acc)
    smem_bound = cal.smem_bytes_per_clk * rpt / acc_b
    kind = "L" if kg == 1 else "R"
    dclass = "half" if isz == 2 else acc
    rate = (
        min(fma_lanes, smem_bound)
        * min(1.0, warps / cal.warps_to_hide)
        * cal.eta(f"{dclass}/{kind}")
    )
    k_pad = chunks * t["chunk_k"]
    fmas = batch * n_tiles * nt * row_tiles * rows * k_pad
    tiles = batch * n_tiles * row_tiles
    epi_cpb = cal.epilogue_cycles_per_byte[0 if kg > 1 else 1]
    epi_cycles = tiles * kg * rows * nt * acc_b * epi_cpb / cal.smem_bytes_per_clk
    t_cmp = (fmas / rate + epi_cycles) / (active_sms * dev.clock_hz)

    body = _soft_max(t_mem, t_cmp, cal.P)
    launch = cal.t_launch + (cal.fixup_s if split else 0.0)
    seconds, bound = _total(body, launch, cal.t_floor, t_mem, t_cmp)

    t2 = t2_threshold(dev, dtype, cal)
    # Streamed elements per second at full stream, times FMAs per element the
    # tile sustains: the n at which this tile's compute equals its stream.
    elems_per_s = bw * cal.eta_stream / isz
    tile_t2 = rate * dev.sm_count * dev.clock_hz / elems_per_s
    params = {
        "tile": "L" if t["l_tile"] else "R",
        "t1 (chunk_k)": t["chunk_k"],
        "t2 (n_tile)": nt,
        "t3 (vec_per_thr)": t["vec_per_thr"],
        "rows": rows,
        "rows_per_thread": rpt,
        "k_groups": kg,
        "stages": t["stages"],
        "threads": t["threads"],
        "smem_bytes": t["smem_bytes"],
        "blocks": blocks,
        "units": units,
        "split_tiles": split,
        "inflight_bytes_per_sm": inflight // max(active_sms, 1),
        "fma_per_clk_per_sm": round(rate, 1),
    }
    ratio = _per_row_ratio(p)
    what = f"n = {p.n}" if p.k > 4 * p.n else f"k*n/(k+n) = {ratio:.3g}"
    if ratio < t2:
        reason = f"memory-bound: {what} below the t2 threshold of {t2:.0f} on this GPU"
        if bound == "compute":
            reason = (
                f"compute-bound in this tile: {what} is below the t2 threshold of {t2:.0f} "
                f"at peak FMA rate, but the tile sustains {rate:.0f} FMA/clk/SM "
                f"(threshold {tile_t2:.0f})"
            )
    else:
        reason = f"compute-bound: {what} at or above the t2 threshold of {t2:.0f} on this GPU"
    if bound == "launch":
        reason = (
            f"launch-bound: {dram / 1e6:.3g} MB moves in {body * 1e6:.3g} us, under the "
            f"{cal.t_floor * 1e6:.3g} us per-call floor (the work alone: {reason})"
        )
    return Prediction(
        kernel,
        dtype,
        layout,
        p,
        seconds,
        dram,
        bound,
        t_mem,
        t_cmp,
        seconds - body,
        occ,
        params,
        t2,
        tile_t2,
        reason,
    )


def _split_prediction(
    p: Problem, dtype: str, layout: str, kernel: str, dev: Device, cal: Calibration
) -> Prediction:
    """S and T: not yet measured; a stream at eta_stream plus a compute bound (see docs)."""
    isz = _itemsize(dtype)
    acc = _acc(dtype)
    acc_b = 8 if acc == "f64" else 4
    batch = p.batch or 1
    # T contracts over its operands' long dimension (stored k x m and k x n).
    plan = _tsm2_ext.split_plan(dtype, KERNEL_IDS[kernel], batch, p.m, p.k, p.n, dev.sm_count)
    a_bytes = batch * p.m * p.k * isz
    b_bytes = (p.batch or 1) * p.k * p.n * isz
    c_bytes = batch * p.m * p.n * isz
    ws = 2 * plan["workspace_bytes"]
    if kernel == "tsm2s":  # every n-tile block reads A (small) from L2, B from DRAM
        dram = a_bytes + b_bytes + c_bytes + ws
    else:  # every (m, n) tile reads its columns of A and B
        dram = a_bytes * plan["tiles_n"] + b_bytes * plan["tiles_m"] + c_bytes + ws
    threads = plan["threads"]
    occ = _occupancy(dev, threads, 2 * 16 * 1024, 64, 1)
    blocks = plan["blocks"]
    active = min(dev.sm_count, blocks)
    bw = dev.bandwidth(cal)
    t_mem = dram / (bw * cal.eta_stream * active / dev.sm_count)
    fma_lanes = dev.fma_lanes(acc)
    if kernel == "tsm2t":  # 4x4 register blocks: 2 non-broadcast 16-byte reads per 16 FMAs
        rate = min(fma_lanes, cal.smem_bytes_per_clk * 16 / (2 * 4 * acc_b))
    else:  # S: m accumulators per B vector, A broadcast from shared memory
        rate = min(fma_lanes, cal.smem_bytes_per_clk * 4 / acc_b)
    fmas = batch * p.m * p.k * p.n
    t_cmp = fmas / (rate * active * dev.clock_hz)
    body = _soft_max(t_mem, t_cmp, cal.P)
    launch = cal.t_launch + (cal.fixup_s if plan["splits"] > 1 else 0.0)
    seconds, bound = _total(body, launch, cal.t_floor, t_mem, t_cmp)
    t2 = t2_threshold(dev, dtype, cal)
    params = dict(plan)
    params["fma_per_clk_per_sm"] = round(rate, 1)
    return Prediction(
        kernel,
        dtype,
        layout,
        p,
        seconds,
        dram,
        bound,
        t_mem,
        t_cmp,
        seconds - body,
        occ,
        params,
        t2,
        None,
        f"{bound}-bound ({kernel} split plan: {plan['splits']} splits of "
        f"{plan['split_len']}; modelled, not yet measured)",
    )


def _xla_prediction(
    p: Problem, dtype: str, layout: str, dev: Device, cal: Calibration, precision: str
):
    isz = _itemsize(dtype)
    batch = p.batch or 1
    dram = (batch * p.m * p.k + (p.batch or 1) * p.k * p.n + batch * p.m * p.n) * isz
    small_half = isz == 2 and p.k <= 8 and p.n <= 8
    eff = XLA_SMALL_HALF_EFFICIENCY if small_half else XLA_STREAM_EFFICIENCY
    bw = dev.bandwidth(cal)
    t_mem = dram / (bw * eff)
    key = "f16" if isz == 2 else _acc(dtype)
    if key == "f32" and precision == "default":
        key = "tf32"
    flops_per_s = _arch_entry(DOT_FLOPS_PER_CLK, dev.cc)[key] * dev.sm_count * dev.clock_hz
    t_cmp = 2.0 * batch * p.m * p.k * p.n / (flops_per_s * XLA_DOT_EFFICIENCY)
    body = max(t_mem, t_cmp)
    seconds, bound = _total(body, cal.xla_t_launch, cal.xla_t_floor, t_mem, t_cmp)
    why = (
        f"XLA's dot modelled as a stream at {eff:.0%} of the read ceiling"
        + (" (bf16/f16 with k, n <= 8, as measured)" if small_half else "")
        + (f"; compute-bound at {XLA_DOT_EFFICIENCY:.0%} of the dot peak" if t_cmp > t_mem else "")
    )
    return Prediction(
        "xla",
        dtype,
        layout,
        p,
        seconds,
        dram,
        bound,
        t_mem,
        t_cmp,
        seconds - body,
        None,
        {"stream_efficiency": eff, "precision": precision},
        t2_threshold(dev, dtype, cal),
        None,
        why,
    )


def _unsupported(p, dtype, layout, kernel, dev, cal, why) -> Prediction:
    return Prediction(
        kernel,
        dtype,
        layout,
        p,
        math.inf,
        0,
        "unsupported",
        math.inf,
        math.inf,
        0.0,
        None,
        {},
        t2_threshold(dev, dtype, cal),
        None,
        why,
        supported=False,
    )


def predict(
    problem_or_shapes: Any,
    dtype: Any,
    layout: str = "nn",
    kernel: str | int = "tsm2r",
    device: Device | str | None = None,
    calibration: Calibration = CALIBRATION,
    xla_precision: str = "default",
) -> Prediction:
    """The model's prediction for one kernel ("tsm2r", "tsm2l", "tsm2s", "tsm2t", an FFI
    kernel id, or "xla") on one problem (see ``problem_from``).

    A kernel that cannot run the problem (wrong layout, m too large for S, an
    unsupported dtype) gets ``supported=False`` and an infinite time, with the
    reason. ``xla_precision`` ("default": f32 may use TF32, or "highest")
    matters only for XLA's dot.

    Example:
        >>> p = predict((10**7, 8, 8), "bfloat16", "nn", "tsm2l", device=H100_SXM)  # 0.129 measured
        >>> p.params["tile"], p.params["t2 (n_tile)"], round(p.seconds * 1e3, 3)
        ('L', 8, 0.125)
    """
    dev = resolve_device(device)
    p = problem_from(problem_or_shapes, layout)
    name = _dtype_name(dtype)
    kern = KERNEL_NAMES.get(kernel, kernel) if isinstance(kernel, int) else kernel
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if kern == "xla":
        return _xla_prediction(p, name, layout, dev, calibration, xla_precision)
    if kern not in KERNEL_IDS:
        raise ValueError(f"unknown kernel {kernel!r}; one of {sorted(KERNEL_IDS)} or 'xla'")
    if name not in ("float32", "float64", "bfloat16", "float16"):
        return _unsupported(p, name, layout, kern, dev, calibration, f"dtype {name}")
    if kern not in KERNELS_FOR_LAYOUT[layout]:
        return _unsupported(
            p, name, layout, kern, dev, calibration, f"{kern} does not take layout {layout}"
        )
    if p.empty:
        return _unsupported(p, name, layout, kern, dev, calibration, "empty problem")
    if kern == "tsm2s" and p.m > S_MAX_M:
        return _unsupported(
            p, name, layout, kern, dev, calibration, f"tsm2s takes m <= {S_MAX_M}, got {p.m}"
        )
    if kern in ("tsm2s", "tsm2t"):
        return _split_prediction(p, name, layout, kern, dev, calibration)
    return _tsm2_tile_prediction(p, name, layout, kern, dev, calibration)


# A kernel is chosen over XLA's dot only when predicted faster by this margin:
# the model's errors (benchmarks/model_check.py) are mostly within it, and a
# close call costs little either way.
ROUTE_MARGIN = 0.10


@dataclasses.dataclass(frozen=True)
class Choice:
    """``choose``'s answer: the best kernel, XLA's dot, and which one to run."""

    target: str  # a kernel name or "xla"
    best: Prediction | None  # the fastest supported kernel
    xla: Prediction
    candidates: tuple[Prediction, ...]
    reason: str

    @property
    def chosen(self) -> Prediction:
        return self.xla if self.target == "xla" or self.best is None else self.best


def choose(
    problem_or_shapes: Any,
    dtype: Any,
    layout: str = "nn",
    device: Device | str | None = None,
    kernels: Sequence[str] | None = None,
    margin: float = ROUTE_MARGIN,
    calibration: Calibration = CALIBRATION,
    xla_precision: str = "default",
) -> Choice:
    """Predicts every kernel that takes ``layout`` (or ``kernels``) and XLA's dot; picks.

    Example:
        >>> c = choose((10**7, 8, 8), "bfloat16", device=H100_SXM)
        >>> c.target, c.best.kernel
        ('tsm2l', 'tsm2l')
        >>> choose((20480, 20480, 64), "float32", device=H100_SXM).target
        'xla'
    """
    dev = resolve_device(device)
    p = problem_from(problem_or_shapes, layout)
    names = tuple(kernels) if kernels is not None else KERNELS_FOR_LAYOUT.get(layout, ())
    preds = tuple(predict(p, dtype, layout, k, dev, calibration) for k in names)
    ok = [q for q in preds if q.supported]
    best = min(ok, key=lambda q: q.seconds) if ok else None
    xla = predict(p, dtype, layout, "xla", dev, calibration, xla_precision)
    if best is None:
        return Choice("xla", None, xla, preds, "no kernel takes this problem")
    us = lambda q: f"{q.seconds * 1e6:.1f} us"
    if best.seconds * (1.0 + margin) < xla.seconds:
        why = (
            f"{best.kernel} predicted {us(best)} against XLA's {us(xla)} "
            f"({xla.seconds / best.seconds:.2f}x); {best.reason}"
        )
        return Choice(best.kernel, best, xla, preds, why)
    why = (
        f"XLA's dot predicted {us(xla)} against {best.kernel}'s {us(best)}"
        + (f" (within the {margin:.0%} margin)" if best.seconds < xla.seconds else "")
        + f"; {best.reason}"
    )
    return Choice("xla", best, xla, preds, why)
