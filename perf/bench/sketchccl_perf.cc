// sketchccl-perf: an AllReduce sweep in the style of nccl-tests' all_reduce_perf (or, with
// --coll reduce_scatter / allgather, a sweep as reduce_scatter_perf / all_gather_perf), with the
// codec's error against the exact result in place of #wrong and the wire bytes per input byte.
// Each collective is one row of kCollectives (perf_collectives.cc: name, buffer sizes, call, bus
// factor, reference), as nccl-tests' testColl; this file holds the flags, the sweep and its output.
//
// It resolves the NCCL API at run time, so the same binary runs
//   - standalone (SKETCHCCL_NCCL_LIB=none, or no GPU here): libsketchccl.so on host memory;
//   - with the shim in front of the real NCCL (LD_PRELOAD=libsketchccl.so, or --codec given):
//     buffers on the GPU;
//   - against the real NCCL alone (no shim): buffers on the GPU, no codec, no wire column.
// Ranks: --nranks N alone starts N local processes (this binary, rank and id on their argv);
// under mpirun/srun the rank comes from the launcher's environment and rank 0 passes the id to
// the others through a file (--id-file, default /tmp/sketchccl-perf.<job>.id).
#include <nccl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "perf/bench/perf_collectives.h"
#include "perf/bench/perf_common.h"
#include "perf/bench/perf_inputs.h"
#include "perf/bench/perf_memory.h"
#include "perf/bench/perf_nccl.h"
#include "perf/bench/perf_options.h"

namespace {

using perfbench::Collective;
using perfbench::collective;
using perfbench::Memory;
using perfbench::Nccl;
using perfbench::Options;
using perfbench::OutputError;
using perfbench::Reference;
using perfbench::WireCounters;
using perfbench::WireFigures;
using perfinputs::DataSpec;
using perfinputs::Inputs;
using perfinputs::load_npy;
using perfinputs::parse_data;
using perfinputs::to_buffer;

using perfinputs::input_error;  // usage errors: "sketchccl-perf: ..." and exit status 2

Nccl g_nccl;
int g_rank = 0, g_nranks = 1;

// The id file rank 0 wrote (a temporary file): removed on every exit path -- return, exit(),
// SIGINT/SIGTERM/SIGHUP -- so that a failed run leaves nothing behind in /tmp.
char g_owned_id_file[4096];
void remove_owned_id_file() {
  if (g_owned_id_file[0] != 0) unlink(g_owned_id_file);
  g_owned_id_file[0] = 0;
}
void on_fatal_signal(int sig) {
  remove_owned_id_file();
  signal(sig, SIG_DFL);
  raise(sig);
}
void own_id_file(const std::string& path) {
  std::snprintf(g_owned_id_file, sizeof g_owned_id_file, "%s", path.c_str());
  std::atexit(remove_owned_id_file);
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    signal(sig, on_fatal_signal);
}

#define NCCLCHECK(call)                                                                    \
  do {                                                                                     \
    ncclResult_t r_ = (call);                                                              \
    if (r_ != ncclSuccess) {                                                               \
      std::fprintf(stderr, "sketchccl-perf: rank %d: %s failed: %s (%s)\n", g_rank, #call, \
                   g_nccl.GetErrorString(r_), g_nccl.GetLastError(nullptr));               \
      std::exit(3);                                                                        \
    }                                                                                      \
  } while (0)

// ---------------------------------------------------------------------------------------------

struct Result {
  size_t bytes = 0, count = 0;
  double time_us = 0, algbw = 0, busbw = 0;
  OutputError err;   // rank 0's output against the exact result (-1: not checked)
  WireFigures wire;  // from SketchCCL's statistics (-1 and "-": none)
};

std::string fmt_err(double v) {
  if (v < 0) return "N/A";
  char b[32];
  if (v == 0)
    std::snprintf(b, sizeof b, "0");
  else
    std::snprintf(b, sizeof b, "%.2e", v);
  return b;
}

// A measured number, or null where there is none (negative).
std::string json_num(double v) {
  if (v < 0) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// The sizes, as nccl-tests walks them.
std::vector<size_t> sizes_of(const Options& o) {
  std::vector<size_t> sizes;
  for (size_t s = o.min_bytes; s <= o.max_bytes && s > 0;) {
    sizes.push_back(s);
    size_t next = o.factor_given ? s * static_cast<size_t>(o.step_factor) : s + o.step_bytes;
    if (next <= s) break;
    s = next;
  }
  if (o.min_bytes == 0) sizes.insert(sizes.begin(), 0);
  return sizes;
}

void print_table_header() {
  std::printf("#\n");
  std::printf("#                                                              out-of-place\n");
  std::printf(
      "#       size         count      type   redop    root     time    algbw    busbw"
      "      nmse    maxrel  est_nmse  wire/in   codec\n");
  std::printf(
      "#        (B)    (elements)                               (us)   (GB/s)   (GB/s)"
      "                                    \n");
  std::fflush(stdout);
}

void print_row(const Options& o, const Collective& coll, const Result& res) {
  char wire[32] = "N/A";
  if (res.wire.wire >= 0) std::snprintf(wire, sizeof wire, "%.4f", res.wire.wire);
  std::printf("%12zu  %12zu  %8s  %6s  %6d  %9.1f  %7.3f  %7.3f  %8s  %8s  %8s  %7s  %6s\n",
              res.bytes, res.count, o.type_name.c_str(), coll.reduces ? o.op_name.c_str() : "none",
              -1, res.time_us, res.algbw, res.busbw, fmt_err(res.err.nmse).c_str(),
              fmt_err(res.err.maxrel).c_str(), fmt_err(res.wire.est_nmse).c_str(), wire,
              res.wire.codec.c_str());
  std::fflush(stdout);
}

void print_footer(const Collective& coll, const std::vector<Result>& results, double bw_sum) {
  std::printf(
      "# Errors: nmse = |y-x|^2/|x|^2, maxrel = max|y-x|/max|x| against the exact result x\n");
  std::printf(
      "# est_nmse = SketchCCL's own estimate from its sample (mean over the size's calls; N/A "
      "for exact codecs)\n");
  std::printf("# wire/in = bytes this rank sent / bytes of its input (exact ring: %s)\n",
              coll.ring_wire);
  std::printf("# codec = the codec that ran most of the size's calls (auto's choice)\n");
  std::printf("# Avg bus bandwidth    : %g \n", results.empty() ? 0.0 : bw_sum / results.size());
  std::printf("#\n");
}

void write_json(const Options& o, const Collective& coll, const char* memory,
                const std::vector<Result>& results) {
  std::ofstream j(o.json);
  const char* codec = std::getenv(perfbench::codec_variable(coll));
  j << "{\"tool\": \"sketchccl-perf\", \"collective\": \"" << coll.name
    << "\", \"nranks\": " << g_nranks << ", \"codec\": \""
    << (g_nccl.shim ? (codec ? codec : "auto") : "nccl") << "\", \"type\": \"" << o.type_name
    << "\", \"op\": \"" << o.op_name << "\", \"data\": \"" << o.data << "\", \"seed\": " << o.seed
    << ", \"iters\": " << o.iters << ", \"warmup\": " << o.warmup << ", \"memory\": \"" << memory
    << "\", \"results\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    char b[512];
    std::snprintf(b, sizeof b,
                  "%s{\"size\": %zu, \"count\": %zu, \"time_us\": %.3f, \"algbw\": %.6f, "
                  "\"busbw\": %.6f, \"nmse\": %s, \"maxrel\": %s, \"est_nmse\": %s, "
                  "\"wire_per_input_byte\": %s, \"sample_per_wire_byte\": %s, "
                  "\"codec_ran\": \"%s\"}",
                  i ? ", " : "", r.bytes, r.count, r.time_us, r.algbw, r.busbw,
                  json_num(r.err.nmse).c_str(), json_num(r.err.maxrel).c_str(),
                  json_num(r.wire.est_nmse).c_str(), json_num(r.wire.wire).c_str(),
                  json_num(r.wire.sample_wire).c_str(), r.wire.codec.c_str());
    j << b;
  }
  j << "]}\n";
  if (!j) input_error("cannot write -J %s", o.json.c_str());
}

int run_rank(const Options& o, const ncclUniqueId& id) {
  const Collective& coll = collective(o.coll);
  const size_t tsize = o.type == ncclFloat32 ? 4 : 2;
  DataSpec spec = parse_data(o.data);
  const bool device = o.memory == "device" || (o.memory.empty() && !o.standalone);
  const char* lr = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  std::unique_ptr<Memory> mem =
      perfbench::make_memory(device, g_rank, lr != nullptr ? std::atoi(lr) : g_rank);

  ncclComm_t world;
  NCCLCHECK(g_nccl.CommInitRank(&world, g_nranks, id, g_rank));

  const std::vector<size_t> sizes = sizes_of(o);
  const size_t max_count = o.max_bytes / tsize;

  Inputs inputs(spec, static_cast<uint64_t>(o.seed), o.type, g_nranks);
  std::vector<float> mine;
  inputs.generate(g_rank, max_count, &mine);
  std::vector<char> sendhost;
  to_buffer(o.type, mine.data(), max_count, &sendhost);

  // The exact result's ingredients, on rank 0 (every rank's result is the same, bit for bit).
  Reference exact;
  if (o.check && g_rank == 0) exact = perfbench::exact_reference(coll, inputs, g_nranks, max_count);

  void* sendbuf = mem->alloc(max_count * tsize);
  void* recvbuf = mem->alloc(max_count * tsize);
  mem->upload(sendbuf, sendhost.data(), max_count * tsize);
  std::vector<char> out(max_count * tsize);

  if (g_rank == 0) print_table_header();

  std::vector<Result> results;
  double bw_sum = 0;
  const auto p = static_cast<size_t>(g_nranks);
  for (size_t bytes : sizes) {
    Result res;
    size_t count = 0, send_count = 0, out_count = 0;
    coll.counts(bytes / tsize, p, &count, &send_count, &out_count);
    // nccl-tests' size: the input's (reductions) or the output's (AllGather).
    res.count = std::max(send_count, out_count);
    res.bytes = res.count * tsize;
    ncclComm_t comm = world;
    auto call = [&] {
      NCCLCHECK(coll.call(g_nccl, sendbuf, recvbuf, count, o.type, o.op, comm, mem->stream()));
    };
    for (long w = 0; w < o.warmup; ++w)
      call();
    mem->sync();
    // The wire of the timed calls only: auto's first call of a buffer runs `sparse`, exact, to
    // learn its support (codec_choice.h), which is not the codec the rows report.
    WireCounters before;
    const bool measure_wire = o.wire && perfbench::wire_counters(g_nccl, comm, coll, &before);
    auto t0 = std::chrono::steady_clock::now();
    for (long it = 0; it < o.iters; ++it)
      call();
    mem->sync();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    res.time_us = secs / static_cast<double>(o.iters) * 1e6;
    res.algbw = res.time_us > 0 ? static_cast<double>(res.bytes) / (res.time_us * 1e3) : 0;
    // nccl-tests' bus factors: 2(P-1)/P for AllReduce, (P-1)/P for the others.
    res.busbw = res.algbw * coll.bus_factor * (g_nranks - 1) / g_nranks;
    // The error of the last timed call's result (rank 0's output: a ReduceScatter's first chunk
    // of the sum, an AllGather's every shard).
    if (o.check && g_rank == 0) {
      mem->download(out.data(), recvbuf, out_count * tsize);
      res.err = perfbench::output_error(coll, exact, out.data(), out_count, count, g_nranks, o.type,
                                        o.op);
    }
    // Every call of this size has finished (synchronized above), and only its timed calls ran
    // since `before`.
    WireCounters after;
    if (measure_wire && perfbench::wire_counters(g_nccl, comm, coll, &after))
      res.wire = perfbench::wire_figures(before, after);
    if (g_rank == 0) print_row(o, coll, res);
    bw_sum += res.busbw;
    results.push_back(res);
  }
  NCCLCHECK(g_nccl.CommDestroy(world));
  mem->release(sendbuf);
  mem->release(recvbuf);

  if (g_rank == 0) {
    print_footer(coll, results, bw_sum);
    if (!o.json.empty()) write_json(o, coll, mem->name(), results);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> passthrough;
  Options o = perfbench::parse_args(argc, argv, &passthrough);

  // Configuration goes into the environment before the library is loaded (it reads it once).
  const char* nccl_lib = std::getenv("SKETCHCCL_NCCL_LIB");
  if (o.standalone) {
    setenv("SKETCHCCL_NCCL_LIB", "none", 1);
  } else if (o.lib.empty() && (nccl_lib == nullptr || !*nccl_lib) &&
             !perfutil::file_exists("/dev/nvidiactl")) {
    o.standalone = true;  // no GPU here: nothing else could run
    setenv("SKETCHCCL_NCCL_LIB", "none", 1);
  }
  nccl_lib = std::getenv("SKETCHCCL_NCCL_LIB");
  if (nccl_lib != nullptr && std::strcmp(nccl_lib, "none") == 0) o.standalone = true;
  const Collective& coll = collective(o.coll);
  if (!o.codec.empty()) setenv(perfbench::codec_variable(coll), o.codec.c_str(), 1);
  if (!o.ef.empty()) setenv("SKETCHCCL_ERROR_FEEDBACK", o.ef.c_str(), 1);
  const char* mb = std::getenv("SKETCHCCL_MIN_BYTES");
  if (mb == nullptr || !*mb) setenv("SKETCHCCL_MIN_BYTES", "0", 1);
  parse_data(o.data);  // a bad --data fails here, before anything starts
  if (o.data.size() > 4 && o.data.substr(o.data.size() - 4) == ".npy" &&
      o.data.find("%r") == std::string::npos)
    load_npy(o.data);

  const bool want_shim = o.standalone || !o.codec.empty();
  int launcher_rank = -1, launcher_size = 0;
  std::string job;
  const bool under_launcher =
      o.rank < 0 && perfutil::rank_from_launcher(&launcher_rank, &launcher_size, &job);

  // The local launcher: this process makes the id and starts the ranks.
  if (o.rank < 0 && !under_launcher) {
    if (o.nranks == 0) o.nranks = 1;
    g_nccl = perfbench::load_nccl(o.lib, want_shim);
    ncclUniqueId id;
    NCCLCHECK(g_nccl.GetUniqueId(&id));
    std::string hex = perfutil::to_hex(&id, sizeof id);
    const char* codec = std::getenv(perfbench::codec_variable(coll));
    int v = 0;
    g_nccl.GetVersion(&v);
    std::printf(
        "# sketchccl-perf: %s, nranks %ld, %s, codec %s, data %s (seed %ld), "
        "SKETCHCCL_MIN_BYTES=%s\n",
        coll.title, o.nranks,
        o.standalone  ? "standalone (host memory)"
        : g_nccl.shim ? "SketchCCL in front of NCCL"
                      : "NCCL without SketchCCL",
        g_nccl.shim ? (codec ? codec : "auto (default)") : "n/a (exact NCCL)", o.data.c_str(),
        o.seed, std::getenv("SKETCHCCL_MIN_BYTES"));
    std::printf(
        "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %ld "
        "iters: %ld validation: %d\n",
        o.min_bytes, o.max_bytes,
        o.factor_given ? static_cast<size_t>(o.step_factor) : o.step_bytes,
        o.factor_given ? "factor" : "bytes", o.warmup, o.iters, o.check ? 1 : 0);
    const char* tr = std::getenv("SKETCHCCL_TRANSPORT");
    const char* ef = std::getenv("SKETCHCCL_ERROR_FEEDBACK");
    std::printf("# library %s (NCCL API %d), transport %s, error feedback %s\n",
                g_nccl.where.c_str(), v, tr ? tr : "auto", ef ? ef : "0");
    std::fflush(stdout);
    std::string exe = perfutil::self_exe();
    std::vector<std::vector<std::string>> argvs;
    for (int r = 0; r < o.nranks; ++r) {
      std::vector<std::string> a{exe};
      a.insert(a.end(), passthrough.begin(), passthrough.end());
      if (o.nranks > 0 &&
          std::find(passthrough.begin(), passthrough.end(), "--nranks") == passthrough.end()) {
        a.push_back("--nranks");
        a.push_back(std::to_string(o.nranks));
      }
      a.push_back("--rank");
      a.push_back(std::to_string(r));
      a.push_back("--id");
      a.push_back(hex);
      if (o.standalone) a.push_back("--standalone");
      argvs.push_back(a);
    }
    return perfutil::run_local_ranks(static_cast<int>(o.nranks), argvs);
  }

  // A rank.
  if (under_launcher) {
    o.rank = launcher_rank;
    if (o.nranks != 0 && o.nranks != launcher_size)
      input_error("--nranks %ld differs from the launcher's world size %d", o.nranks,
                  launcher_size);
    o.nranks = launcher_size;
    if (o.id_hex.empty() && o.id_file.empty()) {
      if (job.empty())
        input_error(
            "under a launcher without a job id: pass --id-file PATH (on a shared filesystem)");
      for (char& c : job)
        if (c == '/' || c == ' ') c = '_';
      o.id_file = "/tmp/sketchccl-perf." + job + ".id";
    }
  }
  g_rank = static_cast<int>(o.rank);
  g_nranks = static_cast<int>(o.nranks);
  g_nccl = perfbench::load_nccl(o.lib, want_shim);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (!o.id_hex.empty()) {
    if (!perfutil::from_hex(o.id_hex, &id, sizeof id))
      input_error("--id must be %zu hex digits", 2 * sizeof id);
  } else if (!o.id_file.empty()) {
    std::string err, hex;
    if (g_rank == 0) {
      NCCLCHECK(g_nccl.GetUniqueId(&id));
      own_id_file(o.id_file);
      if (!perfutil::write_id_file(o.id_file, perfutil::to_hex(&id, sizeof id), &err))
        input_error("%s", err.c_str());
    } else {
      if (!perfutil::read_id_file(o.id_file, sizeof id, 120, &hex, &err))
        input_error("%s", err.c_str());
      perfutil::from_hex(hex, &id, sizeof id);
    }
  } else if (o.nranks == 1) {
    NCCLCHECK(g_nccl.GetUniqueId(&id));
  } else {
    input_error("rank %d of %d: no id (--id HEX or --id-file PATH)", g_rank, g_nranks);
  }
  if (under_launcher && g_rank == 0) {
    std::printf("# sketchccl-perf: %s, nranks %d (launcher), codec %s, data %s, memory %s\n",
                coll.title, g_nranks,
                g_nccl.shim ? (std::getenv(perfbench::codec_variable(coll))
                                   ? std::getenv(perfbench::codec_variable(coll))
                                   : "auto")
                            : "n/a",
                o.data.c_str(),
                o.memory.empty() ? (o.standalone ? "host" : "device") : o.memory.c_str());
  }
  int rc = 3;
  try {
    rc = run_rank(o, id);
  } catch (const std::bad_alloc&) {
    // The inputs, the exact sums and the results are sized by --maxbytes.
    perfbench::out_of_memory(g_rank, "the inputs, exact sums and results of --maxbytes",
                             o.max_bytes);
  }
  remove_owned_id_file();
  return rc;
}
