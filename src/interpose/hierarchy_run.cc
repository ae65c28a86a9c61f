#include "src/interpose/hierarchy_run.h"

#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "src/core/config.h"
#include "src/core/log.h"
#include "src/interpose/group.h"
#include "src/interpose/last_error.h"

namespace sketchccl::interpose {
namespace {

// The node communicator of each parent (NCCL handles); the lock is never held across NCCL.
std::mutex g_mu;
std::map<ncclComm_t, ncclComm_t>& node_comms() {
  static auto* m = new std::map<ncclComm_t, ncclComm_t>;  // outlives exit-time destroys
  return *m;
}

ncclComm_t find_node_comm(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = node_comms().find(comm);
  return it == node_comms().end() ? nullptr : it->second;
}

}  // namespace

bool takes_nccl_phases(const coll::Communicator& c, const AllReduceCall& call) {
  if (!c.hierarchical() || call.count == 0 || group::active()) return false;
  return call.count % static_cast<size_t>(c.topology().local_ranks) == 0;
}

ncclResult_t run_nccl_phases(const RealApi& real, ncclComm_t comm, coll::Communicator& c,
                             const AllReduceCall& call, kernels::ElemType et) {
  if (real.ncclCommSplit == nullptr) return missing_real("ncclCommSplit");
  if (real.ncclReduceScatter == nullptr) return missing_real("ncclReduceScatter");
  if (real.ncclAllGather == nullptr) return missing_real("ncclAllGather");
  const coll::Topology& topo = c.topology();
  ncclComm_t node = find_node_comm(comm);
  if (node == nullptr) {
    // Color: the node; key: the local index, so the node communicator's rank is the local index.
    ncclResult_t r = real.ncclCommSplit(comm, topo.node, topo.local, &node, nullptr);
    // A non-blocking parent's split completes in the background: wait for it here, bounded.
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration<double>(Config::global().get_double(Var::kTimeout));
    while (r == ncclInProgress && node != nullptr && real.ncclCommGetAsyncError != nullptr &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (real.ncclCommGetAsyncError(node, &r) != ncclSuccess) break;
    }
    if (r != ncclSuccess) return forwarded(r);
    if (node == nullptr) {
      return report(Status(Code::kInternalError, "ncclCommSplit by node returned no communicator"),
                    "ncclAllReduce");
    }
    std::lock_guard<std::mutex> lock(g_mu);
    node_comms()[comm] = node;
    SCCL_INFO(kLogColl, "rank %d: node communicator %p split from %p (node %d, local rank %d)",
              c.rank(), static_cast<void*>(node), static_cast<void*>(comm), topo.node, topo.local);
  }
  const size_t shard = call.count / static_cast<size_t>(topo.local_ranks);
  const size_t esz = kernels::elem_size(et);
  void* mine = static_cast<uint8_t*>(call.recv) + static_cast<size_t>(topo.local) * shard * esz;
  // 1: this rank's shard of the node's sum (ncclAvg divides by L); NCCL's in-place form when the
  // call is in place.
  ncclResult_t r =
      real.ncclReduceScatter(call.send, mine, shard, call.type, call.op, node, call.stream);
  if (r != ncclSuccess) return forwarded(r);
  // 2: the compressed AllReduce of the shard along the rail (ncclAvg divides by N), gated on
  // the stream behind phase 1.
  coll::AllReduceArgs args;
  args.send = mine;
  args.recv = mine;
  args.count = shard;
  args.type = et;
  args.avg = call.op == ncclAvg;
  args.mem = call.mem.type;
  args.kind = coll::CallKind::kRail;
  Status st = args.mem == backend::MemoryType::kDevice
                  ? c.submit_allreduce_stream(args, call.stream)
                  : c.submit_allreduce(args)->wait();
  if (!st.ok()) return report(st, "ncclAllReduce");
  // 3: every shard to every rank of the node (NCCL's in-place AllGather).
  r = real.ncclAllGather(mine, call.recv, shard, call.type, node, call.stream);
  return forwarded(r);
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
  auto fn = abort ? real.ncclCommAbort : real.ncclCommDestroy;
  if (fn != nullptr) (void)fn(node);
}

}  // namespace sketchccl::interpose
