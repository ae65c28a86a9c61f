#include "src/standalone/reduce_op.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/convert.h"

namespace sketchccl::standalone {
namespace {

// ---- fp8 ---------------------------------------------------------------------------------------
struct Fp8Format {
  int exp_bits, man_bits, bias;
  bool has_inf;        // e5m2: exponent all ones, mantissa 0
  uint8_t max_finite;  // the largest finite positive code
  uint8_t nan_code;    // the positive NaN written for a NaN input
};

const Fp8Format& format(DType t) {
  static const Fp8Format e4m3{4, 3, 7, false, 0x7e, 0x7f};
  static const Fp8Format e5m2{5, 2, 15, true, 0x7b, 0x7f};
  return t == DType::kF8E4M3 ? e4m3 : e5m2;
}

float decode_fp8(const Fp8Format& f, uint8_t v) {
  const bool neg = (v & 0x80) != 0;
  const int e = (v >> f.man_bits) & ((1 << f.exp_bits) - 1);
  const int m = v & ((1 << f.man_bits) - 1);
  float r;
  if (f.has_inf && e == (1 << f.exp_bits) - 1) {
    r = m == 0 ? INFINITY : NAN;
  } else if (!f.has_inf && (v & 0x7f) == 0x7f) {
    r = NAN;
  } else if (e == 0) {
    r = std::ldexp(static_cast<float>(m), 1 - f.bias - f.man_bits);
  } else {
    r = std::ldexp(static_cast<float>(m + (1 << f.man_bits)), e - f.bias - f.man_bits);
  }
  return neg ? -r : r;
}

// Positive finite values by code (monotone in the code), for rounding by search.
struct Fp8Table {
  std::array<float, 128> value{};
  explicit Fp8Table(const Fp8Format& f) {
    for (int c = 0; c <= f.max_finite; ++c)
      value[static_cast<size_t>(c)] = decode_fp8(f, static_cast<uint8_t>(c));
  }
};

uint8_t encode_fp8(DType t, float v) {
  static const Fp8Table e4m3(format(DType::kF8E4M3)), e5m2(format(DType::kF8E5M2));
  const Fp8Format& f = format(t);
  const Fp8Table& tab = t == DType::kF8E4M3 ? e4m3 : e5m2;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  if (std::isnan(v)) return static_cast<uint8_t>(sign | f.nan_code);
  const float a = std::fabs(v);
  // Saturating to the largest finite value, infinities included.
  if (a >= tab.value[f.max_finite]) return static_cast<uint8_t>(sign | f.max_finite);
  const float* first = tab.value.data();
  const float* last = first + f.max_finite + 1;
  // The first code above a, and the one below it: nearest, ties to the even code.
  const auto hi = static_cast<int>(std::upper_bound(first, last, a) - first);
  const int lo = hi - 1;
  const float dlo = a - tab.value[static_cast<size_t>(lo)];
  const float dhi = tab.value[static_cast<size_t>(hi)] - a;
  int code = lo;
  if (dhi < dlo || (dhi == dlo && (hi % 2) == 0)) code = hi;
  return static_cast<uint8_t>(sign | code);
}

// ---- element access ----------------------------------------------------------------------------
// Integer types compute in their unsigned twin, so that overflow wraps as on the GPU.
template <typename T, bool = std::is_integral_v<T>>
struct WrapOf {
  using type = T;
};
template <typename T>
struct WrapOf<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <typename T>
using Wrap = typename WrapOf<T>::type;

template <typename T>
T op_apply(RedKind k, T a, T b) {
  using U = Wrap<T>;
  switch (k) {
    case RedKind::kProd:
      if constexpr (std::is_integral_v<T>) {
        return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      } else {
        return a * b;
      }
    case RedKind::kMax:
      if constexpr (std::is_integral_v<T>) {
        return std::max(a, b);
      } else {
        return std::fmax(a, b);
      }
    case RedKind::kMin:
      if constexpr (std::is_integral_v<T>) {
        return std::min(a, b);
      } else {
        return std::fmin(a, b);
      }
    default:  // sum, avg, PreMulSum: sums
      if constexpr (std::is_integral_v<T>) {
        return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      } else {
        return a + b;
      }
  }
}

template <typename T>
T premul(const RedOp& op, T x) {
  if (op.kind != RedKind::kPreMulSum) return x;
  if constexpr (std::is_integral_v<T>) {
    using U = Wrap<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(x) * static_cast<U>(op.int_scalar)));
  } else {
    return x * static_cast<T>(op.float_scalar);
  }
}

// T: the element type and its accumulator (integers, float32, float64).
template <typename T>
void load_same(const RedOp& op, const void* x, size_t n, void* acc) {
  const T* in = static_cast<const T*>(x);
  T* a = static_cast<T*>(acc);
  for (size_t i = 0; i < n; ++i)
    a[i] = premul(op, in[i]);
}

template <typename T>
void combine_same(const RedOp& op, void* acc, const void* x, size_t n) {
  const T* in = static_cast<const T*>(x);
  T* a = static_cast<T*>(acc);
  for (size_t i = 0; i < n; ++i)
    a[i] = op_apply(op.kind, a[i], premul(op, in[i]));
}

template <typename T>
void store_same(const RedOp& op, int nranks, const void* acc, size_t n, void* out) {
  const T* a = static_cast<const T*>(acc);
  T* o = static_cast<T*>(out);
  if (op.kind != RedKind::kAvg) {
    std::memmove(o, a, n * sizeof(T));
    return;
  }
  if constexpr (std::is_integral_v<T>) {
    const T p = static_cast<T>(nranks);
    for (size_t i = 0; i < n; ++i)
      o[i] = static_cast<T>(a[i] / p);
  } else {
    const T scale = T(1) / static_cast<T>(nranks);
    for (size_t i = 0; i < n; ++i)
      o[i] = a[i] * scale;
  }
}

// Narrow floats (fp16, bf16, fp8) to and from fp32, in blocks.
constexpr size_t kBlock = 1024;

void narrow_to_f32(DType t, const void* x, size_t n, float* out) {
  if (t == DType::kF16 || t == DType::kBf16) {
    kernels::load_f32(x, t == DType::kF16 ? kernels::ElemType::kF16 : kernels::ElemType::kBf16, n,
                      out);
    return;
  }
  const auto* b = static_cast<const uint8_t*>(x);
  for (size_t i = 0; i < n; ++i)
    out[i] = decode_fp8(format(t), b[i]);
}

void f32_to_narrow(DType t, const float* v, size_t n, void* out) {
  if (t == DType::kF16 || t == DType::kBf16) {
    kernels::store_f32(v, n, 1.0f,
                       t == DType::kF16 ? kernels::ElemType::kF16 : kernels::ElemType::kBf16, out);
    return;
  }
  auto* b = static_cast<uint8_t*>(out);
  for (size_t i = 0; i < n; ++i)
    b[i] = encode_fp8(t, v[i]);
}

size_t narrow_size(DType t) {
  return t == DType::kF16 || t == DType::kBf16 ? 2 : 1;
}

void load_narrow(DType t, const RedOp& op, const void* x, size_t n, void* acc) {
  float* a = static_cast<float*>(acc);
  narrow_to_f32(t, x, n, a);
  if (op.kind == RedKind::kPreMulSum) {
    for (size_t i = 0; i < n; ++i)
      a[i] = premul(op, a[i]);
  }
}

void combine_narrow(DType t, const RedOp& op, void* acc, const void* x, size_t n) {
  float buf[kBlock];
  const auto* in = static_cast<const uint8_t*>(x);
  float* a = static_cast<float*>(acc);
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    narrow_to_f32(t, in + base * narrow_size(t), m, buf);
    for (size_t i = 0; i < m; ++i)
      a[base + i] = op_apply(op.kind, a[base + i], premul(op, buf[i]));
  }
}

void store_narrow(DType t, const RedOp& op, int nranks, const void* acc, size_t n, void* out) {
  float buf[kBlock];
  const float* a = static_cast<const float*>(acc);
  auto* o = static_cast<uint8_t*>(out);
  const float scale = 1.0f / static_cast<float>(nranks);
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    for (size_t i = 0; i < m; ++i)
      buf[i] = op.kind == RedKind::kAvg ? a[base + i] * scale : a[base + i];
    f32_to_narrow(t, buf, m, o + base * narrow_size(t));
  }
}

}  // namespace

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kI8:
    case DType::kU8:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return 1;
    case DType::kF16:
    case DType::kBf16:
      return 2;
    case DType::kI32:
    case DType::kU32:
    case DType::kF32:
      return 4;
    default:
      return 8;
  }
}

bool is_integer(DType t) {
  return t <= DType::kU64;
}

size_t acc_size(DType t) {
  switch (t) {
    case DType::kF16:
    case DType::kBf16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return sizeof(float);
    default:
      return dtype_size(t);
  }
}

#define SCCL_DISPATCH_SAME(t, F, ...)  \
  switch (t) {                         \
    case DType::kI8:                   \
      return F<int8_t>(__VA_ARGS__);   \
    case DType::kU8:                   \
      return F<uint8_t>(__VA_ARGS__);  \
    case DType::kI32:                  \
      return F<int32_t>(__VA_ARGS__);  \
    case DType::kU32:                  \
      return F<uint32_t>(__VA_ARGS__); \
    case DType::kI64:                  \
      return F<int64_t>(__VA_ARGS__);  \
    case DType::kU64:                  \
      return F<uint64_t>(__VA_ARGS__); \
    case DType::kF32:                  \
      return F<float>(__VA_ARGS__);    \
    case DType::kF64:                  \
      return F<double>(__VA_ARGS__);   \
    default:                           \
      break;                           \
  }

void acc_load(DType t, const RedOp& op, const void* x, size_t n, void* acc) {
  SCCL_DISPATCH_SAME(t, load_same, op, x, n, acc)
  load_narrow(t, op, x, n, acc);
}

void acc_combine(DType t, const RedOp& op, void* acc, const void* x, size_t n) {
  SCCL_DISPATCH_SAME(t, combine_same, op, acc, x, n)
  combine_narrow(t, op, acc, x, n);
}

void acc_store(DType t, const RedOp& op, int nranks, const void* acc, size_t n, void* out) {
  SCCL_DISPATCH_SAME(t, store_same, op, nranks, acc, n, out)
  store_narrow(t, op, nranks, acc, n, out);
}

#undef SCCL_DISPATCH_SAME

float fp8_to_float(DType t, uint8_t v) {
  return decode_fp8(format(t), v);
}

uint8_t float_to_fp8(DType t, float v) {
  return encode_fp8(t, v);
}

}  // namespace sketchccl::standalone
