#include "src/coll/reduction_engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "src/coll/accuracy.h"
#include "src/coll/agreement.h"
#include "src/coll/call_sample.h"
#include "src/coll/codec_plan.h"
#include "src/coll/error_feedback.h"
#include "src/coll/gated_slice_ops.h"
#include "src/coll/oom.h"
#include "src/coll/ring_phase.h"
#include "src/coll/s2_repair.h"
#include "src/coll/schedule_choice.h"
#include "src/core/log.h"

namespace sketchccl::coll {

using kernels::CodecId;

CodecId ReductionEngine::choose_codec(const BufferState& state, const ReductionArgs& args) {
  if (!settings_.auto_codec) return settings_.codec;
  const CodecId chosen = choose_auto(cost_model(args.count), state.support_history()).codec;
  if (chosen != settings_.dense_codec || !network_.known) return chosen;
  // A dense buffer: the fastest of exact, the dense codec and its safer rung on these links.
  VerdictCall c;
  c.kind = args.kind == CallKind::kReduceScatter || args.kind == CallKind::kRailReduceScatter
               ? CallKind::kReduceScatter
               : CallKind::kAllReduce;
  c.nranks = nranks_;
  c.count = args.count;
  c.device = args.mem == backend::MemoryType::kDevice || args.staged;
  const Verdict v = judge(network_, settings_, c);
  if (v.codec == CodecId::kNone) ++stats_.calls_exact_no_gain;
  return v.codec;
}

ReductionEngine::ReductionEngine(const Settings& settings, int nranks)
    : settings_(settings), nranks_(nranks), host_(backend::make_host_backend()) {}

ReductionEngine::~ReductionEngine() = default;

void ReductionEngine::set_topology(const Topology& topo) {
  topology_ = topo;
  stats_.nodes = topo.nodes;
  stats_.ranks_per_node = topo.uniform ? topo.local_ranks : 0;
  stats_.hierarchical = settings_.hierarchy && topo.hierarchical();
}

// Every input of the call's protocol that comes from the buffer's history (the codec `auto` and
// the guard chose, s2's budget, whether a residual is applied), the same on every rank when the
// ranks agree on which buffer this is; `speculative`: this rank sends its two-shot contributions
// right behind it.
DecisionMessage ReductionEngine::decision_of(const BufferState& state, CodecId codec,
                                             bool speculative) {
  struct Inputs {
    uint64_t nonzeros;
    uint64_t s2_slices;     // hash of s2's per-slice supports (its budget)
    uint64_t support_rows;  // the support encoding's input
    uint32_t codec;
    uint32_t guard_steps;
    uint32_t have_history;
    uint32_t has_residual;
  };
  static_assert(sizeof(Inputs) == sizeof(DecisionMessage::inputs), "the decision's wire size");
  const Inputs in{state.nonzeros,
                  s2_slice_support_hash(state.s2_slices),
                  state.support_rows,
                  static_cast<uint32_t>(codec),
                  static_cast<uint32_t>(state.guard.steps),
                  state.have_history ? 1u : 0u,
                  state.residual != nullptr ? 1u : 0u};
  DecisionMessage m;
  m.speculative = speculative ? 1u : 0u;
  std::memcpy(m.inputs, &in, sizeof in);
  return m;
}

Status ReductionEngine::agree_on_decision(const CommLink& link, const DecisionMessage& mine,
                                          CallKind kind, size_t count, bool* agreed) {
  CommLink l = link;
  l.phase = kPhaseDecision;
  Agreement a;
  SCCL_RETURN_IF_ERROR(decision_round(l, mine, &a));
  *agreed = a.agreed;
  // A rank that decided otherwise ran two-shot speculatively: what it sent here is dropped.
  if (a.agreed || a.speculated.empty()) return Status::Ok();
  return coll_shape(kind, Schedule::kTwoShot)
      ->drain_speculation(link, count, settings_.slice_elems, a.speculated);
}

namespace {

// What a call's buffer state is kept by: the user's buffer (state_key where the engine reads a
// copy), its count, type and kind.
BufferKey buffer_key(const ReductionArgs& args) {
  const void* keyed = args.state_key != nullptr ? args.state_key : args.send;
  return BufferKey{reinterpret_cast<uintptr_t>(keyed), args.count, args.type, args.kind};
}

}  // namespace

void ReductionEngine::start_afresh(const CollShape& ring, const CommLink& link,
                                   const ReductionArgs& args) {
  // A buffer is known by its address: a rank that reused an address for another tensor holds a
  // different history, and the ranks would run different protocols. This call runs exact; every
  // rank starts the buffer afresh, so they agree again from the next call on.
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    SCCL_WARN(kLogColl,
              "%s #%u of %zu elements: the ranks hold different histories for this buffer (an "
              "address reused by another tensor on some rank); this call runs exact and the "
              "buffer starts afresh on every rank (said once)",
              ring.name(), link.op_seq, args.count);
  }
  buffers_.renew(buffer_key(args));
  stats_.decisions_disagreed++;
}

Status ReductionEngine::run(const CommLink& link, const ReductionArgs& args) {
  const CollShape* ring_ptr = coll_shape(args.kind);
  if (ring_ptr == nullptr) {
    return errorf(Code::kInternalError, "a %s on a flat ring (the hierarchy runs it)",
                  call_kind_name(args.kind));
  }
  const CollShape& ring = *ring_ptr;
  const auto t0 = std::chrono::steady_clock::now();
  const BufferKey key = buffer_key(args);
  BufferState* state = &buffers_.get(key);
  CodecId codec = args.exact       ? CodecId::kNone
                  : args.has_codec ? args.codec
                                   : choose_codec(*state, args);
  if (!args.exact && settings_.max_nmse > 0) codec = guarded_codec(codec, state->guard.steps);
  backend::Backend* be = nullptr;
  Status st = backend_for(args.mem, &be);
  // The schedule from agreed numbers: the codec, P, the count, the settings (and the memory
  // type's backend, which every rank of a call is expected to share), and under `auto` the
  // agreed link and codec figures.
  auto schedule_of = [&](CodecId c) {
    if (!st.ok()) return Schedule::kRing;
    VerdictCall vc;
    vc.kind = args.kind;
    vc.nranks = link.nranks;
    vc.count = args.count;
    vc.backend_sums = be->sums();
    return schedule_on_network(network_, settings_, c, vc);
  };
  Schedule schedule = schedule_of(codec);
  // Only where the history shapes the protocol or the values: `auto`, the guard, error feedback,
  // a plan that reads it (s2's budget, `sparse`'s support encoding). A fixed codec's call that
  // does not depend on it costs no exchange.
  const bool history_matters = settings_.auto_codec || settings_.max_nmse > 0 ||
                               settings_.error_feedback ||
                               plan_reads_history(kernels::codec_info(codec)->family, settings_);
  const bool decide = !args.exact && link.nranks > 1 && history_matters;
  // Where the ranks' decisions differ, the call runs exact from a fresh state on every rank.
  auto exact_afresh = [&] {
    start_afresh(ring, link, args);
    state = &buffers_.get(key);
    codec = CodecId::kNone;
    schedule = schedule_of(codec);
  };
  // The decision: on two-shot a header ahead of the data, checked as the data arrives
  // (agreement.h: DecisionHeader), no round of its own; on the ring agreed first.
  Speculation spec;
  spec.phase = kPhaseDecision;
  const bool speculate = decide && schedule == Schedule::kTwoShot;
  if (decide) spec.mine = decision_of(*state, codec, speculate);
  if (decide && !speculate) {
    bool agreed = true;
    SCCL_RETURN_IF_ERROR(agree_on_decision(link, spec.mine, args.kind, args.count, &agreed));
    if (!agreed) exact_afresh();
  }
  if (st.ok()) {
    st = run_schedule(link, args, schedule, codec, *state, *be, speculate ? &spec : nullptr);
  }
  // Nothing of a speculative call whose decisions differed was kept: it runs again, exact.
  if (st.ok() && spec.disagreed) {
    exact_afresh();
    st = run_schedule(link, args, schedule, codec, *state, *be, nullptr);
  }
  CodecStats& cs = stats_.by_codec[kernels::codec_name(codec)];
  if (schedule == Schedule::kTwoShot) cs.two_shot_calls++;
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

Status ReductionEngine::run_schedule(const CommLink& link, const ReductionArgs& args,
                                     Schedule schedule, CodecId codec, BufferState& state,
                                     backend::Backend& be, Speculation* spec) {
  const CollShape& shape = *coll_shape(args.kind, schedule);
  CodecStats& cs = stats_.by_codec[kernels::codec_name(codec)];
  const uint64_t sent_before = cs.bytes_sent;
  // The operation boundary: whatever it throws (std::bad_alloc) fails this call, not the process.
  char what[96];
  std::snprintf(what, sizeof what, "the %s %s of %zu bytes", kernels::codec_name(codec),
                shape.name(), args.count * kernels::elem_size(args.type));
  const ScheduleRun run{link, args, shape, codec, state, cs, be, spec};
  const Status st = run_caught(what, [&] { return run_on(run); });
  // The flat ring sends to its right neighbour only: on this node or on another. Two-shot sends
  // to every rank alike, so its bytes split by the share of the other ranks on this node.
  const uint64_t sent = cs.bytes_sent - sent_before;
  if (schedule == Schedule::kTwoShot && link.nranks > 1 &&
      topology_.node_of.size() == static_cast<size_t>(link.nranks)) {
    uint64_t here = 0;
    for (int q = 0; q < link.nranks; ++q) {
      if (q != link.rank && topology_.node_of[static_cast<size_t>(q)] == topology_.node) ++here;
    }
    const uint64_t intra = sent * here / static_cast<uint64_t>(link.nranks - 1);
    cs.intra_node_bytes_sent += intra;
    cs.inter_node_bytes_sent += sent - intra;
  } else {
    const size_t right = static_cast<size_t>((link.rank + 1) % link.nranks);
    const bool right_here =
        right >= topology_.node_of.size() || topology_.node_of[right] == topology_.node;
    (right_here ? cs.intra_node_bytes_sent : cs.inter_node_bytes_sent) += sent;
  }
  return st;
}

Status ReductionEngine::backend_for(backend::MemoryType mem, backend::Backend** out) {
  // A device call reaches the engine as its staged host copies (Communicator, device_staging.h).
  if (mem != backend::MemoryType::kHost) {
    return Status(Code::kInternalError, "device buffers reach the engine only staged");
  }
  *out = host_.get();
  return Status::Ok();
}

void ReductionEngine::release_device_memory() {
  buffers_ = BufferStates();
  count_memory();
}

void ReductionEngine::count_memory() {
  const backend::Backend::MemoryFigures h = host_->memory_figures();
  stats_.packet_leased_bytes = h.packet_leased_bytes;
  stats_.packet_peak_bytes = h.packet_peak_bytes;
}

// Every backend call returns with its results in place, so when this returns the output is
// written.
Status ReductionEngine::run_on(const ScheduleRun& run) {
  const CommLink& link = run.link;
  const ReductionArgs& args = run.args;
  backend::Backend& be = run.be;
  SCCL_RETURN_IF_ERROR(be.activate());
  be.bound_waits(link.abort, link.timeout_s);
  Status st;
  if (nranks_ == 1) {
    // Nothing to reduce and nothing to compress: NCCL copies, and so do we.
    const size_t bytes = args.count * kernels::elem_size(args.type);
    st = args.gate != nullptr ? args.gate->need_input(0, bytes) : Status::Ok();
    if (st.ok()) st = be.copy(args.recv, args.send, bytes);
  } else {
    st = run_plan(run);
  }
  // A failure releases the caller's stream: first no device work may still write its buffers.
  if (!st.ok()) {
    const Status q = be.quiesce();
    if (!q.ok()) return Status(st.code(), st.message() + "; " + q.message());
  }
  return st;
}

Status ReductionEngine::run_plan(const ScheduleRun& run) {
  const CommLink& link = run.link;
  const ReductionArgs& args = run.args;
  const CollShape& shape = run.shape;
  const CodecId codec = run.codec;
  BufferState& state = run.state;
  CodecStats& cs = run.cs;
  backend::Backend& be = run.be;
  Speculation* spec = run.spec;
  std::unique_ptr<CodecPlan> plan = make_plan(kernels::codec_info(codec)->family);
  const BufferState history = state;  // the decisions use the previous call only
  const float scale = args.avg ? 1.0f / static_cast<float>(nranks_) : 1.0f;
  PlanCall c{link, args, shape, settings_, codec, be, *host_, state, history, cs, scale};
  // A staged call's input arrives and its result leaves in chunks: the ring's slice operations
  // wait for each (gated_slice_ops.h) where the plan reads and writes only through them; any
  // other plan first waits for the whole input.
  const size_t esz = kernels::elem_size(args.type);
  const bool streams = args.gate != nullptr && plan->streams();
  if (args.gate != nullptr && !streams) {
    SCCL_RETURN_IF_ERROR(args.gate->need_input(0, args.count * esz));
  }
  // Error feedback wraps the plan: the buffer's residual (in the backend's memory: on the device
  // for device buffers, docs/cuda.md), when the plan keeps one.
  const Feedback feedback = settings_.error_feedback ? plan->feedback(c) : Feedback::kNone;
  if (feedback != Feedback::kNone) {
    SCCL_RETURN_IF_ERROR(buffer_residual(be, args.count, &state, &c.residual));
  }
  // So does the accuracy estimate, of every call that may be inexact.
  CallSample sample;
  if (!plan->exact(c)) SCCL_RETURN_IF_ERROR(sample.take(c, /*lazily=*/streams));
  SCCL_RETURN_IF_ERROR(plan->before(c));
  ShapeJob job;
  SCCL_RETURN_IF_ERROR(plan->ring(c, &job));
  std::optional<FeedbackSliceOps> compensated;
  if (c.residual != nullptr && plan->feedback_target() != nullptr) {
    compensated.emplace(*plan->feedback_target(), c.residual, feedback, &cs);
    job.ops = &*compensated;
  }
  // A speculative call may run again (exact): its output is said final only by its end.
  std::optional<GatedSliceOps> gated;
  if (streams) {
    gated.emplace(*job.ops, *args.gate, esz, shape.out_first(args.count, link),
                  sample.taken() ? &sample : nullptr, /*outputs=*/spec == nullptr);
    job.ops = &*gated;
  }
  // What the data's messages carry, as the shape answers: the decision ahead (the peers expect
  // it there), and the sample behind, so no side ring after it (an AllReduce's exact sums reach
  // every rank with the reduced packets, a ReduceScatter's owners send their tallies in one round).
  const Carries can = shape.carries(job, args.count, link);
  if (spec != nullptr && !can.decision) {
    return Status(Code::kInternalError, "a speculative call whose plan is not two-shot's data");
  }
  job.speculation = spec;
  if (sample.taken() && can.sample) SCCL_RETURN_IF_ERROR(sample.carry(&job.sample));
  RingStats rs;
  const Status st = shape.run(link, job, settings_.slice_elems, settings_.depth, &rs);
  cs.bytes_sent += rs.bytes_sent;
  cs.bytes_received += rs.bytes_received;
  cs.sample_bytes_sent += rs.sample_bytes_sent;
  SCCL_RETURN_IF_ERROR(st);
  // The ranks' decisions differed: nothing of this call is kept (it runs again, exact).
  if (spec != nullptr && spec->disagreed) return Status::Ok();
  // Every sampled value, whatever the shape read (it read the whole input).
  if (streams && sample.taken()) {
    SCCL_RETURN_IF_ERROR(args.gate->need_input(0, args.count * esz));
    SCCL_RETURN_IF_ERROR(sample.fill(0, args.count));
  }
  SCCL_RETURN_IF_ERROR(plan->after(c));
  if (sample.taken()) SCCL_RETURN_IF_ERROR(sample.estimate(c, job.sample != nullptr));
  plan->record(c);
  return Status::Ok();
}

}  // namespace sketchccl::coll
