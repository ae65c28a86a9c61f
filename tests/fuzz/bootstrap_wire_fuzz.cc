// Fuzzes the bootstrap message parsers (what the root listener and the joining ranks read from
// the network): never crash, errors name the problem, and whatever parses re-encodes to the
// same bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "src/bootstrap/wire.h"

namespace wire = sketchccl::bootstrap::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  wire::Hello h;
  sketchccl::Status st = wire::parse_hello(data, size, &h);
  if (st.ok()) {
    std::vector<uint8_t> again = wire::encode_hello(h);
    if (again.size() != size + wire::kFrameBytes) __builtin_trap();
    for (size_t i = 0; i < size; ++i) {
      if (again[wire::kFrameBytes + i] != data[i]) __builtin_trap();
    }
  } else if (st.message().empty()) {
    __builtin_trap();
  }
  wire::Reply r;
  st = wire::parse_reply(data, size, &r);
  if (st.ok()) {
    std::vector<uint8_t> again =
        r.ok ? wire::encode_table(r.blobs, r.config_hashes) : wire::encode_error(r.error);
    if (again.size() != size + wire::kFrameBytes) __builtin_trap();
    for (size_t i = 0; i < size; ++i) {
      if (again[wire::kFrameBytes + i] != data[i]) __builtin_trap();
    }
  } else if (st.message().empty()) {
    __builtin_trap();
  }
  return 0;
}
