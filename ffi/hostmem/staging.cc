// Chunks of pinned host rows copied ahead by a copy engine (staging.h).
#include "ffi/hostmem/staging.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

namespace tsm2 {
namespace {

using Key = std::tuple<int, uintptr_t, int64_t, int64_t, int64_t>;  // device, src, geometry

constexpr unsigned long long kNotSeen = ~0ull;

std::mutex& RegistryMutex() {
  static std::mutex m;
  return m;
}
// A null entry remembers a source whose staging could not be created.
std::map<Key, std::unique_ptr<ChunkStaging>>& Registry() {
  static auto* r = new std::map<Key, std::unique_ptr<ChunkStaging>>();  // never destroyed:
  return *r;  // CUDA may be gone when static destructors run
}

}  // namespace

Status ChunkStaging::Create(const HostRowsSource& s, std::unique_ptr<ChunkStaging>* out) {
  out->reset();
  cudaPointerAttributes attr;
  TSM2_CUDA_RETURN_IF_ERROR(cudaPointerGetAttributes(&attr, reinterpret_cast<void*>(s.src)));
  if (attr.type != cudaMemoryTypeHost || attr.hostPointer == nullptr) {
    return TSM2_FAIL(cudaErrorInvalidValue, "ChunkStaging: the source is not pinned host memory");
  }
  std::unique_ptr<ChunkStaging> st(new ChunkStaging());
  st->s_ = s;
  st->host_ = static_cast<const char*>(attr.hostPointer);
  st->chunks_ = (s.total_rows + s.rows - 1) / s.rows;
  const size_t bytes = static_cast<size_t>(s.rows * s.row_bytes);
  for (int i = 0; i < kSlots; ++i) {
    TSM2_CUDA_RETURN_IF_ERROR(cudaMalloc(&st->buf_[i], bytes));
    TSM2_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&st->ready_[i], cudaEventDisableTiming));
    TSM2_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&st->free_[i], cudaEventDisableTiming));
  }
  TSM2_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&st->copy_, cudaStreamNonBlocking));
  TSM2_CUDA_RETURN_IF_ERROR(
      cudaMalloc(reinterpret_cast<void**>(&st->counters_), 2 * sizeof(int32_t)));
  TSM2_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(st->counters_, 0, 2 * sizeof(int32_t), st->copy_));
  void* seen = nullptr;
  TSM2_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&seen, sizeof(unsigned long long), cudaHostAllocMapped));
  st->seen_ = static_cast<volatile unsigned long long*>(seen);
  *st->seen_ = kNotSeen;
  TSM2_CUDA_RETURN_IF_ERROR(
      cudaHostGetDevicePointer(reinterpret_cast<void**>(&st->seen_device_), seen, 0));
  *out = std::move(st);
  return Status{};
}

ChunkStaging::~ChunkStaging() {
  // The owner synchronized the device first (ReleaseStaging); what fails here
  // can only leak.
  for (int i = 0; i < kSlots; ++i) {
    if (buf_[i] != nullptr) (void)cudaFree(buf_[i]);
    if (ready_[i] != nullptr) (void)cudaEventDestroy(ready_[i]);
    if (free_[i] != nullptr) (void)cudaEventDestroy(free_[i]);
  }
  if (copy_ != nullptr) (void)cudaStreamDestroy(copy_);
  if (counters_ != nullptr) (void)cudaFree(counters_);
  if (seen_ != nullptr) (void)cudaFreeHost(const_cast<unsigned long long*>(seen_));
  (void)cudaGetLastError();
}

Status ChunkStaging::Issue(int slot, int64_t chunk) {
  // The slot's last read must be done with it; an event never recorded is no wait.
  TSM2_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_, free_[slot], 0));
  const int64_t first = chunk * s_.rows;
  const int64_t rows = std::min(s_.rows, s_.total_rows - first);
  TSM2_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buf_[slot], host_ + first * s_.row_bytes,
                                            static_cast<size_t>(rows * s_.row_bytes),
                                            cudaMemcpyHostToDevice, copy_));
  TSM2_CUDA_RETURN_IF_ERROR(cudaEventRecord(ready_[slot], copy_));
  holds_[slot] = chunk;
  return Status{};
}

Status ChunkStaging::Begin(cudaStream_t stream, StagedChunk* staged) {
  const uint32_t serial = ++serial_;
  if (const unsigned long long seen = *seen_; seen != kNotSeen) {
    // Read `serial - s` asked for chunk c: in order, this one asks for c + (serial - s).
    const uint32_t s = static_cast<uint32_t>(seen >> 32);
    const int64_t c = static_cast<int32_t>(static_cast<uint32_t>(seen));
    next_ = ((c + static_cast<int64_t>(serial - s)) % chunks_ + chunks_) % chunks_;
  }
  int slot = holds_[0] == next_ ? 0 : holds_[1] == next_ ? 1 : -1;
  if (slot < 0) {  // the first read, or the guess before was wrong: copy it now
    slot = holds_[0] < 0 ? 0 : 1;
    TSM2_RETURN_IF_ERROR(Issue(slot, next_));
  }
  TSM2_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, ready_[slot], 0));
  reading_ = slot;
  *staged = StagedChunk{buf_[slot], next_, counters_, seen_device_, serial};
  return Status{};
}

Status ChunkStaging::End(cudaStream_t stream) {
  const int slot = reading_;
  reading_ = -1;
  TSM2_CUDA_RETURN_IF_ERROR(cudaEventRecord(free_[slot], stream));
  // Passes read every chunk in turn, the next pass from chunk 0 again.
  next_ = (holds_[slot] + 1) % chunks_;
  holds_[slot] = -1;  // a copy serves one read: a later read of the chunk copies it afresh
  const int other = 1 - slot;
  if (holds_[other] != next_) TSM2_RETURN_IF_ERROR(Issue(other, next_));
  return Status{};
}

Status ChunkStaging::Counts(int64_t* hits, int64_t* misses) const {
  int32_t c[2] = {0, 0};
  TSM2_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  TSM2_CUDA_RETURN_IF_ERROR(cudaMemcpy(c, counters_, sizeof c, cudaMemcpyDeviceToHost));
  *hits = c[0];
  *misses = c[1];
  return Status{};
}

Status StagingFor(const HostRowsSource& s, ChunkStaging** out) {
  *out = nullptr;
  int device = 0;
  TSM2_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  const Key key{device, s.src, s.total_rows, s.row_bytes, s.rows};
  std::lock_guard<std::mutex> lock(RegistryMutex());
  auto [it, fresh] = Registry().try_emplace(key);
  if (fresh && s.rows > 0 && s.total_rows > 0 && s.row_bytes > 0) {
    // Out of device memory (or any refusal) leaves the entry null: reads go
    // over the link, as without staging.
    if (!ChunkStaging::Create(s, &it->second).ok()) (void)cudaGetLastError();
  }
  *out = it->second.get();
  return Status{};
}

cudaError_t ReleaseStaging(uintptr_t src, int device) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  auto& reg = Registry();
  constexpr int64_t kLow = std::numeric_limits<int64_t>::min();
  auto first = reg.lower_bound(Key{device, src, kLow, kLow, kLow});
  auto last = first;
  while (last != reg.end() && std::get<0>(last->first) == device &&
         std::get<1>(last->first) == src) {
    ++last;
  }
  if (first == last) return cudaSuccess;
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();  // no copy or read may still use them
  reg.erase(first, last);
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e;
}

bool StagingCounts(uintptr_t src, int device, int64_t* hits, int64_t* misses) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  *hits = *misses = 0;
  bool any = false;
  if (cudaSetDevice(device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  for (const auto& [key, st] : Registry()) {
    if (std::get<0>(key) != device || std::get<1>(key) != src || st == nullptr) continue;
    int64_t h = 0, m = 0;
    if (!st->Counts(&h, &m).ok()) {
      (void)cudaGetLastError();
      continue;
    }
    *hits += h;
    *misses += m;
    any = true;
  }
  return any;
}

}  // namespace tsm2
