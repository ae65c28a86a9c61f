#include "src/coll/settings.h"

#include <string_view>

#include "src/core/log.h"

namespace sketchccl::coll {
namespace {

// core sits below kernels and cannot read kernels/codecs.def, so the codec lists of its table
// are checked here, against the codec table, at compile time.
constexpr bool in_list(std::string_view accepted, std::string_view name) {
  while (true) {
    const size_t bar = accepted.find('|');
    if (accepted.substr(0, bar) == name) return true;
    if (bar == std::string_view::npos) return false;
    accepted.remove_prefix(bar + 1);
  }
}
// The Enum's accepted list is `extra` (or nothing, when empty) and exactly the codecs for which
// `wanted` holds, each once, in any order.
template <typename Wanted>
constexpr bool names_the_codecs(std::string_view accepted, std::string_view extra, Wanted wanted) {
  size_t listed = 0;
  for (std::string_view rest = accepted;;) {
    const size_t bar = rest.find('|');
    const std::string_view name = rest.substr(0, bar);
    if (name != extra) {
      const kernels::CodecInfo* c = nullptr;
      for (const kernels::CodecInfo& k : kernels::kCodecs) {
        if (name == k.name) c = &k;
      }
      if (c == nullptr || !wanted(*c)) return false;
      ++listed;
    }
    if (bar == std::string_view::npos) break;
    rest.remove_prefix(bar + 1);
  }
  size_t expected = 0;
  for (const kernels::CodecInfo& k : kernels::kCodecs) {
    if (wanted(k)) {
      if (!in_list(accepted, k.name)) return false;
      ++expected;
    }
  }
  return listed == expected && (extra.empty() || in_list(accepted, extra));
}
static_assert(names_the_codecs(var_accepted(Var::kCodec), "auto",
                               [](const kernels::CodecInfo&) { return true; }),
              "config_vars.def: SKETCHCCL_CODEC must accept auto and every codec of "
              "kernels/codecs.def, and nothing else");
static_assert(names_the_codecs(var_accepted(Var::kDenseCodec), "",
                               [](const kernels::CodecInfo& c) { return c.dense; }),
              "config_vars.def: SKETCHCCL_DENSE_CODEC must accept exactly the codecs that "
              "kernels/codecs.def marks dense");

static_assert(names_the_codecs(var_accepted(Var::kAllGatherCodec), "",
                               [](const kernels::CodecInfo& c) {
                                 return c.family == kernels::CodecFamily::kLinear;
                               }),
              "config_vars.def: SKETCHCCL_ALLGATHER_CODEC must accept exactly the codecs that "
              "kernels/codecs.def puts in the Linear family");

}  // namespace

Status codec_setting(const VarSpec& spec, const std::string& name, kernels::CodecId* out) {
  if (kernels::codec_from_name(name.c_str(), out)) return Status::Ok();
  return errorf(Code::kInvalidArgument, "%s='%s': no codec of that name is built", spec.name,
                name.c_str());
}

CostModelParams Settings::cost_model(size_t count, int nranks) const {
  CostModelParams p;
  p.count = count;
  p.nranks = nranks;
  p.slice_elems = slice_elems;
  p.dense_codec = dense_codec;
  p.s2_rows = s2_rows;
  p.s2_counters_per_nz = s2_counters_per_nz;
  p.sparse_density = sparse_density;
  p.support = sparse_support;
  return p;
}

Settings::Settings() {
  Status st = from_config(Config::defaults(), this);
  if (!st.ok()) SCCL_WARN(kLogInit, "default settings: %s", st.message().c_str());
}

Status Settings::from_config(const Config& cfg, Settings* out) {
  Settings& s = *out;
  s.sparse_density = cfg.get_double(Var::kSparseDensity);
  if (!support_setting_from_name(cfg.get_string(Var::kSparseSupport).c_str(), &s.sparse_support)) {
    return errorf(Code::kInvalidArgument, "SKETCHCCL_SPARSE_SUPPORT='%s': not an encoding",
                  cfg.get_string(Var::kSparseSupport).c_str());
  }
  s.slice_elems = cfg.get_size(Var::kSliceBytes) / sizeof(float);
  s.depth = static_cast<int>(cfg.get_int(Var::kPipelineDepth));
  s.stage_chunk_bytes = cfg.get_size(Var::kStageChunkBytes);
  s.error_feedback = cfg.get_bool(Var::kErrorFeedback);
  s.seed = static_cast<uint64_t>(cfg.get_int(Var::kSeed));
  s.s2_rows = static_cast<uint32_t>(cfg.get_int(Var::kS2Rows));
  s.s2_budget = cfg.get_double(Var::kS2Budget);
  s.s2_counters_per_nz = cfg.get_double(Var::kS2CountersPerNonzero);
  s.s2_repair = cfg.get_bool(Var::kS2Repair);
  s.max_nmse = cfg.get_double(Var::kMaxNmse);
  s.timeout_s = cfg.get_double(Var::kTimeout);
  s.hierarchy = cfg.get_string(Var::kHierarchy) == "auto";
  s.link_gbps = cfg.get_double(Var::kLinkGbps);
  s.link_latency_us = cfg.get_double(Var::kLinkLatencyUs);
  const std::string& algo = cfg.get_string(Var::kAlgo);
  s.algo = algo == "ring"      ? Settings::Algo::kRing
           : algo == "twoshot" ? Settings::Algo::kTwoShot
                               : Settings::Algo::kAuto;
  const std::string& device_codecs = cfg.get_string(Var::kDeviceCodecs);
  s.device_codecs = device_codecs == "device" ? Settings::DeviceCodecs::kDevice
                    : device_codecs == "auto" ? Settings::DeviceCodecs::kAuto
                                              : Settings::DeviceCodecs::kHost;
  SCCL_RETURN_IF_ERROR(
      codec_setting(var_spec(Var::kDenseCodec), cfg.get_string(Var::kDenseCodec), &s.dense_codec));
  SCCL_RETURN_IF_ERROR(codec_setting(var_spec(Var::kAllGatherCodec),
                                     cfg.get_string(Var::kAllGatherCodec), &s.allgather_codec));
  const std::string& codec = cfg.get_string(Var::kCodec);
  s.auto_codec = codec == "auto";
  s.codec = s.dense_codec;
  if (!s.auto_codec) SCCL_RETURN_IF_ERROR(codec_setting(var_spec(Var::kCodec), codec, &s.codec));
  return Status::Ok();
}

}  // namespace sketchccl::coll
