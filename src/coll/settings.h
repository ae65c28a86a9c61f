// The protocol settings a communicator runs with, read once from the configuration at init.
// Every value, defaults included, comes from the table (core/config_vars.def).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/codec.h"
#include "src/coll/codec_choice.h"
#include "src/core/config.h"
#include "src/core/status.h"

namespace sketchccl::coll {

struct Settings {
  bool auto_codec;                 // SKETCHCCL_CODEC=auto
  kernels::CodecId codec{};        // SKETCHCCL_CODEC when not auto (else dense_codec)
  kernels::CodecId dense_codec{};  // SKETCHCCL_DENSE_CODEC
  // SKETCHCCL_ALLGATHER_CODEC: a linear codec, or kNone (AllGathers exact; allgather.h).
  kernels::CodecId allgather_codec{};
  double sparse_density;
  SupportSetting sparse_support;  // SKETCHCCL_SPARSE_SUPPORT: `sparse` phase 1's encoding
  size_t slice_elems;             // SKETCHCCL_SLICE_BYTES / 4
  int depth;
  size_t stage_chunk_bytes;  // SKETCHCCL_STAGE_CHUNK_BYTES: a staged device call's chunk, 0: whole
  bool error_feedback;
  uint64_t seed;
  uint32_t s2_rows;
  double s2_budget;
  double s2_counters_per_nz;
  bool s2_repair;   // SKETCHCCL_S2_REPAIR: exact second phase for what did not peel (s2_repair.h)
  double max_nmse;  // SKETCHCCL_MAX_NMSE: the accuracy guard's bound, 0 = off
  double timeout_s;
  bool hierarchy;  // SKETCHCCL_HIERARCHY=auto: node-aware AllReduce (docs/hierarchy.md)
  // SKETCHCCL_ALGO: the data schedule of the quantizing codecs (schedule_choice.h).
  enum class Algo : uint8_t { kAuto, kRing, kTwoShot } algo = Algo::kAuto;
  // SKETCHCCL_LINK_GBPS / _LATENCY_US: this rank's statement of its link for auto's model
  // (link_probe.h); 0 measures it.
  double link_gbps;
  double link_latency_us;
  // SKETCHCCL_DEVICE_CODECS: where a device call's codecs run (docs/cuda.md): the host (the first
  // rung), or the ring kernels on the caller's stream where the call qualifies (device_ring.h).
  enum class DeviceCodecs : uint8_t { kHost, kDevice, kAuto } device_codecs = DeviceCodecs::kHost;

  // The table's defaults.
  Settings();
  // The cost model's view of a buffer of `count` elements among `nranks` ranks.
  CostModelParams cost_model(size_t count, int nranks) const;
  // Fails (kInvalidArgument, naming the variable) when a codec name has no implementation.
  static Status from_config(const Config& cfg, Settings* out);
};

// The codec a SKETCHCCL_CODEC / SKETCHCCL_DENSE_CODEC value names ("auto" is not one).
Status codec_setting(const VarSpec& spec, const std::string& name, kernels::CodecId* out);

}  // namespace sketchccl::coll
