// The host model of a GPU (model_device.h).
#include "tests/support/model_device.h"

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

namespace sketchccl::testutil {

namespace {

thread_local int t_current_device = -1;

struct Done {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  void set() {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    cv.notify_all();
  }
  bool wait_for(double s) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(s), [this] { return done; });
  }
};

bool on_proxy_thread() {
  char name[32] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof name) != 0) return false;
  return std::strcmp(name, "sccl-proxy") == 0;
}

Status model_error(const char* what) {
  return Status(Code::kUnhandledCudaError, std::string(what) + ": injected failure (model)");
}

}  // namespace

// A hardware queue: its items run one after the other on one thread, whatever stream they came
// from.
class ModelDevice::HwQueue {
 public:
  HwQueue() : thread_([this] { loop(); }) {}
  ~HwQueue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }
  void push(std::function<void()> fn, std::shared_ptr<Done> done) {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back({std::move(fn), std::move(done)});
    cv_.notify_all();
  }

 private:
  struct Item {
    std::function<void()> fn;
    std::shared_ptr<Done> done;
  };
  void loop() {
    pthread_setname_np(pthread_self(), "model-hwq");
    for (;;) {
      Item it;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !items_.empty(); });
        if (items_.empty()) return;
        it = std::move(items_.front());
        items_.pop_front();
      }
      it.fn();
      if (it.done) it.done->set();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  bool stop_ = false;
  std::thread thread_;
};

ModelDevice::ModelDevice(ModelOptions o) : opt_(o) {}

ModelDevice::~ModelDevice() {
  stopping_ = true;  // a wait still queued gives up
  std::map<int, std::vector<std::unique_ptr<HwQueue>>> queues;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queues.swap(queues_);
  }
  queues.clear();  // joins each queue's thread once its items ran
  // Staging blocks still out are the pools' (never destroyed): left alone, a test checks them.
}

void ModelDevice::set_current_device(int device) {
  t_current_device = device;
}

void ModelDevice::enter(const char* what) {
  count_call();
  if (on_proxy_thread()) violation(std::string(what) + " called on a proxy thread");
}

void ModelDevice::violation(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  violations_.push_back(what);
}

void ModelDevice::hang(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  hangs_.push_back(what);
}

void* ModelDevice::create_stream(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  handles_.push_back(std::make_unique<char>(0));
  void* s = handles_.back().get();
  int& next = next_queue_[device];
  streams_[{device, s}] = Stream{device, next++ % opt_.queues};
  return s;
}

int ModelDevice::queue_of_stream(int device, void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find({device, stream});
  if (it == streams_.end()) {
    int& next = next_queue_[device];
    it = streams_.emplace(std::make_pair(device, stream), Stream{device, next++ % opt_.queues})
             .first;
  }
  return it->second.queue;
}

ModelDevice::HwQueue& ModelDevice::queue_for(int device, void* stream) {
  const int q = queue_of_stream(device, stream);
  std::lock_guard<std::mutex> lock(mu_);
  auto& qs = queues_[device];
  while (qs.size() < static_cast<size_t>(opt_.queues))
    qs.push_back(std::make_unique<HwQueue>());
  return *qs[static_cast<size_t>(q)];
}

void ModelDevice::launch(int device, void* stream, std::function<void()> fn) {
  auto done = opt_.launch_blocking ? std::make_shared<Done>() : nullptr;
  queue_for(device, stream).push(std::move(fn), done);
  if (done && !done->wait_for(2 * opt_.hang_s)) hang("a blocking launch never returned");
}

void ModelDevice::host_work(int device, void* stream, std::function<void()> fn) {
  counts_.host_work++;
  launch(device, stream, std::move(fn));
}

bool ModelDevice::drain(int device, void* stream, double s) {
  auto done = std::make_shared<Done>();
  queue_for(device, stream).push([] {}, done);
  return done->wait_for(s);
}

bool ModelDevice::drain_all(double s) {
  std::vector<std::shared_ptr<Done>> dones;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [device, qs] : queues_) {
      for (auto& q : qs) {
        dones.push_back(std::make_shared<Done>());
        q->push([] {}, dones.back());
      }
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(s);
  bool all = true;
  for (auto& d : dones) {
    const double left =
        std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    all = d->wait_for(left > 0 ? left : 0) && all;
  }
  return all;
}

void ModelDevice::mark_device(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  device_ranges_.push_back(
      {reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + bytes});
}

void ModelDevice::unmark(const void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < device_ranges_.size(); ++i) {
    if (device_ranges_[i].first != reinterpret_cast<uintptr_t>(p)) continue;
    device_ranges_.erase(device_ranges_.begin() + static_cast<long>(i));
    return;
  }
}

std::vector<int> ModelDevice::prepare_devices() const {
  std::lock_guard<std::mutex> lock(mu_);
  return prepare_devices_;
}
std::vector<int> ModelDevice::staging_devices() const {
  std::lock_guard<std::mutex> lock(mu_);
  return staging_devices_;
}
size_t ModelDevice::outstanding_staging() const {
  std::lock_guard<std::mutex> lock(mu_);
  return staging_.size();
}
std::vector<std::string> ModelDevice::violations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return violations_;
}
std::vector<std::string> ModelDevice::hangs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hangs_;
}
size_t ModelDevice::live_scratch() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const Scratch& s : scratch_)
    n += s.live ? 1 : 0;
  return n;
}
std::pair<const uint8_t*, size_t> ModelDevice::last_scratch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_scratch_;
}
std::vector<uint8_t> ModelDevice::last_freed_scratch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_freed_scratch_;
}
std::vector<void*> ModelDevice::scratch_alloc_streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  return scratch_alloc_streams_;
}
std::vector<void*> ModelDevice::scratch_free_streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  return scratch_free_streams_;
}

bool ModelDevice::in_staging(const void* p, size_t bytes) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = staging_.upper_bound(a);
  if (it == staging_.begin()) return false;
  --it;
  return a + bytes <= it->first + it->second;
}

int ModelDevice::current_device() {
  enter("current_device");
  counts_.current_device++;
  return t_current_device >= 0 ? t_current_device : opt_.device;
}

backend::MemoryQuery ModelDevice::pointer_memory(const void* p) {
  enter("pointer_memory");
  counts_.pointer_memory++;
  if (in_staging(p, 1)) return {backend::MemoryClass::kPinned, ""};
  std::lock_guard<std::mutex> lock(mu_);
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (const auto& r : device_ranges_) {
    if (a >= r.first && a < r.second) return {backend::MemoryClass::kDevice, ""};
  }
  return {backend::MemoryClass::kHost, ""};
}

backend::CaptureState ModelDevice::stream_capture(void*) {
  enter("stream_capture");
  counts_.stream_capture++;
  return backend::CaptureState::kNone;
}

bool ModelDevice::has_backend() {
  enter("has_backend");
  counts_.has_backend++;
  return true;
}

bool ModelDevice::device_path_usable(const char** reason) {
  enter("device_path_usable");
  counts_.device_path_usable++;
  if (reason != nullptr) *reason = "";
  return true;
}

Status ModelDevice::prepare(int device, std::string* how) {
  enter("prepare");
  counts_.prepare++;
  {
    std::lock_guard<std::mutex> lock(mu_);
    prepare_devices_.push_back(device);
  }
  if (fail_prepare_) {
    return Status(Code::kUnhandledCudaError,
                  "cuModuleLoadData of the flag kernels: no kernel image is available (model)");
  }
  if (how != nullptr) *how = "model flags";
  return Status::Ok();
}

void* ModelDevice::alloc_staging(int device, size_t bytes) {
  enter("alloc_staging");
  counts_.alloc_staging++;
  {
    std::lock_guard<std::mutex> lock(mu_);
    staging_devices_.push_back(device);
  }
  if (fail_alloc_staging_ || bytes == 0) return nullptr;
  const size_t rounded = (bytes + 63) & ~size_t(63);
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) return nullptr;
  std::memset(p, 0, rounded);
  std::lock_guard<std::mutex> lock(mu_);
  staging_[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

void ModelDevice::free_staging(int, void* p) {
  enter("free_staging");
  counts_.free_staging++;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = staging_.find(reinterpret_cast<uintptr_t>(p));
    if (it == staging_.end()) {
      violations_.push_back("free_staging of a block that is not out (double free?)");
      return;
    }
    staging_.erase(it);
  }
  std::free(p);
}

Status ModelDevice::copy_async(int device, void* dst, const void* src, size_t bytes, void* stream) {
  enter("copy_async");
  if (++counts_.copy_async == fail_copy_at_) return model_error("cudaMemcpyAsync");
  std::function<void(void*, const void*, size_t)> hook;
  {
    std::lock_guard<std::mutex> lock(mu_);
    hook = on_copy_;
  }
  launch(device, stream, [this, hook, dst, src, bytes] {
    if (hook) hook(dst, src, bytes);
    if (bytes > 0) std::memcpy(dst, src, bytes);
    record(Event{Event::kCopy, dst, src, bytes, false, std::chrono::steady_clock::now()});
  });
  return Status::Ok();
}

void ModelDevice::on_copy(std::function<void(void* dst, const void* src, size_t bytes)> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  on_copy_ = std::move(hook);
}

void ModelDevice::record(const Event& e) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(e);
}

std::vector<ModelDevice::Event> ModelDevice::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

Status ModelDevice::write_flag(int device, uint32_t* flag, uint32_t value, void* stream) {
  enter("write_flag");
  if (++counts_.write_flag == fail_write_at_) return model_error("cuStreamWriteValue32");
  if (!in_staging(flag, sizeof *flag)) violation("write_flag on a word outside staging memory");
  launch(device, stream, [flag, value] { __atomic_store_n(flag, value, __ATOMIC_RELEASE); });
  return Status::Ok();
}

Status ModelDevice::wait_flag(int device, const uint32_t* flag, uint32_t value, void* stream) {
  enter("wait_flag");
  if (++counts_.wait_flag == fail_wait_at_) return model_error("cuStreamWaitValue32");
  if (!in_staging(flag, sizeof *flag)) violation("wait_flag on a word outside staging memory");
  launch(device, stream, [this, flag, value] {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(opt_.hang_s);
    const bool waited = __atomic_load_n(flag, __ATOMIC_ACQUIRE) != value;
    while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != value) {
      if (stopping_) return;
      if (std::chrono::steady_clock::now() >= deadline) {
        hang("a wait_flag that was never released");
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    record(Event{Event::kWait, flag, nullptr, 0, waited, std::chrono::steady_clock::now()});
  });
  return Status::Ok();
}

Status ModelDevice::alloc_on_stream(int, size_t bytes, void* stream, void** out) {
  enter("alloc_on_stream");
  counts_.alloc_on_stream++;
  if (fail_alloc_on_stream_) return model_error("cudaMallocFromPoolAsync: out of memory");
  auto mem = std::make_unique<uint8_t[]>(bytes);
  *out = mem.get();
  mark_device(mem.get(), bytes);
  std::lock_guard<std::mutex> lock(mu_);
  last_scratch_ = {mem.get(), bytes};
  scratch_alloc_streams_.push_back(stream);
  scratch_.push_back(Scratch{std::move(mem), bytes, true});
  return Status::Ok();
}

Status ModelDevice::free_on_stream(int device, void* p, void* stream) {
  enter("free_on_stream");
  counts_.free_on_stream++;
  {
    std::lock_guard<std::mutex> lock(mu_);
    scratch_free_streams_.push_back(stream);
  }
  // Done in stream order: then poisoned (NaN), so a later read gives a wrong result; the memory
  // is kept (a late read sees NaN, not freed memory).
  launch(device, stream, [this, p] {
    size_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (Scratch& s : scratch_) {
        if (s.mem.get() != p || !s.live) continue;
        s.live = false;
        bytes = s.bytes;
      }
    }
    if (bytes == 0) {
      violation("free_on_stream of scratch that is not live");
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto* b = static_cast<const uint8_t*>(p);
      last_freed_scratch_.assign(b, b + bytes);
    }
    std::memset(p, 0xff, bytes);
    unmark(p);
  });
  return Status::Ok();
}

}  // namespace sketchccl::testutil
