#include "src/coll/allreduce.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>

#include "kernels/sparse.h"
#include "src/backend/backend.h"
#include "src/coll/codec_choice.h"
#include "src/coll/hierarchy.h"
#include "src/coll/oom.h"
#include "src/coll/reduce_scatter.h"
#include "src/coll/ring_phase.h"
#include "src/coll/s2_repair.h"
#include "src/coll/support_encoding.h"
#include "src/core/log.h"

namespace sketchccl::coll {
namespace {

using kernels::CodecId;
using kernels::CodecParams;
using kernels::DecodeStats;
using kernels::ElemType;

// What the buffer's previous call left that the cost model reads: agreed numbers only.
SupportHistory support_history(const BufferState& state) {
  SupportHistory h;
  h.known = state.have_history;
  h.nonzeros = state.nonzeros;
  h.rows = state.support_rows;
  return h;
}

bool is_lossy_and_nonlinear(CodecId c) {
  // Error feedback applies where encode/step introduce error: casts, quantizers, CASQ. `none`
  // and `sparse` are exact; s2 steps are exact (linear sketch), its error arises at decode (a
  // lossy s2 AllReduce has error feedback of its own kind: s2_repair.h).
  return c != CodecId::kNone && c != CodecId::kSparse && c != CodecId::kS2;
}

bool ranges_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

// The kernels' codec over this rank's buffers, one slice at a time; with error feedback it
// compresses x + residual and keeps what the compression lost in the residual.
class CodecSliceOps : public SliceOps {
 public:
  CodecSliceOps(backend::Backend& be, const CodecParams& base, const AllReduceArgs& args,
                float scale, std::function<uint32_t(size_t)> counters, float* residual,
                CodecStats* cs, size_t recv_first = 0)
      : be_(be),
        base_(base),
        send_(static_cast<const uint8_t*>(args.send)),
        recv_(static_cast<uint8_t*>(args.recv)),
        type_(args.type),
        esz_(kernels::elem_size(args.type)),
        scale_(scale),
        counters_(std::move(counters)),
        residual_(residual),
        cs_(cs),
        recv_first_(recv_first) {}

  size_t packet_bytes(size_t offset, size_t n) const override {
    return be_.packet_bytes(params(offset, n, 0), n);
  }

  // s2: each slice's counters from (offset, n), and the decodes' reports into `log` (with the
  // unresolved positions when it wants them). `feedback`: lossy s2 with error feedback, whose
  // residual is kept after the ring (s2_lossy_feedback), not per step.
  void set_s2(S2DecodeLog* log, std::function<uint32_t(size_t, size_t)> counters, bool feedback) {
    s2_log_ = log;
    s2_counters_ = std::move(counters);
    s2_feedback_ = feedback;
  }

  Status encode(size_t offset, size_t n, int ring_step, void* pkt, size_t cap) override {
    CodecParams p = params(offset, n, static_cast<uint32_t>(ring_step));
    if (residual_ == nullptr) return be_.encode(p, src(offset), type_, n, pkt, cap);
    float* x = nullptr;
    SCCL_RETURN_IF_ERROR(compensated(offset, n, &x));
    SCCL_RETURN_IF_ERROR(be_.encode(p, x, ElemType::kF32, n, pkt, cap));
    if (s2_feedback_) return keep_s2_input(offset, n, x);
    // residual = (x + r) - decode(encode(x + r))
    SCCL_RETURN_IF_ERROR(scratch(&tmp_, n));
    SCCL_RETURN_IF_ERROR(be_.decode(p, pkt, cap, tmp_->data(), ElemType::kF32, n, 1.0f, nullptr));
    return keep_residual(offset, n, x, tmp_->data(), nullptr);
  }

  Status reduce(size_t offset, size_t n, int ring_step, const void* in, size_t in_bytes, void* out,
                size_t cap) override {
    CodecParams p = params(offset, n, static_cast<uint32_t>(ring_step));
    if (residual_ == nullptr) {
      return be_.step(p, in, in_bytes, src(offset), type_, n, out, cap);
    }
    float* x = nullptr;
    SCCL_RETURN_IF_ERROR(compensated(offset, n, &x));
    SCCL_RETURN_IF_ERROR(be_.step(p, in, in_bytes, x, ElemType::kF32, n, out, cap));
    if (s2_feedback_) return keep_s2_input(offset, n, x);
    // residual = (decode(in) + x + r) - decode(out): the error this step added.
    CodecParams pin = params(offset, n, static_cast<uint32_t>(ring_step - 1));
    SCCL_RETURN_IF_ERROR(scratch(&tmp_, n));
    SCCL_RETURN_IF_ERROR(scratch(&tmp_in_, n));
    SCCL_RETURN_IF_ERROR(
        be_.decode(pin, in, in_bytes, tmp_in_->data(), ElemType::kF32, n, 1.0f, nullptr));
    SCCL_RETURN_IF_ERROR(be_.decode(p, out, cap, tmp_->data(), ElemType::kF32, n, 1.0f, nullptr));
    return keep_residual(offset, n, x, tmp_->data(), tmp_in_->data());
  }

  // Asynchronous on backends that support it; error feedback needs each result at once.
  Status encode_start(size_t offset, size_t n, int ring_step, void* pkt, size_t cap,
                      uint64_t* ticket) override {
    if (residual_ != nullptr) {
      *ticket = 0;
      return encode(offset, n, ring_step, pkt, cap);
    }
    return be_.encode_start(params(offset, n, static_cast<uint32_t>(ring_step)), src(offset), type_,
                            n, pkt, cap, ticket);
  }
  Status reduce_start(size_t offset, size_t n, int ring_step, const void* in, size_t in_bytes,
                      void* out, size_t cap, uint64_t* ticket) override {
    if (residual_ != nullptr) {
      *ticket = 0;
      return reduce(offset, n, ring_step, in, in_bytes, out, cap);
    }
    return be_.step_start(params(offset, n, static_cast<uint32_t>(ring_step)), in, in_bytes,
                          src(offset), type_, n, out, cap, ticket);
  }
  Status test(uint64_t ticket, bool* done) override { return be_.test(ticket, done); }
  void* alloc_packets(size_t bytes) override { return be_.alloc_packets(bytes); }
  void free_packets(void* p) override { be_.free_packets(p); }

  // Asynchronous where the backend allows: the ring goes on while the device decodes, and
  // flush() collects every result once the ring is done.
  Status decode_start(size_t offset, size_t n, const void* pkt, size_t bytes) override {
    SCCL_RETURN_IF_ERROR(reap());
    decodes_.emplace_back();
    PendingDecode& d = decodes_.back();
    d.offset = offset;
    d.n = n;
    if (s2_log_ != nullptr && s2_log_->wants_unresolved()) {
      d.unresolved.assign((n + 63) / 64, 0);
      d.stats.unresolved = d.unresolved.data();
    }
    Status st =
        be_.decode_start(params(offset, n, 0), pkt, bytes, recv_ + (offset - recv_first_) * esz_,
                         type_, n, scale_, &d.stats, &d.ticket);
    if (!st.ok() || d.ticket == 0) {
      if (st.ok()) add_stats(d);
      decodes_.pop_back();
    }
    return st;
  }
  Status flush(bool* done) override {
    Status st = reap();
    *done = decodes_.empty();
    return st;
  }

  const DecodeStats& decode_stats() const { return stats_; }

 private:
  struct PendingDecode {
    uint64_t ticket = 0;
    size_t offset = 0, n = 0;
    DecodeStats stats;
    std::vector<uint64_t> unresolved;  // s2 with a log that wants them: the slice's bitmap
  };
  // Takes the results of the decodes that have finished, oldest first (they finish in order),
  // without waiting; returns the first error, naming the decode's elements.
  Status reap() {
    Status first;
    while (!decodes_.empty()) {
      PendingDecode& d = decodes_.front();
      bool done = false;
      Status st = be_.test(d.ticket, &done);
      if (st.ok() && !done) break;
      if (st.ok()) add_stats(d);
      if (!st.ok() && first.ok()) {
        first = errorf(st.code(), "%s (decode of elements [%zu, %zu))", st.message().c_str(),
                       d.offset, d.offset + d.n);
      }
      decodes_.pop_front();
    }
    return first;
  }
  void add_stats(const PendingDecode& d) {
    const DecodeStats& ds = d.stats;
    stats_.nonzeros += ds.nonzeros;
    stats_.peeled += ds.peeled;
    stats_.estimated += ds.estimated;
    if (s2_log_ != nullptr) {
      s2_log_->record(d.offset, d.n, ds, d.unresolved.empty() ? nullptr : d.unresolved.data());
    }
  }

 private:
  CodecParams params(size_t offset, size_t n, uint32_t ring_step) const {
    CodecParams p = base_;
    p.offset_key = static_cast<uint32_t>(offset ^ (offset >> 32));
    p.step = ring_step;
    if (p.codec == CodecId::kS2)
      p.s2_counters = s2_counters_ ? s2_counters_(offset, n) : counters_(n);
    return p;
  }
  const void* src(size_t offset) const { return send_ + offset * esz_; }

  // Error feedback's arrays are the backend's memory (device memory for the CUDA backend): the
  // slices, residuals and decoded values never leave it.
  Status scratch(std::unique_ptr<backend::F32Array>* a, size_t n) {
    if (*a && (*a)->size() >= n) return Status::Ok();
    a->reset();
    return be_.alloc_f32(n, a);
  }
  // x + residual for this slice, in fp32.
  Status compensated(size_t offset, size_t n, float** x) {
    SCCL_RETURN_IF_ERROR(scratch(&comp_, n));
    SCCL_RETURN_IF_ERROR(
        be_.ef_compensate(src(offset), type_, n, residual_ + offset, comp_->data()));
    *x = comp_->data();
    return Status::Ok();
  }
  // Lossy s2: residual = the compensated input x (NaN/Inf dropped) until the ring's end, when
  // s2_lossy_feedback keeps it where the output lost it only.
  Status keep_s2_input(size_t offset, size_t n, const float* x) {
    SCCL_RETURN_IF_ERROR(scratch(&zeros_, n));  // zeroed when made, never written
    kernels::EfSums sums;
    SCCL_RETURN_IF_ERROR(be_.ef_update(x, nullptr, zeros_->data(), n, residual_ + offset, &sums));
    cs_->ef_input_sq += sums.input_sq;
    return Status::Ok();
  }
  // residual = (in + x) - out, NaN/Inf dropped (kernels/error_feedback.h).
  Status keep_residual(size_t offset, size_t n, const float* x, const float* out, const float* in) {
    kernels::EfSums sums;
    SCCL_RETURN_IF_ERROR(be_.ef_update(x, in, out, n, residual_ + offset, &sums));
    cs_->ef_input_sq += sums.input_sq;
    cs_->ef_residual_sq += sums.residual_sq;
    return Status::Ok();
  }

  backend::Backend& be_;
  CodecParams base_;
  const uint8_t* send_;
  uint8_t* recv_;
  ElemType type_;
  size_t esz_;
  float scale_;
  std::function<uint32_t(size_t)> counters_;
  float* residual_;
  CodecStats* cs_;
  size_t recv_first_;  // the element of the input that recv_ holds first (a ReduceScatter's chunk)
  DecodeStats stats_;
  std::deque<PendingDecode> decodes_;  // stable addresses: the backend writes their stats
  std::unique_ptr<backend::F32Array> comp_, tmp_, tmp_in_, zeros_;
  S2DecodeLog* s2_log_ = nullptr;
  std::function<uint32_t(size_t, size_t)> s2_counters_;
  bool s2_feedback_ = false;
};

}  // namespace

CodecId AllReduceEngine::choose_codec(const BufferState& state, size_t count) const {
  if (!settings_.auto_codec) return settings_.codec;
  return choose_auto(cost_model(count), support_history(state)).codec;
}

CostModelParams AllReduceEngine::cost_model(size_t count) const {
  CostModelParams p;
  p.count = count;
  p.nranks = nranks_;
  p.slice_elems = settings_.slice_elems;
  p.dense_codec = settings_.dense_codec;
  p.s2_rows = settings_.s2_rows;
  p.s2_counters_per_nz = settings_.s2_counters_per_nz;
  p.sparse_density = settings_.sparse_density;
  p.support = settings_.sparse_support;
  return p;
}

uint32_t AllReduceEngine::s2_counters_per_row(const BufferState& state, size_t count, size_t offset,
                                              size_t n) const {
  if (!state.have_history || count == 0) {
    return kernels::s2_counters_for_budget(n, settings_.s2_rows, settings_.s2_budget);
  }
  // This slice's support in the previous call (clustered supports vary between slices, and a
  // share of the total would leave some below the peeling threshold).
  return s2_slice_counters(state.s2_slices, state.nonzeros, count, offset, n, settings_.s2_rows,
                           settings_.s2_counters_per_nz);
}

AllReduceEngine::AllReduceEngine(const Settings& settings, int nranks, int cuda_device)
    : settings_(settings),
      nranks_(nranks),
      cuda_device_(cuda_device),
      host_(backend::make_host_backend()) {}

AllReduceEngine::~AllReduceEngine() = default;

void AllReduceEngine::set_topology(const Topology& topo) {
  topology_ = topo;
  stats_.nodes = topo.nodes;
  stats_.ranks_per_node = topo.uniform ? topo.local_ranks : 0;
  stats_.hierarchical = settings_.hierarchy && topo.hierarchical();
  hier_.reset();
  if (stats_.hierarchical) {
    hier_ = std::make_unique<HierarchicalAllReduce>(settings_, topo, cuda_device_);
  }
}

// Every input of the call's protocol that comes from the buffer's history (the codec `auto` and
// the guard chose, s2's budget, whether a residual is applied), the same on every rank when the
// ranks agree on which buffer this is.
Status AllReduceEngine::agree_on_decision(const RingLink& link, const BufferState& state,
                                          CodecId codec, bool* agreed) {
  struct Decision {
    uint64_t nonzeros;
    uint64_t s2_slices;     // hash of s2's per-slice supports (its budget)
    uint64_t support_rows;  // the support encoding's input
    uint32_t codec;
    uint32_t guard_steps;
    uint32_t have_history;
    uint32_t has_residual;
  };
  const Decision mine{state.nonzeros,
                      s2_slice_support_hash(state.s2_slices),
                      state.support_rows,
                      static_cast<uint32_t>(codec),
                      static_cast<uint32_t>(state.guard.steps),
                      state.have_history ? 1u : 0u,
                      state.residual != nullptr ? 1u : 0u};
  std::vector<Decision> all(static_cast<size_t>(link.nranks));
  RingLink l = link;
  l.phase = kPhaseDecision;
  SCCL_RETURN_IF_ERROR(ring_allgather_small(l, &mine, sizeof mine, all.data()));
  *agreed = true;
  for (const Decision& d : all) {
    if (std::memcmp(&d, &all.front(), sizeof d) != 0) *agreed = false;
  }
  return Status::Ok();
}

Status AllReduceEngine::run(const RingLink& link, const AllReduceArgs& args) {
  if (args.rail) {
    if (!hier_) return Status(Code::kInternalError, "a rail phase on a flat communicator");
    return run_caught("a hierarchical AllReduce's rail phase",
                      [&] { return hier_->run_rail(link, args, &stats_); });
  }
  if (hier_ && HierarchicalAllReduce::takes(args)) {
    return run_caught("a hierarchical AllReduce", [&] { return hier_->run(link, args, &stats_); });
  }
  const auto t0 = std::chrono::steady_clock::now();
  BufferKey key{reinterpret_cast<uintptr_t>(args.send), args.count, args.type, args.scatter};
  BufferState* state_ptr = &buffers_.get(key);
  CodecId codec = args.exact ? CodecId::kNone : choose_codec(*state_ptr, args.count);
  if (!args.exact && settings_.max_nmse > 0) codec = guarded_codec(codec, state_ptr->guard.steps);
  // Only where the history shapes the protocol or the values: `auto`, the guard, s2's budget,
  // `sparse`'s support encoding (unless fixed to the element bitmap), error feedback. A fixed
  // codec's call does not depend on it and costs no exchange.
  const bool sparse_history =
      codec == CodecId::kSparse && settings_.sparse_support != SupportSetting::kElementBitmap;
  const bool history_matters = settings_.auto_codec || settings_.max_nmse > 0 ||
                               settings_.error_feedback || codec == CodecId::kS2 || sparse_history;
  if (!args.exact && link.nranks > 1 && history_matters) {
    bool agreed = true;
    Status ast = agree_on_decision(link, *state_ptr, codec, &agreed);
    if (!ast.ok()) return ast;
    if (!agreed) {
      // A buffer is known by its address: a rank that reused an address for another tensor holds
      // a different history, and the ranks would run different protocols. This call runs exact;
      // every rank starts the buffer afresh, so they agree again from the next call on.
      static std::atomic<bool> said{false};
      if (!said.exchange(true)) {
        SCCL_WARN(kLogColl,
                  "%s #%u of %zu elements: the ranks hold different histories for this buffer "
                  "(an address reused by another tensor on some rank); this call runs exact and "
                  "the buffer starts afresh on every rank (said once)",
                  args.scatter ? "ReduceScatter" : "AllReduce", link.op_seq, args.count);
      }
      state_ptr = &buffers_.renew(key);
      codec = CodecId::kNone;
      stats_.decisions_disagreed++;
    }
  }
  BufferState& state = *state_ptr;
  CodecStats& cs = stats_.by_codec[kernels::codec_name(codec)];
  backend::Backend* be = nullptr;
  Status st = backend_for(args.mem, &be);
  const uint64_t sent_before = cs.bytes_sent;
  if (st.ok()) {
    // The operation boundary: whatever it throws (std::bad_alloc) fails this call, not the process.
    char what[96];
    std::snprintf(what, sizeof what, "the %s %s of %zu bytes", kernels::codec_name(codec),
                  args.scatter ? "ReduceScatter" : "AllReduce",
                  args.count * kernels::elem_size(args.type));
    st = run_caught(what, [&] { return run_on(link, args, codec, state, cs, *be); });
  }
  // A codec ring's result measures no rows (an AllReduce's; a ReduceScatter keeps its history).
  if (st.ok() && codec != CodecId::kSparse && !args.scatter) state.support_rows = 0;
  // The flat ring sends to its right neighbour only: on this node or on another.
  const size_t right = static_cast<size_t>((link.rank + 1) % link.nranks);
  const bool right_here =
      right >= topology_.node_of.size() || topology_.node_of[right] == topology_.node;
  (right_here ? cs.intra_node_bytes_sent : cs.inter_node_bytes_sent) += cs.bytes_sent - sent_before;
  cs.calls++;
  cs.bytes_in += args.count * kernels::elem_size(args.type);
  cs.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (st.ok()) {
    stats_.calls_taken++;
  } else {
    stats_.calls_failed++;
  }
  return st;
}

Status AllReduceEngine::backend_for(backend::MemoryType mem, backend::Backend** out) {
  std::unique_ptr<backend::Backend>& be = mem == backend::MemoryType::kHost ? host_ : device_;
  if (!be) SCCL_RETURN_IF_ERROR(backend::make_backend(mem, cuda_device_, &be));
  *out = be.get();
  return Status::Ok();
}

Status AllReduceEngine::prepare_backend(backend::MemoryType mem) {
  if (hier_) SCCL_RETURN_IF_ERROR(hier_->rail().prepare_backend(mem));
  backend::Backend* be = nullptr;
  return backend_for(mem, &be);
}

Status AllReduceEngine::reserve_packets(backend::MemoryType mem, size_t count) {
  if (hier_) SCCL_RETURN_IF_ERROR(hier_->rail().reserve_packets(mem, count));
  std::unique_ptr<backend::Backend>& be = mem == backend::MemoryType::kHost ? host_ : device_;
  if (!be || nranks_ == 1) return Status::Ok();
  // Every chunk's reduced packets (at most the fp32 bytes, plus headers and the ring's 64 KiB
  // rounding, for every codec but a dense s2, whose excess goes to plain memory) plus a send and
  // a receive packet per slice lane.
  const size_t slice = settings_.slice_elems * sizeof(float) + (size_t(64) << 10);
  const size_t lanes = 2 * static_cast<size_t>(settings_.depth < 1 ? 1 : settings_.depth) * slice;
  const size_t final_packets = count * sizeof(float) + count / 8 + (size_t(1) << 20);
  return be->reserve_packet_memory(final_packets + lanes);
}

// On the backend of the buffers' memory type, made current on this (the proxy) thread. Every
// backend call returns with its results in place, so when this returns the output is written
// (for device buffers: the stream gate may be released, docs/cuda.md).
Status AllReduceEngine::run_on(const RingLink& link, const AllReduceArgs& args, CodecId codec,
                               BufferState& state, CodecStats& cs, backend::Backend& be) {
  SCCL_RETURN_IF_ERROR(be.activate());
  be.bound_waits(link.abort, link.timeout_s);
  Status st;
  if (nranks_ == 1) {
    // Nothing to reduce and nothing to compress: NCCL copies, and so do we.
    st = be.copy(args.recv, args.send, args.count * kernels::elem_size(args.type));
  } else if (codec == CodecId::kSparse) {
    st = run_sparse(link, args, state, cs, be);
  } else {
    st = run_codec(link, args, codec, state, cs, be);
  }
  // A failure releases the caller's stream: first no device work may still write its buffers.
  if (!st.ok()) {
    const Status q = be.quiesce();
    if (!q.ok()) return Status(st.code(), st.message() + "; " + q.message());
  }
  return st;
}

Status AllReduceEngine::run_codec(const RingLink& link, const AllReduceArgs& args, CodecId codec,
                                  BufferState& state, CodecStats& cs, backend::Backend& be) {
  CodecParams base;
  base.codec = codec;
  base.seed = settings_.seed;
  base.call = link.op_seq;
  base.s2_rows = settings_.s2_rows;
  float* residual = nullptr;
  const bool s2 = codec == CodecId::kS2;
  // s2 is exact unless SKETCHCCL_S2_REPAIR=0; lossy s2 has error feedback in an AllReduce only
  // (a ReduceScatter's other ranks never learn where a chunk lost values).
  const bool s2_exact = s2 && settings_.s2_repair;
  const bool s2_feedback = s2 && !settings_.s2_repair && settings_.error_feedback && !args.scatter;
  // In the backend's memory: on the device for device buffers (docs/cuda.md).
  if (settings_.error_feedback && (is_lossy_and_nonlinear(codec) || s2_feedback)) {
    // Never another generation's residual (a buffer dropped and seen again starts from zero).
    if (!state.residual || state.residual->size() != args.count ||
        state.residual_mem != be.memory_type() || state.residual_generation != state.generation) {
      std::unique_ptr<backend::F32Array> r;
      SCCL_RETURN_IF_ERROR(be.alloc_f32(args.count, &r));
      state.residual = std::move(r);
      state.residual_mem = be.memory_type();
      state.residual_generation = state.generation;
    }
    residual = state.residual->data();
  }
  // With error feedback the residual carries CASQ's rounding bias to the next call: round to the
  // nearest level (less error per step); without, stochastic rounding keeps it unbiased.
  base.casq_nearest = residual != nullptr;
  const BufferState history = state;  // the decision uses the previous call only
  auto counters = [this, &history, &args](size_t n) {
    return s2_counters_per_row(history, args.count, 0, n);
  };
  S2DecodeLog s2_log;
  S2SavedInput s2_saved;
  bool s2_saved_input = false;
  if (s2) {
    SCCL_RETURN_IF_ERROR(s2_log.reset(args.count, s2_exact || s2_feedback));
    // The repair reads this rank's input after the ring: an in-place call keeps its non-zeros.
    const size_t esz = kernels::elem_size(args.type);
    const size_t recv_elems = args.scatter ? args.count / static_cast<size_t>(nranks_) : args.count;
    if (s2_exact && ranges_overlap(args.send, args.count * esz, args.recv, recv_elems * esz)) {
      SCCL_RETURN_IF_ERROR(s2_save_input(be, args.send, args.type, args.count, &s2_saved));
      s2_saved_input = true;
    }
  }
  // The accuracy estimate's sample of this rank's input, read before an in-place call
  // overwrites it. (s2 with its repair is exact: nothing to estimate.)
  const bool estimate = is_lossy(codec) && !s2_exact;
  std::vector<uint64_t> sample_bits;
  std::vector<float> own;
  if (estimate) {
    const size_t stride = args.scatter ? kScatterSampleStride : kSampleStride;
    SCCL_RETURN_IF_ERROR(run_caught("the accuracy sample's bitmap", [&] {
      sample_bitmap(settings_.seed, link.op_seq, args.count, &sample_bits, stride);
      return Status::Ok();
    }));
    SCCL_RETURN_IF_ERROR(
        alloc_vector(&own, sample_count(args.count, stride), "accuracy sample's values"));
    SCCL_RETURN_IF_ERROR(be.sparse_compact(sample_bits.data(), args.count, args.send, args.type,
                                           own.data(), nullptr));
  }
  const float scale = args.avg ? 1.0f / static_cast<float>(nranks_) : 1.0f;
  const size_t recv_first = args.scatter ? scatter_chunk_first(args.count, link) : 0;
  CodecSliceOps ops(be, base, args, scale, counters, residual, &cs, recv_first);
  if (s2) {
    ops.set_s2(
        &s2_log,
        [this, &history, &args](size_t offset, size_t n) {
          return s2_counters_per_row(history, args.count, offset, n);
        },
        s2_feedback);
  }
  RingStats rs;
  Status st = args.scatter ? ring_reduce_scatter(scatter_link(link, kPhaseScatterCodec), args.count,
                                                 settings_.slice_elems, settings_.depth, ops, &rs)
                           : ring_allreduce(link, args.count, settings_.slice_elems,
                                            settings_.depth, ops, &rs);
  cs.bytes_sent += rs.bytes_sent;
  cs.bytes_received += rs.bytes_received;
  if (!st.ok()) return st;
  if (s2_exact) {
    S2RepairCall call;
    call.be = &be;
    call.send = args.send;
    call.recv = args.recv;
    call.count = args.count;
    call.recv_first = recv_first;
    call.recv_count = args.scatter ? args.count / static_cast<size_t>(nranks_) : args.count;
    call.type = args.type;
    call.scale = scale;
    call.saved = s2_saved_input ? &s2_saved : nullptr;
    call.scatter = args.scatter;
    S2RepairResult rep;
    SCCL_RETURN_IF_ERROR(s2_repair(
        link, call, s2_log,
        [&](uint8_t phase, const float* vals, float* sums, size_t m, uint64_t* bytes) {
          return exact_side_ring(link, phase, vals, sums, m, bytes);
        },
        &rep));
    cs.s2_repaired += rep.repaired;
    cs.s2_repair_bytes_sent += rep.bytes_sent;
    cs.bytes_sent += rep.bytes_sent;
  } else if (s2_feedback && residual != nullptr) {
    double kept_sq = 0;
    SCCL_RETURN_IF_ERROR(
        s2_lossy_feedback(be, s2_log, args.recv, args.type, args.count, residual, &kept_sq));
    cs.ef_residual_sq += kept_sq;
  }
  if (estimate) {
    SCCL_RETURN_IF_ERROR(estimate_call(link, args, codec, sample_bits, own, state, cs, be));
  }
  const DecodeStats& ds = ops.decode_stats();
  if (s2) {
    cs.s2_nonzeros += ds.nonzeros;
    cs.s2_peeled += ds.peeled;
    cs.s2_estimated += ds.estimated;
  }
  // A ReduceScatter decodes one chunk, whose count differs between ranks: its history stays the
  // last agreed one (its sparse runs').
  if (args.scatter) return Status::Ok();
  state.have_history = true;
  state.nonzeros = ds.nonzeros;
  state.s2_slices = s2 ? s2_log.supports() : S2SliceSupport{};
  return Status::Ok();
}

// An exact fp32 AllReduce of m host values on its own ring phase (s2's repair).
Status AllReduceEngine::exact_side_ring(const RingLink& link, uint8_t phase, const float* vals,
                                        float* sums, size_t m, uint64_t* bytes_sent) {
  CodecParams base;
  base.codec = CodecId::kNone;
  base.seed = settings_.seed;
  base.call = link.op_seq;
  AllReduceArgs dense{vals, sums, m, ElemType::kF32, false};
  CodecStats side;
  CodecSliceOps ops(
      *host_, base, dense, 1.0f, [](size_t) { return 0u; }, nullptr, &side);
  RingLink l = link;
  l.phase = phase;
  RingStats rs;
  Status st = ring_allreduce(l, m, settings_.slice_elems, settings_.depth, ops, &rs);
  *bytes_sent += rs.bytes_sent;
  return st;
}

// A ReduceScatter's decoded values at the samples that fall in this rank's chunk, in sample order,
// into out[0, m) (zero elsewhere): the decoded chunk is recvbuff, elements [first, first + rc).
Status AllReduceEngine::scatter_chunk_samples(const RingLink& link, const AllReduceArgs& args,
                                              const std::vector<uint64_t>& sample_bits,
                                              backend::Backend& be, float* out) {
  const size_t rc = args.count / static_cast<size_t>(nranks_);
  const size_t first = scatter_chunk_first(args.count, link);
  auto sampled = [&sample_bits](size_t i) { return (sample_bits[i / 64] >> (i % 64)) & 1u; };
  size_t before = 0;  // samples ahead of the chunk: its first sample's index
  for (size_t i = 0; i < first; ++i)
    before += sampled(i);
  std::vector<uint64_t> chunk_bits((rc + 63) / 64, 0);
  for (size_t i = 0; i < rc; ++i) {
    if (sampled(first + i)) chunk_bits[i / 64] |= uint64_t(1) << (i % 64);
  }
  return be.sparse_compact(chunk_bits.data(), rc, args.recv, args.type, out + before, nullptr);
}

Status AllReduceEngine::estimate_call(const RingLink& link, const AllReduceArgs& args,
                                      CodecId codec, const std::vector<uint64_t>& sample_bits,
                                      const std::vector<float>& own, BufferState& state,
                                      CodecStats& cs, backend::Backend& be) {
  const size_t m = own.size();
  // The side ring's input: this rank's values at the sample, then (ReduceScatter) its decoded
  // values at the samples of its own chunk, zero elsewhere. Its fp32 sums, the same bits on every
  // rank (a `none` ring), are the exact values and, since one rank alone holds each decoded
  // value, every decoded value at the sample.
  std::vector<float> side_in(own), sums(args.scatter ? 2 * m : m), decoded(m);
  if (args.scatter) {
    side_in.resize(2 * m, 0.0f);
    SCCL_RETURN_IF_ERROR(scatter_chunk_samples(link, args, sample_bits, be, side_in.data() + m));
  } else {
    SCCL_RETURN_IF_ERROR(be.sparse_compact(sample_bits.data(), args.count, args.recv, args.type,
                                           decoded.data(), nullptr));
  }
  CodecParams base;
  base.codec = CodecId::kNone;
  base.seed = settings_.seed;
  base.call = link.op_seq;
  AllReduceArgs dense{side_in.data(), sums.data(), side_in.size(), ElemType::kF32, false};
  CodecStats side;
  CodecSliceOps ops(
      *host_, base, dense, 1.0f, [](size_t) { return 0u; }, nullptr, &side);
  RingLink l3 = link;
  l3.phase = kPhaseAccuracySample;
  RingStats rs;
  Status st = ring_allreduce(l3, side_in.size(), settings_.slice_elems, settings_.depth, ops, &rs);
  cs.sample_bytes_sent += rs.bytes_sent;
  SCCL_RETURN_IF_ERROR(st);
  std::vector<float> exact(sums.begin(), sums.begin() + static_cast<std::ptrdiff_t>(m));
  if (args.scatter) decoded.assign(sums.begin() + static_cast<std::ptrdiff_t>(m), sums.end());
  if (args.avg) {
    const float scale = 1.0f / static_cast<float>(nranks_);
    for (float& v : exact)
      v *= scale;
  }
  const AccuracyEstimate e = estimate_accuracy(decoded.data(), exact.data(), m);
  cs.estimated_calls++;
  cs.estimated_nmse_sum += e.nmse;
  cs.estimated_maxrel_sum += e.maxrel;
  cs.estimated_nmse_worst = std::max(cs.estimated_nmse_worst, e.nmse);
  cs.estimated_maxrel_worst = std::max(cs.estimated_maxrel_worst, e.maxrel);
  SCCL_INFO(kLogColl,
            "%s #%u of %zu elements with %s: estimated NMSE %.3g, max rel %.3g (%zu samples)",
            args.scatter ? "ReduceScatter" : "AllReduce", link.op_seq, args.count,
            kernels::codec_name(codec), e.nmse, e.maxrel, m);
  if (guard_step_up(settings_.max_nmse, codec, e.nmse, &state.guard)) {
    cs.guard_steps++;
    SCCL_WARN(kLogColl,
              "buffer %p of %zu elements: estimated NMSE %.3g above SKETCHCCL_MAX_NMSE=%g, "
              "%s -> %s from the next call",
              args.send, args.count, e.nmse, settings_.max_nmse, kernels::codec_name(codec),
              kernels::codec_name(safer_codec(codec)));
  }
  return Status::Ok();
}

// Phase 1 and the compaction/scatter touch the user's buffers (backend `be`); the union bitmap
// and the phase-2 values are host memory, so phase 2 always runs on the host backend (host_).
Status AllReduceEngine::run_sparse(const RingLink& link, const AllReduceArgs& args,
                                   BufferState& state, CodecStats& cs, backend::Backend& be) {
  // Phase 1: the union support, identical on every rank (coll/support_encoding.h).
  const size_t words = kernels::bitmap_bytes(args.count) / sizeof(uint64_t);
  std::vector<uint64_t> union_bits;
  SCCL_RETURN_IF_ERROR(alloc_vector<uint64_t>(&union_bits, words, "sparse union bitmap", 0));
  SupportArgs sa;
  sa.x = args.send;
  sa.type = args.type;
  sa.count = args.count;
  sa.encoding = choose_support(cost_model(args.count), support_history(state));
  sa.prev_nonzeros = state.nonzeros;
  sa.slice_elems = settings_.slice_elems;
  sa.depth = settings_.depth;
  RingLink l1 = link;
  l1.phase = args.scatter ? kPhaseScatterBitmap : kPhaseSparseBitmap;
  SupportOutcome so;
  Status st = agree_union_support(l1, be, sa, union_bits.data(), &so);
  cs.bytes_sent += so.bytes_sent;
  cs.bytes_received += so.bytes_received;
  cs.support_bytes_sent += so.bytes_sent;
  cs.support_calls[static_cast<size_t>(so.used)]++;
  cs.support_index_overflows += so.index_overflow ? 1 : 0;
  RingStats rs;
  size_t support = 0;
  if (st.ok()) st = host_->bitmap_popcount(union_bits.data(), args.count, &support);
  std::vector<float> values, sums;
  if (st.ok()) st = alloc_vector(&values, support, "sparse index list's values");
  if (st.ok()) st = alloc_vector(&sums, support, "sparse index list's sums");
  if (st.ok()) {
    st = be.sparse_compact(union_bits.data(), args.count, args.send, args.type, values.data(),
                           nullptr);
  }
  if (st.ok()) {
    // Phase 2: an exact fp32 ring over this rank's values on the union support.
    CodecParams base;
    base.codec = CodecId::kNone;
    base.seed = settings_.seed;
    base.call = link.op_seq;
    AllReduceArgs dense{values.data(), sums.data(), support, ElemType::kF32, false};
    CodecSliceOps ops(
        *host_, base, dense, 1.0f, [](size_t) { return 0u; }, nullptr, &cs);
    const float scale = args.avg ? 1.0f / static_cast<float>(nranks_) : 1.0f;
    if (args.scatter) {
      // Each rank's chunk of the input holds its run of the union values: a reduce-scatter of
      // those runs, then this rank's chunk of the output from its run.
      SparseScatterPlan plan;
      st = run_caught("the sparse ReduceScatter's plan", [&] {
        plan = sparse_scatter_plan(union_bits.data(), args.count, link);
        return Status::Ok();
      });
      if (st.ok()) {
        st = ring_reduce_scatter(scatter_link(link, kPhaseScatterValues), support,
                                 settings_.slice_elems, settings_.depth, ops, &rs, &plan.bounds);
      }
      if (st.ok()) {
        st = be.sparse_scatter(plan.chunk_bits.data(), plan.chunk_count,
                               sums.data() + plan.bounds[static_cast<size_t>(link.rank)], scale,
                               args.recv, args.type, nullptr);
      }
    } else {
      RingLink l2 = link;
      l2.phase = kPhaseSparseValues;
      st = ring_allreduce(l2, support, settings_.slice_elems, settings_.depth, ops, &rs);
      if (st.ok()) {
        st = be.sparse_scatter(union_bits.data(), args.count, sums.data(), scale, args.recv,
                               args.type, nullptr);
      }
    }
    if (st.ok()) {
      state.have_history = true;
      // A row bitmap's support holds the zeros of its rows: an AllReduce's result's non-zeros
      // are the support the next call sizes itself by (every rank holds the same sums; a
      // ReduceScatter's ranks hold different chunks, so it keeps the rows' support).
      state.nonzeros = so.used == SupportEncoding::kRowBitmap && !args.scatter
                           ? static_cast<uint64_t>(std::count_if(sums.begin(), sums.end(),
                                                                 [](float v) { return v != 0.0f; }))
                           : support;
      state.support_rows = so.rows;
    }
  }
  cs.bytes_sent += rs.bytes_sent;
  cs.bytes_received += rs.bytes_received;
  return st;
}

}  // namespace sketchccl::coll
