// The communicator's calls on device buffers (docs/cuda.md, "The device path"): staged on the
// caller's stream, the proxy's work on the staged copies (rung 1, in chunks) or the ring's
// kernels on the stream itself (rung 2, device_ring.h). The rest of Communicator: comm.cc.
#include <chrono>
#include <set>

#include "src/backend/device_runtime.h"
#include "src/backend/memory_pool.h"
#include "src/coll/comm.h"
#include "src/coll/oom.h"
#include "src/coll/stage_chunks.h"
#include "src/core/log.h"

namespace sketchccl::coll {

bool Communicator::device_path_usable(backend::MemoryType mem) {
  if (mem != backend::MemoryType::kDevice) return true;
  backend::RelaxedCaptureScope relaxed;
  std::lock_guard<std::mutex> dlock(device_mu_);
  return build_device_path_locked().ok();
}

Status Communicator::build_device_path_locked() {
  if (stager_) return Status::Ok();
  if (!device_path_error_.ok()) return device_path_error_;
  auto stager = std::make_unique<backend::DeviceStager>(cuda_device_ < 0 ? 0 : cuda_device_);
  stager->set_timeout(settings_.timeout_s);
  const Status st = stager->prepare();
  if (st.ok()) {
    stager_ = std::move(stager);
    return st;
  }
  // Once per communicator: every later device call gets the same answer without retrying.
  device_path_error_ = Status(st.code(), "the device path could not be built: " + st.message());
  if (standalone_) {
    SCCL_WARN(kLogColl, "rank %d: %s; AllReduces on device buffers fail on this communicator",
              rank_, device_path_error_.message().c_str());
  } else {
    SCCL_WARN(kLogColl, "rank %d: %s; AllReduces on device buffers go to NCCL from now on", rank_,
              device_path_error_.message().c_str());
  }
  return device_path_error_;
}

size_t Communicator::output_count(const ReductionArgs& args) const {
  switch (args.kind) {
    case CallKind::kReduceScatter:
      return args.count / static_cast<size_t>(nranks_);
    case CallKind::kRailReduceScatter:
      return args.count / static_cast<size_t>(topology_.nodes < 1 ? 1 : topology_.nodes);
    case CallKind::kAllReduce:
    case CallKind::kRail:
      break;
  }
  return args.count;
}

Status Communicator::submit_reduction_stream(const ReductionArgs& args, void* stream, bool* started,
                                             bool may_wait) {
  if (started != nullptr) *started = false;
  StreamCall call;
  SCCL_RETURN_IF_ERROR(stage_reduction_stream(args, &call, may_wait));
  Status st = enqueue_stream_head(call, stream);
  if (st.ok()) st = enqueue_stream_tail(call, stream);
  if (started != nullptr) *started = !call.staged->cancelled();
  return st;
}

Status Communicator::stage_reduction_stream(const ReductionArgs& args, StreamCall* call,
                                            bool may_wait) {
  kernels::CodecId codec{};
  if (takes_device_ring(args, may_wait, &codec)) return stage_device_ring(args, codec, call);
  const size_t esz = kernels::elem_size(args.type);
  const size_t out_bytes = output_count(args) * esz;
  // In chunks where the flat engine runs it (the hierarchy reads its input whole).
  const backend::StagingChunks chunks =
      hierarchical() ? backend::StagingChunks{}
                     : reduction_chunks(args.kind, args.count, esz, out_bytes, rank_, nranks_,
                                        settings_.slice_elems, settings_.stage_chunk_bytes);
  return stage_on_stream(
      args.count * esz, out_bytes, chunks, args.send, args.recv, 0, call_kind_name(args.kind),
      [this, args](const CommLink& l, backend::StagedCall& c) {
        // The engine runs on the staged copies as on host buffers: the same code, the same
        // packets; it waits for each chunk of the input as it reads it and releases each chunk
        // of the result once final.
        ReductionArgs host = args;
        host.send = c.in();
        host.recv = c.out();
        host.mem = backend::MemoryType::kHost;
        host.staged = true;
        host.gate = &c;
        if (host.state_key == nullptr) host.state_key = args.send;  // the user's buffer
        return reduce(l, host);
      },
      call, may_wait);
}

bool Communicator::takes_device_ring(const ReductionArgs& args, bool may_wait,
                                     kernels::CodecId* codec) {
  if (settings_.device_codecs == Settings::DeviceCodecs::kHost) return false;
  const char* why = first_rung_reason(args, may_wait, codec);
  if (why == nullptr) why = device_codecs_unusable();
  if (why == nullptr) return true;
  if (settings_.device_codecs == Settings::DeviceCodecs::kDevice) {
    // Once per reason and process: a benchmark or a test sees it did not run what it asked.
    static std::mutex mu;
    static std::set<const char*>* said = new std::set<const char*>();
    std::lock_guard<std::mutex> lock(mu);
    if (said->insert(why).second) {
      SCCL_WARN(kLogColl,
                "SKETCHCCL_DEVICE_CODECS=device: a %s on device buffers runs its codecs on the "
                "host (%s; said once)",
                call_kind_name(args.kind), why);
    }
  }
  return false;
}

const char* Communicator::first_rung_reason(const ReductionArgs& args, bool may_wait,
                                            kernels::CodecId* codec) const {
  if (args.kind != CallKind::kAllReduce && args.kind != CallKind::kReduceScatter) {
    return "a hierarchy's rail phase";
  }
  if (hier_ && HierarchicalReduction::takes(args)) return "the hierarchy";
  if (nranks_ < 2) return "one rank copies";
  // One thread may drive several ranks in a group, on one stream: a rank's kernels queued
  // behind another rank's wait for them would never run.
  if (!may_wait) return "inside a group";
  if (settings_.error_feedback) return "error feedback";
  if (settings_.max_nmse > 0) return "the accuracy guard";
  // The ranks agree on each call's codec decision on the proxy, after the call was enqueued.
  if (!args.exact && settings_.auto_codec) return "SKETCHCCL_CODEC=auto";
  *codec = args.exact ? kernels::CodecId::kNone : args.has_codec ? args.codec : settings_.codec;
  if (kernels::codec_info(*codec)->family != kernels::CodecFamily::kLinear) {
    return "a codec without ring kernels on the device path";
  }
  if (choose_schedule(settings_, *codec, nranks_, args.count, /*backend_sums=*/true, args.kind) !=
      Schedule::kRing) {
    return "the two-shot schedule";
  }
  return nullptr;
}

const char* Communicator::device_codecs_unusable() {
  backend::RelaxedCaptureScope relaxed;
  std::lock_guard<std::mutex> dlock(device_mu_);
  if (!build_device_path_locked().ok()) return "the device path could not be built";
  if (device_codecs_state_ == 0) {
    const Status st = backend::device_runtime().prepare_codecs(cuda_device_ < 0 ? 0 : cuda_device_);
    device_codecs_state_ = st.ok() ? 1 : -1;
    if (!st.ok()) {
      SCCL_WARN(kLogColl, "rank %d: the codec kernels cannot run on the caller's stream: %s", rank_,
                st.to_string().c_str());
    }
  }
  return device_codecs_state_ > 0 ? nullptr : "the codec kernels could not be loaded";
}

Status Communicator::stage_device_ring(const ReductionArgs& args, kernels::CodecId codec,
                                       StreamCall* call) {
  DeviceRingCall rc;
  rc.scatter = args.kind == CallKind::kReduceScatter;
  rc.count = args.count;
  rc.rank = rank_;
  rc.nranks = nranks_;
  rc.slice_elems = settings_.slice_elems;
  // As the codec plan's parameters (codec_plan.h); the call number is the proxy's.
  rc.base.codec = codec;
  rc.base.seed = settings_.seed;
  rc.base.s2_rows = settings_.s2_rows;
  rc.type = args.type;
  rc.scale = args.avg ? 1.0f / static_cast<float>(nranks_) : 1.0f;
  rc.send = args.send;
  rc.recv = args.recv;
  rc.recv_first = rc.scatter ? static_cast<size_t>(rank_) * output_count(args) : 0;
  rc.device = cuda_device_ < 0 ? 0 : cuda_device_;
  std::unique_ptr<DeviceRingProgram> made;
  SCCL_RETURN_IF_ERROR(DeviceRingProgram::make(rc, &made));
  std::shared_ptr<DeviceRingProgram> program = std::move(made);
  const uint64_t bytes_in = args.count * kernels::elem_size(args.type);
  return stage_on_stream(
      program->block_bytes(), 0, backend::StagingChunks{}, args.send, args.recv, 0,
      call_kind_name(args.kind),
      [this, program, codec, bytes_in](const CommLink& l, backend::StagedCall& c) {
        // The stream's `ready`: its earlier work is done and the kernels may start.
        SCCL_RETURN_IF_ERROR(c.need_input(0, c.in_bytes()));
        const auto t0 = std::chrono::steady_clock::now();
        RingStats rs;
        const Status st = run_caught("the device ring", [&] { return program->run(l, &rs); });
        // The engine's figures of a ring call (reduction_engine.cc), the codec work on the stream.
        CommStats& s = engine_.stats();
        CodecStats& cs = s.by_codec[kernels::codec_name(codec)];
        cs.calls++;
        cs.bytes_in += bytes_in;
        cs.bytes_sent += rs.bytes_sent;
        cs.bytes_received += rs.bytes_received;
        const size_t right = static_cast<size_t>((rank_ + 1) % nranks_);
        const bool right_here =
            right >= topology_.node_of.size() || topology_.node_of[right] == topology_.node;
        (right_here ? cs.intra_node_bytes_sent : cs.inter_node_bytes_sent) += rs.bytes_sent;
        cs.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        (st.ok() ? s.calls_taken : s.calls_failed)++;
        s.device_codec_calls++;
        return st;
      },
      call, /*may_wait=*/true, program);
}

Status Communicator::stage_allgather_stream(const GatherArgs& args, GatherSpan span,
                                            StreamCall* call, bool may_wait) {
  const size_t esz = kernels::elem_size(args.type);
  const size_t shards = span == GatherSpan::kRail ? static_cast<size_t>(topology_.nodes)
                                                  : static_cast<size_t>(nranks_);
  return stage_on_stream(
      args.count * esz, shards * args.count * esz, backend::StagingChunks{}, args.send, args.recv,
      kPhaseCompressedGather, "AllGather",
      [this, args, span](const CommLink& l, backend::StagedCall& c) {
        // Whole buffers: the shard in at once, the gathered shards back at the end. In place on
        // the device is two staged copies here.
        SCCL_RETURN_IF_ERROR(c.need_input(0, c.in_bytes()));
        GatherArgs host = args;
        host.send = c.in();
        host.recv = c.out();
        return allgather(l, host, span);
      },
      call, may_wait);
}

Status Communicator::stage_on_stream(
    size_t in_bytes, size_t out_bytes, const backend::StagingChunks& chunks, const void* send,
    void* recv, uint8_t phase, const char* what,
    std::function<Status(const CommLink&, backend::StagedCall&)> run, StreamCall* call,
    bool may_wait, std::shared_ptr<DeviceRingProgram> program) {
  Status prior = async_error();
  if (!prior.ok() && prior.code() != Code::kInProgress) {
    return Status(prior.code(), "communicator failed earlier: " + prior.message());
  }
  // This thread's CUDA calls below (a pinned allocation) must not invalidate a graph that another
  // thread of the application captures in global mode.
  backend::RelaxedCaptureScope relaxed;
  // device_mu_ keeps the stager and the order of the proxy's work with it.
  std::lock_guard<std::mutex> dlock(device_mu_);
  SCCL_RETURN_IF_ERROR(build_device_path_locked());
  std::shared_ptr<backend::StagedCall> staged;
  SCCL_RETURN_IF_ERROR(stager_->stage(in_bytes, out_bytes, &staged, may_wait, chunks));
  if (program) program->bind(staged);
  auto w = std::make_shared<Work>([this, phase, what, run = std::move(run), staged] {
    CommLink l = link(phase);
    ++op_seq_;
    // The head enqueued: from here the call runs with the other ranks, its input read chunk by
    // chunk as the stream copies it (each wait bounded by SKETCHCCL_TIMEOUT and the abort flag).
    Status st = staged->wait_started(settings_.timeout_s, &abort_);
    // The stream operations could not be enqueued: the caller forwards the call (or reports it);
    // no rank's ring waits for this work and the communicator has not failed.
    if (!st.ok() && staged->cancelled()) return st;
    staged->bound_waits(settings_.timeout_s, &abort_);
    if (st.ok()) st = run(l, *staged);
    // It ran with the other ranks, but a stream operation after its input could not be enqueued:
    // its result cannot reach the caller's buffer, so the communicator fails, as after any error
    // found later (the other ranks' calls completed).
    if (st.ok() && staged->lost()) {
      st = Status(Code::kUnhandledCudaError,
                  "a stream operation of the call could not be enqueued: its result was not "
                  "copied back");
    }
    publish_stats();
    if (!st.ok()) {
      SCCL_WARN(kLogColl, "%s on device buffers failed: %s", what, st.to_string().c_str());
      fail(st);
    }
    return st;
  });
  // However the work ends (done, failed, dropped by abort), the caller's stream goes on.
  w->set_on_complete([staged, program] {
    if (program) program->release();
    staged->release();
  });
  // Queued before the stream operations: a launch may return only once its kernel ends
  // (CUDA_LAUNCH_BLOCKING), and only this work releases the wait.
  enqueue_work(w);
  call->staged = std::move(staged);
  call->send = send;
  call->recv = recv;
  call->program = std::move(program);
  return Status::Ok();
}

Status Communicator::enqueue_stream_head(const StreamCall& call, void* stream) {
  backend::RelaxedCaptureScope relaxed;
  std::lock_guard<std::mutex> dlock(device_mu_);
  if (!stager_) {  // the device memory was released (ncclCommSuspend) in between
    const Status st(Code::kInvalidUsage, "the communicator's device memory was released");
    call.staged->cancel(st);
    return st;
  }
  if (call.program) return stager_->enqueue_ready(stream, call.staged);
  return stager_->enqueue_head(stream, call.send, call.staged);
}

Status Communicator::enqueue_stream_tail(const StreamCall& call, void* stream) {
  backend::RelaxedCaptureScope relaxed;
  std::lock_guard<std::mutex> dlock(device_mu_);
  if (!stager_) {
    // The second rung's proxy waits for the stream's decodes: they never come.
    if (call.program) backend::DeviceStager::lose(call.staged);
    return Status(Code::kInvalidUsage, "the communicator's device memory was released");
  }
  if (call.program) {
    const Status st = call.program->enqueue(stream);
    if (!st.ok()) {
      backend::DeviceStager::lose(call.staged);
      return st;
    }
    return stager_->enqueue_finish(stream, call.staged);
  }
  return stager_->enqueue_tail(stream, call.recv, call.staged);
}

}  // namespace sketchccl::coll
