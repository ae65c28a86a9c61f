// What the clients run under LD_PRELOAD=libsketchccl.so in front of the fake libnccl.so.2 share:
// CHECK lines, the fake's call log ($FAKE_NCCL_LOG) and the id handed from rank 0 by a file.
#pragma once

#include <nccl.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace fake_client {

inline int g_fails = 0;
inline std::string g_log;  // $FAKE_NCCL_LOG

inline void check(const std::string& name, bool ok, const std::string& detail = "") {
  if (!ok) g_fails++;
  std::printf("CHECK %s %s %s\n", name.c_str(), ok ? "OK" : "FAIL", detail.c_str());
  std::fflush(stdout);
}

inline std::string read_log() {
  std::ifstream in(g_log);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline size_t log_size() {
  return read_log().size();
}

// What the fake logged since offset `from`.
inline std::string log_since(size_t from) {
  std::string all = read_log();
  return from < all.size() ? all.substr(from) : "";
}

inline std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
inline std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

inline cudaStream_t fake_stream(uintptr_t v) {
  return reinterpret_cast<cudaStream_t>(v);
}

// Rank 0 makes the id and writes it to `path`; the others read it (norecord: bytes 40-127
// cleared, as a framework that rebuilt the id would).
inline void exchange_id(int rank, const std::string& path, bool norecord, ncclUniqueId* id) {
  if (rank == 0) {
    if (ncclGetUniqueId(id) != ncclSuccess) std::exit(3);
    if (norecord) std::memset(id->internal + 40, 0, 88);
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

}  // namespace fake_client
