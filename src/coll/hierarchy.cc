#include "src/coll/hierarchy.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "kernels/convert.h"
#include "src/coll/ring_phase.h"
#include "src/core/log.h"

namespace sketchccl::coll {
namespace {

using kernels::ElemType;

// Non-blocking transfers among the node's ranks, posted ahead and completed later: whatever
// drives the transport meanwhile (the rail ring's progress calls) moves them, so the node's
// exchanges of one segment overlap the rail ring of another.
class NodeTransfers {
 public:
  explicit NodeTransfers(const CommLink& link) : link_(link) {}
  Status send(int peer, uint64_t tag, const void* buf, size_t bytes) {
    if (bytes == 0) return Status::Ok();
    transport::RequestId id = 0;
    SCCL_RETURN_IF_ERROR(link_.transport->isend(peer, tag, buf, bytes, &id));
    ids_.push_back(id);
    sent_ += bytes;
    return Status::Ok();
  }
  Status recv(int peer, uint64_t tag, void* buf, size_t bytes) {
    if (bytes == 0) return Status::Ok();
    transport::RequestId id = 0;
    SCCL_RETURN_IF_ERROR(link_.transport->irecv(peer, tag, buf, bytes, &id));
    ids_.push_back(id);
    received_ += bytes;
    return Status::Ok();
  }
  // Every posted transfer complete, bounded by the timeout and the abort flag.
  Status wait(const char* what) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int idle = 0; !ids_.empty(); ++idle) {
      if (link_.abort != nullptr && link_.abort->load()) {
        return Status(Code::kRemoteError, "operation aborted (ncclCommAbort)");
      }
      SCCL_RETURN_IF_ERROR(link_.transport->progress());
      for (size_t i = 0; i < ids_.size();) {
        bool done = false;
        size_t got = 0;
        SCCL_RETURN_IF_ERROR(link_.transport->test(ids_[i], &done, &got));
        if (done) {
          ids_[i] = ids_.back();
          ids_.pop_back();
          idle = 0;
        } else {
          ++i;
        }
      }
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
          link_.timeout_s) {
        return errorf(Code::kRemoteError,
                      "local rank %d timed out after %.1f s (SKETCHCCL_TIMEOUT) in the "
                      "hierarchical %s among the ranks of its node",
                      link_.rank, link_.timeout_s, what);
      }
      // Many ranks may share few cores (as in the ring): let them run.
      if (idle > 4096) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      } else if (idle > 256) {
        std::this_thread::yield();
      }
    }
    return Status::Ok();
  }
  uint64_t sent() const { return sent_; }
  uint64_t received() const { return received_; }

 private:
  const CommLink& link_;
  std::vector<transport::RequestId> ids_;
  uint64_t sent_ = 0, received_ = 0;
};

// One segment of the buffer: [offset, offset + count), cut into L shards (even cut).
struct Segment {
  size_t offset = 0;
  RingPlan plan;
  size_t shard_at = 0;  // where this rank's shard of it lies in the shard buffer
};

// A hierarchical call's time and verdict in the communicator's counts; returns its status.
Status counted(CommStats* stats, CodecStats* cs, std::chrono::steady_clock::time_point t0,
               const Status& st) {
  cs->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  (st.ok() ? stats->calls_taken : stats->calls_failed)++;
  return st;
}

}  // namespace

RailChunks::RailChunks(const Topology& topo)
    : nodes_(topo.nodes),
      local_ranks_(topo.local_ranks),
      grid_(static_cast<size_t>(topo.nodes) * static_cast<size_t>(topo.local_ranks), -1) {
  // Local indices are the order of each node's ranks by rank, as make_topology numbers them.
  std::vector<int> seen(static_cast<size_t>(topo.nodes), 0);
  for (size_t r = 0; r < topo.node_of.size(); ++r) {
    const int n = topo.node_of[r];
    const int l = seen[static_cast<size_t>(n)]++;
    if (l < local_ranks_) grid_[static_cast<size_t>(l * nodes_ + n)] = static_cast<int>(r);
  }
}

bool RailChunks::blocks_by_node() const {
  for (int n = 0; n < nodes_; ++n) {
    for (int l = 0; l < local_ranks_; ++l) {
      if (chunk_of(l, n) != n * local_ranks_ + l) return false;
    }
  }
  return true;
}

HierarchicalReduction::HierarchicalReduction(const Settings& settings, const Topology& topo)
    : settings_(settings), topo_(topo), chunks_(topo), rail_(settings, topo.nodes) {}

CommLink HierarchicalReduction::rail_link(const CommLink& link,
                                          transport::Transport* rail_transport) {
  CommLink rail = link;
  rail.transport = rail_transport;
  rail.rank = topo_.node;
  rail.nranks = topo_.nodes;
  rail.addresses = nullptr;
  if (link.addresses != nullptr) {
    if (rail_addresses_.empty()) {
      for (int g : topo_.rail_ranks) {
        if (static_cast<size_t>(g) < link.addresses->size()) {
          rail_addresses_.push_back((*link.addresses)[static_cast<size_t>(g)]);
        }
      }
    }
    if (rail_addresses_.size() == topo_.rail_ranks.size()) rail.addresses = &rail_addresses_;
  }
  return rail;
}

std::string HierarchicalReduction::fold_rail_stats(CommStats* stats, bool count_calls) {
  std::string codec = kernels::codec_name(kernels::CodecId::kNone);
  for (const auto& [name, c] : rail_.stats().by_codec) {
    if (c.calls > 0) codec = name;
    add_codec_stats(c, &stats->by_codec[name], count_calls);
  }
  stats->calls_exact_no_gain += rail_.stats().calls_exact_no_gain;
  rail_.stats() = CommStats{};
  return codec;
}

Status HierarchicalReduction::run_rail(const CommLink& link, const ReductionArgs& args,
                                       CommStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  SubTransport rail_tr(link.transport, topo_.rail_ranks);
  ReductionArgs shard = args;
  // Among the rail's ranks: an AllReduce of the shard, or a ReduceScatter of the rail's chunks.
  shard.kind = args.kind == CallKind::kRail ? CallKind::kAllReduce : CallKind::kReduceScatter;
  Status st = rail_.run(rail_link(link, &rail_tr), shard);
  CodecStats& cs = stats->by_codec[fold_rail_stats(stats, true)];
  // The user's input is L times the rail's (L shards, or L rails' chunks); NCCL's phases send
  // what they send (not counted here).
  cs.bytes_in +=
      args.count * kernels::elem_size(args.type) * static_cast<size_t>(topo_.local_ranks);
  return counted(stats, &cs, t0, st);
}

// The buffer is cut into segments. Segment k's exact reduce-scatter
// (direct: each rank sends chunk p to local rank p, which sums them in local-rank order) is posted
// while the rail ring reduces segment k - 1, and segment k's all-gather (direct too) moves while
// the rail ring reduces segment k + 1: the node's traffic hides behind the network's.
Status HierarchicalReduction::run(const CommLink& link, const ReductionArgs& args,
                                  CommStats* stats) {
  if (args.kind == CallKind::kReduceScatter) return run_reduce_scatter(link, args, stats);
  const auto t0 = std::chrono::steady_clock::now();
  const size_t esz = kernels::elem_size(args.type);
  const int L = topo_.local_ranks, me = topo_.local;
  // At least 4 segments (the overlap), of 2 to 8 slices per node rank (the rail ring's lanes
  // pipeline, and each rail call's fixed costs, its accuracy sample among them, are spread).
  const size_t per_slice = std::max<size_t>(1, settings_.slice_elems) * static_cast<size_t>(L);
  const size_t seg_len = std::max(2 * per_slice, std::min(8 * per_slice, (args.count + 3) / 4));
  std::vector<Segment> segs;
  size_t shard_total = 0;
  for (size_t off = 0; off < args.count; off += seg_len) {
    Segment sg{off, RingPlan(std::min(seg_len, args.count - off), L, settings_.slice_elems),
               shard_total};
    shard_total += sg.plan.chunk_len(me);
    segs.push_back(std::move(sg));
  }
  std::vector<float>& shard =
      shards_[BufferKey{reinterpret_cast<uintptr_t>(args.send), args.count, args.type}];
  shard.resize(shard_total);
  const size_t max_shard = segs.empty() ? 0 : segs.front().plan.chunk_len(0);
  std::vector<uint8_t> rsbuf[2];  // the other ranks' chunks of this rank's shard, per parity
  for (auto& b : rsbuf)
    b.resize(static_cast<size_t>(L - 1) * max_shard * esz);
  std::vector<float> tmp(max_shard);

  SubTransport node_tr(link.transport, topo_.node_ranks), rail_tr(link.transport, topo_.rail_ranks);
  CommLink node = link;
  node.transport = &node_tr;
  node.rank = me;
  node.nranks = L;
  CommLink rail = rail_link(link, &rail_tr);
  const auto* in = static_cast<const uint8_t*>(args.send);
  auto* out = static_cast<uint8_t*>(args.recv);
  auto slot = [me](int p) { return static_cast<size_t>(p < me ? p : p - 1); };

  // 1 (posting): segment k's chunks to their owners, the others' chunks of this rank's shard.
  auto post_scatter = [&](size_t k, NodeTransfers* t) -> Status {
    const Segment& sg = segs[k];
    const uint64_t tag = ring_tag(link.op_seq, kPhaseHierScatter, 0, static_cast<int>(k));
    const size_t mine = sg.plan.chunk_len(me);
    for (int p = 0; p < L; ++p) {
      if (p == me) continue;
      SCCL_RETURN_IF_ERROR(t->recv(p, tag, rsbuf[k % 2].data() + slot(p) * mine * esz, mine * esz));
      SCCL_RETURN_IF_ERROR(t->send(p, tag, in + (sg.offset + sg.plan.chunk_offset(p)) * esz,
                                   sg.plan.chunk_len(p) * esz));
    }
    return Status::Ok();
  };
  // 1 (summing): own chunk, then the others' in local-rank order, in fp32.
  auto sum_scatter = [&](size_t k) {
    const Segment& sg = segs[k];
    const size_t mine = sg.plan.chunk_len(me);
    float* dst = shard.data() + sg.shard_at;
    kernels::load_f32(in + (sg.offset + sg.plan.chunk_offset(me)) * esz, args.type, mine, dst);
    for (int p = 0; p < L; ++p) {
      if (p == me) continue;
      kernels::load_f32(rsbuf[k % 2].data() + slot(p) * mine * esz, args.type, mine, tmp.data());
      for (size_t i = 0; i < mine; ++i)
        dst[i] += tmp[i];
    }
  };
  // 3: this rank's shard of segment k into the output (scaled once, for avg), then to the others.
  const float scale = args.avg ? 1.0f / static_cast<float>(topo_.nranks) : 1.0f;
  auto post_gather = [&](size_t k, NodeTransfers* t) -> Status {
    const Segment& sg = segs[k];
    const uint64_t tag = ring_tag(link.op_seq, kPhaseHierGather, 0, static_cast<int>(k));
    uint8_t* mine = out + (sg.offset + sg.plan.chunk_offset(me)) * esz;
    kernels::store_f32(shard.data() + sg.shard_at, sg.plan.chunk_len(me), scale, args.type, mine);
    for (int p = 0; p < L; ++p) {
      if (p == me) continue;
      SCCL_RETURN_IF_ERROR(t->recv(p, tag, out + (sg.offset + sg.plan.chunk_offset(p)) * esz,
                                   sg.plan.chunk_len(p) * esz));
      SCCL_RETURN_IF_ERROR(t->send(p, tag, mine, sg.plan.chunk_len(me) * esz));
    }
    return Status::Ok();
  };

  std::string codec = kernels::codec_name(kernels::CodecId::kNone);
  NodeTransfers gathers(node);
  uint64_t scatter_sent = 0, scatter_received = 0;
  Status st;
  if (!segs.empty()) {
    NodeTransfers first(node);
    st = post_scatter(0, &first);
    if (st.ok()) st = first.wait("reduce-scatter");
    scatter_sent += first.sent();
    scatter_received += first.received();
    if (st.ok()) sum_scatter(0);
  }
  for (size_t k = 0; st.ok() && k < segs.size(); ++k) {
    NodeTransfers next(node);
    if (k + 1 < segs.size()) st = post_scatter(k + 1, &next);
    // 2: the compressed AllReduce of this rank's shard of segment k along its rail (every
    // member's shard has the same length).
    const size_t len = segs[k].plan.chunk_len(me);
    if (st.ok() && len > 0) {
      float* x = shard.data() + segs[k].shard_at;
      ReductionArgs shard_args{x, x, len, ElemType::kF32, false, args.exact};
      st = rail_.run(rail, shard_args);
      codec = fold_rail_stats(stats, false);
    }
    if (st.ok()) st = post_gather(k, &gathers);
    if (st.ok()) st = next.wait("reduce-scatter");
    scatter_sent += next.sent();
    scatter_received += next.received();
    if (st.ok() && k + 1 < segs.size()) sum_scatter(k + 1);
  }
  if (st.ok()) st = gathers.wait("all-gather");
  // Receives may still be posted into buffers about to go: the communicator is finished.
  if (!st.ok()) link.transport->close();
  CodecStats& cs = stats->by_codec[codec];
  cs.calls++;
  cs.bytes_in += args.count * esz;
  const uint64_t sent = scatter_sent + gathers.sent();
  cs.bytes_sent += sent;
  cs.bytes_received += scatter_received + gathers.received();
  cs.intra_node_bytes_sent += sent;
  return counted(stats, &cs, t0, st);
}

// 1: each rank sends local rank p the N chunks of p's rail (direct, in the user's type), and sums
// its own rail's chunks with the ones received, in local-rank order, in fp32; 2: the rail's
// compressed ReduceScatter of those N sums leaves each rank its own chunk (NCCL's layout).
Status HierarchicalReduction::run_reduce_scatter(const CommLink& link, const ReductionArgs& args,
                                                 CommStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t esz = kernels::elem_size(args.type);
  const int L = topo_.local_ranks, N = topo_.nodes, me = topo_.local;
  const size_t R = args.count / static_cast<size_t>(topo_.nranks);
  const size_t rail_count = static_cast<size_t>(N) * R;
  std::vector<float>& sums = rail_inputs_[BufferKey{
      reinterpret_cast<uintptr_t>(args.send), args.count, args.type, CallKind::kReduceScatter}];
  sums.resize(rail_count);
  std::vector<uint8_t> received(static_cast<size_t>(L - 1) * rail_count * esz);
  auto slot = [me](int p) { return static_cast<size_t>(p < me ? p : p - 1); };
  const auto* in = static_cast<const uint8_t*>(args.send);
  auto chunk = [&](int g) { return in + static_cast<size_t>(g) * R * esz; };

  SubTransport node_tr(link.transport, topo_.node_ranks), rail_tr(link.transport, topo_.rail_ranks);
  CommLink node = link;
  node.transport = &node_tr;
  node.rank = me;
  node.nranks = L;
  NodeTransfers scatter(node);
  Status st;
  for (int p = 0; st.ok() && p < L; ++p) {
    if (p == me) continue;
    for (int n = 0; st.ok() && n < N; ++n) {
      const uint64_t tag = ring_tag(link.op_seq, kPhaseHierScatter, 1, n);
      st = scatter.recv(p, tag, received.data() + (slot(p) * rail_count + n * R) * esz, R * esz);
      if (st.ok()) st = scatter.send(p, tag, chunk(chunks_.chunk_of(p, n)), R * esz);
    }
  }
  if (st.ok()) st = scatter.wait("reduce-scatter");
  if (st.ok()) {
    std::vector<float> tmp(rail_count);
    for (int n = 0; n < N; ++n)
      kernels::load_f32(chunk(chunks_.chunk_of(me, n)), args.type, R, sums.data() + n * R);
    for (int p = 0; p < L; ++p) {
      if (p == me) continue;
      kernels::load_f32(received.data() + slot(p) * rail_count * esz, args.type, rail_count,
                        tmp.data());
      for (size_t i = 0; i < rail_count; ++i)
        sums[i] += tmp[i];
    }
  }
  std::string codec = kernels::codec_name(kernels::CodecId::kNone);
  if (st.ok() && R > 0) {
    // The input is read whole by now: an in-place output may be written.
    std::vector<float> mine(R);
    ReductionArgs rail_args{sums.data(), mine.data(), rail_count, ElemType::kF32,
                            false,       args.exact,  args.mem,   CallKind::kReduceScatter};
    st = rail_.run(rail_link(link, &rail_tr), rail_args);
    codec = fold_rail_stats(stats, false);
    const float scale = args.avg ? 1.0f / static_cast<float>(topo_.nranks) : 1.0f;
    if (st.ok()) kernels::store_f32(mine.data(), R, scale, args.type, args.recv);
  }
  // Receives may still be posted into buffers about to go: the communicator is finished.
  if (!st.ok()) link.transport->close();
  CodecStats& cs = stats->by_codec[codec];
  cs.calls++;
  cs.bytes_in += args.count * esz;
  cs.bytes_sent += scatter.sent();
  cs.bytes_received += scatter.received();
  cs.intra_node_bytes_sent += scatter.sent();
  return counted(stats, &cs, t0, st);
}

}  // namespace sketchccl::coll
