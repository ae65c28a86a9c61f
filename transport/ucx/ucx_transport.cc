#include "transport/ucx/ucx_transport.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "src/core/log.h"
#include "transport/socket/net.h"
#include "transport/ucx/host_settings.h"
#include "transport/ucx/ucx_api.h"

namespace sketchccl::transport {
namespace {

constexpr uint32_t kBlobMagic = 0x53435855;  // "UXCS": a UCX transport address
constexpr uint64_t kTagMask = (uint64_t{1} << kUcxTagBits) - 1;

// UCX's functions; create_ucx_transport has loaded them before anything here runs.
const UcxApi& ucx() {
  return *load_ucx_api(nullptr);
}

struct UcxRequest {
  bool send = false;
  int peer = 0;
  size_t cap = 0;
  double posted = 0;
  double* peer_activity = nullptr;  // its peer's Peer::last_activity, stamped on completion
  void* ucx = nullptr;              // the UCX request while in flight
  bool ucx_done = false;            // UCX finished with it (buffers free)
  bool done = false;                // as seen by test()
  bool released = false;            // test() returned it; only UCX still refers to it
  Status status;
  size_t bytes = 0;
};

struct PeerCtx;

class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(const TransportOptions& opts) : opts_(opts) {}
  ~UcxTransport() override { close(); }

  Status init();
  const char* name() const override { return "ucx"; }
  TransportProperties properties() const override {
    TransportProperties p;
    p.tag_bits = kUcxTagBits;
    p.device_memory = false;  // posted buffers are host memory; UCX's CUDA support is not used
    return p;
  }
  Blob address() const override { return address_; }
  Status connect(int peer, const Blob& address) override;
  Status isend(int peer, uint64_t tag, const void* buf, size_t bytes, RequestId* id) override;
  Status irecv(int peer, uint64_t tag, void* buf, size_t bytes, RequestId* id) override;
  Status progress() override;
  Status test(RequestId id, bool* done, size_t* bytes) override;
  LinkReport link_report(int peer) const override;
  void close() override;

  void on_peer_error(int peer, ucs_status_t status);

 private:
  struct Peer {
    ucp_ep_h ep = nullptr;
    bool failed = false;
    bool error_reported = false;  // by UCX's error callback, ep must be force-closed
    double last_activity = 0;     // when a transfer to or from this peer last completed
    std::string fail_message;
  };

  Status check_post(int peer, uint64_t tag, const void* buf, size_t bytes, RequestId* id,
                    bool allow_failed = false);
  void fail_peer(int peer, const std::string& msg);
  void close_ep(int peer, bool force);
  void check_timeouts();
  RequestId add(std::unique_ptr<UcxRequest> r) {
    RequestId id = next_id_++;
    reqs_.emplace(id, std::move(r));
    return id;
  }

  TransportOptions opts_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  Blob address_;
  std::vector<Peer> peers_;
  std::vector<std::unique_ptr<PeerCtx>> peer_ctx_;
  std::unordered_map<RequestId, std::unique_ptr<UcxRequest>> reqs_;
  std::list<std::unique_ptr<UcxRequest>> zombies_;  // released by test(), still held by UCX
  RequestId next_id_ = 1;
  bool closed_ = false;
  bool peer_mode_unsupported_ = false;
  double next_timeout_check_ = 0;
};

struct PeerCtx {
  UcxTransport* t;
  int peer;
};

// Keeps UCX's log at FATAL while alive (when `on`). UCX's level is one process-wide variable:
// scopes on several threads share one saved level, and the last to end restores it, so one
// thread can never "restore" another's FATAL for good. (UCX's own threads read the variable
// unlocked, as they always do.)
class QuietUcxLog {
 public:
  explicit QuietUcxLog(bool on) : on_(on) {
    if (!on_) return;
    std::lock_guard<std::mutex> lock(mu());
    if (depth()++ == 0) {
      saved() = ucx().global_opts->log_component.log_level;
      ucx().global_opts->log_component.log_level = UCS_LOG_LEVEL_FATAL;
    }
  }
  ~QuietUcxLog() {
    if (!on_) return;
    std::lock_guard<std::mutex> lock(mu());
    if (--depth() == 0) ucx().global_opts->log_component.log_level = saved();
  }
  QuietUcxLog(const QuietUcxLog&) = delete;
  QuietUcxLog& operator=(const QuietUcxLog&) = delete;

 private:
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static int& depth() {
    static int d = 0;
    return d;
  }
  static ucs_log_level_t& saved() {
    static ucs_log_level_t l = UCS_LOG_LEVEL_WARN;
    return l;
  }
  bool on_;
};

void ep_error_cb(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* c = static_cast<PeerCtx*>(arg);
  c->t->on_peer_error(c->peer, status);
}

// A transfer that completed proves its peer was reachable then: the timeout counts from here.
void note_activity(UcxRequest* r) {
  if (r->peer_activity != nullptr) *r->peer_activity = net::now_s();
}

void send_cb(void*, ucs_status_t status, void* user) {
  auto* r = static_cast<UcxRequest*>(user);
  r->ucx_done = true;
  if (status == UCS_OK) note_activity(r);
  if (!r->done) {
    r->done = true;
    if (status != UCS_OK) {
      r->status = errorf(Code::kRemoteError, "rank %d is gone or unreachable (ucx send: %s)",
                         r->peer, ucx().ucs_status_string(status));
    }
  }
}

void recv_cb(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto* r = static_cast<UcxRequest*>(user);
  r->ucx_done = true;
  if (status == UCS_OK) note_activity(r);
  if (r->done) return;
  r->done = true;
  if (status == UCS_OK) {
    r->bytes = info->length;
  } else if (status == UCS_ERR_MESSAGE_TRUNCATED) {
    r->status = errorf(Code::kInvalidArgument,
                       "ucx: a message from rank %d is larger than the receive buffer of %zu bytes",
                       r->peer, r->cap);
  } else {
    r->status = errorf(Code::kRemoteError, "rank %d is gone or unreachable (ucx receive: %s)",
                       r->peer, ucx().ucs_status_string(status));
  }
}

Status UcxTransport::init() {
  if (opts_.nranks < 1 || opts_.rank < 0 || opts_.rank >= opts_.nranks) {
    return errorf(Code::kInvalidArgument, "ucx transport: rank %d outside [0, %d)", opts_.rank,
                  opts_.nranks);
  }
  if (static_cast<uint64_t>(opts_.nranks) > (uint64_t{1} << (64 - kUcxTagBits))) {
    return errorf(Code::kInvalidArgument, "ucx transport: %d ranks exceed the tag layout",
                  opts_.nranks);
  }
  peers_.resize(opts_.nranks);
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucx().ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) {
    return errorf(Code::kSystemError, "ucx: ucp_config_read failed: %s (check UCX_* variables)",
                  ucx().ucs_status_string(st));
  }
  // UCX's tcp transport completes an in-flight zero-copy send twice when its socket fails
  // (uct_tcp_ep_sendv purges it, then completes it again): a surviving rank aborts on an
  // assertion when a peer dies. So this context sends without zero-copy over tcp: buffered eager
  // sends and rendezvous data (ZCOPY_THRESH, a UCP setting), no tcp PUT (PUT_ENABLE, tcp's
  // alone). Only this context's; a UCX_ZCOPY_THRESH or UCX_TCP_PUT_ENABLE of the user's wins.
  struct Setting {
    const char* key;
    const char* value;
    const char* env;
  };
  for (const Setting& c : {Setting{"ZCOPY_THRESH", "inf", "UCX_ZCOPY_THRESH"},
                           Setting{"PUT_ENABLE", "n", "UCX_TCP_PUT_ENABLE"}}) {
    if (std::getenv(c.env) != nullptr) continue;
    // tcp's own setting only where tcp may open (else UCX warns at every worker).
    if (std::strcmp(c.key, "PUT_ENABLE") == 0 && !ucx_tls_may_use_tcp(std::getenv("UCX_TLS")))
      continue;
    st = ucx().ucp_config_modify(config, c.key, c.value);
    if (st != UCS_OK) {
      SCCL_INFO(kLogNet, "ucx: %s=%s not applied: %s", c.key, c.value, ucx().ucs_status_string(st));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_TAG;
  params.estimated_num_eps = static_cast<size_t>(opts_.nranks);
  st = ucx().ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &context_);
  ucx().ucp_config_release(config);
  if (st != UCS_OK) {
    context_ = nullptr;
    return errorf(Code::kSystemError, "ucx: ucp_init failed: %s", ucx().ucs_status_string(st));
  }
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  st = ucx().ucp_worker_create(context_, &wp, &worker_);
  if (st != UCS_OK) {
    worker_ = nullptr;
    return errorf(Code::kSystemError, "ucx: ucp_worker_create failed: %s",
                  ucx().ucs_status_string(st));
  }
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  st = ucx().ucp_worker_get_address(worker_, &addr, &len);
  if (st != UCS_OK) {
    return errorf(Code::kSystemError, "ucx: ucp_worker_get_address failed: %s",
                  ucx().ucs_status_string(st));
  }
  address_.resize(4 + len);
  net::put_u32(address_.data(), kBlobMagic);
  std::memcpy(address_.data() + 4, addr, len);
  ucx().ucp_worker_release_address(worker_, addr);
  for (int i = 0; i < opts_.nranks; ++i)
    peer_ctx_.push_back(std::make_unique<PeerCtx>(PeerCtx{this, i}));
  SCCL_INFO(kLogNet, "ucx transport rank %d/%d: worker address of %zu bytes", opts_.rank,
            opts_.nranks, len);
  return Status::Ok();
}

Status UcxTransport::connect(int peer, const Blob& address) {
  if (closed_) return errorf(Code::kInvalidUsage, "ucx transport: connect after close");
  if (peer < 0 || peer >= opts_.nranks) {
    return errorf(Code::kInvalidArgument, "ucx transport: connect: peer %d outside [0, %d)", peer,
                  opts_.nranks);
  }
  if (peers_[peer].ep != nullptr) return Status::Ok();
  if (address.size() <= 4 || net::get_u32(address.data()) != kBlobMagic) {
    return errorf(Code::kInvalidArgument,
                  "ucx transport: the address of rank %d (%zu bytes) is not a UCX worker address "
                  "(ranks using different transports?)",
                  peer, address.size());
  }
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(address.data() + 4);
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = ep_error_cb;
  ep.err_handler.arg = peer_ctx_[peer].get();
  ucs_status_t st = UCS_ERR_UNREACHABLE;
  if (!peer_mode_unsupported_) {
    // UCX logs an ERROR when no transport supports PEER mode; that is expected here (we fall
    // back below), so keep UCX quiet for this one call unless the user asked for its logs.
    QuietUcxLog quiet(std::getenv("UCX_LOG_LEVEL") == nullptr);
    st = ucx().ucp_ep_create(worker_, &ep, &peers_[peer].ep);
  }
  if (st == UCS_ERR_UNREACHABLE) {
    peer_mode_unsupported_ = true;
    // UCX 1.13's shared-memory transports (posix, sysv) cannot detect a dead peer; without a
    // transport that can (e.g. UCX_TLS=posix,self), fall back to no error handling: a dead peer
    // is then reported by the timeout (SKETCHCCL_TIMEOUT).
    ep.field_mask &= ~static_cast<uint64_t>(UCP_EP_PARAM_FIELD_ERR_HANDLER);
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    st = ucx().ucp_ep_create(worker_, &ep, &peers_[peer].ep);
    if (st == UCS_OK) {
      SCCL_INFO(kLogNet,
                "ucx transport rank %d: no transport to rank %d detects peer failures; a dead "
                "peer will be reported by the timeout",
                opts_.rank, peer);
    }
  }
  if (st != UCS_OK) {
    peers_[peer].ep = nullptr;
    return errorf(Code::kRemoteError, "ucx: cannot create an endpoint to rank %d: %s", peer,
                  ucx().ucs_status_string(st));
  }
  return Status::Ok();
}

Status UcxTransport::check_post(int peer, uint64_t tag, const void* buf, size_t bytes,
                                RequestId* id, bool allow_failed) {
  if (closed_) return errorf(Code::kInvalidUsage, "ucx transport: post after close");
  if (peer < 0 || peer >= opts_.nranks) {
    return errorf(Code::kInvalidArgument, "ucx transport: peer %d outside [0, %d)", peer,
                  opts_.nranks);
  }
  if (id == nullptr || (buf == nullptr && bytes != 0)) {
    return errorf(Code::kInvalidArgument, "ucx transport: null buffer or request id");
  }
  if (tag > kTagMask) {
    return errorf(Code::kInvalidArgument, "ucx transport: tag %llu does not fit in %d bits",
                  static_cast<unsigned long long>(tag), kUcxTagBits);
  }
  if (peers_[peer].failed) {
    return allow_failed ? Status::Ok() : Status(Code::kRemoteError, peers_[peer].fail_message);
  }
  if (peers_[peer].ep == nullptr) {
    return errorf(Code::kInvalidUsage, "ucx transport: rank %d is not connected", peer);
  }
  return Status::Ok();
}

Status UcxTransport::isend(int peer, uint64_t tag, const void* buf, size_t bytes, RequestId* id) {
  SCCL_RETURN_IF_ERROR(check_post(peer, tag, buf, bytes, id));
  auto r = std::make_unique<UcxRequest>();
  r->send = true;
  r->peer = peer;
  r->posted = net::now_s();
  r->peer_activity = &peers_[peer].last_activity;
  UcxRequest* raw = r.get();
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = send_cb;
  p.user_data = raw;
  uint64_t utag = (static_cast<uint64_t>(opts_.rank) << kUcxTagBits) | tag;
  ucs_status_ptr_t sp = ucx().ucp_tag_send_nbx(peers_[peer].ep, buf, bytes, utag, &p);
  if (UCS_PTR_IS_ERR(sp)) {
    return errorf(Code::kRemoteError, "ucx: send to rank %d failed: %s", peer,
                  ucx().ucs_status_string(UCS_PTR_STATUS(sp)));
  }
  if (sp == nullptr) {
    raw->done = raw->ucx_done = true;
    note_activity(raw);
  } else {
    raw->ucx = sp;
  }
  raw->bytes = bytes;
  *id = add(std::move(r));
  return Status::Ok();
}

Status UcxTransport::irecv(int peer, uint64_t tag, void* buf, size_t bytes, RequestId* id) {
  SCCL_RETURN_IF_ERROR(check_post(peer, tag, buf, bytes, id, /*allow_failed=*/true));
  if (peers_[peer].failed) {
    // A peer that closed (or died) after its last eager sends: what already arrived is still
    // delivered; a receive nothing can satisfy fails now.
    ucp_tag_recv_info_t info{};
    const uint64_t want = (static_cast<uint64_t>(peer) << kUcxTagBits) | tag;
    if (ucx().ucp_tag_probe_nb(worker_, want, ~uint64_t{0}, 0, &info) == nullptr) {
      return Status(Code::kRemoteError, peers_[peer].fail_message);
    }
  }
  auto r = std::make_unique<UcxRequest>();
  r->peer = peer;
  r->cap = bytes;
  r->posted = net::now_s();
  r->peer_activity = &peers_[peer].last_activity;
  UcxRequest* raw = r.get();
  ucp_request_param_t p{};
  // Always a request and a callback (UCX 1.13 leaves recv_info's length at 0 on immediate
  // completion).
  p.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  p.cb.recv = recv_cb;
  p.user_data = raw;
  uint64_t utag = (static_cast<uint64_t>(peer) << kUcxTagBits) | tag;
  ucs_status_ptr_t sp = ucx().ucp_tag_recv_nbx(worker_, buf, bytes, utag, ~uint64_t{0}, &p);
  if (UCS_PTR_IS_ERR(sp)) {
    ucs_status_t s = UCS_PTR_STATUS(sp);
    if (s == UCS_ERR_MESSAGE_TRUNCATED) {
      raw->done = raw->ucx_done = true;
      raw->status = errorf(Code::kInvalidArgument,
                           "ucx: a message from rank %d is larger than the receive buffer of %zu "
                           "bytes",
                           peer, bytes);
    } else {
      return errorf(Code::kRemoteError, "ucx: receive from rank %d failed: %s", peer,
                    ucx().ucs_status_string(s));
    }
  } else if (sp != nullptr) {
    raw->ucx = sp;  // the callback may already have run
  }
  *id = add(std::move(r));
  return Status::Ok();
}

void UcxTransport::on_peer_error(int peer, ucs_status_t status) {
  Peer& p = peers_[peer];
  p.error_reported = true;
  if (!p.failed) {
    p.failed = true;
    p.fail_message = "rank " + std::to_string(peer) +
                     " is gone (ucx endpoint error: " + ucx().ucs_status_string(status) + ")";
    SCCL_INFO(kLogNet, "ucx transport rank %d: %s", opts_.rank, p.fail_message.c_str());
  }
}

void UcxTransport::fail_peer(int peer, const std::string& msg) {
  Peer& p = peers_[peer];
  if (!p.failed) {
    p.failed = true;
    p.fail_message = msg;
    SCCL_INFO(kLogNet, "ucx transport rank %d: %s", opts_.rank, msg.c_str());
  }
  for (auto& kv : reqs_) {
    UcxRequest& r = *kv.second;
    if (r.peer != peer || r.done) continue;
    r.done = true;
    r.status = Status(Code::kRemoteError, p.fail_message);
    if (!r.ucx_done && r.ucx != nullptr) ucx().ucp_request_cancel(worker_, r.ucx);
  }
  // Anything still in flight finishes (with an error) when the endpoint is force-closed.
  if (p.ep != nullptr) close_ep(peer, true);
}

void UcxTransport::close_ep(int peer, bool force) {
  Peer& p = peers_[peer];
  if (p.ep == nullptr) return;
  ucp_request_param_t prm{};
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  prm.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t req = ucx().ucp_ep_close_nbx(p.ep, &prm);
  p.ep = nullptr;
  if (req == nullptr || UCS_PTR_IS_ERR(req)) return;
  double deadline = net::now_s() + (force ? 2.0 : (opts_.timeout_s < 1.0 ? opts_.timeout_s : 1.0));
  while (ucx().ucp_request_check_status(req) == UCS_INPROGRESS && net::now_s() < deadline) {
    ucx().ucp_worker_progress(worker_);
  }
  if (ucx().ucp_request_check_status(req) == UCS_INPROGRESS) {
    // Not flushed in time: the worker's destruction will release it.
    SCCL_INFO(kLogNet, "ucx transport rank %d: closing the endpoint to rank %d timed out",
              opts_.rank, peer);
  }
  ucx().ucp_request_free(req);
}

Status UcxTransport::progress() {
  if (closed_) return Status::Ok();
  while (ucx().ucp_worker_progress(worker_) != 0) {
  }
  for (int i = 0; i < opts_.nranks; ++i) {
    Peer& p = peers_[i];
    if (p.error_reported && p.ep != nullptr) fail_peer(i, p.fail_message);
  }
  // Free what UCX finished with.
  for (auto& kv : reqs_) {
    UcxRequest& r = *kv.second;
    if (r.ucx != nullptr && r.ucx_done) {
      ucx().ucp_request_free(r.ucx);
      r.ucx = nullptr;
    }
  }
  for (auto it = zombies_.begin(); it != zombies_.end();) {
    if ((*it)->ucx_done) {
      ucx().ucp_request_free((*it)->ucx);
      it = zombies_.erase(it);
    } else {
      ++it;
    }
  }
  check_timeouts();
  return Status::Ok();
}

// A request times out when nothing to or from its peer has completed for the timeout, as in the
// socket transport: not by its own age, since a receive posted early (two-shot posts a call's
// receives at its start) can wait out a link outage plus TCP's retransmission back-off while
// its peer's other transfers move.
void UcxTransport::check_timeouts() {
  double now = net::now_s();
  if (now < next_timeout_check_) return;
  next_timeout_check_ = now + 0.05;
  for (auto& kv : reqs_) {
    UcxRequest& r = *kv.second;
    if (r.done) continue;
    const double last = peers_[r.peer].last_activity;
    const double since = r.posted > last ? r.posted : last;
    if (now - since <= opts_.timeout_s) continue;
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "timeout: no %s rank %d completed within %.1f s, nothing to or from it "
                  "either (SKETCHCCL_TIMEOUT)",
                  r.send ? "send to" : "receive from", r.peer, opts_.timeout_s);
    fail_peer(r.peer, buf);
  }
}

Status UcxTransport::test(RequestId id, bool* done, size_t* bytes) {
  auto it = reqs_.find(id);
  if (it == reqs_.end()) {
    return errorf(Code::kInvalidArgument, "ucx transport: unknown request %llu",
                  static_cast<unsigned long long>(id));
  }
  UcxRequest& r = *it->second;
  if (!r.done) {
    *done = false;
    return Status::Ok();
  }
  *done = true;
  if (bytes != nullptr) *bytes = r.bytes;
  Status st = r.status;
  if (r.ucx != nullptr) {
    if (r.ucx_done) {
      ucx().ucp_request_free(r.ucx);
    } else {
      r.released = true;
      zombies_.push_back(std::move(it->second));
    }
  }
  reqs_.erase(it);
  return st;
}

// UCX 1.13 has no query for an endpoint's transports: its printed lanes name them ("tcp/eth0",
// "posix/memory"); the first network lane's device gives the NIC.
LinkReport UcxTransport::link_report(int peer) const {
  LinkReport r;
  if (peer < 0 || static_cast<size_t>(peer) >= peers_.size() || peers_[peer].ep == nullptr) {
    return r;
  }
  char* text = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (f == nullptr) return r;
  ucx().ucp_ep_print_info(peers_[peer].ep, f);
  std::fclose(f);
  const std::string info(text != nullptr ? text : "", len);
  std::free(text);
  r.detail = info;
  const size_t tcp = info.find("tcp/");
  if (tcp != std::string::npos) {
    const size_t end = info.find_first_of(" \t\n", tcp);
    const std::string dev = info.substr(tcp + 4, end == std::string::npos ? end : end - tcp - 4);
    r.path = "ucx tcp via " + dev;
    r.nominal_bytes_per_s = net::interface_bytes_per_s(dev);
  } else if (info.find("/memory") != std::string::npos) {
    r.path = "ucx shared memory";
  } else {
    r.path = "ucx";
  }
  return r;
}

void UcxTransport::close() {
  if (closed_) return;
  closed_ = true;
  if (worker_ != nullptr) {
    // Cancel what is in flight, close every endpoint (flushing those with nothing pending),
    // then wait, bounded, for UCX to finish with every request.
    for (auto& kv : reqs_) {
      UcxRequest& r = *kv.second;
      if (!r.done) {
        r.done = true;
        r.status = Status(Code::kRemoteError, "ucx transport closed");
      }
      if (!r.ucx_done && r.ucx != nullptr) ucx().ucp_request_cancel(worker_, r.ucx);
    }
    for (auto& z : zombies_) {
      if (!z->ucx_done && z->ucx != nullptr) ucx().ucp_request_cancel(worker_, z->ucx);
    }
    auto in_flight = [this](int peer) {
      for (auto& kv : reqs_) {
        if ((peer < 0 || kv.second->peer == peer) && !kv.second->ucx_done) return true;
      }
      for (auto& z : zombies_) {
        if ((peer < 0 || z->peer == peer) && !z->ucx_done) return true;
      }
      return false;
    };
    for (int i = 0; i < opts_.nranks; ++i)
      close_ep(i, peers_[i].failed || in_flight(i));
    // Requests to failed peers may never finish (without PEER error handling UCX cannot tell
    // a dead shared-memory peer); do not wait long for those.
    bool live_in_flight = false;
    for (int i = 0; i < opts_.nranks; ++i) {
      if (!peers_[i].failed && in_flight(i)) live_in_flight = true;
    }
    double deadline = net::now_s() + (live_in_flight ? 2.0 : 0.2);
    while (in_flight(-1) && net::now_s() < deadline)
      ucx().ucp_worker_progress(worker_);
    bool clean = !in_flight(-1);
    for (auto& kv : reqs_) {
      if (kv.second->ucx != nullptr && kv.second->ucx_done) ucx().ucp_request_free(kv.second->ucx);
    }
    for (auto& z : zombies_) {
      if (z->ucx != nullptr && z->ucx_done) ucx().ucp_request_free(z->ucx);
    }
    if (clean) {
      ucx().ucp_worker_destroy(worker_);
    } else {
      // UCX still owns requests (and their callbacks point at ours): destroying the worker
      // now would trip UCX's assertions, so leak the worker, its context and those requests.
      SCCL_WARN(kLogNet,
                "ucx transport rank %d: requests still in flight at close; leaking the UCX "
                "worker",
                opts_.rank);
      for (auto& kv : reqs_)
        (void)kv.second.release();
      for (auto& z : zombies_)
        (void)z.release();
      context_ = nullptr;
    }
    worker_ = nullptr;
  }
  reqs_.clear();
  zombies_.clear();
  if (context_ != nullptr) {
    ucx().ucp_cleanup(context_);
    context_ = nullptr;
  }
}

}  // namespace

Status create_ucx_transport(const TransportOptions& opts, std::unique_ptr<Transport>* out) {
  std::string why;
  if (load_ucx_api(&why) == nullptr) {
    return errorf(Code::kSystemError,
                  "ucx transport: %s (install UCX, or set "
                  "SKETCHCCL_TRANSPORT=socket)",
                  why.c_str());
  }
  auto t = std::make_unique<UcxTransport>(opts);
  SCCL_RETURN_IF_ERROR(t->init());
  *out = std::move(t);
  return Status::Ok();
}

}  // namespace sketchccl::transport
