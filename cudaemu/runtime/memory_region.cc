// Device memory: one address range reserved at start, PROT_NONE while no device work runs, so a
// host dereference of a device pointer faults and is reported with its call site.
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include "cudaemu/runtime/state.h"
#include "cudaemu/work.h"

namespace cudaemu {
namespace {

constexpr std::size_t kRegionBytes = std::size_t(1) << 38;  // 256 GiB of address space
constexpr std::size_t kAlign = 512;                         // cudaMalloc's alignment and more

// The containers below are never destroyed: queue threads may still use them during exit().
char* g_base = nullptr;
std::mutex g_region_mu;  // the bump pointer, the free ranges and the registries
std::size_t g_used = 0;
std::multimap<std::size_t, std::uintptr_t>& g_free =
    *new std::multimap<std::size_t, std::uintptr_t>;  // size -> base of freed ranges
std::map<std::uintptr_t, Allocation>& g_device =
    *new std::map<std::uintptr_t, Allocation>;  // live device allocations by base
std::map<std::uintptr_t, HostRange>& g_host =
    *new std::map<std::uintptr_t, HostRange>;  // page-locked host ranges by base

std::mutex g_access_mu;
int g_access = 0;  // work items running with device access
// VMM mappings without device access, base -> size: PROT_NONE even while device work runs.
std::map<std::uintptr_t, std::size_t>& g_noaccess = *new std::map<std::uintptr_t, std::size_t>;

struct sigaction g_prev_segv;

void report_fault(void* addr) {
  char msg[512];
  Allocation a;
  bool known = false;
  const auto at = reinterpret_cast<std::uintptr_t>(addr);
  // Best effort: the registry lock may be held by this very thread.
  if (g_region_mu.try_lock()) {
    auto it = g_device.upper_bound(at);
    if (it != g_device.begin()) {
      --it;
      if (at < it->second.base + it->second.block) {
        a = it->second;
        known = true;
      }
    }
    g_region_mu.unlock();
  }
  int n;
  if (known && a.vmm && a.no_access) {
    // Device work (or the host) in a mapping cuMemSetAccess has not opened to the device yet.
    n = std::snprintf(msg, sizeof msg,
                      "cudaemu: %s touched device memory at %p (VMM mapping 0x%zx+%zu, size %zu) "
                      "before cuMemSetAccess gave device 0 access, on thread %s\n",
                      current_item() != nullptr ? "device work" : "host code", addr,
                      static_cast<size_t>(a.base), static_cast<size_t>(at - a.base), a.size,
                      thread_label().c_str());
  } else if (known) {
    n = std::snprintf(msg, sizeof msg,
                      "cudaemu: host code touched device memory at %p (allocation 0x%zx+%zu, size "
                      "%zu) on thread %s\n",
                      addr, static_cast<size_t>(a.base), static_cast<size_t>(at - a.base), a.size,
                      thread_label().c_str());
  } else {
    n = std::snprintf(msg, sizeof msg,
                      "cudaemu: host code touched device memory at %p (no live allocation there) "
                      "on thread %s\n",
                      addr, thread_label().c_str());
  }
  if (n > 0) (void)!write(2, msg, static_cast<size_t>(n));
  void* frames[64];
  const int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, 2);
  std::abort();
}

void on_segv(int sig, siginfo_t* info, void* ctx) {
  if (g_base != nullptr && info != nullptr && in_device_region(info->si_addr)) {
    report_fault(info->si_addr);
  }
  // Not ours: the previous handler decides.
  if (g_prev_segv.sa_flags & SA_SIGINFO) {
    if (g_prev_segv.sa_sigaction != nullptr) {
      g_prev_segv.sa_sigaction(sig, info, ctx);
      return;
    }
  } else if (g_prev_segv.sa_handler != SIG_DFL && g_prev_segv.sa_handler != SIG_IGN) {
    g_prev_segv.sa_handler(sig);
    return;
  }
  // Default action: re-raise on return with the default disposition.
  signal(sig, SIG_DFL);
}

}  // namespace

void install_fault_handler() {
  void* p =
      mmap(nullptr, kRegionBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("cudaemu: reserving the device address range");
    std::abort();
  }
  g_base = static_cast<char*>(p);
  struct sigaction sa {};
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_prev_segv);
}

bool in_device_region(const void* p) {
  const auto* c = static_cast<const char*>(p);
  return g_base != nullptr && c >= g_base && c < g_base + kRegionBytes;
}

DeviceAccess::DeviceAccess() {
  std::lock_guard<std::mutex> lock(g_access_mu);
  if (g_access++ == 0) {
    mprotect(g_base, kRegionBytes, PROT_READ | PROT_WRITE);
    for (const auto& [base, size] : g_noaccess)
      mprotect(reinterpret_cast<void*>(base), size, PROT_NONE);
  }
}

DeviceAccess::~DeviceAccess() {
  std::lock_guard<std::mutex> lock(g_access_mu);
  if (--g_access == 0) mprotect(g_base, kRegionBytes, PROT_NONE);
}

void* region_alloc(std::size_t bytes) {
  const std::size_t n = (bytes + kAlign - 1) / kAlign * kAlign;
  std::lock_guard<std::mutex> lock(g_region_mu);
  // Fresh address space first, so a stale pointer to freed memory stays invalid; freed ranges
  // are reused only once the region is exhausted.
  if (g_used + n <= kRegionBytes) {
    void* p = g_base + g_used;
    g_used += n;
    return p;
  }
  auto it = g_free.lower_bound(n);
  if (it == g_free.end()) return nullptr;
  const std::uintptr_t base = it->second;
  const std::size_t have = it->first;
  g_free.erase(it);
  if (have > n) g_free.emplace(have - n, base + n);
  return reinterpret_cast<void*>(base);
}

void region_free(void* p, std::size_t bytes) {
  const std::size_t n = (bytes + kAlign - 1) / kAlign * kAlign;
  // Only the pages wholly inside the range go back: allocations share pages, and the kernel
  // would zero a neighbour's data on a partial page.
  const std::uintptr_t page = 4096;
  const std::uintptr_t lo = (reinterpret_cast<std::uintptr_t>(p) + page - 1) & ~(page - 1);
  const std::uintptr_t hi = (reinterpret_cast<std::uintptr_t>(p) + n) & ~(page - 1);
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
  std::lock_guard<std::mutex> lock(g_region_mu);
  g_free.emplace(n, reinterpret_cast<std::uintptr_t>(p));
}

void* region_reserve_aligned(std::size_t bytes, std::size_t align) {
  std::lock_guard<std::mutex> lock(g_region_mu);
  const auto start = reinterpret_cast<std::uintptr_t>(g_base) + g_used;
  const std::uintptr_t at = (start + align - 1) & ~(align - 1);
  const std::size_t used = at - reinterpret_cast<std::uintptr_t>(g_base) + bytes;
  if (used > kRegionBytes || used < g_used) return nullptr;
  g_used = (used + kAlign - 1) / kAlign * kAlign;
  return reinterpret_cast<void*>(at);
}

bool vmm_map_pages(void* va, std::size_t bytes, int fd) {
  std::lock_guard<std::mutex> access(g_access_mu);
  // No device access yet: PROT_NONE whatever runs.
  if (mmap(va, bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) return false;
  g_noaccess[reinterpret_cast<std::uintptr_t>(va)] = bytes;
  Allocation a;
  a.base = reinterpret_cast<std::uintptr_t>(va);
  a.size = bytes;
  a.block = bytes;
  a.vmm = true;
  a.no_access = true;
  add_device_allocation(a);
  return true;
}

void vmm_unmap_pages(void* va, std::size_t bytes) {
  std::lock_guard<std::mutex> access(g_access_mu);
  Allocation a;
  take_device_allocation(va, &a);
  g_noaccess.erase(reinterpret_cast<std::uintptr_t>(va));
  // Reserved, unbacked address space again, as the rest of the region.
  mmap(va, bytes, g_access > 0 ? PROT_READ | PROT_WRITE : PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

bool vmm_set_access(const void* base, bool access) {
  std::lock_guard<std::mutex> access_lock(g_access_mu);
  const auto at = reinterpret_cast<std::uintptr_t>(base);
  std::size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(g_region_mu);
    auto it = g_device.find(at);
    if (it == g_device.end() || !it->second.vmm) return false;
    it->second.no_access = !access;
    size = it->second.block;
  }
  if (access) {
    g_noaccess.erase(at);
  } else {
    g_noaccess[at] = size;
  }
  const int prot = access && g_access > 0 ? PROT_READ | PROT_WRITE : PROT_NONE;
  mprotect(const_cast<void*>(base), size, prot);
  return true;
}

bool device_access_denied(const void* p, std::size_t n) {
  if (!in_device_region(p)) return false;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(g_region_mu);
  auto it = g_device.upper_bound(at + (n > 0 ? n - 1 : 0));
  while (it != g_device.begin()) {
    --it;
    if (it->second.base + it->second.size <= at) break;
    if (it->second.no_access) return true;
  }
  return false;
}

void add_device_allocation(const Allocation& a) {
  static std::uint64_t next_gen = 0;
  std::lock_guard<std::mutex> lock(g_region_mu);
  Allocation& slot = g_device[a.base];
  slot = a;
  slot.gen = ++next_gen;
}

bool mark_free_queued(const void* base) {
  std::lock_guard<std::mutex> lock(g_region_mu);
  auto it = g_device.find(reinterpret_cast<std::uintptr_t>(base));
  if (it == g_device.end() || it->second.free_queued) return false;
  it->second.free_queued = true;
  return true;
}

bool take_device_allocation_if(const void* base, std::uint64_t gen) {
  std::lock_guard<std::mutex> lock(g_region_mu);
  auto it = g_device.find(reinterpret_cast<std::uintptr_t>(base));
  if (it == g_device.end() || it->second.gen != gen) return false;
  g_device.erase(it);
  return true;
}

bool take_device_allocation(const void* base, Allocation* out) {
  std::lock_guard<std::mutex> lock(g_region_mu);
  auto it = g_device.find(reinterpret_cast<std::uintptr_t>(base));
  if (it == g_device.end()) return false;
  *out = it->second;
  g_device.erase(it);
  return true;
}

bool find_device_allocation(const void* p, Allocation* out) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(g_region_mu);
  auto it = g_device.upper_bound(at);
  if (it == g_device.begin()) return false;
  --it;
  if (at >= it->second.base + it->second.size) return false;
  *out = it->second;
  return true;
}

bool find_host_range(const void* p, HostRange* out) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(g_region_mu);
  auto it = g_host.upper_bound(at);
  if (it == g_host.begin()) return false;
  --it;
  if (at >= it->second.base + it->second.size) return false;
  *out = it->second;
  return true;
}

cudaError_t add_host_range(const HostRange& r) {
  std::lock_guard<std::mutex> lock(g_region_mu);
  auto it = g_host.upper_bound(r.base + r.size - 1);
  if (it != g_host.begin()) {
    --it;
    if (it->second.base + it->second.size > r.base) return cudaErrorHostMemoryAlreadyRegistered;
  }
  g_host[r.base] = r;
  return cudaSuccess;
}

bool take_host_range(const void* base, HostKind kind, HostRange* out) {
  std::lock_guard<std::mutex> lock(g_region_mu);
  auto it = g_host.find(reinterpret_cast<std::uintptr_t>(base));
  if (it == g_host.end() || it->second.kind != kind) return false;
  *out = it->second;
  g_host.erase(it);
  return true;
}

bool device_range_ok(const void* p, std::size_t n) {
  if (p == nullptr) return false;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  if (in_device_region(p)) {
    Allocation a;
    return find_device_allocation(p, &a) && at + n <= a.base + a.size && at + n >= at;
  }
  HostRange h;
  return find_host_range(p, &h) && at + n <= h.base + h.size && at + n >= at;
}

bool device_range_valid(const void* p, std::size_t n) {
  return device_range_ok(p, n) && !device_access_denied(p, n);
}

}  // namespace cudaemu
