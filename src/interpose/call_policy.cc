#include "src/interpose/call_policy.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "src/api/runtime.h"
#include "src/backend/cuda_query.h"
#include "src/core/log.h"

namespace sketchccl::interpose {

CommState wait_for_join(coll::Communicator* c, double timeout_s) {
  if (c == nullptr) return CommState::kNone;
  const auto& init = c->init_work();
  if (!init->done()) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (!init->done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!init->done()) return CommState::kFailed;
  }
  if (!init->wait().ok() || c->stepped_aside()) return CommState::kFailed;
  if (!c->configs_agree()) return CommState::kDisagree;
  return CommState::kReady;
}

PolicyInput policy_input(const coll::Communicator* c, CommState state, const api::CollCall& call) {
  const api::FrontSettings& s = api::Runtime::get().front_settings();
  PolicyInput in;
  in.enabled = s.enabled;
  in.comm = state;
  in.one_node = in.comm == CommState::kReady && c->forwards_one_node();
  in.op = call.op;
  in.type = call.type;
  // An AllGather's size is what it gathers (docs/allgather.md).
  const int nranks = c != nullptr ? c->nranks() : 1;
  in.count = call.kind == api::CollKind::kAllGather ? api::output_count(call, nranks)
                                                    : api::input_count(call, nranks);
  in.min_bytes = s.min_bytes;
  in.mem_pending = true;  // asked only if the rest says "take over"
  if (in.comm == CommState::kReady && in.enabled) {
    in.capturing = backend::stream_is_capturing(call.stream);
    in.cuda_backend = backend::has_cuda_backend();
    // auto's verdicts are the reductions' (an AllGather runs its own codec).
    if (c->network().known && call.kind != api::CollKind::kAllGather) {
      const coll::CallKind kind = call.kind == api::CollKind::kReduceScatter
                                      ? coll::CallKind::kReduceScatter
                                      : coll::CallKind::kAllReduce;
      in.no_gain_host = c->verdict(kind, in.count, false).codec == kernels::CodecId::kNone;
      in.no_gain_device = c->verdict(kind, in.count, true).codec == kernels::CodecId::kNone;
    }
  }
  return in;
}

PolicyDecision decide_with_memory(PolicyInput& in, const api::BufferMemory& mem) {
  in.mem_pending = false;
  in.mem_known = mem.known;
  in.mem = mem.type;
  // Device buffers: CUDA with a device and a driver new enough (docs/cuda.md).
  if (in.mem_known && in.mem == backend::MemoryType::kDevice && in.cuda_backend) {
    in.cuda_backend = backend::device_path_usable(&in.cuda_unusable);
  }
  PolicyDecision d = decide(in);
  if (d.why == ForwardReason::kMemory) {
    // Any doubt forwards; said once per process, the per-call log says it each time.
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      SCCL_WARN(kLogColl,
                "a buffer's memory cannot be classified (%s): such calls are forwarded to NCCL "
                "uncompressed (said once)",
                mem.why);
    }
  }
  return d;
}

std::string taken_over_outcome(const api::CollCall& call) {
  const coll::Settings& s = api::Runtime::get().settings();
  if (call.kind == api::CollKind::kAllGather) {
    return std::string("taken over, compressed AllGather, codec ") +
           kernels::codec_name(call.has_codec ? call.codec : s.allgather_codec);
  }
  if (s.auto_codec) return "taken over, codec auto (the engine picks per buffer)";
  return std::string("taken over, codec ") + kernels::codec_name(s.codec);
}

std::string forwarded_outcome(const PolicyDecision& d, const api::BufferMemory& mem) {
  std::string out = std::string("forwarded: ") + d.reason;
  if (d.why == ForwardReason::kMemory) out += std::string(" (") + mem.why + ")";
  return out;
}

}  // namespace sketchccl::interpose
