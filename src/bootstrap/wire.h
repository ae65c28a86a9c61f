// Bootstrap wire format: what a rank sends the root listener (hello) and what the root answers
// (the table of addresses and configuration hashes, or an error). Every message is framed by a
// 4-byte little-endian body length; bodies start with magic, version and type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "src/core/status.h"

namespace sketchccl::bootstrap::wire {

constexpr uint32_t kMagic = 0x42434353;  // "SCCB"
constexpr uint16_t kVersion = 1;
constexpr uint16_t kTypeHello = 1;
constexpr uint16_t kTypeTable = 2;
constexpr uint16_t kTypeError = 3;
constexpr uint16_t kTypeAbandon = 4;  // a hello saying the rank cannot join (blob: why)
constexpr size_t kFrameBytes = 4;
constexpr size_t kMaxBlobBytes = 64 * 1024;
constexpr uint32_t kMaxRanks = 1u << 20;
constexpr size_t kHelloFixedBytes = 8 + 8 + 4 + 4 + 8 + 4;
constexpr size_t kMaxHelloBytes = kHelloFixedBytes + kMaxBlobBytes;
constexpr size_t kMaxReplyBytes = size_t{256} << 20;
constexpr size_t kMaxErrorBytes = 4096;

struct Hello {
  uint64_t secret = 0;
  uint32_t rank = 0;
  uint32_t nranks = 0;
  uint64_t config_hash = 0;
  std::vector<uint8_t> blob;
  bool abandon = false;  // kTypeAbandon: the rank cannot join; blob holds why (text)
};

struct Reply {
  bool ok = false;
  std::string error;                        // when !ok
  std::vector<std::vector<uint8_t>> blobs;  // when ok, one per rank
  std::vector<uint64_t> config_hashes;
};

// Framed messages (length prefix included).
std::vector<uint8_t> encode_hello(const Hello& h);
std::vector<uint8_t> encode_table(const std::vector<std::vector<uint8_t>>& blobs,
                                  const std::vector<uint64_t>& config_hashes);
std::vector<uint8_t> encode_error(const std::string& message);

// Parse a body (without the length prefix). Any malformed input gives kInvalidArgument with a
// message naming the problem; never reads outside [data, data + len).
Status parse_hello(const uint8_t* data, size_t len, Hello* out);
Status parse_reply(const uint8_t* data, size_t len, Reply* out);

}  // namespace sketchccl::bootstrap::wire
