// Instantiates the TSM2 kernels for float.
#include "ffi/matmul/launch_tiles.cuh"

namespace tsm2 {
template struct TypedLauncher<float>;
}  // namespace tsm2
