// Trace hooks inside production kernels, for the lab programs
// (benchmarks/lab/). Without TSM2_TRACE every hook below is empty and the
// kernels compile exactly as if it were not there; CMake's -DTSM2_TRACE=ON
// defines it for the library and the lab programs alike.
//
// Block timelines: TSM2_TRACE_STAMP(i) makes thread 0 of a block write
// %globaltimer (ns) at mark i (0 to 6) into word 1 + i of the block's
// kTraceWords words of trace::g_stamps, and at mark 0 its SM id into word 0,
// when the host has pointed g_stamps at a buffer (SetStampBuffer; null, the
// default, turns the stamps off).
//
// Phase cycles: TSM2_TRACE_PHASES_BEGIN() starts a per-thread clock64()
// count, TSM2_TRACE_PHASE_IF(cond, slot) adds the cycles since the previous
// mark to slot `slot` (0 to 14) where cond holds, and
// TSM2_TRACE_PHASES_END(units) adds every thread's sums, and the block's
// `units` (thread 0's count of work units) to slot 15, into trace::g_phases
// (TakePhases reads and zeroes them).
//
// The globals are per translation unit (static): a lab program reads those
// of the kernels it instantiated itself.
#pragma once

#if defined(TSM2_TRACE)

#include <cuda_runtime.h>

#include <cstdint>

namespace tsm2::trace {

constexpr int kTraceWords = 8;
constexpr int kPhaseSlots = 16;

static __device__ uint64_t* g_stamps = nullptr;
static __device__ unsigned long long g_phases[kPhaseSlots];

static __device__ __forceinline__ void Stamp(int i) {
  if (g_stamps == nullptr || threadIdx.x != 0) return;
  const uint64_t block = blockIdx.x + static_cast<uint64_t>(gridDim.x) * blockIdx.y;
  uint64_t* out = g_stamps + block * kTraceWords;
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  out[1 + i] = t;
  if (i == 0) {
    uint32_t sm;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
    out[0] = sm;
  }
}

// Points the stamps at `words` (kTraceWords per block of the next launches),
// or turns them off (nullptr).
static inline cudaError_t SetStampBuffer(uint64_t* words) {
  return cudaMemcpyToSymbol(g_stamps, &words, sizeof words);
}

// Copies the phase sums to out[kPhaseSlots] and zeroes them.
static inline cudaError_t TakePhases(unsigned long long* out) {
  if (cudaError_t e = cudaMemcpyFromSymbol(out, g_phases, sizeof g_phases); e != cudaSuccess) {
    return e;
  }
  const unsigned long long zero[kPhaseSlots] = {};
  return cudaMemcpyToSymbol(g_phases, zero, sizeof zero);
}

}  // namespace tsm2::trace

#define TSM2_TRACE_STAMP(i) ::tsm2::trace::Stamp(i)
#define TSM2_TRACE_PHASES_BEGIN()                                  \
  unsigned long long tsm2_phase_[::tsm2::trace::kPhaseSlots] = {}; \
  long long tsm2_phase_t0_ = clock64()
#define TSM2_TRACE_PHASE_IF(cond, slot)                                                 \
  do {                                                                                  \
    if (cond) {                                                                         \
      const long long tsm2_now_ = clock64();                                            \
      tsm2_phase_[slot] += static_cast<unsigned long long>(tsm2_now_ - tsm2_phase_t0_); \
      tsm2_phase_t0_ = tsm2_now_;                                                       \
    }                                                                                   \
  } while (0)
#define TSM2_TRACE_PHASES_END(units)                                             \
  do {                                                                           \
    for (int tsm2_q_ = 0; tsm2_q_ < ::tsm2::trace::kPhaseSlots - 1; ++tsm2_q_) { \
      if (tsm2_phase_[tsm2_q_] != 0) {                                           \
        atomicAdd(&::tsm2::trace::g_phases[tsm2_q_], tsm2_phase_[tsm2_q_]);      \
      }                                                                          \
    }                                                                            \
    if (threadIdx.x == 0) {                                                      \
      atomicAdd(&::tsm2::trace::g_phases[::tsm2::trace::kPhaseSlots - 1],        \
                static_cast<unsigned long long>(units));                         \
    }                                                                            \
  } while (0)

#else

// Statements that do nothing (and still need their semicolon).
#define TSM2_TRACE_STAMP(i) \
  do {                      \
  } while (0)
#define TSM2_TRACE_PHASES_BEGIN() \
  do {                            \
  } while (0)
#define TSM2_TRACE_PHASE_IF(cond, slot) \
  do {                                  \
  } while (0)
#define TSM2_TRACE_PHASES_END(units) \
  do {                               \
  } while (0)

#endif
