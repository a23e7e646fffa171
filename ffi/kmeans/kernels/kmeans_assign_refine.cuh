// f32 assignment at f32 accuracy from one TF32 product: the warpgroup
// kernel ranks with TF32 operands (KmeansAssignWgKernel<float, true>) and
// keeps, per row, its three lowest keys; these kernels then settle every
// row with exact f32 dots on CUDA cores.
//
// Why: three split TF32 products (the mma.sync kernel's f32 mode) cost three
// times the tensor-core work of one and keep f32 on the slower kernel. But a
// TF32 ranking can differ from the exact one only where two keys lie within
// TF32's rounding of each other, and that rounding is bounded per row:
//
//   |key~ - key| <= 2 (|x~ . c~ - x . c| + e_acc |x~| |c~|) + e_fma
//   |x~ . c~ - x . c| <= |x - x~| |c| + |x| |c - c~| + |x - x~| |c - c~|
//
// (Cauchy-Schwarz; x~, c~ the operands rounded to TF32; e_acc the tensor
// cores' accumulation over d in steps of 8, taken as (d / 8 + 2) 2^-21
// relative; e_fma the key's own rounding; an absolute term for flushed
// subnormal products). With |c| and |c - c~| at their largest over the
// centroids (KmeansCsqKernel) and |x|, |x - x~| measured per row, only
// centroids whose TF32 keys lie within twice the bound of the row's lowest
// can win the exact ranking. Where the row's second lowest lies outside
// that window the TF32 winner stands and only its distance is recomputed
// exactly (KmeansRefineKernel, which reads X once more); where the third
// does, one more exact dot settles the two lowest; the other rows are
// ranked again against every centroid with exact f32 dots
// (KmeansRecomputeKernel). Labels and distances are then those of an exact
// f32 ranking, up to the order of the dots' additions; the results do not
// depend on the order in which rows reach the list.
#pragma once

#include <cstdint>

#include "ffi/kmeans/kernels/kmeans_assign.cuh"

namespace tsm2 {

struct KmeansRefineArgs {
  const float* x;            // [n, d], rows of whole 16-byte vectors
  const float* c;            // [k, d] (not rounded)
  const float* x_sq;         // [n]
  const float* csq;          // [k]
  const float* gap2;         // [n]: second lowest TF32 key less the lowest
  const float* gap3;         // [n]: third lowest less the lowest
  const int32_t* runner_up;  // [n]: the second lowest's centroid
  const float* norms_max;    // largest ||c||^2 and ||c - tf32(c)||^2 (KmeansCsqKernel)
  int32_t* labels;           // [n]: the TF32 winner in, the result out
  float* mind;               // [n]
  int32_t* list;             // [n]: rows left undecided
  int32_t* count;            // the list's length (zeroed before the launch)
  unsigned long long* best;  // [n]: per list entry, its best (key, centroid), packed
  int64_t n;
  int d, k;
  int lanes;  // lanes per row in KmeansRefineKernel (KmeansRefineLanes)
};

// Lanes per row in KmeansRefineKernel: a power of two giving each lane about
// four 16-byte vectors of the row. Its rows are independent chains of
// dependent loads (label, then centroid), so what sets its speed is how
// many rows are in flight: a warp per row would hold one per warp, with half
// its lanes idle at d = 64, and runs 4x slower there (H200).
inline int KmeansRefineLanes(int d) {
  const int vecs = d / 4;
  int lanes = 1;
  while (lanes < 32 && 4 * lanes < vecs) lanes *= 2;
  return lanes;
}

__device__ __forceinline__ float KmeansTf32Round(float v) {
  return __uint_as_float((__float_as_uint(v) + 0x1000u) & 0xffffe000u);
}

// The most rounding can have moved a row's TF32 key from its exact value:
// xn = |x|, rx = |x - x~|, cn and rc the centroids' largest |c| and
// |c - c~|. The factor 1.001 covers the f32 roundings of the norms
// themselves (at most d 2^-24 relative).
__device__ __forceinline__ float KmeansTf32KeyBound(float xn, float rx, float cn, float rc, int d) {
  const float e_acc = static_cast<float>(d / 8 + 2) * 0x1p-21f;
  const float dot = rx * cn + xn * rc + rx * rc + e_acc * (xn + rx) * (cn + rc);
  const float key = 2.0f * dot + 0x1p-23f * (cn * cn + 2.0f * xn * cn);
  return 1.001f * key + static_cast<float>(4 * d + 16) * 0x1p-126f;
}

// A group's exact dot of row `xr` with centroid `cr` (vecs 16-byte vectors),
// in each of its `lanes` lanes (`sub` this lane's place, `mask` the group's
// lanes of the warp); with kNorms also |x|^2 and |x - x~|^2.
template <bool kNorms>
__device__ __forceinline__ void KmeansGroupDot4(const float4* xr, const float4* cr, int vecs,
                                                int lanes, int sub, unsigned mask, float& dot,
                                                float& xx, float& rr) {
  dot = xx = rr = 0.0f;
#pragma unroll 4
  for (int v = sub; v < vecs; v += lanes) {
    const float4 a = xr[v], b = cr[v];
    const float e[4] = {a.x, a.y, a.z, a.w}, f[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      dot = fmaf(e[i], f[i], dot);
      if constexpr (kNorms) {
        xx = fmaf(e[i], e[i], xx);
        const float r = e[i] - KmeansTf32Round(e[i]);
        rr = fmaf(r, r, rr);
      }
    }
  }
  for (int off = lanes / 2; off > 0; off /= 2) {
    dot += __shfl_xor_sync(mask, dot, off);
    if constexpr (kNorms) {
      xx += __shfl_xor_sync(mask, xx, off);
      rr += __shfl_xor_sync(mask, rr, off);
    }
  }
}

// A listed row's best (key, centroid) as one 64-bit word whose unsigned
// order is KmeansLexMin's: the key's bits made to sort as the floats do
// (-0 taken as +0, which compares equal to it) above the index, so that
// atomicMin keeps the lower key and, among equal keys, the lower index.
constexpr unsigned long long kRecomputeNone = ~0ull;  // no centroid yet

__device__ __forceinline__ unsigned long long KmeansPackKey(float key, int32_t idx) {
  const uint32_t u = __float_as_uint(key + 0.0f);
  const uint32_t ordered = (u & 0x80000000u) != 0 ? ~u : u | 0x80000000u;
  return (static_cast<unsigned long long>(ordered) << 32) | static_cast<uint32_t>(idx);
}

__device__ __forceinline__ void KmeansUnpackKey(unsigned long long packed, float& key,
                                                int32_t& idx) {
  if (packed == kRecomputeNone) {
    key = KmeansPosInf();
    idx = kAssignNoLabel;
    return;
  }
  const uint32_t ordered = static_cast<uint32_t>(packed >> 32);
  key = __uint_as_float((ordered & 0x80000000u) != 0 ? ordered & 0x7fffffffu : ~ordered);
  idx = static_cast<int32_t>(packed & 0xffffffffu);
}

// A group of p.lanes lanes per row: the exact dot with the row's TF32
// winner, and |x| and |x - x~| for its bound. A centroid whose TF32 key lies
// more than twice the bound above the winner's cannot win the exact ranking.
// So a row whose second lowest key does takes its exact distance; one whose
// third lowest does is settled between its two lowest by one more exact dot;
// the others go on the list. Rows whose ||x||^2 is not finite are
// KmeansFixupKernel's. A group's rows take their own branches: its
// shuffles name its lanes only.
__global__ void __launch_bounds__(256)
    KmeansRefineKernel(const __grid_constant__ KmeansRefineArgs p) {
  const int lanes = p.lanes, sub = threadIdx.x % lanes;
  const unsigned mask =
      lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u) << (threadIdx.x % 32 - sub);
  const float cn = sqrtf(p.norms_max[0]), rc = sqrtf(p.norms_max[1]);
  const int64_t groups = int64_t{gridDim.x} * blockDim.x / lanes;
  const int vecs = p.d / 4;
  for (int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / lanes; row < p.n;
       row += groups) {
    const float xs = p.x_sq[row];
    if (!isfinite(xs)) continue;
    const float gap2 = p.gap2[row], gap3 = p.gap3[row];
    const float4* xr = reinterpret_cast<const float4*>(p.x + row * p.d);
    int32_t lab = p.labels[row];
    float dot, xx, rr;
    KmeansGroupDot4<true>(xr, reinterpret_cast<const float4*>(p.c + int64_t{lab} * p.d), vecs,
                          lanes, sub, mask, dot, xx, rr);
    const float window = 2.0f * KmeansTf32KeyBound(sqrtf(xx), sqrtf(rr), cn, rc, p.d);
    float key = fmaf(-2.0f, dot, p.csq[lab]);
    if (!(gap2 > window)) {  // NaN: no centroid ranked
      if (!(gap3 > window)) {
        if (sub == 0) {
          const int32_t at = atomicAdd(p.count, 1);
          p.list[at] = static_cast<int32_t>(row);
          p.best[at] = kRecomputeNone;
        }
        continue;
      }
      const int32_t two = p.runner_up[row];
      float dot2, unused0, unused1;
      KmeansGroupDot4<false>(xr, reinterpret_cast<const float4*>(p.c + int64_t{two} * p.d), vecs,
                             lanes, sub, mask, dot2, unused0, unused1);
      KmeansLexMin(key, lab, fmaf(-2.0f, dot2, p.csq[two]), two);
    }
    if (sub == 0) {
      p.labels[row] = lab;
      p.mind[row] = fmaxf(xs + key, 0.0f);
    }
  }
}

// The listed rows ranked against every centroid with exact f32 dots: an
// item is 32 listed rows against a run of the centroids, both staged in
// shared memory 32 elements at a time (16-byte loads, stored transposed so
// that a thread's 2 rows x 4 centroids are one 8-byte and one 16-byte read
// per element), and each item's best of a row joins the row's by a 64-bit
// atomicMin (KmeansPackKey). The list is short where few rows are close
// calls: its centroids are then split into runs of whole 64-centroid tiles,
// as many runs a batch as there are blocks for it (down to one tile a run),
// so that a short list still spreads over every SM. Each dot adds its
// products in element order and the minimum does not depend on which item
// lands first, so results are reproducible bit for bit. Centroids with a
// non-finite ||c||^2 are left to KmeansFixupKernel, as the tensor cores
// leave them.
constexpr int kRecomputeRows = 32, kRecomputeCents = 64, kRecomputeElems = 32;

__global__ void __launch_bounds__(256)
    KmeansRecomputeKernel(const __grid_constant__ KmeansRefineArgs p) {
  __shared__ __align__(16) float xs_t[kRecomputeElems][kRecomputeRows + 2];
  __shared__ __align__(16) float cs_t[kRecomputeElems][kRecomputeCents + 4];
  __shared__ int32_t rows[kRecomputeRows];
  const int tid = threadIdx.x;
  const int ty = tid / 16, tx = tid % 16;  // rows 2 ty, 2 ty + 1; centroids 4 tx .. 4 tx + 3
  const int ld_r = tid / 8, ld_e = (tid % 8) * 4;  // a thread's 16-byte loads of a chunk
  const int64_t count = *p.count;
  const int64_t batches = (count + kRecomputeRows - 1) / kRecomputeRows;
  if (batches == 0) return;
  const int64_t tiles = (p.k + kRecomputeCents - 1) / kRecomputeCents;
  const int64_t wanted = gridDim.x / batches;
  const int64_t per_run = (tiles + (wanted > 1 ? wanted : 1) - 1) / (wanted > 1 ? wanted : 1);
  const int64_t runs = (tiles + per_run - 1) / per_run;
  for (int64_t item = blockIdx.x; item < batches * runs; item += gridDim.x) {
    const int64_t b = item / runs;
    const int c_begin = static_cast<int>(item % runs * per_run * kRecomputeCents);
    const int c_end = static_cast<int>(
        c_begin + per_run * kRecomputeCents < p.k ? c_begin + per_run * kRecomputeCents : p.k);
    __syncthreads();  // the previous item's reads of rows[] are done
    if (tid < kRecomputeRows) {
      const int64_t at = b * kRecomputeRows + tid;
      rows[tid] = at < count ? p.list[at] : -1;
    }
    float best_key[2] = {KmeansPosInf(), KmeansPosInf()};
    int32_t best_idx[2] = {kAssignNoLabel, kAssignNoLabel};
    for (int c0 = c_begin; c0 < c_end; c0 += kRecomputeCents) {
      float acc[2][4] = {};
      for (int e0 = 0; e0 < p.d; e0 += kRecomputeElems) {
        __syncthreads();                    // rows[] written; the last chunk's reads done
        const bool in_d = e0 + ld_e < p.d;  // d is a multiple of 4
        {
          const int32_t row = rows[ld_r];
          const float4 v =
              row >= 0 && in_d
                  ? *reinterpret_cast<const float4*>(p.x + int64_t{row} * p.d + e0 + ld_e)
                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          xs_t[ld_e][ld_r] = v.x;
          xs_t[ld_e + 1][ld_r] = v.y;
          xs_t[ld_e + 2][ld_r] = v.z;
          xs_t[ld_e + 3][ld_r] = v.w;
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int cc = ld_r + 32 * half, cent = c0 + cc;
          const float4 v =
              cent < c_end && in_d
                  ? *reinterpret_cast<const float4*>(p.c + int64_t{cent} * p.d + e0 + ld_e)
                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          cs_t[ld_e][cc] = v.x;
          cs_t[ld_e + 1][cc] = v.y;
          cs_t[ld_e + 2][cc] = v.z;
          cs_t[ld_e + 3][cc] = v.w;
        }
        __syncthreads();
#pragma unroll 8
        for (int e = 0; e < kRecomputeElems; ++e) {
          const float2 a = *reinterpret_cast<const float2*>(&xs_t[e][2 * ty]);
          const float4 cv = *reinterpret_cast<const float4*>(&cs_t[e][4 * tx]);
          const float cj[4] = {cv.x, cv.y, cv.z, cv.w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            acc[0][j] = fmaf(a.x, cj[j], acc[0][j]);
            acc[1][j] = fmaf(a.y, cj[j], acc[1][j]);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int cent = c0 + 4 * tx + j;
        const float cq = cent < c_end ? p.csq[cent] : KmeansPosInf();
        if (!isfinite(cq)) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          KmeansLexMin(best_key[h], best_idx[h], fmaf(-2.0f, acc[h][j], cq), cent);
        }
      }
    }
    // The 16 threads of a row pair (a half warp) agree.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int off = 8; off > 0; off /= 2) {
        const float ok = __shfl_xor_sync(0xffffffffu, best_key[h], off);
        const int32_t oi = __shfl_xor_sync(0xffffffffu, best_idx[h], off);
        KmeansLexMin(best_key[h], best_idx[h], ok, oi);
      }
      const int64_t at = b * kRecomputeRows + 2 * ty + h;
      if (tx == 0 && at < count && best_idx[h] != kAssignNoLabel) {
        atomicMin(p.best + at, KmeansPackKey(best_key[h], best_idx[h]));
      }
    }
  }
}

// Each listed row's label and distance from its best (key, centroid), once
// every item of KmeansRecomputeKernel has joined it.
__global__ void __launch_bounds__(256)
    KmeansRecomputeWriteKernel(const __grid_constant__ KmeansRefineArgs p) {
  const int64_t count = *p.count;
  for (int64_t at = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; at < count;
       at += int64_t{gridDim.x} * blockDim.x) {
    const int32_t row = p.list[at];
    float key;
    int32_t idx;
    KmeansUnpackKey(p.best[at], key, idx);
    KmeansAssignWrite(p.x_sq[row], key, idx, p.labels + row, p.mind + row);
  }
}

}  // namespace tsm2
