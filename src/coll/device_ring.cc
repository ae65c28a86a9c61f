// The device path's ring program (device_ring.h): the block's layout, the stream's operations per
// ring step, and the proxy's transfers between the flags.
#include "src/coll/device_ring.h"

#include <algorithm>
#include <utility>

#include "src/backend/device_runtime.h"
#include "src/coll/ring_phase.h"

namespace sketchccl::coll {
namespace {

constexpr size_t kLine = 64;          // one flag per line: the device writes them, the host polls
constexpr size_t kStartAt = 0;        // the proxy's start flag, then at 8 the call number
constexpr size_t kCallAt = 8;         //
constexpr size_t kDecodedAt = kLine;  // the stream's: its last decode is done

size_t round_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

uint32_t load(const uint32_t* w) {
  return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}
void store(uint32_t* w, uint32_t v) {
  __atomic_store_n(w, v, __ATOMIC_RELEASE);
}

int mod(int a, int p) {
  return ((a % p) + p) % p;
}

}  // namespace

Status DeviceRingProgram::make(const DeviceRingCall& call,
                               std::unique_ptr<DeviceRingProgram>* out) {
  if (call.nranks < 2 || call.nranks > kRingMaxRanks) {
    return errorf(Code::kInvalidUsage, "the device ring: %d ranks (2 to %d)", call.nranks,
                  kRingMaxRanks);
  }
  std::unique_ptr<DeviceRingProgram> p(new DeviceRingProgram(call));
  if (p->slices_ > kRingMaxSlices) {
    return errorf(Code::kInvalidUsage,
                  "the device ring: %d slices per chunk exceed 2^19; raise SKETCHCCL_SLICE_BYTES",
                  p->slices_);
  }
  *out = std::move(p);
  return Status::Ok();
}

DeviceRingProgram::DeviceRingProgram(const DeviceRingCall& call)
    : call_(call),
      // The engine's cuts (ring_allreduce, ring_reduce_scatter): every rank agrees on them.
      plan_(call.scatter ? RingPlan(call.count, call.nranks, call.slice_elems)
                         : RingPlan(call.count, call.nranks, call.slice_elems, kRingChunkAlign)),
      slices_(plan_.max_slices()),
      esz_(kernels::elem_size(call.type)) {
  const int p = call_.nranks;
  const auto s = static_cast<size_t>(slices_);
  const auto steps = static_cast<size_t>(last_step() + 1);
  size_t largest = 0;
  for (int c = 0; c < p; ++c) {
    size_t off = 0, n = 0;
    plan_.slice(c, 0, &off, &n);
    largest = std::max(largest, n);
  }
  ws_at_ = kAlign;
  ws_bytes_ = round_up(
      std::max<size_t>(backend::device_runtime().codec_workspace_bytes(call_.base, largest), 1),
      kAlign);
  arrived_at_ = ws_at_ + ws_bytes_;
  written_at_ = arrived_at_ + steps * s * kLine;
  size_t at = written_at_ + steps * s * kLine;
  // Every step's packet has a slot of its own, so the proxy posts every receive at once and
  // nothing is overwritten while the stream or the transport may still read it.
  auto slot = [&](int c, int j) {
    size_t off = 0, n = 0;
    plan_.slice(c, j, &off, &n);
    Slot sl;
    if (n == 0) return sl;
    sl.offset = at;
    sl.bytes = kernels::packet_bytes(params(off, n, 0), n);
    at += round_up(sl.bytes, kLine);
    return sl;
  };
  for (int j = 0; j < slices_; ++j)
    step0_.push_back(slot(ring_step_chunk(0, call_.rank, p, call_.scatter), j));
  for (int i = 1; i <= p - 2; ++i) {
    for (int j = 0; j < slices_; ++j)
      partial_.push_back(slot(ring_step_chunk(i, call_.rank, p, call_.scatter), j));
  }
  for (int c = 0; c < p; ++c) {
    for (int j = 0; j < slices_; ++j)
      final_.push_back(slot(c, j));
  }
  bytes_ = at;
}

int DeviceRingProgram::last_step() const {
  return call_.scatter ? call_.nranks - 1 : 2 * (call_.nranks - 1);
}

const DeviceRingProgram::Slot& DeviceRingProgram::recv_slot(int i, int j) const {
  return send_slot(i, j);  // a received packet is stepped in place and sent on from there
}

const DeviceRingProgram::Slot& DeviceRingProgram::send_slot(int i, int j) const {
  const auto s = static_cast<size_t>(slices_);
  const auto uj = static_cast<size_t>(j);
  if (i == 0) return step0_[uj];
  if (i <= call_.nranks - 2) return partial_[static_cast<size_t>(i - 1) * s + uj];
  const int c = ring_step_chunk(i, call_.rank, call_.nranks, call_.scatter);
  return final_[static_cast<size_t>(c) * s + uj];
}

bool DeviceRingProgram::kernel_sends(int i) const {
  return i <= call_.nranks - 2 || (i == call_.nranks - 1 && !call_.scatter);
}

bool DeviceRingProgram::forwards(int i) const {
  return !call_.scatter && i >= call_.nranks && i <= 2 * call_.nranks - 3;
}

uint32_t* DeviceRingProgram::word(size_t offset) const {
  return reinterpret_cast<uint32_t*>(base_ + offset);
}

uint32_t* DeviceRingProgram::arrived(int i, int j) const {
  return word(arrived_at_ +
              (static_cast<size_t>(i) * static_cast<size_t>(slices_) + static_cast<size_t>(j)) *
                  kLine);
}

uint32_t* DeviceRingProgram::written(int i, int j) const {
  return word(written_at_ +
              (static_cast<size_t>(i) * static_cast<size_t>(slices_) + static_cast<size_t>(j)) *
                  kLine);
}

kernels::CodecParams DeviceRingProgram::params(size_t offset, size_t n, int step) const {
  (void)n;
  // As CodecSliceOps::params: the slice's offset key and the step that makes the packet.
  kernels::CodecParams p = call_.base;
  p.offset_key = static_cast<uint32_t>(offset ^ (offset >> 32));
  p.step = static_cast<uint32_t>(step);
  return p;
}

void DeviceRingProgram::bind(std::shared_ptr<backend::StagedCall> staged) {
  staged_ = std::move(staged);
  const auto raw = reinterpret_cast<uintptr_t>(staged_->in());
  base_ = reinterpret_cast<uint8_t*>(round_up(raw, kAlign));
  gen_ = staged_->generation();
  // The block is free (no stream operation of an earlier use is pending): the host may write it.
  // Flags, call number and the workspace's verdict start from zero.
  std::fill(base_, base_ + written_at_ + (written_at_ - arrived_at_), uint8_t(0));
}

Status DeviceRingProgram::enqueue(void* stream) {
  backend::DeviceRuntime& rt = backend::device_runtime();
  const int dev = call_.device;
  const int p = call_.nranks;
  const auto* callw = reinterpret_cast<const uint64_t*>(base_ + kCallAt);
  void* ws = base_ + ws_at_;
  const auto* x = static_cast<const uint8_t*>(call_.send);
  auto* y = static_cast<uint8_t*>(call_.recv);
  // The proxy numbers the call (the kernels' keys) once it runs it.
  SCCL_RETURN_IF_ERROR(rt.wait_flag(dev, word(kStartAt), gen_, stream));
  // The reduce-scatter: step 0 encodes this rank's chunk, steps 1 .. P-1 add it to the partial
  // sum received; every packet signalled out as soon as it is written. All of it before any
  // decode, so an in-place call's output overwrites no input still to be read.
  for (int i = 0; i <= p - 1; ++i) {
    const int c = ring_step_chunk(i, call_.rank, p, call_.scatter);
    for (int j = 0; j < slices_; ++j) {
      size_t off = 0, n = 0;
      plan_.slice(c, j, &off, &n);
      if (n == 0) continue;
      const Slot& sl = send_slot(i, j);
      if (i == 0) {
        SCCL_RETURN_IF_ERROR(rt.encode_on_stream(dev, params(off, n, 0), callw, x + off * esz_,
                                                 call_.type, n, at(sl), sl.bytes, ws, ws_bytes_,
                                                 stream));
      } else {
        SCCL_RETURN_IF_ERROR(rt.wait_flag(dev, arrived(i, j), gen_, stream));
        SCCL_RETURN_IF_ERROR(rt.step_on_stream(dev, params(off, n, i), callw, x + off * esz_,
                                               call_.type, n, at(sl), sl.bytes, ws, ws_bytes_,
                                               stream));
      }
      if (kernel_sends(i)) SCCL_RETURN_IF_ERROR(rt.write_flag(dev, written(i, j), gen_, stream));
    }
  }
  // The reduced packets: this rank's own (step P-1) at once, the others as they arrive.
  for (int i = p - 1; i <= last_step(); ++i) {
    const int c = ring_step_chunk(i, call_.rank, p, call_.scatter);
    for (int j = 0; j < slices_; ++j) {
      size_t off = 0, n = 0;
      plan_.slice(c, j, &off, &n);
      if (n == 0) continue;
      if (i > p - 1) SCCL_RETURN_IF_ERROR(rt.wait_flag(dev, arrived(i, j), gen_, stream));
      const Slot& sl = recv_slot(i, j);
      SCCL_RETURN_IF_ERROR(rt.decode_on_stream(dev, params(off, n, 0), callw, at(sl), sl.bytes,
                                               y + (off - call_.recv_first) * esz_, call_.type, n,
                                               call_.scale, ws, ws_bytes_, stream));
    }
  }
  return rt.write_flag(dev, word(kDecodedAt), gen_, stream);
}

Status DeviceRingProgram::run(const CommLink& link, RingStats* stats) {
  SCCL_RETURN_IF_ERROR(check_link(link, "the device ring"));
  if (link.transport->properties().tag_bits < kRingTagBits) {
    return errorf(Code::kInvalidUsage,
                  "the device ring: its tags need %d bits but the %s transport carries only %d",
                  kRingTagBits, link.transport->name(), link.transport->properties().tag_bits);
  }
  CommLink l = link;
  l.phase = call_.scatter ? kReduceScatterPhases[static_cast<size_t>(Stage::kData)]
                          : kAllReducePhases[static_cast<size_t>(Stage::kData)];
  Exchange ex(l, "the device ring");
  const int p = call_.nranks;
  const int left = mod(call_.rank - 1, p), right = mod(call_.rank + 1, p);
  // The kernels' call number, then the start: the stream's first kernel may run.
  __atomic_store_n(reinterpret_cast<uint64_t*>(base_ + kCallAt), uint64_t(l.op_seq),
                   __ATOMIC_RELAXED);
  store(word(kStartAt), gen_);
  auto send = [&](int i, int j) {
    const Slot& sl = send_slot(i, j);
    TransferNote note;
    note.slice = j;
    note.step = i;
    if (stats != nullptr) stats->bytes_sent += sl.bytes;
    return ex.send(right, ring_tag(l.op_seq, l.phase, i, j), at(sl), sl.bytes, note);
  };
  // Every receive at once (each into a slot of its own); transfer i - 1 brings step i's packet.
  for (int i = 1; i <= last_step(); ++i) {
    for (int j = 0; j < slices_; ++j) {
      const Slot& sl = recv_slot(i, j);
      if (sl.bytes == 0) continue;
      TransferNote note;
      note.slice = j;
      note.step = i;
      note.cookie = 1;
      SCCL_RETURN_IF_ERROR(
          ex.recv(left, ring_tag(l.op_seq, l.phase, i - 1, j), at(sl), sl.bytes, note));
    }
  }
  // The kernels' packets, in the stream's order: each sent once its flag is up.
  std::vector<std::pair<int, int>> out;
  for (int i = 0; i <= p - 1; ++i) {
    if (!kernel_sends(i)) continue;
    for (int j = 0; j < slices_; ++j) {
      if (send_slot(i, j).bytes > 0) out.emplace_back(i, j);
    }
  }
  size_t next = 0;
  std::vector<Completion> done;
  for (;;) {
    done.clear();
    SCCL_RETURN_IF_ERROR(ex.poll(&done));
    bool moved = !done.empty();
    for (const Completion& c : done) {
      if (!c.recv) continue;
      if (stats != nullptr) stats->bytes_received += c.bytes;
      store(arrived(c.note.step, c.note.slice), gen_);
      // The all-gather's middle steps send on what they received, with no kernel between.
      if (forwards(c.note.step)) SCCL_RETURN_IF_ERROR(send(c.note.step, c.note.slice));
    }
    while (next < out.size() && load(written(out[next].first, out[next].second)) == gen_) {
      SCCL_RETURN_IF_ERROR(send(out[next].first, out[next].second));
      ++next;
      moved = true;
      ex.progressed();
    }
    if (next == out.size() && ex.pending() == 0) break;
    if (!moved) SCCL_RETURN_IF_ERROR(ex.idle(/*local_work=*/next < out.size()));
  }
  // The call ends with the stream's decodes: their verdict on the packets is the call's.
  SCCL_RETURN_IF_ERROR(ex.wait_local(
      [this](bool* finished) {
        // A stream operation that could not be enqueued: the decodes' flag never comes.
        *finished = load(word(kDecodedAt)) == gen_ || staged_->lost();
        return Status::Ok();
      },
      "the caller's stream (its codec kernels)"));
  const int verdict =
      __atomic_load_n(reinterpret_cast<const int*>(base_ + ws_at_), __ATOMIC_ACQUIRE);
  if (verdict != 0) {
    return errorf(Code::kInvalidArgument,
                  "the device ring: a kernel on the caller's stream found a malformed packet "
                  "(verdict %d)",
                  verdict);
  }
  return Status::Ok();
}

void DeviceRingProgram::release() {
  if (base_ == nullptr) return;
  store(word(kStartAt), gen_);
  for (int i = 1; i <= last_step(); ++i) {
    for (int j = 0; j < slices_; ++j)
      store(arrived(i, j), gen_);
  }
}

}  // namespace sketchccl::coll
