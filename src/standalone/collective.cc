// Every collective and send/recv without a real NCCL. AllReduce and ReduceScatter of float32,
// float16 or bfloat16 with sum or avg run on SketchCCL's compressed ring (host memory, or device
// and page-locked memory staged on the caller's stream, docs/cuda.md), one path for both; below
// SKETCHCCL_MIN_BYTES of input, or with SKETCHCCL_ENABLE=0, exact (`none`): there is no NCCL to
// forward them to. AllGather of those types runs compressed where SKETCHCCL_ALLGATHER_CODEC or
// the call's codec option names a codec (host memory, at least SKETCHCCL_MIN_BYTES gathered;
// docs/allgather.md), else exact. Every other type, op and collective runs on the exact engine
// (exact_calls.h), sends and receives on p2p_calls.h.
#include "src/api/call_log.h"
#include "src/api/coll_config.h"
#include "src/api/last_error.h"
#include "src/api/runtime.h"
#include "src/api/submit.h"
#include "src/api/validate.h"
#include "src/backend/cuda_query.h"
#include "src/standalone/exact_calls.h"
#include "src/standalone/front.h"
#include "src/standalone/p2p_calls.h"

namespace sketchccl::standalone {
namespace {

ncclResult_t run_compressed(coll::Communicator& c, api::CollCall call, bool exact_asked) {
  // Host memory positively, or stream-ordered memory (run only with CUDA and a device); else an
  // error.
  call.mem = api::classify(call, c.nranks());
  Status st = api::validate(call, c.rank(), c.nranks(), &call.elem);
  if (!st.ok()) return api::report(st, call.api);
  // No NCCL to forward to: device buffers are refused where they cannot run.
  if (call.mem.type == backend::MemoryType::kDevice && backend::stream_is_capturing(call.stream)) {
    return api::report(errorf(Code::kInvalidUsage,
                              "%s on a stream being captured into a CUDA graph: standalone mode "
                              "cannot be captured (in front of a real NCCL the call is forwarded)",
                              call.api),
                       call.api);
  }
  // No NCCL to forward small calls to either: they run exact (`none`).
  const api::FrontSettings& s = api::Runtime::get().front_settings();
  const size_t input_bytes = api::input_count(call, c.nranks()) * kernels::elem_size(call.elem);
  const bool exact = exact_asked || !s.enabled || input_bytes < s.min_bytes;
  return api::report(api::submit(c, call, exact ? api::EngineRun::kExact : api::EngineRun::kCodec),
                     call.api);
}

// An AllGather: compressed with the call's codec option, else SKETCHCCL_ALLGATHER_CODEC; exact
// (as every other collective) with `none`, the exact option, device memory, a type the codecs do
// not read, or below SKETCHCCL_MIN_BYTES gathered.
ncclResult_t run_allgather(coll::Communicator& c, api::CollCall call, bool exact_asked) {
  const kernels::CodecId codec = call.has_codec ? call.codec : c.allgather_codec();
  if (exact_asked || codec == kernels::CodecId::kNone) return exact_call(call);
  Status st = coll::check_gather_codec(
      codec, call.has_codec ? "the call's codec option" : "SKETCHCCL_ALLGATHER_CODEC");
  if (!st.ok()) return api::report(st, call.api);
  if (!api::compressed_type(call.type, &call.elem)) return exact_call(call);
  call.mem = api::classify(call, c.nranks());
  if (call.mem.known && !call.mem.mixed && call.mem.type == backend::MemoryType::kDevice) {
    return exact_call(call);
  }
  st = api::validate(call, c.rank(), c.nranks(), &call.elem);
  if (!st.ok()) return api::report(st, call.api);
  const api::FrontSettings& s = api::Runtime::get().front_settings();
  const size_t gathered = api::output_count(call, c.nranks()) * kernels::elem_size(call.elem);
  if (!s.enabled || gathered < s.min_bytes) return exact_call(call);
  if (api::call_log_enabled()) {
    const std::string outcome = std::string("compressed, codec ") + kernels::codec_name(codec);
    api::log_call(call, c.nranks(), outcome.c_str(), nullptr);
  }
  return api::report(api::submit_gather(c, call, codec), call.api);
}

}  // namespace

ncclResult_t StandaloneFront::collective(const api::CollCall& call_in) {
  api::CollCall call = call_in;
  // An nccl*Config call: its config must be valid; SketchCCL's options apply to AllReduce,
  // ReduceScatter and AllGather, NCCL's own settings (algorithms, CTAs) mean nothing without NCCL.
  bool exact_asked = false;
  if (call.with_config) {
    const api::CollOptions opts = api::read_coll_config(call.config);
    if (!opts.invalid.empty()) {
      return api::report(Status(Code::kInvalidArgument, opts.invalid), call.api);
    }
    exact_asked = opts.exact;
    call.has_codec = opts.has_codec;
    call.codec = opts.codec;
  }
  switch (call.kind) {
    case api::CollKind::kAllReduce:
    case api::CollKind::kReduceScatter: {
      auto c = api::Runtime::get().find(call.comm);
      if (c == nullptr) {
        return api::report(Status(Code::kInvalidArgument, "comm is not a live communicator"),
                           call.api);
      }
      // The other types and ops (every one NCCL accepts) run the exact engine.
      if (api::compressed_eligible(call.type, call.op))
        return run_compressed(*c, call, exact_asked);
      return exact_call(call);
    }
    case api::CollKind::kAllGather: {
      auto c = api::Runtime::get().find(call.comm);
      if (c == nullptr) return exact_call(call);  // which says what is wrong with the comm
      return run_allgather(*c, call, exact_asked);
    }
    case api::CollKind::kSend:
    case api::CollKind::kRecv:
      return p2p_call(call);
    default:
      return exact_call(call);
  }
}

}  // namespace sketchccl::standalone
