// CPU reference for `tsm2_matmul`: straightforward loops behind the same
// handler signature and validation as the CUDA target.
//
// It exists so that the CPU test suite can force the custom-call path and
// check primitive -> lowering -> FFI handler -> result end to end on a machine
// without a GPU. It is not meant to be fast.
#include <cstdint>
#include <cstring>

#include "ffi/handlers.h"
#include "ffi/matmul_problem.h"

namespace tsm2 {
namespace {

// bf16 and f16 are stored as raw 16-bit patterns; these convert through f32.
float Bf16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // rounds to infinity
  if (ax < 0x33000001u) return sign;             // rounds to zero
  int exp = static_cast<int>(ax >> 23) - 127 + 15;
  uint32_t man = (ax & 0x7fffffu) | 0x800000u;
  int shift = 13;
  if (exp <= 0) {  // subnormal result
    shift = 14 - exp;
    exp = 0;
  }
  uint32_t q = man >> shift;
  const uint32_t rem = man & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  if (exp == 0) return sign | static_cast<uint16_t>(q);
  // q includes the implicit bit; a carry out of the mantissa bumps the exponent.
  return sign | static_cast<uint16_t>((static_cast<uint32_t>(exp) << 10) + (q - 0x400u));
}

double LoadAs(ffi::DataType t, const void* p, int64_t i) {
  switch (t) {
    case ffi::DataType::F32:
      return static_cast<const float*>(p)[i];
    case ffi::DataType::F64:
      return static_cast<const double*>(p)[i];
    case ffi::DataType::BF16:
      return Bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case ffi::DataType::F16:
      return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
    default:
      return 0.0;
  }
}

void StoreAs(ffi::DataType t, void* p, int64_t i, double v) {
  switch (t) {
    case ffi::DataType::F32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case ffi::DataType::F64:
      static_cast<double*>(p)[i] = v;
      break;
    case ffi::DataType::BF16:
      static_cast<uint16_t*>(p)[i] = FloatToBf16(static_cast<float>(v));
      break;
    case ffi::DataType::F16:
      static_cast<uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v));
      break;
    default:
      break;
  }
}

// Accumulates in the same precision as the CUDA kernels (f64 for f64, f32
// otherwise) so that the two targets round alike.
template <typename Acc>
void Reference(const MatmulProblem& p, const void* a, const void* b, void* c) {
  // Element (i, l) of op(A) and (l, j) of op(B), whatever the layout.
  const bool a_t = p.layout == Layout::kTN, b_t = p.layout == Layout::kNT;
  const int64_t a_si = a_t ? 1 : p.k, a_sl = a_t ? p.m : 1;
  const int64_t b_sl = b_t ? 1 : p.n, b_sj = b_t ? p.k : 1;
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    const int64_t a0 = bi * p.a_batch_stride, b0 = bi * p.b_batch_stride, c0 = bi * p.m * p.n;
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        Acc acc = 0;
        for (int64_t l = 0; l < p.k; ++l) {
          acc += static_cast<Acc>(LoadAs(p.dtype, a, a0 + i * a_si + l * a_sl)) *
                 static_cast<Acc>(LoadAs(p.dtype, b, b0 + l * b_sl + j * b_sj));
        }
        StoreAs(p.out_dtype, c, c0 + i * p.n + j, acc);
      }
    }
  }
}

ffi::Error MatmulCpuImpl(ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::Result<ffi::AnyBuffer> c,
                         ffi::Result<ffi::AnyBuffer> /*workspace*/, int32_t kernel,
                         int32_t layout) {
  constexpr std::string_view kOp = "tsm2_matmul (cpu)";
  MatmulProblem p;
  if (auto err = DecodeMatmul(kOp, a, b, *c, layout, &p); !err.success()) return err;
  if (auto err = CheckKernel(kOp, kernel, p.layout); !err.success()) return err;
  if (p.dtype == ffi::DataType::F64) {
    Reference<double>(p, a.untyped_data(), b.untyped_data(), c->untyped_data());
  } else {
    Reference<float>(p, a.untyped_data(), b.untyped_data(), c->untyped_data());
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2MatmulCpu, tsm2::MatmulCpuImpl,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::AnyBuffer>()  // a: [batch?, m, k] (tn: k, m)
                                  .Arg<xla::ffi::AnyBuffer>()  // b: [batch?, k, n] (nt: n, k)
                                  .Ret<xla::ffi::AnyBuffer>()  // c: [batch?, m, n]
                                  .Ret<xla::ffi::AnyBuffer>()  // workspace (unused on CPU)
                                  .Attr<int32_t>("kernel")     // tsm2::Kernel (validated only)
                                  .Attr<int32_t>("layout"));   // tsm2::Layout
