// The driver side of a multi-process NCCL test: a fresh id for the ranks, and the check that
// every rank printed only OK cases, the same cases, and the same hash per case (rank_report.h).
#pragma once

#include <string>
#include <vector>

#include "tests/api/launcher.h"

namespace sketchccl::testing {

// ncclGetUniqueId as 256 hex digits (this process hosts the rendezvous root).
std::string new_id_hex();

// One scenario of a test worker on P ranks: each rank runs
// `worker SCENARIO RANK NRANKS ID_HEX ARGS...`, all with one fresh id.
struct Outcome {
  std::vector<RankOutput> ranks;
  double seconds = 0;
};
Outcome run_scenario(const std::string& worker, const std::string& scenario, int nranks,
                     const std::vector<std::string>& env, const std::vector<std::string>& args,
                     double timeout_s);

// The input data a codec's cases use: exact integers for `none`, sparse data for the sparse
// codecs, Gaussian otherwise.
std::string data_for(const std::string& codec);

// GoogleTest expectations over every rank's output.
void expect_agreement(const std::vector<RankOutput>& ranks, bool expect_exit_zero = true);

// The rank printed "CASE <name> HASH <h> OK".
bool case_ok(const std::string& out, const std::string& name);

}  // namespace sketchccl::testing
