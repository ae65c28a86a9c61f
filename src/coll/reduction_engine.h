// The engine of taken-over reductions on a flat ring (docs/engine.md): it picks the codec
// (`auto`, the guard) from agreed numbers, dispatches on the call's kind to its ring shape
// (coll_shape.h) and on the codec's family to its plan (codec_plan.h), wraps the plan in error
// feedback and the accuracy estimate, and keeps per-buffer memory and the statistics. The
// hierarchy (hierarchy.h) composes engines; an engine knows nothing of nodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/codec.h"
#include "src/backend/backend.h"
#include "src/backend/memory_type.h"
#include "src/coll/agreement.h"
#include "src/coll/buffer_states.h"
#include "src/coll/codec_choice.h"
#include "src/coll/coll_shape.h"
#include "src/coll/network_verdict.h"
#include "src/coll/reduction.h"
#include "src/coll/ring.h"
#include "src/coll/settings.h"
#include "src/coll/stats.h"
#include "src/coll/topology.h"

namespace sketchccl::coll {

class ReductionEngine {
 public:
  ReductionEngine(const Settings& settings, int nranks);
  ~ReductionEngine();
  ReductionEngine(const ReductionEngine&) = delete;
  ReductionEngine& operator=(const ReductionEngine&) = delete;

  // After the join, before any call: the nodes of the ranks (coll/topology.h), for the
  // statistics (intra- and inter-node bytes).
  void set_topology(const Topology& topo);
  // After the join under SKETCHCCL_CODEC=auto: the agreed link and codec figures, from which
  // `auto` runs a dense buffer exact, or on a safer codec, where that is faster
  // (network_verdict.h).
  void set_network(const NetworkFigures& f) { network_ = f; }

  // Runs on the proxy thread. `link` carries transport, neighbours and op sequence number. A call
  // of kind kRail is the hierarchy's, never a flat ring's (an internal error here).
  Status run(const CommLink& link, const ReductionArgs& args);

  // The cost model's view of a buffer of `count` elements under these settings.
  CostModelParams cost_model(size_t count) const { return settings_.cost_model(count, nranks_); }

  // Forgets the buffers' histories and residuals (ncclCommSuspend with NCCL_SUSPEND_MEM). On the
  // proxy, between operations.
  void release_device_memory();
  // What it holds now (packet memory leased from the process's pools), into stats().
  void count_memory();

  CommStats& stats() { return stats_; }
  const CommStats& stats() const { return stats_; }
  // How many user buffers it keeps a state for.
  size_t buffer_states() const { return buffers_.size(); }
  const Settings& settings() const { return settings_; }

 private:
  // The codec this call would use, from agreed numbers only.
  kernels::CodecId choose_codec(const BufferState& state, const ReductionArgs& args);
  // This rank's decision inputs for a call on the buffer of `state` with `codec`.
  static DecisionMessage decision_of(const BufferState& state, kernels::CodecId codec,
                                     bool speculative);
  // All-gathers this rank's decision inputs for the call (of `kind`, `count` elements); *agreed
  // when every rank's are equal. Otherwise what speculating ranks sent ahead (on that kind's
  // two-shot schedule) is received and dropped.
  Status agree_on_decision(const CommLink& link, const DecisionMessage& mine, CallKind kind,
                           size_t count, bool* agreed);
  // The ranks' decisions differed: the buffer starts afresh (the call runs exact), said once.
  void start_afresh(const CollShape& ring, const CommLink& link, const ReductionArgs& args);
  // One run of the call with `codec` on `schedule`, its bytes in the codec's statistics; `spec`:
  // speculative (agreement.h), spec->disagreed when the ranks' decisions differed.
  Status run_schedule(const CommLink& link, const ReductionArgs& args, Schedule schedule,
                      kernels::CodecId codec, BufferState& state, backend::Backend& be,
                      Speculation* spec);
  // The backend of `mem` buffers: the host's (device buffers arrive staged).
  Status backend_for(backend::MemoryType mem, backend::Backend** out);
  // One run of a call on one schedule, as run_schedule sets it up: the one descriptor passed down.
  struct ScheduleRun {
    const CommLink& link;
    const ReductionArgs& args;
    const CollShape& shape;
    kernels::CodecId codec;
    BufferState& state;
    CodecStats& cs;        // the codec's statistics
    backend::Backend& be;  // runs the codecs on the user's buffers (the backend of args.mem)
    Speculation* spec;     // null: the decision was agreed first (or there was none)
  };
  // On `run.be`, made current on this (the proxy) thread.
  Status run_on(const ScheduleRun& run);
  // The codec's plan on the call's shape, wrapped in error feedback and the accuracy estimate.
  Status run_plan(const ScheduleRun& run);

  Settings settings_;
  int nranks_;
  // Every call's codecs: a device call reaches the engine as its staged host copies.
  std::unique_ptr<backend::Backend> host_;
  BufferStates buffers_;  // bounded, least recently used dropped first
  CommStats stats_;
  Topology topology_;
  NetworkFigures network_;
};

}  // namespace sketchccl::coll
