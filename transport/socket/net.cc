#include "transport/socket/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace sketchccl::transport::net {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

void SockAddr::set_port(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(port);
}

std::string SockAddr::to_string() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(port());
  }
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof buf);
    return "[" + std::string(buf) + "]:" + std::to_string(port());
  }
  return "(no address)";
}

void encode_addr(const SockAddr& addr, uint8_t out[kEncodedAddrBytes]) {
  std::memset(out, 0, kEncodedAddrBytes);
  uint16_t port = addr.port();
  out[1] = static_cast<uint8_t>(port >> 8);
  out[2] = static_cast<uint8_t>(port);
  if (addr.family() == AF_INET) {
    out[0] = 4;
    std::memcpy(out + 3, &reinterpret_cast<const sockaddr_in*>(&addr.ss)->sin_addr, 4);
  } else if (addr.family() == AF_INET6) {
    out[0] = 6;
    const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&addr.ss);
    std::memcpy(out + 3, &a6->sin6_addr, 16);
    put_u32(out + 19, a6->sin6_scope_id);
  }
}

Status decode_addr(const uint8_t* in, size_t len, SockAddr* out) {
  if (len < kEncodedAddrBytes) {
    return errorf(Code::kInvalidArgument, "socket address of %zu bytes, expected %zu", len,
                  kEncodedAddrBytes);
  }
  *out = SockAddr();
  uint16_t port = static_cast<uint16_t>((in[1] << 8) | in[2]);
  if (port == 0) return errorf(Code::kInvalidArgument, "socket address with port 0");
  if (in[0] == 4) {
    auto* a = reinterpret_cast<sockaddr_in*>(&out->ss);
    a->sin_family = AF_INET;
    std::memcpy(&a->sin_addr, in + 3, 4);
    out->len = sizeof(sockaddr_in);
  } else if (in[0] == 6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&out->ss);
    a->sin6_family = AF_INET6;
    std::memcpy(&a->sin6_addr, in + 3, 16);
    a->sin6_scope_id = get_u32(in + 19);
    out->len = sizeof(sockaddr_in6);
  } else {
    return errorf(Code::kInvalidArgument, "socket address of unknown family %u", in[0]);
  }
  out->set_port(port);
  return Status::Ok();
}

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    // NCCL allows "name:port"; the port part is ignored for matching.
    size_t colon = item.find(':');
    if (colon != std::string::npos) item.resize(colon);
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

struct Candidate {
  std::string ifname;
  SockAddr addr;
};

std::vector<Candidate> list_addresses() {
  std::vector<Candidate> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || (ifa->ifa_flags & IFF_UP) == 0) continue;
    int fam = ifa->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    Candidate c;
    c.ifname = ifa->ifa_name;
    c.addr.len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&c.addr.ss, ifa->ifa_addr, c.addr.len);
    c.addr.set_port(0);
    out.push_back(c);
  }
  freeifaddrs(list);
  return out;
}

bool starts_with(const std::string& s, const char* p) {
  return s.rfind(p, 0) == 0;
}

}  // namespace

bool ifname_matches(const std::string& spec_in, const std::string& ifname) {
  std::string spec = spec_in;
  bool exclude = false, exact = false;
  if (!spec.empty() && spec[0] == '^') {
    exclude = true;
    spec.erase(0, 1);
  }
  if (!spec.empty() && spec[0] == '=') {
    exact = true;
    spec.erase(0, 1);
  }
  bool match = false;
  for (const std::string& item : split_commas(spec)) {
    if (exact ? ifname == item : starts_with(ifname, item.c_str())) match = true;
  }
  return exclude ? !match : match;
}

Status choose_local_address(const std::string& spec, int family, SockAddr* out,
                            std::string* ifname_out) {
  if (family != 0 && family != AF_INET && family != AF_INET6) {
    return errorf(Code::kInvalidArgument, "address family %d is neither IPv4 nor IPv6", family);
  }
  std::vector<Candidate> all = list_addresses();
  std::vector<std::vector<Candidate>> tiers;
  if (!spec.empty()) {
    std::vector<Candidate> t;
    for (const Candidate& c : all) {
      if (ifname_matches(spec, c.ifname)) t.push_back(c);
    }
    tiers.push_back(t);
  } else {
    std::vector<Candidate> ib, other, lo;
    for (const Candidate& c : all) {
      if (c.ifname == "lo") {
        lo.push_back(c);
      } else if (starts_with(c.ifname, "docker")) {
        continue;
      } else if (starts_with(c.ifname, "ib")) {
        ib.push_back(c);
      } else {
        other.push_back(c);
      }
    }
    tiers = {ib, other, lo};
  }
  for (const auto& tier : tiers) {
    for (int pass = 0; pass < 2; ++pass) {
      int want = family != 0 ? family : (pass == 0 ? AF_INET : AF_INET6);
      if (family != 0 && pass == 1) break;
      for (const Candidate& c : tier) {
        if (c.addr.family() != want) continue;
        *out = c.addr;
        if (ifname_out != nullptr) *ifname_out = c.ifname;
        return Status::Ok();
      }
    }
  }
  return errorf(Code::kSystemError,
                "no network interface matches SKETCHCCL_SOCKET_IFNAME='%s'%s (interfaces up: %s)",
                spec.c_str(),
                family == AF_INET ? " with IPv4" : (family == AF_INET6 ? " with IPv6" : ""),
                [&] {
                  std::string names;
                  for (const Candidate& c : all) {
                    if (names.find(c.ifname) == std::string::npos) {
                      names += names.empty() ? c.ifname : "," + c.ifname;
                    }
                  }
                  return names.empty() ? std::string("none") : names;
                }()
                    .c_str());
}

Status set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return errorf(Code::kSystemError, "fcntl(O_NONBLOCK) failed: %s", std::strerror(errno));
  }
  return Status::Ok();
}

bool tune_stream(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  constexpr int kTcpRtoMaxMs = 44;  // TCP_RTO_MAX_MS (Linux 6.15), absent from older headers
  int cap = kRetransmitCapMs;
  return setsockopt(fd, IPPROTO_TCP, kTcpRtoMaxMs, &cap, sizeof cap) == 0;
}

Status listen_on(const SockAddr& addr, int backlog, Fd* fd, SockAddr* bound) {
  Fd s(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s.valid()) return errorf(Code::kSystemError, "socket() failed: %s", std::strerror(errno));
  int one = 1;
  (void)setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&addr.ss), addr.len) != 0) {
    return errorf(Code::kSystemError, "cannot bind to %s: %s", addr.to_string().c_str(),
                  std::strerror(errno));
  }
  if (::listen(s.get(), backlog) != 0) {
    return errorf(Code::kSystemError, "listen on %s failed: %s", addr.to_string().c_str(),
                  std::strerror(errno));
  }
  SockAddr b;
  b.len = sizeof b.ss;
  if (getsockname(s.get(), reinterpret_cast<sockaddr*>(&b.ss), &b.len) != 0) {
    return errorf(Code::kSystemError, "getsockname failed: %s", std::strerror(errno));
  }
  *bound = b;
  *fd = std::move(s);
  return Status::Ok();
}

namespace {

int poll_ms_until(double deadline) {
  double left = deadline - now_s();
  if (left <= 0) return 0;
  double ms = std::ceil(left * 1000.0);
  return ms > 100000 ? 100000 : static_cast<int>(ms);
}

}  // namespace

Status connect_to(const SockAddr& addr, double deadline, bool retry_refused, Fd* fd) {
  std::string last_error = "timed out";
  double start = now_s();
  while (true) {
    Fd s(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s.valid()) return errorf(Code::kSystemError, "socket() failed: %s", std::strerror(errno));
    int rc = ::connect(s.get(), reinterpret_cast<const sockaddr*>(&addr.ss), addr.len);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      while (true) {
        pollfd p{s.get(), POLLOUT, 0};
        int ms = poll_ms_until(deadline);
        int n = ::poll(&p, 1, ms);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) {
          return errorf(Code::kRemoteError, "timeout after %.1f s connecting to %s (%s)",
                        now_s() - start, addr.to_string().c_str(), last_error.c_str());
        }
        socklen_t l = sizeof err;
        if (getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &l) != 0) err = errno;
        break;
      }
    }
    if (err == 0) {
      tune_stream(s.get());
      *fd = std::move(s);
      return Status::Ok();
    }
    last_error = std::strerror(err);
    bool retryable = retry_refused && (err == ECONNREFUSED || err == ETIMEDOUT ||
                                       err == ECONNRESET || err == EAGAIN);
    if (!retryable) {
      return errorf(Code::kRemoteError, "cannot connect to %s: %s", addr.to_string().c_str(),
                    last_error.c_str());
    }
    if (now_s() + 0.05 >= deadline) {
      return errorf(Code::kRemoteError, "timeout after %.1f s connecting to %s (last error: %s)",
                    now_s() - start, addr.to_string().c_str(), last_error.c_str());
    }
    ::usleep(50000);
  }
}

Status send_all(int fd, const void* buf, size_t len, double deadline, const char* what) {
  const auto* p = static_cast<const uint8_t*>(buf);
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::send(fd, p + done, len - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      int ms = poll_ms_until(deadline);
      if (ms == 0 && now_s() >= deadline) {
        return errorf(Code::kRemoteError, "timeout sending %s", what);
      }
      (void)::poll(&pf, 1, ms);
      continue;
    }
    return errorf(Code::kRemoteError, "sending %s failed: %s", what,
                  n == 0 ? "connection closed" : std::strerror(errno));
  }
  return Status::Ok();
}

Status recv_all(int fd, void* buf, size_t len, double deadline, const char* what) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::recv(fd, p + done, len - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return errorf(Code::kRemoteError, "%s: the peer closed the connection after %zu of %zu bytes",
                    what, done, len);
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd pf{fd, POLLIN, 0};
      int ms = poll_ms_until(deadline);
      if (ms == 0 && now_s() >= deadline) {
        return errorf(Code::kRemoteError, "timeout waiting for %s (%zu of %zu bytes)", what, done,
                      len);
      }
      (void)::poll(&pf, 1, ms);
      continue;
    }
    return errorf(Code::kRemoteError, "receiving %s failed: %s", what, std::strerror(errno));
  }
  return Status::Ok();
}

uint64_t random_u64() {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
      std::random_device rd;
      v = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
          static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    }
  }
  return v;
}

std::string interface_of_socket(int fd) {
  SockAddr local;
  local.len = sizeof local.ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local.ss), &local.len) != 0) return "";
  std::string name;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  for (ifaddrs* ifa = list; ifa != nullptr && name.empty(); ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || ifa->ifa_addr->sa_family != local.family()) continue;
    if (local.family() == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr);
      const auto* b = reinterpret_cast<const sockaddr_in*>(&local.ss);
      if (a->sin_addr.s_addr == b->sin_addr.s_addr) name = ifa->ifa_name;
    } else if (local.family() == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr);
      const auto* b = reinterpret_cast<const sockaddr_in6*>(&local.ss);
      if (std::memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) == 0) {
        name = ifa->ifa_name;
      }
    }
  }
  freeifaddrs(list);
  return name;
}

double interface_bytes_per_s(const std::string& ifname) {
  if (ifname.empty() || ifname.find('/') != std::string::npos) return 0;
  FILE* f = std::fopen(("/sys/class/net/" + ifname + "/speed").c_str(), "r");
  if (f == nullptr) return 0;
  long mbits = -1;
  if (std::fscanf(f, "%ld", &mbits) != 1) mbits = -1;
  std::fclose(f);
  return mbits > 0 ? static_cast<double>(mbits) * 1e6 / 8 : 0;
}

}  // namespace sketchccl::transport::net
