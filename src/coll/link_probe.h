// What a rank measures for auto's verdict (network_verdict.h) at join: the link to the peer it
// receives from in the schedule's ring (a short timed ring shift over the transport, or
// SKETCHCCL_LINK_GBPS), what the transport reports of that link, this machine's codec speeds
// (measured once per process, on this rank's thread, in its CPU time: one core's speed, which
// the model stretches by the ranks per core), and a trial call on each schedule.
#pragma once

#include <cstdint>
#include <functional>

#include "src/coll/network_verdict.h"
#include "src/coll/p2p.h"
#include "src/coll/settings.h"
#include "src/core/status.h"

namespace sketchccl::coll {

// The ring shift's sizes: a warm-up (connections, TCP windows), then the timed rounds; the
// fastest round counts. 4 MiB makes a shaper's burst (tens to hundreds of KiB) a small error.
inline constexpr size_t kProbeWarmupBytes = size_t(1) << 20;
inline constexpr size_t kProbeBytes = size_t(4) << 20;
inline constexpr int kProbeRounds = 2;
// The latency's chain of one-byte shifts.
inline constexpr int kLatencyShifts = 8;
// The codec speeds' buffer: 8 MiB of fp32, more than the caches hold, as a call's data is.
inline constexpr size_t kCodecProbeElems = size_t(1) << 21;

// Times the shift on `link` (send to `send_to`, receive from `recv_from`; every rank of the
// communicator calls it with its own neighbours, op_seq agreed) unless `s` states the link.
Status measure_link(const PeerLink& link, int send_to, int recv_from, const Settings& s,
                    RankFigures* out);

// Seconds per fp32 byte of encode, step, decode and decode-add of each candidate and of the
// exact ring's `none` (host backend), measured once per process.
void measure_codecs(const Settings& s, RankFigures* out);

// The schedule trial (where schedule_trial_applies): the dense codec's AllReduce of
// kScheduleTrialElems on the ring and on two-shot, each once to warm up and twice timed, the
// faster counting, on engines of their own (no statistics, no buffer history, no error feedback
// or guard), each call over `next_link()` (the next operation number on every rank alike).
Status time_schedules(const Settings& s, int nranks, const std::function<CommLink()>& next_link,
                      RankFigures* out);

// The cores this process may run on (its affinity), for the shared-cores case.
double machine_cores();

}  // namespace sketchccl::coll
