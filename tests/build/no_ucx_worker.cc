// One rank of a standalone AllReduce, for test_no_ucx.sh: linked against libsketchccl.so like
// any program, run where UCX cannot be loaded.
//
//   no_ucx_worker RANK NRANKS ID_FILE
//
// Rank 0 writes the unique id to ID_FILE, the others wait for it. Each rank reduces 2^18 floats
// (rank + i % 7) and checks the exact sum. Prints "RESULT OK" or "RESULT FAIL <why>"; exits 1
// on failure.
#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

int fail(const std::string& why) {
  std::printf("RESULT FAIL %s\n", why.c_str());
  return 1;
}

bool read_id(const std::string& path, ncclUniqueId* id) {
  for (int tries = 0; tries < 600; ++tries) {  // up to 60 s for rank 0
    std::ifstream in(path + ".ready");
    if (in.good()) {
      std::ifstream f(path, std::ios::binary);
      return static_cast<bool>(f.read(id->internal, sizeof id->internal));
    }
    usleep(100 * 1000);
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) return fail("usage: no_ucx_worker RANK NRANKS ID_FILE");
  const int rank = std::atoi(argv[1]), nranks = std::atoi(argv[2]);
  const std::string id_file = argv[3];
  ncclUniqueId id{};
  if (rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) return fail("ncclGetUniqueId");
    std::ofstream(id_file, std::ios::binary).write(id.internal, sizeof id.internal);
    std::ofstream(id_file + ".ready") << "1";
  } else if (!read_id(id_file, &id)) {
    return fail("no unique id from rank 0");
  }
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
  if (r != ncclSuccess) return fail("ncclCommInitRank: " + std::string(ncclGetLastError(comm)));
  const size_t count = size_t{1} << 18;
  std::vector<float> buf(count);
  for (size_t i = 0; i < count; ++i)
    buf[i] = static_cast<float>(rank + static_cast<int>(i % 7));
  r = ncclAllReduce(buf.data(), buf.data(), count, ncclFloat, ncclSum, comm, nullptr);
  if (r != ncclSuccess) {
    std::string why = "ncclAllReduce: " + std::string(ncclGetLastError(comm));
    ncclCommAbort(comm);
    return fail(why);
  }
  for (size_t i = 0; i < count; ++i) {
    const float want = static_cast<float>(nranks * (nranks - 1) / 2 + nranks * (i % 7));
    if (buf[i] != want) {
      ncclCommAbort(comm);
      return fail("element " + std::to_string(i) + " is " + std::to_string(buf[i]) + ", not " +
                  std::to_string(want));
    }
  }
  ncclCommDestroy(comm);
  std::printf("RESULT OK\n");
  return 0;
}
