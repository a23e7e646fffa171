// How the S and T kernels cut a problem into blocks, in plain C++ so that the
// host (planning, workspace sizing) and Python (through
// _tsm2_ext.split_plan and _tsm2_ext.workspace_bytes) agree without CUDA.
//
// Both kernels contract over a long dimension that neither the output nor
// one block can hold: T (C = A^T @ B) over the huge m of its operands, S
// (C = A @ B with A a few rows) over the k rows of a large B. A block owns
// one output tile and a contiguous range of the contraction (a "split");
// with more than one split, blocks write partial tiles to a workspace laid
// out as [batch][split][m][n] and Tsm2SplitReduceKernel adds them in split
// order, so results are bitwise reproducible run to run (no float atomics).
//
// The measured choices below are the defaults of two tuning structs, STuning
// and TTuning: production instantiates them as they are, and the lab
// programs (benchmarks/lab/) instantiate variants of them to compare.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ffi/common/elem_type.h"
#include "ffi/common/plan_math.h"

namespace tsm2 {

// Blocks a split plan aims for per SM; enough resident warps to keep the
// memory system busy without making splits (and partial sums) needlessly small.
constexpr int kSplitBlocksPerSm = 4;

// T's tuning. Every T kernel fits two blocks per SM (all are launch-bounded
// to two blocks of 256 threads, ptxas gives each 124-128 registers, and the
// tensor-core rings are ~94 KB), so plans aim for one wave of two. On an
// H100, aiming for four made two waves, and one wave ran 3-10% faster on
// every tensor-core tile (TN f32 1e6 x 64 x 64 203 -> 192 us, f64 385 -> 367,
// bf16 115 -> 104.5) and 1-3% faster on the CUDA-core tiles (1e6 rows: f32
// 512 x 8 735 -> 716 us, f64 16 x 256 744 -> 735; 1e7 x 16 x 16 within 1%).
struct TTuning {
  static constexpr int kBlocksPerSm = 2;
  // Whether plans may stage rows flat (TUsesFlat), and the rows a thread
  // should get per flat stage (PlanTFlat).
  static constexpr bool kFlat = true;
  static constexpr int kFlatRowsPerThread = 8;
};

// Blocks of one thread-block cluster in the S cluster plans (below).
constexpr int kSClusterBlocks = 2;

struct SplitPlan {
  int64_t tile_m = 0, tile_n = 0;    // output tile of one block
  int64_t tiles_m = 0, tiles_n = 0;  // output tiles per batch entry
  int64_t step = 0;                  // contraction rows staged per pipeline step
  int64_t thread_edge = 4;           // T: each thread holds a thread_edge^2 block of the tile
  bool mma = false;                  // tensor-core tiles (tn_mma/tf32/half.cuh, small_left_mma.cuh)
  bool cluster = false;              // S: 64-column tiles over clusters (small_left_cluster.cuh)
  bool tma = false;  // S: 64/128-column tiles by tensor-map copies (small_left_tma.cuh)
  // T: stages hold their rows of A and of B each as one contiguous run
  // (tn_flat.cuh); flat_a and flat_b are the elements of each run's slot in a
  // stage (TFlatElems), and each thread holds an edge_m x edge_n block of C.
  bool flat = false;
  int64_t flat_a = 0, flat_b = 0;
  int64_t edge_m = 0, edge_n = 0;
  int64_t splits = 1;     // contraction ranges per output tile
  int64_t split_len = 0;  // rows per split (a multiple of step)
  // S by tensor maps: the next PDL launch may start early (STuning::kTmaEarly).
  bool early_dependents = false;
  // Blocks of the grid (a cluster plan's units are clusters of kSClusterBlocks).
  int64_t Blocks(int64_t batch) const {
    return batch * tiles_m * tiles_n * splits * (cluster ? kSClusterBlocks : 1);
  }
};

// Picks the number of splits for `tiles` output tiles and a contraction of
// `k` rows taken `step` at a time, aiming for `per_sm` blocks per SM; at
// most `max_splits`. With `one_wave` the aim is a bound: the grid fits
// per_sm blocks per SM where the tiles leave room for a split each.
inline void ChooseSplits(int64_t tiles, int64_t k, int sm_count, int per_sm, int64_t max_splits,
                         SplitPlan* s, bool one_wave = false) {
  const int64_t steps = std::max<int64_t>(1, CeilDiv(k, s->step));
  const int64_t slots = int64_t{per_sm} * sm_count, t = std::max<int64_t>(1, tiles);
  const int64_t want = one_wave ? slots / t : CeilDiv(slots, t);
  s->splits = std::clamp<int64_t>(want, 1, std::min(steps, std::max<int64_t>(1, max_splits)));
  s->split_len = CeilDiv(steps, s->splits) * s->step;
  s->splits = CeilDiv(std::max<int64_t>(k, 1), s->split_len);  // no empty splits
}

// T: C[m, n] = sum_r A[r, :m]^T B[r, :n]. Each of the 256 threads of a block
// holds an e x e block of the output tile (e = 8 where the type is at most 4
// bytes and the tile is large: both edges 32 or more, or 16 or more with
// 2048 outputs such as 16 x 256; there FMAs dominate and 8 x 8 halves the
// shared-memory reads per FMA; measured slower for 512 x 8, and f64 would
// need 128 accumulator registers; else 4); when the tile has fewer than 256 such blocks,
// groups of threads take interleaved rows of each stage and are added at the end. Tiles cover the
// whole output when m * n <= 4096, so that A and B are read once.
constexpr int kTThreads = 256;
// Bytes per pipeline stage: 32 KiB for FMA-heavy tiles (2048+ outputs, two
// blocks per SM by registers anyway), so a barrier comes every 8+ rows per
// thread rather than every 3 (measured: 16 x 256 f32 was barrier-bound at
// 16 KiB); 16 KiB elsewhere keeps four blocks per SM.
constexpr int kTStageBytes = 16 * 1024;
constexpr int kTStageBytesLarge = 32 * 1024;
// Stages of the T kernels' cp.async rings, and the shared memory a T block
// may ask for (tn.cuh TSmemBytes stays below it).
constexpr int kTStages = 3;
constexpr int kTMaxSmem = 96 * 1024;
// Tiles of 2048+ outputs run on tensor cores where the FMA pipes held the
// CUDA-core kernel back (64 x 64: 54% of the read ceiling in f64, 50% in
// f32): f64 and f32 tiles with both edges 16 or more, f64 on FP64 MMAs
// (tn_mma.cuh; with edges of 16 rather than 32 the f64 tiles 16 x 256 and
// 256 x 16 ran 1-2% faster on an H100, 1e6 rows: 733 -> 725 us and 742 ->
// 726), f32 on TF32 MMAs at f32 accuracy (tn_tf32.cuh). bf16 and f16 tiles carry twice the FMAs per
// byte of f32 ones, so theirs go to m16n8k16 MMAs from 1024 outputs (16 x 8 MMA tiles, one or more
// per warp; tn_half.cuh). Stage rows are padded by kTMmaPad elements so that a fragment's rows fall
// on distinct banks.
constexpr int kTMmaPad = 8;
constexpr bool TUsesMma(int itemsize, int64_t tile_m, int64_t tile_n) {
  if (itemsize == 2) return tile_m >= 16 && tile_n >= 8 && tile_m * tile_n >= 1024;
  return (itemsize == 8 || itemsize == 4) && tile_m >= 16 && tile_n >= 16 &&
         tile_m * tile_n >= 2048;
}
// Contraction rows per stage of the tensor-core tiles: whole MMA steps in
// about kTStageBytesLarge (constexpr: the kernels are compiled per tile).
constexpr int64_t TMmaStep(int itemsize, int64_t tile_m, int64_t tile_n) {
  const int64_t padded = (tile_m + tile_n + 2 * kTMmaPad) * itemsize;
  // Contraction rows per MMA: m16n8k4 f64, m16n8k8 TF32, m16n8k16 bf16/f16.
  const int64_t mk = itemsize == 8 ? 4 : itemsize == 4 ? 8 : 16;
  return std::max(mk, kTStageBytesLarge / padded / mk * mk);
}
// A flat stage slot (tn_flat.cuh LoadTFlat): `step` rows of `width` elements copied
// as the 16-byte vectors that hold them, so the run starts up to a vector into
// its slot, plus the `tile` elements past its end that the threads of the last
// row read for the tile's columns past the matrix (their sums are dropped).
constexpr int64_t TFlatElems(int64_t step, int64_t width, int64_t tile, int itemsize) {
  const int64_t vec = 16 / itemsize;
  return CeilDiv(step * width + 2 * vec + tile, vec) * vec;
}
// Whether T stages its rows flat (tn_flat.cuh): where rows of A or B are not
// whole 16-byte vectors and one output tile covers C, the rows a stage takes
// are one contiguous run of each operand, copied in 16-byte vectors whatever
// the row length, where the tiled stages copy each row element by element.
// `aligned`: both operands start on a 16-byte boundary (so does every batch
// entry then, where the batch strides are whole vectors).
inline bool TUsesFlat(int itemsize, int64_t batch, int64_t m, int64_t k, int64_t n,
                      const SplitPlan& s, bool aligned) {
  const int64_t vec = 16 / itemsize;
  const bool rows_vec = m % vec == 0 && n % vec == 0;
  const bool batches_vec = batch == 1 || ((k * m) % vec == 0 && (k * n) % vec == 0);
  return aligned && batches_vec && !rows_vec && !s.mma && s.tiles_m == 1 && s.tiles_n == 1;
}

// Thread blocks and stages of a flat plan (tn_flat.cuh). Each thread holds an
// edge_m x edge_n block of C, the tile is C rounded up to whole blocks, and a
// stage is as many whole rows as 32 KiB and the ring's shared memory hold.
// The edges start at the powers of two up to kTFlatEdge that cover m and n
// (edge_m at most 4 in f64: 8 x 8 doubles take 128 registers) and the larger
// is halved while a thread would get fewer than Tune::kFlatRowsPerThread rows
// a stage. H200, kernel lab: with 8 x 8 blocks, 128 row groups and a row each
// per stage, the barrier and copies of every stage held TN f32 1e6 x 13 x 7
// at 28% of the read ceiling, and the sums of 128 groups doubled the time of
// short contractions (bf16 99991 x 13 x 7: 29.9 us); with 2 or 4 rows a
// thread 49% and 29.9 us, with 8 rows 52% and 13.9 us, and no shape of the
// lab's ten ran slower with 8 than with 2 or 4.
// Leaves `s` tiled where a stage would not hold a row per group.
constexpr int64_t kTFlatEdge = 8;
template <typename Tune>
void PlanTFlat(int itemsize, int64_t m, int64_t n, SplitPlan* s) {
  const int64_t vec = 16 / itemsize;
  int64_t em = std::min<int64_t>(Pow2AtLeast(m), itemsize == 8 ? 4 : kTFlatEdge);
  int64_t en = std::min<int64_t>(Pow2AtLeast(n), kTFlatEdge);
  for (;;) {
    const int64_t tile_m = em * CeilDiv(m, em), tile_n = en * CeilDiv(n, en);
    const int64_t threads = (tile_m / em) * (tile_n / en);
    if (threads > kTThreads) return;
    const int64_t groups = kTThreads / threads;
    const int64_t slack = 4 * vec + tile_m + tile_n;
    const int64_t fits = (kTMaxSmem / kTStages / itemsize - slack) / (m + n);
    const int64_t rows = std::min(kTStageBytesLarge / ((m + n) * itemsize), fits) / groups * groups;
    if (rows >= Tune::kFlatRowsPerThread * groups || em * en == 1) {
      if (rows < groups) return;
      s->flat = true;
      s->tile_m = tile_m;
      s->tile_n = tile_n;
      s->edge_m = em;
      s->edge_n = en;
      s->step = rows;
      s->flat_a = TFlatElems(rows, m, tile_m, itemsize);
      s->flat_b = TFlatElems(rows, n, tile_n, itemsize);
      return;
    }
    (em >= en ? em : en) /= 2;
  }
}

template <typename Tune = TTuning>
SplitPlan TPlan(int itemsize, int64_t batch, int64_t m, int64_t k, int64_t n, int sm_count,
                bool aligned = true) {
  SplitPlan s;
  s.tile_n = std::min<int64_t>(Pow2AtLeast(std::max<int64_t>(n, 4)), 256);
  s.tile_m = std::min<int64_t>(Pow2AtLeast(std::max<int64_t>(m, 4)), 4096 / s.tile_n);
  s.tiles_m = CeilDiv(m, s.tile_m);
  s.tiles_n = CeilDiv(n, s.tile_n);
  const bool large = (s.tile_m >= 32 && s.tile_n >= 32) ||
                     (std::min(s.tile_m, s.tile_n) >= 16 && s.tile_m * s.tile_n >= 2048);
  s.thread_edge = itemsize <= 4 && large ? 8 : 4;
  const int64_t e = s.thread_edge;
  const int64_t groups = kTThreads / ((s.tile_m / e) * (s.tile_n / e));
  const int64_t row_bytes = (s.tile_m + s.tile_n) * itemsize;
  const int64_t stage_bytes = s.tile_m * s.tile_n >= 2048 ? kTStageBytesLarge : kTStageBytes;
  s.step = std::max<int64_t>(groups, stage_bytes / row_bytes / groups * groups);
  // A single product (k = 1) stays on the CUDA cores: an MMA loses the sign of
  // a -0 product, which jnp keeps (kernel_utils.cuh, InitSums).
  s.mma = k > 1 && TUsesMma(itemsize, s.tile_m, s.tile_n);
  if (s.mma) s.step = TMmaStep(itemsize, s.tile_m, s.tile_n);
  if (Tune::kFlat && TUsesFlat(itemsize, batch, m, k, n, s, aligned)) {
    PlanTFlat<Tune>(itemsize, m, n, &s);
  }
  // Rounded up, the aim left a few blocks for a second wave: 10 tiles x 27
  // splits = 270 blocks for 264 slots took TN bf16 539940 x 148 x 194 from
  // 1.23 to 1.64 ms on an H100.
  ChooseSplits(batch * s.tiles_m * s.tiles_n, k, sm_count, Tune::kBlocksPerSm, int64_t{1} << 40, &s,
               /*one_wave=*/true);
  return s;
}

// S: C[m, n] = A[m, k] @ B[k, n] with m <= kSMaxM. A warp covers 32 vectors of
// B's columns (one per thread), the 8 warps of a block take interleaved rows
// of its split and are added at the end.
constexpr int kSThreads = 256;
constexpr int kSMaxM = 16;
constexpr int kSRowsPerStep = 8 * 4;  // 8 warps x 4 rows in flight per thread

// 64-column tiles over thread-block clusters of kSClusterBlocks blocks
// (small_left_cluster.cuh): the 2 blocks of a cluster split the contraction
// and add their sums through distributed shared memory. On an H100 (lab,
// bf16 m x 4096 x 4096, CUDA-graph replay, m = 1 / 16): 64 columns x 2
// ranks with 128-row x 4-stage rings 13.2 / 14.0 us; x 6 stages 13.5 / 14.0;
// 64 rows x 8 stages 13.1 / 14.3; 256 columns x 8 ranks 13.3 / 14.4 (only 15
// of its 16 clusters fit one block per SM).
constexpr int kSClusterCols = 64;
constexpr int kSClusterBlocksPerSm = 2;

// S's tuning: the kernels' rings and the planner's choices among the S
// kernels. Production instantiates it as it is; a lab variant derives from it
// and overrides members (struct LabS : STuning { static constexpr int
// kStages = 6; }).
struct STuning {
  // Stages of the CUDA-core and tensor-core kernels' cp.async rings
  // (small_left.cuh, small_left_mma.cuh).
  static constexpr int kStages = 4;
  // Blocks the plan aims for per SM (and the tensor-core kernel's launch
  // bounds).
  static constexpr int kBlocksPerSm = kSplitBlocksPerSm;
  // bf16/f16 with at least this many rows of A take the tensor-core kernel
  // (small_left_mma.cuh).
  static constexpr int kMmaMinM = 8;
  // The cluster kernel (sm_90): whether plans use it, its rows of B per stage
  // for 2-byte types (f32 takes half as many, so a stage is 16 KB for every
  // type) and its stages.
  static constexpr bool kCluster = true;
  static constexpr int kClusterRows = 128;
  static constexpr int kClusterStages = 4;
  // The cluster and tensor-map kernels launch as programmatic dependents
  // (PDL): their blocks start while the previous kernel drains and wait for
  // its writes (griddepcontrol.wait) before their first load. H100, lab,
  // CUDA-graph replay: 14.39 -> 13.95 us at bf16 1 x 4096 x 4096.
  static constexpr bool kPdl = true;
  // The tensor-map kernel (sm_90; small_left_tma.cuh): whether plans use it.
  static constexpr bool kTma = true;
  // Whether its blocks let the next PDL launch start early, where that grid
  // fits beside this one (SPlan sets SplitPlan::early_dependents).
  static constexpr bool kTmaEarly = true;
};

// The cluster and tensor-map kernels need thread-block clusters, TMA and
// mbarrier transactions (compute capability 9.0 or later), and their rings
// are sized for the 227 KB of shared memory per block of the data-centre GPUs
// (sm_90, sm_100; sm_120 has 99 KB). Plans take the GPU's compute capability
// `cc` (10 * major + minor) and opt-in shared memory per block `smem_optin`
// and keep to the other S kernels (80 KB at most) elsewhere, so one build
// serves sm_80 to sm_120 alike (the sm_90 kernels compile to a trap for the
// older targets).
constexpr int kSm90Cc = 90;
constexpr int kSm90SmemOptin = 227 * 1024;
constexpr bool SHasSm90Kernels(int cc, int smem_optin) {
  return cc >= kSm90Cc && smem_optin >= kSm90SmemOptin;
}

// Rows of B per stage of the cluster kernel.
template <typename Tune = STuning>
constexpr int SClusterRows(int itemsize) {
  return Tune::kClusterRows * 2 / itemsize;
}

// bf16/f16/f32 products whose 64-column tiles, 2 blocks each, fit in one
// wave of two blocks per SM run over clusters; n and k multiples of 8: the
// copies are 16-byte chunks.
template <typename Tune = STuning>
bool SUsesCluster(int itemsize, int64_t batch, int64_t k, int64_t n, int sm_count, int cc,
                  int smem_optin) {
  return Tune::kCluster && SHasSm90Kernels(cc, smem_optin) && (itemsize == 2 || itemsize == 4) &&
         n % 8 == 0 && k % 8 == 0 &&
         batch * CeilDiv(n, kSClusterCols) * kSClusterBlocks <=
             int64_t{kSClusterBlocksPerSm} * sm_count;
}

// bf16/f16 S by tensor-map copies (small_left_tma.cuh; sm_90, like the
// clusters): each block owns a column tile and the whole contraction, so the
// tiles alone must make at least kSTmaMinBlocks blocks (no split adds any).
// 64 SMs each streaming their own tile saturate HBM: cuBLAS runs bf16
// 1 x 4096 x 4096 on 64 CTAs, and so does this kernel's 64-column form.
// Measured on an H100:
// - 64-column tiles where the clusters' one wave fits: lab, bf16 m x 4096 x
//   4096, m = 1-16: 13.6-13.75 us, flat in m, against 13.8-14.4 for the
//   cluster kernel in the same run.
// - 128-column tiles beyond it (256-byte runs of each row: a copy-only probe
//   moved B in 128-byte runs at 94-97% of a plain read at 8192 x 14336, in
//   256-byte runs at its full speed): bf16 m x 8192 x 14336, m = 1-16,
//   77.3-78.3 us in the harness against 91.7-138.8 for the cp.async tiles
//   and splits.
constexpr int kSTmaMinBlocks = 64;
// Stages of 16 KB of B: STmaRows(cols) rows of the tile. 8 of them at 128
// columns (one block per SM), 6 at 64. Lab at 4096 x 4096, m = 1-16, on an
// H100: 5 stages 13.6-13.75 us against 14.75-15.13 with 8 and 15.7-16.0 with
// 10; with PDL, 6 stages 12.60-12.88 against 12.66-13.04 with 5 and
// 12.79-13.12 with 7; without PDL, 64-row stages x 10 or 12 were no faster
// than 6 of 128.
constexpr int STmaRows(int cols) { return 8192 / cols; }
constexpr int STmaStages(int cols) { return cols == 128 ? 8 : 6; }
// Early dependents: where a second grid of the same plan fits on the SMs
// this one leaves idle, each block lets the next programmatic dependent
// launch (griddepcontrol.launch_dependents) once its producer has issued its
// last copies, so the next product's blocks are resident and past their
// set-up when this one ends; their griddepcontrol.wait still waits for all
// of this grid. Lab on an H100 (graph replay, A and B rotated), bf16 m x
// 4096 x 4096 (64 blocks), m = 1 / 8 / 16: 12.62 / 12.85 / 13.02 us against
// 13.17 / 13.24 / 13.37 without; letting it launch at the start instead:
// 13.00 / 13.18 / 13.36. At 8192 x 14336 (112 blocks, one per SM) it cost
// 3.4-3.8 us (77.0-77.7 -> 80.5-81.5), so grids over half the SMs do not.
// Under XLA's command buffers (the default) neither this nor PDL itself
// changed the harness's times (likely because each custom call is recorded
// as its own child graph, and PDL joins kernel nodes); with XLA_FLAGS=
// --xla_gpu_enable_command_buffer= it ran bf16 m x 4096 x 4096 in 13.1-13.4
// us against 13.6-14.0 with them.

// The tensor-map tile width for this S problem, or 0 where the kernel does
// not take it.
template <typename Tune = STuning>
int STmaCols(int itemsize, int64_t batch, int64_t k, int64_t n, int sm_count, int cc,
             int smem_optin) {
  constexpr int64_t kMaxCoord = int64_t{1} << 31;  // TMA coordinates are 32-bit
  if (!(Tune::kTma && SHasSm90Kernels(cc, smem_optin)) || itemsize != 2 || n % 8 != 0 ||
      k % 8 != 0 || k >= kMaxCoord || n >= kMaxCoord || batch >= kMaxCoord) {
    return 0;
  }
  const int64_t cols =
      SUsesCluster<Tune>(itemsize, batch, k, n, sm_count, cc, smem_optin) ? 64 : 128;
  return batch * CeilDiv(n, cols) >= kSTmaMinBlocks ? static_cast<int>(cols) : 0;
}

inline int SColsPerThread(int itemsize) { return itemsize == 8 ? 2 : 4; }

// Splits of the CUDA-core and tensor-core S plans for `per_sm` resident blocks
// per SM: Tune::kBlocksPerSm, or as many as fit where the kernel's registers or
// shared memory allow fewer (PlanS asks the device). One wave at most: a few
// blocks left for a second wave take as long as the whole first one. H200, S
// forced (f16 9 x 3981 x 13727, 108 tiles): 5 splits made 540 blocks for 528
// slots and ran at 24% of the floor. Splits are capped so that partial sums stay
// below an eighth of B's bytes.
inline void SChooseSplits(int itemsize, int64_t batch, int64_t m, int64_t k, int sm_count,
                          int per_sm, SplitPlan* s) {
  const int64_t max_splits = std::max<int64_t>(1, k * itemsize / (8 * 4 * std::max<int64_t>(m, 1)));
  ChooseSplits(batch * s->tiles_n, k, sm_count, per_sm, max_splits, s, /*one_wave=*/true);
}

template <typename Tune = STuning>
SplitPlan SPlan(int itemsize, int64_t batch, int64_t m, int64_t k, int64_t n, int sm_count, int cc,
                int smem_optin) {
  SplitPlan s;
  if (const int cols = STmaCols<Tune>(itemsize, batch, k, n, sm_count, cc, smem_optin); cols > 0) {
    s.tma = true;
    s.mma = true;
    s.tile_m = m;
    s.tile_n = cols;
    s.tiles_m = 1;
    s.tiles_n = CeilDiv(n, cols);
    s.step = STmaRows(cols);
    s.splits = 1;
    s.split_len = CeilDiv(k, s.step) * s.step;
    s.early_dependents =
        Tune::kTmaEarly && Tune::kPdl && 2 * batch * s.tiles_n <= int64_t{sm_count};
    return s;
  }
  if (SUsesCluster<Tune>(itemsize, batch, k, n, sm_count, cc, smem_optin)) {
    s.cluster = true;
    s.mma = itemsize == 2;  // f32 multiplies on the CUDA cores
    s.tile_m = m;
    s.tile_n = kSClusterCols;
    s.tiles_m = 1;
    s.tiles_n = CeilDiv(n, kSClusterCols);
    s.step = kSClusterBlocks * SClusterRows<Tune>(itemsize);
    // Split across clusters only where they leave a quarter of the SMs idle,
    // and then into ranges of 4+ steps.
    const int64_t blocks = batch * s.tiles_n * kSClusterBlocks;
    const bool fills = blocks * 4 >= int64_t{sm_count} * 3;
    ChooseSplits(blocks, k, sm_count, 1, fills ? 1 : std::max<int64_t>(1, k / (4 * s.step)), &s);
    return s;
  }
  s.tile_m = m;
  s.tile_n = 32 * SColsPerThread(itemsize);
  s.tiles_m = 1;
  s.tiles_n = CeilDiv(n, s.tile_n);
  s.step = kSRowsPerStep;
  s.mma = itemsize == 2 && m >= Tune::kMmaMinM && k > 1;  // k = 1: as in TPlan
  SChooseSplits(itemsize, batch, m, k, sm_count, Tune::kBlocksPerSm, &s);
  return s;
}

// Bytes of partial sums a split plan needs ([batch][split][m][n] accumulators).
inline int64_t SplitWorkspaceBytes(const SplitPlan& s, int itemsize, int64_t batch, int64_t m,
                                   int64_t n) {
  if (s.splits <= 1) return 0;
  const int acc_bytes = AccSize(itemsize);
  return batch * s.splits * m * n * acc_bytes;
}

}  // namespace tsm2
