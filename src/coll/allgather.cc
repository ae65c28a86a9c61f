#include "src/coll/allgather.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "src/coll/hierarchy.h"
#include "src/coll/ring.h"
#include "src/coll/ring_phase.h"

namespace sketchccl::coll {
namespace {

// The tag's step field carries the packet's owner and its slice field the slice (ring_tag).
constexpr int kMaxGatherRanks = 1 << 12;
constexpr size_t kMaxGatherSlices = (size_t(1) << 19) - 1;

// What slice 0's message carries behind its packet: the call as its sender sees it. Packets of
// equal slices match in size whatever the count, type or codec, so the receiver compares this.
struct CallTrailer {
  uint64_t count = 0;
  uint8_t codec = 0;
  uint8_t type = 0;
  uint8_t pad[6] = {};
};
static_assert(sizeof(CallTrailer) == 16, "the trailer is on the wire");

// Packet memory from the backend, given back however the call ends.
class Packets {
 public:
  Packets(backend::Backend& be, size_t bytes)
      : be_(be), p_(static_cast<uint8_t*>(be.alloc_packets(bytes == 0 ? 1 : bytes))) {}
  ~Packets() {
    if (p_ != nullptr) be_.free_packets(p_);
  }
  Packets(const Packets&) = delete;
  Packets& operator=(const Packets&) = delete;
  uint8_t* data() const { return p_; }

 private:
  backend::Backend& be_;
  uint8_t* p_;
};

const char* type_name(uint8_t t) {
  switch (static_cast<kernels::ElemType>(t)) {
    case kernels::ElemType::kF32:
      return "float32";
    case kernels::ElemType::kF16:
      return "float16";
    case kernels::ElemType::kBf16:
      return "bfloat16";
  }
  return "unknown-type";
}

const char* codec_label(uint8_t c) {
  const kernels::CodecInfo* info = kernels::codec_info(static_cast<kernels::CodecId>(c));
  return info != nullptr ? info->name : "an unknown codec";
}

class GatherRun {
 public:
  GatherRun(const CommLink& link, backend::Backend& be, const GatherArgs& args,
            const GatherSettings& settings)
      : link_(link),
        be_(be),
        args_(args),
        slice_(settings.slice_elems == 0 ? 1 : settings.slice_elems),
        esz_(kernels::elem_size(args.type)),
        ex_(link, "the compressed AllGather") {
    base_.codec = args.codec;
    base_.seed = settings.seed;
    base_.call = link.op_seq;
    mine_.count = args.count;
    mine_.codec = static_cast<uint8_t>(args.codec);
    mine_.type = static_cast<uint8_t>(args.type);
  }

  // On failure the transport closes before the packet memory goes: nothing writes into it later.
  Status run() {
    Status st = run_inner();
    if (!st.ok()) ex_.fail();
    return st;
  }

  uint64_t bytes_sent() const { return ex_.bytes_sent(); }
  uint64_t bytes_received() const { return ex_.bytes_received(); }

 private:
  Status run_inner() {
    const size_t p = static_cast<size_t>(link_.nranks);
    const size_t slices = (args_.count + slice_ - 1) / slice_;
    if (link_.nranks > kMaxGatherRanks || slices > kMaxGatherSlices) {
      return errorf(Code::kInvalidArgument,
                    "a compressed AllGather of %zu elements per rank on %d ranks does not fit its "
                    "tags (at most %zu slices of SKETCHCCL_SLICE_BYTES per rank, %d ranks)",
                    args_.count, link_.nranks, kMaxGatherSlices, kMaxGatherRanks);
    }
    // Every rank's packets share one layout: a linear codec's packet size depends on n alone.
    offsets_.resize(slices + 1, 0);
    for (size_t j = 0; j < slices; ++j) {
      offsets_[j + 1] = offsets_[j] + be_.packet_bytes(params(0, j), elems(j)) +
                        (j == 0 ? sizeof(CallTrailer) : 0);
    }
    const size_t per_rank = offsets_[slices];
    packets_ = std::make_unique<Packets>(be_, per_rank * p);
    if (packets_->data() == nullptr) {
      return errorf(Code::kSystemError, "could not allocate %zu bytes of packet memory",
                    per_rank * p);
    }
    pkt_ = packets_->data();
    if (p > 1) {
      const Status st = connect_all(link_);
      if (!st.ok()) return ex_.annotate(st, "connecting its peers");
    }
    // Every receive first, then each slice sent as soon as it is encoded.
    for (int q = 0; q < link_.nranks; ++q) {
      if (q == link_.rank) continue;
      for (size_t j = 0; j < slices; ++j) {
        SCCL_RETURN_IF_ERROR(ex_.recv(q, tag(q, j), packet(q, j), bytes(j), note(q, j)));
      }
    }
    const int me = link_.rank;
    std::memcpy(packet(me, 0) + packet_size(0), &mine_, sizeof mine_);
    for (size_t j = 0; j < slices; ++j) {
      const size_t off = j * slice_;
      const Status st =
          be_.encode(params(me, j), static_cast<const uint8_t*>(args_.send) + off * esz_,
                     args_.type, elems(j), packet(me, j), packet_size(j));
      if (!st.ok()) return ex_.annotate(st, "encoding its shard", note(me, j));
      for (int q = 0; q < link_.nranks; ++q) {
        if (q != me)
          SCCL_RETURN_IF_ERROR(ex_.send(q, tag(me, j), packet(me, j), bytes(j), note(me, j)));
      }
    }
    // The owner decodes its own packets too: its output is the same bits as every other rank's.
    // (In place, this overwrites the input, which the packets no longer need.)
    for (size_t j = 0; j < slices; ++j)
      SCCL_RETURN_IF_ERROR(decode(me, j));
    std::vector<Completion> done;
    while (ex_.pending() > 0) {
      done.clear();
      SCCL_RETURN_IF_ERROR(ex_.poll(&done));
      for (const Completion& c : done) {
        if (c.recv) SCCL_RETURN_IF_ERROR(decode(c.peer, static_cast<size_t>(c.note.slice)));
      }
      if (done.empty()) SCCL_RETURN_IF_ERROR(ex_.idle());
    }
    return Status::Ok();
  }

  size_t elems(size_t j) const {
    const size_t off = j * slice_;
    return args_.count - off < slice_ ? args_.count - off : slice_;
  }
  // Slice j's message, and the codec's packet at its start.
  size_t bytes(size_t j) const { return offsets_[j + 1] - offsets_[j]; }
  size_t packet_size(size_t j) const { return bytes(j) - (j == 0 ? sizeof(CallTrailer) : 0); }
  uint8_t* packet(int owner, size_t j) const {
    return pkt_ + static_cast<size_t>(owner) * offsets_.back() + offsets_[j];
  }
  uint64_t tag(int owner, size_t j) const {
    return ring_tag(link_.op_seq, kPhaseCompressedGather, owner, static_cast<int>(j));
  }
  static TransferNote note(int owner, size_t j) {
    TransferNote n;
    n.slice = static_cast<int>(j);
    n.cookie = owner;
    n.phase = kPhaseCompressedGather;
    return n;
  }
  // Where the owner's shard goes in recv, in shards.
  int block(int owner) const {
    return args_.place != nullptr ? (*args_.place)[static_cast<size_t>(owner)] : owner;
  }
  // The slice's parameters from where it lies in the gathered output: the same on every rank.
  kernels::CodecParams params(int owner, size_t j) const {
    kernels::CodecParams cp = base_;
    const int key =
        args_.key_place != nullptr ? (*args_.key_place)[static_cast<size_t>(owner)] : block(owner);
    const uint64_t at = static_cast<uint64_t>(key) * args_.count + j * slice_;
    cp.offset_key = static_cast<uint32_t>(at ^ (at >> 32));
    return cp;
  }
  Status decode(int owner, size_t j) {
    if (j == 0 && owner != link_.rank) {
      CallTrailer theirs;
      std::memcpy(&theirs, packet(owner, 0) + packet_size(0), sizeof theirs);
      if (std::memcmp(&theirs, &mine_, sizeof theirs) != 0) {
        return ex_.annotate(
            errorf(Code::kInvalidUsage,
                   "rank %d gathers %zu %s elements with %s, rank %d %llu %s elements with %s: the "
                   "ranks disagree on the count, type or codec of this call",
                   link_.rank, args_.count, type_name(mine_.type), codec_label(mine_.codec), owner,
                   static_cast<unsigned long long>(theirs.count), type_name(theirs.type),
                   codec_label(theirs.codec)),
            "checking a peer's call", note(owner, j));
      }
    }
    uint8_t* y = static_cast<uint8_t*>(args_.recv) +
                 (static_cast<size_t>(block(owner)) * args_.count + j * slice_) * esz_;
    kernels::DecodeStats ds;
    Status st = be_.decode(params(owner, j), packet(owner, j), packet_size(j), y, args_.type,
                           elems(j), 1.0f, &ds);
    if (!st.ok()) {
      const std::string what = "decoding rank " + std::to_string(owner) + "'s packet";
      return ex_.annotate(st, what.c_str(), note(owner, j));
    }
    ex_.progressed();
    return st;
  }

  const CommLink& link_;
  backend::Backend& be_;
  const GatherArgs& args_;
  const size_t slice_;
  const size_t esz_;
  std::unique_ptr<Packets> packets_;  // before ex_: the exchange closes before the memory goes
  Exchange ex_;
  kernels::CodecParams base_;
  CallTrailer mine_;
  std::vector<size_t> offsets_;  // slice j's packet at [offsets_[j], offsets_[j + 1]) per rank
  uint8_t* pkt_ = nullptr;       // rank r's packets at r * offsets_.back()
};

}  // namespace

Status check_gather_codec(kernels::CodecId codec, const char* what) {
  if (gather_codec_usable(codec)) return Status::Ok();
  return errorf(Code::kInvalidArgument,
                "%s: codec '%s' cannot run an AllGather (the linear codecs can: bf16, fp16, q8, "
                "q4, q2, q8r, q4r, q2r; none runs it exact)",
                what, kernels::codec_name(codec));
}

namespace {

struct Moved {
  uint64_t sent = 0, received = 0;
};

Status run_gather(const CommLink& link, backend::Backend& be, const GatherArgs& args,
                  const GatherSettings& settings, Moved* moved) {
  GatherRun run(link, be, args, settings);
  Status st = run.run();
  moved->sent += run.bytes_sent();
  moved->received += run.bytes_received();
  return st;
}

// The node's exact exchange: local rank l holds, at rank_at[n·L + l]'s place of recv, the decoded
// shard of node n's local rank l for every node n; it sends those N shards to every other rank of
// its node and receives theirs into their places (the bytes as they are, in slices).
Status node_exchange(const CommLink& node, const GatherArgs& args, const std::vector<int>& rank_at,
                     int nodes, size_t slice_bytes, Moved* moved) {
  Exchange ex(node, "the node-aware AllGather's exchange in the node");
  const size_t shard = args.count * kernels::elem_size(args.type);
  const size_t per_shard = (shard + slice_bytes - 1) / slice_bytes;
  const int L = node.nranks, me = node.rank;
  if (per_shard * static_cast<size_t>(nodes) > kMaxGatherSlices) {
    return errorf(Code::kInvalidArgument,
                  "a node-aware AllGather of %zu elements per rank on %d nodes does not fit its "
                  "tags (at most %zu slices of SKETCHCCL_SLICE_BYTES per rank)",
                  args.count, nodes, kMaxGatherSlices);
  }
  auto* out = static_cast<uint8_t*>(args.recv);
  auto at = [&](int n, int l, size_t j) {
    return out + static_cast<size_t>(rank_at[static_cast<size_t>(n * L + l)]) * shard +
           j * slice_bytes;
  };
  auto len = [&](size_t j) { return std::min(slice_bytes, shard - j * slice_bytes); };
  Status st = connect_all(node);
  for (int l = 0; l < L && st.ok(); ++l) {
    if (l == me) continue;
    for (int n = 0; n < nodes && st.ok(); ++n) {
      for (size_t j = 0; j < per_shard && st.ok(); ++j) {
        TransferNote note;
        note.slice = static_cast<int>(static_cast<size_t>(n) * per_shard + j);
        note.phase = kPhaseGatherNode;
        const int slice = note.slice;
        st = ex.recv(l, ring_tag(node.op_seq, kPhaseGatherNode, l, slice), at(n, l, j), len(j),
                     note);
        if (st.ok()) {
          st = ex.send(l, ring_tag(node.op_seq, kPhaseGatherNode, me, slice), at(n, me, j), len(j),
                       note);
        }
      }
    }
  }
  if (st.ok()) st = ex.wait_all();
  if (!st.ok()) ex.fail();
  moved->sent += ex.bytes_sent();
  moved->received += ex.bytes_received();
  return st;
}

// rank_at[n·L + l]: node n's local rank l (local indices follow the ranks' order).
std::vector<int> ranks_by_node(const Topology& topo) {
  const int N = topo.nodes, L = topo.local_ranks;
  std::vector<int> rank_at(static_cast<size_t>(N * L), 0), seen(static_cast<size_t>(N), 0);
  for (int r = 0; r < topo.nranks; ++r) {
    const int n = topo.node_of[static_cast<size_t>(r)];
    rank_at[static_cast<size_t>(n * L + seen[static_cast<size_t>(n)]++)] = r;
  }
  return rank_at;
}

// The owners' places of this rank's rail: node n's rank of its local index.
std::vector<int> rail_places(const Topology& topo, const std::vector<int>& rank_at) {
  std::vector<int> place(static_cast<size_t>(topo.nodes));
  for (int n = 0; n < topo.nodes; ++n)
    place[static_cast<size_t>(n)] = rank_at[static_cast<size_t>(n * topo.local_ranks + topo.local)];
  return place;
}

// The rail's view of a link: this rank's rail (one rank per node), rank = node.
class RailLink {
 public:
  RailLink(const CommLink& link, const Topology& topo) : sub_(link.transport, topo.rail_ranks) {
    for (int r : topo.rail_ranks) {
      if (link.addresses != nullptr)
        addresses_.push_back((*link.addresses)[static_cast<size_t>(r)]);
    }
    link_ = link;
    link_.transport = &sub_;
    link_.rank = topo.node;
    link_.nranks = topo.nodes;
    link_.addresses = link.addresses != nullptr ? &addresses_ : nullptr;
  }
  RailLink(const RailLink&) = delete;
  RailLink& operator=(const RailLink&) = delete;
  const CommLink& link() const { return link_; }

 private:
  SubTransport sub_;
  std::vector<transport::Blob> addresses_;
  CommLink link_;
};

// One call's statistics, however it ends.
void count(const GatherArgs& args, const Status& st, const Moved& all, uint64_t inter_node_sent,
           std::chrono::steady_clock::time_point start, GatherStats* stats) {
  ++stats->calls;
  if (!st.ok()) ++stats->failed;
  stats->bytes_in += args.count * kernels::elem_size(args.type);
  stats->bytes_sent += all.sent;
  stats->bytes_received += all.received;
  stats->inter_node_bytes_sent += inter_node_sent;
  stats->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Status compressed_allgather(const CommLink& link, backend::Backend& be, const GatherArgs& args,
                            const GatherSettings& settings, GatherStats* stats,
                            int peers_on_other_nodes) {
  const auto start = std::chrono::steady_clock::now();
  Status st = check_gather_codec(args.codec, "the compressed AllGather");
  Moved moved;
  if (st.ok() && args.count > 0) st = run_gather(link, be, args, settings, &moved);
  // Every peer gets the same bytes.
  const uint64_t inter =
      link.nranks > 1 ? moved.sent / static_cast<uint64_t>(link.nranks - 1) *
                            static_cast<uint64_t>(peers_on_other_nodes < 0 ? link.nranks - 1
                                                                           : peers_on_other_nodes)
                      : 0;
  count(args, st, moved, inter, start, stats);
  return st;
}

Status node_aware_allgather(const CommLink& link, const Topology& topo, backend::Backend& be,
                            const GatherArgs& args, const GatherSettings& settings,
                            GatherStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  Status st = check_gather_codec(args.codec, "the compressed AllGather");
  if (st.ok() && !topo.hierarchical()) {
    st = Status(Code::kInternalError, "a node-aware AllGather on a flat topology");
  }
  Moved rail_moved, node_moved;
  if (st.ok() && args.count > 0) {
    const int N = topo.nodes, L = topo.local_ranks;
    const std::vector<int> rank_at = ranks_by_node(topo);
    // 1: the compressed gather along the rail, each shard decoded into its owner's place.
    const std::vector<int> place = rail_places(topo, rank_at);
    std::vector<transport::Blob> node_addresses;
    for (int r : topo.node_ranks) {
      if (link.addresses != nullptr)
        node_addresses.push_back((*link.addresses)[static_cast<size_t>(r)]);
    }
    RailLink rail(link, topo);
    GatherArgs ra = args;
    ra.place = &place;
    st = run_gather(rail.link(), be, ra, settings, &rail_moved);
    // 2: the node's exact exchange of the rail's decoded shards.
    if (st.ok()) {
      SubTransport node(link.transport, topo.node_ranks);
      CommLink nl = link;
      nl.transport = &node;
      nl.rank = topo.local;
      nl.nranks = L;
      nl.addresses = link.addresses != nullptr ? &node_addresses : nullptr;
      st = node_exchange(nl, args, rank_at, N,
                         std::max<size_t>(1, settings.slice_elems) * sizeof(float), &node_moved);
    }
  }
  Moved all;
  all.sent = rail_moved.sent + node_moved.sent;
  all.received = rail_moved.received + node_moved.received;
  count(args, st, all, rail_moved.sent, start, stats);
  return st;
}

Status rail_allgather(const CommLink& link, const Topology& topo, backend::Backend& be,
                      const GatherArgs& args, const GatherSettings& settings, GatherStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  Status st = check_gather_codec(args.codec, "the compressed AllGather");
  if (st.ok() && !topo.hierarchical()) {
    st = Status(Code::kInternalError, "a rail AllGather on a flat topology");
  }
  Moved moved;
  if (st.ok() && args.count > 0) {
    RailLink rail(link, topo);
    // Node n's shard at n, its packets keyed by its owner's place, as the node-aware gather's.
    const std::vector<int> owners = rail_places(topo, ranks_by_node(topo));
    GatherArgs ra = args;
    ra.place = nullptr;
    ra.key_place = &owners;
    st = run_gather(rail.link(), be, ra, settings, &moved);
  }
  count(args, st, moved, moved.sent, start, stats);  // every byte crosses nodes
  return st;
}

}  // namespace sketchccl::coll
