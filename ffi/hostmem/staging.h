// Chunks of pinned host rows brought to the device ahead of their read by a
// copy engine, for tsm2_host_rows.
//
// A pass over pinned host data is one XLA program whose loop reads chunk i
// (tsm2_host_rows) and then runs chunk i's step. Read by the SMs, a chunk's
// read and its step take turns on XLA's stream. Instead, while chunk i's step
// runs, a DMA on a stream of our own copies chunk i + 1 into one of two
// device buffers (the copy engines take no SM), and the read of chunk i + 1
// is then a copy from device memory. The chunk index lives on the device, so
// the host cannot know which chunk a call will read: it guesses the chunk
// after the last one (passes read chunks 0, 1, ..., in order), and the read's
// kernel checks the guess against the index. A wrong guess reads over the
// host link as before: prefetching changes the speed of a read, never its
// result.
//
// Plain C++ on the CUDA runtime, like pinning.h; the handler
// (cuda_handler.cc) calls it, module.cc binds the release and the counts.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <mutex>

#include "ffi/common/status.h"

namespace tsm2 {

// One reader's geometry: `rows`-row chunks of a total_rows x row_bytes
// row-major matrix at `src` (the device's address of pinned host memory).
struct HostRowsSource {
  uintptr_t src = 0;
  int64_t total_rows = 0, row_bytes = 0, rows = 0;
};

// What a read finds staged: chunk `chunk` in `data` once the read's stream
// has waited for it (Begin does that). The read's kernel adds to the device's
// [hits, misses] `counters`, and writes (serial << 32) | the chunk it was
// asked for into `seen`, host memory the next Begin reads to correct its
// guess.
struct StagedChunk {
  const void* data = nullptr;  // null: nothing staged, read over the link
  int64_t chunk = -1;
  int32_t* counters = nullptr;
  unsigned long long* seen = nullptr;  // the device's address of it
  uint32_t serial = 0;                 // this read's number
};

class ChunkStaging {
 public:
  // Two staging buffers, a copy stream and its events on the current device.
  // Fails (and leaves *out null) where the device memory or the stream cannot
  // be had; the caller then reads over the link.
  static Status Create(const HostRowsSource& s, std::unique_ptr<ChunkStaging>* out);
  ~ChunkStaging();
  ChunkStaging(const ChunkStaging&) = delete;
  ChunkStaging& operator=(const ChunkStaging&) = delete;

  // Held from Begin to End: a read's two halves must not interleave with another's.
  std::mutex& mutex() { return mutex_; }
  // Makes `stream` wait for the staged copy of the chunk expected next
  // (issuing the copy if it is not under way) and says where it is. The
  // guess: the chunk after the last one a finished read was asked for,
  // advanced by the reads queued since (the reads of a pass go in order).
  Status Begin(cudaStream_t stream, StagedChunk* staged);
  // After the read is queued on `stream`: its buffer is free once `stream`
  // is past the read, and the chunk after it is copied into the other one.
  Status End(cudaStream_t stream);
  // The device's hit and miss counts (synchronizes the device).
  Status Counts(int64_t* hits, int64_t* misses) const;

 private:
  static constexpr int kSlots = 2;
  ChunkStaging() = default;
  Status Issue(int slot, int64_t chunk);

  std::mutex mutex_;
  HostRowsSource s_;
  const char* host_ = nullptr;  // the host's address of row 0
  int64_t chunks_ = 0;
  int64_t next_ = 0;     // the chunk after the last one guessed
  uint32_t serial_ = 0;  // reads begun
  int reading_ = -1;     // the slot between Begin and End
  void* buf_[kSlots] = {};
  int64_t holds_[kSlots] = {-1, -1};  // the chunk copied (or being copied) into a slot
  cudaEvent_t ready_[kSlots] = {}, free_[kSlots] = {};
  cudaStream_t copy_ = nullptr;
  int32_t* counters_ = nullptr;
  volatile unsigned long long* seen_ = nullptr;  // mapped host memory; kNotSeen until a read
  unsigned long long* seen_device_ = nullptr;
};

// The staging of `s` on the current device, created at its first read; null
// where it could not be created (then never retried for that source).
Status StagingFor(const HostRowsSource& s, ChunkStaging** out);

// Waits for `device`'s queued work, then frees the staging of every reader
// of the pinned memory at `src` there: before that memory is unregistered.
cudaError_t ReleaseStaging(uintptr_t src, int device);

// The summed hit and miss counts of the readers of `src` on `device`
// (synchronizes the device); false when none has staging.
bool StagingCounts(uintptr_t src, int device, int64_t* hits, int64_t* misses);

}  // namespace tsm2
