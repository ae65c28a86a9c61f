#include "coll/settings.h"

namespace sketchccl::coll {

Settings Settings::from_config(const Config& cfg) {
  Settings s;
  const std::string& codec = cfg.get_string(Var::kCodec);
  s.auto_codec = codec == "auto";
  if (!s.auto_codec) kernels::codec_from_name(codec.c_str(), &s.codec);
  kernels::codec_from_name(cfg.get_string(Var::kDenseCodec).c_str(), &s.dense_codec);
  s.sparse_density = cfg.get_double(Var::kSparseDensity);
  s.slice_elems = cfg.get_size(Var::kSliceBytes) / sizeof(float);
  s.depth = static_cast<int>(cfg.get_int(Var::kPipelineDepth));
  s.error_feedback = cfg.get_bool(Var::kErrorFeedback);
  s.seed = static_cast<uint64_t>(cfg.get_int(Var::kSeed));
  s.s2_rows = static_cast<uint32_t>(cfg.get_int(Var::kS2Rows));
  s.s2_budget = cfg.get_double(Var::kS2Budget);
  s.s2_counters_per_nz = cfg.get_double(Var::kS2CountersPerNonzero);
  s.casq_buckets = static_cast<float>(cfg.get_double(Var::kCasqBuckets));
  s.timeout_s = cfg.get_double(Var::kTimeout);
  return s;
}

}  // namespace sketchccl::coll
