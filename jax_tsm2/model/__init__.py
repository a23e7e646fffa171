"""The performance model: which kernel and tile a product should run, how long it should take, why.

This is the row-major counterpart of the paper's model (sections 3.1.8-3.1.9,
Algorithm 5). From a device description (``Device``: what the CUDA driver
reports, or a preset) and a problem (batch, m, k, n, dtype, layout) it
estimates, for each candidate kernel with the tile the launcher would run
(read from ``ffi/matmul/tiles.h`` through ``_tsm2_ext.tile_config``, never
re-derived here):

- occupancy: blocks per SM from threads, shared memory and registers, as
  ``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` would find them;
- bytes moved through DRAM and the bytes a ring keeps in flight per SM;
- the compute rate the tile can sustain, and so whether it is memory- or
  compute-bound (the paper's t2 threshold);
- a predicted time, and XLA's dot's predicted time beside it.

The equations for the row-tile kernels TSM2R and TSM2L (seconds; ``BW`` is
the device's streaming-read bandwidth)::

    t_mem  = bytes / (BW * eta_stream * min(1, inflight / (BW * latency)))
    t_cmp  = (FMAs_padded / (SMs_active * clock * rate) + epilogue cycles / clock)
    rate   = min(fma_lanes, smem_bytes_per_clk * rows_per_thread**0.5 / acc_bytes)
             * min(1, warps_per_SM / warps_to_hide_latency) * eta_tile
    t      = max(t_floor, t_launch + (t_mem**P + t_cmp**P) ** (1 / P))

``rate`` is FMAs per clock per SM. Each thread reads its B values from
shared memory as 16-byte broadcasts and feeds ``rows_per_thread`` rows' FMAs
with each, so a tile with one row per thread is bounded by the shared-memory
pipe (32 f32 FMA per clock per SM on an H100, measured 31-33) well below the
FMA pipe (128); register blocking raises the bound, by the square root of
the rows per thread as measured (``Calibration.rpt_exponent``). The soft
maximum with ``P`` = 4 models the partial overlap of streaming and computing
near the threshold.

The split kernels TSM2S and TSM2T (``split.py``) stream at a measured
fraction of the ceiling and compute at a measured fraction of the FMA lanes,
joined the same way. XLA's dot (``xla.py``) is a stream at a measured
fraction of the read ceiling (``XLA_STREAM_EFFICIENCY``) that, in layout tn,
reads its operands three times over (``Calibration.xla_tn_passes``), or the
dtype's dot peak when that is slower.

Only what the driver does not report is tabulated: FMA lanes per SM per
architecture (``FMA_LANES``) and dense dot throughput. The calibration
constants (``Calibration``) were fitted to the H100 runs in
``benchmarks/results/h100/calibration-r-l`` (R, L), ``calibration-layouts`` (S,
TN) and the validation grids, and are checked by ``benchmarks/model_check.py``,
which reports the
error per family and marks which figures are in-sample (NT and the gradient
benchmark were fitted to nothing: they test the model).

The package's files: ``device.py`` (the GPU, presets, the driver query),
``calibration.py`` (the fitted constants), ``prediction.py`` (``Prediction``,
problems, occupancy, the t2 threshold), ``tiles.py`` (TSM2R and TSM2L),
``split.py`` (TSM2S and TSM2T), ``xla.py`` (XLA's dot); this file puts them
together (``predict``, ``choose``).

Example:
    >>> from jax_tsm2 import model
    >>> p = model.predict((20480, 20480, 8), "float32", "nn", "tsm2r", device=model.H100_SXM)
    >>> p.bound, round(p.t2_threshold)
    ('memory', 44)
    >>> p.params["tile"], round(p.seconds * 1e3, 2)  # one product of width 8: the row stream
    ('row stream', 0.65)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from jax_tsm2.model.calibration import (
    CALIBRATION,
    XLA_DOT_EFFICIENCY,
    XLA_SMALL_HALF_EFFICIENCY,
    XLA_STREAM_EFFICIENCY,
    Calibration,
)
from jax_tsm2.model.device import (
    DOT_FLOPS_PER_CLK,
    FMA_LANES,
    H100_SXM,
    PRESETS,
    Device,
    current_device,
    device_from_driver,
    resolve_device,
)
from jax_tsm2.model.prediction import (
    KERNEL_IDS,
    KERNEL_NAMES,
    KERNELS_FOR_LAYOUT,
    LAYOUTS,
    S_MAX_M,
    Occupancy,
    Prediction,
    dtype_name,
    problem_from,
    t2_threshold,
    unsupported,
)
from jax_tsm2.model.split import split_prediction
from jax_tsm2.model.tiles import tile_prediction
from jax_tsm2.model.xla import xla_prediction
from jax_tsm2.model.xla_plan import XlaPlan
from jax_tsm2.problem import Problem

__all__ = [
    "CALIBRATION",
    "DOT_FLOPS_PER_CLK",
    "FMA_LANES",
    "H100_SXM",
    "KERNELS_FOR_LAYOUT",
    "KERNEL_IDS",
    "KERNEL_NAMES",
    "LAYOUTS",
    "PRESETS",
    "ROUTE_MARGIN",
    "S_MAX_M",
    "XLA_DOT_EFFICIENCY",
    "XLA_SMALL_HALF_EFFICIENCY",
    "XLA_STREAM_EFFICIENCY",
    "Calibration",
    "Choice",
    "Device",
    "Occupancy",
    "Prediction",
    "Problem",
    "XlaPlan",
    "choose",
    "current_device",
    "device_from_driver",
    "predict",
    "problem_from",
    "resolve_device",
    "t2_threshold",
]


def predict(
    problem_or_shapes: Any,
    dtype: Any,
    layout: str = "nn",
    kernel: str | int = "tsm2r",
    device: Device | str | None = None,
    calibration: Calibration = CALIBRATION,
    xla_precision: str = "default",
    xla_plan: XlaPlan | None = None,
) -> Prediction:
    """The model's prediction for one kernel ("tsm2r", "tsm2l", "tsm2s", "tsm2t", an FFI
    kernel id, or "xla") on one problem (see ``problem_from``).

    A kernel that cannot run the problem (wrong layout, m too large for S, an
    unsupported dtype) gets ``supported=False`` and an infinite time, with the
    reason. ``xla_precision`` ("default": f32 may use TF32, or "highest") and
    ``xla_plan`` (XLA's compiled program for the product, ``xla_plan.plan``)
    matter only for XLA's dot.

    Example:
        >>> p = predict((10**7, 8, 8), "bfloat16", "nn", "tsm2l", device=H100_SXM)  # lab: 0.116
        >>> p.params["tile"], p.params["t2 (n_tile)"], round(p.seconds * 1e3, 3)
        ('row', 8, 0.119)
    """
    dev = resolve_device(device)
    p = problem_from(problem_or_shapes, layout)
    name = dtype_name(dtype)
    kern = KERNEL_NAMES.get(kernel, kernel) if isinstance(kernel, int) else kernel
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if kern == "xla":
        return xla_prediction(p, name, layout, dev, calibration, xla_precision, xla_plan)
    if kern not in KERNEL_IDS:
        raise ValueError(f"unknown kernel {kernel!r}; one of {sorted(KERNEL_IDS)} or 'xla'")
    if name not in ("float32", "float64", "bfloat16", "float16"):
        return unsupported(p, name, layout, kern, dev, calibration, f"dtype {name}")
    if kern not in KERNELS_FOR_LAYOUT[layout]:
        return unsupported(
            p, name, layout, kern, dev, calibration, f"{kern} does not take layout {layout}"
        )
    if p.empty:
        return unsupported(p, name, layout, kern, dev, calibration, "empty problem")
    if kern == "tsm2s" and p.m > S_MAX_M:
        return unsupported(
            p, name, layout, kern, dev, calibration, f"tsm2s takes m <= {S_MAX_M}, got {p.m}"
        )
    if kern in ("tsm2s", "tsm2t"):
        return split_prediction(p, name, layout, kern, dev, calibration)
    return tile_prediction(p, name, layout, kern, dev, calibration)


# A kernel is chosen over XLA's dot only when predicted faster by a margin:
# per kernel, ``Calibration.route_margin`` (fitted on the validation grids by
# benchmarks/grid_fit.py); this one where a caller asks for a single margin.
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
    margin: float | None = None,
    calibration: Calibration = CALIBRATION,
    xla_precision: str = "default",
) -> Choice:
    """Predicts every kernel that takes ``layout`` (or ``kernels``) and XLA's dot; picks.

    The best kernel is the fastest predicted; of equal predictions (TSM2L on a
    long k runs TSM2R's tile, and launch-bound calls all cost the floor), the
    first in ``kernels``. It runs if predicted faster than XLA's dot by ``margin``
    (default: that kernel's ``calibration.margin``).

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
    if margin is None:
        margin = calibration.margin(best.kernel)
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
