// sketchccl-perf: an AllReduce sweep in the style of nccl-tests' all_reduce_perf (or, with
// --coll reduce_scatter / allgather, a sweep as reduce_scatter_perf / all_gather_perf), with the
// codec's error against the exact result in place of #wrong and the wire bytes per input byte.
// Each collective is one row of kCollectives (name, buffer sizes, call, bus factor, reference),
// as nccl-tests' testColl.
//
// It resolves the NCCL API at run time, so the same binary runs
//   - standalone (SKETCHCCL_NCCL_LIB=none, or no GPU here): libsketchccl.so on host memory;
//   - with the shim in front of the real NCCL (LD_PRELOAD=libsketchccl.so, or --codec given):
//     buffers on the GPU;
//   - against the real NCCL alone (no shim): buffers on the GPU, no codec, no wire column.
// Ranks: --nranks N alone starts N local processes (this binary, rank and id on their argv);
// under mpirun/srun the rank comes from the launcher's environment and rank 0 passes the id to
// the others through a file (--id-file, default /tmp/sketchccl-perf.<job>.id).
#include <dlfcn.h>
#include <nccl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include <sketchccl/sketchccl.h>
#include "perf/bench/perf_common.h"
#include "perf/bench/perf_inputs.h"

namespace {

using perfinputs::DataSpec;
using perfinputs::from_buffer;
using perfinputs::Inputs;
using perfinputs::load_npy;
using perfinputs::parse_data;
using perfinputs::round_to;
using perfinputs::to_buffer;
using perfutil::parse_bytes;
using perfutil::parse_int;

using perfinputs::input_error;  // usage errors: "sketchccl-perf: ..." and exit status 2

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

// ---------------------------------------------------------------------------------------------
// Options

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

// ---------------------------------------------------------------------------------------------
// The NCCL API, resolved at run time (the shim, the real NCCL, or the shim in front of it).

struct Nccl {
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRank) CommInitRank = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclGetLastError) GetLastError = nullptr;
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&sketchcclCommGetStats) CommGetStats = nullptr;  // SketchCCL only (sketchccl.h)
  bool shim = false;                                        // libsketchccl.so is what answers
  std::string where;
};

template <typename F>
void resolve(void* h, const char* name, F* out) {
  void* p = dlsym(h, name);
  if (p == nullptr) input_error("%s not found in the NCCL library (%s)", name, dlerror());
  *out = reinterpret_cast<F>(p);
}

std::string dir_of(const std::string& p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? "." : p.substr(0, s);
}

Nccl load_nccl(const Options& o, bool want_shim) {
  Nccl n;
  void* h = nullptr;
  if (!o.lib.empty()) {
    h = dlopen(o.lib.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr) input_error("cannot load --lib %s: %s", o.lib.c_str(), dlerror());
    n.where = o.lib;
  } else if (dlsym(RTLD_DEFAULT, "ncclAllReduce") != nullptr) {
    h = RTLD_DEFAULT;  // preloaded (LD_PRELOAD=libsketchccl.so) or linked in
    n.where = "preloaded";
  } else if (want_shim) {
    std::string d = dir_of(perfutil::self_exe());
    for (std::string c :
         {d + "/../libsketchccl.so", d + "/libsketchccl.so", std::string("libsketchccl.so")}) {
      if (c.find('/') != std::string::npos && !perfutil::file_exists(c)) continue;
      h = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (h != nullptr) {
        n.where = c;
        break;
      }
    }
    if (h == nullptr)
      input_error("cannot find libsketchccl.so next to this binary (use --lib PATH)");
  } else {
    h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr)
      input_error("cannot load libnccl.so.2 (%s); use --lib PATH or --standalone", dlerror());
    n.where = "libnccl.so.2";
  }
  resolve(h, "ncclGetUniqueId", &n.GetUniqueId);
  resolve(h, "ncclCommInitRank", &n.CommInitRank);
  resolve(h, "ncclCommDestroy", &n.CommDestroy);
  resolve(h, "ncclAllReduce", &n.AllReduce);
  resolve(h, "ncclReduceScatter", &n.ReduceScatter);
  resolve(h, "ncclAllGather", &n.AllGather);
  resolve(h, "ncclGetErrorString", &n.GetErrorString);
  resolve(h, "ncclGetLastError", &n.GetLastError);
  resolve(h, "ncclGetVersion", &n.GetVersion);
  n.shim = dlsym(h, "sketchcclGetVersion") != nullptr;
  // Optional: a plain NCCL has no statistics, and then there is no wire column.
  n.CommGetStats = reinterpret_cast<decltype(n.CommGetStats)>(dlsym(h, "sketchcclCommGetStats"));
  return n;
}

Nccl g_nccl;
int g_rank = 0, g_nranks = 1;

// ---------------------------------------------------------------------------------------------
// The collectives, one row each (nccl-tests' testColl).

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
  ncclResult_t (*call)(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                       ncclComm_t comm, cudaStream_t stream);
  // Rank 0's exact output element i of a call of `count`.
  double (*exact)(const Reference& ref, size_t i, size_t count, int p, ncclRedOp_t op);
};

double reduced(const Reference& ref, size_t i, size_t, int p, ncclRedOp_t op) {
  return op == ncclAvg ? ref.sum[i] / p : ref.sum[i];
}

const Collective kCollectives[] = {
    {"allreduce", "AllReduce", 2.0, "2(P-1)/P", true,
     [](size_t elems, size_t, size_t* count, size_t* send, size_t* recv) {
       *count = *send = *recv = elems;
     },
     [](const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
        cudaStream_t st) { return g_nccl.AllReduce(s, r, n, t, op, c, st); },
     reduced},
    // The input's size, a multiple of P elements; each rank receives count / P (rank 0: the
    // first chunk of the sum).
    {"reduce_scatter", "ReduceScatter", 1.0, "(P-1)/P", true,
     [](size_t elems, size_t p, size_t* count, size_t* send, size_t* recv) {
       *send = elems / p * p;
       *count = *recv = elems / p;
     },
     [](const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
        cudaStream_t st) { return g_nccl.ReduceScatter(s, r, n, t, op, c, st); },
     reduced},
    // The output's size, a multiple of P elements; each rank sends count = size / P, and rank
    // q's shard lands at q * count.
    {"allgather", "AllGather", 1.0, "P-1", false,
     [](size_t elems, size_t p, size_t* count, size_t* send, size_t* recv) {
       *count = *send = elems / p;
       *recv = elems / p * p;
     },
     [](const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t, ncclComm_t c,
        cudaStream_t st) { return g_nccl.AllGather(s, r, n, t, c, st); },
     [](const Reference& ref, size_t i, size_t count, int, ncclRedOp_t) {
       return static_cast<double>(ref.inputs[i / count][i % count]);
     }},
};

const Collective& collective(const std::string& name) {
  for (const Collective& c : kCollectives) {
    if (name == c.name) return c;
  }
  input_error("no collective '%s'", name.c_str());
}

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

// An allocation of this tool that failed: an error (exit status 3), not an abort.
[[noreturn]] void out_of_memory(const char* what, size_t bytes) {
  std::fprintf(stderr, "sketchccl-perf: rank %d: out of memory allocating %s (%zu bytes)\n", g_rank,
               what, bytes);
  std::exit(3);
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
// Where buffers live. Host memory here; device memory through the CUDA runtime, loaded at run
// time (for the real NCCL on a GPU machine; not exercised on the CPU-only machines of CI).

class Memory {
 public:
  virtual ~Memory() = default;
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual cudaStream_t stream() = 0;
  virtual void sync() = 0;
  virtual const char* name() const = 0;
};

class HostMemory : public Memory {
 public:
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, std::max<size_t>(bytes, 64)) != 0)
      out_of_memory("a host buffer", bytes);
    std::memset(p, 0, std::max<size_t>(bytes, 64));
    return p;
  }
  void release(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  cudaStream_t stream() override { return nullptr; }
  void sync() override {}
  const char* name() const override { return "host"; }
};

class DeviceMemory : public Memory {
 public:
  explicit DeviceMemory(int local_rank) {
    void* h = dlopen("libcudart.so", RTLD_NOW);
    if (h == nullptr) h = dlopen("libcudart.so.12", RTLD_NOW);
    if (h == nullptr) h = dlopen("libcudart.so.13", RTLD_NOW);
    if (h == nullptr) input_error("--memory device: cannot load the CUDA runtime (libcudart.so)");
    resolve(h, "cudaGetDeviceCount", &get_count_);
    resolve(h, "cudaSetDevice", &set_device_);
    resolve(h, "cudaMalloc", &malloc_);
    resolve(h, "cudaFree", &free_);
    resolve(h, "cudaMemcpy", &memcpy_);
    resolve(h, "cudaStreamCreate", &stream_create_);
    resolve(h, "cudaStreamSynchronize", &stream_sync_);
    int n = 0;
    if (get_count_(&n) != 0 || n == 0) input_error("--memory device: no CUDA device");
    check(set_device_(local_rank % n), "cudaSetDevice");
    check(stream_create_(&stream_), "cudaStreamCreate");
  }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    check(malloc_(&p, std::max<size_t>(bytes, 64)), "cudaMalloc");
    return p;
  }
  void release(void* p) override { free_(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    check(memcpy_(dst, src, bytes, 1), "cudaMemcpy H2D");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    check(memcpy_(dst, src, bytes, 2), "cudaMemcpy D2H");
  }
  cudaStream_t stream() override { return stream_; }
  void sync() override { check(stream_sync_(stream_), "cudaStreamSynchronize"); }
  const char* name() const override { return "device"; }

 private:
  static void check(int rc, const char* what) {
    if (rc != 0) input_error("%s failed (cudaError %d)", what, rc);
  }
  int (*get_count_)(int*) = nullptr;
  int (*set_device_)(int) = nullptr;
  int (*malloc_)(void**, size_t) = nullptr;
  int (*free_)(void*) = nullptr;
  int (*memcpy_)(void*, const void*, size_t, int) = nullptr;
  int (*stream_create_)(cudaStream_t*) = nullptr;
  int (*stream_sync_)(cudaStream_t) = nullptr;
  cudaStream_t stream_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Wire bytes from SketchCCL's statistics query: its byte counters before and after a size.

struct WireCounters {
  uint64_t in = 0, sent = 0;
  // The accuracy guard's estimates over all codecs: their sum and count, and its side bytes.
  double est_nmse_sum = 0;
  uint64_t est_calls = 0, sample_sent = 0;
  std::map<std::string, uint64_t> calls;  // by codec name
};

// The codec that ran most of the calls between two queries ("-" when none ran): what `auto`
// chose, or the guard's step.
std::string codec_ran(const WireCounters& before, const WireCounters& after) {
  std::string best = "-";
  uint64_t most = 0;
  for (const auto& [name, n] : after.calls) {
    const auto it = before.calls.find(name);
    const uint64_t d = n - (it == before.calls.end() ? 0 : it->second);
    if (d > most) most = d, best = name;
  }
  return best;
}

// False when the library has no query (a plain NCCL) or does not know the communicator. An
// AllGather's counters are its own (SKETCHCCL_ALLGATHER_CODEC's calls), the reductions' per codec.
bool wire_counters(ncclComm_t comm, const Collective& coll, WireCounters* out) {
  if (g_nccl.CommGetStats == nullptr) return false;
  sketchcclCommStats s;
  std::memset(&s, 0, sizeof s);
  s.size = sizeof s;
  if (g_nccl.CommGetStats(comm, &s) != 0) return false;
  if (std::strcmp(coll.name, "allgather") == 0) {
    const char* codec = std::getenv("SKETCHCCL_ALLGATHER_CODEC");
    out->in = s.allgather_bytes_in;
    out->sent = s.allgather_bytes_sent;
    out->calls[codec != nullptr && *codec ? codec : "none"] = s.allgather_calls;
    return true;
  }
  out->in = s.bytes_in;
  out->sent = s.bytes_sent;
  for (int i = 0; i < s.num_codecs; ++i) {
    const sketchcclCodecAccuracy& a = s.accuracy[i];
    out->est_nmse_sum += a.estimated_nmse_mean * static_cast<double>(a.estimated_calls);
    out->est_calls += a.estimated_calls;
    out->sample_sent += a.sample_bytes_sent;
    out->calls[std::string(s.codecs[i].name, strnlen(s.codecs[i].name, sizeof s.codecs[i].name))] =
        s.codecs[i].calls;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------

struct Result {
  size_t bytes = 0, count = 0;
  double time_us = 0, algbw = 0, busbw = 0;
  double nmse = -1, maxrel = -1, wire = -1;
  double est_nmse = -1;     // the library's own estimate, mean over this size's calls
  double sample_wire = -1;  // the estimate's side bytes / the codec's wire bytes
  std::string codec = "-";  // the codec that ran most of the size's calls (SketchCCL only)
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

// The variable that names the collective's codec.
const char* codec_variable(const Collective& coll) {
  return std::strcmp(coll.name, "allgather") == 0 ? "SKETCHCCL_ALLGATHER_CODEC" : "SKETCHCCL_CODEC";
}

int run_rank(const Options& o, const ncclUniqueId& id) {
  const Collective& coll = collective(o.coll);
  const size_t tsize = o.type == ncclFloat32 ? 4 : 2;
  DataSpec spec = parse_data(o.data);
  bool device = o.memory == "device" || (o.memory.empty() && !o.standalone);
  std::unique_ptr<Memory> mem;
  if (device) {
    const char* lr = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    mem = std::make_unique<DeviceMemory>(lr != nullptr ? std::atoi(lr) : g_rank);
  } else {
    mem = std::make_unique<HostMemory>();
  }

  ncclComm_t world;
  NCCLCHECK(g_nccl.CommInitRank(&world, g_nranks, id, g_rank));

  // Sizes, as nccl-tests walks them.
  std::vector<size_t> sizes;
  for (size_t s = o.min_bytes; s <= o.max_bytes && s > 0;) {
    sizes.push_back(s);
    size_t next = o.factor_given ? s * static_cast<size_t>(o.step_factor) : s + o.step_bytes;
    if (next <= s) break;
    s = next;
  }
  if (o.min_bytes == 0) sizes.insert(sizes.begin(), 0);
  const size_t max_count = o.max_bytes / tsize;

  Inputs inputs(spec, static_cast<uint64_t>(o.seed), o.type, g_nranks);
  std::vector<float> mine;
  inputs.generate(g_rank, max_count, &mine);
  std::vector<char> sendhost;
  to_buffer(o.type, mine.data(), max_count, &sendhost);

  // The exact result's ingredients, on rank 0 (every rank's result is the same, bit for bit):
  // the sum of the inputs, or the inputs themselves.
  Reference exact;
  if (o.check && g_rank == 0) {
    if (coll.reduces) exact.sum.assign(max_count, 0.0);
    std::vector<float> other;
    for (int r = 0; r < g_nranks; ++r) {
      inputs.generate(r, max_count, &other);
      if (!coll.reduces) {
        exact.inputs.push_back(other);
        continue;
      }
      for (size_t i = 0; i < max_count; ++i)
        exact.sum[i] += other[i];
    }
  }

  void* sendbuf = mem->alloc(max_count * tsize);
  void* recvbuf = mem->alloc(max_count * tsize);
  mem->upload(sendbuf, sendhost.data(), max_count * tsize);
  std::vector<char> out(max_count * tsize);

  if (g_rank == 0) {
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
      NCCLCHECK(coll.call(sendbuf, recvbuf, count, o.type, o.op, comm, mem->stream()));
    };
    WireCounters before;
    const bool measure_wire = o.wire && wire_counters(comm, coll, &before);
    for (long w = 0; w < o.warmup; ++w)
      call();
    mem->sync();
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
      double err = 0, ref = 0, maxerr = 0, maxref = 0;
      for (size_t i = 0; i < out_count; ++i) {
        double e = coll.exact(exact, i, count, g_nranks, o.op);
        e = round_to(o.type, static_cast<float>(e));  // what the buffer type can hold
        double y = from_buffer(o.type, out.data(), i);
        double d = std::isfinite(y) ? y - e : INFINITY;
        err += d * d;
        ref += e * e;
        maxerr = std::max(maxerr, std::fabs(d));
        maxref = std::max(maxref, std::fabs(e));
      }
      res.nmse = ref > 0 ? err / ref : err;
      res.maxrel = maxref > 0 ? maxerr / maxref : maxerr;
    }
    // Every call of this size has finished (synchronized above), and only this size's calls
    // ran since `before`.
    WireCounters after;
    if (measure_wire && wire_counters(comm, coll, &after) && after.in > before.in) {
      res.wire =
          static_cast<double>(after.sent - before.sent) / static_cast<double>(after.in - before.in);
      if (after.est_calls > before.est_calls) {
        res.est_nmse = (after.est_nmse_sum - before.est_nmse_sum) /
                       static_cast<double>(after.est_calls - before.est_calls);
      }
      res.codec = codec_ran(before, after);
      if (after.sent > before.sent) {
        res.sample_wire = static_cast<double>(after.sample_sent - before.sample_sent) /
                          static_cast<double>(after.sent - before.sent);
      }
    }
    if (g_rank == 0) {
      char wire[32] = "N/A";
      if (res.wire >= 0) std::snprintf(wire, sizeof wire, "%.4f", res.wire);
      std::printf("%12zu  %12zu  %8s  %6s  %6d  %9.1f  %7.3f  %7.3f  %8s  %8s  %8s  %7s  %6s\n",
                  res.bytes, res.count, o.type_name.c_str(),
                  coll.reduces ? o.op_name.c_str() : "none", -1, res.time_us, res.algbw, res.busbw,
                  fmt_err(res.nmse).c_str(), fmt_err(res.maxrel).c_str(),
                  fmt_err(res.est_nmse).c_str(), wire, res.codec.c_str());
      std::fflush(stdout);
    }
    bw_sum += res.busbw;
    results.push_back(res);
  }
  NCCLCHECK(g_nccl.CommDestroy(world));
  mem->release(sendbuf);
  mem->release(recvbuf);

  if (g_rank == 0) {
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
    if (!o.json.empty()) {
      std::ofstream j(o.json);
      const char* codec = std::getenv(codec_variable(coll));
      j << "{\"tool\": \"sketchccl-perf\", \"collective\": \"" << coll.name
        << "\", \"nranks\": " << g_nranks << ", \"codec\": \""
        << (g_nccl.shim ? (codec ? codec : "auto") : "nccl") << "\", \"type\": \"" << o.type_name
        << "\", \"op\": \"" << o.op_name << "\", \"data\": \"" << o.data
        << "\", \"seed\": " << o.seed << ", \"iters\": " << o.iters << ", \"warmup\": " << o.warmup
        << ", \"memory\": \"" << mem->name() << "\", \"results\": [";
      for (size_t i = 0; i < results.size(); ++i) {
        const Result& r = results[i];
        char b[512];
        std::snprintf(b, sizeof b,
                      "%s{\"size\": %zu, \"count\": %zu, \"time_us\": %.3f, \"algbw\": %.6f, "
                      "\"busbw\": %.6f, \"nmse\": %s, \"maxrel\": %s, \"est_nmse\": %s, "
                      "\"wire_per_input_byte\": %s, \"sample_per_wire_byte\": %s, "
                      "\"codec_ran\": \"%s\"}",
                      i ? ", " : "", r.bytes, r.count, r.time_us, r.algbw, r.busbw,
                      json_num(r.nmse).c_str(), json_num(r.maxrel).c_str(),
                      json_num(r.est_nmse).c_str(), json_num(r.wire).c_str(),
                      json_num(r.sample_wire).c_str(), r.codec.c_str());
        j << b;
      }
      j << "]}\n";
      if (!j) input_error("cannot write -J %s", o.json.c_str());
    }
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> passthrough;
  Options o = parse_args(argc, argv, &passthrough);

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
  if (!o.codec.empty()) setenv(codec_variable(coll), o.codec.c_str(), 1);
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
    g_nccl = load_nccl(o, want_shim);
    ncclUniqueId id;
    NCCLCHECK(g_nccl.GetUniqueId(&id));
    std::string hex = perfutil::to_hex(&id, sizeof id);
    const char* codec = std::getenv(codec_variable(coll));
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
  g_nccl = load_nccl(o, want_shim);
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
    std::printf(
        "# sketchccl-perf: %s, nranks %d (launcher), codec %s, data %s, memory %s\n", coll.title,
        g_nranks,
        g_nccl.shim
            ? (std::getenv(codec_variable(coll)) ? std::getenv(codec_variable(coll)) : "auto")
            : "n/a",
        o.data.c_str(), o.memory.empty() ? (o.standalone ? "host" : "device") : o.memory.c_str());
  }
  int rc = 3;
  try {
    rc = run_rank(o, id);
  } catch (const std::bad_alloc&) {
    // The inputs, the exact sums and the results are sized by --maxbytes.
    out_of_memory("the inputs, exact sums and results of --maxbytes", o.max_bytes);
  }
  remove_owned_id_file();
  return rc;
}
