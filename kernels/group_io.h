// Groups of 8 consecutive elements: the unit one CUDA thread (or one q* lane) loads and stores.
// On the device an aligned whole group is one or two 16-byte accesses; otherwise, and on the
// host, it is a plain loop (which the CPU compiler vectorizes). The values are the same either
// way: only the width of the memory access differs.
#pragma once

#include "kernels/codec_common.h"

namespace sketchccl::kernels::detail {

constexpr uint32_t kGroup = 8;

// The emulated CUDA build (cudaemu/include/cudaemu/device.h) checks a kernel's accesses through
// these helpers as the hardware would (alignment, inside a device allocation), which x86 would not.
#if defined(CUDAEMU_DEVICE_H)
#define SCCL_DEVICE_ACCESS(p, bytes, align) ::cudaemu::dev::check_access(p, bytes, align)
#else
#define SCCL_DEVICE_ACCESS(p, bytes, align) ((void)0)
#endif

// v[k] = element i + k for k < cnt (cnt <= 8), 0 beyond; nothing past cnt is read.
template <int ET>
SCCL_HD_INLINE void load8(const void* x, size_t i, uint32_t cnt, float v[8]) {
#if defined(__CUDA_ARCH__)
  if (cnt == kGroup) {
    const char* p = static_cast<const char*>(x) + i * (ET == int(ElemType::kF32) ? 4 : 2);
    if ((reinterpret_cast<uintptr_t>(p) & 15u) == 0) {
      SCCL_DEVICE_ACCESS(p, ET == int(ElemType::kF32) ? 32 : 16, 16);
      if constexpr (ET == int(ElemType::kF32)) {
        const float4 a = reinterpret_cast<const float4*>(p)[0];
        const float4 b = reinterpret_cast<const float4*>(p)[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
        v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
      } else {
        const uint4 a = *reinterpret_cast<const uint4*>(p);
        const uint32_t w[4] = {a.x, a.y, a.z, a.w};
        for (int k = 0; k < 4; ++k) {  // little-endian: element 2k is the low half
          const uint16_t lo = uint16_t(w[k] & 0xffffu), hi = uint16_t(w[k] >> 16);
          v[2 * k] = ET == int(ElemType::kF16) ? half_to_float(lo) : bf16_to_float(lo);
          v[2 * k + 1] = ET == int(ElemType::kF16) ? half_to_float(hi) : bf16_to_float(hi);
        }
      }
      return;
    }
  }
#endif
  SCCL_DEVICE_ACCESS(static_cast<const char*>(x) + i * (ET == int(ElemType::kF32) ? 4 : 2),
                     (cnt < kGroup ? cnt : kGroup) * (ET == int(ElemType::kF32) ? 4 : 2), 1);
  for (uint32_t k = 0; k < kGroup; ++k)
    v[k] = k < cnt ? load_elem<ET>(x, i + k) : 0.0f;
}

// Elements i .. i + cnt - 1 = v[0 .. cnt - 1]; nothing past cnt is written.
template <int ET>
SCCL_HD_INLINE void store8(void* y, size_t i, uint32_t cnt, const float v[8]) {
#if defined(__CUDA_ARCH__)
  if (cnt == kGroup) {
    char* p = static_cast<char*>(y) + i * (ET == int(ElemType::kF32) ? 4 : 2);
    if ((reinterpret_cast<uintptr_t>(p) & 15u) == 0) {
      SCCL_DEVICE_ACCESS(p, ET == int(ElemType::kF32) ? 32 : 16, 16);
      if constexpr (ET == int(ElemType::kF32)) {
        reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
        reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
      } else {
        uint32_t w[4];
        for (int k = 0; k < 4; ++k) {
          const uint32_t lo =
              ET == int(ElemType::kF16) ? float_to_half(v[2 * k]) : float_to_bf16(v[2 * k]);
          const uint32_t hi =
              ET == int(ElemType::kF16) ? float_to_half(v[2 * k + 1]) : float_to_bf16(v[2 * k + 1]);
          w[k] = lo | (hi << 16);
        }
        *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
      }
      return;
    }
  }
#endif
  SCCL_DEVICE_ACCESS(static_cast<char*>(y) + i * (ET == int(ElemType::kF32) ? 4 : 2),
                     (cnt < kGroup ? cnt : kGroup) * (ET == int(ElemType::kF32) ? 4 : 2), 1);
  for (uint32_t k = 0; k < cnt && k < kGroup; ++k)
    store_elem<ET>(y, i + k, v[k]);
}

// B (1 to 8) little-endian bytes at p as one word. B = 2, 4, 8 must be B-aligned on the device
// (q* records guarantee it); other widths go byte by byte.
template <uint32_t B>
SCCL_HD_INLINE uint64_t load_le(const uint8_t* p) {
  SCCL_DEVICE_ACCESS(p, B, (B == 2 || B == 4 || B == 8) ? B : 1);
#if defined(__CUDA_ARCH__)
  if constexpr (B == 8) {
    return *reinterpret_cast<const unsigned long long*>(p);
  } else if constexpr (B == 4) {
    return *reinterpret_cast<const uint32_t*>(p);
  } else if constexpr (B == 2) {
    return *reinterpret_cast<const uint16_t*>(p);
  } else  // NOLINT: the byte loop below is the other widths' (and the host's) branch
#endif
  {
    uint64_t w = 0;
    for (uint32_t k = 0; k < B; ++k)
      w |= uint64_t(p[k]) << (8 * k);
    return w;
  }
}
template <uint32_t B>
SCCL_HD_INLINE void store_le(uint8_t* p, uint64_t w) {
  SCCL_DEVICE_ACCESS(p, B, (B == 2 || B == 4 || B == 8) ? B : 1);
#if defined(__CUDA_ARCH__)
  if constexpr (B == 8) {
    *reinterpret_cast<unsigned long long*>(p) = w;
  } else if constexpr (B == 4) {
    *reinterpret_cast<uint32_t*>(p) = uint32_t(w);
  } else if constexpr (B == 2) {
    *reinterpret_cast<uint16_t*>(p) = uint16_t(w);
  } else  // NOLINT: as in load_le
#endif
  {
    for (uint32_t k = 0; k < B; ++k)
      p[k] = uint8_t(w >> (8 * k));
  }
}

// Code k of one group: 8 codes of BITS bits packed little-endian into BITS bytes, as one word.
template <uint32_t BITS>
SCCL_HD_INLINE uint32_t code_of(uint64_t w, uint32_t k) {
  return uint32_t(w >> (k * BITS)) & ((1u << BITS) - 1u);
}

}  // namespace sketchccl::kernels::detail
