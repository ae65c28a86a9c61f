// Socket helpers shared by the socket transport and the bootstrap: interface selection as
// NCCL_SOCKET_IFNAME does it, address encoding, listening, connecting with a deadline.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "src/core/status.h"

namespace sketchccl::transport::net {

// Monotonic clock, seconds.
double now_s();

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family() const { return ss.ss_family; }
  uint16_t port() const;
  void set_port(uint16_t port);
  // "127.0.0.1:5000", "[::1]:5000"
  std::string to_string() const;
};

// Encoded address: family (1 byte: 4 or 6), port (2, big endian), address (16), IPv6 scope id
// (4, little endian). Unused bytes are zero.
constexpr size_t kEncodedAddrBytes = 23;
void encode_addr(const SockAddr& addr, uint8_t out[kEncodedAddrBytes]);
Status decode_addr(const uint8_t* in, size_t len, SockAddr* out);

// NCCL_SOCKET_IFNAME semantics: comma-separated name prefixes; a leading '^' excludes them, a
// leading '=' (after any '^') asks for exact names. An empty spec is never passed here.
bool ifname_matches(const std::string& spec, const std::string& ifname);

// Picks this host's address for listening. family: 0 (IPv4 preferred, then IPv6), AF_INET or
// AF_INET6. With an empty spec: any interface but lo and docker* (ib* first), else lo.
Status choose_local_address(const std::string& ifname_spec, int family, SockAddr* out,
                            std::string* ifname_out);

// A non-blocking listening TCP socket on `addr` (port 0: any); *bound gets the real port.
Status listen_on(const SockAddr& addr, int backlog, Fd* fd, SockAddr* bound);

// Connects (TCP, non-blocking underneath) before `deadline` (now_s() clock). Retries refused
// connections until the deadline when retry_refused. The returned socket is non-blocking and
// tuned by tune_stream.
Status connect_to(const SockAddr& addr, double deadline, bool retry_refused, Fd* fd);

Status set_nonblocking(int fd);
// TCP_NODELAY, and TCP's retransmission back-off capped at kRetransmitCapMs where the kernel
// can (Linux 6.15+): a stream stalled by a link outage then resumes within about a second of the
// link's return, not at the next doubling of its timer (3, 6, 12 ... s, up to 2 min), which could
// outlast SKETCHCCL_TIMEOUT. Returns whether the cap is in place (older kernels refuse it).
bool tune_stream(int fd);
constexpr int kRetransmitCapMs = 1000;

// Blocking-with-deadline full reads and writes on a non-blocking socket (poll()).
// recv_all: kRemoteError on EOF ("closed the connection") or timeout.
Status send_all(int fd, const void* buf, size_t len, double deadline, const char* what);
Status recv_all(int fd, void* buf, size_t len, double deadline, const char* what);

// Little-endian helpers for wire formats.
inline void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t get_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
inline uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}
inline uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

// 64 random bits from the OS (getrandom), never zero.
uint64_t random_u64();

// The interface holding the local address of the connected socket `fd`, "" when none does.
std::string interface_of_socket(int fd);
// The speed /sys/class/net/IFNAME/speed reports, in bytes per second; 0 when it reports none
// (loopback, a virtual interface without one, no sysfs).
double interface_bytes_per_s(const std::string& ifname);

}  // namespace sketchccl::transport::net
