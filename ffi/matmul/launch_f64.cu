// Instantiates the TSM2 kernels for double.
#include "ffi/matmul/launch_tiles.cuh"

namespace tsm2 {
template struct TypedLauncher<double>;
}  // namespace tsm2
