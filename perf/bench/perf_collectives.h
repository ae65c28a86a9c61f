// sketchccl-perf's collectives, one row each (nccl-tests' testColl): their buffer sizes, call and
// bus factor, and the checks of a size's results: the error of rank 0's output against the exact
// result, and what SketchCCL's statistics say it sent.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "perf/bench/perf_inputs.h"
#include "perf/bench/perf_nccl.h"

namespace perfbench {

// What rank 0's output is checked against: the exact sum of every rank's input, and (for the
// gathers) every rank's input itself.
struct Reference {
  std::vector<double> sum;
  std::vector<std::vector<float>> inputs;
};

struct Collective {
  const char* name;   // --coll, the JSON's "collective"
  const char* title;  // NCCL's name, in the header line
  // busbw = algbw * bus_factor * (P-1)/P (nccl-tests': 2 for AllReduce, 1 for the others).
  double bus_factor;
  const char* ring_wire;  // an exact ring's wire bytes per input byte, as the footer says
  bool reduces;           // the reference needs the sum (else the inputs)
  // A size of `elems` elements (nccl-tests' size / type size): the call's count argument, its
  // send and receive buffers' elements.
  void (*counts)(size_t elems, size_t p, size_t* count, size_t* send, size_t* recv);
  ncclResult_t (*call)(const Nccl& nccl, const void* send, void* recv, size_t count,
                       ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
  // Rank 0's exact output element i of a call of `count`.
  double (*exact)(const Reference& ref, size_t i, size_t count, int p, ncclRedOp_t op);
};

// The row of --coll `name`, or a usage error.
const Collective& collective(const std::string& name);

// The variable that names the collective's codec.
const char* codec_variable(const Collective& coll);

// The exact result's ingredients for `coll` (every rank's result is the same, bit for bit): the
// sum of the first `count` elements of every rank's input, or those inputs themselves.
Reference exact_reference(const Collective& coll, perfinputs::Inputs& inputs, int nranks,
                          size_t count);

// The error of rank 0's output of a call of `count` (`out`: `out_count` elements of `type`)
// against the exact result: nmse = |y-x|^2/|x|^2, maxrel = max|y-x|/max|x|.
struct OutputError {
  double nmse = -1, maxrel = -1;
};
OutputError output_error(const Collective& coll, const Reference& exact, const char* out,
                         size_t out_count, size_t count, int nranks, ncclDataType_t type,
                         ncclRedOp_t op);

// SketchCCL's byte counters for `coll`, queried before and after a size.
struct WireCounters {
  uint64_t in = 0, sent = 0;
  // The accuracy guard's estimates over all codecs: their sum and count, and its side bytes.
  double est_nmse_sum = 0;
  uint64_t est_calls = 0, sample_sent = 0;
  std::map<std::string, uint64_t> calls;  // by codec name
};

// False when the library has no query (a plain NCCL) or does not know the communicator. An
// AllGather's counters are its own (SKETCHCCL_ALLGATHER_CODEC's calls), the reductions' per codec.
bool wire_counters(const Nccl& nccl, ncclComm_t comm, const Collective& coll, WireCounters* out);

// What the calls between two queries sent: bytes per input byte, the library's own error
// estimate (mean over its calls), the estimate's side bytes per wire byte (each -1 where there is
// none) and the codec that ran most of them ("-" when none ran: what `auto` or the guard chose).
struct WireFigures {
  double wire = -1, est_nmse = -1, sample_wire = -1;
  std::string codec = "-";
};
WireFigures wire_figures(const WireCounters& before, const WireCounters& after);

}  // namespace perfbench
