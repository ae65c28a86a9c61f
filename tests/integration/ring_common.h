// Shared by the transport and bootstrap integration driver and worker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sketchccl::itest {

inline std::string to_hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

inline bool from_hex(const std::string& s, uint8_t* p, size_t n) {
  if (s.size() != 2 * n) return false;
  auto v = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < n; ++i) {
    int hi = v(s[2 * i]), lo = v(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    p[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

// The byte at offset i of message (src -> dst, size, iteration, part).
inline uint8_t pattern(int src, int dst, size_t size, int iter, int part, size_t i) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u;
  x ^= static_cast<uint32_t>(src * 0x9e37 + dst * 0x85eb + iter * 0xc2b2 + part * 0x27d4);
  x ^= static_cast<uint32_t>(size * 0x165667b1u);
  return static_cast<uint8_t>(x >> 11);
}

}  // namespace sketchccl::itest
