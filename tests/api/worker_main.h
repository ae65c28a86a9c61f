// The set-up the multi-process workers of tests/api share: the command line, the communicator
// and the scenarios, one row each of a table (as sketchccl-perf's kCollectives), so that a
// worker is its scenarios and its table.
#pragma once

#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "tests/api/rank_report.h"

namespace sketchccl::testing {

// How a scenario's ranks come to be.
enum class Ranks {
  kCommunicator,  // NAME SCENARIO RANK NRANKS ID_HEX [ARGS...]: run gets the communicator
  kOwnInit,       // the same command line; run opens (or fails to open) its communicator itself
  kOneProcess,    // NAME SCENARIO NRANKS [ARGS...]: one thread drives every rank
};

struct Scenario {
  const char* name;  // SCENARIO
  size_t min_args;   // the ARGS it needs
  Ranks ranks;
  // Runs the scenario (comm: null unless kCommunicator); non-zero: the communicator is gone
  // (aborted, or it failed): it is not destroyed.
  std::function<int(ncclComm_t comm, const WorkerArgs& wa)> run;
};

// A worker's main: finds SCENARIO's row, parses the command line (*rank, *nranks: the worker's
// own copies), opens the communicator (a FAIL case and exit status 3 if that fails), runs the
// row and destroys the communicator. Exit status: 2 for a bad command line or an unknown
// scenario, 1 if a case failed, else 0.
inline int run_worker(int argc, char** argv, const std::vector<Scenario>& scenarios, int* rank,
                      int* nranks) {
  const Scenario* row = nullptr;
  for (const Scenario& s : scenarios) {
    if (argc >= 2 && std::string(argv[1]) == s.name) row = &s;
  }
  if (row == nullptr) {
    std::fprintf(stderr, "%s: unknown scenario %s\n", argv[0], argc >= 2 ? argv[1] : "(none)");
    return 2;
  }
  WorkerArgs wa;
  if (row->ranks == Ranks::kOneProcess) {
    if (argc < 3) {
      std::fprintf(stderr, "usage: %s %s NRANKS [ARGS...]\n", argv[0], row->name);
      return 2;
    }
    alarm(300);  // as parse_worker_args: never outlive a broken driver
    wa.scenario = argv[1];
    wa.nranks = std::atoi(argv[2]);
    wa.args.assign(argv + 3, argv + argc);
  } else if (!parse_worker_args(argc, argv, &wa)) {
    return 2;
  }
  if (wa.args.size() < row->min_args) {
    std::fprintf(stderr, "%s %s: needs %zu ARGS\n", argv[0], row->name, row->min_args);
    return 2;
  }
  *rank = wa.rank;
  *nranks = wa.nranks;
  ncclComm_t comm = nullptr;
  if (row->ranks == Ranks::kCommunicator)
    NCCL_OK(ncclCommInitRank(&comm, wa.nranks, wa.id, wa.rank));
  if (row->run(comm, wa) == 0 && comm != nullptr) ncclCommDestroy(comm);
  return g_case_failures > 0 ? 1 : 0;
}

// ARGS[i] as a count.
inline size_t count_arg(const WorkerArgs& wa, size_t i) {
  return std::strtoull(wa.args[i].c_str(), nullptr, 10);
}

}  // namespace sketchccl::testing
