"""TSM2S and TSM2T: the split-contraction kernels (``ffi/matmul/split_plan.h``).

Both cut a long contraction into splits, one output tile per block, and add
the splits' partial sums in a second launch. bf16/f16/f32 TSM2S whose
64-column tiles, 2 blocks each, fit in one wave runs over thread-block clusters instead
(the blocks of a cluster split the contraction), modelled as a stream of B
plus each tile's read of A from L2; bf16/f16 TSM2S too wide for that wave takes
128-column tiles fed by tensor-map copies, modelled the same way with its own
constants. The plan (tiles, splits,
blocks, workspace) comes from the extension (``_tsm2_ext.split_plan``), the
same code the launcher runs. Each kernel streams at a measured fraction of
the read ceiling and computes at a measured fraction of the FMA lanes
(``Calibration.split_eta``), and the two join in the soft maximum the row
tiles use (``tiles.py``)::

    t_mem = bytes / (BW * eta_stream * SMs_active / SMs)
    t_cmp = FMAs / (eta_fma * fma_lanes * SMs_active * clock)
    t     = max(t_floor, t_launch (+ fixup) + (t_mem**P + t_cmp**P) ** (1 / P))

Example:
    >>> from jax_tsm2.model.device import H100_SXM
    >>> from jax_tsm2.model.calibration import CALIBRATION
    >>> from jax_tsm2.problem import Problem
    >>> p = split_prediction(Problem(None, 8, 4096, 4096), "float64", "nn", "tsm2s",
    ...                      H100_SXM, CALIBRATION)
    >>> p.params["splits"] > 1, p.params["cluster"], p.bound
    (True, False, 'memory')
    >>> q = split_prediction(Problem(None, 8, 4096, 4096), "float32", "nn", "tsm2s",
    ...                      H100_SXM, CALIBRATION)
    >>> q.params["cluster"], q.params["splits"]
    (True, 1)
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
    soft_max,
    t2_threshold,
    total,
)
from jax_tsm2.problem import Problem


def split_prediction(
    p: Problem, dtype: str, layout: str, kernel: str, dev: Device, cal: Calibration
) -> Prediction:
    """The prediction for TSM2S or TSM2T (``kernel``) on a supported problem."""
    isz = itemsize(dtype)
    acc = acc_of(dtype)
    batch = p.batch or 1
    # T contracts over its operands' long dimension (stored k x m and k x n).
    cc, smem = 10 * dev.cc[0] + dev.cc[1], dev.smem_per_block_optin
    plan = _tsm2_ext.split_plan(
        dtype, KERNEL_IDS[kernel], batch, p.m, p.k, p.n, dev.sm_count, cc=cc, smem_optin=smem
    )
    a_bytes = batch * p.m * p.k * isz
    b_bytes = (p.batch or 1) * p.k * p.n * isz
    c_bytes = batch * p.m * p.n * isz
    ws = 2 * plan["workspace_bytes"]
    if kernel == "tsm2s":  # every n-tile block reads A (small) from L2, B from DRAM
        dram = a_bytes + b_bytes + c_bytes + ws
    else:  # every (m, n) tile reads its columns of A and B
        dram = a_bytes * plan["tiles_n"] + b_bytes * plan["tiles_m"] + c_bytes + ws
    blocks = plan["blocks"]
    active = min(dev.sm_count, blocks)
    bw = dev.bandwidth(cal)
    eta_stream, eta_fma = cal.split_eta(kernel)
    if plan.get("tma") or plan.get("cluster"):
        # The S kernels that stream B at their own efficiency, plus each
        # column tile's read of A from L2 at a fraction of a DRAM byte; their
        # tensor cores (bf16/f16) and CUDA cores (f32, at most 16 FMAs per
        # element of B) have time to spare. By tensor-map copies
        # (small_left_tma.cuh) one block takes a tile; over clusters
        # (small_left_cluster.cuh) a cluster does.
        tiles = f"tsm2s in {plan['tiles_n']} tiles of {plan['tile_n']} columns"
        if plan.get("tma"):
            eta, l2_weight = cal.tma_eta_stream, cal.tma_l2_weight
            how = f"{tiles} by tensor-map copies on tensor cores, one block per tile"
        else:
            eta, l2_weight = cal.cluster_eta_stream, cal.cluster_l2_weight
            how = (
                f"{tiles} over clusters of {plan['cluster_blocks']} "
                f"on {'tensor' if plan.get('mma') else 'CUDA'} cores, "
                f"{plan['splits']} split{'s' if plan['splits'] != 1 else ''}"
            )
        t_mem = (dram + plan["tiles_n"] * a_bytes * l2_weight) / (bw * eta)
        how += (
            f"; B streamed at {eta:.2f}x the modelled read rate (the launch overlaps the "
            f"previous kernel), A read {plan['tiles_n']} times from L2"
        )
        return _finish(
            p, dtype, layout, kernel, plan, dram, (t_mem, 0.0), None, True, how, dev, cal
        )
    t_mem = dram / (bw * eta_stream * active / dev.sm_count)
    # Element-by-element copies where operand rows are not whole 16-byte
    # vectors (launch_split.cuh vec_ok), on T's CUDA-core tiles: f32/f64
    # elements, and bf16/f16 ones in pairs where the operand has an even number
    # of columns, through cp.async (tn.cuh LoadTSlice), at a rate in bytes of
    # the elements it reads; other bf16/f16 elements at a rate in elements of
    # its padded tiles' rows. T's f32/f64 tensor-core tiles stage such rows as
    # the vectors that cover them (tn.cuh LoadTCover) and read them in place,
    # S copies any rows of an aligned B (every XLA buffer) in 16-byte windows
    # (small_left.cuh), and flat stages (split_plan.h TUsesFlat) copy whole
    # vectors: those always stream. The bf16/f16 tensor-core tiles stage
    # covering vectors too but gather their fragments from them two bytes at a
    # time; they are still charged as the CUDA-core tiles' copies, which prices
    # them at about twice what they run (docs/routing.md, "The calibrated
    # model's error", says why neither the byte rate nor a term for the gathers
    # replaced it).
    kv = 16 // isz
    aligned = all(v % kv == 0 for v in (p.m, p.n, plan["tile_m"], plan["tile_n"]))
    covered = plan.get("mma", False) and isz >= 4
    vec = kernel == "tsm2s" or plan.get("flat", False) or covered or aligned
    if not vec:
        tiles = plan["tiles_m"] * plan["tiles_n"]
        copied, elems = 0, 0  # bytes through cp.async, elements through registers
        for cols, reads, width in (
            (p.m, plan["tiles_n"], plan["tile_m"]),
            (p.n, plan["tiles_m"], plan["tile_n"]),
        ):
            # Half pairs: at the byte rate on tensor-core tiles (kernel lab:
            # 148 x 194 at -2%, 30 x 20 +25%) and for operands of 32 columns or
            # more; at half of it for narrower ones on CUDA-core tiles (lab 6 x 10,
            # grid seed 4 18 x 2; seed 4's 224 x 2 ran at the byte rate).
            if isz >= 4 or cols % 2 == 0:
                slow = 2 if isz == 2 and not plan.get("mma") and cols < 32 else 1
                copied += batch * p.k * reads * cols * isz * slow
            else:
                elems += batch * p.k * tiles * width
        cycles = copied / cal.t_async_bytes_per_clk + elems / cal.scalar_rate(kernel)
        t_mem = max(t_mem, cycles / (active * dev.clock_hz))
    # TSM2T's tensor-core tiles (split_plan.h TUsesMma) are charged a multiple
    # of the FMA pipes' rate at the same efficiency: twice for FP64 MMAs
    # (kernel lab: 64 x 64 f64 at 408 us, predicted 400) and the 3xTF32 f32
    # tiles (kernel lab: 64 x 64 at 206 us, 16 x 256 at 390; predicted 203 and
    # 379); three times for bf16/f16 m16n8k16 tiles, one MMA per product
    # (kernel lab, bf16 1e6 rows: 512 x 8 at 374 us, 64 x 64 at 116, 16 x 256
    # at 215; predicted 361, 121, 197).
    # TSM2S on tensor cores (m >= 8 bf16/f16, small_left_mma.cuh) pays for A's
    # rows padded to 16 at the same three times (kernel lab, bf16: 8 x 8192 x
    # 14336 at 133 us, 16 x 4096 x 4096 at 23; predicted 127 and 22).
    mma = (3 if isz == 2 else 2) if plan.get("mma") else 1
    rate = eta_fma * dev.fma_lanes(acc) * mma
    rows = 16 if kernel == "tsm2s" and plan.get("mma") else p.m
    fmas = batch * rows * p.k * p.n
    t_cmp = fmas / (rate * active * dev.clock_hz)
    how = (
        f"{kernel}{' on tensor cores' if plan.get('mma') else ''}: {plan['splits']} splits of "
        f"{plan['split_len']}, streaming at "
        f"{eta_stream:.0%} of the read ceiling, {rate:.0f} FMA/clk/SM"
        + ("; rows staged flat, in 16-byte vectors" if plan.get("flat") else "")
        + (
            "; rows not 16-byte vectors: staged as the vectors that cover them"
            if covered and not aligned
            else ""
        )
        + ("" if vec else "; rows not 16-byte vectors: copied element by element")
    )
    return _finish(p, dtype, layout, kernel, plan, dram, (t_mem, t_cmp), rate, vec, how, dev, cal)


def _finish(
    p: Problem,
    dtype: str,
    layout: str,
    kernel: str,
    plan: dict,
    dram: float,
    times: tuple[float, float],
    rate: float | None,
    vec: bool,
    how: str,
    dev: Device,
    cal: Calibration,
) -> Prediction:
    """The prediction from ``times`` (t_mem, t_cmp): their soft maximum plus the launch
    (and the split sums' second launch), floored."""
    t_mem, t_cmp = times
    body = soft_max(t_mem, t_cmp, cal.P)
    launch = cal.t_launch + (cal.fixup_s if plan["splits"] > 1 else 0.0)
    seconds, bound = total(body, launch, cal.t_floor, t_mem, t_cmp)
    params = dict(plan)
    if rate is not None:
        params["fma_per_clk_per_sm"] = round(rate, 1)
    params["vec_ok"] = vec
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
        occupancy=None,  # not modelled: the time depends on the measured efficiencies
        params=params,
        t2_threshold=t2_threshold(dev, dtype, cal),
        tile_threshold=None,
        reason=f"{bound}-bound ({how})",
    )
