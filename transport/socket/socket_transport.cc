#include "transport/socket/socket_transport.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <iterator>
#include <list>
#include <new>
#include <unordered_map>
#include <vector>

#include "src/core/log.h"
#include "transport/socket/net.h"

namespace sketchccl::transport {
namespace {

constexpr uint32_t kBlobMagic = 0x53435342;   // "BSCS": a socket transport address
constexpr uint32_t kHelloMagic = 0x53435348;  // "HSCS": first bytes of a connection
constexpr uint32_t kMsgMagic = 0x5343534d;    // "MSCS": a message header
constexpr size_t kBlobBytes = 4 + 8 + net::kEncodedAddrBytes;
constexpr size_t kHelloBytes = 4 + 4 + 4 + 8;   // magic, from rank, nranks, target instance
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 8;  // magic, reserved, tag, length

struct Request {
  bool send = false;
  int peer = 0;
  uint64_t tag = 0;
  const uint8_t* sbuf = nullptr;
  uint8_t* rbuf = nullptr;
  size_t cap = 0;
  size_t bytes = 0;
  bool done = false;
  Status status;
  double posted = 0;
};

struct OutMsg {
  RequestId id = 0;
  uint8_t header[kHeaderBytes];
  const uint8_t* data = nullptr;
  size_t len = 0;
  size_t off = 0;  // over header + data
};

struct Unexpected {
  uint64_t tag = 0;
  uint64_t announced = 0;  // the header's length (counted against the limit from the start)
  std::vector<uint8_t> data;
  bool complete = false;
  RequestId claimed = 0;  // a receive waiting for this message to finish arriving
};

struct Peer {
  net::Fd fd;
  bool connect_called = false;
  bool failed = false;
  std::string fail_message;
  net::SockAddr addr;
  double last_activity = 0;
  std::deque<OutMsg> sendq;
  std::deque<RequestId> posted;  // receives not yet matched, in posting order
  std::list<Unexpected> unexpected;
  // The message being received.
  uint8_t header[kHeaderBytes];
  size_t header_got = 0;
  bool in_body = false;
  uint64_t body_len = 0, body_got = 0;
  RequestId body_req = 0;            // receiving straight into a posted buffer
  Unexpected* body_unexp = nullptr;  // receiving into an unexpected buffer
  bool body_discard = false;         // truncated: dropping the payload
};

struct Pending {  // an accepted connection whose hello has not fully arrived
  net::Fd fd;
  uint8_t hello[kHelloBytes];
  size_t got = 0;
  double since = 0;
};

class SocketTransport final : public Transport {
 public:
  explicit SocketTransport(const TransportOptions& opts) : opts_(opts), peers_(opts.nranks) {}
  ~SocketTransport() override { close(); }

  Status init() {
    if (opts_.nranks < 1 || opts_.rank < 0 || opts_.rank >= opts_.nranks) {
      return errorf(Code::kInvalidArgument, "socket transport: rank %d outside [0, %d)", opts_.rank,
                    opts_.nranks);
    }
    net::SockAddr local;
    std::string ifname;
    SCCL_RETURN_IF_ERROR(
        net::choose_local_address(opts_.ifname, opts_.address_family, &local, &ifname));
    SCCL_RETURN_IF_ERROR(net::listen_on(local, 1024, &listener_, &bound_));
    instance_ = net::random_u64();
    SCCL_INFO(kLogNet, "socket transport rank %d/%d listening on %s (%s)", opts_.rank, opts_.nranks,
              bound_.to_string().c_str(), ifname.c_str());
    return Status::Ok();
  }

  const char* name() const override { return "socket"; }
  TransportProperties properties() const override {
    TransportProperties p;
    p.tag_bits = 64;  // the tag travels whole in the message header
    p.device_memory = false;
    return p;
  }

  Blob address() const override {
    Blob b(kBlobBytes);
    net::put_u32(b.data(), kBlobMagic);
    net::put_u64(b.data() + 4, instance_);
    net::encode_addr(bound_, b.data() + 12);
    return b;
  }

  Status connect(int peer, const Blob& address) override {
    SCCL_RETURN_IF_ERROR(check_peer(peer, "connect"));
    if (peer == opts_.rank) {
      return errorf(Code::kInvalidArgument, "socket transport: rank %d cannot connect to itself",
                    peer);
    }
    Peer& p = peers_[peer];
    if (p.connect_called) return Status::Ok();
    if (address.size() != kBlobBytes || net::get_u32(address.data()) != kBlobMagic) {
      return errorf(Code::kInvalidArgument,
                    "socket transport: the address of rank %d (%zu bytes) is not a socket "
                    "transport address (ranks using different transports?)",
                    peer, address.size());
    }
    uint64_t instance = net::get_u64(address.data() + 4);
    SCCL_RETURN_IF_ERROR(net::decode_addr(address.data() + 12, address.size() - 12, &p.addr));
    p.connect_called = true;
    p.last_activity = net::now_s();
    if (opts_.rank > peer) return Status::Ok();  // the peer connects to us; accepted in progress()
    net::Fd fd;
    Status st = net::connect_to(p.addr, net::now_s() + opts_.timeout_s, true, &fd);
    if (!st.ok()) {
      fail_peer(peer, "cannot connect to rank " + std::to_string(peer) + ": " + st.message());
      return Status(Code::kRemoteError, p.fail_message);
    }
    uint8_t hello[kHelloBytes];
    net::put_u32(hello, kHelloMagic);
    net::put_u32(hello + 4, static_cast<uint32_t>(opts_.rank));
    net::put_u32(hello + 8, static_cast<uint32_t>(opts_.nranks));
    net::put_u64(hello + 12, instance);
    st = net::send_all(fd.get(), hello, sizeof hello, net::now_s() + opts_.timeout_s,
                       "the socket transport hello");
    if (!st.ok()) {
      fail_peer(peer, "rank " + std::to_string(peer) + ": " + st.message());
      return Status(Code::kRemoteError, p.fail_message);
    }
    p.fd = std::move(fd);
    SCCL_TRACE(kLogNet, "rank %d connected to rank %d at %s", opts_.rank, peer,
               p.addr.to_string().c_str());
    return Status::Ok();
  }

  Status isend(int peer, uint64_t tag, const void* buf, size_t bytes, RequestId* id) override {
    SCCL_RETURN_IF_ERROR(check_post(peer, buf, bytes, id));
    Request r;
    r.send = true;
    r.peer = peer;
    r.tag = tag;
    r.sbuf = static_cast<const uint8_t*>(buf);
    r.bytes = bytes;
    r.posted = net::now_s();
    RequestId rid = next_id_++;
    reqs_.emplace(rid, std::move(r));
    OutMsg m;
    m.id = rid;
    net::put_u32(m.header, kMsgMagic);
    net::put_u32(m.header + 4, 0);
    net::put_u64(m.header + 8, tag);
    net::put_u64(m.header + 16, bytes);
    m.data = static_cast<const uint8_t*>(buf);
    m.len = bytes;
    peers_[peer].sendq.push_back(m);
    *id = rid;
    if (peers_[peer].fd.valid() && peers_[peer].sendq.size() == 1) flush_sends(peer);
    return Status::Ok();
  }

  Status irecv(int peer, uint64_t tag, void* buf, size_t bytes, RequestId* id) override {
    // A peer that closed (or died) after sending may have left whole messages behind: those
    // are still delivered; only a receive nothing can satisfy fails.
    SCCL_RETURN_IF_ERROR(check_post(peer, buf, bytes, id, /*allow_failed=*/true));
    Peer& p = peers_[peer];
    if (p.failed) {
      bool buffered = false;
      for (const Unexpected& u : p.unexpected)
        buffered = buffered || (u.tag == tag && u.complete);
      if (!buffered) return Status(Code::kRemoteError, p.fail_message);
    }
    Request r;
    r.peer = peer;
    r.tag = tag;
    r.rbuf = static_cast<uint8_t*>(buf);
    r.cap = bytes;
    r.posted = net::now_s();
    RequestId rid = next_id_++;
    auto it = reqs_.emplace(rid, std::move(r)).first;
    *id = rid;
    for (auto u = p.unexpected.begin(); u != p.unexpected.end(); ++u) {
      if (u->tag != tag || u->claimed != 0) continue;
      if (u->complete) {
        deliver_unexpected(it->second, *u);
        drop_unexpected(p, u);
      } else {
        u->claimed = rid;
      }
      return Status::Ok();
    }
    p.posted.push_back(rid);
    return Status::Ok();
  }

  // The fds progress() serves: listener, pending hellos, then live peers (their ranks in
  // peer_of), each with the events it waits for.
  void poll_set(std::vector<pollfd>* fds, std::vector<int>* peer_of) const {
    fds->clear();
    fds->push_back({listener_.get(), POLLIN, 0});
    for (const Pending& pd : pending_)
      fds->push_back({pd.fd.get(), POLLIN, 0});
    if (peer_of) peer_of->clear();
    for (int i = 0; i < opts_.nranks; ++i) {
      const Peer& p = peers_[i];
      if (!p.fd.valid() || p.failed) continue;
      short ev = POLLIN;
      if (!p.sendq.empty()) ev |= POLLOUT;
      fds->push_back({p.fd.get(), ev, 0});
      if (peer_of) peer_of->push_back(i);
    }
  }

  bool can_block() const override { return opts_.wait != "spin"; }

  Status wait_for_events(double max_s) override {
    if (closed_ || !can_block() || !(max_s > 0)) return Status::Ok();
    std::vector<pollfd> fds;
    poll_set(&fds, nullptr);
    const double s = max_s < 1.0 ? max_s : 1.0;
    timespec ts;
    ts.tv_sec = 0;
    ts.tv_nsec = long(s * 1e9);
    if (::ppoll(fds.data(), fds.size(), &ts, nullptr) < 0 && errno != EINTR) {
      return errorf(Code::kSystemError, "socket transport: poll failed: %s", std::strerror(errno));
    }
    return Status::Ok();  // progress() reads what woke it
  }

  Status progress() override {
    if (closed_) return Status::Ok();
    std::vector<pollfd> fds;
    std::vector<int> peer_of;
    poll_set(&fds, &peer_of);
    int n = ::poll(fds.data(), fds.size(), 0);
    if (n < 0 && errno != EINTR) {
      return errorf(Code::kSystemError, "socket transport: poll failed: %s", std::strerror(errno));
    }
    if (n > 0) {
      size_t base = 1 + pending_.size();
      for (size_t k = 0; k < peer_of.size(); ++k) {
        short re = fds[base + k].revents;
        int peer = peer_of[k];
        if (re & (POLLIN | POLLHUP | POLLERR)) read_peer(peer);
        if ((re & POLLOUT) && !peers_[peer].failed) flush_sends(peer);
      }
      // Pending hellos (indices 1..), then new connections.
      for (size_t k = pending_.size(); k-- > 0;) {
        if (fds[1 + k].revents != 0) read_hello(k);
      }
      if (fds[0].revents & POLLIN) accept_new();
    }
    check_timeouts();
    return Status::Ok();
  }

  Status test(RequestId id, bool* done, size_t* bytes) override {
    auto it = reqs_.find(id);
    if (it == reqs_.end()) {
      return errorf(Code::kInvalidArgument, "socket transport: unknown request %llu",
                    static_cast<unsigned long long>(id));
    }
    Request& r = it->second;
    if (!r.done) {
      *done = false;
      return Status::Ok();
    }
    *done = true;
    if (bytes != nullptr) *bytes = r.bytes;
    Status st = r.status;
    reqs_.erase(it);
    return st;
  }

  LinkReport link_report(int peer) const override {
    LinkReport r;
    if (peer < 0 || static_cast<size_t>(peer) >= peers_.size() || !peers_[peer].fd.valid()) {
      return r;
    }
    const std::string ifname = net::interface_of_socket(peers_[peer].fd.get());
    r.path = "tcp via " + (ifname.empty() ? std::string("?") : ifname);
    r.nominal_bytes_per_s = net::interface_bytes_per_s(ifname);
    return r;
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    for (auto& kv : reqs_) {
      if (!kv.second.done) {
        kv.second.done = true;
        kv.second.status = Status(Code::kRemoteError, "socket transport closed");
      }
    }
    for (Peer& p : peers_) {
      p.fd.reset();
      p.sendq.clear();
      p.posted.clear();
      while (!p.unexpected.empty())
        drop_unexpected(p, p.unexpected.begin());
    }
    pending_.clear();
    listener_.reset();
  }

 private:
  Status check_peer(int peer, const char* what) const {
    if (closed_) return errorf(Code::kInvalidUsage, "socket transport: %s after close", what);
    if (peer < 0 || peer >= opts_.nranks) {
      return errorf(Code::kInvalidArgument, "socket transport: %s: peer %d outside [0, %d)", what,
                    peer, opts_.nranks);
    }
    return Status::Ok();
  }

  Status check_post(int peer, const void* buf, size_t bytes, RequestId* id,
                    bool allow_failed = false) {
    SCCL_RETURN_IF_ERROR(check_peer(peer, "post"));
    if (id == nullptr || (buf == nullptr && bytes != 0)) {
      return errorf(Code::kInvalidArgument, "socket transport: null buffer or request id");
    }
    Peer& p = peers_[peer];
    if (!p.connect_called) {
      return errorf(Code::kInvalidUsage, "socket transport: rank %d is not connected", peer);
    }
    if (p.failed && !allow_failed) return Status(Code::kRemoteError, p.fail_message);
    return Status::Ok();
  }

  void complete(RequestId id, Status st, size_t bytes) {
    auto it = reqs_.find(id);
    if (it == reqs_.end() || it->second.done) return;
    it->second.done = true;
    it->second.status = std::move(st);
    it->second.bytes = bytes;
  }

  void drop_unexpected(Peer& p, std::list<Unexpected>::iterator u) {
    unexpected_bytes_ -= u->announced;
    p.unexpected.erase(u);
  }

  void deliver_unexpected(Request& r, const Unexpected& u) {
    r.done = true;
    if (u.data.size() > r.cap) {
      r.status = errorf(Code::kInvalidArgument,
                        "socket transport: message of %zu bytes from rank %d (tag %llu) is larger "
                        "than the receive buffer of %zu bytes",
                        u.data.size(), r.peer, static_cast<unsigned long long>(r.tag), r.cap);
      return;
    }
    if (!u.data.empty()) std::memcpy(r.rbuf, u.data.data(), u.data.size());
    r.bytes = u.data.size();
  }

  void fail_peer(int peer, const std::string& msg) {
    Peer& p = peers_[peer];
    if (p.failed) return;
    p.failed = true;
    p.fail_message = msg;
    p.fd.reset();
    p.sendq.clear();
    p.posted.clear();
    // Whole messages that arrived before the close stay deliverable; a partial one is lost.
    for (auto u = p.unexpected.begin(); u != p.unexpected.end();) {
      auto next = std::next(u);
      if (!u->complete) drop_unexpected(p, u);
      u = next;
    }
    p.body_unexp = nullptr;
    p.in_body = false;
    for (auto& kv : reqs_) {
      if (kv.second.peer == peer && !kv.second.done) {
        kv.second.done = true;
        kv.second.status = Status(Code::kRemoteError, msg);
      }
    }
    SCCL_INFO(kLogNet, "socket transport rank %d: %s", opts_.rank, msg.c_str());
  }

  void flush_sends(int peer) {
    Peer& p = peers_[peer];
    while (!p.sendq.empty() && !p.failed) {
      OutMsg& m = p.sendq.front();
      iovec iov[2];
      int cnt = 0;
      if (m.off < kHeaderBytes) {
        iov[cnt++] = {m.header + m.off, kHeaderBytes - m.off};
        if (m.len > 0) iov[cnt++] = {const_cast<uint8_t*>(m.data), m.len};
      } else {
        size_t doff = m.off - kHeaderBytes;
        iov[cnt++] = {const_cast<uint8_t*>(m.data + doff), m.len - doff};
      }
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = cnt;
      ssize_t n = ::sendmsg(p.fd.get(), &mh, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        fail_peer(peer, "rank " + std::to_string(peer) + " (" + p.addr.to_string() +
                            ") is gone: send failed: " + std::strerror(errno));
        return;
      }
      p.last_activity = net::now_s();
      m.off += static_cast<size_t>(n);
      if (m.off == kHeaderBytes + m.len) {
        complete(m.id, Status::Ok(), m.len);
        p.sendq.pop_front();
      }
    }
  }

  // Starts the body of a message whose header has arrived.
  bool start_body(int peer) {
    Peer& p = peers_[peer];
    if (net::get_u32(p.header) != kMsgMagic) {
      fail_peer(peer, "socket transport: corrupt message header from rank " + std::to_string(peer));
      return false;
    }
    uint64_t tag = net::get_u64(p.header + 8);
    p.body_len = net::get_u64(p.header + 16);
    p.body_got = 0;
    p.body_req = 0;
    p.body_unexp = nullptr;
    p.body_discard = false;
    p.in_body = true;
    for (auto it = p.posted.begin(); it != p.posted.end(); ++it) {
      Request& r = reqs_.at(*it);
      if (r.tag != tag) continue;
      RequestId rid = *it;
      p.posted.erase(it);
      if (p.body_len > r.cap) {
        complete(rid,
                 errorf(Code::kInvalidArgument,
                        "socket transport: message of %llu bytes from rank %d (tag %llu) is "
                        "larger than the receive buffer of %zu bytes",
                        static_cast<unsigned long long>(p.body_len), peer,
                        static_cast<unsigned long long>(tag), r.cap),
                 0);
        p.body_discard = true;
      } else {
        p.body_req = rid;
      }
      break;
    }
    if (p.body_req == 0 && !p.body_discard) {
      // Held until a receive is posted. Memory grows as the bytes arrive (a header alone
      // allocates nothing), and all such messages together stay within the limit.
      if (unexpected_bytes_ + p.body_len > opts_.max_unexpected_bytes) {
        fail_peer(peer, "socket transport: rank " + std::to_string(peer) + " sent a message of " +
                            std::to_string(p.body_len) + " bytes that no receive was posted for, " +
                            "beyond the " + std::to_string(opts_.max_unexpected_bytes) +
                            " bytes held for such messages (SKETCHCCL_SOCKET_BUFFER_LIMIT)");
        return false;
      }
      p.unexpected.emplace_back();
      p.body_unexp = &p.unexpected.back();
      p.body_unexp->tag = tag;
      p.body_unexp->announced = p.body_len;
      unexpected_bytes_ += p.body_len;
      try {  // typical packets then arrive without reallocation
        p.body_unexp->data.reserve(std::min<uint64_t>(p.body_len, uint64_t(4) << 20));
      } catch (const std::bad_alloc&) {
        fail_peer(peer, "socket transport: out of memory holding a message from rank " +
                            std::to_string(peer));
        return false;
      }
    }
    return true;
  }

  void finish_body(int peer) {
    Peer& p = peers_[peer];
    p.in_body = false;
    p.header_got = 0;
    if (p.body_req != 0) {
      complete(p.body_req, Status::Ok(), p.body_len);
    } else if (p.body_unexp != nullptr) {
      Unexpected* u = p.body_unexp;
      u->complete = true;
      if (u->claimed != 0) {
        auto it = reqs_.find(u->claimed);
        if (it != reqs_.end()) deliver_unexpected(it->second, *u);
        for (auto li = p.unexpected.begin(); li != p.unexpected.end(); ++li) {
          if (&*li == u) {
            drop_unexpected(p, li);
            break;
          }
        }
      }
    }
    p.body_req = 0;
    p.body_unexp = nullptr;
    p.body_discard = false;
  }

  void read_peer(int peer) {
    Peer& p = peers_[peer];
    uint8_t scratch[65536];
    while (!p.failed) {
      uint8_t* dst;
      size_t want;
      if (!p.in_body) {
        dst = p.header + p.header_got;
        want = kHeaderBytes - p.header_got;
      } else {
        size_t left = p.body_len - p.body_got;
        if (p.body_req != 0) {
          dst = reqs_.at(p.body_req).rbuf + p.body_got;
          want = left;
        } else {  // an unexpected message (appended below) or a discarded payload
          dst = scratch;
          want = left < sizeof scratch ? left : sizeof scratch;
        }
      }
      ssize_t n = want == 0 ? 0 : ::recv(p.fd.get(), dst, want, 0);
      if (want == 0) {
        finish_body(peer);
        continue;
      }
      if (n == 0) {
        fail_peer(peer, "rank " + std::to_string(peer) + " (" + p.addr.to_string() +
                            ") closed the connection (peer gone)");
        return;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        fail_peer(peer, "rank " + std::to_string(peer) + " (" + p.addr.to_string() +
                            ") is gone: " + std::strerror(errno));
        return;
      }
      p.last_activity = net::now_s();
      if (!p.in_body) {
        p.header_got += static_cast<size_t>(n);
        if (p.header_got == kHeaderBytes) {
          if (!start_body(peer)) return;
          if (p.body_len == 0) finish_body(peer);
        }
      } else {
        if (p.body_req == 0 && p.body_unexp != nullptr) {
          try {
            p.body_unexp->data.insert(p.body_unexp->data.end(), scratch, scratch + n);
          } catch (const std::bad_alloc&) {
            fail_peer(peer, "socket transport: out of memory holding a message of " +
                                std::to_string(p.body_len) + " bytes from rank " +
                                std::to_string(peer));
            return;
          }
        }
        p.body_got += static_cast<size_t>(n);
        if (p.body_got == p.body_len) finish_body(peer);
      }
    }
  }

  void accept_new() {
    while (true) {
      int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      net::tune_stream(fd);
      Pending pd;
      pd.fd.reset(fd);
      pd.since = net::now_s();
      pending_.push_back(std::move(pd));
      read_hello(pending_.size() - 1);
    }
  }

  void read_hello(size_t k) {
    Pending& pd = pending_[k];
    ssize_t n = ::recv(pd.fd.get(), pd.hello + pd.got, kHelloBytes - pd.got, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) {
      pending_.erase(pending_.begin() + static_cast<long>(k));
      return;
    }
    pd.got += static_cast<size_t>(n);
    if (pd.got < kHelloBytes) return;
    uint32_t from = net::get_u32(pd.hello + 4);
    uint32_t nranks = net::get_u32(pd.hello + 8);
    uint64_t instance = net::get_u64(pd.hello + 12);
    const char* problem = nullptr;
    if (net::get_u32(pd.hello) != kHelloMagic) {
      problem = "not a socket transport hello";
    } else if (instance != instance_) {
      problem = "meant for another transport instance";
    } else if (nranks != static_cast<uint32_t>(opts_.nranks) || from >= nranks) {
      problem = "rank or rank count does not match";
    } else if (static_cast<int>(from) >= opts_.rank) {
      problem = "from a rank that should have been accepted, not connecting";
    } else if (peers_[from].fd.valid() || peers_[from].failed) {
      problem = "duplicate connection";
    }
    if (problem != nullptr) {
      SCCL_WARN(kLogNet, "socket transport rank %d: rejected a connection claiming rank %u: %s",
                opts_.rank, from, problem);
      pending_.erase(pending_.begin() + static_cast<long>(k));
      return;
    }
    Peer& p = peers_[from];
    p.fd = std::move(pd.fd);
    p.last_activity = net::now_s();
    pending_.erase(pending_.begin() + static_cast<long>(k));
    SCCL_TRACE(kLogNet, "rank %d accepted rank %u", opts_.rank, from);
    if (!p.sendq.empty()) flush_sends(static_cast<int>(from));
  }

  void check_timeouts() {
    double now = net::now_s();
    if (now < next_timeout_check_) return;
    next_timeout_check_ = now + 0.05;
    for (auto& kv : reqs_) {
      const Request& r = kv.second;
      if (r.done) continue;
      const Peer& p = peers_[r.peer];
      double since = r.posted > p.last_activity ? r.posted : p.last_activity;
      if (now - since > opts_.timeout_s) {
        std::string what = p.fd.valid() ? "no progress from rank " + std::to_string(r.peer)
                                        : "rank " + std::to_string(r.peer) + " never connected";
        char buf[64];
        std::snprintf(buf, sizeof buf, " for %.1f s", opts_.timeout_s);
        fail_peer(r.peer, "timeout: " + what + " (" + p.addr.to_string() + ")" + buf +
                              " (SKETCHCCL_TIMEOUT)");
      }
    }
    // Connections that never say hello are dropped after the timeout too.
    for (size_t k = pending_.size(); k-- > 0;) {
      if (now - pending_[k].since > opts_.timeout_s) {
        pending_.erase(pending_.begin() + static_cast<long>(k));
      }
    }
  }

  TransportOptions opts_;
  std::vector<Peer> peers_;
  uint64_t unexpected_bytes_ = 0;  // announced lengths of the messages in every peer's list
  std::deque<Pending> pending_;
  net::Fd listener_;
  net::SockAddr bound_;
  uint64_t instance_ = 0;
  std::unordered_map<RequestId, Request> reqs_;
  RequestId next_id_ = 1;
  bool closed_ = false;
  double next_timeout_check_ = 0;
};

}  // namespace

Status create_socket_transport(const TransportOptions& opts, std::unique_ptr<Transport>* out) {
  auto t = std::make_unique<SocketTransport>(opts);
  SCCL_RETURN_IF_ERROR(t->init());
  *out = std::move(t);
  return Status::Ok();
}

}  // namespace sketchccl::transport
