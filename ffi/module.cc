// The nanobind module `jax_tsm2._tsm2_ext`: hands the FFI handlers to Python
// (which registers them with XLA) and reports what this build contains.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "ffi/handlers.h"
#include "ffi/matmul_problem.h"
#include "ffi/split_plans.h"
#include "ffi/tile_configs.h"
#include "xla/ffi/api/c_api.h"

namespace nb = nanobind;

namespace {

template <typename Fn>
nb::capsule EncapsulateHandler(Fn* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}

// {platform: {target name: capsule}}; platforms are the names that
// jax.ffi.register_ffi_target takes.
nb::dict Registrations() {
  nb::dict cpu;
  cpu["tsm2_matmul"] = EncapsulateHandler(Tsm2MatmulCpu);
  nb::dict out;
  out["cpu"] = cpu;
#ifdef TSM2_WITH_CUDA
  nb::dict cuda;
  cuda["tsm2_matmul"] = EncapsulateHandler(Tsm2MatmulCuda);
  cuda["tsm2_stream_read"] = EncapsulateHandler(Tsm2StreamReadCuda);
  out["CUDA"] = cuda;
#endif
  return out;
}

nb::dict BuildInfo() {
  nb::dict info;
#ifdef TSM2_WITH_CUDA
  info["cuda"] = true;
  info["cuda_version"] = std::string(TSM2_CUDA_VERSION);
  info["cuda_architectures"] = std::string(TSM2_CUDA_ARCHITECTURES);
#else
  info["cuda"] = false;
  info["cuda_version"] = nb::none();
  info["cuda_architectures"] = nb::none();
#endif
  info["xla_ffi_api_version"] =
      std::to_string(XLA_FFI_API_MAJOR) + "." + std::to_string(XLA_FFI_API_MINOR);
  info["jax_version"] = std::string(TSM2_JAX_VERSION);
#if defined(__clang__)
  info["compiler"] = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  info["compiler"] = std::string("gcc ") + __VERSION__;
#else
  info["compiler"] = std::string("unknown");
#endif
  return info;
}

// Bytes of the `workspace` result a tsm2_matmul call needs on a GPU with
// `sm_count` SMs. R and L size it for kMaxRLBlocksPerSm blocks per SM (their
// planner uses no more blocks than it can serve); S and T for their split plan.
constexpr int kMaxRLBlocksPerSm = 4;
int64_t WorkspaceBytes(const std::string& dtype, int32_t kernel, int64_t batch, int64_t m,
                       int64_t k, int64_t n, int sm_count) {
  int itemsize = 0;
  if (dtype == "float32") itemsize = 4;
  if (dtype == "float64") itemsize = 8;
  if (dtype == "bfloat16" || dtype == "float16") itemsize = 2;
  if (itemsize == 0) throw nb::value_error(("unsupported dtype " + dtype).c_str());
  if (batch < 0 || m < 0 || k < 0 || n < 0) throw nb::value_error("sizes must be >= 0");
  if (sm_count < 1) throw nb::value_error("sm_count must be >= 1");
  using tsm2::Kernel;
  switch (static_cast<Kernel>(kernel)) {
    case Kernel::kTsm2r:
    case Kernel::kTsm2l:
      return tsm2::PartialBytesPerBlock(itemsize, k, n, kernel == 1) * kMaxRLBlocksPerSm * sm_count;
    case Kernel::kTsm2s:
      return tsm2::SplitWorkspaceBytes(tsm2::SPlan(itemsize, batch, m, k, n, sm_count), itemsize,
                                       batch, m, n);
    case Kernel::kTsm2t:
      return tsm2::SplitWorkspaceBytes(tsm2::TPlan(itemsize, batch, m, k, n, sm_count), itemsize,
                                       batch, m, n);
  }
  throw nb::value_error(("unknown kernel id " + std::to_string(kernel)).c_str());
}

}  // namespace

NB_MODULE(_tsm2_ext, m) {
  m.doc() = "XLA FFI handlers of jax_tsm2 (tall-and-skinny matrix products).";
  m.def("registrations", &Registrations,
        "Returns {platform: {target_name: PyCapsule}} for jax.ffi.register_ffi_target.");
  m.def("build_info", &BuildInfo, "What this build of the extension contains.");
  m.def("workspace_bytes", &WorkspaceBytes, nb::arg("dtype"), nb::arg("kernel"), nb::arg("batch"),
        nb::arg("m"), nb::arg("k"), nb::arg("n"), nb::arg("sm_count"),
        "Bytes of the `workspace` result of a tsm2_matmul call on a GPU with sm_count SMs.");
}
