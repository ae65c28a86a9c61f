#include "src/coll/settings.h"

#include "src/core/log.h"

namespace sketchccl::coll {
namespace {

// Every name but `except` in an Enum's accepted list is a codec that kernels implement.
constexpr bool all_codecs(std::string_view accepted, std::string_view except) {
  while (true) {
    const size_t bar = accepted.find('|');
    const std::string_view name = accepted.substr(0, bar);
    if (name != except && !kernels::is_codec_name(name)) return false;
    if (bar == std::string_view::npos) return true;
    accepted.remove_prefix(bar + 1);
  }
}
static_assert(all_codecs(var_accepted(Var::kCodec), "auto"),
              "config_vars.def: SKETCHCCL_CODEC accepts a name kernels/codec.h has no codec for");
static_assert(all_codecs(var_accepted(Var::kDenseCodec), ""),
              "config_vars.def: SKETCHCCL_DENSE_CODEC accepts a name kernels/codec.h has no codec "
              "for");

}  // namespace

Status codec_setting(const VarSpec& spec, const std::string& name, kernels::CodecId* out) {
  if (kernels::codec_from_name(name.c_str(), out)) return Status::Ok();
  return errorf(Code::kInvalidArgument, "%s='%s': no codec of that name is built", spec.name,
                name.c_str());
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
  s.error_feedback = cfg.get_bool(Var::kErrorFeedback);
  s.seed = static_cast<uint64_t>(cfg.get_int(Var::kSeed));
  s.s2_rows = static_cast<uint32_t>(cfg.get_int(Var::kS2Rows));
  s.s2_budget = cfg.get_double(Var::kS2Budget);
  s.s2_counters_per_nz = cfg.get_double(Var::kS2CountersPerNonzero);
  s.s2_repair = cfg.get_bool(Var::kS2Repair);
  s.casq_buckets = static_cast<float>(cfg.get_double(Var::kCasqBuckets));
  s.max_nmse = cfg.get_double(Var::kMaxNmse);
  s.timeout_s = cfg.get_double(Var::kTimeout);
  s.hierarchy = cfg.get_string(Var::kHierarchy) == "auto";
  SCCL_RETURN_IF_ERROR(
      codec_setting(var_spec(Var::kDenseCodec), cfg.get_string(Var::kDenseCodec), &s.dense_codec));
  const std::string& codec = cfg.get_string(Var::kCodec);
  s.auto_codec = codec == "auto";
  s.codec = s.dense_codec;
  if (!s.auto_codec) SCCL_RETURN_IF_ERROR(codec_setting(var_spec(Var::kCodec), codec, &s.codec));
  return Status::Ok();
}

}  // namespace sketchccl::coll
