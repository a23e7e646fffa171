"""TSM2S and TSM2T: the split-contraction kernels (``ffi/split_plans.h``).

Both cut a long contraction into splits, one output tile per block, and add
the splits' partial sums in a second launch. The plan (tiles, splits,
blocks, workspace) comes from the extension (``_tsm2_ext.split_plan``), the
same code the launcher runs.

Example:
    >>> from jax_tsm2.model.device import H100_SXM
    >>> from jax_tsm2.model.calibration import CALIBRATION
    >>> from jax_tsm2.problem import Problem
    >>> p = split_prediction(Problem(None, 8, 4096, 4096), "float32", "nn", "tsm2s",
    ...                      H100_SXM, CALIBRATION)
    >>> p.params["splits"] > 1, p.bound
    (True, 'memory')
"""

from __future__ import annotations

from jax_tsm2._ffi import _tsm2_ext
from jax_tsm2.model.calibration import Calibration
from jax_tsm2.model.device import Device
from jax_tsm2.model.prediction import (
    KERNEL_IDS,
    Prediction,
    acc_of,
    itemsize,
    occupancy,
    soft_max,
    t2_threshold,
    total,
)
from jax_tsm2.problem import Problem


def split_prediction(
    p: Problem, dtype: str, layout: str, kernel: str, dev: Device, cal: Calibration
) -> Prediction:
    """S and T: not yet measured; a stream at eta_stream plus a compute bound (see docs)."""
    isz = itemsize(dtype)
    acc = acc_of(dtype)
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
    occ = occupancy(dev, threads, 2 * 16 * 1024, 64, 1)
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
    body = soft_max(t_mem, t_cmp, cal.P)
    launch = cal.t_launch + (cal.fixup_s if plan["splits"] > 1 else 0.0)
    seconds, bound = total(body, launch, cal.t_floor, t_mem, t_cmp)
    t2 = t2_threshold(dev, dtype, cal)
    params = dict(plan)
    params["fma_per_clk_per_sm"] = round(rate, 1)
    return Prediction(
        kernel=kernel,
        dtype=dtype,
        layout=layout,
        problem=p,
        seconds=seconds,
        bytes=dram,
        bound=bound,
        t_mem=t_mem,
        t_cmp=t_cmp,
        t_overhead=seconds - body,
        occupancy=occ,
        params=params,
        t2_threshold=t2,
        tile_threshold=None,
        reason=f"{bound}-bound ({kernel} split plan: {plan['splits']} splits of "
        f"{plan['split_len']}; modelled, not yet measured)",
    )
