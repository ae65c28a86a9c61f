// Fuzzes the configuration value parser with every variable's spec.
#include <cstddef>
#include <cstdint>
#include <string>

#include "src/core/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& specs = sketchccl::var_specs();
  const sketchccl::VarSpec& spec = specs[data[0] % specs.size()];
  std::string raw(reinterpret_cast<const char*>(data + 1), size - 1);
  sketchccl::Setting out;
  sketchccl::Status st = sketchccl::parse_value(spec, raw, &out);
  if (!st.ok() && st.message().find(spec.name) == std::string::npos) __builtin_trap();
  return 0;
}
