"""The model's calibration constants: what neither the driver nor a datasheet says.

Each constant is a measured fraction or cost, fitted to committed H100 runs
and checked by ``benchmarks/model_check.py``; the docstring of
``Calibration`` says which run each comes from.

Example:
    >>> from jax_tsm2.model.calibration import CALIBRATION
    >>> CALIBRATION.eta("f32/R"), CALIBRATION.P
    (1.0, 4.0)
"""

from __future__ import annotations

import dataclasses

# TSM2T (layout tn) in one block, apart from the rest: ``python
# benchmarks/grid_fit.py --refit tsm2t GRID.json`` refits these four (and
# nothing else) on a grid run, for when TSM2T's staging changes again.
# Stream and FMA fitted to the TN suite on the H100 after TSM2T's staging lost
# its divisions (16 x 16 at 97-99% of the read ceiling, 64 x 64 f32 on CUDA
# cores at 47 FMA/clk/SM; median error 3%, worst 8%); element rate and margin
# from the seed-0 grid (see ``Calibration.route_margin``).
TSM2T_ETA_STREAM = 0.97
TSM2T_ETA_FMA = 0.40
TSM2T_SCALAR_ELEMS_PER_CLK = 0.65
TSM2T_ROUTE_MARGIN = 0.10


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Constants the driver cannot give, each fitted to one committed H100 run.

    Row-tile kernels (TSM2R, TSM2L), fitted to benchmarks/results/h100/calibration-r-l
    (families R and L):

    - ``stream_fraction``: measured read ceiling / theoretical DRAM bandwidth
      (3070 / 3352 GB/s on the H100); used when no bandwidth was measured.
    - ``eta_stream``: the fraction of the read ceiling our ring sustains when it
      has enough bytes in flight (R f32 n = 1: 91%).
    - ``eta_store``: the fraction of the read ceiling the R and L tiles store
      C at, counted on top of their reads (H200 grids, L products whose C is most of the
      bytes: f64 469724 x 4 x 39 at 66%, f32 1715052 x 3 x 59 at 71%, f64
      7270933 x 2 x 7 at 64%). Only the reads are bounded by the bytes in flight.
    - ``latency_s``: the effective loaded latency of a ring stage: an SM needs
      ``BW * latency / SMs`` bytes in flight to stream at ``eta_stream``
      (the L tiles with ~72 KB in flight per SM reached 76-81%, those with
      96 KB 89%).
    - ``smem_bytes_per_clk``: the shared-memory pipe; a warp's 16-byte
      broadcast read costs a full 128-byte wavefront per quarter-warp.
    - ``warps_to_hide``: resident warps per SM at which a tile issues at its
      full rate (bf16 L 64x64, 4 warps per SM, reached 66%).
    - ``rpt_exponent``: register blocking over ``rows_per_thread`` rows raises
      the shared-memory bound by ``rows_per_thread ** rpt_exponent``, not
      linearly: R f32 n = 16 (2 rows per thread) sustained ~43 FMA/clk/SM
      against 32 at one row, bf16 n = 8 and 16 (4 rows) 30-35 against 19.
      0.5 fits both (R median error 4% -> 3%, bf16 n = 16 -47% -> -5%).
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

    Split kernels (TSM2S, TSM2T), fitted to
    benchmarks/results/h100/calibration-layouts (families S, TN):

    - ``split_eta_stream``: the fraction of the read ceiling each streams at.
      TSM2S keeps ``eta_stream`` (its m = 1 cases reached 89-91%); TSM2T,
      since its stage copies lost their division, 97-99% where it is
      memory-bound (the TN suite, kernel lab): 0.97.
    - ``split_eta_fma``: the fraction of the FMA lanes each sustains. TSM2S
      (one block of 8 warps per SM at m = 16, a barrier per 32 rows) sustained
      about 19-26 FMA/clk/SM of 128 at m = 8 and 16 (inferred through the same
      soft maximum): 0.17. TSM2T 47 (f32, 64 x 64) and 25 (f64, of 64)
      after the rewrite: 0.40.
    - ``cluster_eta_stream``, ``cluster_l2_weight``: bf16/f16/f32 TSM2S over
      thread-block clusters streams B at its own fraction of the read ceiling
      and reads A from L2 once per column tile, each L2 byte costing that
      fraction of a DRAM byte. Fitted to the 64-column tiles over clusters
      of 2 (family S on the H100, forced kernels, device clock, both dtypes
      at m x 4096 x 4096, m = 1..16; least squares on the worst error): 1.05
      and 0.5, within 2.3% of all ten (bf16 14.0 / 14.6 / 15.3 us against
      13.7 / 14.6 / 15.2 at m = 1 / 8 / 16). A fraction above 1 is the fixed
      launch term (``t_launch``, 3.5 us) charging this kernel more than it
      pays: its launch overlaps the previous kernel's tail (PDL).

    - ``tma_eta_stream``, ``tma_l2_weight``: the same two for bf16/f16 TSM2S
      by tensor-map copies (128-column tiles, one block each, for shapes the
      clusters take in more than one wave). Fitted to family S on the H100
      (forced kernel, device clock, bf16 m x 8192 x 14336): 77.3 us at m = 1
      and 78.3 at m = 16 give 1.04 (the launch term again charged more than
      paid) and 0.1 (A's 16 rows add ~1 us over 112 tiles): 77.2 / 78.2
      predicted.

    TSM2L's row-per-thread kernels (rows of 2, 4, 8, 16 or 32 bytes, ``n <= 8``):

    - ``row_eta_stream``: the fraction of the read ceiling it streams A and C
      at; the kernel lab measured 89.8-92.3%
      on bf16/f32/f64 rows of 1e7: 0.90. Its FMAs (at most 16 x 8 per row)
      are far below the FMA rate at that stream, so it is modelled as memory-bound.

    TSM2L's tensor-core tile (rows of whole 16-byte vectors, bf16/f16 past
    ``n = 4``, f32 and f64 past ``n = 8``):

    - ``lmma_eta_stream``: the fraction of the read ceiling it streams A and C
      at, as the row-per-thread kernel: a warp's ring of 16-row stages, its
      outputs stored as whole sectors.
    - ``lmma_eta_mma``: the fraction of the tensor cores' dense rate its
      ``mma.sync`` products reach where they bind (f32 at wide ``k`` and
      ``n``: three TF32 products per product; f64: one DMMA product).

    XLA's dot (jax 0.11.2), fitted to the same file (family TN):

    - ``xla_tn_passes``: in layout tn (``A^T @ B`` on row-major operands)
      XLA's dot ran every case at 31-35% of the read ceiling, whatever the
      dtype and shape: as if it read its operands three times (consistent
      with a transposed copy written and read back). It is the one layout
      that differs: nt ran at 97-100%, like nn. Those were the suites' large
      shapes; ``xla_tn_mid_passes`` applies under ``xla_tn_big_bytes`` of
      operands, where the grids' tn records (seeds 0-4, 10-200 MB) ran at a
      median 1.26x of three passes (25 seed-4 records: median |error| 19.5% at
      3.0 passes, 8.5% with the two; the suites' 18 tn cases stay at 1.3%).
    - ``xla_t_floor``, ``xla_t_launch``: as ``t_floor``, ``t_launch`` above.

    Refitted to the validation grid (benchmarks/results/h100/grid-seed0,
    ``benchmarks/grid_fit.py`` fits them on half of its shapes and tests on the
    other half):

    - ``scalar_elems_per_clk``: where a kernel's operand rows are not whole
      16-byte vectors (R, L tiles: k; T: m or n not a multiple of
      16 / itemsize) it copies element by element, and streams at a rate in
      elements, whatever the dtype: on the grid R and L tiles about 1.2
      elements per clock per SM (bf16 at 18-22% of the ceiling, f32 at 41%),
      TSM2T's bf16/f16 about 0.65 of its padded stage rows (half 5-11%); TSM2T
      f32/f64: ``t_async_bytes_per_clk``. (TSM2S copies any rows in 16-byte
      windows.)
    Refitted to both grids (seeds 0 and 1, 226 shapes; ``grid_fit.py`` fits on
    one and tests on the other, then fits on both):

    - ``t_async_bytes_per_clk``: TSM2T's f32/f64 element copies (4/8-byte
      cp.async), in bytes per clock per SM of the elements its tiles read; the
      same lab: f32 2885541x11x67 and 1e6x13x7, f64 202954x23x5 and 99991x61x59
      at 4.7-6.2 (predicted -8%, -2%, -6%, +21%). bf16/f16 pairs (operands
      with an even number of columns) at the same rate on tensor-core tiles
      (148x194 and 30x20 at 4.9 and 6.4) and for operands of 32 columns or
      more, at half of it for narrower ones on CUDA-core tiles (split.py).
    - ``xla_tall_ratio``: A counts as tall (XLA's dot reads it once) from
      ``m >= xla_tall_ratio * k``; seed 1's R/NT shapes with m = 2-5.5 k ran
      XLA's dot at a third of the ceiling (NT f32 12973x6236x4: 341 us, TSM2R 134).
    - ``route_margin``: per kernel, how much faster than XLA's dot a kernel
      must be predicted for mode auto to run it; fitted by the shapes routed
      within 1.10x of their best on the fitting grid, from 10% up: 10% for
      every kernel (TSM2T's in its block above).
    - ``xla_short_k``: XLA's dot reads its operands once in nn where A has at
      most 4 rows and ``k`` is at most this (``xla.operand_passes``). Five
      grids (seeds 0-3): k = 1221-1892 ran once, 2507 at 1.7 passes, 2927 and
      up three times over.
    - ``xla_f64_short_k``: the same for f64 in nn and nt where the result's
      long side is at least 1.5 k: on the five grids every f64 R/NT/S shape of
      30 MB or more with k of 1209-3587 ran at 1350-2800 GB/s, every one with
      k of 3588 or more at 740-960; seed 4's R 2748x2325x2 (and seed 2's S
      6x1609x2160, seed 3's NT 1521x2282x12), with a long side under 1.5 k,
      ran three times over.
    - ``xla_short_k_passes``: the passes over the operands for those two
      rules: 1.1-1.7 on the grids (R f64 13345x3587x28 1.7, S f32 1x1417x10401
      1.2); 1.0-1.2 route best over the five grids (346/363 shapes within
      1.10x outside TN, 336 without the two rules).
    - ``xla_wide_ratio``, ``xla_wide_passes``: in nn where n is at least
      ``xla_wide_ratio`` times k (S shapes with a wide B), the passes where the
      rules above do not apply: seeds 0-4 ran them 1.6-2.8 times over (bf16
      10x1955x15284 34 us where three passes predicted 68; f32 10x3217x18540).
    - ``xla_half_outer_store``: XLA's dot stores C of a bf16/f16 outer product
      (``k = 1``, nn or nt) at this fraction of the read ceiling: four of the
      five such H200 grid products over 140 MB ran at 0.87-0.88 TB/s (19%), the
      fifth at 1.74; f32 and f64 ones at 2-4 TB/s.
    - ``xla_slow_passes``: on most grid shapes with ``m < 2 k`` and ``k`` not a
      multiple of 64 XLA's dot ran at 25-31% of the read ceiling in nn and nt,
      as in tn: as if it read its operands this many times over.
    """

    stream_fraction: float = 0.916
    eta_stream: float = 0.92
    eta_store: float = 0.68
    latency_s: float = 3.6e-6
    smem_bytes_per_clk: float = 128.0
    warps_to_hide: float = 6.0
    rpt_exponent: float = 0.5
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
    split_eta_stream: tuple[tuple[str, float], ...] = (
        ("tsm2s", 0.92),
        ("tsm2t", TSM2T_ETA_STREAM),
    )
    split_eta_fma: tuple[tuple[str, float], ...] = (("tsm2s", 0.17), ("tsm2t", TSM2T_ETA_FMA))
    row_eta_stream: float = 0.90
    lmma_eta_stream: float = 0.90
    lmma_eta_mma: float = 0.5
    xla_tn_passes: float = 3.0
    xla_tn_mid_passes: float = 3.6
    xla_tn_big_bytes: float = 200e6
    scalar_elems_per_clk: tuple[tuple[str, float], ...] = (
        ("tile", 1.2),
        ("tsm2t", TSM2T_SCALAR_ELEMS_PER_CLK),
    )
    cluster_eta_stream: float = 1.05
    cluster_l2_weight: float = 0.5
    tma_eta_stream: float = 1.04
    tma_l2_weight: float = 0.1
    t_async_bytes_per_clk: float = 5.0
    xla_slow_passes: float = 3.3
    xla_short_k: int = 2400
    xla_f64_short_k: int = 3587
    xla_short_k_passes: float = 1.2
    xla_tall_ratio: float = 6.0
    xla_half_outer_store: float = 0.19
    xla_wide_ratio: float = 4.5
    xla_wide_passes: float = 1.8
    route_margin: tuple[tuple[str, float], ...] = (
        ("tsm2r", 0.10),
        ("tsm2l", 0.10),
        ("tsm2s", 0.10),
        ("tsm2t", TSM2T_ROUTE_MARGIN),
    )
    xla_t_floor: float = 10.0e-6
    xla_t_launch: float = 1.5e-6

    def eta(self, key: str) -> float:
        return dict(self.eta_tile)[key]

    def scalar_rate(self, kind: str) -> float:
        """Elements per clock per SM of a kernel's element-by-element copy ("tile" or
        "tsm2t")."""
        return dict(self.scalar_elems_per_clk)[kind]

    def margin(self, kernel: str) -> float:
        """How much faster than XLA's dot ``kernel`` must be predicted for mode auto to run it."""
        return dict(self.route_margin)[kernel]

    def split_eta(self, kernel: str) -> tuple[float, float]:
        """(stream, FMA-rate) efficiencies of a split kernel ("tsm2s" or "tsm2t")."""
        return dict(self.split_eta_stream)[kernel], dict(self.split_eta_fma)[kernel]


CALIBRATION = Calibration()

# XLA's dot as a stream: the fraction of the read ceiling it reached
# (jax 0.11.2, H100: 90-99% on the R and L suites; bf16/f16 with k, n <= 8 at
# 50-55%, the one region where our TSM2L wins).
XLA_STREAM_EFFICIENCY = 0.96
XLA_SMALL_HALF_EFFICIENCY = 0.55
# Of DOT_FLOPS_PER_CLK when compute-bound: the harness's 8192^3 ceilings were
# 707 TF bf16 (66%), 59 TF f64 (88%), and f32 "highest" R n = 64 reached 39 TF.
XLA_DOT_EFFICIENCY = 0.65
