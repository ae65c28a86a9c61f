#include "src/coll/codec_slice_ops.h"

#include <utility>

namespace sketchccl::coll {

using kernels::CodecParams;
using kernels::DecodeStats;

CodecSliceOps::CodecSliceOps(backend::Backend& be, const CodecParams& base, const SliceBuffers& buf,
                             float scale)
    : be_(be),
      base_(base),
      send_(static_cast<const uint8_t*>(buf.send)),
      recv_(static_cast<uint8_t*>(buf.recv)),
      recv_first_(buf.recv_first),
      type_(buf.type),
      esz_(kernels::elem_size(buf.type)),
      scale_(scale) {}

void CodecSliceOps::set_s2(S2DecodeLog* log,
                           std::function<uint32_t(size_t offset, size_t n)> counters) {
  s2_log_ = log;
  s2_counters_ = std::move(counters);
}

CodecParams CodecSliceOps::params(size_t offset, size_t n, uint32_t ring_step) const {
  CodecParams p = base_;
  p.offset_key = static_cast<uint32_t>(offset ^ (offset >> 32));
  p.step = ring_step;
  if (s2_counters_) p.s2_counters = s2_counters_(offset, n);
  return p;
}

size_t CodecSliceOps::packet_bytes(size_t offset, size_t n) const {
  return be_.packet_bytes(params(offset, n, 0), n);
}

Status CodecSliceOps::encode(size_t offset, size_t n, int ring_step, void* pkt, size_t cap) {
  return be_.encode(params(offset, n, static_cast<uint32_t>(ring_step)), input(offset), type_, n,
                    pkt, cap);
}

Status CodecSliceOps::step(size_t offset, size_t n, int ring_step, const void* in, size_t in_bytes,
                           void* out, size_t cap) {
  return be_.step(params(offset, n, static_cast<uint32_t>(ring_step)), in, in_bytes, input(offset),
                  type_, n, out, cap);
}

Status CodecSliceOps::encode_start(size_t offset, size_t n, int ring_step, void* pkt, size_t cap,
                                   uint64_t* ticket) {
  return be_.encode_start(params(offset, n, static_cast<uint32_t>(ring_step)), input(offset), type_,
                          n, pkt, cap, ticket);
}

Status CodecSliceOps::step_start(size_t offset, size_t n, int ring_step, const void* in,
                                 size_t in_bytes, void* out, size_t cap, uint64_t* ticket) {
  return be_.step_start(params(offset, n, static_cast<uint32_t>(ring_step)), in, in_bytes,
                        input(offset), type_, n, out, cap, ticket);
}

Status CodecSliceOps::decode_start(size_t offset, size_t n, const void* pkt, size_t bytes) {
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

Status CodecSliceOps::sum_scratch(size_t n, float** sum) {
  if (!sum_ || sum_->size() < n) {
    sum_.reset();
    SCCL_RETURN_IF_ERROR(be_.alloc_f32(n, &sum_));
  }
  *sum = sum_->data();
  return Status::Ok();
}

Status CodecSliceOps::load_own(size_t offset, size_t n, float* sum) {
  return be_.load_sum(input(offset), type_, n, sum);
}

Status CodecSliceOps::decode_add(size_t offset, size_t n, int ring_step, const void* pkt,
                                 size_t bytes, float* sum) {
  return be_.decode_add(params(offset, n, static_cast<uint32_t>(ring_step)), pkt, bytes, sum, n);
}

Status CodecSliceOps::encode_sum(size_t offset, size_t n, int ring_step, const float* sum,
                                 void* pkt, size_t cap) {
  return be_.encode(params(offset, n, static_cast<uint32_t>(ring_step)), sum,
                    kernels::ElemType::kF32, n, pkt, cap);
}

Status CodecSliceOps::store_sum(size_t offset, size_t n, const float* sum) {
  return be_.store_sum(sum, n, scale_, recv_ + (offset - recv_first_) * esz_, type_);
}

Status CodecSliceOps::flush(bool* done) {
  Status st = reap();
  *done = decodes_.empty();
  return st;
}

Status CodecSliceOps::reap() {
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

void CodecSliceOps::add_stats(const PendingDecode& d) {
  const DecodeStats& ds = d.stats;
  stats_.nonzeros += ds.nonzeros;
  stats_.peeled += ds.peeled;
  stats_.estimated += ds.estimated;
  if (s2_log_ != nullptr) {
    s2_log_->record(d.offset, d.n, ds, d.unresolved.empty() ? nullptr : d.unresolved.data());
  }
}

Status exact_sum_ring(const CommLink& link, uint8_t phase, backend::Backend& host,
                      const Settings& settings, const float* vals, float* sums, size_t m,
                      RingStats* stats) {
  CodecParams base;
  base.codec = kernels::CodecId::kNone;
  base.seed = settings.seed;
  base.call = link.op_seq;
  SliceBuffers buf;
  buf.send = vals;
  buf.recv = sums;
  CodecSliceOps ops(host, base, buf, 1.0f);
  CommLink l = link;
  l.phase = phase;
  return ring_allreduce(l, m, settings.slice_elems, settings.depth, ops, stats);
}

}  // namespace sketchccl::coll
