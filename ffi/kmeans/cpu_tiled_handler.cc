// The CPU references of tsm2_kmeans_assign and tsm2_kmeans_sums, behind the
// same signatures and validation as the CUDA targets, so that the CPU test
// suite runs the k-means step for any k end to end.
//
// The assignment uses the CUDA kernels' formulas (the ranking key, ties and
// NaN, TF32 rounding of both operands in the fast mode, exact
// products for rows and centroids with a non-finite norm), not their order
// of addition. The sums follow the plan of the attributes to the order of
// every addition (kernels/kmeans_sums.cuh for buckets of clusters,
// kernels/kmeans_sums_sorted.cuh for sorted rows), so that the CUDA target
// gives the same bits: that is what the GPU tests check.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "ffi/common/cpu_elements.h"
#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"
#include "ffi/kmeans/handlers.h"
#include "ffi/kmeans/tiled_plan.h"
#include "ffi/kmeans/tiled_problem.h"

namespace tsm2 {
namespace {

// Round to nearest TF32 as the CUDA kernel does: add half of the 13 dropped
// bits, clear them.
float RoundTf32(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  b = (b + 0x1000u) & 0xffffe000u;
  std::memcpy(&v, &b, 4);
  return v;
}

float Dot(const float* a, const float* b, int64_t d) {
  float dot = 0.0f;
  for (int64_t e = 0; e < d; ++e) dot = std::fma(a[e], b[e], dot);
  return dot;
}

// The fix-up kernel's ranking key: the distance, NaN first (-1).
float ExactKey(float xs, float dot, float csq) {
  float dist = (xs - 2.0f * dot) + csq;
  if (dist < 0.0f) dist = 0.0f;
  return dist != dist ? -1.0f : dist;
}

template <ElemType E>
void AssignReference(const KmeansAssignProblem& p, const void* x, const float* x_sq, const void* c,
                     int32_t* labels, float* mind) {
  using In = HostElem<E>;
  const int64_t n = p.n, d = p.d, k = p.k;
  const bool tf32 = E == ElemType::kF32 && p.precision == KmeansPrecision::kTensorFloat32;
  std::vector<float> cc(k * d), cr(k * d), csq(k, 0.0f), xr(d), xt(d);
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t e = 0; e < d; ++e) {
      const float v = static_cast<float>(In::Load(c, j * d + e));
      cc[j * d + e] = v;
      cr[j * d + e] = tf32 ? RoundTf32(v) : v;
      csq[j] = std::fma(v, v, csq[j]);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const float xs = x_sq[i];
    for (int64_t e = 0; e < d; ++e) {
      xr[e] = static_cast<float>(In::Load(x, i * d + e));
      xt[e] = tf32 ? RoundTf32(xr[e]) : xr[e];
    }
    float best = 0.0f;
    int32_t label = 0;
    if (!std::isfinite(xs)) {
      // The fix-up ranks such a row against every centroid with exact products.
      for (int64_t j = 0; j < k; ++j) {
        const float key = ExactKey(xs, Dot(xr.data(), &cc[j * d], d), csq[j]);
        if (j == 0 || key < best) {
          best = key;
          label = static_cast<int32_t>(j);
        }
      }
    } else {
      // The tensor cores rank the centroids with a finite norm by ||c||^2 - 2 x.c
      // (lowest index on ties; none ranked: label 0, distance +Inf) ...
      float bkey = std::numeric_limits<float>::infinity();
      int32_t blab = -1;
      for (int64_t j = 0; j < k; ++j) {
        if (!std::isfinite(csq[j])) continue;
        const float key = std::fma(-2.0f, Dot(xt.data(), &cr[j * d], d), csq[j]);
        if (key < bkey) {
          bkey = key;
          blab = static_cast<int32_t>(j);
        }
      }
      best = std::fmax(xs + bkey, 0.0f);
      label = blab < 0 ? 0 : blab;
      // ... then the fix-up takes in the others with exact products.
      for (int64_t j = 0; j < k; ++j) {
        if (std::isfinite(csq[j])) continue;
        const float key = ExactKey(xs, Dot(xr.data(), &cc[j * d], d), csq[j]);
        if (key < best || (key == best && j < label)) {
          best = key;
          label = static_cast<int32_t>(j);
        }
      }
    }
    labels[i] = label;
    mind[i] = best < 0.0f ? std::numeric_limits<float>::quiet_NaN() : best;
  }
}

// The sums of kernels/kmeans_sums.cuh, addition for addition.
template <ElemType E, typename Acc>
void SumsReference(const KmeansSumsProblem& p, const void* x, const Acc* w, const int32_t* labels,
                   const Acc* mind, Acc* sums, Acc* counts, Acc* inertia) {
  using In = HostElem<E>;
  const KmeansSumsPlan& plan = p.plan;
  const int64_t n = p.n, d = p.d, k = p.k, bucket = plan.bucket, chunks = plan.chunks;
  const int groups = plan.groups;
  constexpr int kWarps = kSumsThreads / 32;
  std::vector<Acc> partials(chunks > 1 ? plan.buckets * chunks * plan.partial_elems : 0);
  std::vector<Acc> s, cnt, xv(d);
  std::vector<int64_t> list;
  for (int64_t b = 0; b < plan.buckets; ++b) {
    const int64_t c0 = b * bucket, kb = k - c0 < bucket ? k - c0 : bucket;
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t r0 = KmeansChunkBegin(n, chunks, ch), r1 = KmeansChunkBegin(n, chunks, ch + 1);
      s.assign(groups * kb * d, Acc(0));
      cnt.assign(groups * kb, Acc(0));
      Acc lane_in[kSumsThreads] = {};
      for (int64_t tile0 = r0; tile0 < r1; tile0 += kSumsTileRows) {
        list.clear();
        for (int u = 0; u < kSumsLabelsPerThread; ++u) {
          for (int t = 0; t < kSumsThreads; ++t) {
            const int64_t row = tile0 + u * kSumsThreads + t;
            if (row >= r1) continue;
            if (b == 0) lane_in[t] = std::fma(w[row], mind[row], lane_in[t]);
            if (labels[row] >= c0 && labels[row] < c0 + kb) list.push_back(row);
          }
        }
        for (size_t e = 0; e < list.size(); ++e) {
          const int64_t row = list[e], l = labels[row] - c0, g = static_cast<int64_t>(e) % groups;
          for (int64_t col = 0; col < d; ++col)
            xv[col] = static_cast<Acc>(In::Load(x, row * d + col));
          Acc* mine = &s[(g * kb + l) * d];
          for (int64_t col = 0; col < d; ++col) mine[col] = std::fma(w[row], xv[col], mine[col]);
          cnt[g * kb + l] += w[row];
        }
      }
      Acc* part = chunks > 1 ? &partials[(b * chunks + ch) * plan.partial_elems] : nullptr;
      for (int64_t l = 0; l < kb; ++l) {
        for (int64_t col = 0; col < d; ++col) {
          Acc tot = s[l * d + col];
          for (int g = 1; g < groups; ++g) tot += s[(g * kb + l) * d + col];
          (part ? part[l * d + col] : sums[(c0 + l) * d + col]) = tot;
        }
        Acc tot = cnt[l];
        for (int g = 1; g < groups; ++g) tot += cnt[g * kb + l];
        (part ? part[bucket * d + l] : counts[c0 + l]) = tot;
      }
      if (b == 0) {
        // The warps' butterflies, then the warps in order.
        for (int off = 16; off > 0; off /= 2) {
          Acc next[kSumsThreads];
          for (int t = 0; t < kSumsThreads; ++t) next[t] = lane_in[t] + lane_in[t ^ off];
          std::memcpy(lane_in, next, sizeof next);
        }
        Acc tot = lane_in[0];
        for (int v = 1; v < kWarps; ++v) tot += lane_in[v * 32];
        (part ? part[bucket * d + bucket] : *inertia) = tot;
      }
    }
  }
  if (chunks == 1) return;
  const int64_t per = plan.partial_elems;
  auto reduce = [&](int64_t b, int64_t off) {
    const Acc* q = &partials[b * chunks * per + off];
    Acc tot = q[0];
    for (int64_t ch = 1; ch < chunks; ++ch) tot += q[ch * per];
    return tot;
  };
  for (int64_t c = 0; c < k; ++c) {
    for (int64_t col = 0; col < d; ++col)
      sums[c * d + col] = reduce(c / bucket, (c % bucket) * d + col);
    counts[c] = reduce(c / bucket, bucket * d + c % bucket);
  }
  *inertia = reduce(0, bucket * d + bucket);
}

// The warps' butterfly of kernels/kmeans_sums*.cuh over `lanes` (a multiple
// of 32): every lane ends with its warp's sum, added in the same order.
template <typename Acc>
void Butterfly(Acc* lanes, int count) {
  std::vector<Acc> next(count);
  for (int off = 16; off > 0; off /= 2) {
    for (int t = 0; t < count; ++t) next[t] = lanes[t] + lanes[t ^ off];
    std::copy(next.begin(), next.end(), lanes);
  }
}

// The sorted path of kernels/kmeans_sums_sorted.cuh, addition for addition:
// the rows sorted by label (stably), then pieces of `piece` sorted positions
// added in order a cluster at a time, the partials of clusters that cross a
// unit's ends added by merges of kSumsMergeFan units in unit order, and the
// inertia over the plan's chunks.
template <ElemType E, typename Acc>
void SortedSumsReference(const KmeansSumsProblem& p, const void* x, const Acc* w,
                         const int32_t* labels, const Acc* mind, Acc* sums, Acc* counts,
                         Acc* inertia) {
  using In = HostElem<E>;
  const int64_t n = p.n, d = p.d, k = p.k, piece = p.plan.piece, chunks = p.plan.chunks;
  std::vector<int64_t> start(k + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] >= 0 && labels[i] < k) ++start[labels[i] + 1];
  }
  for (int64_t c = 0; c < k; ++c) start[c + 1] += start[c];
  const int64_t m = start[k];
  std::vector<int32_t> keys(m);
  std::vector<int64_t> rows(m);
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= k) continue;
    const int64_t at = start[labels[i]]++;
    keys[at] = labels[i];
    rows[at] = i;
  }
  std::fill(sums, sums + k * d, Acc(0));
  std::fill(counts, counts + k, Acc(0));

  // A unit's two slots: the cluster entering it from before (0) and the one
  // leaving it after, having begun inside (1).
  struct Slot {
    int32_t id = -1;
    std::vector<Acc> s;
    Acc w = 0;
  };
  std::vector<Slot> below, here;
  std::vector<Acc> acc(d);
  Acc cnt = 0;
  auto flush = [&](int64_t u, int32_t c, bool head, bool tail) {
    if (!head && !tail) {
      std::copy(acc.begin(), acc.end(), sums + c * d);
      counts[c] = cnt;
      return;
    }
    Slot& slot = here[2 * u + (head ? 0 : 1)];
    slot.id = c;
    slot.s = acc;
    slot.w = cnt;
  };
  auto reset = [&] {
    std::fill(acc.begin(), acc.end(), Acc(0));
    cnt = 0;
  };
  int64_t units = CeilDiv(m, piece);
  here.assign(2 * units, Slot{});
  for (int64_t u = 0; u < units; ++u) {
    const int64_t p0 = u * piece, p1 = std::min(p0 + piece, m);
    const int32_t before = p0 > 0 ? keys[p0 - 1] : -1, after = p1 < m ? keys[p1] : -1;
    int32_t cur = keys[p0];
    bool head = cur == before;
    reset();
    for (int64_t pos = p0; pos < p1; ++pos) {
      if (keys[pos] != cur) {
        flush(u, cur, head, false);
        cur = keys[pos];
        head = false;
        reset();
      }
      const int64_t row = rows[pos];
      for (int64_t col = 0; col < d; ++col) {
        acc[col] = std::fma(w[row], static_cast<Acc>(In::Load(x, row * d + col)), acc[col]);
      }
      cnt += w[row];
    }
    flush(u, cur, head, cur == after);
  }
  for (int64_t sub = piece; sub < m; sub *= kSumsMergeFan) {
    const int64_t unit = sub * kSumsMergeFan, subs = CeilDiv(m, sub);
    below.swap(here);
    units = CeilDiv(m, unit);
    here.assign(2 * units, Slot{});
    for (int64_t u = 0; u < units; ++u) {
      const int64_t g0 = u * unit, g1 = std::min(g0 + unit, m);
      const int32_t before = g0 > 0 ? keys[g0 - 1] : -1, after = g1 < m ? keys[g1] : -1;
      int32_t cur = -1;
      bool head = false;
      reset();
      const int64_t j1 = std::min(u * kSumsMergeFan + kSumsMergeFan, subs);
      for (int64_t sl = 2 * u * kSumsMergeFan; sl < 2 * j1; ++sl) {
        const Slot& e = below[sl];
        if (e.id < 0) continue;
        if (e.id != cur) {
          if (cur >= 0) flush(u, cur, head, false);
          cur = e.id;
          head = cur == before;
          reset();
        }
        for (int64_t col = 0; col < d; ++col) acc[col] += e.s[col];
        cnt += e.w;
      }
      if (cur >= 0) flush(u, cur, head, cur == after);
    }
  }

  // The inertia: warp c's lanes over chunk c, its butterfly; thread t over
  // the chunks t, t + 256, ...; the block's warps' butterflies, in order.
  std::vector<Acc> threads(kSumsSortedThreads, Acc(0));
  Acc lanes[32];
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t r0 = KmeansChunkBegin(n, chunks, c), r1 = KmeansChunkBegin(n, chunks, c + 1);
    std::fill(lanes, lanes + 32, Acc(0));
    for (int64_t r = r0; r < r1; ++r)
      lanes[(r - r0) % 32] = std::fma(w[r], mind[r], lanes[(r - r0) % 32]);
    Butterfly(lanes, 32);
    threads[c % kSumsSortedThreads] += lanes[0];
  }
  Butterfly(threads.data(), kSumsSortedThreads);
  Acc tot = threads[0];
  for (int v = 1; v < kSumsSortedThreads / 32; ++v) tot += threads[v * 32];
  *inertia = tot;
}

ffi::Error KmeansAssignCpuImpl(ffi::AnyBuffer x, ffi::AnyBuffer x_sq, ffi::AnyBuffer c,
                               ffi::Result<ffi::AnyBuffer> labels, ffi::Result<ffi::AnyBuffer> mind,
                               ffi::Result<ffi::AnyBuffer> /*workspace*/, int32_t precision) {
  constexpr std::string_view kOp = "tsm2_kmeans_assign (cpu)";
  KmeansAssignProblem p;
  TSM2_FFI_RETURN_IF_ERROR(DecodeKmeansAssign(kOp, x, x_sq, c, *labels, *mind, precision, &p));
  return DispatchElemType(kOp, p.dtype, [&](auto elem) {
    constexpr ElemType kE = decltype(elem)::value;
    if constexpr (kE != ElemType::kF64) {
      AssignReference<kE>(p, x.untyped_data(), static_cast<const float*>(x_sq.untyped_data()),
                          c.untyped_data(), static_cast<int32_t*>(labels->untyped_data()),
                          static_cast<float*>(mind->untyped_data()));
    }
    return ffi::Error::Success();
  });
}

ffi::Error KmeansSumsCpuImpl(ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer labels,
                             ffi::AnyBuffer mind, ffi::Result<ffi::AnyBuffer> sums,
                             ffi::Result<ffi::AnyBuffer> counts,
                             ffi::Result<ffi::AnyBuffer> inertia,
                             ffi::Result<ffi::AnyBuffer> /*workspace*/, int64_t bucket,
                             int64_t chunks, int64_t piece) {
  constexpr std::string_view kOp = "tsm2_kmeans_sums (cpu)";
  KmeansSumsProblem p;
  TSM2_FFI_RETURN_IF_ERROR(DecodeKmeansSums(kOp, x, w, labels, mind, *sums, *counts, *inertia,
                                            bucket, chunks, piece, &p));
  return DispatchElemType(kOp, p.dtype, [&](auto elem) {
    constexpr ElemType kE = decltype(elem)::value;
    using Acc = std::conditional_t<kE == ElemType::kF64, double, float>;
    auto reference = p.plan.piece > 0 ? &SortedSumsReference<kE, Acc> : &SumsReference<kE, Acc>;
    reference(p, x.untyped_data(), static_cast<const Acc*>(w.untyped_data()),
              static_cast<const int32_t*>(labels.untyped_data()),
              static_cast<const Acc*>(mind.untyped_data()), static_cast<Acc*>(sums->untyped_data()),
              static_cast<Acc*>(counts->untyped_data()),
              static_cast<Acc*>(inertia->untyped_data()));
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2KmeansAssignCpu, tsm2::KmeansAssignCpuImpl,
                              tsm2::KmeansAssignSignature(xla::ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2KmeansSumsCpu, tsm2::KmeansSumsCpuImpl,
                              tsm2::KmeansSumsSignature(xla::ffi::Ffi::Bind()));
