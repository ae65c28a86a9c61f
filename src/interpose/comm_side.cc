#include "src/interpose/comm_side.h"

#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "src/api/runtime.h"
#include "src/backend/cuda_query.h"
#include "src/bootstrap/bootstrap.h"

namespace sketchccl::interpose {
namespace {

struct Relay {
  ncclComm_t parent = nullptr;
  std::shared_ptr<ncclComm_t> heap;  // NCCL's newcomm
  ncclComm_t* caller = nullptr;      // cleared once written
};

std::mutex g_relay_mu;
std::vector<std::shared_ptr<Relay>>& relays() {
  static auto* v = new std::vector<std::shared_ptr<Relay>>;  // outlives exit-time calls
  return *v;
}

// Under g_relay_mu: writes the caller's slot once NCCL has written the heap slot.
bool publish_locked(Relay& r) {
  if (r.caller == nullptr) return true;
  ncclComm_t h = __atomic_load_n(r.heap.get(), __ATOMIC_ACQUIRE);
  if (h == nullptr) return false;
  __atomic_store_n(r.caller, h, __ATOMIC_RELEASE);
  r.caller = nullptr;
  return true;
}

void drop_locked(const std::shared_ptr<Relay>& r) {
  auto& v = relays();
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != r) continue;
    v.erase(v.begin() + static_cast<long>(i));
    return;
  }
}

}  // namespace

void attach(ncclComm_t real, const uint8_t* id, int rank, int nranks, bool nonblocking) {
  api::Runtime& rt = api::Runtime::get();
  if (real == nullptr || !rt.front_settings().enabled || !bootstrap::has_record(id)) return;
  if (!rt.config_status().ok()) return;  // logged once at load: forwarded
  coll::Communicator::InitArgs args;
  args.rank = rank;
  args.nranks = nranks;
  std::memcpy(args.id.data(), id, coll::kIdBytes);
  args.standalone = false;
  args.nonblocking = nonblocking;
  // The caller's current device, which NCCL takes at the same point (cudaGetDevice in
  // ncclCommInitRank*). NCCL is not asked: inside a group its answer is 0 until the group ends,
  // and a nonblocking communicator still initialising refuses the question (and the refusal
  // becomes NCCL's last error).
  args.cuda_device = backend::current_cuda_device();
  rt.add(real, coll::Communicator::create(args, rt.settings(), rt.config_hash()));
}

bool config_nonblocking(const ncclConfig_t* config, bool inherited) {
  // NCCL_COMM_BLOCKING=0|1 overrides the config, as NCCL's envConfigOverride does.
  const int env = blocking_env();
  if (env >= 0) return env == 0;
  if (config == nullptr) return inherited;
  // Read by the caller's own size, never past it (older headers have fewer fields).
  size_t size = 0;
  std::memcpy(&size, config, sizeof size);
  int blocking = NCCL_CONFIG_UNDEF_INT;
  if (size >= offsetof(ncclConfig_t, blocking) + sizeof(int)) {
    std::memcpy(&blocking, reinterpret_cast<const char*>(config) + offsetof(ncclConfig_t, blocking),
                sizeof blocking);
  }
  return blocking == 0;  // unset: NCCL's default, blocking
}

bool nonblocking_by_default() {
  return blocking_env() == 0;
}

std::shared_ptr<ncclComm_t> relay_split_slot(ncclComm_t parent, ncclComm_t* caller_slot) {
  auto r = std::make_shared<Relay>();
  r->parent = parent;
  r->heap = std::make_shared<ncclComm_t>(nullptr);
  r->caller = caller_slot;
  {
    std::lock_guard<std::mutex> lock(g_relay_mu);
    relays().push_back(r);
  }
  const double timeout_s = api::Runtime::get().settings().timeout_s;
  std::thread([r, timeout_s] {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(g_relay_mu);
        const bool late = std::chrono::steady_clock::now() >= deadline;
        if (publish_locked(*r) || late) {
          // Never written: the heap slot stays allocated, as NCCL may still write it.
          if (late && r->caller != nullptr) (void)new std::shared_ptr<ncclComm_t>(r->heap);
          r->caller = nullptr;
          drop_locked(r);
          return;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }).detach();
  return r->heap;
}

void drop_split_slot(const std::shared_ptr<ncclComm_t>& slot) {
  std::lock_guard<std::mutex> lock(g_relay_mu);
  for (auto& r : relays())
    if (r->heap == slot) r->caller = nullptr;  // its watcher ends at its next look
}

void publish_split_slots(ncclComm_t parent) {
  std::lock_guard<std::mutex> lock(g_relay_mu);
  for (auto& r : relays())
    if (r->parent == parent) (void)publish_locked(*r);
}

int blocking_env() {
  const char* env = std::getenv("NCCL_COMM_BLOCKING");
  if (env == nullptr) return -1;
  if (std::strcmp(env, "0") == 0) return 0;
  if (std::strcmp(env, "1") == 0) return 1;
  return -1;  // NCCL ignores other values
}

}  // namespace sketchccl::interpose
