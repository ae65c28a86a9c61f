// fp16/bf16 stores and loads for the test workers (inputs are exactly representable values).
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sketchccl::testing {

inline uint16_t to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xff, m = x & 0x7fffffu;
  if (f == 0) return static_cast<uint16_t>(sign);
  const int he = static_cast<int>(e) - 127 + 15;
  if (he <= 0) return static_cast<uint16_t>(sign);             // flush tiny to zero
  if (he >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // tests stay in range
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(he) << 10) | (m >> 13));
}

inline float from_half(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1f,
                 m = h & 0x3ffu;
  uint32_t x;
  if (e == 0 && m == 0) {
    x = sign;
  } else if (e == 0) {
    const float v = static_cast<float>(m) / 16777216.0f;
    return sign ? -v : v;
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13);
  } else {
    x = sign | ((e - 15 + 127) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline uint16_t to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return static_cast<uint16_t>(x >> 16);
}

inline float from_bf16(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline size_t type_size(ncclDataType_t t) {
  return t == ncclFloat32 ? 4 : 2;
}

inline const char* type_name(ncclDataType_t t) {
  return t == ncclFloat32 ? "f32" : t == ncclFloat16 ? "f16" : "bf16";
}

inline void store(ncclDataType_t t, void* buf, size_t i, float v) {
  if (t == ncclFloat32)
    static_cast<float*>(buf)[i] = v;
  else if (t == ncclFloat16)
    static_cast<uint16_t*>(buf)[i] = to_half(v);
  else
    static_cast<uint16_t*>(buf)[i] = to_bf16(v);
}

inline float load(ncclDataType_t t, const void* buf, size_t i) {
  if (t == ncclFloat32) return static_cast<const float*>(buf)[i];
  if (t == ncclFloat16) return from_half(static_cast<const uint16_t*>(buf)[i]);
  return from_bf16(static_cast<const uint16_t*>(buf)[i]);
}

}  // namespace sketchccl::testing
