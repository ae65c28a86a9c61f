#include "src/interpose/hierarchy_run.h"

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "src/api/group.h"
#include "src/api/last_error.h"
#include "src/api/runtime.h"
#include "src/api/submit.h"
#include "src/backend/device_runtime.h"
#include "src/coll/hierarchy.h"
#include "src/core/log.h"
#include "src/interpose/call_policy.h"
#include "src/interpose/forward.h"
#include "src/interpose/front.h"

namespace sketchccl::interpose {
namespace {

// The node communicator of each parent (NCCL handles), or a failed split (null); the lock is
// never held across NCCL.
std::mutex g_mu;
std::map<ncclComm_t, ncclComm_t>& node_comms() {
  static auto* m = new std::map<ncclComm_t, ncclComm_t>;  // outlives exit-time destroys
  return *m;
}

// Blocking communicators initialised inside this thread's open group: their node communicator is
// split once the group has ended (NCCL runs their init there).
thread_local std::vector<ncclComm_t> t_grouped_inits;

bool lookup(ncclComm_t comm, ncclComm_t* node) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = node_comms().find(comm);
  if (it == node_comms().end()) return false;
  *node = it->second;
  return true;
}

double timeout_s() {
  return api::Runtime::get().settings().timeout_s;
}

// Polls `comm`'s async error while it is ncclInProgress (a nonblocking communicator's last
// operation still launching), bounded by the timeout; returns the last answer.
ncclResult_t settle(const RealApi& real, ncclComm_t comm) {
  if (real.ncclCommGetAsyncError == nullptr) return ncclSuccess;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s());
  ncclResult_t async = ncclSuccess;
  for (;;) {
    if (real.ncclCommGetAsyncError(comm, &async) != ncclSuccess) return ncclInternalError;
    if (async != ncclInProgress || std::chrono::steady_clock::now() >= deadline) return async;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Starts the split of `comm` by node on the caller's thread, into a heap slot that outlives
// any wait for it (NCCL writes a nonblocking parent's child later, from its own thread); null if
// it failed. The child is blocking (one enqueue after another on the caller's stream), unless
// NCCL_COMM_BLOCKING=0 makes it nonblocking.
ncclComm_t* start_split(const RealApi& real, ncclComm_t comm, const coll::Topology& topo,
                        int rank) {
  if (real.ncclCommSplit == nullptr) return nullptr;
  if (settle(real, comm) != ncclSuccess) return nullptr;  // NCCL refuses a parent in progress
  auto* slot = new ncclComm_t(nullptr);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  // Color: the node; key: the local index, so the node communicator's rank is the local index.
  const ncclResult_t r = real.ncclCommSplit(comm, topo.node, topo.local, slot, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    SCCL_WARN(kLogInit, "rank %d: ncclCommSplit by node failed (%d): no NCCL node phases", rank,
              static_cast<int>(r));
    delete slot;  // NCCL cleared it on failure and keeps no pointer to it
    return nullptr;
  }
  return slot;
}

// Waits, bounded, until NCCL has written the child into `slot` (the parent's async error leaves
// ncclInProgress first, as PyTorch waits); the node communicator, or null.
ncclComm_t finish_split(const RealApi& real, ncclComm_t comm, ncclComm_t* slot,
                        const coll::Topology& topo, int rank) {
  if (slot == nullptr) return nullptr;
  (void)settle(real, comm);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s());
  ncclComm_t node = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  while (node == nullptr && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    node = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  }
  if (node == nullptr) {
    SCCL_WARN(kLogInit, "rank %d: ncclCommSplit by node wrote no communicator: no NCCL node phases",
              rank);
    return nullptr;  // the slot stays allocated: NCCL may still write it
  }
  delete slot;
  if (settle(real, node) != ncclSuccess) {
    SCCL_WARN(kLogInit, "rank %d: the node communicator failed: no NCCL node phases", rank);
    if (real.ncclCommAbort != nullptr) (void)real.ncclCommAbort(node);
    return nullptr;
  }
  SCCL_INFO(kLogInit, "rank %d: node communicator %p split from %p (node %d, local rank %d)", rank,
            static_cast<void*>(node), static_cast<void*>(comm), topo.node, topo.local);
  return node;
}

void remember(ncclComm_t comm, ncclComm_t node) {
  std::lock_guard<std::mutex> lock(g_mu);
  node_comms()[comm] = node;
}

// The node communicator of `comm`, split now if it has none yet (a null answer, remembered: the
// calls keep SketchCCL's own paths).
ncclComm_t node_comm_of(const RealApi& real, ncclComm_t comm, coll::Communicator& c) {
  ncclComm_t node = nullptr;
  if (lookup(comm, &node)) return node;
  const coll::Topology& topo = c.topology();
  node = finish_split(real, comm, start_split(real, comm, topo, c.rank()), topo, c.rank());
  remember(comm, node);
  return node;
}

// Whether `comm`, just initialised (blocking, outside any group now), gets a node communicator:
// once SketchCCL's join says it is hierarchical (the same on every rank).
std::shared_ptr<coll::Communicator> needs_node_comm(ncclComm_t comm) {
  if (comm == nullptr || !api::Runtime::get().settings().hierarchy) return nullptr;
  auto c = api::Runtime::get().find(comm);
  // Several nodes of several ranks need 4 ranks at least.
  if (c == nullptr || c->nonblocking() || c->nranks() < 4) return nullptr;
  // The first call would wait for the join too.
  if (wait_for_join(c.get(), timeout_s()) != CommState::kReady || !c->hierarchical())
    return nullptr;
  return c;
}

}  // namespace

bool takes_nccl_phases(const coll::Communicator& c, const api::CollCall& call) {
  if (!c.hierarchical() || call.count == 0) return false;
  const bool rs = call.kind == api::CollKind::kReduceScatter;
  const bool gather = call.kind == api::CollKind::kAllGather;
  if (!rs && !gather && call.kind != api::CollKind::kAllReduce) return false;
  // An AllGather of device buffers whose nodes' ranks are consecutive: NCCL's AllGathers put the
  // rail's shards in rank order with no copy. Host buffers, or another placement, run SketchCCL's
  // own node-aware gather (staged, for device buffers).
  if (gather && (call.mem.type != backend::MemoryType::kDevice ||
                 !coll::RailChunks(c.topology()).blocks_by_node()))
    return false;
  // A ReduceScatter of device buffers needs each node's chunks together in its input (no regroup
  // copy, docs/interposition.md): any other placement keeps the flat ring.
  if (rs && call.mem.type == backend::MemoryType::kDevice &&
      !coll::RailChunks(c.topology()).blocks_by_node())
    return false;
  ncclComm_t node = nullptr;
  const bool known = lookup(call.comm, &node);
  if (known && node == nullptr) return false;  // its split failed
  // Inside a group only with a node communicator split before (at init, or at an earlier call
  // outside a group): a split at the group's end could wait for another rank this thread drives.
  if (!known && api::group::active()) return false;
  // The L equal shards NCCL's ReduceScatter needs: the divisible part (the tail, fewer than L
  // elements, is NCCL's AllReduce on the parent). A ReduceScatter's chunks are equal already.
  return rs || gather || call.count >= static_cast<size_t>(c.topology().local_ranks);
}

size_t nccl_phases_tail(const coll::Communicator& c, const api::CollCall& call) {
  if (call.kind != api::CollKind::kAllReduce) return 0;
  return call.count % static_cast<size_t>(c.topology().local_ranks);
}

void node_comm_at_init(const RealApi& real, ncclComm_t comm) {
  if (comm == nullptr || !api::Runtime::get().settings().hierarchy) return;
  if (api::group::active()) {
    t_grouped_inits.push_back(comm);  // NCCL runs the init at the group's end
    return;
  }
  if (auto c = needs_node_comm(comm)) (void)node_comm_of(real, comm, *c);
}

void node_comms_at_group_end(const RealApi& real) {
  if (api::group::active() || t_grouped_inits.empty()) return;
  std::vector<ncclComm_t> inits;
  inits.swap(t_grouped_inits);
  std::vector<std::pair<ncclComm_t, std::shared_ptr<coll::Communicator>>> todo;
  for (ncclComm_t comm : inits) {
    ncclComm_t known = nullptr;
    if (lookup(comm, &known)) continue;
    if (auto c = needs_node_comm(comm)) todo.emplace_back(comm, std::move(c));
  }
  if (todo.empty()) return;
  // One thread may have initialised several ranks of one communicator in the group (nccl-tests
  // -g N): their splits, collectives of that communicator, go in one group, as the inits did.
  const bool grouped = todo.size() > 1 && real.ncclGroupStart != nullptr &&
                       real.ncclGroupEnd != nullptr && real.ncclGroupStart() == ncclSuccess;
  std::vector<ncclComm_t*> slots;
  for (auto& [comm, c] : todo)
    slots.push_back(start_split(real, comm, c->topology(), c->rank()));
  if (grouped) (void)real.ncclGroupEnd();
  for (size_t i = 0; i < todo.size(); ++i) {
    auto& [comm, c] = todo[i];
    remember(comm, finish_split(real, comm, slots[i], c->topology(), c->rank()));
  }
}

void forget_grouped_inits() {
  if (!api::group::active()) t_grouped_inits.clear();
}

namespace {

// A ReduceScatter (host buffers): the input regrouped by rail (coll::RailChunks), NCCL's
// ReduceScatter of it on the node communicator (local rank l gets the node's sums of its rail's
// N chunks; ncclAvg divides by L), then the compressed ReduceScatter of those along the rail into
// this rank's chunk of NCCL's layout (ncclAvg divides by N).
ncclResult_t run_nccl_reduce_scatter(const RealApi& real, coll::Communicator& c,
                                     const api::CollCall& call, ncclComm_t node) {
  const coll::Topology& topo = c.topology();
  const coll::RailChunks chunks(topo);
  const size_t esz = kernels::elem_size(call.elem);
  const size_t chunk_bytes = call.count * esz;
  const size_t rail_chunks = static_cast<size_t>(topo.nodes);
  // Kept until the rail has read it (a group's end may wait for it later).
  auto regrouped =
      std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(topo.nranks) * chunk_bytes);
  const auto* in = static_cast<const uint8_t*>(call.send);
  for (int pos = 0; pos < topo.nranks; ++pos) {
    std::memcpy(regrouped->data() + static_cast<size_t>(pos) * chunk_bytes,
                in + static_cast<size_t>(chunks.chunk_at(pos)) * chunk_bytes, chunk_bytes);
  }
  uint8_t* mine = regrouped->data() + static_cast<size_t>(topo.local) * rail_chunks * chunk_bytes;
  // 1: NCCL's in-place form on the regrouped copy (the caller's buffers are not touched).
  (void)settle(real, node);
  const ncclResult_t r = real.ncclReduceScatter(regrouped->data(), mine, rail_chunks * call.count,
                                                call.type, call.op, node, call.stream);
  if (r != ncclSuccess && r != ncclInProgress) return api::forwarded(r);  // nothing enqueued
  // 2: the rail's ReduceScatter of the N node sums, into recvbuff; its history kept by the
  // user's buffer, not the copy's.
  api::CollCall rail = call;
  rail.send = mine;
  coll::ReductionArgs args = api::engine_args(rail, topo.nodes, api::EngineRun::kRail);
  args.state_key = call.send;
  auto work = c.submit_reduction(args);
  if (api::group::active()) {
    api::group::defer(work, false, [regrouped](const Status&) {});
    return ncclSuccess;
  }
  const Status st = work->wait();
  if (!st.ok()) return api::report(st, call.api);
  return api::forwarded(r);
}

// A node-phase run's device scratch, from SketchCCL's pool on the call's stream; give_back()
// returns it there, behind what the stream holds by then (once; the destructor if not before).
class NodeScratch {
 public:
  NodeScratch(const coll::Communicator& c, cudaStream_t stream, const char* coll_name)
      : rt_(backend::device_runtime()),
        device_(c.cuda_device() < 0 ? 0 : c.cuda_device()),
        rank_(c.rank()),
        stream_(stream),
        coll_name_(coll_name) {}
  NodeScratch(const NodeScratch&) = delete;
  NodeScratch& operator=(const NodeScratch&) = delete;
  ~NodeScratch() { give_back(); }

  Status allocate(size_t bytes) {
    // This thread's CUDA calls must not invalidate another thread's global-mode capture.
    backend::RelaxedCaptureScope relaxed;
    const Status st = rt_.alloc_on_stream(device_, bytes, stream_, &ptr_);
    held_ = st.ok();
    return st;
  }
  void* get() const { return ptr_; }
  void give_back() {
    if (!held_) return;
    held_ = false;
    backend::RelaxedCaptureScope relaxed;
    const Status freed = rt_.free_on_stream(device_, ptr_, stream_);
    if (!freed.ok()) {
      SCCL_WARN(kLogColl, "rank %d: the %s's device scratch stays allocated: %s", rank_, coll_name_,
                freed.to_string().c_str());
    }
  }

 private:
  backend::DeviceRuntime& rt_;
  const int device_, rank_;
  const cudaStream_t stream_;
  const char* const coll_name_;
  void* ptr_ = nullptr;
  bool held_ = false;
};

// What both node-phase runs set up first: the real group calls and the scratch, N blocks of the
// call's count (node n's). False: the call is answered with *answer: a missing NCCL function, or
// no scratch (nothing enqueued: NCCL runs this call and this communicator's later device calls).
bool set_up_node_phases(const RealApi& real, coll::Communicator& c, const api::CollCall& call,
                        NodeScratch* scratch, ncclResult_t* answer) {
  if (real.ncclGroupStart == nullptr) {
    *answer = missing_real("ncclGroupStart");
    return false;
  }
  if (real.ncclGroupEnd == nullptr) {
    *answer = missing_real("ncclGroupEnd");
    return false;
  }
  const Status st = scratch->allocate(static_cast<size_t>(c.topology().nodes) * call.count *
                                      kernels::elem_size(call.elem));
  if (!st.ok()) {
    mark_device_path_failed(call.comm, st);
    *answer = forward_counted(real, &c, call);
    return false;
  }
  return true;
}

// A ReduceScatter of device buffers, node n's ranks numbered n·L .. n·L + L - 1 (blocks_by_node):
// 1: N ncclReduceScatters in one real group, node n's over its L consecutive input chunks into
// chunk n of a device scratch from SketchCCL's pool, so that local rank l gets the node's sums of
// its rail's N chunks with no regroup copy; 2: the rail's compressed ReduceScatter of the scratch
// into recvbuff, staged on the stream behind phase 1; the scratch goes back to the pool on the
// stream behind the rail. No NCCL phase follows the rail: once phase 1 is enqueued the node's
// peers wait for nothing more of this rank.
ncclResult_t run_nccl_reduce_scatter_device(const RealApi& real, coll::Communicator& c,
                                            const api::CollCall& call, ncclComm_t node) {
  const coll::Topology& topo = c.topology();
  const size_t chunk_bytes = call.count * kernels::elem_size(call.elem);
  NodeScratch scratch(c, call.stream, "ReduceScatter");
  ncclResult_t answer = ncclSuccess;
  if (!set_up_node_phases(real, c, call, &scratch, &answer)) return answer;
  // 1: every node's ReduceScatter is issued whatever an earlier one said (the group's end
  // answers for all of them, on every rank alike); ncclAvg divides by L.
  (void)settle(real, node);
  ncclResult_t r = real.ncclGroupStart();
  if (r == ncclSuccess) {
    const auto* in = static_cast<const uint8_t*>(call.send);
    for (int n = 0; n < topo.nodes; ++n) {
      const ncclResult_t one = real.ncclReduceScatter(
          in + static_cast<size_t>(n) * static_cast<size_t>(topo.local_ranks) * chunk_bytes,
          static_cast<uint8_t*>(scratch.get()) + static_cast<size_t>(n) * chunk_bytes, call.count,
          call.type, call.op, node, call.stream);
      if (r == ncclSuccess && one != ncclSuccess && one != ncclInProgress) r = one;
    }
    const ncclResult_t end = real.ncclGroupEnd();
    if (r == ncclSuccess) r = end;
  }
  if (r != ncclSuccess && r != ncclInProgress) {
    scratch.give_back();
    return api::forwarded(r);  // NCCL dropped the group: nothing enqueued
  }
  // 2: the rail's ReduceScatter of the N node sums (ncclAvg divides by N).
  api::CollCall rail = call;
  rail.send = scratch.get();
  coll::ReductionArgs args = api::engine_args(rail, topo.nodes, api::EngineRun::kRail);
  args.state_key = call.send;  // the scratch's address says nothing of the user's buffer
  // Inside a group's launch the group's earlier calls finish only after this one is enqueued.
  const Status st = c.submit_reduction_stream(args, call.stream, nullptr, !api::group::active());
  scratch.give_back();  // on the stream behind the rail's staging copy of the scratch
  if (!st.ok()) {
    // This rank's chunk is wrong: reported; its later device calls are forwarded.
    mark_device_path_failed(call.comm, st);
    return api::report(st, call.api);
  }
  return api::forwarded(r);
}

// An AllGather of device buffers, node n's ranks numbered n·L .. n·L + L - 1 (blocks_by_node):
// 1: the rail's compressed gather (staged on the stream: this rank's shard in, node n's shard of
// its rail at n of a device scratch from SketchCCL's pool); 2: N ncclAllGathers in one real group
// on the node communicator, node n's of scratch shard n into recvbuff's node-n block, so that
// local rank l's shard lands at rank n·L + l: rank order, no copy. The scratch goes back to the
// pool on the stream behind phase 2. Once the rail's input flag is enqueued, phase 2 is enqueued
// whatever follows (the node's peers wait for it inside NCCL).
ncclResult_t run_nccl_allgather_device(const RealApi& real, coll::Communicator& c,
                                       const api::CollCall& call, ncclComm_t node) {
  const coll::Topology& topo = c.topology();
  const size_t shard_bytes = call.count * kernels::elem_size(call.elem);
  NodeScratch scratch(c, call.stream, "AllGather");
  ncclResult_t answer = ncclSuccess;
  if (!set_up_node_phases(real, c, call, &scratch, &answer)) return answer;
  // 1: the rail's compressed gather into the scratch, staged on the stream.
  coll::GatherArgs args;
  args.send = call.send;
  args.recv = scratch.get();
  args.count = call.count;
  args.type = call.elem;
  args.codec = call.has_codec ? call.codec : api::Runtime::get().settings().allgather_codec;
  coll::Communicator::StreamCall sc;
  // Inside a group's launch the group's earlier calls finish only after this one is enqueued.
  Status st = c.stage_allgather_stream(args, coll::Communicator::GatherSpan::kRail, &sc,
                                       !api::group::active());
  if (st.ok()) st = c.enqueue_stream_head(sc, call.stream);
  const bool started = sc.staged != nullptr && !sc.staged->cancelled();
  if (!started) {
    // Nothing of the rail runs, on any rank alike only if the failure is everyone's: this rank's
    // part goes to NCCL, as a device call whose setup failed does.
    scratch.give_back();
    mark_device_path_failed(call.comm, st);
    return forward_counted(real, &c, call);
  }
  if (st.ok()) st = c.enqueue_stream_tail(sc, call.stream);
  // 2: every node's AllGather is issued whatever an earlier one said (the group's end answers
  // for all of them, on every rank alike).
  (void)settle(real, node);
  ncclResult_t r = real.ncclGroupStart();
  if (r == ncclSuccess) {
    const size_t block = static_cast<size_t>(topo.local_ranks) * shard_bytes;
    for (int n = 0; n < topo.nodes; ++n) {
      const ncclResult_t one = real.ncclAllGather(
          static_cast<const uint8_t*>(scratch.get()) + static_cast<size_t>(n) * shard_bytes,
          static_cast<uint8_t*>(call.recv) + static_cast<size_t>(n) * block, call.count, call.type,
          node, call.stream);
      if (r == ncclSuccess && one != ncclSuccess && one != ncclInProgress) r = one;
    }
    const ncclResult_t end = real.ncclGroupEnd();
    if (r == ncclSuccess) r = end;
  }
  scratch.give_back();  // on the stream behind phase 2 (or the rail's copy back, if phase 2 failed)
  if (!st.ok()) {
    // This rank's result is wrong: reported; its later device calls are forwarded.
    mark_device_path_failed(call.comm, st);
    return api::report(st, call.api);
  }
  return api::forwarded(r);
}

}  // namespace

ncclResult_t run_nccl_phases(const RealApi& real, coll::Communicator& c,
                             const api::CollCall& call) {
  ncclComm_t comm = call.comm;
  const bool gather = call.kind == api::CollKind::kAllGather;
  if (real.ncclReduceScatter == nullptr && !gather) return missing_real("ncclReduceScatter");
  if (real.ncclAllGather == nullptr && gather) return missing_real("ncclAllGather");
  if (real.ncclAllGather == nullptr && call.kind == api::CollKind::kAllReduce)
    return missing_real("ncclAllGather");
  const coll::Topology& topo = c.topology();
  // Split at init; a nonblocking parent (which NCCL lets nobody use before its caller has seen
  // it ready) or a split's child gets it at its first such call.
  ncclComm_t node = node_comm_of(real, comm, c);
  if (node == nullptr) {
    // Every rank's split failed alike (it is collective): SketchCCL's own path.
    if (gather) {
      const kernels::CodecId codec =
          call.has_codec ? call.codec : api::Runtime::get().settings().allgather_codec;
      return api::report(api::submit_gather(c, call, codec), call.api);
    }
    return api::report(api::submit(c, call, api::EngineRun::kCodec), call.api);
  }
  if (gather) return run_nccl_allgather_device(real, c, call, node);
  if (call.kind == api::CollKind::kReduceScatter) {
    if (call.mem.type == backend::MemoryType::kDevice)
      return run_nccl_reduce_scatter_device(real, c, call, node);
    return run_nccl_reduce_scatter(real, c, call, node);
  }
  const size_t shard = call.count / static_cast<size_t>(topo.local_ranks);
  const size_t tail = call.count % static_cast<size_t>(topo.local_ranks);
  const size_t esz = kernels::elem_size(call.elem);
  void* mine = static_cast<uint8_t*>(call.recv) + static_cast<size_t>(topo.local) * shard * esz;
  // 1: this rank's shard of the node's sum (ncclAvg divides by L); NCCL's in-place form when the
  // call is in place. ncclInProgress: enqueued, on a nonblocking node communicator (which NCCL
  // lets nobody use while its previous call is still launching: settled first).
  (void)settle(real, node);
  ncclResult_t r =
      real.ncclReduceScatter(call.send, mine, shard, call.type, call.op, node, call.stream);
  if (r != ncclSuccess && r != ncclInProgress) return api::forwarded(r);  // nothing enqueued
  // 3: every shard to every rank of the node (NCCL's in-place AllGather), enqueued whatever
  // phase 2 said: the node's peers wait for it inside NCCL. Then the tail, exact, by NCCL on the
  // parent (every rank of it enqueues it, whatever happened before).
  auto finish = [&real, node, comm, mine, shard, tail, esz, call, L = topo.local_ranks] {
    (void)settle(real, node);
    ncclResult_t done = real.ncclAllGather(mine, call.recv, shard, call.type, node, call.stream);
    if (tail > 0 && real.ncclAllReduce != nullptr) {
      const size_t at = shard * static_cast<size_t>(L) * esz;
      (void)settle(real, comm);
      const ncclResult_t t = real.ncclAllReduce(static_cast<const uint8_t*>(call.send) + at,
                                                static_cast<uint8_t*>(call.recv) + at, tail,
                                                call.type, call.op, comm, call.stream);
      if (done == ncclSuccess || done == ncclInProgress) done = t;
    }
    return done;
  };
  // 2: the compressed AllReduce of the shard along the rail (ncclAvg divides by N), staged on
  // the stream behind phase 1.
  api::CollCall rail = call;
  rail.send = mine;
  rail.recv = mine;
  rail.count = shard;
  if (call.mem.type != backend::MemoryType::kDevice && api::group::active()) {
    // Host buffers at a group's end: the rail is waited for with the group's other work (one
    // thread may drive several ranks), and phase 3 follows it there.
    auto work = c.submit_reduction(api::engine_args(rail, c.nranks(), api::EngineRun::kRail));
    api::group::defer(work, false, [finish](const Status&) { (void)finish(); });
    return ncclSuccess;
  }
  const Status st = api::submit(c, rail, api::EngineRun::kRail);
  r = finish();
  if (!st.ok()) {
    // The node's result is wrong on this rank: reported; a device path that failed to set up
    // forwards this communicator's later device calls.
    if (call.mem.type == backend::MemoryType::kDevice) mark_device_path_failed(call.comm, st);
    return api::report(st, call.api);
  }
  return api::forwarded(r);
}

void drop_node_comm(const RealApi& real, ncclComm_t comm, bool abort) {
  ncclComm_t node = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = node_comms().find(comm);
    if (it == node_comms().end()) return;
    node = it->second;
    node_comms().erase(it);
  }
  if (node == nullptr) return;
  auto fn = abort ? real.ncclCommAbort : real.ncclCommDestroy;
  if (fn != nullptr) (void)fn(node);
}

}  // namespace sketchccl::interpose
