// The elementwise reductions of the exact collectives (exact_collectives.h), for every NCCL data
// type and op. Partial results travel as accumulators: the type itself, except float16, bfloat16
// and the fp8 types, which accumulate in fp32 and round once at the end (as the exact `none` ring).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sketchccl::standalone {

// ncclDataType_t's numbering, every type the exact engine reduces (the codecs' kernels::ElemType
// holds only the float types they compute in; this engine needs no NCCL header).
enum class DType : uint8_t {
  kI8 = 0,
  kU8 = 1,
  kI32 = 2,
  kU32 = 3,
  kI64 = 4,
  kU64 = 5,
  kF16 = 6,
  kF32 = 7,
  kF64 = 8,
  kBf16 = 9,
  kF8E4M3 = 10,
  kF8E5M2 = 11,
};
constexpr int kNumDTypes = 12;

// ncclRedOp_t's built-in numbering, plus PreMulSum (a created op).
enum class RedKind : uint8_t { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4, kPreMulSum = 5 };

struct RedOp {
  RedKind kind = RedKind::kSum;
  // PreMulSum's scalar, as the accumulator computes with it: for integer types the integer
  // (two's complement bits), for the others its value.
  uint64_t int_scalar = 0;
  double float_scalar = 0;
};

size_t dtype_size(DType t);
// Bytes of one accumulator element.
size_t acc_size(DType t);
bool is_integer(DType t);

// acc[i] = premul(x[i]): the first contribution to a partial result.
void acc_load(DType t, const RedOp& op, const void* x, size_t n, void* acc);
// acc[i] = acc[i] op premul(x[i]): the partial result so far, then this rank's element.
void acc_combine(DType t, const RedOp& op, void* acc, const void* x, size_t n);
// out[i] = the final value of acc[i] in type t (avg divides by nranks: integers truncate
// toward zero, floats multiply by 1/nranks in the accumulator's precision).
void acc_store(DType t, const RedOp& op, int nranks, const void* acc, size_t n, void* out);

// The fp8 formats (OCP: e4m3 without infinities, saturating; e5m2 IEEE-like), as fp32.
float fp8_to_float(DType t, uint8_t v);
uint8_t float_to_fp8(DType t, float v);

}  // namespace sketchccl::standalone
