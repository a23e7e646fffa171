"""The row stream: TSM2R's kernel for one product of width n <= 16 (``kernels/row_stream.cuh``).

Warps read A straight into registers (or a per-warp ring of cp.async copies)
and multiply it against B's rows in shared memory. Its plan (splits of k,
grid) comes from the extension (``_tsm2_ext.row_stream_plan``, the launcher's
own arithmetic) and its instantiation from ``tile_config``'s ``row_stream``
entry. The time joins two bounds::

    t_mem = (A + B + C + partial sums) / (BW * eta_stream * min(1, inflight / need) ** e)
    t_cmp = warp instructions / (SMs * clock * instructions per clock)
    t     = max(t_floor, t_launch (+ fix-up) + (t_mem**P + t_cmp**P) ** (1 / P))

where a warp step (R rows x U vectors x 32 lanes) issues R*U loads, U*vec
loads of B's rows, R*U*vec*N FMAs (plus the 2-byte types' conversions) and a
few instructions of bookkeeping.

Example:
    >>> from jax_tsm2.model.device import H100_SXM
    >>> from jax_tsm2.model.calibration import CALIBRATION
    >>> from jax_tsm2.problem import Problem
    >>> from jax_tsm2._ffi import _tsm2_ext
    >>> rs = _tsm2_ext.tile_config("float32", 0, 20000, 8)["row_stream"]
    >>> p = stream_prediction(Problem(None, 20000, 20000, 8), "float32", "nn", H100_SXM,
    ...                       CALIBRATION, rs)
    >>> p.params["tile"], p.params["splits"] >= 1
    ('row stream', True)
"""

from __future__ import annotations

from typing import Any

from jax_tsm2._ffi import _tsm2_ext
from jax_tsm2.model.calibration import Calibration
from jax_tsm2.model.device import Device
from jax_tsm2.model.prediction import (
    Prediction,
    itemsize,
    occupancy,
    soft_max,
    t2_threshold,
    total,
)
from jax_tsm2.problem import Problem

#: Warp instructions per clock per SM the row stream sustains at its one
#: 16-warp block per SM (of the four schedulers' four): the f32 n = 8 stream,
#: at about 160 instructions per step, took 151 clocks per step and SM on an
#: H200 (kernel lab), 1.06 per clock, partly hidden under its stream.
ROW_STREAM_ISSUE_PER_CLK = 1.1
#: The same with the shared-memory ring (f32 n = 16, bf16/f16 n = 8), whose
#: warps wait on no global load between steps: 1.45-1.55 on an H200.
ROW_STREAM_RING_ISSUE_PER_CLK = 1.5
#: The loaded latency a warp's loads wait out: with no barriers and no
#: copies to shared memory it is DRAM's, not a ring stage's
#: (``Calibration.latency_s``). f32 n = 1, one step of 2 KB in flight per
#: warp and 16 warps per SM, read at 97% of the ceiling on an H200:
#: 32 KB x 132 SMs / 4.35 TB/s = 1.0 us.
ROW_STREAM_LATENCY_S = 1.0e-6
#: Instructions of a warp step besides loads and FMAs: addresses, the step's
#: bounds check and loop control.
ROW_STREAM_STEP_OVERHEAD = 20


def stream_prediction(
    p: Problem,
    dtype: str,
    layout: str,
    dev: Device,
    cal: Calibration,
    rs: dict[str, Any],
    kernel: str = "tsm2r",
) -> Prediction:
    """The prediction for ``kernel`` (TSM2R, or TSM2L past the L tile's k) on the row
    stream (``rs``: ``tile_config(...)["row_stream"]``)."""
    isz = itemsize(dtype)
    acc_b = 8 if dtype == "float64" else 4
    vec = 16 // isz
    plan = _tsm2_ext.row_stream_plan(
        dtype, p.m, p.k, p.n, sm_count=dev.sm_count, smem_optin=dev.smem_per_block_optin
    )
    if plan is None:  # B's rows of one vector do not fit this GPU: the plan falls back
        raise ValueError("row stream: no plan on this device")
    nb, rows, vecs = rs["n_b"], rs["rows"], rs["vecs"]
    splits = plan["splits"]

    dram = (p.m * p.k + p.k * p.n + p.m * p.n) * isz
    if splits > 1:
        dram += 2 * splits * p.m * p.n * acc_b

    occ = occupancy(dev, rs["threads"], plan["smem_bytes"], 128, rs["min_blocks"])
    active_sms = min(dev.sm_count, plan["blocks"])
    warps = min(occ.warps_per_sm, rs["threads"] // 32 * max(1, plan["blocks"] // active_sms))
    step_bytes = rows * vecs * 32 * 16
    ahead = rs["stages"] - 1 if rs["stages"] else rs["depth"]
    inflight = warps * ahead * step_bytes
    bw = dev.bandwidth(cal)
    need = bw * ROW_STREAM_LATENCY_S / dev.sm_count
    stream = cal.eta_stream * min(1.0, inflight / need) ** cal.inflight_exponent
    stream *= active_sms / dev.sm_count
    t_mem = dram / (bw * stream)

    # Warp steps: each row group walks its split's vectors (one more where
    # rows do not start on a vector) 32 * U at a time.
    vectors = -(-plan["k_chunk"] // vec) + (1 if plan["period"] > 1 else 0)
    steps = plan["units"] * -(-vectors // (32 * vecs))
    per_step = (
        rows * vecs * (2 if rs["stages"] else 1)
        + vecs * vec * (nb * acc_b + 15) // 16
        + rows * vecs * vec * nb
        + (rows * vecs * vec if isz == 2 else 0)
        + ROW_STREAM_STEP_OVERHEAD
    )
    ipc = ROW_STREAM_RING_ISSUE_PER_CLK if rs["stages"] else ROW_STREAM_ISSUE_PER_CLK
    t_cmp = steps * per_step / (active_sms * dev.clock_hz * ipc)

    body = soft_max(t_mem, t_cmp, cal.P)
    launch = cal.t_launch + (cal.fixup_s if splits > 1 else 0.0)
    seconds, bound = total(body, launch, cal.t_floor, t_mem, t_cmp)
    t2 = t2_threshold(dev, dtype, cal)
    how = (
        f"the row stream: {rows} rows per warp against B's rows of {nb} in shared memory, "
        f"k in {splits} split{'s' if splits > 1 else ''}"
    )
    if t_mem >= t_cmp:
        reason = f"memory-bound: n = {p.n} below the t2 threshold of {t2:.0f} on this GPU; {how}"
    else:
        reason = (
            f"issue-bound in the row stream: n = {p.n} (t2 threshold {t2:.0f} at peak FMA "
            f"rate), but a warp issues its loads, B's rows and FMAs at about "
            f"{ipc:.1f} instructions per clock per SM; {how}"
        )
    if bound == "launch":
        reason = (
            f"launch-bound: {dram / 1e6:.3g} MB moves in {body * 1e6:.3g} us, under the "
            f"{cal.t_floor * 1e6:.3g} us per-call floor ({reason})"
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
        params={
            "tile": "row stream",
            "n_b": nb,
            "rows_per_warp": rows,
            "vec_per_lane": vecs,
            "ring": f"{rs['stages']} stages in shared memory"
            if rs["stages"]
            else f"{rs['depth'] + 1} steps in registers",
            "splits": splits,
            "k_chunk": plan["k_chunk"],
            "row_period": plan["period"],
            "blocks": plan["blocks"],
            "units": plan["units"],
            "smem_bytes": plan["smem_bytes"],
            "inflight_bytes_per_sm": inflight,
            "fma_per_clk_per_sm": round(
                rows * vecs * vec * nb * steps / (t_cmp * active_sms * dev.clock_hz), 1
            ),
        },
        t2_threshold=t2,
        tile_threshold=None,
        reason=reason,
    )
