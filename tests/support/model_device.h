// A host model of a GPU behind SketchCCL's device runtime (src/backend/device_runtime.h), shared
// by the unit tests and the fake-NCCL device client. It is as strict as the hardware where the
// staged device path (src/backend/device_staging.h) could go wrong:
//  - streams are mapped round robin onto N hardware queues per device (N configurable, 1
//    included); each queue is one thread running its items strictly in order, whatever stream
//    they came from, so a wait_flag at the head of a queue blocks every stream behind it;
//  - copy_async is a memcpy when its item runs, write_flag a release store, wait_flag an acquire
//    poll until the flag equals the value (bounded: a wait that could never end is recorded as a
//    hang and given up, so that a broken protocol fails a test instead of hanging it);
//  - optionally every enqueue returns only once its item ran (CUDA_LAUNCH_BLOCKING);
//  - staging memory is aligned host memory, every block tracked (leaks, double frees);
//  - faults on demand: prepare fails, alloc_staging returns null, the k-th copy_async /
//    write_flag / wait_flag from now fails (nothing enqueued), alloc_on_stream fails;
//  - every call counted, and any call made on a thread named "sccl-proxy" recorded as a
//    violation (the proxy makes no device runtime call).
// The application's own work on a stream is host_work(): a function run in stream order.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/backend/device_runtime.h"

namespace sketchccl::testutil {

struct ModelOptions {
  int queues = 8;                // hardware queues per device (CUDA_DEVICE_MAX_CONNECTIONS)
  bool launch_blocking = false;  // every enqueue returns once its item ran
  int device = 0;                // every thread's current device until set_current_device
  double hang_s = 20;            // a wait_flag this long could never end: a hang, given up
};

class ModelDevice final : public backend::DeviceRuntime {
 public:
  struct Counts {
    std::atomic<int> current_device{0}, pointer_memory{0}, stream_capture{0}, has_backend{0},
        device_path_usable{0}, prepare{0}, alloc_staging{0}, free_staging{0}, copy_async{0},
        write_flag{0}, wait_flag{0}, alloc_on_stream{0}, free_on_stream{0}, host_work{0};
    int stream_ops() const { return copy_async + write_flag + wait_flag; }
  };

  explicit ModelDevice(ModelOptions o = {});
  // Stops the queues (a wait still queued gives up) and frees what is left.
  ~ModelDevice() override;
  ModelDevice(const ModelDevice&) = delete;
  ModelDevice& operator=(const ModelDevice&) = delete;

  // A new stream of `device` on its next hardware queue (round robin). Handles the model did not
  // make (nullptr: the default stream, or an application's handle) get a queue at first use.
  void* create_stream(int device);
  // The hardware queue a stream runs on (its index on its device).
  int queue_of_stream(int device, void* stream);
  // The application's own work, queued on `stream` behind what is there.
  void host_work(int device, void* stream, std::function<void()> fn);
  // Waits, at most `s` seconds, until the work queued on `stream` so far ran.
  bool drain(int device, void* stream, double s);
  // Waits, at most `s` seconds, until every queue of every device ran what was queued so far.
  bool drain_all(double s);
  // The calling thread's current device (cudaSetDevice).
  static void set_current_device(int device);

  // Device memory, as pointer_memory answers; unmark: host memory again.
  void mark_device(const void* p, size_t bytes);
  void unmark(const void* p);

  // Faults. The k-th call from now (1: the next) of that kind fails, nothing enqueued.
  void fail_prepare(bool on) { fail_prepare_ = on; }
  void fail_alloc_staging(bool on) { fail_alloc_staging_ = on; }
  void fail_alloc_on_stream(bool on) { fail_alloc_on_stream_ = on; }
  void fail_copy_in(int k) { fail_copy_at_ = counts_.copy_async + k; }
  void fail_write_flag_in(int k) { fail_write_at_ = counts_.write_flag + k; }
  void fail_wait_flag_in(int k) { fail_wait_at_ = counts_.wait_flag + k; }

  // Runs in the queue before every copy_async's memcpy (the test may sleep there: a slow copy).
  void on_copy(std::function<void(void* dst, const void* src, size_t bytes)> hook);
  // What the queues ran, in the order they ran it: copies (dst, src, bytes) and waits on flags
  // (the flag; `waited`: it was not yet set when the wait began), each with the time it ended.
  struct Event {
    enum Kind { kCopy, kWait } kind;
    const void* dst;
    const void* src;
    size_t bytes;
    bool waited;
    std::chrono::steady_clock::time_point t;
  };
  std::vector<Event> events() const;

  const Counts& counts() const { return counts_; }
  // Devices prepare and alloc_staging were asked for, in order.
  std::vector<int> prepare_devices() const;
  std::vector<int> staging_devices() const;
  // Staging blocks allocated and not freed; bytes of them.
  size_t outstanding_staging() const;
  // Calls on a "sccl-proxy" thread, frees of unknown blocks, flags outside staging memory.
  std::vector<std::string> violations() const;
  // Waits that could never have ended (given up after hang_s).
  std::vector<std::string> hangs() const;
  // Stream-ordered scratch (alloc_on_stream) not yet given back by its stream.
  size_t live_scratch() const;
  std::pair<const uint8_t*, size_t> last_scratch() const;
  // The bytes the last scratch given back held when its stream gave it back (before the poison).
  std::vector<uint8_t> last_freed_scratch() const;
  std::vector<void*> scratch_alloc_streams() const;
  std::vector<void*> scratch_free_streams() const;

  // DeviceRuntime.
  int current_device() override;
  backend::MemoryQuery pointer_memory(const void* p) override;
  backend::CaptureState stream_capture(void* stream) override;
  bool has_backend() override;
  bool device_path_usable(const char** reason) override;
  Status prepare(int device, std::string* how) override;
  void* alloc_staging(int device, size_t bytes) override;
  void free_staging(int device, void* p) override;
  Status copy_async(int device, void* dst, const void* src, size_t bytes, void* stream) override;
  Status write_flag(int device, uint32_t* flag, uint32_t value, void* stream) override;
  Status wait_flag(int device, const uint32_t* flag, uint32_t value, void* stream) override;
  Status alloc_on_stream(int device, size_t bytes, void* stream, void** out) override;
  Status free_on_stream(int device, void* p, void* stream) override;

 private:
  class HwQueue;
  struct Stream {
    int device;
    int queue;
  };
  // Every entry point: counts the call for the runtime, records a call on a proxy thread.
  void enter(const char* what);
  HwQueue& queue_for(int device, void* stream);
  // Queues `fn`; under launch blocking returns once it ran.
  void launch(int device, void* stream, std::function<void()> fn);
  bool in_staging(const void* p, size_t bytes) const;
  void violation(const std::string& what);
  void hang(const std::string& what);

  const ModelOptions opt_;
  Counts counts_;
  std::atomic<bool> fail_prepare_{false}, fail_alloc_staging_{false}, fail_alloc_on_stream_{false};
  std::atomic<int> fail_copy_at_{0}, fail_write_at_{0}, fail_wait_at_{0};
  std::atomic<bool> stopping_{false};

  mutable std::mutex mu_;
  std::map<int, std::vector<std::unique_ptr<HwQueue>>> queues_;  // per device
  std::map<int, int> next_queue_;                                // per device, round robin
  std::map<std::pair<int, void*>, Stream> streams_;
  std::vector<std::unique_ptr<char>> handles_;  // what create_stream hands out
  std::vector<std::pair<uintptr_t, uintptr_t>> device_ranges_;
  std::map<uintptr_t, size_t> staging_;  // block -> bytes
  std::vector<int> prepare_devices_, staging_devices_;
  std::vector<std::string> violations_, hangs_;
  std::function<void(void*, const void*, size_t)> on_copy_;
  std::vector<Event> events_;
  void record(const Event& e);
  struct Scratch {
    std::unique_ptr<uint8_t[]> mem;
    size_t bytes;
    bool live;
  };
  std::vector<Scratch> scratch_;
  std::pair<const uint8_t*, size_t> last_scratch_{nullptr, 0};
  std::vector<uint8_t> last_freed_scratch_;
  std::vector<void*> scratch_alloc_streams_, scratch_free_streams_;
};

// Drains every queue of the model when it goes: declared after a test's buffers, it keeps the
// model from writing them once they are gone, whichever way the test ends.
class DrainAtExit {
 public:
  explicit DrainAtExit(ModelDevice& m) : m_(m) {}
  ~DrainAtExit() { m_.drain_all(60); }
  DrainAtExit(const DrainAtExit&) = delete;
  DrainAtExit& operator=(const DrainAtExit&) = delete;

 private:
  ModelDevice& m_;
};

// Installs a model as the process's device runtime for a scope.
class InstalledModel {
 public:
  explicit InstalledModel(ModelDevice* m) { backend::set_device_runtime_for_test(m); }
  ~InstalledModel() { backend::set_device_runtime_for_test(nullptr); }
  InstalledModel(const InstalledModel&) = delete;
  InstalledModel& operator=(const InstalledModel&) = delete;
};

}  // namespace sketchccl::testutil
