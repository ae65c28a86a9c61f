// A taken-over AllReduce: picks the codec (auto, s2 budget) from agreed numbers, runs the ring,
// keeps per-buffer memory (history, error-feedback residual) and the statistics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/codec.h"
#include "src/backend/backend.h"
#include "src/backend/memory_type.h"
#include "src/coll/accuracy.h"
#include "src/coll/buffer_states.h"
#include "src/coll/codec_choice.h"
#include "src/coll/ring.h"
#include "src/coll/settings.h"
#include "src/coll/stats.h"
#include "src/coll/topology.h"

namespace sketchccl::coll {

struct AllReduceArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  kernels::ElemType type = kernels::ElemType::kF32;
  bool avg = false;
  bool exact = false;  // below SKETCHCCL_MIN_BYTES or SKETCHCCL_ENABLE=0 in standalone: `none`
  // Where send/recv live, classified once by the interposer. kDevice: memory of the
  // communicator's device, run by the CUDA backend (docs/cuda.md); the caller's stream is the
  // stream gate's business (Communicator), not the engine's.
  backend::MemoryType mem = backend::MemoryType::kHost;
  // A ReduceScatter (coll/reduce_scatter.h): `count` is the input's (P chunks), `recv` holds this
  // rank's chunk of count / P elements.
  bool scatter = false;
  // Hierarchical, in front of a real NCCL (docs/hierarchy.md): only the inter-node phase, on this
  // rank's shard of the buffer, among the ranks of its rail; NCCL runs the intra-node phases.
  bool rail = false;
};

class HierarchicalAllReduce;

class AllReduceEngine {
 public:
  AllReduceEngine(const Settings& settings, int nranks, int cuda_device = 0);
  ~AllReduceEngine();
  AllReduceEngine(const AllReduceEngine&) = delete;
  AllReduceEngine& operator=(const AllReduceEngine&) = delete;

  // After the join, before any AllReduce: the nodes of the ranks (coll/topology.h). Several
  // nodes of several ranks each, with SKETCHCCL_HIERARCHY=auto: AllReduces of host buffers run
  // hierarchically (coll/hierarchy.h); the statistics split intra- and inter-node bytes.
  void set_topology(const Topology& topo);

  // Runs on the proxy thread. `link` carries transport, neighbours and op sequence number.
  Status run(const RingLink& link, const AllReduceArgs& args);

 private:
  // All-gathers this rank's decision inputs for the call; *agreed when every rank's are equal.
  Status agree_on_decision(const RingLink& link, const BufferState& state, kernels::CodecId codec,
                           bool* agreed);

 public:
  // Creates the backend of memory type `mem` ahead of the first AllReduce on such buffers, on
  // the caller's thread before any such work is queued (so that the CUDA backend's stream and
  // pinned staging are not allocated while a stream gate holds a stream). Idempotent; the proxy
  // creates it otherwise.
  Status prepare_backend(backend::MemoryType mem);
  // Several nodes of several ranks, SKETCHCCL_HIERARCHY=auto: AllReduces run hierarchically.
  bool hierarchical() const { return hier_ != nullptr; }
  // Sizes the packet memory of the `mem` backend for an AllReduce of `count` elements, on the
  // caller's thread before its stream is gated (the CUDA proxy never allocates pinned memory).
  Status reserve_packets(backend::MemoryType mem, size_t count);

  // The codec this call would use, from agreed numbers only (exposed for tests and stats).
  kernels::CodecId choose_codec(const BufferState& state, size_t count) const;
  // The cost model's view of a buffer of `count` elements under these settings.
  CostModelParams cost_model(size_t count) const;
  // s2 counters per row for the slice [offset, offset + n): the first call's budget, then from
  // that slice's support in the previous call (s2_repair.h).
  uint32_t s2_counters_per_row(const BufferState& state, size_t count, size_t offset,
                               size_t n) const;

  CommStats& stats() { return stats_; }
  const CommStats& stats() const { return stats_; }
  const Settings& settings() const { return settings_; }

 private:
  // The backend of `mem` buffers, made at the first call on such buffers.
  Status backend_for(backend::MemoryType mem, backend::Backend** out);
  // `be` runs the codecs on the user's buffers (the backend of args.mem).
  Status run_on(const RingLink& link, const AllReduceArgs& args, kernels::CodecId codec,
                BufferState& state, CodecStats& cs, backend::Backend& be);
  Status run_codec(const RingLink& link, const AllReduceArgs& args, kernels::CodecId codec,
                   BufferState& state, CodecStats& cs, backend::Backend& be);
  // A ReduceScatter's decoded values at the samples of this rank's chunk (zero elsewhere).
  Status scatter_chunk_samples(const RingLink& link, const AllReduceArgs& args,
                               const std::vector<uint64_t>& sample_bits, backend::Backend& be,
                               float* out);
  // The accuracy estimate of a finished lossy call (coll/accuracy.h): `own` holds this rank's
  // input at the positions of `sample_bits`; a `none` ring of its own phase sums them exactly.
  Status estimate_call(const RingLink& link, const AllReduceArgs& args, kernels::CodecId codec,
                       const std::vector<uint64_t>& sample_bits, const std::vector<float>& own,
                       BufferState& state, CodecStats& cs, backend::Backend& be);
  // An exact fp32 AllReduce of m host values on ring phase `phase` (s2's repair).
  Status exact_side_ring(const RingLink& link, uint8_t phase, const float* vals, float* sums,
                         size_t m, uint64_t* bytes_sent);
  Status run_sparse(const RingLink& link, const AllReduceArgs& args, BufferState& state,
                    CodecStats& cs, backend::Backend& be);

  Settings settings_;
  int nranks_;
  int cuda_device_;
  // Host memory: also the sparse codec's phase 2, whose arrays are host memory.
  std::unique_ptr<backend::Backend> host_;
  // Device memory of cuda_device_: made by prepare_backend or the first call on device buffers.
  std::unique_ptr<backend::Backend> device_;
  BufferStates buffers_;  // bounded, least recently used dropped first
  CommStats stats_;
  Topology topology_;
  std::unique_ptr<HierarchicalAllReduce> hier_;
};

}  // namespace sketchccl::coll
