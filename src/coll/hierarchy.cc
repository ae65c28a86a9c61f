#include "coll/hierarchy.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "coll/ring_phase.h"
#include "core/log.h"
#include "kernels/convert.h"

namespace sketchccl::coll {
namespace {

using kernels::ElemType;

// Phase 1: an exact reduce-scatter in fp32. Packets are fp32 partial sums; this rank's chunk
// lands in `shard` (its elements [first, first + len) of the input).
class ExactScatterOps : public SliceOps {
 public:
  ExactScatterOps(const void* send, ElemType type, float* shard, size_t first)
      : send_(static_cast<const uint8_t*>(send)),
        type_(type),
        esz_(kernels::elem_size(type)),
        shard_(shard),
        first_(first) {}

  size_t packet_bytes(size_t, size_t n) const override { return n * sizeof(float); }
  Status encode(size_t offset, size_t n, int, void* pkt, size_t cap) override {
    if (cap < n * sizeof(float)) return Status(Code::kInternalError, "exact packet too small");
    kernels::load_f32(send_ + offset * esz_, type_, n, static_cast<float*>(pkt));
    return Status::Ok();
  }
  Status reduce(size_t offset, size_t n, int, const void* in, size_t in_bytes, void* out,
                size_t cap) override {
    if (in_bytes != n * sizeof(float) || cap < n * sizeof(float)) {
      return errorf(Code::kInvalidUsage, "exact packet of %zu bytes, expected %zu", in_bytes,
                    n * sizeof(float));
    }
    float* o = static_cast<float*>(out);
    const float* a = static_cast<const float*>(in);
    kernels::load_f32(send_ + offset * esz_, type_, n, o);
    for (size_t i = 0; i < n; ++i)
      o[i] = a[i] + o[i];
    return Status::Ok();
  }
  Status decode_start(size_t offset, size_t n, const void* pkt, size_t bytes) override {
    if (bytes != n * sizeof(float) || offset < first_) {
      return Status(Code::kInternalError, "exact packet outside this rank's shard");
    }
    std::memcpy(shard_ + (offset - first_), pkt, bytes);
    return Status::Ok();
  }

 private:
  const uint8_t* send_;
  ElemType type_;
  size_t esz_;
  float* shard_;
  size_t first_;
};

// Waits for one request, bounded by the timeout and the abort flag.
Status wait_request(const RingLink& link, transport::RequestId id, const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int idle = 0;; ++idle) {
    if (link.abort != nullptr && link.abort->load()) {
      return Status(Code::kRemoteError, "operation aborted (ncclCommAbort)");
    }
    SCCL_RETURN_IF_ERROR(link.transport->progress());
    bool done = false;
    size_t got = 0;
    SCCL_RETURN_IF_ERROR(link.transport->test(id, &done, &got));
    if (done) return Status::Ok();
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
        link.timeout_s) {
      return errorf(Code::kRemoteError,
                    "rank %d of a node's ring timed out after %.1f s (SKETCHCCL_TIMEOUT) in the "
                    "hierarchical all-gather (%s)",
                    link.rank, link.timeout_s, what);
    }
    // Many ranks may share few cores (as in the ring): let them run.
    if (idle > 4096) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else if (idle > 256) {
      std::this_thread::yield();
    }
  }
}

// Phase 3: the ring all-gather of every rank's chunk of `buf` (chunks of `plan`), exact bytes.
Status ring_allgather(const RingLink& link, const RingPlan& plan, uint8_t* buf, size_t esz,
                      RingStats* rs) {
  const int p = link.nranks, r = link.rank;
  const int left = (r - 1 + p) % p, right = (r + 1) % p;
  for (int s = 0; s < p - 1; ++s) {
    const int sb = (r - s + p) % p, rb = (r - s - 1 + p) % p;
    const uint64_t tag = ring_tag(link.op_seq, link.phase, s, 0);
    const size_t rbytes = plan.chunk_len(rb) * esz, sbytes = plan.chunk_len(sb) * esz;
    transport::RequestId rid = 0, sid = 0;
    if (rbytes > 0) {
      SCCL_RETURN_IF_ERROR(
          link.transport->irecv(left, tag, buf + plan.chunk_offset(rb) * esz, rbytes, &rid));
    }
    if (sbytes > 0) {
      SCCL_RETURN_IF_ERROR(
          link.transport->isend(right, tag, buf + plan.chunk_offset(sb) * esz, sbytes, &sid));
      rs->bytes_sent += sbytes;
    }
    if (rbytes > 0) {
      SCCL_RETURN_IF_ERROR(wait_request(link, rid, "receive from the left neighbour"));
      rs->bytes_received += rbytes;
    }
    if (sbytes > 0) SCCL_RETURN_IF_ERROR(wait_request(link, sid, "send to the right neighbour"));
  }
  return Status::Ok();
}

void add_codec_stats(const CodecStats& from, CodecStats* to) {
  to->calls += from.calls;
  to->bytes_sent += from.bytes_sent;
  to->bytes_received += from.bytes_received;
  to->s2_nonzeros += from.s2_nonzeros;
  to->s2_peeled += from.s2_peeled;
  to->s2_estimated += from.s2_estimated;
  to->ef_input_sq += from.ef_input_sq;
  to->ef_residual_sq += from.ef_residual_sq;
  to->estimated_calls += from.estimated_calls;
  to->estimated_nmse_sum += from.estimated_nmse_sum;
  to->estimated_maxrel_sum += from.estimated_maxrel_sum;
  to->estimated_nmse_worst = std::max(to->estimated_nmse_worst, from.estimated_nmse_worst);
  to->estimated_maxrel_worst = std::max(to->estimated_maxrel_worst, from.estimated_maxrel_worst);
  to->sample_bytes_sent += from.sample_bytes_sent;
  to->guard_steps += from.guard_steps;
  to->inter_node_bytes_sent += from.bytes_sent;
}

}  // namespace

HierarchicalAllReduce::HierarchicalAllReduce(const Settings& settings, const Topology& topo,
                                             int cuda_device)
    : settings_(settings), topo_(topo), rail_(settings, topo.nodes, cuda_device) {}

RingLink HierarchicalAllReduce::rail_link(const RingLink& link,
                                          transport::Transport* rail_transport) const {
  RingLink rail = link;
  rail.transport = rail_transport;
  rail.rank = topo_.node;
  rail.nranks = topo_.nodes;
  return rail;
}

std::string HierarchicalAllReduce::fold_rail_stats(CommStats* stats) {
  std::string codec = kernels::codec_name(kernels::CodecId::kNone);
  for (const auto& [name, c] : rail_.stats().by_codec) {
    if (c.calls > 0) codec = name;
    add_codec_stats(c, &stats->by_codec[name]);
  }
  rail_.stats() = CommStats{};
  return codec;
}

Status HierarchicalAllReduce::run_rail(const RingLink& link, const AllReduceArgs& args,
                                       CommStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  SubTransport rail_tr(link.transport, topo_.rail_ranks);
  AllReduceArgs shard = args;
  shard.rail = false;
  Status st = rail_.run(rail_link(link, &rail_tr), shard);
  CodecStats& cs = stats->by_codec[fold_rail_stats(stats)];
  // The user's buffer is L shards; NCCL's phases send what they send (not counted here).
  cs.bytes_in +=
      args.count * kernels::elem_size(args.type) * static_cast<size_t>(topo_.local_ranks);
  cs.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (st.ok()) {
    stats->calls_taken++;
  } else {
    stats->calls_failed++;
  }
  return st;
}

Status HierarchicalAllReduce::run(const RingLink& link, const AllReduceArgs& args,
                                  CommStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t esz = kernels::elem_size(args.type);
  const int L = topo_.local_ranks;
  const RingPlan plan(args.count, L, settings_.slice_elems);
  const size_t first = plan.chunk_offset(topo_.local), len = plan.chunk_len(topo_.local);
  std::vector<float>& shard =
      shards_[BufferKey{reinterpret_cast<uintptr_t>(args.send), args.count, args.type}];
  shard.resize(len);

  SubTransport node_tr(link.transport, topo_.node_ranks), rail_tr(link.transport, topo_.rail_ranks);
  RingLink node = link;
  node.transport = &node_tr;
  node.rank = topo_.local;
  node.nranks = L;
  RingLink rail = rail_link(link, &rail_tr);

  // 1: exact reduce-scatter in the node (even cut: local rank l holds chunk l).
  RingStats intra;
  ExactScatterOps scatter_ops(args.send, args.type, shard.data(), first);
  node.phase = kPhaseHierScatter;
  Status st = ring_reduce_scatter(node, args.count, settings_.slice_elems, settings_.depth,
                                  scatter_ops, &intra);
  // 2: the compressed AllReduce of the shard along the rail (every member's shard has `len`).
  std::string codec = kernels::codec_name(kernels::CodecId::kNone);
  if (st.ok() && len > 0) {
    AllReduceArgs shard_args{shard.data(), shard.data(), len, ElemType::kF32, false, args.exact};
    rail.phase = link.phase;
    st = rail_.run(rail, shard_args);
    codec = fold_rail_stats(stats);
  }
  // 3: this rank's chunk of the output (scaled once, for avg), then the exact all-gather.
  if (st.ok()) {
    const float scale = args.avg ? 1.0f / static_cast<float>(topo_.nranks) : 1.0f;
    uint8_t* out = static_cast<uint8_t*>(args.recv);
    kernels::store_f32(shard.data(), len, scale, args.type, out + first * esz);
    node.phase = kPhaseHierGather;
    st = ring_allgather(node, plan, out, esz, &intra);
    if (!st.ok()) link.transport->close();  // receives may still be posted into recv
  }
  CodecStats& cs = stats->by_codec[codec];
  if (len == 0) cs.calls++;  // no rail call counted it
  cs.bytes_in += args.count * esz;
  cs.bytes_sent += intra.bytes_sent;
  cs.bytes_received += intra.bytes_received;
  cs.intra_node_bytes_sent += intra.bytes_sent;
  cs.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (st.ok()) {
    stats->calls_taken++;
  } else {
    stats->calls_failed++;
  }
  return st;
}

}  // namespace sketchccl::coll
