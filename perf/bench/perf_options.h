// sketchccl-perf's flags: nccl-tests' (all_reduce_perf's) and its own, as --help lists them.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <string>
#include <vector>

namespace perfbench {

struct Options {
  size_t min_bytes = 32u << 20, max_bytes = 32u << 20, step_bytes = 1u << 20;
  long step_factor = 1;
  bool factor_given = false;
  long iters = 20, warmup = 5;
  bool check = true;
  ncclDataType_t type = ncclFloat32;
  std::string type_name = "float";
  ncclRedOp_t op = ncclSum;
  std::string op_name = "sum";
  std::string json;
  long nranks = 0, rank = -1;
  std::string id_hex, id_file;
  std::string codec, ef;
  std::string data = "gauss";
  long seed = 1;
  bool standalone = false;
  std::string lib;
  std::string memory;
  bool wire = true;
  std::string coll = "allreduce";  // --coll: a row of kCollectives
};

// The flags of argv; a usage error (exit status 2) on a bad one. `passthrough`: the flags a
// local launcher hands on to the ranks it starts.
Options parse_args(int argc, char** argv, std::vector<std::string>* passthrough);

}  // namespace perfbench
