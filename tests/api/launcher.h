// Starts N processes (one per rank), collects their output, and kills them all past a deadline.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace sketchccl::testing {

struct RankOutput {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out;  // stdout and stderr, interleaved
};

// argv_for(rank) gives each process's argv; `env` entries ("NAME=value") are added to the
// caller's environment. Returns when all have exited or, past timeout_s, after killing them;
// the output of a rank still running then ends with its threads' stacks (gdb, when installed).
std::vector<RankOutput> run_ranks(int nranks,
                                  const std::function<std::vector<std::string>(int)>& argv_for,
                                  const std::vector<std::string>& env, double timeout_s);

// What client programs that print "CHECK <name> OK|FAIL <detail>" lines said: fails counts the
// FAIL lines and the ranks that exited non-zero; text is every rank's output, headed.
struct CheckTally {
  int fails = 0;
  int checks = 0;
  std::string text;
};
CheckTally tally_checks(const std::vector<RankOutput>& outs);

}  // namespace sketchccl::testing
