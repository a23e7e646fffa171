// The thread-block cluster calls of cooperative_groups that kernels with an
// optional cluster dimension use (the k-means step with kCl > 1). The
// cluster API exists only when compiling for sm_90 and later; for older
// targets these trap, so that one source compiles for every architecture of
// the build while the planners never launch a clustered kernel below sm_90
// (device.h HasClusters). CUDA only.
#pragma once

#include <cooperative_groups.h>

namespace tsm2 {

// This block's rank in its cluster.
__device__ __forceinline__ int ClusterBlockRank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return static_cast<int>(cooperative_groups::this_cluster().block_rank());
#else
  __trap();
  return 0;
#endif
}

// A barrier over every thread of the cluster, ordering shared-memory accesses.
__device__ __forceinline__ void ClusterSync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cooperative_groups::this_cluster().sync();
#else
  __trap();
#endif
}

// The address of `p`, a shared-memory location of this block, in the block
// of the cluster with rank `rank` (distributed shared memory).
template <typename T>
__device__ __forceinline__ T* ClusterMapShared(T* p, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().map_shared_rank(p, rank);
#else
  __trap();
  return p;
#endif
}

}  // namespace tsm2
