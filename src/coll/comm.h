// A SketchCCL communicator: rank, ring neighbours, transport and a proxy thread that owns them.
// Every operation (init, AllReduce, split) runs on the proxy thread, in submission order; the
// caller's thread only enqueues and, for blocking semantics, waits.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "src/backend/device_staging.h"
#include "src/coll/allgather.h"
#include "src/coll/device_ring.h"
#include "src/coll/hierarchy.h"
#include "src/coll/network_verdict.h"
#include "src/coll/p2p.h"
#include "src/coll/reduction_engine.h"
#include "src/coll/settings.h"
#include "src/coll/topology.h"
#include "src/coll/work.h"
#include "src/core/status.h"
#include "transport/transport.h"

namespace sketchccl::coll {

constexpr size_t kIdBytes = 128;  // sizeof(ncclUniqueId)
using UniqueId = std::array<uint8_t, kIdBytes>;

class Communicator {
 public:
  struct InitArgs {
    int rank = 0;
    int nranks = 1;
    UniqueId id{};
    int cuda_device = -1;
    // Standalone: a configuration mismatch is an error. In front of a real NCCL it only means
    // that SketchCCL stays out of the way (every call is forwarded, on every rank alike).
    bool standalone = true;
    // The caller's ncclConfig_t said blocking=0 (a split with a NULL config inherits it).
    bool nonblocking = false;
  };

  // Starts the proxy thread, whose first work is joining the other ranks (in the background:
  // several ranks may be created by one thread inside a group).
  static std::shared_ptr<Communicator> create(const InitArgs& args, const Settings& settings,
                                              uint64_t config_hash);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int cuda_device() const { return cuda_device_; }
  bool nonblocking() const { return nonblocking_; }
  uint64_t id_hash() const { return id_hash_; }

  // The init work (wait on it for blocking init).
  const std::shared_ptr<Work>& init_work() const { return init_work_; }
  // ncclCommGetAsyncError: kInProgress while joining, the first failure, else ok.
  Status async_error() const;
  // After a successful join: false when the ranks' protocol configurations differ.
  bool configs_agree() const { return configs_agree_.load(); }
  // In front of a real NCCL: a split's membership exchange failed, the ring is closed and every
  // later call goes to the real NCCL (the communicator itself is not failed).
  bool stepped_aside() const { return stepped_aside_.load(); }
  // After a successful join: the nodes of the ranks (coll/topology.h).
  const Topology& topology() const { return topology_; }
  // In front of a real NCCL, all ranks on one node (SKETCHCCL_HIERARCHY=auto): NCCL's own
  // intra-node paths beat any codec, so every call is forwarded (docs/hierarchy.md).
  // Several nodes of several ranks, SKETCHCCL_HIERARCHY=auto: AllReduces run hierarchically.
  bool hierarchical() const { return settings_.hierarchy && topology_.hierarchical(); }
  bool forwards_one_node() const {
    return !standalone_ && settings_.hierarchy && nranks_ > 1 && topology_.nodes == 1;
  }

  // After a successful join: what the ranks agreed of the links and codec speeds (known only
  // under SKETCHCCL_CODEC=auto), and auto's verdict for a call from them (network_verdict.h):
  // the same on every rank.
  const NetworkFigures& network() const { return network_; }
  Verdict verdict(CallKind kind, size_t count, bool device) const;
  void count_forwarded_no_gain() { forwarded_no_gain_.fetch_add(1, std::memory_order_relaxed); }

  // Queues an AllReduce on the proxy. Fails fast if the communicator already failed.
  std::shared_ptr<Work> submit_reduction(const ReductionArgs& args);
  // A stream-ordered reduction of device buffers (args.mem is kDevice; docs/cuda.md): stages the
  // call on `stream` (a cudaStream_t; device_staging.h) and queues its work on the proxy, which
  // waits for the stream's input flag, runs the engine on the staged copies and releases the
  // stream -- also on failure, which becomes the async error. Returns at once without blocking.
  // *started (optional): the proxy runs the call (with the other ranks), also when an error is
  // returned; false: nothing of it runs, and the caller may hand it to NCCL.
  Status submit_reduction_stream(const ReductionArgs& args, void* stream, bool* started = nullptr,
                                 bool may_wait = true);
  // submit_reduction_stream in three steps, for a group that stages all its calls before it
  // enqueues any stream operation, and every call's head before any tail (src/api/group.h):
  // stage leases the staging and queues the proxy work (which waits for the head's input flag,
  // bounded by SKETCHCCL_TIMEOUT); the head copies the input in and writes the flag (a failure
  // cancels the call); the tail waits for the proxy and copies the result back. Every staged
  // call must get its head (or be cancelled by a failed one), and a headed one its tail.
  struct StreamCall {
    std::shared_ptr<backend::StagedCall> staged;
    const void* send = nullptr;
    void* recv = nullptr;
    // The second rung (SKETCHCCL_DEVICE_CODECS, device_ring.h): the head writes `ready` only, the
    // tail enqueues the ring program's kernels and flags, then `back`.
    std::shared_ptr<DeviceRingProgram> program;
  };
  // `may_wait`: DeviceStager::stage's (false inside a group's launch).
  Status stage_reduction_stream(const ReductionArgs& args, StreamCall* call, bool may_wait = true);
  Status enqueue_stream_head(const StreamCall& call, void* stream);
  Status enqueue_stream_tail(const StreamCall& call, void* stream);
  // Whether device AllReduces can run here: prepares the staging on the first ask (the caller's
  // thread); a failure is kept, WARNed once, and answered on every later ask. In front of a real
  // NCCL the take-over forwards the call when false.
  bool device_path_usable(backend::MemoryType mem);
  // SKETCHCCL_ALLGATHER_CODEC (kNone: AllGathers run exact), the same on every rank.
  kernels::CodecId allgather_codec() const { return settings_.allgather_codec; }
  // Queues a compressed AllGather of host buffers (allgather.h) on the proxy.
  std::shared_ptr<Work> submit_allgather(const GatherArgs& args);
  // Which ranks a compressed AllGather gathers: all of them (node-aware where hierarchical()),
  // or only this rank's rail, into N shards (in front of NCCL, whose AllGather runs the node's
  // part: rail_allgather).
  enum class GatherSpan { kWhole, kRail };
  // A compressed AllGather of device buffers, staged as stage_reduction_stream stages a
  // reduction (its head and tail alike): the shard copied in, the proxy's gather on the staged
  // copies, the gathered shards (nranks, or N for kRail) copied back to args.recv.
  Status stage_allgather_stream(const GatherArgs& args, GatherSpan span, StreamCall* call,
                                bool may_wait = true);
  // Queues an exact collective or a group's sends and receives (src/standalone/exact_collectives.h)
  // on the proxy. `collective`: every rank runs it, so it takes the next operation number.
  std::shared_ptr<Work> submit_exact(std::function<Status(const PeerLink&)> fn, bool collective);
  // Queues the membership exchange of ncclCommSplit; *child is set when the work completes
  // (nullptr for NCCL_SPLIT_NOCOLOR, and on every rank alike when the parent's join failed or
  // its ranks disagree on the configuration: the proxy decides after the join, never the
  // caller's timing). A failed exchange never fails the parent: standalone it is the split's
  // error; in front of a real NCCL the parent steps aside (stepped_aside()).
  // `child_nonblocking` goes to the child's InitArgs.
  using ChildSlot = std::shared_ptr<std::shared_ptr<Communicator>>;
  std::shared_ptr<Work> submit_split(int color, int key, bool child_nonblocking, ChildSlot child);

  // Writes a fresh rendezvous record (and starts its root listener) into id bytes 40-127.
  static Status bootstrap_make_id(UniqueId* id);

  // Stops promptly from any thread: pending and running work fail, the proxy exits.
  void abort();
  // abort() in two halves, so that the real ncclCommAbort can run between them: signal_abort()
  // never blocks; join_proxy_within() waits at most `seconds` for the proxy and, if it is still
  // running, detaches it and returns false (the caller must then keep this object alive).
  void signal_abort();
  bool join_proxy_within(double seconds);
  // Waits for queued work, then stops the proxy and closes the transport.
  Status finalize();

  // ncclCommSuspend with NCCL_SUSPEND_MEM: after the queued work, the engines give back their
  // device and pinned memory (ReductionEngine::release_device_memory); the next device call
  // builds the device path again (ncclCommResume restores lazily). Waits for the proxy.
  Status release_device_memory();
  // Suspended (between ncclCommSuspend and ncclCommResume): its calls go to the real NCCL.
  void set_suspended(bool suspended) { suspended_.store(suspended); }
  bool suspended() const { return suspended_.load(); }

  // Statistics of the work the proxy finished, from any thread (sketchcclCommGetStats).
  CommStats stats() const;
  std::string stats_json() const;
  void count_forwarded() { forwarded_.fetch_add(1, std::memory_order_relaxed); }

 private:
  Communicator(const InitArgs& args, const Settings& settings, uint64_t config_hash);
  std::shared_ptr<Work> submit(std::function<Status()> fn);
  void enqueue_work(const std::shared_ptr<Work>& w);
  void proxy_main();
  Status join();                    // on the proxy: rendezvous_and_connect, then ready
  Status rendezvous_and_connect();  // bootstrap all-gather of addresses, ring connections
  // All-gathers the node ids, then connects the node's and the rail's ring neighbours.
  Status discover_topology(const std::vector<transport::Blob>& addresses);
  // auto's figures: the link probe over the schedule's ring and the codec speeds, agreed.
  Status measure_network();
  void log_verdicts(const std::string& path) const;  // rank 0's INFO line of the figures
  Status split_on_proxy(int color, int key, bool child_nonblocking,
                        std::shared_ptr<Communicator>* child);
  // Small all-gather of `bytes` per rank over the ring (membership exchange).
  Status allgather_small(const void* mine, size_t bytes, void* all);
  Status allgather_small_ring(const void* mine, size_t bytes, void* all);
  CommLink link(uint8_t phase = 0);
  PeerLink peer_link(uint32_t op_seq);  // an exact operation's view of the transport
  void fail(const Status& st);
  // Tells the root that this rank cannot join (bootstrap::abandon), best effort.
  void abandon_join(const Status& why);
  // On the proxy: a taken-over reduction, by its kind.
  Status reduce(const CommLink& l, const ReductionArgs& args);
  std::shared_ptr<Work> submit_reduce(const ReductionArgs& args);
  // On the proxy: a compressed AllGather, with the host backend made on its first call.
  Status allgather(const CommLink& l, const GatherArgs& args, GatherSpan span);
  // Stages a device call of in_bytes in, out_bytes out, cut in `chunks`, on the stager and
  // queues its proxy work, which waits for the head, runs `run` on the staged call (its copies
  // in() and out(), its input waited for chunk by chunk: StageGate) over link(phase) and releases
  // the stream; `what` names it in the failure's WARN.
  // `program`: the second rung's, laid out in the staged block (in_bytes: its block_bytes) and
  // released with the stream however the work ends.
  Status stage_on_stream(size_t in_bytes, size_t out_bytes, const backend::StagingChunks& chunks,
                         const void* send, void* recv, uint8_t phase, const char* what,
                         std::function<Status(const CommLink&, backend::StagedCall&)> run,
                         StreamCall* call, bool may_wait,
                         std::shared_ptr<DeviceRingProgram> program = nullptr);
  // Whether a device reduction runs its codecs on the caller's stream (the second rung,
  // SKETCHCCL_DEVICE_CODECS; docs/cuda.md), with *codec; else it is staged for the host codecs,
  // and under `device` the first call of each reason WARNs it.
  bool takes_device_ring(const ReductionArgs& args, bool may_wait, kernels::CodecId* codec);
  // Why the call does not qualify for the second rung (null: it does, with *codec).
  const char* first_rung_reason(const ReductionArgs& args, bool may_wait,
                                kernels::CodecId* codec) const;
  // Caller's thread: the codec kernels loaded on the device once; null, or why they cannot run.
  const char* device_codecs_unusable();
  // stage_reduction_stream of a call that takes the second rung.
  Status stage_device_ring(const ReductionArgs& args, kernels::CodecId codec, StreamCall* call);
  // Under device_mu_: the stager, once; the first failure is kept in device_path_error_.
  Status build_device_path_locked();
  // The elements a reduction of `args` writes on this rank.
  size_t output_count(const ReductionArgs& args) const;
  // On the proxy, after the engine ran: copies its statistics for stats() on other threads.
  void publish_stats();

  const int rank_;
  const int nranks_;
  const int cuda_device_;
  const bool standalone_;
  const bool nonblocking_;
  std::atomic<bool> configs_agree_{true};
  std::atomic<bool> stepped_aside_{false};
  std::atomic<bool> suspended_{false};
  const UniqueId id_;
  const uint64_t id_hash_;
  const Settings settings_;
  const uint64_t config_hash_;

  std::unique_ptr<transport::Transport> transport_;
  Topology topology_;       // written by the join, read after it
  NetworkFigures network_;  // likewise
  // The flat engine; its statistics are the communicator's (the hierarchy adds to them).
  ReductionEngine engine_;
  // Several nodes of several ranks, SKETCHCCL_HIERARCHY=auto: made by the join.
  std::unique_ptr<HierarchicalReduction> hier_;
  // Proxy-only: the compressed AllGathers' codec backend (made by the first) and statistics.
  std::unique_ptr<backend::Backend> gather_backend_;
  GatherStats gather_stats_;
  uint32_t op_seq_ = 0;  // proxy-only: agreed across ranks because all ranks submit in order
  // Proxy-only: every rank's transport address (exact operations connect to any peer), and the
  // point-to-point messages so far per peer.
  std::vector<transport::Blob> addresses_;
  std::vector<uint32_t> p2p_sent_, p2p_received_;

  std::shared_ptr<Work> init_work_;
  std::atomic<bool> abort_{false};
  std::atomic<uint64_t> forwarded_{0};
  std::atomic<uint64_t> forwarded_no_gain_{0};
  mutable std::mutex stats_mu_;
  CommStats published_stats_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Work>> queue_;
  bool stopping_ = false;
  bool proxy_exited_ = false;  // set by the proxy as its last act (under mu_, cv_ notified)
  Status async_error_{Code::kInProgress, "communicator is joining its peers"};
  // The staging of device calls, made by the first one; device_mu_ keeps their stream operations
  // in the order the proxy runs them.
  mutable std::mutex device_mu_;
  std::unique_ptr<backend::DeviceStager> stager_;
  Status device_path_error_;  // under device_mu_: why the device path could not be built
  // Under device_mu_: the codec kernels loaded for the second rung (0 not yet, 1 yes, -1 failed).
  int device_codecs_state_ = 0;
  std::thread proxy_;
};

}  // namespace sketchccl::coll
