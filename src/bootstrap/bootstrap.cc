#include "src/bootstrap/bootstrap.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "src/bootstrap/wire.h"
#include "src/core/config.h"
#include "src/core/log.h"
#include "transport/socket/net.h"

namespace sketchccl::bootstrap {
namespace net = transport::net;

namespace {

// Record layout, offsets into the 128-byte id.
constexpr uint32_t kRecordMagic = 0x44494353;  // "SCID"
constexpr size_t kOffMagic = 40;
constexpr size_t kOffVersion = 44;
constexpr size_t kOffAddr = 48;  // net::kEncodedAddrBytes (23)
constexpr size_t kOffSecret = 72;
constexpr size_t kOffChecksum = 80;
constexpr size_t kRecordEnd = 88;

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

struct Record {
  net::SockAddr root;
  uint64_t secret = 0;
};

Status read_record(const uint8_t id[kUniqueIdBytes], Record* out) {
  if (id == nullptr) return errorf(Code::kInvalidArgument, "null unique id");
  if (net::get_u32(id + kOffMagic) != kRecordMagic) {
    return errorf(Code::kInvalidArgument, "the unique id carries no SketchCCL record");
  }
  uint16_t version = net::get_u16(id + kOffVersion);
  if (version != kRecordVersion) {
    return errorf(Code::kInvalidArgument,
                  "the unique id's SketchCCL record has version %u, this build reads %u", version,
                  kRecordVersion);
  }
  if (net::get_u64(id + kOffChecksum) != fnv1a(id + kOffMagic, kOffChecksum - kOffMagic)) {
    return errorf(Code::kInvalidArgument, "the unique id's SketchCCL record is corrupt (checksum)");
  }
  SCCL_RETURN_IF_ERROR(net::decode_addr(id + kOffAddr, net::kEncodedAddrBytes, &out->root));
  out->secret = net::get_u64(id + kOffSecret);
  return Status::Ok();
}

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

// ---------------------------------------------------------------------------------------------
// The root listener.

struct RootConn {
  net::Fd fd;
  std::string from;          // peer address
  std::vector<uint8_t> buf;  // frame + body as it arrives
  size_t need = wire::kFrameBytes;
  bool have_len = false;
  double since = 0;
  int rank = -1;  // once accepted
};

class Root {
 public:
  Root(net::Fd listener, net::SockAddr addr, uint64_t secret, double timeout_s)
      : listener_(std::move(listener)), addr_(addr), secret_(secret), timeout_s_(timeout_s) {}

  void run(const std::atomic<bool>* stop);

 private:
  void accept_new();
  // Returns false when the connection is finished (to be dropped).
  bool read_conn(RootConn& c);
  bool handle_hello(RootConn& c);
  void reject(RootConn& c, const std::string& why);
  void finish_ok();
  void finish_error(const std::string& why);

  net::Fd listener_;
  net::SockAddr addr_;
  uint64_t secret_;
  double timeout_s_;
  std::vector<std::unique_ptr<RootConn>> conns_;
  int nranks_ = -1;
  std::vector<RootConn*> by_rank_;
  std::vector<wire::Hello> hellos_;
  int joined_ = 0;
  double first_arrival_ = 0;
  bool finished_ = false;
  std::string abandoned_;  // why a rank cannot join: every rank, late ones too, is told so
};

void Root::run(const std::atomic<bool>* stop) {
  SCCL_INFO(kLogBoot, "bootstrap root listening on %s", addr_.to_string().c_str());
  while (!finished_ && !stop->load()) {
    std::vector<pollfd> fds;
    fds.push_back({listener_.get(), POLLIN, 0});
    for (auto& c : conns_)
      fds.push_back({c->fd.get(), POLLIN, 0});
    int n = ::poll(fds.data(), fds.size(), 100);
    if (n < 0 && errno != EINTR) {
      finish_error(std::string("bootstrap root: poll failed: ") + std::strerror(errno));
      break;
    }
    double now = net::now_s();
    if (n > 0) {
      // Existing connections first (indices shift once we erase, so walk by pointer).
      std::vector<RootConn*> ready;
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) ready.push_back(conns_[i - 1].get());
      }
      for (RootConn* c : ready) {
        if (finished_) break;
        if (!read_conn(*c)) {
          if (c->rank >= 0) {
            SCCL_WARN(kLogBoot, "bootstrap root: rank %d (%s) left before the table was sent",
                      c->rank, c->from.c_str());
            by_rank_[c->rank] = nullptr;
            --joined_;
          }
          conns_.erase(
              std::remove_if(conns_.begin(), conns_.end(),
                             [c](const std::unique_ptr<RootConn>& p) { return p.get() == c; }),
              conns_.end());
        }
      }
      if (!finished_ && (fds[0].revents & POLLIN)) accept_new();
    }
    if (finished_) break;
    // Connections that never complete their hello are dropped.
    double idle_limit = std::min(timeout_s_, 30.0);
    for (size_t i = conns_.size(); i-- > 0;) {
      RootConn& c = *conns_[i];
      if (c.rank < 0 && now - c.since > idle_limit) {
        SCCL_WARN(kLogBoot,
                  "bootstrap root: dropped a connection from %s: no complete hello "
                  "within %s",
                  c.from.c_str(), fmt_seconds(idle_limit).c_str());
        conns_.erase(conns_.begin() + static_cast<long>(i));
      }
    }
    // No deadline before the first rank comes: a framework may init hours after it made the id.
    // Ranks wait timeout_s themselves; the root gives up a little earlier so that they hear
    // which ranks are missing.
    if (!abandoned_.empty() && now - first_arrival_ > 0.8 * timeout_s_) break;
    if (first_arrival_ > 0 && now - first_arrival_ > 0.8 * timeout_s_) {
      std::string missing;
      int count = 0;
      for (int r = 0; r < nranks_; ++r) {
        if (by_rank_[r] != nullptr) continue;
        if (++count <= 16) missing += (missing.empty() ? "" : ",") + std::to_string(r);
      }
      if (count > 16) missing += ",...";
      finish_error("bootstrap: timeout: " + std::to_string(count) + " of " +
                   std::to_string(nranks_) + " ranks (" + missing + ") did not arrive within " +
                   fmt_seconds(0.8 * timeout_s_) + " (SKETCHCCL_TIMEOUT)");
    }
  }
  SCCL_INFO(kLogBoot, "bootstrap root %s exits", addr_.to_string().c_str());
}

void Root::accept_new() {
  while (true) {
    net::SockAddr peer;
    peer.len = sizeof peer.ss;
    int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&peer.ss), &peer.len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (conns_.size() >= 4096 + static_cast<size_t>(nranks_ > 0 ? nranks_ : 0)) {
      SCCL_WARN(kLogBoot, "bootstrap root: too many connections; refused %s",
                peer.to_string().c_str());
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<RootConn>();
    c->fd.reset(fd);
    c->from = peer.to_string();
    c->since = net::now_s();
    c->buf.reserve(256);
    conns_.push_back(std::move(c));
  }
}

bool Root::read_conn(RootConn& c) {
  uint8_t tmp[16384];
  while (true) {
    if (c.rank >= 0) {
      // A joined rank has nothing more to say: only EOF (it left) is expected.
      ssize_t n = ::recv(c.fd.get(), tmp, sizeof tmp, 0);
      if (n == 0) return false;
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      reject(c, "bootstrap: unexpected bytes after the hello");
      return false;
    }
    size_t want = c.need - c.buf.size();
    size_t take = std::min(want, sizeof tmp);
    ssize_t n = ::recv(c.fd.get(), tmp, take, 0);
    if (n == 0) {
      if (!c.buf.empty()) {
        SCCL_WARN(kLogBoot,
                  "bootstrap root: rejected a connection from %s: truncated message (%zu of %zu "
                  "bytes, then the connection closed)",
                  c.from.c_str(), c.buf.size(), c.need);
      }
      return false;
    }
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.buf.insert(c.buf.end(), tmp, tmp + n);
    if (c.buf.size() < c.need) continue;
    if (!c.have_len) {
      uint32_t len = net::get_u32(c.buf.data());
      if (len > wire::kMaxHelloBytes || len < 8) {
        reject(c, "bootstrap: message length " + std::to_string(len) +
                      " is not that of a hello (garbage, or not a SketchCCL rank)");
        return false;
      }
      c.have_len = true;
      c.need = wire::kFrameBytes + len;
      continue;
    }
    return handle_hello(c);
  }
}

bool Root::handle_hello(RootConn& c) {
  wire::Hello h;
  Status st =
      wire::parse_hello(c.buf.data() + wire::kFrameBytes, c.buf.size() - wire::kFrameBytes, &h);
  if (!st.ok()) {
    reject(c, "bootstrap: " + st.message());
    return false;
  }
  if (h.secret != secret_) {
    reject(c, "bootstrap: wrong secret: not a rank of this unique id (stale or foreign id?)");
    return false;
  }
  if (!abandoned_.empty()) {
    reject(c, abandoned_);
    return false;
  }
  if (h.abandon) {
    // The ranks waiting are told now; the root stays up until its usual deadline to tell those
    // still coming (a refused connection would have them retry until their timeout).
    const std::string why(h.blob.begin(), h.blob.end());
    abandoned_ = "bootstrap: rank " + std::to_string(h.rank) + " of " + std::to_string(h.nranks) +
                 " cannot join: " + why;
    SCCL_WARN(kLogBoot, "%s", abandoned_.c_str());
    if (first_arrival_ == 0) first_arrival_ = net::now_s();
    for (RootConn*& waiting : by_rank_) {
      if (waiting == nullptr) continue;
      reject(*waiting, abandoned_);
      waiting->fd.reset();  // dropped at its next poll: the rank has its answer
      waiting = nullptr;
    }
    joined_ = 0;
    return false;
  }
  if (nranks_ < 0) {
    nranks_ = static_cast<int>(h.nranks);
    by_rank_.assign(nranks_, nullptr);
    hellos_.resize(nranks_);
    first_arrival_ = net::now_s();
  } else if (static_cast<int>(h.nranks) != nranks_) {
    reject(c, "bootstrap: rank " + std::to_string(h.rank) + " says there are " +
                  std::to_string(h.nranks) + " ranks, the first rank said " +
                  std::to_string(nranks_) + " (mismatched rank count)");
    return false;
  }
  if (h.rank >= static_cast<uint32_t>(nranks_)) {
    reject(c, "bootstrap: rank " + std::to_string(h.rank) + " is outside [0, " +
                  std::to_string(nranks_) + ")");
    return false;
  }
  if (by_rank_[h.rank] != nullptr) {
    reject(c, "bootstrap: duplicate rank " + std::to_string(h.rank) + " (already joined from " +
                  by_rank_[h.rank]->from + ")");
    return false;
  }
  c.rank = static_cast<int>(h.rank);
  by_rank_[h.rank] = &c;
  hellos_[h.rank] = std::move(h);
  ++joined_;
  SCCL_TRACE(kLogBoot, "bootstrap root: rank %d of %d joined from %s (%d/%d)", c.rank, nranks_,
             c.from.c_str(), joined_, nranks_);
  if (joined_ == nranks_) finish_ok();
  return true;
}

void Root::reject(RootConn& c, const std::string& why) {
  SCCL_WARN(kLogBoot, "bootstrap root %s: rejected a connection from %s: %s",
            addr_.to_string().c_str(), c.from.c_str(), why.c_str());
  std::vector<uint8_t> msg = wire::encode_error(why);
  // Best effort, briefly: a stranger that does not read must not stall the root.
  (void)net::send_all(c.fd.get(), msg.data(), msg.size(), net::now_s() + 0.2, "an error reply");
}

void Root::finish_ok() {
  std::vector<std::vector<uint8_t>> blobs(nranks_);
  std::vector<uint64_t> hashes(nranks_);
  for (int r = 0; r < nranks_; ++r) {
    blobs[r] = hellos_[r].blob;
    hashes[r] = hellos_[r].config_hash;
  }
  std::vector<uint8_t> table = wire::encode_table(blobs, hashes);
  double deadline = net::now_s() + timeout_s_;
  for (int r = 0; r < nranks_; ++r) {
    Status st = net::send_all(by_rank_[r]->fd.get(), table.data(), table.size(), deadline,
                              "the bootstrap table");
    if (!st.ok()) {
      SCCL_WARN(kLogBoot, "bootstrap root: rank %d: %s", r, st.message().c_str());
    }
  }
  SCCL_INFO(kLogBoot, "bootstrap root %s: all %d ranks joined; table of %zu bytes sent",
            addr_.to_string().c_str(), nranks_, table.size());
  finished_ = true;
}

void Root::finish_error(const std::string& why) {
  SCCL_WARN(kLogBoot, "%s", why.c_str());
  std::vector<uint8_t> msg = wire::encode_error(why);
  double deadline = net::now_s() + 1.0;
  for (int r = 0; r < nranks_; ++r) {
    if (by_rank_[r] == nullptr) continue;
    (void)net::send_all(by_rank_[r]->fd.get(), msg.data(), msg.size(), deadline, "an error reply");
  }
  finished_ = true;
}

// Root threads of this process: stopped and joined at exit (in the process that made them).
struct RootThread {
  std::thread thread;
  std::shared_ptr<std::atomic<bool>> stop;
  std::shared_ptr<std::atomic<bool>> running;
  uint64_t secret = 0;  // of its record: which id it serves
};

class RootRegistry {
 public:
  static RootRegistry& get() {
    static RootRegistry r;
    return r;
  }
  void add(RootThread t) {
    std::lock_guard<std::mutex> lock(mu_);
    reap_locked();
    threads_.push_back(std::move(t));
  }
  size_t active() {
    std::lock_guard<std::mutex> lock(mu_);
    reap_locked();
    return threads_.size();
  }
  bool running(uint64_t secret) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const RootThread& t : threads_) {
      if (t.secret == secret && t.running->load()) return true;
    }
    return false;
  }
  bool release(uint64_t secret) {
    std::lock_guard<std::mutex> lock(mu_);
    bool found = false;
    for (RootThread& t : threads_) {
      if (t.secret != secret || !t.running->load()) continue;
      t.stop->store(true);  // reaped (joined) by the next add() or active()
      found = true;
    }
    return found;
  }
  ~RootRegistry() {
    std::lock_guard<std::mutex> lock(mu_);
    for (RootThread& t : threads_) {
      if (getpid() != pid_) {
        // A forked child: the thread does not exist here; forget the handle.
        new std::thread(std::move(t.thread));
        continue;
      }
      t.stop->store(true);
      if (t.thread.joinable()) t.thread.join();
    }
  }

 private:
  void reap_locked() {
    if (getpid() != pid_) return;
    for (size_t i = threads_.size(); i-- > 0;) {
      if (!threads_[i].running->load()) {
        if (threads_[i].thread.joinable()) threads_[i].thread.join();
        threads_.erase(threads_.begin() + static_cast<long>(i));
      }
    }
  }
  std::mutex mu_;
  std::vector<RootThread> threads_;
  pid_t pid_ = getpid();
};

}  // namespace

Options::Options(const Config& cfg)
    : timeout_s(cfg.get_double(Var::kTimeout)), ifname(cfg.get_string(Var::kSocketIfname)) {}

Options Options::from_config() {
  Options o(Config::global());
  o.ifname = socket_ifname(Config::global());
  return o;
}

std::string socket_ifname(const Config& cfg) {
  const std::string& own = cfg.get_string(Var::kSocketIfname);
  if (!own.empty()) return own;
  const char* nccl = std::getenv("NCCL_SOCKET_IFNAME");
  return nccl != nullptr ? nccl : "";
}

Status create_root(uint8_t id[kUniqueIdBytes], const Options& opts) {
  if (id == nullptr) return errorf(Code::kInvalidArgument, "create_root: null id");
  if (!(opts.timeout_s > 0)) {
    return errorf(Code::kInvalidArgument, "bootstrap timeout must be positive, got %g",
                  opts.timeout_s);
  }
  net::SockAddr local, bound;
  std::string ifname;
  SCCL_RETURN_IF_ERROR(
      net::choose_local_address(opts.ifname, opts.address_family, &local, &ifname));
  net::Fd listener;
  SCCL_RETURN_IF_ERROR(net::listen_on(local, 4096, &listener, &bound));
  uint64_t secret = net::random_u64();

  std::memset(id + kRecordOffset, 0, kUniqueIdBytes - kRecordOffset);
  net::put_u32(id + kOffMagic, kRecordMagic);
  net::put_u16(id + kOffVersion, kRecordVersion);
  net::encode_addr(bound, id + kOffAddr);
  net::put_u64(id + kOffSecret, secret);
  net::put_u64(id + kOffChecksum, fnv1a(id + kOffMagic, kOffChecksum - kOffMagic));
  static_assert(kRecordEnd <= kUniqueIdBytes, "record must fit the id");
  static_assert(kOffAddr + net::kEncodedAddrBytes <= kOffSecret, "record layout");

  RootThread t;
  t.secret = secret;
  t.stop = std::make_shared<std::atomic<bool>>(false);
  t.running = std::make_shared<std::atomic<bool>>(true);
  auto root = std::make_shared<Root>(std::move(listener), bound, secret, opts.timeout_s);
  try {
    t.thread = std::thread([root, stop = t.stop, running = t.running] {
      root->run(stop.get());
      running->store(false);
    });
  } catch (const std::exception& e) {
    return errorf(Code::kSystemError, "bootstrap: cannot start the root listener thread: %s",
                  e.what());
  }
  SCCL_INFO(kLogBoot, "bootstrap: root listener on %s (%s)", bound.to_string().c_str(),
            ifname.c_str());
  RootRegistry::get().add(std::move(t));
  return Status::Ok();
}

bool release_root(const uint8_t id[kUniqueIdBytes]) {
  Record r;
  return read_record(id, &r).ok() && RootRegistry::get().release(r.secret);
}

bool has_record(const uint8_t id[kUniqueIdBytes]) {
  Record r;
  return read_record(id, &r).ok();
}

Status describe_record(const uint8_t id[kUniqueIdBytes], std::string* out) {
  Record r;
  SCCL_RETURN_IF_ERROR(read_record(id, &r));
  *out = "root " + r.root.to_string();
  return Status::Ok();
}

Status record_fields(const uint8_t id[kUniqueIdBytes], std::vector<uint8_t>* root_address,
                     uint64_t* secret) {
  Record r;
  SCCL_RETURN_IF_ERROR(read_record(id, &r));
  root_address->resize(net::kEncodedAddrBytes);
  net::encode_addr(r.root, root_address->data());
  *secret = r.secret;
  return Status::Ok();
}

size_t active_root_listeners() {
  return RootRegistry::get().active();
}

bool root_listening(const uint8_t id[kUniqueIdBytes]) {
  Record r;
  return read_record(id, &r).ok() && RootRegistry::get().running(r.secret);
}

bool JoinResult::configs_agree() const {
  for (uint64_t h : config_hashes) {
    if (rank < 0 || rank >= static_cast<int>(config_hashes.size()) || h != config_hashes[rank]) {
      return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Joining.

struct Join::State {
  Record record;
  int rank = 0;
  int nranks = 0;
  transport::Blob address;
  uint64_t config_hash = 0;
  Options opts;

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool cancelled = false;
  int fd = -1;  // the socket to the root while in use (guarded by mu)
  Status status;
  JoinResult result;
  std::thread thread;

  void run();
  Status run_inner(JoinResult* out);
};

Status Join::State::run_inner(JoinResult* out) {
  double start = net::now_s();
  double deadline = start + opts.timeout_s;
  std::string root = record.root.to_string();
  net::Fd fd;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (cancelled) return errorf(Code::kRemoteError, "bootstrap: join cancelled");
    }
    double step = std::min(deadline, net::now_s() + 0.5);
    Status st = net::connect_to(record.root, step, true, &fd);
    if (st.ok()) break;
    if (net::now_s() >= deadline) {
      return errorf(Code::kRemoteError,
                    "bootstrap: timeout after %.1f s: cannot reach the root listener at %s (%s) "
                    "(SKETCHCCL_TIMEOUT)",
                    opts.timeout_s, root.c_str(), st.message().c_str());
    }
    if (st.code() != Code::kRemoteError || st.message().find("timeout") == std::string::npos) {
      if (st.message().find("refused") == std::string::npos &&
          st.message().find("timeout") == std::string::npos) {
        return errorf(Code::kRemoteError, "bootstrap: %s", st.message().c_str());
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    if (cancelled) return errorf(Code::kRemoteError, "bootstrap: join cancelled");
    this->fd = fd.get();
  }
  struct Clear {
    State* s;
    ~Clear() {
      std::lock_guard<std::mutex> lock(s->mu);
      s->fd = -1;
    }
  } clear{this};

  wire::Hello h;
  h.secret = record.secret;
  h.rank = static_cast<uint32_t>(rank);
  h.nranks = static_cast<uint32_t>(nranks);
  h.config_hash = config_hash;
  h.blob = address;
  std::vector<uint8_t> msg = wire::encode_hello(h);
  Status st = net::send_all(fd.get(), msg.data(), msg.size(), deadline, "the bootstrap hello");
  if (!st.ok())
    return errorf(Code::kRemoteError, "bootstrap (root %s): %s", root.c_str(),
                  st.message().c_str());
  uint8_t frame[wire::kFrameBytes];
  st = net::recv_all(fd.get(), frame, sizeof frame, deadline, "the bootstrap table");
  if (!st.ok()) {
    if (st.message().find("timeout") != std::string::npos) {
      return errorf(Code::kRemoteError,
                    "bootstrap: timeout after %.1f s waiting for the other ranks (root %s, rank "
                    "%d of %d; SKETCHCCL_TIMEOUT)",
                    net::now_s() - start, root.c_str(), rank, nranks);
    }
    return errorf(Code::kRemoteError, "bootstrap (root %s): %s", root.c_str(),
                  st.message().c_str());
  }
  uint32_t len = net::get_u32(frame);
  if (len > wire::kMaxReplyBytes) {
    return errorf(Code::kRemoteError,
                  "bootstrap: the root at %s sent a reply of %u bytes (limit "
                  "%zu)",
                  root.c_str(), len, wire::kMaxReplyBytes);
  }
  std::vector<uint8_t> body(len);
  st = net::recv_all(fd.get(), body.data(), len, deadline, "the bootstrap table");
  if (!st.ok())
    return errorf(Code::kRemoteError, "bootstrap (root %s): %s", root.c_str(),
                  st.message().c_str());
  wire::Reply rep;
  st = wire::parse_reply(body.data(), body.size(), &rep);
  if (!st.ok()) {
    return errorf(Code::kRemoteError, "bootstrap: bad reply from the root at %s: %s", root.c_str(),
                  st.message().c_str());
  }
  if (!rep.ok) {
    return errorf(Code::kRemoteError, "bootstrap: rank %d: the root at %s answered: %s", rank,
                  root.c_str(), rep.error.c_str());
  }
  if (rep.blobs.size() != static_cast<size_t>(nranks)) {
    return errorf(Code::kRemoteError, "bootstrap: the root's table has %zu ranks, expected %d",
                  rep.blobs.size(), nranks);
  }
  out->rank = rank;
  out->nranks = nranks;
  out->addresses = std::move(rep.blobs);
  out->config_hashes = std::move(rep.config_hashes);
  return Status::Ok();
}

void Join::State::run() {
  JoinResult res;
  Status st = run_inner(&res);
  bool was_cancelled;
  {
    std::lock_guard<std::mutex> lock(mu);
    was_cancelled = cancelled;
  }
  if (!st.ok() && !was_cancelled) {
    SCCL_WARN(kLogBoot, "rank %d: %s", rank, st.message().c_str());
  } else if (st.ok()) {
    SCCL_INFO(kLogBoot, "rank %d of %d: bootstrap complete", rank, nranks);
  }
  std::lock_guard<std::mutex> lock(mu);
  status = st;
  result = std::move(res);
  done = true;
  cv.notify_all();
}

Status abandon(const uint8_t id[kUniqueIdBytes], int rank, int nranks, const std::string& why,
               const Options& opts) {
  Record rec;
  SCCL_RETURN_IF_ERROR(read_record(id, &rec));
  const double deadline = net::now_s() + std::min(2.0, opts.timeout_s);
  net::Fd fd;
  SCCL_RETURN_IF_ERROR(net::connect_to(rec.root, deadline, false, &fd));
  wire::Hello h;
  h.abandon = true;
  h.secret = rec.secret;
  h.rank = static_cast<uint32_t>(rank);
  h.nranks = static_cast<uint32_t>(nranks);
  h.blob.assign(why.begin(), why.begin() + static_cast<std::ptrdiff_t>(
                                               std::min(why.size(), wire::kMaxErrorBytes)));
  std::vector<uint8_t> msg = wire::encode_hello(h);
  return net::send_all(fd.get(), msg.data(), msg.size(), deadline, "the bootstrap abandon");
}

Status Join::start(const uint8_t id[kUniqueIdBytes], int rank, int nranks,
                   const transport::Blob& address, uint64_t config_hash, const Options& opts,
                   std::unique_ptr<Join>* out) {
  if (out == nullptr) return errorf(Code::kInvalidArgument, "Join::start: null output");
  Record rec;
  SCCL_RETURN_IF_ERROR(read_record(id, &rec));
  if (nranks < 1 || static_cast<uint32_t>(nranks) > wire::kMaxRanks || rank < 0 || rank >= nranks) {
    return errorf(Code::kInvalidArgument, "bootstrap: rank %d outside [0, %d)", rank, nranks);
  }
  if (address.size() > wire::kMaxBlobBytes) {
    return errorf(Code::kInvalidArgument, "bootstrap: transport address of %zu bytes (limit %zu)",
                  address.size(), wire::kMaxBlobBytes);
  }
  if (!(opts.timeout_s > 0)) {
    return errorf(Code::kInvalidArgument, "bootstrap timeout must be positive, got %g",
                  opts.timeout_s);
  }
  auto state = std::make_shared<State>();
  state->record = rec;
  state->rank = rank;
  state->nranks = nranks;
  state->address = address;
  state->config_hash = config_hash;
  state->opts = opts;
  std::unique_ptr<Join> j(new Join());
  j->state_ = state;
  try {
    state->thread = std::thread([s = state.get()] { s->run(); });
  } catch (const std::exception& e) {
    return errorf(Code::kSystemError, "bootstrap: cannot start the join thread: %s", e.what());
  }
  *out = std::move(j);
  return Status::Ok();
}

Join::~Join() {
  if (!state_) return;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->cancelled = true;
    if (state_->fd >= 0) ::shutdown(state_->fd, SHUT_RDWR);
  }
  if (state_->thread.joinable()) state_->thread.join();
}

bool Join::done() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

Status Join::wait(double seconds) {
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->done && seconds > 0) {
    state_->cv.wait_for(lock, std::chrono::duration<double>(seconds),
                        [this] { return state_->done; });
  }
  if (!state_->done) return Status(Code::kInProgress, "bootstrap: join in progress");
  return state_->status;
}

const JoinResult& Join::result() const {
  return state_->result;
}

Status join(const uint8_t id[kUniqueIdBytes], int rank, int nranks, const transport::Blob& address,
            uint64_t config_hash, const Options& opts, JoinResult* out) {
  std::unique_ptr<Join> j;
  SCCL_RETURN_IF_ERROR(Join::start(id, rank, nranks, address, config_hash, opts, &j));
  Status st;
  do {
    st = j->wait(3600);
  } while (st.code() == Code::kInProgress);
  if (st.ok() && out != nullptr) *out = j->result();
  return st;
}

}  // namespace sketchccl::bootstrap
