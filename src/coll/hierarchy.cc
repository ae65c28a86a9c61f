#include "src/coll/hierarchy.h"

#include <algorithm>
#include <chrono>

#include "kernels/convert.h"
#include "src/coll/exchange.h"
#include "src/coll/ring_phase.h"
#include "src/core/log.h"

namespace sketchccl::coll {
namespace {

using kernels::ElemType;

// The node phases' transfers: posted ahead and completed later through an Exchange over the
// node's sub-transport. Whatever drives the transport meanwhile (the rail ring's progress calls)
// moves them, so the node's exchanges of one segment overlap the rail ring of another. Empty
// chunks travel as no message at all.
Status post_node_send(Exchange* ex, int peer, uint64_t tag, const void* buf, size_t bytes,
                      const TransferNote& note) {
  return bytes == 0 ? Status::Ok() : ex->send(peer, tag, buf, bytes, note);
}
Status post_node_recv(Exchange* ex, int peer, uint64_t tag, void* buf, size_t bytes,
                      const TransferNote& note) {
  return bytes == 0 ? Status::Ok() : ex->recv(peer, tag, buf, bytes, note);
}
// A node transfer's place in errors: its tag phase and segment (the tag's slice field).
TransferNote node_note(uint8_t phase, int segment) {
  TransferNote note;
  note.phase = phase;
  note.slice = segment;
  return note;
}
// Every posted node transfer complete. The clock starts here: the rail phase that ran since the
// posts is not a stalled transfer.
Status wait_node(Exchange* ex) {
  ex->progressed();
  return ex->wait_all();
}

// The node's ranks as a link: local indices over the node's sub-transport (the communicator
// connected them when it was made).
CommLink node_link(const CommLink& link, transport::Transport* node_transport,
                   const Topology& topo) {
  CommLink node = link;
  node.transport = node_transport;
  node.rank = topo.local;
  node.nranks = topo.local_ranks;
  node.addresses = nullptr;
  return node;
}

// What the Exchanges of the node phases are called in errors.
constexpr const char* kNodeScatterWhat = "the hierarchical reduce-scatter among the node's ranks";
constexpr const char* kNodeGatherWhat = "the hierarchical all-gather among the node's ranks";

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

// The node phases of one hierarchical AllReduce, over the buffer cut into segments: 1, the exact
// reduce-scatter of each segment into this rank's fp32 shard (direct: each rank sends chunk p to
// local rank p, which sums them in local-rank order); 3, the exact all-gather of the reduced
// shards into the output (direct too). Segment k's reduce-scatter is posted while the rail ring
// reduces segment k - 1, and its all-gather moves while the rail ring reduces segment k + 1: the
// node's traffic hides behind the network's. Its transfers go through two Exchanges over the
// node's sub-transport, which count the bytes.
class HierarchicalReduction::NodePhases {
 public:
  NodePhases(const CommLink& link, const Topology& topo, const ReductionArgs& args,
             size_t slice_elems, std::vector<float>* shard);

  size_t segments() const { return segs_.size(); }
  bool exact() const { return args_.exact; }  // the call's: the rail runs `none` too
  // This rank's fp32 shard of segment k: the rail phase's buffer.
  float* shard(size_t k) { return shard_->data() + segs_[k].shard_at; }
  size_t shard_len(size_t k) const { return segs_[k].plan.chunk_len(me_); }

  // 1: posts segment k's chunks to their owners and the receives of the others' chunks of this
  // rank's shard (one segment at a time is in flight).
  Status post_scatter(size_t k);
  // 1: waits for segment k's reduce-scatter and sums it into the shard.
  Status finish_scatter(size_t k);
  // 3: this rank's shard of segment k into the output (scaled once, for avg), then to the others.
  Status post_gather(size_t k);
  Status finish_gathers() { return wait_node(&gathers_); }

  uint64_t bytes_sent() const { return scatter_.bytes_sent() + gathers_.bytes_sent(); }
  uint64_t bytes_received() const { return scatter_.bytes_received() + gathers_.bytes_received(); }

 private:
  // One segment of the buffer: [offset, offset + count), cut into L shards (even cut).
  struct Segment {
    size_t offset = 0;
    RingPlan plan;
    size_t shard_at = 0;  // where this rank's shard of it lies in the shard buffer
  };
  // Where local rank p's chunk lies among the others' (this rank has none from itself).
  size_t slot(int p) const { return static_cast<size_t>(p < me_ ? p : p - 1); }
  const uint8_t* input(const Segment& sg, int p) const {
    return in_ + (sg.offset + sg.plan.chunk_offset(p)) * esz_;
  }
  uint8_t* output(const Segment& sg, int p) const {
    return out_ + (sg.offset + sg.plan.chunk_offset(p)) * esz_;
  }
  uint8_t* received(size_t k, int p) {
    return rsbuf_[k % 2].data() + slot(p) * segs_[k].plan.chunk_len(me_) * esz_;
  }

  const ReductionArgs& args_;
  const int L_, me_;
  const size_t esz_;
  const float scale_;  // avg: 1 / P, applied once to the reduced shard
  const uint32_t op_seq_;
  const uint8_t* in_;
  uint8_t* out_;
  std::vector<Segment> segs_;
  std::vector<float>* shard_;
  std::vector<uint8_t> rsbuf_[2];  // the other ranks' chunks of this rank's shard, per parity
  std::vector<float> tmp_;
  SubTransport node_tr_;
  CommLink node_;
  Exchange scatter_, gathers_;
};

HierarchicalReduction::NodePhases::NodePhases(const CommLink& link, const Topology& topo,
                                              const ReductionArgs& args, size_t slice_elems,
                                              std::vector<float>* shard)
    : args_(args),
      L_(topo.local_ranks),
      me_(topo.local),
      esz_(kernels::elem_size(args.type)),
      scale_(args.avg ? 1.0f / static_cast<float>(topo.nranks) : 1.0f),
      op_seq_(link.op_seq),
      in_(static_cast<const uint8_t*>(args.send)),
      out_(static_cast<uint8_t*>(args.recv)),
      shard_(shard),
      node_tr_(link.transport, topo.node_ranks),
      node_(node_link(link, &node_tr_, topo)),
      scatter_(node_, kNodeScatterWhat),
      gathers_(node_, kNodeGatherWhat) {
  // At least 4 segments (the overlap), of 2 to 8 slices per node rank (the rail ring's lanes
  // pipeline, and each rail call's fixed costs, its accuracy sample among them, are spread).
  const size_t per_slice = std::max<size_t>(1, slice_elems) * static_cast<size_t>(L_);
  const size_t seg_len = std::max(2 * per_slice, std::min(8 * per_slice, (args.count + 3) / 4));
  size_t shard_total = 0;
  for (size_t off = 0; off < args.count; off += seg_len) {
    Segment sg{off, RingPlan(std::min(seg_len, args.count - off), L_, slice_elems), shard_total};
    shard_total += sg.plan.chunk_len(me_);
    segs_.push_back(std::move(sg));
  }
  shard_->resize(shard_total);
  const size_t max_shard = segs_.empty() ? 0 : segs_.front().plan.chunk_len(0);
  for (auto& b : rsbuf_)
    b.resize(static_cast<size_t>(L_ - 1) * max_shard * esz_);
  tmp_.resize(max_shard);
}

Status HierarchicalReduction::NodePhases::post_scatter(size_t k) {
  const Segment& sg = segs_[k];
  const uint64_t tag = ring_tag(op_seq_, kPhaseHierScatter, 0, static_cast<int>(k));
  const TransferNote note = node_note(kPhaseHierScatter, static_cast<int>(k));
  const size_t mine = sg.plan.chunk_len(me_) * esz_;
  for (int p = 0; p < L_; ++p) {
    if (p == me_) continue;
    SCCL_RETURN_IF_ERROR(post_node_recv(&scatter_, p, tag, received(k, p), mine, note));
    SCCL_RETURN_IF_ERROR(
        post_node_send(&scatter_, p, tag, input(sg, p), sg.plan.chunk_len(p) * esz_, note));
  }
  return Status::Ok();
}

Status HierarchicalReduction::NodePhases::finish_scatter(size_t k) {
  SCCL_RETURN_IF_ERROR(wait_node(&scatter_));
  // Own chunk, then the others' in local-rank order, in fp32.
  const Segment& sg = segs_[k];
  const size_t mine = sg.plan.chunk_len(me_);
  float* dst = shard(k);
  kernels::load_f32(input(sg, me_), args_.type, mine, dst);
  for (int p = 0; p < L_; ++p) {
    if (p == me_) continue;
    kernels::load_f32(received(k, p), args_.type, mine, tmp_.data());
    for (size_t i = 0; i < mine; ++i)
      dst[i] += tmp_[i];
  }
  return Status::Ok();
}

Status HierarchicalReduction::NodePhases::post_gather(size_t k) {
  const Segment& sg = segs_[k];
  const uint64_t tag = ring_tag(op_seq_, kPhaseHierGather, 0, static_cast<int>(k));
  const TransferNote note = node_note(kPhaseHierGather, static_cast<int>(k));
  uint8_t* mine = output(sg, me_);
  kernels::store_f32(shard(k), sg.plan.chunk_len(me_), scale_, args_.type, mine);
  for (int p = 0; p < L_; ++p) {
    if (p == me_) continue;
    SCCL_RETURN_IF_ERROR(
        post_node_recv(&gathers_, p, tag, output(sg, p), sg.plan.chunk_len(p) * esz_, note));
    SCCL_RETURN_IF_ERROR(
        post_node_send(&gathers_, p, tag, mine, sg.plan.chunk_len(me_) * esz_, note));
  }
  return Status::Ok();
}

Status HierarchicalReduction::run(const CommLink& link, const ReductionArgs& args,
                                  CommStats* stats) {
  if (args.kind == CallKind::kReduceScatter) return run_reduce_scatter(link, args, stats);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float>& shard =
      shards_[BufferKey{reinterpret_cast<uintptr_t>(args.send), args.count, args.type}];
  NodePhases node(link, topo_, args, settings_.slice_elems, &shard);
  SubTransport rail_tr(link.transport, topo_.rail_ranks);
  std::string codec = kernels::codec_name(kernels::CodecId::kNone);
  Status st = run_segments(&node, rail_link(link, &rail_tr), stats, &codec);
  if (st.ok()) st = node.finish_gathers();
  // Receives may still be posted into buffers about to go: the communicator is finished.
  if (!st.ok()) link.transport->close();
  CodecStats& cs = stats->by_codec[codec];
  cs.calls++;
  cs.bytes_in += args.count * kernels::elem_size(args.type);
  cs.bytes_sent += node.bytes_sent();
  cs.bytes_received += node.bytes_received();
  cs.intra_node_bytes_sent += node.bytes_sent();
  return counted(stats, &cs, t0, st);
}

// Segment k + 1's reduce-scatter posted, segment k's shard along the rail, segment k's all-gather
// posted, segment k + 1's reduce-scatter summed; the last all-gathers are left to the caller.
Status HierarchicalReduction::run_segments(NodePhases* node, const CommLink& rail, CommStats* stats,
                                           std::string* codec) {
  if (node->segments() == 0) return Status::Ok();
  SCCL_RETURN_IF_ERROR(node->post_scatter(0));
  SCCL_RETURN_IF_ERROR(node->finish_scatter(0));
  for (size_t k = 0; k < node->segments(); ++k) {
    const bool more = k + 1 < node->segments();
    if (more) SCCL_RETURN_IF_ERROR(node->post_scatter(k + 1));
    SCCL_RETURN_IF_ERROR(reduce_shard(node, k, rail, stats, codec));
    SCCL_RETURN_IF_ERROR(node->post_gather(k));
    if (more) SCCL_RETURN_IF_ERROR(node->finish_scatter(k + 1));
  }
  return Status::Ok();
}

// 2: the compressed AllReduce of this rank's shard of segment k along its rail (every member's
// shard has the same length).
Status HierarchicalReduction::reduce_shard(NodePhases* node, size_t k, const CommLink& rail,
                                           CommStats* stats, std::string* codec) {
  if (node->shard_len(k) == 0) return Status::Ok();
  ReductionArgs shard;
  shard.send = node->shard(k);
  shard.recv = node->shard(k);
  shard.count = node->shard_len(k);
  shard.type = ElemType::kF32;
  shard.exact = node->exact();
  Status st = rail_.run(rail, shard);
  *codec = fold_rail_stats(stats, false);
  return st;
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
  const CommLink node = node_link(link, &node_tr, topo_);
  Exchange scatter(node, kNodeScatterWhat);
  Status st;
  for (int p = 0; st.ok() && p < L; ++p) {
    if (p == me) continue;
    for (int n = 0; st.ok() && n < N; ++n) {
      const uint64_t tag = ring_tag(link.op_seq, kPhaseHierScatter, 1, n);
      const TransferNote note = node_note(kPhaseHierScatter, n);
      st = post_node_recv(&scatter, p, tag, received.data() + (slot(p) * rail_count + n * R) * esz,
                          R * esz, note);
      if (st.ok()) {
        st = post_node_send(&scatter, p, tag, chunk(chunks_.chunk_of(p, n)), R * esz, note);
      }
    }
  }
  if (st.ok()) st = wait_node(&scatter);
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
    ReductionArgs rail_args;
    rail_args.send = sums.data();
    rail_args.recv = mine.data();
    rail_args.count = rail_count;
    rail_args.type = ElemType::kF32;
    rail_args.exact = args.exact;
    rail_args.mem = args.mem;
    rail_args.kind = CallKind::kReduceScatter;
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
  cs.bytes_sent += scatter.bytes_sent();
  cs.bytes_received += scatter.bytes_received();
  cs.intra_node_bytes_sent += scatter.bytes_sent();
  return counted(stats, &cs, t0, st);
}

}  // namespace sketchccl::coll
