// What the training tools (convergence.cc, ddp_train.cc) share: the NCCL check, the tasks by
// name, the options every rank takes and their parsing, the arguments the launcher starts a rank
// with, and a rank's communicator from the launcher's id file.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "perf/bench/perf_common.h"
#include "perf/train/convergence_tasks.h"

#define NCCLCHECK(call)                                                                   \
  do {                                                                                    \
    ncclResult_t r_ = (call);                                                             \
    if (r_ != ncclSuccess)                                                                \
      convergence::die(std::string(#call) + " failed: " + ncclGetErrorString(r_) + " (" + \
                       ncclGetLastError(nullptr) + ")");                                  \
  } while (0)

namespace convergence {

// The task of that name, seeded (each tool checks first which names it takes).
inline std::unique_ptr<Task> make_task(const std::string& name, const std::string& digits,
                                       uint64_t seed) {
  if (name == "digits") return std::make_unique<Digits>(digits, seed);
  if (name == "digits-wide") return std::make_unique<DigitsWide>(digits, seed);
  if (name == "digits-deep") return std::make_unique<DigitsDeep>(digits, seed);
  if (name == "text") return std::make_unique<Text>(seed);
  die("--task: no task " + name);
}

// Every task but text reads the digits file.
inline void check_digits(const std::string& task, const std::string& digits) {
  if (task != "text" && digits.empty()) die("--digits FILE is needed for the " + task + " task");
}

// The options of both tools' launchers and ranks (rank, id_file and result: the launcher's, for a
// rank it starts).
struct RankOptions {
  std::string task, digits, configs, csv, id_file, result;
  long epochs = 0, nranks = 4, seed = 1, rank = -1;
};

// The value of the option at args[*i] (*i moves to it).
inline std::string option_value(const std::vector<std::string>& args, size_t* i) {
  if (*i + 1 >= args.size()) die("option " + args[*i] + " needs a value");
  return args[++*i];
}

// Parses args[*i] when it is one of RankOptions' options (*i moves past its value): true if so.
inline bool parse_rank_option(const std::vector<std::string>& args, size_t* i, RankOptions* o) {
  const std::string a = args[*i];
  long n = 0;
  if (a == "--task") {
    o->task = option_value(args, i);
  } else if (a == "--digits") {
    o->digits = option_value(args, i);
  } else if (a == "--configs") {
    o->configs = option_value(args, i);
  } else if (a == "--csv") {
    o->csv = option_value(args, i);
  } else if (a == "--epochs") {
    if (!perfutil::parse_int(option_value(args, i), 1, 1000, &o->epochs)) die("--epochs: 1..1000");
  } else if (a == "--nranks") {
    if (!perfutil::parse_int(option_value(args, i), 1, 64, &o->nranks)) die("--nranks: 1..64");
  } else if (a == "--seed") {
    if (!perfutil::parse_int(option_value(args, i), 0, 1L << 30, &o->seed)) die("--seed: 0..2^30");
  } else if (a == "--rank") {  // internal: a rank started by the launcher
    if (!perfutil::parse_int(option_value(args, i), 0, 63, &n)) die("--rank");
    o->rank = n;
  } else if (a == "--id-file") {
    o->id_file = option_value(args, i);
  } else if (a == "--result") {
    o->result = option_value(args, i);
  } else {
    return false;
  }
  return true;
}

// The arguments (after the executable) that start the rank r describes, as parse_rank_option
// reads them.
inline std::vector<std::string> rank_args(const RankOptions& r) {
  return {"--task",    r.task,
          "--digits",  r.digits.empty() ? "-" : r.digits,
          "--epochs",  std::to_string(r.epochs),
          "--nranks",  std::to_string(r.nranks),
          "--seed",    std::to_string(r.seed),
          "--rank",    std::to_string(r.rank),
          "--id-file", r.id_file,
          "--result",  r.result};
}

// Rank o.rank's communicator of o.nranks: rank 0 makes the id and writes it to o.id_file, the
// others wait for it there.
inline ncclComm_t join_ranks(const RankOptions& o) {
  const int rank = static_cast<int>(o.rank), P = static_cast<int>(o.nranks);
  ncclUniqueId id;
  std::string err, hex;
  if (rank == 0) {
    NCCLCHECK(ncclGetUniqueId(&id));
    if (!perfutil::write_id_file(o.id_file, perfutil::to_hex(&id, sizeof id), &err)) die(err);
  } else {
    if (!perfutil::read_id_file(o.id_file, sizeof id, 60, &hex, &err)) die(err);
    perfutil::from_hex(hex, &id, sizeof id);
  }
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, P, id, rank));
  return comm;
}

}  // namespace convergence
