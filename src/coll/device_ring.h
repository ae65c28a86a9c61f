// The device path's second rung (docs/cuda.md, "Rung 2"): a flat ring AllReduce or ReduceScatter
// of a linear codec whose codec work runs as kernels on the caller's stream, between waits for
// host flags, on packets in one pinned staging block that the proxy sends and receives. The whole
// program is known at enqueue (count, P, rank, codec, slices), so the caller's thread enqueues all
// of it before the call returns: per ring step and slice, wait for the packet's arrival, run the
// fused kernel (encode, decode-add-encode, or decode), signal the packet out. The proxy runs the
// same schedule's transfers only: host atomics on the flags and the transport, no CUDA call.
//
// The packets, their tags and the ring's steps are ring.cc's (ring_step_chunk, ring_tag, RingPlan)
// and the kernels give the CPU build's bytes, so the result is the first rung's, bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/codec.h"
#include "src/backend/device_staging.h"
#include "src/coll/exchange.h"
#include "src/coll/ring.h"
#include "src/core/status.h"

namespace sketchccl::coll {

// One call of the ring program, as the caller's thread knows it.
struct DeviceRingCall {
  bool scatter = false;  // the reduce-scatter half alone (ncclReduceScatter), else AllReduce
  size_t count = 0;      // the ring's elements (a ReduceScatter's input)
  int rank = 0;
  int nranks = 1;
  size_t slice_elems = 1;     // SKETCHCCL_SLICE_BYTES / 4
  kernels::CodecParams base;  // codec, seed, s2_rows; the call number comes from the proxy
  kernels::ElemType type = kernels::ElemType::kF32;
  float scale = 1.0f;          // 1/P for ncclAvg
  const void* send = nullptr;  // the user's buffers (device or page-locked memory)
  void* recv = nullptr;
  size_t recv_first = 0;  // the input element recv[0] corresponds to (a ReduceScatter's chunk)
  int device = 0;
};

class DeviceRingProgram {
 public:
  // The program of `call`; kInvalidUsage where the ring's tags cannot name its ranks or slices.
  static Status make(const DeviceRingCall& call, std::unique_ptr<DeviceRingProgram>* out);
  DeviceRingProgram(const DeviceRingProgram&) = delete;
  DeviceRingProgram& operator=(const DeviceRingProgram&) = delete;

  // Pinned bytes of its staging block: flags, the codec workspace and every step's packet.
  size_t block_bytes() const { return bytes_ + kAlign; }
  // Caller's thread: lays the program out in the leased block (whose stream work is all done)
  // and zeroes its flags.
  void bind(std::shared_ptr<backend::StagedCall> staged);
  // Caller's thread: enqueues on `stream` everything between the block's `ready` and `back`
  // (device_staging.h: enqueue_ready, enqueue_finish). On a failure the stream may hold waits for
  // the proxy's flags: the proxy's release() lets them go.
  Status enqueue(void* stream);
  // Proxy: the transfers of the ring, link.op_seq numbering the call (the kernels read it from
  // the block); returns once the stream's last decode is done. No CUDA call.
  Status run(const CommLink& link, RingStats* stats);
  // Proxy, however its work ended (done, failed, dropped): writes every flag the stream may wait
  // for, so that it goes on (its result is then undefined). Idempotent.
  void release();

 private:
  static constexpr size_t kAlign = 256;  // the codec workspace's alignment
  explicit DeviceRingProgram(const DeviceRingCall& call);
  struct Slot {
    size_t offset = 0;  // of the packet in the block
    size_t bytes = 0;   // 0: an empty slice
  };
  int last_step() const;  // 2P-2, the reduce-scatter alone P-1
  // The packet that step i of slice j receives (i >= 1) or sends.
  const Slot& recv_slot(int i, int j) const;
  const Slot& send_slot(int i, int j) const;
  // Whether step i's packet leaves this rank after the step's kernel (else after its receive, or
  // not at all).
  bool kernel_sends(int i) const;
  bool forwards(int i) const;
  // The flag words: the proxy's (start, each step's arrival) and the stream's (each step's packet
  // written, the decodes done).
  uint32_t* word(size_t offset) const;
  uint32_t* arrived(int i, int j) const;
  uint32_t* written(int i, int j) const;
  kernels::CodecParams params(size_t offset, size_t n, int step) const;
  uint8_t* at(const Slot& s) const { return base_ + s.offset; }

  DeviceRingCall call_;
  RingPlan plan_;
  int slices_ = 0;
  size_t esz_ = 4;
  // Layout, offsets from base_: the start line (its flag, then the call number), the decodes'
  // flag, the workspace, one line per flag of (step, slice), then the packets.
  size_t ws_at_ = 0, ws_bytes_ = 0, arrived_at_ = 0, written_at_ = 0;
  std::vector<Slot> step0_, partial_, final_;  // [j], [(i - 1) * slices + j], [c * slices + j]
  size_t bytes_ = 0;
  std::shared_ptr<backend::StagedCall> staged_;
  uint8_t* base_ = nullptr;
  uint32_t gen_ = 0;
};

}  // namespace sketchccl::coll
