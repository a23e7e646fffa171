// Instantiates the TSM2 kernels for __half.
#include "ffi/launch_matmul.cuh"

namespace tsm2 {
template struct TypedLauncher<__half>;
}  // namespace tsm2
