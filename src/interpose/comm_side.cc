#include "src/interpose/comm_side.h"

#include <climits>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "src/api/runtime.h"
#include "src/backend/cuda_query.h"
#include "src/bootstrap/bootstrap.h"

namespace sketchccl::interpose {

void attach(const RealApi& api, ncclComm_t real, const uint8_t* id, int rank, int nranks,
            bool nonblocking) {
  api::Runtime& rt = api::Runtime::get();
  if (real == nullptr || !rt.front_settings().enabled || !bootstrap::has_record(id)) return;
  if (!rt.config_status().ok()) return;  // logged once at load: forwarded
  coll::Communicator::InitArgs args;
  args.rank = rank;
  args.nranks = nranks;
  std::memcpy(args.id.data(), id, coll::kIdBytes);
  args.standalone = false;
  args.nonblocking = nonblocking;
  // The communicator's device: the real communicator's (ncclCommInitAll gives each its own),
  // else the caller's current one, as NCCL takes it at init.
  args.cuda_device = backend::current_cuda_device();
  if (backend::has_cuda_backend()) {
    int dev = -1;
    if (api.ncclCommCuDevice != nullptr && api.ncclCommCuDevice(real, &dev) == ncclSuccess &&
        dev >= 0) {
      args.cuda_device = dev;
    }
  }
  rt.add(real, coll::Communicator::create(args, rt.settings(), rt.config_hash()));
}

bool config_nonblocking(const ncclConfig_t* config, bool inherited) {
  if (config == nullptr) return inherited;
  // Read by the caller's own size, never past it (older headers have fewer fields).
  size_t size = 0;
  std::memcpy(&size, config, sizeof size);
  int blocking = NCCL_CONFIG_UNDEF_INT;
  if (size >= offsetof(ncclConfig_t, blocking) + sizeof(int)) {
    std::memcpy(&blocking, reinterpret_cast<const char*>(config) + offsetof(ncclConfig_t, blocking),
                sizeof blocking);
  }
  if (blocking != NCCL_CONFIG_UNDEF_INT) return blocking == 0;
  return nonblocking_by_default();
}

bool nonblocking_by_default() {
  const char* env = std::getenv("NCCL_COMM_BLOCKING");  // NCCL's default for unset fields
  return env != nullptr && *env != '\0' && std::atoi(env) == 0;
}

}  // namespace sketchccl::interpose
