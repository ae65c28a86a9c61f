// The protocol settings a communicator runs with, read once from the configuration at init.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/config.h"
#include "kernels/codec.h"

namespace sketchccl::coll {

struct Settings {
  bool auto_codec = true;                                // SKETCHCCL_CODEC=auto
  kernels::CodecId codec = kernels::CodecId::kQ8;        // when not auto
  kernels::CodecId dense_codec = kernels::CodecId::kQ8;  // SKETCHCCL_DENSE_CODEC
  double sparse_density = 0.1;
  size_t slice_elems = 262144;  // SKETCHCCL_SLICE_BYTES / 4
  int depth = 4;
  bool error_feedback = false;
  uint64_t seed = 0;
  uint32_t s2_rows = 3;
  double s2_budget = 0.25;
  double s2_counters_per_nz = 1.3;
  float casq_buckets = 0.01f;
  double timeout_s = 300;

  static Settings from_config(const Config& cfg);
};

}  // namespace sketchccl::coll
