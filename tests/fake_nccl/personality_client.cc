// A PyTorch-nccl2-like client (Grow, Shrink, Revoke, Suspend/Resume/MemStats, ncclMemAlloc'd
// buffers, windows and signals, the parameter API, the *Config collectives) under
// LD_PRELOAD=libsketchccl.so in front of one personality of the fake NCCL (SKETCHCCL_NCCL_LIB).
// What the personality lacks must fail with ncclInvalidUsage and a last error naming the
// versions. Run by personality_test in several processes.
//
//   personality_client RANK NRANKS DIR VERSION
//
// Prints "CHECK <name> OK|FAIL <detail>" lines; exits 1 on any FAIL.
#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "include/sketchccl/sketchccl.h"
#include "src/api/coll_config.h"
#include "src/api/nccl_api.h"
#include "tests/fake_nccl/client_util.h"

namespace {

using fake_client::check;
using fake_client::fake_stream;
using fake_client::fmt;
using fake_client::log_since;
using fake_client::log_size;

int g_rank = 0, g_nranks = 1, g_version = 0;
constexpr size_t kCount = 262144;  // 1 MiB of floats: at SketchCCL's threshold

std::string version_text(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code % 10000 / 100) + "." +
         std::to_string(code % 100);
}

// A function the personality predates: ncclInvalidUsage, the last error naming both versions.
void refused(const std::string& name, ncclResult_t r, int since) {
  const std::string err = ncclGetLastError(nullptr);
  check(name + "/refused-before-" + version_text(since),
        r == ncclInvalidUsage && err.find(version_text(since)) != std::string::npos &&
            err.find(version_text(g_version)) != std::string::npos,
        "result " + std::to_string(r) + ", last error '" + err + "'");
}

enum class Want { kTakenOver, kForwarded };

// One float sum of kCount elements through `call` on `send`/`recv`: taken over (no line in the
// fake's log, the sum within q8's error) or forwarded (its line, and the fake copies).
template <typename Call>
void reduce(const std::string& name, const char* fake_fn, float* send, float* recv, Want want,
            Call call) {
  for (size_t i = 0; i < kCount; ++i)
    send[i] = static_cast<float>(g_rank + 1) * (1.0f + 0.001f * static_cast<float>(i % 97));
  std::memset(recv, 0, kCount * sizeof(float));
  const size_t at = log_size();
  const ncclResult_t r = call();
  const bool arrived =
      log_since(at).find(fmt("%s send=%p", fake_fn, static_cast<void*>(send))) != std::string::npos;
  const float want_sum = static_cast<float>(g_nranks * (g_nranks + 1)) / 2.0f;
  bool values = true;
  for (size_t i : {size_t(0), size_t(1000), kCount - 1}) {
    const float x = 1.0f + 0.001f * static_cast<float>(i % 97);
    values = values &&
             (want == Want::kTakenOver ? std::abs(recv[i] - want_sum * x) <= 0.02f * want_sum * x
                                       : recv[i] == send[i]);
  }
  const bool taken = want == Want::kTakenOver;
  check(name, r == ncclSuccess && arrived != taken && values,
        std::string(taken ? "expected taken over" : "expected forwarded") + ", result " +
            std::to_string(r) + (arrived ? ", arrived" : ", not arrived") +
            (values ? "" : ", wrong values"));
}

void allreduce(const std::string& name, ncclComm_t comm, Want want) {
  std::vector<float> send(kCount), recv(kCount);
  reduce(name, "ncclAllReduce", send.data(), recv.data(), want, [&] {
    return ncclAllReduce(send.data(), recv.data(), kCount, ncclFloat32, ncclSum, comm,
                         fake_stream(0x71));
  });
}

void allreduce_config(const std::string& name, ncclComm_t comm, const ncclCollConfig_t* config,
                      Want want) {
  std::vector<float> send(kCount), recv(kCount);
  reduce(name, "ncclAllReduceConfig", send.data(), recv.data(), want, [&] {
    return ncclAllReduceConfig(send.data(), recv.data(), kCount, ncclFloat32, ncclSum, comm,
                               fake_stream(0x72), config);
  });
}

bool used_codec(ncclComm_t comm, const char* codec) {
  using GetStats = int (*)(struct ncclComm*, sketchcclCommStats*);
  auto get = reinterpret_cast<GetStats>(dlsym(RTLD_DEFAULT, "sketchcclCommGetStats"));
  sketchcclCommStats s{};
  s.size = sizeof s;
  if (get == nullptr || get(comm, &s) != 0) return false;
  for (int i = 0; i < s.num_codecs; ++i) {
    if (std::strcmp(s.codecs[i].name, codec) == 0 && s.codecs[i].calls > 0) return true;
  }
  return false;
}

void config_collectives(ncclComm_t comm) {
  if (g_version < 23102) {
    std::vector<float> buf(16);
    refused("config",
            ncclAllReduceConfig(buf.data(), buf.data(), 16, ncclFloat32, ncclSum, comm,
                                fake_stream(0x72), nullptr),
            23102);
    return;
  }
  allreduce_config("config/null-is-the-plain-call", comm, nullptr, Want::kTakenOver);
  ncclCollConfig_t config = NCCL_COLLCONFIG_INITIALIZER;
  allreduce_config("config/default-taken-over", comm, &config, Want::kTakenOver);
  ncclCollConfig_t v2_31 = config;
  v2_31.size = 64;  // NCCL 2.31.2's struct
  allreduce_config("config/2.31-size-taken-over", comm, &v2_31, Want::kTakenOver);
  ncclCollConfig_t forced = config;
  forced.algSelection = "RING_LL";
  allreduce_config("config/forced-algorithm-forwarded", comm, &forced, Want::kForwarded);
  ncclCollConfig_t ctas = config;
  ctas.maxCTAs = 4;
  allreduce_config("config/cta-setting-forwarded", comm, &ctas, Want::kForwarded);
  ncclConfigExt_t other{};  // another vendor's option, ahead of SketchCCL's
  other.key.vendorId = 0x123456;
  other.key.optionId = 1;
  ncclConfigExt_t exact{};
  exact.key.vendorId = sketchccl::api::kSketchcclVendorId;
  exact.key.optionId = sketchccl::api::kOptionExact;
  exact.val.i = 1;
  other.next = &exact;
  ncclCollConfig_t with_exact = config;
  with_exact.ext = &other;
  allreduce_config("config/ext-exact-forwarded", comm, &with_exact, Want::kForwarded);
  ncclConfigExt_t codec{};
  codec.key.vendorId = sketchccl::api::kSketchcclVendorId;
  codec.key.optionId = sketchccl::api::kOptionCodec;
  codec.val.s = "bf16";
  ncclCollConfig_t with_codec = config;
  with_codec.ext = &codec;
  allreduce_config("config/ext-codec-taken-over", comm, &with_codec, Want::kTakenOver);
  check("config/ext-codec-used", used_codec(comm, "bf16"));
  ncclCollConfig_t bad = config;
  bad.magic = 0;
  std::vector<float> buf(kCount);
  const ncclResult_t r = ncclAllReduceConfig(buf.data(), buf.data(), kCount, ncclFloat32, ncclSum,
                                             comm, fake_stream(0x72), &bad);
  check("config/uninitialized-judged-by-nccl", r == ncclInvalidArgument,
        "result " + std::to_string(r));
  std::vector<float> send(kCount), recv(kCount / g_nranks);
  const size_t at = log_size();
  const ncclResult_t rs =
      ncclReduceScatterConfig(send.data(), recv.data(), kCount / g_nranks, ncclFloat32, ncclSum,
                              comm, fake_stream(0x73), &config);
  check("config/reduce-scatter-taken-over",
        rs == ncclSuccess && log_since(at).find("ncclReduceScatterConfig") == std::string::npos,
        "result " + std::to_string(rs));
  const size_t at2 = log_size();
  const ncclResult_t b = ncclBroadcastConfig(send.data(), recv.data(), 16, ncclFloat32, 0, comm,
                                             fake_stream(0x74), &config);
  check("config/broadcast-forwarded",
        b == ncclSuccess && log_since(at2).find("ncclBroadcastConfig") != std::string::npos,
        "result " + std::to_string(b));
}

void mem_alloc(ncclComm_t comm) {
  void* send = nullptr;
  void* recv = nullptr;
  check("memalloc/alloc", ncclMemAlloc(&send, kCount * sizeof(float)) == ncclSuccess &&
                              ncclMemAlloc(&recv, kCount * sizeof(float)) == ncclSuccess);
  reduce("memalloc/taken-over", "ncclAllReduce", static_cast<float*>(send),
         static_cast<float*>(recv), Want::kTakenOver, [&] {
           return ncclAllReduce(send, recv, kCount, ncclFloat32, ncclSum, comm, fake_stream(0x75));
         });
  check("memalloc/free", ncclMemFree(send) == ncclSuccess && ncclMemFree(recv) == ncclSuccess);
}

void grow(ncclComm_t comm, const std::string& dir) {
  ncclComm_t child = nullptr;
  ncclUniqueId id{};
  if (g_version < 22902) {
    refused("grow", ncclCommGrow(comm, g_nranks, &id, -1, &child, nullptr), 22902);
    refused("grow/get-unique-id", ncclCommGetUniqueId(comm, &id), 22902);
    return;
  }
  // Rank 0 asks its communicator for the id; the others read it (exchange_id calls
  // ncclGetUniqueId on rank 0: here the live communicator's id is written instead).
  if (g_rank == 0) {
    check("grow/get-unique-id", ncclCommGetUniqueId(comm, &id) == ncclSuccess);
    std::FILE* f = std::fopen((dir + "/grow.tmp").c_str(), "wb");
    if (f != nullptr) {
      std::fwrite(id.internal, 1, sizeof id.internal, f);
      std::fclose(f);
      std::rename((dir + "/grow.tmp").c_str(), (dir + "/grow").c_str());
    }
  } else {
    fake_client::exchange_id(1, dir + "/grow", false, &id);
  }
  const ncclResult_t r = ncclCommGrow(comm, g_nranks, &id, -1, &child, nullptr);
  check("grow/grow", r == ncclSuccess && child != nullptr && child != comm,
        "result " + std::to_string(r));
  allreduce("grow/child-forwarded-with-no-state-of-the-parent", child, Want::kForwarded);
  allreduce("grow/parent-still-taken-over", comm, Want::kTakenOver);
  check("grow/destroy-child", ncclCommDestroy(child) == ncclSuccess);
}

void shrink(ncclComm_t comm) {
  ncclComm_t child = nullptr;
  const ncclResult_t r = ncclCommShrink(comm, nullptr, 0, &child, nullptr, NCCL_SHRINK_DEFAULT);
  check("shrink/shrink", r == ncclSuccess && child != nullptr, "result " + std::to_string(r));
  allreduce("shrink/child-forwarded", child, Want::kForwarded);
  allreduce("shrink/parent-still-taken-over", comm, Want::kTakenOver);
  check("shrink/destroy-child", ncclCommDestroy(child) == ncclSuccess);
}

uint64_t mem_stat(ncclComm_t comm, ncclCommMemStat_t stat) {
  uint64_t v = ~uint64_t(0);
  return ncclCommMemStats(comm, stat, &v) == ncclSuccess ? v : ~uint64_t(0);
}

void suspend(ncclComm_t comm) {
  if (g_version < 22907) {
    refused("suspend", ncclCommSuspend(comm, NCCL_SUSPEND_MEM), 22907);
    refused("resume", ncclCommResume(comm), 22907);
    uint64_t v = 0;
    refused("memstats", ncclCommMemStats(comm, ncclStatGpuMemTotal, &v), 22907);
    return;
  }
  check("suspend/total-before", mem_stat(comm, ncclStatGpuMemTotal) >= (1u << 20) + 4096);
  check("suspend/suspend", ncclCommSuspend(comm, NCCL_SUSPEND_MEM) == ncclSuccess);
  check("suspend/suspended", mem_stat(comm, ncclStatGpuMemSuspended) == 1);
  std::vector<float> buf(kCount);
  const size_t at = log_size();
  const ncclResult_t r =
      ncclAllReduce(buf.data(), buf.data(), kCount, ncclFloat32, ncclSum, comm, fake_stream(0x76));
  check("suspend/call-while-suspended-is-nccls",
        r == ncclInvalidUsage && log_since(at).find("ncclAllReduce") != std::string::npos,
        "result " + std::to_string(r));
  check("suspend/resume", ncclCommResume(comm) == ncclSuccess);
  check("suspend/resumed", mem_stat(comm, ncclStatGpuMemSuspended) == 0);
  allreduce("suspend/taken-over-after-resume", comm, Want::kTakenOver);
}

void windows_and_signals(ncclComm_t comm) {
  std::vector<float> buf(1024);
  ncclWindow_t win = nullptr;
  check("window/register", ncclCommWindowRegister(comm, buf.data(), buf.size() * sizeof(float),
                                                  &win, 0) == ncclSuccess);
  void* user = nullptr;
  ncclWaitSignalDesc_t desc{};
  desc.peer = (g_rank + 1) % g_nranks;
  if (g_version < 22902) {
    refused("window/user-ptr", ncclWinGetUserPtr(comm, win, &user), 22902);
    refused("signal", ncclSignal(desc.peer, 0, 0, 0, comm, fake_stream(0x77)), 22902);
    refused("wait-signal", ncclWaitSignal(1, &desc, comm, fake_stream(0x77)), 22902);
    refused("put-signal",
            ncclPutSignal(buf.data(), 4, ncclFloat32, desc.peer, win, 0, 0, 0, 0, comm,
                          fake_stream(0x77)),
            22902);
  } else {
    check("window/user-ptr",
          ncclWinGetUserPtr(comm, win, &user) == ncclSuccess && user == buf.data());
    const size_t at = log_size();
    check(
        "signal/forwarded",
        ncclPutSignal(buf.data(), 4, ncclFloat32, desc.peer, win, 0, 0, 0, 0, comm,
                      fake_stream(0x77)) == ncclSuccess &&
            ncclSignal(desc.peer, 0, 0, 0, comm, fake_stream(0x77)) == ncclSuccess &&
            ncclWaitSignal(1, &desc, comm, fake_stream(0x77)) == ncclSuccess &&
            log_since(at).find(fmt("ncclWaitSignal n=1 peer0=%d", desc.peer)) != std::string::npos);
  }
  check("window/deregister", ncclCommWindowDeregister(comm, win) == ncclSuccess);
}

void params_and_encryption() {
  ncclParamHandle_t h = nullptr;
  if (g_version < 23004) {
    refused("param", ncclParamBind(&h, "FAKE_PARAM"), 23004);
  } else {
    int32_t v = 0;
    const char* s = nullptr;
    const bool ok = ncclParamBind(&h, "FAKE_PARAM") == ncclSuccess &&
                    ncclParamGetI32(h, &v) == ncclSuccess && v == 7 &&
                    ncclParamGetStr(h, &s) == ncclSuccess && std::strcmp(s, "7") == 0;
    check("param/forwarded", ok, "value " + std::to_string(v));
    ncclParamDumpAll();
  }
  alignas(8) unsigned char psk_config[64] = {};
  const auto* enc = reinterpret_cast<const ncclEncryptionConfig_t*>(psk_config);
  if (g_version < 23203) {
    refused("encryption", ncclSetEncryption(enc), 23203);
  } else {
    const size_t at = log_size();
    check("encryption/forwarded-to-the-plain-name",
          ncclSetEncryption(enc) == ncclSuccess &&
              log_since(at).find("ncclSetEncryption") != std::string::npos);
  }
}

void revoke(ncclComm_t comm) {
  check("revoke/revoke", ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT) == ncclSuccess);
  std::vector<float> buf(kCount);
  const ncclResult_t r =
      ncclAllReduce(buf.data(), buf.data(), kCount, ncclFloat32, ncclSum, comm, fake_stream(0x78));
  check("revoke/later-call-fails-as-nccls", r == ncclInvalidUsage, "result " + std::to_string(r));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  g_rank = std::atoi(argv[1]);
  g_nranks = std::atoi(argv[2]);
  const std::string dir = argv[3];
  g_version = std::atoi(argv[4]);
  const char* log = std::getenv("FAKE_NCCL_LOG");
  fake_client::g_log = log != nullptr ? log : "";
  setenv("NCCL_FAKE_PARAM", "7", 1);

  int v = 0;
  const ncclResult_t got = ncclGetVersion(&v);
  check("version", got == ncclSuccess && v == g_version, std::to_string(v));
  ncclUniqueId id;
  fake_client::exchange_id(g_rank, dir + "/id", false, &id);
  ncclComm_t comm = nullptr;
  check("init", ncclCommInitRank(&comm, g_nranks, id, g_rank) == ncclSuccess && comm != nullptr);
  allreduce("plain-taken-over", comm, Want::kTakenOver);
  config_collectives(comm);
  mem_alloc(comm);
  grow(comm, dir);
  shrink(comm);
  suspend(comm);
  windows_and_signals(comm);
  params_and_encryption();
  revoke(comm);
  check("destroy", ncclCommDestroy(comm) == ncclSuccess);
  return fake_client::g_fails == 0 ? 0 : 1;
}
