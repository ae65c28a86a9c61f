// Linked against the real libnccl.so.2; run with and without LD_PRELOAD=libsketchccl.so on a
// machine without a GPU. Prints what a caller sees, for test_real_nccl.sh to compare.
#include <nccl.h>

#include <cstdio>

int main() {
  int version = 0;
  ncclResult_t r = ncclGetVersion(&version);
  std::printf("version %d %d\n", r, version);
  std::printf("errstr %s\n", ncclGetErrorString(ncclInvalidUsage));
  ncclUniqueId id;
  r = ncclGetUniqueId(&id);
  int head = 0, tail = 0;
  for (int i = 0; i < 40; ++i)
    head += id.internal[i] != 0;
  for (int i = 40; i < 128; ++i)
    tail += id.internal[i] != 0;
  std::printf("uniqueid %d head_nonzero=%s\n", r, head > 0 ? "yes" : "no");
  std::printf("tail_nonzero %d\n", tail);
  ncclComm_t comm = nullptr;
  r = ncclCommInitRank(&comm, 1, id, 0);
  std::printf("init %d %s\n", r, ncclGetErrorString(r));
  std::printf("lasterror %s\n", ncclGetLastError(nullptr));
  return 0;
}
