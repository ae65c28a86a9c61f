/* sketchccl.h is plain C, and an ncclComm_t is what its stats query takes. */
#include <nccl.h>

#include <sketchccl/sketchccl.h>

int stats_from_c(ncclComm_t comm, sketchcclCommStats* out) {
  out->size = sizeof *out;
  return sketchcclCommGetStats(comm, out);
}
