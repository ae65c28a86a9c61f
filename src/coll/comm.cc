#include "src/coll/comm.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <vector>

#include "src/backend/device_runtime.h"
#include "src/backend/memory_pool.h"
#include "src/bootstrap/bootstrap.h"
#include "src/coll/hierarchy.h"
#include "src/coll/link_probe.h"
#include "src/coll/oom.h"
#include "src/coll/ring_phase.h"
#include "src/coll/schedule_choice.h"
#include "src/core/log.h"

namespace sketchccl::coll {
namespace {

uint64_t hash_bytes(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

std::shared_ptr<Communicator> Communicator::create(const InitArgs& args, const Settings& settings,
                                                   uint64_t config_hash) {
  std::shared_ptr<Communicator> c(new Communicator(args, settings, config_hash));
  c->init_work_ = std::make_shared<Work>([raw = c.get()] { return raw->join(); });
  {
    std::lock_guard<std::mutex> lock(c->mu_);
    c->queue_.push_back(c->init_work_);
  }
  try {
    c->proxy_ = std::thread([raw = c.get()] { raw->proxy_main(); });
  } catch (const std::system_error& e) {
    // No memory for the thread's stack (or no threads left): init fails, the process goes on.
    Status st =
        errorf(Code::kSystemError, "cannot start the proxy thread (out of memory?): %s", e.what());
    c->abandon_join(st);
    {
      std::lock_guard<std::mutex> lock(c->mu_);
      c->stopping_ = true;
      c->queue_.clear();
    }
    c->fail(st);
    c->init_work_->complete(st);
  }
  return c;
}

Communicator::Communicator(const InitArgs& args, const Settings& settings, uint64_t config_hash)
    : rank_(args.rank),
      nranks_(args.nranks),
      cuda_device_(args.cuda_device),
      standalone_(args.standalone),
      nonblocking_(args.nonblocking),
      id_(args.id),
      id_hash_(hash_bytes(args.id.data(), args.id.size())),
      settings_(settings),
      config_hash_(config_hash),
      engine_(settings, args.nranks) {}

Communicator::~Communicator() {
  abort();
}

Status Communicator::async_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return async_error_;
}

void Communicator::fail(const Status& st) {
  std::lock_guard<std::mutex> lock(mu_);
  if (async_error_.ok() || async_error_.code() == Code::kInProgress) async_error_ = st;
}

std::shared_ptr<Work> Communicator::submit(std::function<Status()> fn) {
  auto w = std::make_shared<Work>(std::move(fn));
  enqueue_work(w);
  return w;
}

void Communicator::enqueue_work(const std::shared_ptr<Work>& w) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      queue_.push_back(w);
      cv_.notify_one();
      return;
    }
  }
  w->complete(Status(Code::kInvalidUsage, "communicator is finalized or aborted"));
}

void Communicator::proxy_main() {
  // Named for debuggers and for the emulated runtime's strict mode (the thread that releases the
  // callers' streams must make no CUDA call); marked so that a device runtime call here is counted.
  pthread_setname_np(pthread_self(), "sccl-proxy");
  backend::ProxyThreadMark mark;
  for (;;) {
    std::shared_ptr<Work> w;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) break;
      w = queue_.front();
      queue_.pop_front();
    }
    Status prior = async_error();
    if (abort_.load()) {
      w->complete(Status(Code::kRemoteError, "communicator aborted"));
    } else if (stepped_aside_.load()) {
      // The ring was closed after a failed split exchange; the communicator is not failed.
      w->complete(Status(Code::kRemoteError,
                         "SketchCCL stepped aside from this communicator (a split's membership "
                         "exchange failed)"));
    } else if (!prior.ok() && prior.code() != Code::kInProgress) {
      // A failed communicator runs nothing more: the ring may be out of step.
      w->complete(Status(prior.code(), "communicator failed earlier: " + prior.message()));
    } else {
      Status thrown = run_caught("an operation of the proxy thread", [&w] {
        w->run();
        return Status::Ok();
      });
      if (!thrown.ok()) {
        fail(thrown);
        w->complete(thrown);
      }
      // The peers of a failed communicator learn it now, not at their timeout.
      Status now = async_error();
      if (!now.ok() && now.code() != Code::kInProgress && transport_) transport_->close();
    }
  }
  if (transport_) transport_->close();
  std::lock_guard<std::mutex> lock(mu_);
  proxy_exited_ = true;
  cv_.notify_all();
}

Status Communicator::join() {
  Status st = Status::Ok();
  if (nranks_ > 1) {
    st = run_caught("joining the communicator", [this] { return rendezvous_and_connect(); });
    // A local failure (out of memory, no transport): the others need not wait for this rank.
    if (!st.ok() && st.code() != Code::kRemoteError && !abort_.load()) abandon_join(st);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (st.ok()) {
    async_error_ = Status::Ok();
  } else {
    async_error_ = st;
  }
  return st;
}

void Communicator::abandon_join(const Status& why) {
  if (nranks_ < 2) return;
  Status told = bootstrap::abandon(id_.data(), rank_, nranks_, why.message(),
                                   bootstrap::Options::from_config());
  if (!told.ok()) {
    SCCL_INFO(kLogInit, "rank %d: could not tell the root that this rank cannot join: %s", rank_,
              told.message().c_str());
  }
}

Status Communicator::bootstrap_make_id(UniqueId* id) {
  return bootstrap::create_root(id->data(), bootstrap::Options::from_config());
}

Status Communicator::rendezvous_and_connect() {
  transport::TransportOptions topts = transport::TransportOptions::from_config(rank_, nranks_);
  topts.ifname = bootstrap::socket_ifname(Config::global());  // NCCL_SOCKET_IFNAME as a fallback
  SCCL_RETURN_IF_ERROR(transport::create_transport(topts, &transport_));
  std::unique_ptr<bootstrap::Join> join;
  SCCL_RETURN_IF_ERROR(bootstrap::Join::start(id_.data(), rank_, nranks_, transport_->address(),
                                              config_hash_, bootstrap::Options::from_config(),
                                              &join));
  Status st;
  for (;;) {
    st = join->wait(0.05);
    if (st.code() != Code::kInProgress) break;
    if (abort_.load()) return Status(Code::kRemoteError, "communicator aborted while joining");
  }
  SCCL_RETURN_IF_ERROR(st);
  const bootstrap::JoinResult& table = join->result();
  if (!table.configs_agree()) {
    configs_agree_.store(false);
    if (!standalone_) {
      SCCL_WARN(kLogInit,
                "rank %d: the ranks disagree on the protocol configuration: every call of this "
                "communicator goes to the real NCCL",
                rank_);
      return Status::Ok();
    }
    return Status(Code::kInvalidUsage,
                  "the ranks of this communicator disagree on the protocol configuration "
                  "(SKETCHCCL_CODEC, SLICE_BYTES, ...: see sketchccl-info on each host)");
  }
  addresses_ = table.addresses;
  const int left = (rank_ - 1 + nranks_) % nranks_, right = (rank_ + 1) % nranks_;
  SCCL_RETURN_IF_ERROR(transport_->connect(right, table.addresses[static_cast<size_t>(right)]));
  if (left != right) {
    SCCL_RETURN_IF_ERROR(transport_->connect(left, table.addresses[static_cast<size_t>(left)]));
  }
  SCCL_RETURN_IF_ERROR(discover_topology(table.addresses));
  // Every rank's links are up before any rank's init returns: one that destroys its communicator
  // at once must not leave a peer still connecting to a closed listener (found by the soak).
  uint8_t here = 1;
  std::vector<uint8_t> all(static_cast<size_t>(nranks_));
  SCCL_RETURN_IF_ERROR(allgather_small(&here, sizeof here, all.data()));
  SCCL_RETURN_IF_ERROR(measure_network());
  SCCL_INFO(kLogInit, "rank %d of %d joined over %s", rank_, nranks_, transport_->name());
  return Status::Ok();
}

Status Communicator::measure_network() {
  // A forced codec always compresses, and one node in front of NCCL always forwards.
  if (!settings_.auto_codec || nranks_ < 2 || forwards_one_node()) return Status::Ok();
  // The links the compressed data crosses: the rail's ring where the hierarchy runs, else the ring.
  int to = (rank_ + 1) % nranks_, from = (rank_ - 1 + nranks_) % nranks_;
  if (hierarchical()) {
    const int n = topology_.nodes;
    to = topology_.rail_ranks[static_cast<size_t>((topology_.node + 1) % n)];
    from = topology_.rail_ranks[static_cast<size_t>((topology_.node + n - 1) % n)];
  }
  RankFigures mine;
  SCCL_RETURN_IF_ERROR(measure_link(peer_link(op_seq_++), to, from, settings_, &mine));
  const transport::LinkReport report = transport_->link_report(from);
  mine.nominal_bytes_per_s = report.nominal_bytes_per_s;
  measure_codecs(settings_, &mine);
  if (schedule_trial_applies(settings_, nranks_, hierarchical())) {
    SCCL_RETURN_IF_ERROR(time_schedules(
        settings_, nranks_,
        [this] {
          CommLink l = link();
          ++op_seq_;
          return l;
        },
        &mine));
  }
  std::vector<RankFigures> all(static_cast<size_t>(nranks_));
  SCCL_RETURN_IF_ERROR(allgather_small(&mine, sizeof mine, all.data()));
  network_ = agree_network(settings_, all.data(), nranks_);
  engine_.set_network(network_);
  if (hier_) hier_->rail().set_network(network_);
  if (rank_ == 0) log_verdicts(report.path);
  return Status::Ok();
}

void Communicator::log_verdicts(const std::string& path) const {
  std::string bands;
  for (size_t mib : {1, 4, 16, 64, 256}) {
    const Verdict v = verdict(CallKind::kAllReduce, mib << 18, false);
    char b[200];
    int n = std::snprintf(b, sizeof b, "%s%zu MiB %s (%.3g ms, exact %.3g ms)",
                          bands.empty() ? "" : "; ", mib, kernels::codec_name(v.codec),
                          v.codec_s * 1e3, v.exact_s * 1e3);
    if (!standalone_ && n > 0 && static_cast<size_t>(n) < sizeof b) {
      const Verdict d = verdict(CallKind::kAllReduce, mib << 18, true);
      std::snprintf(
          b + n, sizeof b - static_cast<size_t>(n), ", device buffers %s",
          d.codec == kernels::CodecId::kNone ? "forwarded" : kernels::codec_name(d.codec));
    }
    bands += b;
  }
  SCCL_INFO(kLogInit, "auto: %s over %s; AllReduce verdicts (host buffers%s): %s",
            network_.describe().c_str(), path.empty() ? transport_->name() : path.c_str(),
            standalone_ ? "" : "; none: forwarded to NCCL", bands.c_str());
}

Verdict Communicator::verdict(CallKind kind, size_t count, bool device) const {
  VerdictCall c;
  c.kind = kind;
  c.nranks = nranks_;
  c.ranks_per_node = hierarchical() ? topology_.local_ranks : 1;
  c.count = count;
  c.device = device;
  c.nccl_alone = !standalone_;
  return judge(network_, settings_, c);
}

Status Communicator::discover_topology(const std::vector<transport::Blob>& addresses) {
  std::string source;
  const uint64_t mine = local_host_id(&source);
  std::vector<uint64_t> ids(static_cast<size_t>(nranks_));
  SCCL_RETURN_IF_ERROR(allgather_small(&mine, sizeof mine, ids.data()));
  topology_ = make_topology(rank_, ids);
  const bool hier = settings_.hierarchy && topology_.hierarchical();
  if (rank_ == 0) {
    const char* plan = hier                       ? "hierarchical AllReduce and ReduceScatter"
                       : forwards_one_node()      ? "one node: calls go to NCCL"
                       : topology_.hierarchical() ? "flat ring (SKETCHCCL_HIERARCHY=flat)"
                                                  : "flat ring";
    SCCL_INFO(kLogInit, "topology: %s (%s): %s", topology_.describe().c_str(), source.c_str(),
              plan);
    if (!topology_.uniform) {
      SCCL_WARN(kLogInit,
                "topology: %s: the nodes hold unequal numbers of ranks, so "
                "AllReduces and ReduceScatters run the flat ring over every rank",
                topology_.describe().c_str());
    }
  }
  engine_.set_topology(topology_);
  if (!hier) return Status::Ok();
  hier_ = std::make_unique<HierarchicalReduction>(settings_, topology_);
  // Every rank of the node (the exchanges inside it are direct) and the rail ring's neighbours,
  // each connected once (both sides of a pair call connect).
  std::vector<int> peers = topology_.node_ranks;
  const int n = topology_.nodes;
  for (int d : {n - 1, 1}) {
    const int peer = topology_.rail_ranks[static_cast<size_t>((topology_.node + d) % n)];
    if (std::find(peers.begin(), peers.end(), peer) == peers.end()) peers.push_back(peer);
  }
  const int left = (rank_ - 1 + nranks_) % nranks_, right = (rank_ + 1) % nranks_;
  for (int peer : peers) {
    if (peer == left || peer == right || peer == rank_) continue;
    SCCL_RETURN_IF_ERROR(transport_->connect(peer, addresses[static_cast<size_t>(peer)]));
  }
  return Status::Ok();
}

PeerLink Communicator::peer_link(uint32_t op_seq) {
  PeerLink l;
  static_cast<CommLink&>(l) = link();  // the counters are submit_exact's
  l.op_seq = op_seq;
  return l;
}

CommLink Communicator::link(uint8_t phase) {
  CommLink l;
  l.transport = transport_.get();
  l.rank = rank_;
  l.nranks = nranks_;
  l.timeout_s = settings_.timeout_s;
  l.abort = &abort_;
  l.op_seq = op_seq_;
  l.phase = phase;
  l.addresses = &addresses_;
  return l;
}

// By the call's kind: the hierarchy's phases on several nodes of several ranks, else the flat
// engine's shapes.
Status Communicator::reduce(const CommLink& l, const ReductionArgs& args) {
  const bool hier = args.kind == CallKind::kRail || args.kind == CallKind::kRailReduceScatter ||
                    (hier_ && HierarchicalReduction::takes(args));
  // The hierarchy reads a staged input whole (every chunk of it first) and its result is final
  // at its end: its phases' engines see whole buffers.
  if (hier && args.gate != nullptr) {
    SCCL_RETURN_IF_ERROR(args.gate->need_input(0, args.count * kernels::elem_size(args.type)));
    ReductionArgs whole = args;
    whole.gate = nullptr;
    return reduce(l, whole);
  }
  if (args.kind == CallKind::kRail || args.kind == CallKind::kRailReduceScatter) {
    if (!hier_) return Status(Code::kInternalError, "a rail phase on a flat communicator");
    return run_caught(args.kind == CallKind::kRail ? "a hierarchical AllReduce's rail phase"
                                                   : "a hierarchical ReduceScatter's rail phase",
                      [&] { return hier_->run_rail(l, args, &engine_.stats()); });
  }
  if (hier_ && HierarchicalReduction::takes(args)) {
    return run_caught(args.kind == CallKind::kReduceScatter ? "a hierarchical ReduceScatter"
                                                            : "a hierarchical AllReduce",
                      [&] { return hier_->run(l, args, &engine_.stats()); });
  }
  return engine_.run(l, args);
}

std::shared_ptr<Work> Communicator::submit_reduction(const ReductionArgs& args) {
  return submit_reduce(args);
}

std::shared_ptr<Work> Communicator::submit_reduce(const ReductionArgs& args) {
  return submit([this, args] {
    CommLink l = link();  // each ring of the call takes its phase from its shape
    ++op_seq_;
    Status st = reduce(l, args);
    publish_stats();
    if (!st.ok()) {
      SCCL_WARN(kLogColl, "%s failed: %s", call_kind_name(args.kind), st.to_string().c_str());
      fail(st);
    }
    return st;
  });
}

Status Communicator::allgather(const CommLink& l, const GatherArgs& args, GatherSpan span) {
  if (!gather_backend_) gather_backend_ = backend::make_host_backend();
  GatherSettings gs;
  gs.seed = settings_.seed;
  gs.slice_elems = settings_.slice_elems;
  if (span == GatherSpan::kRail) {
    return run_caught("the rail's compressed AllGather", [&] {
      return rail_allgather(l, topology_, *gather_backend_, args, gs, &gather_stats_);
    });
  }
  if (hierarchical()) {
    return run_caught("a node-aware AllGather", [&] {
      return node_aware_allgather(l, topology_, *gather_backend_, args, gs, &gather_stats_);
    });
  }
  int other_nodes = 0;
  for (int node : topology_.node_of)
    other_nodes += node != topology_.node ? 1 : 0;
  return run_caught("a compressed AllGather", [&] {
    return compressed_allgather(l, *gather_backend_, args, gs, &gather_stats_, other_nodes);
  });
}

std::shared_ptr<Work> Communicator::submit_allgather(const GatherArgs& args) {
  return submit([this, args] {
    CommLink l = link(kPhaseCompressedGather);
    ++op_seq_;
    Status st = allgather(l, args, GatherSpan::kWhole);
    publish_stats();
    if (!st.ok()) {
      SCCL_WARN(kLogColl, "AllGather failed: %s", st.to_string().c_str());
      fail(st);
    }
    return st;
  });
}

std::shared_ptr<Work> Communicator::submit_exact(std::function<Status(const PeerLink&)> fn,
                                                 bool collective) {
  return submit([this, fn = std::move(fn), collective] {
    PeerLink l = peer_link(collective ? op_seq_++ : 0);
    p2p_sent_.resize(static_cast<size_t>(nranks_), 0);
    p2p_received_.resize(static_cast<size_t>(nranks_), 0);
    l.sent = &p2p_sent_;
    l.received = &p2p_received_;
    Status st = fn(l);
    if (!st.ok()) {
      SCCL_WARN(kLogColl, "%s", st.to_string().c_str());
      fail(st);
    }
    return st;
  });
}

Status Communicator::allgather_small(const void* mine, size_t bytes, void* all) {
  Status st = allgather_small_ring(mine, bytes, all);
  // Receives may still be posted into `all`: the communicator is finished, cancel them now.
  if (!st.ok() && transport_) transport_->close();
  return st;
}

Status Communicator::allgather_small_ring(const void* mine, size_t bytes, void* all) {
  CommLink link;
  link.transport = transport_.get();
  link.rank = rank_;
  link.nranks = nranks_;
  link.timeout_s = settings_.timeout_s;
  link.abort = &abort_;
  link.op_seq = nranks_ > 1 ? op_seq_++ : op_seq_;
  link.phase = kPhaseMembership;
  return ring_allgather_small(link, mine, bytes, all);
}

std::shared_ptr<Work> Communicator::submit_split(int color, int key, bool child_nonblocking,
                                                 ChildSlot child) {
  // Runs after the join (same queue), so the decision below is the same on every rank.
  return submit([this, color, key, child_nonblocking, child] {
    *child = nullptr;
    if (!configs_agree_.load()) return Status::Ok();  // forwarded parent: forwarded children
    Status st = split_on_proxy(color, key, child_nonblocking, child.get());
    if (st.ok()) return st;
    if (standalone_) {
      fail(st);  // no real NCCL to fall back to: the closed ring is this communicator's end
    } else {
      stepped_aside_.store(true);
      SCCL_WARN(kLogInit,
                "rank %d: ncclCommSplit's membership exchange failed (%s): this communicator and "
                "the child go to the real NCCL from now on",
                rank_, st.message().c_str());
    }
    return st;
  });
}

Status Communicator::split_on_proxy(int color, int key, bool child_nonblocking,
                                    std::shared_ptr<Communicator>* child) {
  struct Member {
    int32_t color;
    int32_t key;
    int32_t rank;
    int32_t pad;
  };
  Member me{color, key, rank_, 0};
  std::vector<Member> all(static_cast<size_t>(nranks_));
  SCCL_RETURN_IF_ERROR(allgather_small(&me, sizeof me, all.data()));
  // New ranks: members of my color ordered by (key, old rank), as NCCL does.
  std::vector<Member> group;
  for (const Member& m : all) {
    if (m.color == color) group.push_back(m);
  }
  std::sort(group.begin(), group.end(), [](const Member& a, const Member& b) {
    return a.key != b.key ? a.key < b.key : a.rank < b.rank;
  });
  int new_rank = -1;
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i].rank == rank_) new_rank = static_cast<int>(i);
  }
  // The leader (new rank 0) of each color makes the id; everyone learns every leader's id.
  UniqueId mine{};
  const bool no_color = color < 0;
  if (!no_color && new_rank == 0) SCCL_RETURN_IF_ERROR(bootstrap_make_id(&mine));
  std::vector<UniqueId> ids(static_cast<size_t>(nranks_));
  SCCL_RETURN_IF_ERROR(allgather_small(mine.data(), kIdBytes, ids.data()));
  if (no_color) {
    *child = nullptr;
    return Status::Ok();
  }
  InitArgs args;
  args.rank = new_rank;
  args.nranks = static_cast<int>(group.size());
  args.id = ids[static_cast<size_t>(group[0].rank)];
  args.cuda_device = cuda_device_;
  args.standalone = standalone_;
  args.nonblocking = child_nonblocking;
  *child = Communicator::create(args, settings_, config_hash_);
  return Status::Ok();
}

void Communicator::abort() {
  signal_abort();
  if (proxy_.joinable() && proxy_.get_id() != std::this_thread::get_id()) proxy_.join();
}

void Communicator::signal_abort() {
  abort_.store(true);
  std::deque<std::shared_ptr<Work>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
    cv_.notify_all();
  }
  // Outside mu_: a completion hook (the stream gate's release) may take other locks.
  for (auto& w : dropped)
    w->complete(Status(Code::kRemoteError, "communicator aborted"));
}

bool Communicator::join_proxy_within(double seconds) {
  if (!proxy_.joinable() || proxy_.get_id() == std::this_thread::get_id()) return true;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::duration<double>(seconds),
                      [this] { return proxy_exited_; })) {
      lock.unlock();
      proxy_.detach();
      return false;
    }
  }
  proxy_.join();
  return true;
}

Status Communicator::finalize() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (proxy_.joinable() && proxy_.get_id() != std::this_thread::get_id()) proxy_.join();
  Status st = async_error();
  return st.code() == Code::kInProgress ? Status::Ok() : st;
}

void Communicator::publish_stats() {
  engine_.count_memory();
  if (hier_) hier_->rail().count_memory();
  std::lock_guard<std::mutex> lock(stats_mu_);
  published_stats_ = engine_.stats();
  published_stats_.allgather = gather_stats_;
  if (hier_) {
    const CommStats& rail = hier_->rail().stats();
    published_stats_.packet_leased_bytes += rail.packet_leased_bytes;
    published_stats_.packet_peak_bytes += rail.packet_peak_bytes;
  }
}

Status Communicator::release_device_memory() {
  auto w = submit([this] {
    engine_.release_device_memory();
    if (hier_) hier_->rail().release_device_memory();
    publish_stats();
    return Status::Ok();
  });
  Status st = w->wait();
  // The staging blocks go back to the pool once the streams copied their results back; the next
  // device call builds the path again, on its caller's thread (build_device_path_locked).
  std::unique_ptr<backend::DeviceStager> stager;
  {
    std::lock_guard<std::mutex> dlock(device_mu_);
    stager = std::move(stager_);
  }
  stager.reset();
  // Pool memory that no communicator leases goes too, here on the caller's thread (a pinned free
  // is a CUDA call); the others' next calls make the pools hold it again.
  backend::trim_process_pools();
  return st;
}

CommStats Communicator::stats() const {
  CommStats s;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    s = published_stats_;
  }
  s.calls_forwarded = forwarded_.load();
  s.calls_forwarded_no_gain = forwarded_no_gain_.load();
  if (network_.known) {  // written by the join, before any caller can ask
    s.link_gbps = network_.link.bytes_per_s * 8 / 1e9;
    s.link_latency_us = network_.link.latency_s * 1e6;
  }
  s.suspended = suspended_.load();
  // The process's pools as they are now, not as the last call left them.
  s.process_host_packets = backend::process_pool_figures(backend::PoolKind::kHostPackets, -1);
  s.process_pinned_packets = backend::process_pool_figures(backend::PoolKind::kPinnedStaging,
                                                           cuda_device_ < 0 ? 0 : cuda_device_);
  {
    std::lock_guard<std::mutex> dlock(device_mu_);
    if (stager_) s.pinned_bytes = stager_->pinned_bytes();
  }
  s.proxy_cuda_calls = backend::device_runtime().proxy_calls();
  return s;
}

std::string Communicator::stats_json() const {
  return stats().to_json(rank_, nranks_, id_hash_);
}

}  // namespace sketchccl::coll
