"""What the model answers (``Prediction``) and the pieces every kernel's estimate shares.

Holds the kernel and layout tables (``ffi/matmul/kinds.h``, through the extension), ``problem_from``
(a problem from sizes or operand shapes), the occupancy calculation, the
t2 threshold, and the way a body time, a launch cost and a per-call floor
combine into one predicted time.

Example:
    >>> from jax_tsm2.model.prediction import problem_from
    >>> problem_from(((8, 100), (8, 4)), "tn")
    Problem(batch=None, m=100, k=8, n=4)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from jax_tsm2 import _ffi
from jax_tsm2.model.calibration import CALIBRATION, Calibration
from jax_tsm2.model.device import Device
from jax_tsm2.problem import Problem

# The kernel and layout tables as the extension defines them (ffi/matmul/kinds.h).
KERNEL_IDS: dict[str, int] = _ffi.KERNEL_IDS
KERNEL_NAMES: dict[int, str] = {v: k for k, v in KERNEL_IDS.items()}
LAYOUTS: tuple[str, ...] = tuple(_ffi.LAYOUT_IDS)
# Which kernels take which layout, in kernel-id order.
KERNELS_FOR_LAYOUT: dict[str, tuple[str, ...]] = {
    layout: tuple(
        k
        for k in sorted(KERNEL_IDS, key=KERNEL_IDS.__getitem__)
        if layout in _ffi.KERNEL_LAYOUTS[k]
    )
    for layout in LAYOUTS
}
S_MAX_M = _ffi.S_MAX_M  # ffi/matmul/split_plan.h kSMaxM


def itemsize(dtype: Any) -> int:
    return np.dtype(dtype).itemsize


def dtype_name(dtype: Any) -> str:
    from jax import numpy as jnp  # bfloat16 as a numpy dtype

    return jnp.dtype(dtype).name


def acc_of(dtype_name: str) -> str:
    """The accumulator class of a dtype: "f64" for float64, else "f32"."""
    return "f64" if dtype_name == "float64" else "f32"


def problem_from(problem_or_shapes: Any, layout: str = "nn") -> Problem:
    """The canonical sizes of a product.

    Accepts a ``Problem``, ``(m, k, n)``, ``(batch, m, k, n)``, or a
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


def soft_max(a: float, b: float, p: float) -> float:
    """``(a**p + b**p) ** (1/p)``: the larger of two times, plus their partial overlap."""
    hi = max(a, b)
    if hi <= 0:
        return 0.0
    return hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)


def total(body: float, launch: float, floor: float, t_mem: float, t_cmp: float):
    """(seconds, bound) of a call whose work takes ``body`` after a ``launch`` cost."""
    if floor > launch + body:
        return floor, "launch"
    return launch + body, "memory" if t_mem >= t_cmp else "compute"


def per_row_ratio(p: Problem) -> float:
    """FMAs per element of the streamed operands, the quantity the t2 threshold bounds.

    For R (k large) this is ~n; for L it is k*n/(k+n) (A and C rows both stream).
    """
    return p.k * p.n / (p.k + p.n) if p.k <= 4 * p.n else float(p.n)


def t2_threshold(device: Device, dtype: Any, cal: Calibration = CALIBRATION) -> float:
    """n at which a product that streams A once turns compute-bound at the peak FMA rate.

    ``peak FMA/s * itemsize / BW``: f32 on an H100 about 44; f64 (half the
    FMA rate, twice the bytes) the same 44; bf16 (f32 FMAs on 2-byte elements)
    about 22.

    Example:
        >>> from jax_tsm2.model.device import H100_SXM
        >>> round(t2_threshold(H100_SXM, "float32")), round(t2_threshold(H100_SXM, "bfloat16"))
        (44, 22)
    """
    name = dtype_name(dtype)
    return device.peak_fma_per_s(acc_of(name)) * itemsize(name) / device.bandwidth(cal)


def occupancy(dev: Device, threads: int, smem: int, regs: int, min_blocks: int) -> Occupancy:
    """Blocks per SM from threads, shared memory and registers, as the CUDA occupancy API."""
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


def unsupported(
    p: Problem, dtype: str, layout: str, kernel: str, dev: Device, cal: Calibration, why: str
) -> Prediction:
    """The answer for a kernel that cannot run ``p``: infinite time, and why."""
    return Prediction(
        kernel=kernel,
        dtype=dtype,
        layout=layout,
        problem=p,
        seconds=math.inf,
        bytes=0,
        bound="unsupported",
        t_mem=math.inf,
        t_cmp=math.inf,
        t_overhead=0.0,
        occupancy=None,
        params={},
        t2_threshold=t2_threshold(dev, dtype, cal),
        tile_threshold=None,
        reason=why,
        supported=False,
    )
