// The emulated runtime's internal state: streams, work items, hardware queues, allocations.
// One instance per process (libcudaemu.so), shared by every module that links the runtime.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cudaemu {

struct Capture;

// One piece of device work queued on a stream.
struct Item {
  std::string what;         // "memcpy D2H", "kernel k_gate_spin", ...
  std::string stream_name;  // for reports
  int queue = 0;
  std::function<void()> work;               // empty for a pure wait
  std::vector<std::shared_ptr<Item>> deps;  // must be done before the item starts
  bool device_access = true;                // runs with the device region readable and writable
  std::atomic<bool> done{false};
  std::atomic<bool> waits_on_host{false};  // polling host memory right now
  std::function<bool()> host_condition;    // a wait on host memory: whether it is satisfied now
};
using ItemPtr = std::shared_ptr<Item>;

struct Stream {
  int id = 0;
  int queue = 0;
  int priority = 0;
  unsigned flags = 0;  // cudaStreamNonBlocking
  bool legacy = false;
  bool per_thread = false;
  bool destroyed = false;
  std::string name;
  ItemPtr last;                // the last item queued, under g_mu
  Capture* capture = nullptr;  // the capture this stream records into, under g_mu
  bool blocking() const { return !legacy && (flags & cudaStreamNonBlocking) == 0; }
};

// The one lock of stream, event, capture and queue bookkeeping, and its completion signal.
std::mutex& mu();
std::condition_variable& progress();

// Initialises the device once (region, queues, callback thread); cheap after the first call.
void init();

// Every entry point starts here: the releaser check (releaser_check, strict mode), then
// cudaErrorNotPermitted inside a host function, the sticky error after a device fault, else
// cudaSuccess. Sets the last error when it fails. `call` names the entry point in reports: the
// calling function's name unless given.
cudaError_t api_enter(const char* call = __builtin_FUNCTION());
// Sets the calling thread's last error when `e` is an error; returns `e`.
cudaError_t ret(cudaError_t e);
cudaError_t sticky_error();
void set_sticky(cudaError_t e);
bool in_host_function();
void set_in_host_function(bool on);

// Streams. Resolves 0, cudaStreamLegacy and cudaStreamPerThread; nullptr for a destroyed stream.
Stream* resolve(cudaStream_t s);
Stream* create_stream(unsigned flags, int priority);
std::vector<Stream*>& all_streams();  // under mu()

// Queues `item` (its work, what and device_access set) on `s`, with CUDA's implicit ordering
// (legacy stream vs blocking streams) added to its deps; under mu(). Returns the item.
ItemPtr push_locked(Stream* s, ItemPtr item);
// The whole path an asynchronous operation takes: capture, hazards, queueing, launch blocking.
cudaError_t submit(cudaStream_t stream, const char* what, std::function<void()> work,
                   bool device_access, ItemPtr* out = nullptr);
// Blocks the caller until `item` is done (nullptr: returns at once).
void wait_done(const ItemPtr& item);
// The items a legacy-stream operation would wait for: legacy's last and every blocking stream's.
std::vector<ItemPtr> legacy_fence_locked();
// Waits for every item queued on every queue so far (a device synchronization).
void device_sync();
bool launch_blocking();
int queue_count();

// Host functions run on one callback thread; this queues one and waits for its return.
void run_host_function(cudaHostFn_t fn, void* arg);

// The item running on this queue thread (nullptr elsewhere).
Item* current_item();

// Device memory: one reserved region, PROT_NONE except while device work runs.
bool in_device_region(const void* p);
struct DeviceAccess {  // makes the region readable and writable for the scope
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};
void* region_alloc(std::size_t bytes);  // nullptr when the region is full
void region_free(void* p, std::size_t bytes);
// Fresh address space aligned to `align` (a power of two), for cuMemAddressReserve.
void* region_reserve_aligned(std::size_t bytes, std::size_t align);
// VMM (vmm.cc): maps `fd`'s pages at `va` (inside a reservation) and registers the mapping as a
// device allocation without device access; unmapping puts anonymous reserved pages back.
bool vmm_map_pages(void* va, std::size_t bytes, int fd);
void vmm_unmap_pages(void* va, std::size_t bytes);
// Grants or revokes the device's access to the mapping at `base` (kept PROT_NONE without it, even
// while device work runs). False when there is no such mapping.
bool vmm_set_access(const void* base, bool access);
// Whether [p, p+n) touches a mapping the device has no access to (a device fault when used).
bool device_access_denied(const void* p, std::size_t n);
void install_fault_handler();

struct Pool;
struct Allocation {
  std::uintptr_t base = 0;
  std::size_t size = 0;      // as asked: accesses beyond it are out of bounds
  std::size_t block = 0;     // as reserved in the region
  Pool* pool = nullptr;      // stream-ordered allocations
  std::uint64_t gen = 0;     // set by add_device_allocation: tells a reuse of the base apart
  bool free_queued = false;  // a cudaFreeAsync of it is queued: freeing it again is an error
  bool vmm = false;          // a cuMemMap mapping (vmm.cc): only cuMemUnmap ends it
  bool no_access = false;    // a mapping the device may not access yet (cuMemSetAccess)
};
// Live device allocations and page-locked host ranges, under their own lock.
void add_device_allocation(const Allocation& a);
bool take_device_allocation(const void* base, Allocation* out);       // removes it
bool find_device_allocation(const void* p, Allocation* out);          // containing p
bool take_device_allocation_if(const void* base, std::uint64_t gen);  // only that generation
bool mark_free_queued(const void* base);  // false when there is no such allocation or it is
                                          // already being freed
void* new_device_allocation(std::size_t size, Pool* pool);  // poisoned, registered
enum class HostKind { kAllocated, kRegistered };
struct HostRange {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  HostKind kind = HostKind::kAllocated;
  unsigned flags = 0;
};
bool find_host_range(const void* p, HostRange* out);
cudaError_t add_host_range(const HostRange& r);
bool take_host_range(const void* base, HostKind kind, HostRange* out);
// Device-accessible: [p, p+n) inside one live device allocation or one page-locked host range.
bool device_range_ok(const void* p, std::size_t n);

// Stream-ordered pools.
void trim_pools();  // gives free blocks beyond each pool's release threshold back (sync points)
void pool_forget(const Allocation& a);  // cudaFree of a stream-ordered allocation

// Capture.
// For a potentially unsafe call: cudaErrorStreamCaptureUnsupported (and the captures it breaks
// invalidated) when the calling thread's capture mode forbids it now, else cudaSuccess.
cudaError_t capture_unsafe_call(const char* call);
// For an operation on `s`: cudaErrorStreamCaptureUnsupported / Implicit when it conflicts with a
// capture (a sync or query of a capturing stream; legacy work beside a capturing blocking stream).
cudaError_t capture_conflict_locked(Stream* s, bool is_sync);
// Records `work` into the capture `s` belongs to; under mu().
void capture_record_locked(Stream* s, const char* what, std::function<void()> work,
                           bool device_access);

// Strict mode (CUDAEMU_STRICT=1). releaser_check is declared in cudaemu/work.h.
bool strict();
// A call that may take a driver lock: aborts in strict mode while a stream waits on the host.
// With CUDAEMU_RELEASERS set, only releaser_check(call): other threads' calls proceed.
void hazard_lock_call(const char* call);
// A call that synchronizes the device: aborts in strict mode while a stream waits on the host
// (the call would wait for it). With CUDAEMU_RELEASERS set, only releaser_check(call): other
// threads' calls wait for the device (device_sync) as on a GPU.
void hazard_device_sync_call(const char* call);
void note_host_wait(Item* item, bool waiting);
// A queued wait on host memory (host_condition set): a hazard while unsatisfied, even before
// its queue reaches it, since everything queued behind it waits for the host too.
void note_queued_host_wait(const ItemPtr& item);
std::string thread_label();

// Poison written into freed stream-ordered memory and fresh allocations (a float NaN).
constexpr int kPoisonByte = 0xFF;

}  // namespace cudaemu

// The runtime's handles are its own structures.
struct CUstream_st : cudaemu::Stream {};
