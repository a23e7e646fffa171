// Instantiates the TSM2 kernels for __half.
#include "ffi/matmul/launch_tiles.cuh"

namespace tsm2 {
template struct TypedLauncher<__half>;
}  // namespace tsm2
