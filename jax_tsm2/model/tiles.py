"""TSM2R and TSM2L: the row-tile kernels, from the tile the launcher would run.

The tile (``ffi/matmul/tiles.h``, read through ``_tsm2_ext.tile_config``,
never re-derived here) gives threads, shared memory, rows per thread and the
ring depth; from those come occupancy, the bytes in flight per SM (and so
the stream efficiency), the FMA rate the tile can sustain, and a time::

    t_mem  = bytes / (BW * eta_stream * min(1, inflight / (BW * latency)) ** 0.5)
    t_cmp  = (FMAs_padded / rate + epilogue cycles) / (SMs_active * clock)
    rate   = min(fma_lanes, smem_bytes_per_clk * rows_per_thread / acc_bytes)
             * min(1, warps_per_SM / warps_to_hide) * eta_tile
    t      = max(t_floor, t_launch + (t_mem**P + t_cmp**P) ** (1 / P))

Example:
    >>> from jax_tsm2.model.device import H100_SXM
    >>> from jax_tsm2.model.calibration import CALIBRATION
    >>> from jax_tsm2.problem import Problem
    >>> p = tile_prediction(Problem(2, 20480, 20480, 8), "float32", "nn", "tsm2r",
    ...                     H100_SXM, CALIBRATION)
    >>> p.params["tile"], p.bound  # a batch of two: the row tile (one product: the row stream)
    ('R', 'memory')
"""

from __future__ import annotations

from jax_tsm2._ffi import _tsm2_ext
from jax_tsm2.model.calibration import Calibration
from jax_tsm2.model.device import DOT_FLOPS_PER_CLK, Device, arch_entry
from jax_tsm2.model.prediction import (
    KERNEL_IDS,
    Prediction,
    acc_of,
    itemsize,
    occupancy,
    per_row_ratio,
    soft_max,
    t2_threshold,
    total,
)
from jax_tsm2.model.row_stream import stream_prediction
from jax_tsm2.problem import Problem

#: Multiply-adds per clock of the tensor-core R tile (m16n8k16 bf16/f16 mma.sync
#: with f32 sums) over the SM's f32 FMA lanes: a low estimate of what the tile
#: sustains, so that it stays memory-bound in the model where it is on the GPU.
MMA_R_FACTOR = 4


def tile_prediction(
    p: Problem, dtype: str, layout: str, kernel: str, dev: Device, cal: Calibration
) -> Prediction:
    """The prediction for TSM2R or TSM2L (``kernel``) on a supported problem."""
    isz = itemsize(dtype)
    acc = acc_of(dtype)
    acc_b = 8 if acc == "f64" else 4
    t = _tsm2_ext.tile_config(dtype, KERNEL_IDS[kernel], p.k, p.n)
    # The launcher runs the row kernel when B is shared across the batch;
    # a Problem does not say, so a batched problem keeps the tile's prediction.
    if kernel == "tsm2l" and t.get("row_kernel") and p.batch is None:
        return _row_prediction(p, dtype, layout, dev, cal)
    # Rows of whole vectors with wide B run on tensor cores where the GPU has
    # mma.sync (kernels/tsm2l_mma.cuh); batched, only where B is shared.
    if kernel == "tsm2l" and t.get("l_mma") and p.batch is None and tuple(dev.cc) >= (8, 0):
        return _row_prediction(p, dtype, layout, dev, cal, mma=t)
    # One product in nn or nt of a width the row stream takes runs there
    # (plan.cuh PlanTile), unless its plan does not fit this GPU.
    if t.get("row_stream") and p.batch is None and layout in ("nn", "nt"):
        try:
            return stream_prediction(p, dtype, layout, dev, cal, t["row_stream"], kernel)
        except ValueError:
            pass
    # bf16/f16 R tiles past n = 4 run on tensor cores where the GPU has
    # mma.sync and room for two of their stages (kernels/tsm2_mma.cuh; the
    # plan falls back to the CUDA-core tile otherwise): a warp per 16 rows and
    # no k-groups. f32 past n = 8 runs there too (three TF32 products per
    # product; warpgroup MMAs on sm_90a) but is modelled as the CUDA-core
    # tile: on an H200 the tensor-core tile ran 1.1-3.7x faster than that tile
    # on every f32 shape timed (benchmarks/results/h200/stream_kernels_f32_r.json,
    # stream_kernels_r_wgmma.json), so the older prediction errs towards XLA's
    # dot on a GPU with no calibration. f64 past n = 8 on sm_90 (DMMA through
    # the tensor-map ring) is modelled so too: tile_config reports the tiles
    # of an sm_80 GPU, where f64 stays on the CUDA cores.
    mma = (
        bool(t.get("mma"))
        and isz == 2
        and tuple(dev.cc) >= (8, 0)
        and t["mma_tile"]["smem_bytes"] <= dev.smem_per_block_optin
    )
    if mma:
        t = {**t, **t["mma_tile"], "rows_per_thread": 16, "k_groups": 1, "stages": 2}
    nt, rows, rpt, kg = t["n_tile"], t["rows"], t["rows_per_thread"], t["k_groups"]
    batch = p.batch or 1
    n_tiles = -(-p.n // nt)
    row_tiles = -(-p.m // rows)
    chunks = -(-p.k // t["chunk_k"])
    units = batch * n_tiles * row_tiles * chunks
    # Registers: accumulators and one B row per thread, A vectors, ~40 for
    # addresses and loop state; __launch_bounds__ caps them at min_blocks.
    regs = 128 if mma else 40 + (rpt * nt + nt) * (acc_b // 4) + rpt * 4
    if t["min_blocks"] > 1:
        regs = min(regs, dev.regs_per_sm // (t["threads"] * t["min_blocks"]))
    occ = occupancy(dev, t["threads"], t["smem_bytes"], regs, t["min_blocks"])
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
    # The bytes in flight bound the reads (Little's law); the stores of C wait
    # for nothing and take the bus at their own rate. With C priced as a read,
    # L bf16 6367982 x 1 x 27 (1 KB of A in flight per SM, C 96% of the bytes)
    # was predicted at 1030 us; it ran 157 (H200, grid seed 7919). The stores'
    # time is added to the reads', not overlapped with it: overlapped, L
    # products whose C is a third of the bytes came out a third too fast.
    reads = dram - c_bytes
    share = active_sms / dev.sm_count
    t_mem = reads / (bw * stream) + c_bytes / (bw * cal.eta_store * share)
    # Rows of A that are not whole 16-byte vectors (launch_tiles.cuh a_vec_ok)
    # are copied element by element, at a rate in elements, not bytes.
    a_vec = p.k % (16 // isz) == 0
    if not a_vec:
        elems = batch * p.m * p.k * a_reads
        t_mem = max(t_mem, elems / (cal.scalar_rate("tile") * active_sms * dev.clock_hz))

    fma_lanes = dev.fma_lanes(acc)
    smem_bound = cal.smem_bytes_per_clk * rpt**cal.rpt_exponent / acc_b
    kind = "L" if t["l_tile"] else "R"
    dclass = "half" if isz == 2 else acc
    rate = (
        min(fma_lanes, smem_bound)
        * min(1.0, warps / cal.warps_to_hide)
        * cal.eta(f"{dclass}/{kind}")
    )
    if mma:
        rate = MMA_R_FACTOR * fma_lanes * min(1.0, warps / cal.warps_to_hide)
    k_pad = chunks * t["chunk_k"]
    # Threads whose rows all lie past m skip the FMAs: the last tile computes its rows
    # rounded up to whole threads (a thread holds rows_per_thread rows).
    last = p.m - (row_tiles - 1) * rows
    rows_done = (row_tiles - 1) * rows + rpt * min(rows // rpt, last)
    fmas = batch * n_tiles * nt * rows_done * k_pad
    tiles = batch * n_tiles * row_tiles
    epi_cpb = cal.epilogue_cycles_per_byte[0 if kg > 1 else 1]
    epi_cycles = tiles * kg * rows * nt * acc_b * epi_cpb / cal.smem_bytes_per_clk
    t_cmp = (fmas / rate + epi_cycles) / (active_sms * dev.clock_hz)

    body = soft_max(t_mem, t_cmp, cal.P)
    launch = cal.t_launch + (cal.fixup_s if split else 0.0)
    seconds, bound = total(body, launch, cal.t_floor, t_mem, t_cmp)

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
        "tensor_cores": mma,
        "a_vec_ok": a_vec,
    }
    ratio = per_row_ratio(p)
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
    if not a_vec:
        reason += f"; k = {p.k} rows are not 16-byte vectors: A is copied element by element"
    if bound == "launch":
        reason = (
            f"launch-bound: {dram / 1e6:.3g} MB moves in {body * 1e6:.3g} us, under the "
            f"{cal.t_floor * 1e6:.3g} us per-call floor (the work alone: {reason})"
        )
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
        tile_threshold=tile_t2,
        reason=reason,
    )


# What one product of TSM2L's tensor-core tile costs, by itemsize.
_L_MMA_PRODUCTS = {2: "one product", 4: "three TF32 products", 8: "one DMMA product"}


def _row_prediction(
    p: Problem,
    dtype: str,
    layout: str,
    dev: Device,
    cal: Calibration,
    mma: dict | None = None,
) -> Prediction:
    """A stream of A in and C out: TSM2L's row-per-thread kernel at ``row_eta_stream``,
    or with ``mma`` (``tile_config``'s entries of the tensor-core tile) that tile at
    ``lmma_eta_stream``, bound by its products where they outrun the stream."""
    isz = itemsize(dtype)
    dram = (p.m * p.k + p.k * p.n + p.m * p.n) * isz
    bw = dev.bandwidth(cal)
    t_mem = dram / (bw * (cal.lmma_eta_stream if mma else cal.row_eta_stream))
    t_cmp = 0.0
    occ = None
    if mma:
        kp, np_ = mma["l_mma_k"], mma["l_mma_n"]
        key = {2: "f16", 4: "tf32", 8: "f64"}[isz]
        products = 3 if isz == 4 else 1  # f32: hi*hi + hi*lo + lo*hi
        peak = arch_entry(DOT_FLOPS_PER_CLK, dev.cc)[key] * dev.sm_count * dev.clock_hz
        t_cmp = products * 2.0 * p.m * kp * np_ / (peak * cal.lmma_eta_mma)
        tile = mma["l_mma_tile"]
        regs = dev.regs_per_sm // (tile["threads"] * tile["min_blocks"])
        occ = occupancy(dev, tile["threads"], tile["smem_bytes"], regs, tile["min_blocks"])
    body = soft_max(t_mem, t_cmp, cal.P) if mma else t_mem
    seconds, bound = total(body, cal.t_launch, cal.t_floor, t_mem, t_cmp)
    t2 = t2_threshold(dev, dtype, cal)
    ratio = per_row_ratio(p)
    what = f"n = {p.n}" if p.k > 4 * p.n else f"k*n/(k+n) = {ratio:.3g}"
    if mma:
        # The launch floor, when it binds, is prefixed below.
        inner = "compute" if t_cmp > t_mem else "memory"
        reason = (
            f"{inner}-bound on tensor cores: rows of {p.k * isz} bytes and n = {p.n} run "
            f"TSM2L's mma.sync tile ({_L_MMA_PRODUCTS[isz]} of k {kp} x n {np_})"
        )
        params = {
            "tile": "L mma",
            "t2 (n_tile)": np_,
            "k_padded": kp,
            "rows": 16,
            "threads": tile["threads"],
            "smem_bytes": tile["smem_bytes"],
        }
    else:
        reason = (
            f"memory-bound: {what} below the t2 threshold of {t2:.0f} on this GPU; rows of "
            f"{p.k * isz} bytes run the row-per-thread kernel"
        )
        params = {"tile": "row", "t2 (n_tile)": p.n, "rows_per_lane": 4}
    if bound == "launch":
        reason = f"launch-bound: {dram / 1e6:.3g} MB under the per-call floor ({reason})"
    return Prediction(
        kernel="tsm2l",
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
        reason=reason,
    )
