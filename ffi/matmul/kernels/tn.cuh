// TSM2T: C[m, n] = A^T @ B with A given k x m and B given k x n, both
// row-major and tall (k huge, m and n small): Gram matrices, centroid sums,
// and the gradient A^T @ G of a tall-and-skinny product.
//
// The paper has no kernel for this layout; it reuses TSM2's ideas with the
// roles turned: the long dimension is now the contraction, so
// - each block streams a contiguous range of rows of both operands (a split,
//   ffi/matmul/split_plan.h) through a cp.async ring in shared memory, as an A
//   slice and a B slice per stage, so every byte of A and B is read once
//   with coalesced copies;
// - the output tile stays in registers for the whole range: each thread owns
//   an E x E block of it (register blocking: 2E shared-memory values feed
//   E^2 FMAs; E = 4 or 8, split_plan.h); when the tile has fewer 4 x 4 blocks than the block has
//   threads, groups of threads take interleaved rows and are added pairwise at the end, in an
//   order fixed by the plan;
// - splits are added by Tsm2SplitReduceKernel in split order, so the result
//   is bitwise reproducible (no float atomics).
#pragma once

#include <cstdint>

#include "ffi/common/kernel_utils.cuh"
#include "ffi/common/pdl.cuh"
#include "ffi/matmul/kernels/split_reduce.cuh"
#include "ffi/matmul/kernels/tile_io.cuh"
#include "ffi/matmul/split_plan.h"

namespace tsm2 {

// Bytes of shared memory one T block needs: the ring, or the group
// reduction buffer that reuses it afterwards, whichever is larger.
inline int TSmemBytes(const SplitPlan& s, int itemsize) {
  const int64_t row_bytes = (s.tile_m + s.tile_n + (s.mma ? 2 * kTMmaPad : 0)) * itemsize;
  const int64_t ring = kTStages * (s.flat ? (s.flat_a + s.flat_b) * itemsize : s.step * row_bytes);
  const int64_t sums = s.flat ? s.edge_m * s.edge_n : s.thread_edge * s.thread_edge;
  const int64_t red = int64_t{kTThreads} * sums * AccSize(itemsize);
  return static_cast<int>(ring > red ? ring : red);
}

// Copies rows [r0, r0 + step) x columns [col0, col0 + width) of a row-major
// matrix (`cols` columns) into `dst` (step rows of `ld` elements). `width` is a power
// of two, so a copy index splits into (row, column) with a shift: the
// division it avoids cost more issue slots than the FMAs of small tiles.
// Rows past `r_end` and columns past the matrix are zero-filled. Rows that
// are not whole 16-byte vectors are copied element by element, with 4- and
// 8-byte cp.async for f32 and f64: the loads then queue in the ring like the
// vector copies, where a load and a store through registers waited for each
// element (TN f32 2885541 x 11 x 67 ran at 23% of the read ceiling, grid
// seed 3). bf16 and f16 elements are below cp.async's 4 bytes: they go in
// 4-byte pairs where the matrix has an even number of columns and starts on a
// 4-byte boundary (col0 and width are then even too, so a pair is wholly in
// or out), else through registers (TN bf16 539940 x 148 x 194 took 5.9 ms
// that way, grid seed 3).
template <typename T>
__device__ __forceinline__ void LoadTSlice(const T* src, int64_t cols, int64_t col0, int width,
                                           int64_t r0, int64_t r_end, int step, int ld, bool vec_ok,
                                           T* dst) {
  if (vec_ok) {  // width and cols are whole 16-byte vectors
    const int vpr = width / kVec<T>, shift = __ffs(vpr) - 1;
    for (int q = threadIdx.x; q < step * vpr; q += kTThreads) {
      const int r = q >> shift, v = q & (vpr - 1);
      const int64_t row = r0 + r, col = col0 + static_cast<int64_t>(v) * kVec<T>;
      const bool valid = row < r_end && col < cols;
      CpAsync16(dst + r * ld + v * kVec<T>, valid ? src + row * cols + col : src, valid);
    }
  } else if (sizeof(T) == 2 && width >= 2 && cols % 2 == 0 &&
             reinterpret_cast<uintptr_t>(src) % 4 == 0) {
    const int pairs = width / 2, shift = __ffs(pairs) - 1;
    for (int q = threadIdx.x; q < step * pairs; q += kTThreads) {
      const int r = q >> shift, e = 2 * (q & (pairs - 1));
      const int64_t row = r0 + r, col = col0 + e;
      const bool valid = row < r_end && col < cols;
      CpAsync4(dst + r * ld + e, valid ? src + row * cols + col : src, valid);
    }
  } else {
    const int shift = __ffs(width) - 1, total = step * width;
    if constexpr (sizeof(T) >= 4) {
      for (int q = threadIdx.x; q < total; q += kTThreads) {
        const int r = q >> shift, e = q & (width - 1);
        const int64_t row = r0 + r, col = col0 + e;
        const bool valid = row < r_end && col < cols;
        if constexpr (sizeof(T) == 8) {
          CpAsync8(dst + r * ld + e, valid ? src + row * cols + col : src, valid);
        } else {
          CpAsync4(dst + r * ld + e, valid ? src + row * cols + col : src, valid);
        }
      }
    } else {
      // kBatch loads in flight before their stores: one element at a time, a
      // thread waited a whole memory latency per element (TN f16 9 x 94485 x
      // 11 took 22 us, XLA's dot 11).
      constexpr int kBatch = 8;
      for (int q0 = threadIdx.x; q0 < total; q0 += kBatch * kTThreads) {
        T v[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int q = q0 + u * kTThreads;
          const int64_t row = r0 + (q >> shift), col = col0 + (q & (width - 1));
          v[u] = q < total && row < r_end && col < cols ? src[row * cols + col] : T(0.0f);
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int q = q0 + u * kTThreads;
          if (q < total) dst[(q >> shift) * ld + (q & (width - 1))] = v[u];
        }
      }
    }
  }
}

// LoadTSlice for a slice shape known at compile time (the tensor-core
// tiles), 16-byte vectors only: a thread keeps one column and walks rows by
// pointer increments, fully unrolled. The run-time version spends ~20
// instructions per 16-byte copy on 64-bit index arithmetic; here ~6.
template <typename T, int kWidth, int kStep, int kLd>
__device__ __forceinline__ void LoadTSliceFixed(const T* src, int64_t cols, int64_t col0,
                                                int64_t r0, int64_t r_end, T* dst) {
  constexpr int kVpr = kWidth / kVec<T>;
  static_assert(kVpr <= kTThreads && kTThreads % kVpr == 0, "one column per thread");
  constexpr int kRowsPer = kTThreads / kVpr;
  const int v = threadIdx.x % kVpr, r_first = threadIdx.x / kVpr;
  const int64_t col = col0 + static_cast<int64_t>(v) * kVec<T>;
  const int rows_left = static_cast<int>(min(r_end - r0, static_cast<int64_t>(kStep)));
  const int64_t stride = kRowsPer * cols;
  const T* from = src + (r0 + r_first) * cols + col;
  T* to = dst + r_first * kLd + v * kVec<T>;
  const bool col_ok = col < cols;
#pragma unroll
  for (int i = 0; i < (kStep + kRowsPer - 1) / kRowsPer; ++i) {
    const int r = r_first + i * kRowsPer;
    if (kStep % kRowsPer == 0 || r < kStep) {
      const bool valid = col_ok && r < rows_left;
      CpAsync16(to + i * kRowsPer * kLd, valid ? from : src, valid);
    }
    from += stride;
  }
}

// The tensor-core tiles' copy of a slice whose rows are not whole 16-byte
// vectors (or do not start on one): each row's segment of columns
// [col0, col0 + kWidth) is copied as the 16-byte vectors that cover it
// (tile_io.cuh), to stage row r (kLd elements: room for the segment's vectors
// and one more) at the offset the segment has in its first vector
// (CoverOffset). Every copy is then an asynchronous 16-byte one; element by
// element, the values went through registers or 2-8-byte copies and their
// latency was not hidden (TN bf16 1330172 x 11 x 145: 621 us, XLA's dot 448).
// The bf16/f16 tiles gather their fragments from the offsets (tn_half.cuh);
// the f32 and f64 tiles read each lane's rows at their offset (tn_tf32.cuh,
// tn_mma.cuh). Bytes past the segment's end and rows at or past r_end are
// zero-filled. A first vector may start before its segment, never before the
// buffer: XLA aligns buffers to at least 16 bytes, and an unaligned batch entry
// is preceded by the one before.
template <typename T, int kWidth, int kStep, int kLd>
__device__ __forceinline__ void LoadTCover(const T* src, int64_t cols, int64_t col0, int64_t r0,
                                           int64_t r_end, T* dst) {
  constexpr int kVpr = kWidth * static_cast<int>(sizeof(T)) / 16 + 1;
  static_assert(kLd * sizeof(T) >= kVpr * 16, "a stage row holds the covering vectors");
  const int64_t seg_bytes =
      min(static_cast<int64_t>(kWidth), cols - col0) * static_cast<int64_t>(sizeof(T));
  for (int q = threadIdx.x; q < kStep * kVpr; q += kTThreads) {
    const int r = q / kVpr, v = q % kVpr;
    const int64_t row = r0 + r;
    const char* seg = reinterpret_cast<const char*>(src + row * cols + col0);
    const char* from = seg - Low4(seg) + 16 * v;
    const int64_t left = row < r_end ? seg + seg_bytes - from : 0;
    const int bytes = left <= 0 ? 0 : left >= 16 ? 16 : static_cast<int>(left);
    CpAsyncPart16(dst + r * kLd + v * kVec<T>,
                  bytes > 0 ? from : reinterpret_cast<const char*>(src), bytes);
  }
}

// Where LoadTCover puts row `row`'s first element within its stage row.
template <typename T>
__device__ __forceinline__ int CoverOffset(const T* src, int64_t cols, int64_t col0, int64_t row) {
  return static_cast<int>(Low4(src + row * cols + col0) / sizeof(T));
}

// A thread's share of the stages of one slice (A or B) that lie wholly inside
// the matrix, for the tensor-core tiles: column vector `v` of every
// kRowsPer-th row, no bounds to test. Set up once per block, so a stage costs
// a multiply for its first row, then one pointer add and one copy per
// vector. LoadTSliceFixed spent ~170 instructions per warp and stage on
// predicates and 64-bit index arithmetic (Nsight Compute), a quarter of
// the kernel's instructions at 64 x 64.
template <typename T, int kWidth, int kStep, int kLd>
struct TSliceCopier {
  static constexpr int kVpr = kWidth / kVec<T>;
  static constexpr int kRowsPer = kTThreads / kVpr;
  static constexpr int kCopies = (kStep + kRowsPer - 1) / kRowsPer;
  static_assert(kVpr <= kTThreads && kTThreads % kVpr == 0, "one column per thread");
  const T* first;        // this thread's element of the split's first row
  int64_t stride;        // kRowsPer rows
  int64_t stage_stride;  // kStep rows
  int to;                // this thread's element of a stage
  bool last;             // whether the thread has a kCopies-th row (kStep % kRowsPer != 0)

  __device__ __forceinline__ void Init(const T* src, int64_t cols, int64_t col0, int64_t r_begin) {
    const int v = threadIdx.x % kVpr, r = threadIdx.x / kVpr;
    first = src + (r_begin + r) * cols + col0 + v * kVec<T>;
    stride = kRowsPer * cols;
    stage_stride = kStep * cols;
    to = r * kLd + v * kVec<T>;
    last = r + (kCopies - 1) * kRowsPer < kStep;
  }
  // Stage `s` of the split, all kStep rows below r_end.
  __device__ __forceinline__ void Copy(int64_t s, T* stage) const {
    const T* from = first + s * stage_stride;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      if (kStep % kRowsPer == 0 || i < kCopies - 1 || last) {
        CpAsync16(stage + to + i * kRowsPer * kLd, from, true);
      }
      from += stride;
    }
  }
};

// One pipeline stage: the A slice (step rows of tile_m + pad) followed by the
// B slice (step rows of tile_n + pad). Whole-width tiles make each slice one
// contiguous run of global memory.
template <typename T>
__device__ __forceinline__ void LoadTStage(const SplitArgs& p, const T* a, const T* b, int64_t p0,
                                           int64_t q0, int64_t r0, int64_t r_end, int pad,
                                           T* stage) {
  const int step = static_cast<int>(p.step);
  const int tm = static_cast<int>(p.tile_m), tn = static_cast<int>(p.tile_n);
  LoadTSlice<T>(a, p.m, p0, tm, r0, r_end, step, tm + pad, p.vec_ok, stage);
  LoadTSlice<T>(b, p.n, q0, tn, r0, r_end, step, tn + pad, p.vec_ok, stage + step * (tm + pad));
}

// The tensor-core kernels (tn_mma.cuh, tn_tf32.cuh) are compiled per output
// tile: with strides, stage length and copy counts known, every shared-memory
// address in their inner loops is a base register plus an immediate and the
// stage copies unroll (the first TF32 version, with run-time shapes, issued
// 131 instructions per contraction row at 64 x 64 and ran at 66% of the read
// ceiling).
// A TM x TN tile is cut into 16 x 8 MMA tiles (f64's 16-row DMMA, TF32's
// m16n8k8, bf16/f16's m16n8k16), RW x CW of them per warp, starting at tile
// `first` in row-major order; RW > 1 only where CW spans a whole row of them.
// Stage rows are padded by kTMmaPad elements.
template <typename T, int TM, int TN>
struct TMmaTile {
  static constexpr int kMM = 16;
  static constexpr int kPerWarp = TM * TN / (kMM * 8) / (kTThreads / 32);
  static constexpr int kTileCols = TN / 8;
  static constexpr int kCW = kPerWarp <= kTileCols ? kPerWarp : kTileCols;
  static constexpr int kRW = kPerWarp / kCW;
  static constexpr int kLda = TM + kTMmaPad, kLdb = TN + kTMmaPad;
  static constexpr int kStep = static_cast<int>(TMmaStep(sizeof(T), TM, TN));
  static constexpr int kStageElems = kStep * (kLda + kLdb);
  static_assert(TUsesMma(sizeof(T), TM, TN), "TUsesMma admits this tile");
  static_assert(kRW * kCW == kPerWarp && kTileCols % kCW == 0 && (kRW == 1 || kCW == kTileCols),
                "TUsesMma admits only tiles the 8 warps cover exactly");
  // Top-left corner of this warp's first MMA tile.
  __device__ __forceinline__ static int Row0(int warp) { return warp * kPerWarp / kTileCols * kMM; }
  __device__ __forceinline__ static int Col0(int warp) { return warp * kPerWarp % kTileCols * 8; }
};

// acc += part, entry by entry (the m16n8 kernels close each stage's chain
// of MMAs with this f32 add, rounded to nearest).
template <int RW, int CW>
__device__ __forceinline__ void AddTiles(float (&acc)[RW][CW][4], const float (&part)[RW][CW][4]) {
#pragma unroll
  for (int i = 0; i < RW; ++i) {
#pragma unroll
    for (int j = 0; j < CW; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] += part[i][j][e];
    }
  }
}

// One block of a tensor-core TSM2T launch: its output tile, its slice of the
// contraction, and the kTStages-deep ring that streams the slice through
// shared memory. Both tensor-core kernels run the same pipeline:
//
//   TMmaBlock<T, TM, TN> blk(p, ring);
//   for (int64_t it = 0; it < blk.steps; ++it) {
//     const T* stage = blk.Stage(p, it);  // kStep rows of A (kLda apart), then of B
//     ... MMAs over the stage ...
//   }
//   blk.Drain();
template <typename T, int TM, int TN>
struct TMmaBlock {
  using Tile = TMmaTile<T, TM, TN>;
  SplitBlock split;
  int64_t p0, q0;          // corner of the output tile
  int64_t r_begin, r_end;  // contraction rows of this block's split
  int64_t steps;           // stages of kStep rows (the last zero-filled past r_end)
  const T* a;
  const T* b;
  T* ring;
  int row0, col0;  // this warp's first MMA tile (Tile::Row0, Col0)
  int g, t;        // this lane's fragment coordinates: lane / 4, lane % 4
  bool full_cols;  // the tile lies inside the matrices and 16-byte vectors fit
  TSliceCopier<T, TM, Tile::kStep, Tile::kLda> a_copy;
  TSliceCopier<T, TN, Tile::kStep, Tile::kLdb> b_copy;

  // Decodes the block and queues the first kTStages - 1 stages.
  __device__ __forceinline__ TMmaBlock(const SplitArgs& p, T* ring_) : ring(ring_) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    row0 = Tile::Row0(warp);
    col0 = Tile::Col0(warp);
    g = lane / 4;
    t = lane % 4;
    split = DecodeSplitBlock(p);
    p0 = split.tile_m * TM;
    q0 = split.tile_n * TN;
    r_begin = split.split * p.split_len;
    r_end = min(p.k, r_begin + p.split_len);
    a = static_cast<const T*>(p.a) + split.batch * p.a_batch_stride;
    b = static_cast<const T*>(p.b) + split.batch * p.b_batch_stride;
    steps = (r_end - r_begin + Tile::kStep - 1) / Tile::kStep;
    full_cols = p.vec_ok && p0 + TM <= p.m && q0 + TN <= p.n;
    a_copy.Init(a, p.m, p0, r_begin);
    b_copy.Init(b, p.n, q0, r_begin);
    WaitForPrevious();  // launched as a programmatic dependent (launch_split.cuh)
#pragma unroll
    for (int s = 0; s < kTStages - 1; ++s) {
      if (s < steps) Load(p, s);
      CpAsyncCommit();
    }
  }

  // Waits for stage `it` and queues stage it + kTStages - 1 into the slot
  // that stage it - 1 leaves; returns stage `it`.
  __device__ __forceinline__ const T* Stage(const SplitArgs& p, int64_t it) {
    CpAsyncWait<kTStages - 2>();
    __syncthreads();  // stage `it` has landed everywhere; stage it-1 is free
    if (it + kTStages - 1 < steps) Load(p, it + kTStages - 1);
    CpAsyncCommit();
    T* stage = ring + (it % kTStages) * Tile::kStageElems;
    // The MMAs take whole steps: rows past r_end must add -0 (A's -0 times B's
    // zero fill), not +0, or a sum of -0 terms would come out +0.
    const int64_t rows = r_end - r_begin - it * Tile::kStep;
    if (rows < Tile::kStep) {
      for (int64_t q = threadIdx.x; q < (Tile::kStep - rows) * Tile::kLda; q += kTThreads) {
        stage[rows * Tile::kLda + q] = T(-0.0f);
      }
      __syncthreads();
    }
    return stage;
  }

  // The last copies have landed; the sum of the splits may be scheduled.
  __device__ __forceinline__ void Drain() const {
    CpAsyncWait<0>();
    AllowNextToStart();
  }

  // The m16n8 kernels (TF32, bf16/f16): calls f(value, row, col) for each
  // accumulator entry of this lane that lies inside the output. Lane (g, t)
  // holds entries (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1) of each
  // MMA tile.
  template <int RW, int CW, typename F>
  __device__ __forceinline__ void ForEachM16Out(const SplitArgs& p, float (&acc)[RW][CW][4],
                                                F&& f) const {
#pragma unroll
    for (int i = 0; i < RW; ++i) {
#pragma unroll
      for (int j = 0; j < CW; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t row = p0 + row0 + 16 * i + g + 8 * (e / 2);
          const int64_t col = q0 + col0 + 8 * j + 2 * t + e % 2;
          if (row < p.m && col < p.n) f(acc[i][j][e], row, col);
        }
      }
    }
  }

 private:
  // Stage `s` of the ring (A slice then B slice), rows past r_end zero-filled.
  __device__ __forceinline__ void Load(const SplitArgs& p, int64_t s) {
    constexpr int kStep = Tile::kStep, kLda = Tile::kLda, kLdb = Tile::kLdb;
    T* stage = ring + (s % kTStages) * Tile::kStageElems;
    const int64_t r0 = r_begin + s * kStep;
    if (full_cols && r0 + kStep <= r_end) {
      a_copy.Copy(s, stage);
      b_copy.Copy(s, stage + kStep * kLda);
    } else if (p.vec_ok) {
      LoadTSliceFixed<T, TM, kStep, kLda>(a, p.m, p0, r0, r_end, stage);
      LoadTSliceFixed<T, TN, kStep, kLdb>(b, p.n, q0, r0, r_end, stage + kStep * kLda);
    } else {
      LoadTCover<T, TM, kStep, kLda>(a, p.m, p0, r0, r_end, stage);
      LoadTCover<T, TN, kStep, kLdb>(b, p.n, q0, r0, r_end, stage + kStep * kLda);
    }
  }
};

// A thread's E values along one tile edge come in chunks of kChunk elements
// (at most 16 bytes, one shared-memory load each); chunk h of thread t starts
// at h * (edge / kChunks) + kChunk * t. Interleaving the chunks this way puts
// the lanes of a warp on consecutive 16-byte words, free of bank conflicts
// (E contiguous 32-byte runs per thread conflicted two ways).
template <typename T, int E>
struct TOwned {
  static constexpr int kChunk = E * static_cast<int>(sizeof(T)) > 16 ? kVec<T> : E;
  static constexpr int kChunks = E / kChunk;
  __device__ __forceinline__ static int Index(int edge, int t, int i) {
    return (i / kChunk) * (edge / kChunks) + kChunk * t + i % kChunk;
  }
  // This thread's E values of one stage row, as accumulators.
  __device__ __forceinline__ static void Load(const T* row, int edge, int t, AccType<T> (&out)[E]) {
#pragma unroll
    for (int h = 0; h < kChunks; ++h) {
      T v[kChunk];
      const T* src = row + h * (edge / kChunks) + kChunk * t;
      if constexpr (kChunk * sizeof(T) == 16) {
        const uint4 raw = *reinterpret_cast<const uint4*>(src);
        memcpy(v, &raw, 16);
      } else {
        static_assert(kChunk * sizeof(T) == 8, "chunks are 8 or 16 bytes");
        const uint2 raw = *reinterpret_cast<const uint2*>(src);
        memcpy(v, &raw, 8);
      }
#pragma unroll
      for (int e = 0; e < kChunk; ++e) out[h * kChunk + e] = ToAcc(v[e]);
    }
  }
};

// Adds up the row groups' sums of a T block and hands each total to
// store(t, e, sum): t is the thread's index within its group, e the entry of
// its acc in row-major order. The sums go through the ring (`smem`, free once
// the caller's copies have drained) as a groups x outputs matrix: `parts`
// threads per output first add interleaved shares of the groups, then one
// thread per output adds the shares. Three barriers whatever the number of
// groups, in an order fixed by the plan (bitwise reproducible). Pairwise
// rounds took two barriers per halving, and their barriers held 47% of the
// stall samples of TN bf16 6 x 418555 x 3 (Nsight, H200; 128 groups); group 0
// adding all 256 groups of a 4 x 4 tile in turn, a chain of 4096 loads, held
// TN f32 1 x 239600 x 2 at 28.0 us.
template <typename Acc, int R, int C, typename Store>
__device__ __forceinline__ void StoreGroupSums(const Acc (&acc)[R][C], int g, int groups, int t,
                                               int tile_threads, char* smem, Store&& store) {
  constexpr int kCount = R * C;
  Acc* red = reinterpret_cast<Acc*>(smem);
  const int outputs = kCount * tile_threads;  // red[h * outputs + e * tile_threads + t]
  __syncthreads();                            // the ring is free
  if (g < groups) {
#pragma unroll
    for (int e = 0; e < kCount; ++e) red[(g * kCount + e) * tile_threads + t] = acc[e / C][e % C];
  }
  __syncthreads();
  // About sqrt(groups) shares balance the two steps' chains of loads.
  int parts = 1;
  while (parts * parts < groups && 2 * parts * outputs <= kTThreads) parts *= 2;
  for (int x = threadIdx.x; x < parts * outputs; x += kTThreads) {
    const int o = x % outputs, part = x / outputs;
    Acc sum = red[part * outputs + o];
    for (int h = part + parts; h < groups; h += parts) sum += red[h * outputs + o];
    red[part * outputs + o] = sum;  // row `part` is read by this thread alone
  }
  __syncthreads();
  for (int o = threadIdx.x; o < outputs; o += kTThreads) {
    Acc sum = red[o];
    for (int part = 1; part < parts; ++part) sum += red[part * outputs + o];
    store(o % tile_threads, o / tile_threads, sum);
  }
}

// Two blocks per SM at least: left alone, ptxas gave the f64 kernel 204
// registers (one block per SM) and it ran at 47% of the read ceiling.
template <typename T, int E>
__global__ void __launch_bounds__(kTThreads, 2) Tsm2TKernel(const __grid_constant__ SplitArgs p) {
  using Acc = AccType<T>;
  using Own = TOwned<T, E>;
  extern __shared__ __align__(16) char smem[];
  T* ring = reinterpret_cast<T*>(smem);

  const SplitBlock blk = DecodeSplitBlock(p);
  const int64_t p0 = blk.tile_m * p.tile_m, q0 = blk.tile_n * p.tile_n;
  const int64_t r_begin = blk.split * p.split_len;
  const int64_t r_end = min(p.k, r_begin + p.split_len);
  const T* a = static_cast<const T*>(p.a) + blk.batch * p.a_batch_stride;
  const T* b = static_cast<const T*>(p.b) + blk.batch * p.b_batch_stride;

  // This thread's E x E output block (tp, tq) and its row group g.
  const int tm = static_cast<int>(p.tile_m), tn = static_cast<int>(p.tile_n);
  const int tpm = tm / E;
  const int tile_threads = tpm * tn / E;
  const int groups = kTThreads / tile_threads;
  const int g = threadIdx.x / tile_threads;
  const int tp = threadIdx.x % tile_threads % tpm;
  const int tq = threadIdx.x % tile_threads / tpm;
  const int step = static_cast<int>(p.step);
  const int stage_elems = step * (tm + tn);
  const int64_t steps = (r_end - r_begin + step - 1) / step;

  WaitForPrevious();  // launched as a programmatic dependent (launch_split.cuh)
#pragma unroll
  for (int s = 0; s < kTStages - 1; ++s) {
    if (s < steps)
      LoadTStage<T>(p, a, b, p0, q0, r_begin + s * step, r_end, 0, ring + s * stage_elems);
    CpAsyncCommit();
  }

  Acc acc[E][E];
  InitSums(acc, p.k);
  for (int64_t it = 0; it < steps; ++it) {
    CpAsyncWait<kTStages - 2>();
    __syncthreads();  // stage `it` has landed everywhere; stage it-1 is free
    const int64_t ip = it + kTStages - 1;
    if (ip < steps) {
      LoadTStage<T>(p, a, b, p0, q0, r_begin + ip * step, r_end, 0,
                    ring + (ip % kTStages) * stage_elems);
    }
    CpAsyncCommit();
    const T* sa = ring + (it % kTStages) * stage_elems;
    const T* sb = sa + step * tm;
    // Not the zero-filled rows past r_end: +0 * +0 would turn a sum of -0 into +0.
    const int64_t rows = min(static_cast<int64_t>(step), r_end - r_begin - it * step);
    for (int r = g; r < rows; r += groups) {
      Acc x[E], y[E];
      Own::Load(sa + r * tm, tm, tp, x);
      Own::Load(sb + r * tn, tn, tq, y);
#pragma unroll
      for (int i = 0; i < E; ++i) {
#pragma unroll
        for (int j = 0; j < E; ++j) acc[i][j] = fma(x[i], y[j], acc[i][j]);
      }
    }
  }
  CpAsyncWait<0>();
  AllowNextToStart();

  // Entry e of thread t's block, in row-major order, is C[row, col].
  auto store = [&](int t, int e, Acc v) {
    const int64_t row = p0 + Own::Index(tm, t % tpm, e / E);
    const int64_t col = q0 + Own::Index(tn, t / tpm, e % E);
    if (row < p.m && col < p.n) StoreSplitOut<T>(p, blk, row, col, v);
  };
  if (groups > 1) {
    StoreGroupSums(acc, g, groups, threadIdx.x % tile_threads, tile_threads, smem, store);
    return;
  }
#pragma unroll
  for (int e = 0; e < E * E; ++e) store(threadIdx.x, e, acc[e / E][e % E]);
}

}  // namespace tsm2
