// A program linked against a fake NCCL, run under LD_PRELOAD=libsketchccl.so, for the "safe
// drop-in" checks: memory SketchCCL cannot classify is forwarded and never read,
// ncclGetLastError answers on any thread, ncclGroupSimulateEnd runs nothing, the per-call log,
// and a real NCCL linked under another name than libnccl.so.2 found with dlsym(RTLD_NEXT).
//
//   safe_client RANK NRANKS ID_FILE memory|lasterror|simulate|calllog|linked|standalone
//
// Prints "CHECK <name> OK|FAIL <detail>" lines (exits 1 on any FAIL) and, in calllog mode,
// "EXPECT_LOG <text>" lines that the driver looks for in the process's stderr.
#include <dlfcn.h>
#include <nccl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

int g_fails = 0;
std::string g_log;
int g_rank = 0, g_nranks = 1;

void check(const std::string& name, bool ok, const std::string& detail = "") {
  if (!ok) g_fails++;
  std::printf("CHECK %s %s %s\n", name.c_str(), ok ? "OK" : "FAIL", detail.c_str());
  std::fflush(stdout);
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

std::string read_log() {
  std::ifstream in(g_log);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
size_t log_size() {
  return read_log().size();
}
std::string log_since(size_t from) {
  std::string all = read_log();
  return from < all.size() ? all.substr(from) : "";
}

cudaStream_t fake_stream(uintptr_t v) {
  return reinterpret_cast<cudaStream_t>(v);
}

void exchange_id(int rank, const std::string& path, ncclUniqueId* id) {
  if (rank == 0) {
    if (ncclGetUniqueId(id) != ncclSuccess) std::exit(3);
    std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id->internal, sizeof id->internal);
    std::rename(tmp.c_str(), path.c_str());
    return;
  }
  for (int i = 0; i < 3000; ++i) {
    std::ifstream in(path, std::ios::binary);
    if (in && in.read(id->internal, sizeof id->internal)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::exit(4);
}

constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kCount = kMiB / 4;  // 1 MiB of float32: over SKETCHCCL_MIN_BYTES

// A buffer no one may read (as CUDA's device memory looks to a process without CUDA).
float* unreadable(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::exit(5);
  return static_cast<float*>(p);
}

bool arrived(const std::string& got, const char* fn, const void* s, const void* r, size_t count) {
  return got.find(fmt("%s send=%p recv=%p count=%zu ", fn, s, r, count)) != std::string::npos;
}

// A float sum of 1 MiB in place: taken over (the sum) or forwarded (the fake leaves it as is).
bool summed(const std::vector<float>& v) {
  const float want = static_cast<float>(g_nranks * (g_nranks + 1)) / 2.0f;
  return std::abs(v[0] - want) <= 0.05f * want && std::abs(v.back() - want) <= 0.05f * want;
}

void memory_mode(ncclComm_t comm) {
  float* dev = unreadable(4 * kMiB);
  size_t at = log_size();
  ncclResult_t r = ncclAllReduce(dev, dev, kMiB, ncclFloat32, ncclSum, comm, fake_stream(0x41));
  check("memory/unreadable-allreduce-forwarded",
        r == ncclSuccess && arrived(log_since(at), "ncclAllReduce", dev, dev, kMiB),
        "result " + std::to_string(r) + ", log: " + log_since(at));
  at = log_size();
  // recvbuff == sendbuff on every rank: the fake copies nothing, so nobody reads the buffer.
  r = ncclReduceScatter(dev, dev, kCount, ncclFloat32, ncclSum, comm, fake_stream(0x42));
  check("memory/unreadable-reduce-scatter-forwarded",
        r == ncclSuccess && arrived(log_since(at), "ncclReduceScatter", dev, dev, kCount),
        "result " + std::to_string(r));
  munmap(dev, 4 * kMiB);

  using Mark = void (*)(const void*, size_t, int);
  auto mark = reinterpret_cast<Mark>(dlsym(RTLD_DEFAULT, "fake_cuda_mark"));
  check("memory/fake-libcuda-loaded", mark != nullptr);
  if (mark == nullptr) return;
  // Readable memory the driver's query fails on: forwarded (the query is the answer, not a read).
  std::vector<float> err(kCount, static_cast<float>(g_rank + 1));
  mark(err.data(), err.size() * 4, 999);
  at = log_size();
  r = ncclAllReduce(err.data(), err.data(), kCount, ncclFloat32, ncclSum, comm, fake_stream(0x43));
  check("memory/query-error-forwarded",
        r == ncclSuccess &&
            arrived(log_since(at), "ncclAllReduce", err.data(), err.data(), kCount) &&
            err[0] == static_cast<float>(g_rank + 1),
        "result " + std::to_string(r));
  // Device memory and no CUDA backend in this build: forwarded.
  std::vector<float> devmem(kCount, static_cast<float>(g_rank + 1));
  mark(devmem.data(), devmem.size() * 4, 2);
  at = log_size();
  r = ncclAllReduce(devmem.data(), devmem.data(), kCount, ncclFloat32, ncclSum, comm,
                    fake_stream(0x44));
  check("memory/device-without-backend-forwarded",
        r == ncclSuccess &&
            arrived(log_since(at), "ncclAllReduce", devmem.data(), devmem.data(), kCount),
        "result " + std::to_string(r));
  // Plain host memory is still taken over.
  std::vector<float> host(kCount, static_cast<float>(g_rank + 1));
  at = log_size();
  r = ncclAllReduce(host.data(), host.data(), kCount, ncclFloat32, ncclSum, comm,
                    fake_stream(0x45));
  check("memory/host-taken-over",
        r == ncclSuccess &&
            !arrived(log_since(at), "ncclAllReduce", host.data(), host.data(), kCount) &&
            summed(host),
        "result " + std::to_string(r));
}

std::string last_error_on_another_thread(ncclComm_t comm) {
  std::string text;
  std::thread t([&] { text = ncclGetLastError(comm); });
  t.join();
  return text;
}

void last_error_mode(ncclComm_t comm) {
  // A taken-over call SketchCCL refuses (misaligned): its text, on the watchdog's thread too.
  std::vector<float> buf(kCount + 1, 1.0f);
  auto* odd = reinterpret_cast<float*>(reinterpret_cast<char*>(buf.data()) + 1);
  ncclResult_t r = ncclAllReduce(odd, odd, kCount, ncclFloat32, ncclSum, comm, fake_stream(0x46));
  const std::string here = ncclGetLastError(comm);
  const std::string there = last_error_on_another_thread(comm);
  check("lasterror/ours-on-this-thread",
        r == ncclInvalidArgument && here.find("aligned") != std::string::npos, here);
  check("lasterror/ours-on-another-thread", there.find("aligned") != std::string::npos, there);
  // A forwarded failure makes it the real NCCL's again, on every thread.
  r = ncclCommInitRank(nullptr, 2, ncclUniqueId{}, 0);
  const std::string real = last_error_on_another_thread(comm);
  check("lasterror/real-after-forwarded-failure",
        r == ncclInvalidArgument && real == "fake last error", real);
}

void simulate_mode(ncclComm_t comm) {
  std::vector<float> v(kCount, static_cast<float>(g_rank + 1));
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  size_t at = log_size();
  ncclGroupStart();
  ncclResult_t r1 =
      ncclAllReduce(v.data(), v.data(), kCount, ncclFloat32, ncclSum, comm, fake_stream(0x47));
  ncclResult_t r2 = ncclGroupSimulateEnd(&sim);
  std::string got = log_since(at);
  check("simulate/handed-to-nccl-not-run",
        r1 == ncclSuccess && r2 == ncclSuccess &&
            arrived(got, "ncclAllReduce", v.data(), v.data(), kCount) &&
            got.find("ncclGroupSimulateEnd") != std::string::npos &&
            v[0] == static_cast<float>(g_rank + 1) && v.back() == static_cast<float>(g_rank + 1),
        got);
  // The group ended: a blocking AllReduce after it is done when it returns.
  r1 = ncclAllReduce(v.data(), v.data(), kCount, ncclFloat32, ncclSum, comm, fake_stream(0x48));
  const bool done = summed(v);
  check("simulate/next-call-blocks", r1 == ncclSuccess && done, fmt("v[0]=%g", v[0]));
  // A real group still launches its taken-over calls (at its end, not before).
  std::vector<float> w(kCount, static_cast<float>(g_rank + 1));
  at = log_size();
  ncclGroupStart();
  r1 = ncclAllReduce(w.data(), w.data(), kCount, ncclFloat32, ncclSum, comm, fake_stream(0x49));
  r2 = ncclGroupEnd();
  check("simulate/real-group-still-runs",
        r1 == ncclSuccess && r2 == ncclSuccess && summed(w) &&
            !arrived(log_since(at), "ncclAllReduce", w.data(), w.data(), kCount),
        fmt("w[0]=%g", w[0]));
}

void expect_log(const std::string& text) {
  std::printf("EXPECT_LOG %s\n", text.c_str());
  std::fflush(stdout);
}

void call_log_mode(ncclComm_t comm) {
  const void* c = comm;
  std::vector<float> big(kCount, 1.0f), small(16, 1.0f);
  std::vector<int32_t> ints(kCount, 1);
  ncclAllReduce(big.data(), big.data(), kCount, ncclFloat32, ncclSum, comm, fake_stream(0x71));
  expect_log(
      fmt("AllReduce: opCount 0 sendbuff %p recvbuff %p count %zu datatype 7 op 0 root 0 "
          "comm %p [nranks=%d] stream 0x71: taken over, codec q8",
          static_cast<void*>(big.data()), static_cast<void*>(big.data()), kCount, c, g_nranks));
  ncclAllReduce(small.data(), small.data(), 16, ncclFloat32, ncclSum, comm, fake_stream(0x72));
  expect_log(
      fmt("AllReduce: opCount 1 sendbuff %p recvbuff %p count 16 datatype 7 op 0 root 0 "
          "comm %p [nranks=%d] stream 0x72: forwarded: smaller than SKETCHCCL_MIN_BYTES",
          static_cast<void*>(small.data()), static_cast<void*>(small.data()), c, g_nranks));
  ncclAllReduce(big.data(), big.data(), kCount, ncclFloat32, ncclMax, comm, fake_stream(0x73));
  expect_log(
      fmt("AllReduce: opCount 2 sendbuff %p recvbuff %p count %zu datatype 7 op 2 root 0 "
          "comm %p [nranks=%d] stream 0x73: forwarded: op is not sum or avg",
          static_cast<void*>(big.data()), static_cast<void*>(big.data()), kCount, c, g_nranks));
  ncclAllReduce(ints.data(), ints.data(), kCount, ncclInt32, ncclSum, comm, fake_stream(0x74));
  expect_log(
      fmt("AllReduce: opCount 3 sendbuff %p recvbuff %p count %zu datatype 2 op 0 root 0 "
          "comm %p [nranks=%d] stream 0x74: forwarded: type is not float32",
          static_cast<void*>(ints.data()), static_cast<void*>(ints.data()), kCount, c, g_nranks));
  float* dev = unreadable(kMiB);
  ncclAllReduce(dev, dev, kCount, ncclFloat32, ncclSum, comm, fake_stream(0x75));
  expect_log(
      fmt("AllReduce: opCount 4 sendbuff %p recvbuff %p count %zu datatype 7 op 0 root 0 "
          "comm %p [nranks=%d] stream 0x75: forwarded: memory cannot be classified",
          static_cast<void*>(dev), static_cast<void*>(dev), kCount, c, g_nranks));
  munmap(dev, kMiB);
  const size_t per_rank = kCount / static_cast<size_t>(g_nranks);
  float* chunk = big.data() + static_cast<size_t>(g_rank) * per_rank;
  ncclReduceScatter(big.data(), chunk, per_rank, ncclFloat32, ncclSum, comm, fake_stream(0x76));
  expect_log(
      fmt("ReduceScatter: opCount 5 sendbuff %p recvbuff %p count %zu datatype 7 op 0 "
          "root 0 comm %p [nranks=%d] stream 0x76: taken over, codec q8",
          static_cast<void*>(big.data()), static_cast<void*>(chunk), per_rank, c, g_nranks));
  ncclBroadcast(small.data(), small.data(), 16, ncclFloat32, 1, comm, fake_stream(0x77));
  expect_log(
      fmt("Broadcast: opCount 6 sendbuff %p recvbuff %p count 16 datatype 7 op 0 root 1 "
          "comm %p [nranks=%d] stream 0x77: forwarded: SketchCCL takes over AllReduce and "
          "ReduceScatter only",
          static_cast<void*>(small.data()), static_cast<void*>(small.data()), c, g_nranks));
}

// SKETCHCCL_NCCL_LIB=none: nothing to forward to, so doubtful memory is a clear error.
void standalone_mode(ncclComm_t comm) {
  float* dev = unreadable(kMiB);
  ncclResult_t r = ncclAllReduce(dev, dev, kCount, ncclFloat32, ncclSum, comm, fake_stream(0x4d));
  std::string text = ncclGetLastError(comm);
  check("standalone/unreadable-refused",
        r == ncclInvalidArgument && text.find("cannot classify") != std::string::npos, text);
  munmap(dev, kMiB);
  using Mark = void (*)(const void*, size_t, int);
  auto mark = reinterpret_cast<Mark>(dlsym(RTLD_DEFAULT, "fake_cuda_mark"));
  check("standalone/fake-libcuda-loaded", mark != nullptr);
  if (mark == nullptr) return;
  std::vector<float> devmem(kCount, 1.0f);
  mark(devmem.data(), devmem.size() * 4, 2);
  r = ncclAllReduce(devmem.data(), devmem.data(), kCount, ncclFloat32, ncclSum, comm,
                    fake_stream(0x4e));
  text = ncclGetLastError(comm);
  check("standalone/device-without-backend-refused",
        r == ncclInvalidUsage && text.find("no CUDA backend") != std::string::npos, text);
  std::vector<float> host(kCount, static_cast<float>(g_rank + 1));
  r = ncclAllReduce(host.data(), host.data(), kCount, ncclFloat32, ncclSum, comm,
                    fake_stream(0x4f));
  check("standalone/host-runs", r == ncclSuccess && summed(host), fmt("host[0]=%g", host[0]));
}

// The fake NCCL is linked in as libfake_nccl_inside.so (not libnccl.so.2), as a static NCCL sits
// inside libtorch_cuda.so: SketchCCL must find it with dlsym(RTLD_NEXT) and forward to it.
void linked_mode(ncclComm_t comm) {
  size_t at = log_size();
  int v = 0;
  ncclResult_t r = ncclGetVersion(&v);
  check("linked/GetVersion-forwarded",
        r == ncclSuccess && v == NCCL_VERSION_CODE &&
            log_since(at).find("ncclGetVersion\n") != std::string::npos,
        log_since(at));
  std::vector<float> small(16, 2.0f), out(16, 0.0f);
  at = log_size();
  r = ncclBcast(small.data(), 16, ncclFloat32, 0, comm, fake_stream(0x4a));
  std::string got = log_since(at);
  check("linked/Bcast+Broadcast-through-PLT",
        r == ncclSuccess && got.find("ncclBcast buff=") != std::string::npos &&
            got.find("ncclBroadcast send=") != std::string::npos,
        got);
  at = log_size();
  r = ncclAllReduce(small.data(), out.data(), 16, ncclFloat32, ncclSum, comm, fake_stream(0x4b));
  check("linked/small-allreduce-forwarded",
        r == ncclSuccess && arrived(log_since(at), "ncclAllReduce", small.data(), out.data(), 16),
        log_since(at));
  std::vector<float> big(kCount, static_cast<float>(g_rank + 1));
  r = ncclAllReduce(big.data(), big.data(), kCount, ncclFloat32, ncclSum, comm, fake_stream(0x4c));
  check("linked/large-allreduce-taken-over", r == ncclSuccess && summed(big),
        fmt("big[0]=%g", big[0]));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: safe_client RANK NRANKS ID_FILE MODE\n");
    return 2;
  }
  alarm(120);
  g_rank = std::atoi(argv[1]);
  g_nranks = std::atoi(argv[2]);
  const std::string mode = argv[4];
  const char* log = std::getenv("FAKE_NCCL_LOG");
  if (log == nullptr) return 2;
  g_log = log;
  ncclUniqueId id;
  exchange_id(g_rank, argv[3], &id);
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRank(&comm, g_nranks, id, g_rank);
  check("init", r == ncclSuccess && comm != nullptr, std::to_string(r));
  if (r != ncclSuccess) return 1;
  if (mode == "memory") memory_mode(comm);
  if (mode == "lasterror") last_error_mode(comm);
  if (mode == "simulate") simulate_mode(comm);
  if (mode == "calllog") call_log_mode(comm);
  if (mode == "linked") linked_mode(comm);
  if (mode == "standalone") standalone_mode(comm);
  check("destroy", ncclCommDestroy(comm) == ncclSuccess);
  return g_fails ? 1 : 0;
}
