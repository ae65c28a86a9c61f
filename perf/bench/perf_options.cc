#include "perf/bench/perf_options.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "perf/bench/perf_common.h"
#include "perf/bench/perf_inputs.h"

namespace perfbench {
namespace {

using perfinputs::input_error;  // usage errors: "sketchccl-perf: ..." and exit status 2
using perfutil::parse_bytes;
using perfutil::parse_int;

const char* kUsage =
    "Usage: sketchccl-perf [nccl-tests flags] [sketchccl-perf flags]\n"
    "nccl-tests flags (all_reduce_perf):\n"
    "  -b, --minbytes SIZE      smallest size (default 32M; K/M/G suffixes)\n"
    "  -e, --maxbytes SIZE      largest size (default 32M)\n"
    "  -f, --stepfactor N       multiply the size by N each step\n"
    "  -i, --stepbytes SIZE     or add SIZE each step (default 1M; used when -f is not given)\n"
    "  -n, --iters N            timed iterations per size (default 20)\n"
    "  -w, --warmup_iters N     untimed iterations first (default 5)\n"
    "  -c, --check 0|1          compute the error against the exact sum (default 1)\n"
    "  -d, --datatype T         float | half | bfloat16 (default float)\n"
    "  -o, --op OP              sum | avg (default sum)\n"
    "  -J, --output_file FILE   also write the results as JSON\n"
    "sketchccl-perf flags:\n"
    "  --coll C                 allreduce | reduce_scatter | allgather (default allreduce);\n"
    "                           reduce_scatter: sizes are the input's, busbw = algbw (P-1)/P, the\n"
    "                           error is rank 0's chunk's, as nccl-tests' reduce_scatter_perf;\n"
    "                           allgather: sizes are the output's, busbw = algbw (P-1)/P, --codec\n"
    "                           sets SKETCHCCL_ALLGATHER_CODEC, as all_gather_perf\n"
    "  --nranks N               start N local ranks (or: the world size with --rank)\n"
    "  --rank R                 this process is rank R (with --nranks and --id or --id-file)\n"
    "  --id HEX | --id-file F   the ncclUniqueId (256 hex digits), or a file rank 0 writes it to\n"
    "  --codec C                sets SKETCHCCL_CODEC (none bf16 fp16 q8 q4 q2 casq2 casq3 casq4\n"
    "                           s2 sparse q8r q4r q2r auto); implies the shim\n"
    "  --error-feedback 0|1     sets SKETCHCCL_ERROR_FEEDBACK\n"
    "  --data D                 gauss | laplace | student3 | outliers | sparse:DENSITY |\n"
    "                           clustered:ROWS | FILE.npy\n"
    "                           (default gauss); clustered: embedding-style rows of 64\n"
    "                           non-zeros, ROWS of them per rank (default 0.01), half from a\n"
    "                           pool shared across ranks; in FILE.npy, %r is replaced by the\n"
    "                           rank (one dump per rank)\n"
    "  --seed S                 seed of the generated inputs (default 1)\n"
    "  --standalone             no real NCCL (sets SKETCHCCL_NCCL_LIB=none); the default when\n"
    "                           no GPU is present and SKETCHCCL_NCCL_LIB is unset\n"
    "  --lib PATH               the NCCL library to load (libsketchccl.so or libnccl.so.2)\n"
    "  --memory host|device     where buffers live (default: host standalone, else device)\n"
    "  --wire 0|1               measure wire bytes per size (default 1: from SketchCCL's\n"
    "                           sketchcclCommGetStats before and after each size)\n"
    "  -h, --help\n"
    "Unless SKETCHCCL_MIN_BYTES is set, it is set to 0 so that every size is compressed.\n";

}  // namespace

Options parse_args(int argc, char** argv, std::vector<std::string>* passthrough) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (a == "--standalone") {
      o.standalone = true;
      passthrough->push_back(a);
      continue;
    }
    std::string v;
    size_t eq = a.find('=');
    std::string key = a;
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      key = a.substr(0, eq);
      v = a.substr(eq + 1);
    } else if (a.size() > 2 && a[0] == '-' && a[1] != '-') {
      key = a.substr(0, 2);  // -b1M
      v = a.substr(2);
    } else {
      if (i + 1 >= argc) input_error("option %s needs a value (see --help)", a.c_str());
      v = argv[++i];
    }
    auto bad = [&](const char* what) {
      input_error("bad value '%s' for %s: %s (see --help)", v.c_str(), key.c_str(), what);
    };
    bool pass = true;
    long n = 0;
    if (key == "-b" || key == "--minbytes") {
      if (!parse_bytes(v, &o.min_bytes)) bad("a size like 1M");
    } else if (key == "-e" || key == "--maxbytes") {
      if (!parse_bytes(v, &o.max_bytes)) bad("a size like 64M");
    } else if (key == "-i" || key == "--stepbytes") {
      if (!parse_bytes(v, &o.step_bytes) || o.step_bytes == 0) bad("a size > 0");
    } else if (key == "-f" || key == "--stepfactor") {
      if (!parse_int(v, 1, 1 << 20, &o.step_factor)) bad("an integer >= 1");
      o.factor_given = true;
    } else if (key == "-n" || key == "--iters") {
      if (!parse_int(v, 1, 1 << 30, &o.iters)) bad("an integer >= 1");
    } else if (key == "-w" || key == "--warmup_iters") {
      if (!parse_int(v, 0, 1 << 30, &o.warmup)) bad("an integer >= 0");
    } else if (key == "-c" || key == "--check") {
      if (!parse_int(v, 0, 1 << 30, &n)) bad("0 or 1");
      o.check = n != 0;
    } else if (key == "-d" || key == "--datatype") {
      if (v == "float" || v == "float32" || v == "fp32") {
        o.type = ncclFloat32, o.type_name = "float";
      } else if (v == "half" || v == "float16" || v == "fp16") {
        o.type = ncclFloat16, o.type_name = "half";
      } else if (v == "bfloat16" || v == "bf16") {
        o.type = ncclBfloat16, o.type_name = "bfloat16";
      } else {
        bad("float | half | bfloat16 (the types SketchCCL reduces)");
      }
    } else if (key == "-o" || key == "--op") {
      if (v == "sum") {
        o.op = ncclSum, o.op_name = "sum";
      } else if (v == "avg") {
        o.op = ncclAvg, o.op_name = "avg";
      } else {
        bad("sum | avg (the ops SketchCCL reduces)");
      }
    } else if (key == "-J" || key == "--output_file" || key == "--json") {
      o.json = v;
    } else if (key == "-t" || key == "--nthreads" || key == "-g" || key == "--ngpus") {
      if (v != "1") bad("only 1: one rank per process (use --nranks or mpirun for more)");
    } else if (key == "--coll") {
      if (v == "allreduce" || v == "all_reduce") {
        o.coll = "allreduce";
      } else if (v == "reduce_scatter" || v == "reducescatter") {
        o.coll = "reduce_scatter";
      } else if (v == "allgather" || v == "all_gather") {
        o.coll = "allgather";
      } else {
        bad("allreduce | reduce_scatter | allgather");
      }
    } else if (key == "--nranks") {
      if (!parse_int(v, 1, 4096, &o.nranks)) bad("an integer from 1 to 4096");
    } else if (key == "--rank") {
      if (!parse_int(v, 0, 4095, &o.rank)) bad("an integer >= 0");
      pass = false;
    } else if (key == "--id") {
      o.id_hex = v;
      pass = false;
    } else if (key == "--id-file") {
      o.id_file = v;
    } else if (key == "--codec") {
      static const char* codecs[] = {"none",   "bf16",  "fp16",  "q8",    "q4",
                                     "q2",     "casq2", "casq3", "casq4", "s2",
                                     "sparse", "q8r",   "q4r",   "q2r",   "auto"};
      if (std::find_if(std::begin(codecs), std::end(codecs),
                       [&](const char* c) { return v == c; }) == std::end(codecs))
        bad("none bf16 fp16 q8 q4 q2 casq2 casq3 casq4 s2 sparse q8r q4r q2r auto");
      o.codec = v;
    } else if (key == "--error-feedback") {
      if (v != "0" && v != "1") bad("0 or 1");
      o.ef = v;
    } else if (key == "--data") {
      o.data = v;
    } else if (key == "--seed") {
      if (!parse_int(v, 0, 2147483647, &o.seed)) bad("an integer from 0 to 2^31-1");
    } else if (key == "--lib") {
      o.lib = v;
    } else if (key == "--wire") {
      if (!parse_int(v, 0, 1, &n)) bad("0 or 1");
      o.wire = n != 0;
    } else if (key == "--memory") {
      if (v != "host" && v != "device") bad("host | device");
      o.memory = v;
    } else {
      input_error("unknown option '%s' (see --help)", a.c_str());
    }
    if (pass) {
      passthrough->push_back(key);
      passthrough->push_back(v);
    }
  }
  if (o.min_bytes > o.max_bytes)
    input_error("-b (%zu) is larger than -e (%zu)", o.min_bytes, o.max_bytes);
  if (o.rank >= 0 && o.nranks == 0) input_error("--rank needs --nranks");
  if (o.rank >= o.nranks && o.rank >= 0)
    input_error("--rank %ld is not below --nranks %ld", o.rank, o.nranks);
  return o;
}

}  // namespace perfbench
