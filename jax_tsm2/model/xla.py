"""XLA's dot, the alternative every kernel is weighed against.

Example:
    >>> from jax_tsm2.model.device import H100_SXM
    >>> from jax_tsm2.model.calibration import CALIBRATION
    >>> from jax_tsm2.problem import Problem
    >>> q = xla_prediction(Problem(None, 20480, 20480, 8), "float32", "nn", H100_SXM,
    ...                    CALIBRATION, "default")
    >>> q.kernel, q.bound
    ('xla', 'memory')
"""

from __future__ import annotations

from jax_tsm2.model.calibration import (
    XLA_DOT_EFFICIENCY,
    XLA_SMALL_HALF_EFFICIENCY,
    XLA_STREAM_EFFICIENCY,
    Calibration,
)
from jax_tsm2.model.device import DOT_FLOPS_PER_CLK, Device, arch_entry
from jax_tsm2.model.prediction import Prediction, acc_of, itemsize, t2_threshold, total
from jax_tsm2.model.xla_plan import XlaPlan
from jax_tsm2.problem import Problem


def operand_passes(p: Problem, dtype: str, layout: str, cal: Calibration) -> tuple[float, str]:
    """How many times over XLA's dot (jax 0.11.2, H100) streams its operands, and why.

    Bimodal on the validation grid: about once (72-101% of the read ceiling) or
    about three times (25-31%), as if it made a transposed or padded copy.
    Once in nn and nt where ``k`` is a multiple of 64 (the suites' powers of
    two), where A is tall (``m >= xla_tall_ratio * k``, the L shapes), or where A's few rows
    are a multiple of 32 bytes in f64 and n >= k (S f64 with m = 4, 8: 87-95%;
    m = 2, 6: 26-30%; f32 m = 8, 16 and f64 with n < k ran slow);
    in tn only where one side of the result is a vector (m or n = 1: 91%);
    and for f64 wherever the product is a matrix-vector one (m or n = 1, k > 1:
    0.95-1.37 passes on the three such grid shapes above the launch floor,
    while f32, bf16 and f16 matrix-vector products in nn/nt mostly read three
    times over). In between (``xla_short_k_passes``): in nn with at most 4
    rows and a short contraction (``k <= xla_short_k``), and f64 in nn and nt
    wherever ``k <= xla_f64_short_k`` and the result's long side is 1.5 k or more;
    ``xla_wide_passes`` in nn where ``n >= xla_wide_ratio * k``; in tn, more
    passes under ``xla_tn_big_bytes`` of operands.
    The features are what the grid separates, not XLA's rule, which we do not know.
    """
    isz = itemsize(dtype)
    gemv = min(p.m, p.n) == 1 and p.k > 1
    if layout == "tn":
        if min(p.m, p.n) == 1:
            return 1.0, ""
        # Below a few hundred MB the grids ran tn about a fifth slower than the
        # suites' large shapes (the 10-200 MB records at 1.1-1.4x of 3 passes).
        if (p.batch or 1) * (p.m + p.n) * p.k * isz >= cal.xla_tn_big_bytes:
            return cal.xla_tn_passes, "layout tn, as measured"
        mb = cal.xla_tn_big_bytes / 1e6
        return cal.xla_tn_mid_passes, f"layout tn under {mb:g} MB of operands, as measured"
    if isz == 8 and gemv:
        return 1.0, ""
    # f64 rows of whole 32-byte sectors read once only while the result is at
    # least as wide as the contraction (seed 4: S f64 4x17666x2853 at 3.9 passes).
    aligned = isz == 8 and p.m <= 16 and p.m * isz % 32 == 0 and p.n >= p.k
    if p.k % 64 == 0 or p.m >= cal.xla_tall_ratio * p.k or aligned:
        return 1.0, ""
    short = layout == "nn" and p.m <= 4 and p.k <= cal.xla_short_k
    # The f64 short contraction holds where the result's long side is at least
    # 1.5 k (seeds 0-4: R f64 2748x2325x2 and NT 1521x2282x12 ran 3 passes).
    f64_short = isz == 8 and p.k <= cal.xla_f64_short_k and 2 * max(p.m, p.n) >= 3 * p.k
    if p.k > 1 and (short or f64_short):
        return cal.xla_short_k_passes, "a short contraction, as measured on the grid"
    if layout == "nn" and p.k > 1 and p.n >= cal.xla_wide_ratio * p.k:
        return cal.xla_wide_passes, f"n >= {cal.xla_wide_ratio:g}k, as measured on the grid"
    why = f"m < {cal.xla_tall_ratio:g}k, k not a multiple of 64: as measured on the grid"
    return cal.xla_slow_passes, why


def xla_prediction(
    p: Problem,
    dtype: str,
    layout: str,
    dev: Device,
    cal: Calibration,
    precision: str,
    plan: XlaPlan | None = None,
) -> Prediction:
    """XLA's dot on ``p``: a stream at a measured efficiency, or its dot peak if slower.

    With ``plan`` (``xla_plan.plan``: the product as XLA compiled it) the stream is the
    bytes its kernels access (with a cuBLAS call's own pass, which XLA's cost analysis
    leaves out) and each of its kernels costs a launch; without one, the operands are read
    as many times over as ``operand_passes`` says."""
    isz = itemsize(dtype)
    batch = p.batch or 1
    operands = (batch * p.m * p.k + (p.batch or 1) * p.k * p.n) * isz
    c_bytes = batch * p.m * p.n * isz
    if plan is not None:
        dram = plan.bytes
        # XLA's cost analysis counts a cuBLAS custom call's own operands and result as no
        # bytes: two copy fusions, cuBLAS and a slice report 2.0x the minimal bytes, where
        # the same plan on XLA's own GEMM fusion reports 3.0x. The call's pass over them is
        # added here (the minimal bytes: its padded operands are a few percent more).
        if plan.cublas and plan.bytes > 0:
            dram += operands + c_bytes
        dram = max(round(dram), operands + c_bytes)
        passes = (dram - c_bytes) / operands if operands else 1.0
        slow_why = f"as XLA compiled it: {plan.kernels} kernel(s), {', '.join(plan.ops)}"
    else:
        passes, slow_why = operand_passes(p, dtype, layout, cal)
        dram = round(operands * passes) + c_bytes
    small_half = isz == 2 and p.k <= 8 and p.n <= 8
    eff = XLA_SMALL_HALF_EFFICIENCY if small_half else XLA_STREAM_EFFICIENCY
    bw = dev.bandwidth(cal)
    t_mem = dram / (bw * eff)
    if isz == 2 and p.k == 1 and layout != "tn":
        t_mem = max(t_mem, c_bytes / (bw * cal.xla_half_outer_store))
    key = "f16" if isz == 2 else acc_of(dtype)
    if key == "f32" and precision == "default":
        key = "tf32"
    flops_per_s = arch_entry(DOT_FLOPS_PER_CLK, dev.cc)[key] * dev.sm_count * dev.clock_hz
    t_cmp = 2.0 * batch * p.m * p.k * p.n / (flops_per_s * XLA_DOT_EFFICIENCY)
    body = max(t_mem, t_cmp)
    launch = cal.xla_t_launch * (plan.kernels if plan is not None else 1)
    seconds, bound = total(body, launch, cal.xla_t_floor, t_mem, t_cmp)
    why = (
        f"XLA's dot modelled as a stream at {eff:.0%} of the read ceiling"
        + (" (bf16/f16 with k, n <= 8, as measured)" if small_half else "")
        + (
            f"; a 16-bit outer product, C stored at {cal.xla_half_outer_store:.0%} of it"
            if isz == 2 and p.k == 1 and layout != "tn"
            else ""
        )
        + (
            f", reading its operands {passes:.3g} times over ({slow_why})"
            if plan is not None or passes != 1
            else ""
        )
        + (f"; compute-bound at {XLA_DOT_EFFICIENCY:.0%} of the dot peak" if t_cmp > t_mem else "")
    )
    return Prediction(
        kernel="xla",
        dtype=dtype,
        layout=layout,
        problem=p,
        seconds=seconds,
        bytes=dram,
        bound=bound,
        t_mem=t_mem,
        t_cmp=t_cmp,
        t_overhead=seconds - body,
        occupancy=None,
        params={
            "stream_efficiency": eff,
            "operand_passes": passes,
            "precision": precision,
            "plan": plan is not None,
        },
        t2_threshold=t2_threshold(dev, dtype, cal),
        tile_threshold=None,
        reason=why,
    )
