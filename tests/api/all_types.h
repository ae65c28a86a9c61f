// Element access for every ncclDataType_t in the test workers: values are small integers (every
// one exact in every type, fp8 included), loaded back as double.
#pragma once

#include <nccl.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>

#include "tests/api/elem_convert.h"

namespace sketchccl::testing {

inline size_t any_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}

inline const char* any_name(ncclDataType_t t) {
  static const char* const names[] = {"i8",  "u8",  "i32", "u32",  "i64",  "u64",
                                      "f16", "f32", "f64", "bf16", "e4m3", "e5m2"};
  return names[static_cast<int>(t)];
}

inline bool any_unsigned(ncclDataType_t t) {
  return t == ncclUint8 || t == ncclUint32 || t == ncclUint64;
}
inline bool any_integer(ncclDataType_t t) {
  return t <= ncclUint64;
}

// The OCP fp8 formats, decoded from their definition.
inline double fp8_value(bool e4m3, uint8_t v) {
  const int eb = e4m3 ? 4 : 5, mb = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int e = (v >> mb) & ((1 << eb) - 1), m = v & ((1 << mb) - 1);
  double r;
  if (e4m3 && (v & 0x7f) == 0x7f) return NAN;
  if (!e4m3 && e == 31) {
    r = m == 0 ? INFINITY : NAN;
  } else if (e == 0) {
    r = std::ldexp(m, 1 - bias - mb);
  } else {
    r = std::ldexp(m + (1 << mb), e - bias - mb);
  }
  return (v & 0x80) ? -r : r;
}

// Value -> code of one fp8 format (+0 wins over -0), made once.
inline std::map<double, uint8_t> fp8_codes(bool e4m3) {
  std::map<double, uint8_t> m;
  for (int c = 255; c >= 0; --c) {
    const double v = fp8_value(e4m3, static_cast<uint8_t>(c));
    if (v == v) m[v] = static_cast<uint8_t>(c);
  }
  return m;
}

// The code of an exactly representable value (0 when none).
inline uint8_t fp8_code(bool e4m3, double x) {
  static const std::map<double, uint8_t> e5m2_codes = fp8_codes(false),
                                         e4m3_codes = fp8_codes(true);
  const std::map<double, uint8_t>& m = e4m3 ? e4m3_codes : e5m2_codes;
  auto it = m.find(x);
  return it == m.end() ? 0 : it->second;
}

inline void any_store(ncclDataType_t t, void* buf, size_t i, double v) {
  auto* b = static_cast<uint8_t*>(buf);
  switch (t) {
    case ncclInt8:
      reinterpret_cast<int8_t*>(b)[i] = static_cast<int8_t>(v);
      break;
    case ncclUint8:
      b[i] = static_cast<uint8_t>(v);
      break;
    case ncclInt32:
      reinterpret_cast<int32_t*>(b)[i] = static_cast<int32_t>(v);
      break;
    case ncclUint32:
      reinterpret_cast<uint32_t*>(b)[i] = static_cast<uint32_t>(v);
      break;
    case ncclInt64:
      reinterpret_cast<int64_t*>(b)[i] = static_cast<int64_t>(v);
      break;
    case ncclUint64:
      reinterpret_cast<uint64_t*>(b)[i] = static_cast<uint64_t>(v);
      break;
    case ncclFloat64:
      reinterpret_cast<double*>(b)[i] = v;
      break;
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      b[i] = fp8_code(t == ncclFloat8e4m3, v);
      break;
    default:
      store(t, buf, i, static_cast<float>(v));
  }
}

inline double any_load(ncclDataType_t t, const void* buf, size_t i) {
  const auto* b = static_cast<const uint8_t*>(buf);
  switch (t) {
    case ncclInt8:
      return reinterpret_cast<const int8_t*>(b)[i];
    case ncclUint8:
      return b[i];
    case ncclInt32:
      return reinterpret_cast<const int32_t*>(b)[i];
    case ncclUint32:
      return reinterpret_cast<const uint32_t*>(b)[i];
    case ncclInt64:
      return static_cast<double>(reinterpret_cast<const int64_t*>(b)[i]);
    case ncclUint64:
      return static_cast<double>(reinterpret_cast<const uint64_t*>(b)[i]);
    case ncclFloat64:
      return reinterpret_cast<const double*>(b)[i];
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return fp8_value(t == ncclFloat8e4m3, b[i]);
    default:
      return load(t, buf, i);
  }
}

// Relative error a rounded (not exact) result may show in type t: half an ulp, with margin.
inline double any_tolerance(ncclDataType_t t) {
  switch (t) {
    case ncclFloat16:
      return 1e-3;
    case ncclBfloat16:
      return 8e-3;
    case ncclFloat8e4m3:
      return 0.07;
    case ncclFloat8e5m2:
      return 0.13;
    case ncclFloat32:
      return 1e-6;
    case ncclFloat64:
      return 1e-14;
    default:
      return 0;
  }
}

}  // namespace sketchccl::testing
