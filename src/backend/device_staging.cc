// The staged device call (device_staging.h): the staging block's layout, the flags' protocol, and
// the reuse of blocks once the stream is done with them.
#include "src/backend/device_staging.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "src/backend/device_runtime.h"
#include "src/core/log.h"

namespace sketchccl::backend {

namespace {

// A block: a 4 KiB header of flag words, one per 64-byte line (the device writes `ready` and
// `back`, the host polls them; the host writes `done`, the device waits), then the input and the
// result.
constexpr size_t kLine = 64;
constexpr size_t kReadyAt = 0;
constexpr size_t kDoneAt = kReadyAt + kMaxStagingChunks * kLine;
constexpr size_t kBackAt = kDoneAt + kMaxStagingChunks * kLine;
constexpr size_t kDataAt = 4096;
static_assert(kBackAt + kLine <= kDataAt, "the staging block's flags fit its header");

size_t round64(size_t n) {
  return (n + 63) & ~size_t(63);
}

uint32_t load(const uint32_t* w) {
  return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}
void store(uint32_t* w, uint32_t v) {
  __atomic_store_n(w, v, __ATOMIC_RELEASE);
}

// Distinct values for consecutive uses of a block, never 0 (a fresh block's words are zeroed).
uint32_t next_generation() {
  static std::atomic<uint32_t> gen{0};
  uint32_t g = 0;
  while (g == 0)
    g = gen.fetch_add(1, std::memory_order_relaxed) + 1;
  return g;
}

class StagingSource final : public BlockSource {
 public:
  explicit StagingSource(int device) : device_(device) {}
  void* allocate(size_t bytes) override { return device_runtime().alloc_staging(device_, bytes); }
  void release(void* p, size_t) override { device_runtime().free_staging(device_, p); }

 private:
  const int device_;
};

std::unique_ptr<BlockSource> make_staging_source(int device) {
  return std::make_unique<StagingSource>(device);
}

}  // namespace

std::atomic<size_t> g_in_flight_bound{size_t(1) << 30};

size_t staging_in_flight_bound() {
  return g_in_flight_bound.load(std::memory_order_relaxed);
}

void set_staging_in_flight_bound_for_test(size_t bytes) {
  g_in_flight_bound.store(bytes, std::memory_order_relaxed);
}

MemoryPool& staging_pool(int device) {
  // Every block is kept until a trim (ncclCommSuspend) or the last stager of the device goes: a
  // pinned allocation may wait for the whole device, so it happens only on a caller's thread.
  return process_pool(PoolKind::kPinnedStaging, device, 0, 0, make_staging_source);
}

size_t staging_chunk_bytes(size_t bytes, size_t min_chunk) {
  if (min_chunk == 0 || bytes <= min_chunk) return bytes;
  const size_t share = (bytes + kMaxStagingChunks - 1) / kMaxStagingChunks;
  const size_t c = std::max(min_chunk, share);
  return (c + 4095) & ~size_t(4095);
}

template <class Ready>
Status StagedCall::poll(Ready ready, double timeout_s, const std::atomic<bool>* abort,
                        const char* late, const char* why) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (uint64_t polls = 0;; ++polls) {
    if (is_cancelled_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(mu_);
      return cancelled_;
    }
    if (ready()) return Status::Ok();
    if (abort != nullptr && abort->load(std::memory_order_relaxed)) {
      return Status(Code::kRemoteError, "aborted while waiting for the caller's stream");
    }
    // A short spin for the copies of small calls, then sleeps that cost no core.
    if (polls < 2000) {
      std::this_thread::yield();
      continue;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return errorf(Code::kRemoteError, "%s within SKETCHCCL_TIMEOUT (%.0f s)%s", late, timeout_s,
                    why);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(polls < 20000 ? 20 : 200));
  }
}

size_t StagedCall::in_len(int k) const {
  const size_t at = static_cast<size_t>(k) * in_chunk_;
  return std::min(in_chunk_, in_bytes_ - at);
}

size_t StagedCall::out_len(int k) const {
  const size_t at = static_cast<size_t>(k) * out_chunk_;
  return std::min(out_chunk_, out_bytes_ - at);
}

Status StagedCall::wait_started(double timeout_s, const std::atomic<bool>* abort) const {
  return poll([this] { return started_.load(std::memory_order_acquire); }, timeout_s, abort,
              "the caller's thread did not enqueue the call's copies", "");
}

Status StagedCall::wait_input(double timeout_s, const std::atomic<bool>* abort) {
  SCCL_RETURN_IF_ERROR(wait_started(timeout_s, abort));
  bound_waits(timeout_s, abort);
  return need_input(0, in_bytes_);
}

void StagedCall::bound_waits(double timeout_s, const std::atomic<bool>* abort) {
  timeout_s_ = timeout_s;
  abort_ = abort;
}

Status StagedCall::need_input(size_t begin, size_t end) {
  end = std::min(end, in_bytes_);
  if (begin >= end || in_chunk_ == 0) return Status::Ok();
  const int last = static_cast<int>((end - 1) / in_chunk_);
  for (int k = static_cast<int>(begin / in_chunk_); k <= last; ++k) {
    if (seen_ & (1u << k)) continue;
    SCCL_RETURN_IF_ERROR(poll([this, k] { return load(ready_[k]) == gen_; }, timeout_s_, abort_,
                              "the caller's stream did not reach the call",
                              ": work queued before it on the stream has not finished"));
    seen_ |= 1u << k;
  }
  return Status::Ok();
}

void StagedCall::output_final(size_t begin, size_t end) {
  end = std::min(end, out_bytes_);
  if (begin >= end || out_chunk_ == 0) return;
  const int last = static_cast<int>((end - 1) / out_chunk_);
  for (int k = static_cast<int>(begin / out_chunk_); k <= last; ++k) {
    const size_t lo = std::max(begin, static_cast<size_t>(k) * out_chunk_);
    const size_t hi = std::min(end, static_cast<size_t>(k) * out_chunk_ + out_len(k));
    final_[k] += hi - lo;
    if (final_[k] >= out_len(k)) store(done_[k], gen_);
  }
}

void StagedCall::release() {
  for (int k = 0; k < out_n_; ++k)
    store(done_[k], gen_);
}

bool StagedCall::finished() const {
  return load(back_) == gen_;
}

void StagedCall::cancel(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = why;
  is_cancelled_.store(true, std::memory_order_release);
}

namespace {

// The staging blocks of a device's calls whose stream may still use them, whichever stager staged
// them: a block goes back to the pool once its stream wrote `back`, seen by any caller's thread.
struct Held {
  const DeviceStager* owner;
  PoolLease lease;
  std::shared_ptr<StagedCall> call;
};
struct Ledger {
  std::mutex mu;
  std::vector<Held> held;
  // Under mu: the bytes of the blocks held now.
  size_t in_flight_bytes() const {
    size_t n = 0;
    for (const Held& h : held)
      n += h.lease.capacity();
    return n;
  }
  // Under mu: gives back the blocks of finished calls.
  void reclaim() {
    for (auto it = held.begin(); it != held.end();) {
      if (it->call->finished()) {
        it->lease.reset();
        it = held.erase(it);
      } else if (it->call->lost()) {
        it->lease.abandon();
        it = held.erase(it);
      } else {
        ++it;
      }
    }
  }
};
Ledger& ledger(int device) {
  static std::mutex mu;
  static auto* all = new std::map<int, Ledger>();  // never destroyed: leases outlive statics
  std::lock_guard<std::mutex> lock(mu);
  return (*all)[device];
}

}  // namespace

DeviceStager::DeviceStager(int device) : device_(device) {
  staging_pool(device_).add_user();
}

DeviceStager::~DeviceStager() {
  // Bounded: a stream stuck on the application's own work must not hang ncclCommDestroy; its
  // blocks are then abandoned (never reused, never freed).
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(std::min(timeout_s_, 10.0));
  Ledger& l = ledger(device_);
  std::lock_guard<std::mutex> lock(l.mu);
  for (auto it = l.held.begin(); it != l.held.end();) {
    if (it->owner != this) {
      ++it;
      continue;
    }
    while (!it->call->finished() && !it->call->lost() &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (it->call->finished()) {
      it->lease.reset();
    } else {
      SCCL_WARN(kLogColl,
                "a device call's result was not copied back when its communicator ended: its "
                "%zu pinned bytes are never reused",
                it->lease.capacity());
      it->lease.abandon();
    }
    it = l.held.erase(it);
  }
  staging_pool(device_).remove_user();
}

Status DeviceStager::prepare() {
  std::lock_guard<std::mutex> lock(mu_);
  if (prepared_) return Status::Ok();
  std::string how;
  SCCL_RETURN_IF_ERROR(device_runtime().prepare(device_, &how));
  SCCL_INFO(kLogInit, "device %d: device calls are staged on the caller's stream (%s)", device_,
            how.c_str());
  prepared_ = true;
  return Status::Ok();
}

namespace {

// A chunk size and order as the call may use them: at most kMaxStagingChunks chunks, an order
// that is a permutation (else ascending).
void cut(size_t bytes, size_t chunk, const std::vector<int>& order, int* n, size_t* size,
         int* into) {
  *size = chunk == 0 || chunk >= bytes ? bytes : chunk;
  *n = *size == 0 ? 1 : static_cast<int>((bytes + *size - 1) / *size);
  if (*n > kMaxStagingChunks) {
    *size = staging_chunk_bytes(bytes, 1);
    *n = static_cast<int>((bytes + *size - 1) / *size);
  }
  uint32_t seen = 0;
  bool permutation = order.size() == static_cast<size_t>(*n);
  for (size_t i = 0; permutation && i < order.size(); ++i) {
    const int k = order[i];
    permutation = k >= 0 && k < *n && !(seen & (1u << k));
    if (permutation) seen |= 1u << k;
  }
  for (int i = 0; i < *n; ++i)
    into[i] = permutation ? order[static_cast<size_t>(i)] : i;
}

}  // namespace

Status DeviceStager::stage(size_t in_bytes, size_t out_bytes, std::shared_ptr<StagedCall>* out,
                           bool may_wait, const StagingChunks& chunks) {
  Ledger& l = ledger(device_);
  std::unique_lock<std::mutex> lock(l.mu);
  l.reclaim();
  const size_t bytes = kDataAt + round64(in_bytes) + round64(out_bytes);
  // Calls in flight hold their blocks until their streams copy back: past the bound (a training
  // step's buckets all queued at once would pin the whole model twice) the caller waits for the
  // oldest to finish, as NCCL's caller waits when its work queue is full. Never inside a group's
  // launch, whose calls finish only once all of them are enqueued.
  const size_t bound = std::max(staging_in_flight_bound(), 2 * bytes);
  if (may_wait && l.in_flight_bytes() + bytes > bound) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    while (l.in_flight_bytes() + bytes > bound && std::chrono::steady_clock::now() < deadline) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      lock.lock();
      l.reclaim();
    }
  }
  PoolLease lease = staging_pool(device_).take(bytes);
  if (!lease) {
    return errorf(Code::kSystemError, "no pinned memory for a device call's %zu staging bytes",
                  bytes);
  }
  auto c = std::make_shared<StagedCall>();
  uint8_t* b = lease.data();
  cut(in_bytes, chunks.in_chunk, chunks.in_order, &c->in_n_, &c->in_chunk_, c->in_order_);
  cut(out_bytes, chunks.out_chunk, chunks.out_order, &c->out_n_, &c->out_chunk_, c->out_order_);
  // The block is free: no stream operation of an earlier call on it is pending, so the host may
  // write its words.
  for (int k = 0; k < kMaxStagingChunks; ++k) {
    c->ready_[k] = reinterpret_cast<uint32_t*>(b + kReadyAt + static_cast<size_t>(k) * kLine);
    c->done_[k] = reinterpret_cast<uint32_t*>(b + kDoneAt + static_cast<size_t>(k) * kLine);
    store(c->ready_[k], 0);
    store(c->done_[k], 0);
  }
  c->back_ = reinterpret_cast<uint32_t*>(b + kBackAt);
  store(c->back_, 0);
  c->in_ = b + kDataAt;
  c->out_ = b + kDataAt + round64(in_bytes);
  c->in_bytes_ = in_bytes;
  c->out_bytes_ = out_bytes;
  c->gen_ = next_generation();
  l.held.push_back(Held{this, std::move(lease), c});
  *out = std::move(c);
  return Status::Ok();
}

Status DeviceStager::enqueue(void* stream, const void* send, void* recv,
                             const std::shared_ptr<StagedCall>& c) {
  SCCL_RETURN_IF_ERROR(enqueue_head(stream, send, c));
  return enqueue_tail(stream, recv, c);
}

Status DeviceStager::enqueue_head(void* stream, const void* send,
                                  const std::shared_ptr<StagedCall>& c) {
  DeviceRuntime& rt = device_runtime();
  const auto* src = static_cast<const uint8_t*>(send);
  // In the order the proxy is expected to read them, each chunk's flag right behind its copy.
  for (int i = 0; i < c->in_n_; ++i) {
    const int k = c->in_order_[i];
    const size_t at = static_cast<size_t>(k) * c->in_chunk_;
    Status st = rt.copy_async(device_, c->in_ + at, src + at, c->in_len(k), stream);
    if (!st.ok() && i == 0) {
      // Nothing was enqueued: the block is free again, and the proxy must not run the call.
      store(c->back_, c->gen_);
      c->cancel(st);
      return st;
    }
    if (st.ok()) st = rt.write_flag(device_, c->ready_[k], c->gen_, stream);
    if (!st.ok()) {
      // A copy may still run into the block: cancelled, and the block is never reused.
      c->lost_.store(true, std::memory_order_release);
      c->cancel(st);
      return st;
    }
  }
  c->started_.store(true, std::memory_order_release);
  return Status::Ok();
}

Status DeviceStager::enqueue_tail(void* stream, void* recv, const std::shared_ptr<StagedCall>& c) {
  // From here the proxy runs the call: the other ranks run it too.
  DeviceRuntime& rt = device_runtime();
  auto* dst = static_cast<uint8_t*>(recv);
  Status st;
  // Each chunk of the result as soon as the proxy says it is final.
  for (int i = 0; i < c->out_n_ && st.ok(); ++i) {
    const int k = c->out_order_[i];
    const size_t at = static_cast<size_t>(k) * c->out_chunk_;
    st = rt.wait_flag(device_, c->done_[k], c->gen_, stream);
    if (st.ok()) st = rt.copy_async(device_, dst + at, c->out_ + at, c->out_len(k), stream);
  }
  if (st.ok()) st = rt.write_flag(device_, c->back_, c->gen_, stream);
  if (!st.ok()) c->lost_.store(true, std::memory_order_release);
  return st;
}

Status DeviceStager::enqueue_ready(void* stream, const std::shared_ptr<StagedCall>& c) {
  // The program's block is one chunk: its `ready` is the first chunk's.
  const Status st = device_runtime().write_flag(device_, c->ready_[0], c->gen_, stream);
  if (!st.ok()) {
    // Nothing was enqueued: the block is free again, and the proxy must not run the call.
    store(c->back_, c->gen_);
    c->cancel(st);
    return st;
  }
  c->started_.store(true, std::memory_order_release);
  return st;
}

Status DeviceStager::enqueue_finish(void* stream, const std::shared_ptr<StagedCall>& c) {
  DeviceRuntime& rt = device_runtime();
  Status st = rt.wait_flag(device_, c->done_[0], c->gen_, stream);
  if (st.ok()) st = rt.write_flag(device_, c->back_, c->gen_, stream);
  if (!st.ok()) lose(c);
  return st;
}

void DeviceStager::lose(const std::shared_ptr<StagedCall>& c) {
  c->lost_.store(true, std::memory_order_release);
}

uint64_t DeviceStager::pinned_bytes() const {
  Ledger& l = ledger(device_);
  std::lock_guard<std::mutex> lock(l.mu);
  uint64_t n = 0;
  for (const Held& h : l.held) {
    if (h.owner == this) n += h.lease.capacity();
  }
  return n;
}

size_t DeviceStager::in_flight() const {
  Ledger& l = ledger(device_);
  std::lock_guard<std::mutex> lock(l.mu);
  return static_cast<size_t>(std::count_if(l.held.begin(), l.held.end(), [this](const Held& h) {
    return h.owner == this && !h.call->finished();
  }));
}

}  // namespace sketchccl::backend
