#include "src/api/call_log.h"

#include <map>
#include <mutex>

#include "src/core/log.h"

namespace sketchccl::api {
namespace {

// NCCL's opCount: the collectives of a communicator so far. Counted here only while the lines
// are printed (a handle NCCL reuses after a destroy continues its predecessor's count).
uint64_t next_op_count(ncclComm_t comm) {
  static std::mutex mu;
  static auto* counts = new std::map<ncclComm_t, uint64_t>();  // leaked: logging during exit
  std::lock_guard<std::mutex> lock(mu);
  return (*counts)[comm]++;
}

}  // namespace

bool call_log_enabled() {
  return log_enabled(LogLevel::kInfo, kLogColl);
}

void log_call(const CollCall& call, int nranks, const char* outcome,
              ncclResult_t (*count_real)(const ncclComm_t, int*)) {
  if (!call_log_enabled()) return;
  if (nranks == 0 && count_real != nullptr && call.comm != nullptr &&
      count_real(call.comm, &nranks) != ncclSuccess) {
    nranks = 0;
  }
  // As NCCL: op 0 for the calls without one (and root 0 for those without a root).
  const int op = reduces(call.kind) ? static_cast<int>(call.op) : 0;
  SCCL_INFO(kLogColl,
            "%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d comm %p "
            "[nranks=%d] stream %p: %s",
            call.name(), static_cast<unsigned long>(next_op_count(call.comm)), call.send, call.recv,
            call.count, static_cast<int>(call.type), op < 0 ? 0 : op, call.root < 0 ? 0 : call.root,
            static_cast<void*>(call.comm), nranks, static_cast<void*>(call.stream), outcome);
}

}  // namespace sketchccl::api
