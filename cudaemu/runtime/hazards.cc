// Strict mode (CUDAEMU_STRICT=1): while some stream waits on the host, the calls that would hang
// fail loudly instead of hanging (or passing by luck). With CUDAEMU_RELEASERS, only the threads
// that release host waits are checked, and for every CUDA call; without it, every thread is
// checked for the calls that may take a driver lock or synchronize the device.
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "cudaemu/runtime/state.h"
#include "cudaemu/work.h"

namespace cudaemu {
namespace {

std::mutex g_wait_mu;
std::vector<ItemPtr>& g_queued = *new std::vector<ItemPtr>;  // queued waits on host memory
std::set<Item*>& g_waiting = *new std::set<Item*>;           // running items polling host memory

// "stream 3 (queue 3, ...) held by kernel k_gate_spin", or "" when none waits.
std::string held_stream() {
  std::lock_guard<std::mutex> lock(g_wait_mu);
  for (Item* i : g_waiting) {
    // A wait whose word the host has already set no longer waits on the host.
    if (i->host_condition && i->host_condition()) continue;
    return i->stream_name + " held by " + i->what;
  }
  for (size_t k = 0; k < g_queued.size();) {
    const ItemPtr& i = g_queued[k];
    if (i->done.load()) {
      g_queued.erase(g_queued.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    if (!i->host_condition()) return i->stream_name + " held by " + i->what + " (queued)";
    ++k;
  }
  return "";
}

[[noreturn]] void die(const char* kind, const char* call, const std::string& held) {
  std::fprintf(stderr, "cudaemu strict: %s: %s on thread %s while %s waits on the host\n", kind,
               call, thread_label().c_str(), held.c_str());
  std::fflush(stderr);
  std::abort();
}

[[noreturn]] void die_releaser(const char* call, const std::string& held) {
  std::fprintf(stderr,
               "cudaemu strict: %s on thread %s, which releases host waits (CUDAEMU_RELEASERS), "
               "while %s waits on the host\n",
               call, thread_label().c_str(), held.c_str());
  std::fflush(stderr);
  std::abort();
}

// CUDAEMU_RELEASERS: comma-separated thread-name prefixes; nullptr when unset or empty.
const char* releasers() {
  const char* v = std::getenv("CUDAEMU_RELEASERS");
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// Whether the calling thread's name starts with one of the prefixes of `list`.
bool this_thread_releases(const char* list) {
  char name[17] = {};  // PR_GET_NAME writes at most 16 bytes, the terminator included
  if (prctl(PR_GET_NAME, name, 0, 0, 0) != 0) return false;
  for (const char* p = list;;) {
    const char* comma = std::strchr(p, ',');
    const size_t n = comma != nullptr ? static_cast<size_t>(comma - p) : std::strlen(p);
    if (n > 0 && std::strncmp(name, p, n) == 0) return true;
    if (comma == nullptr) return false;
    p = comma + 1;
  }
}

}  // namespace

std::string thread_label() {
  char name[32] = "?";
  pthread_getname_np(pthread_self(), name, sizeof name);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%ld (%s)", static_cast<long>(syscall(SYS_gettid)), name);
  return buf;
}

bool strict() {
  const char* v = std::getenv("CUDAEMU_STRICT");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

void note_host_wait(Item* item, bool waiting) {
  if (item == nullptr) return;
  if (item->waits_on_host.exchange(waiting) == waiting) return;
  std::lock_guard<std::mutex> lock(g_wait_mu);
  if (waiting) {
    g_waiting.insert(item);
  } else {
    g_waiting.erase(item);
  }
}

void note_queued_host_wait(const ItemPtr& item) {
  if (!item || item->done.load()) return;
  std::lock_guard<std::mutex> lock(g_wait_mu);
  g_queued.push_back(item);
}

void note_device_waiting(bool waiting) {
  note_host_wait(current_item(), waiting);
}

void releaser_check(const char* call) {
  if (!strict()) return;
  const char* list = releasers();
  if (list == nullptr || !this_thread_releases(list)) return;
  const std::string held = held_stream();
  if (!held.empty()) die_releaser(call, held);
}

void hazard_lock_call(const char* call) {
  if (!strict()) return;
  // With CUDAEMU_RELEASERS, another thread's lock call only stalls until the releaser sets the
  // word; the releaser's own calls are all hazards (releaser_check).
  if (releasers() != nullptr) {
    releaser_check(call);
    return;
  }
  const std::string held = held_stream();
  if (!held.empty()) die("a call that may take a driver lock", call, held);
}

void hazard_device_sync_call(const char* call) {
  if (!strict()) return;
  // With CUDAEMU_RELEASERS, another thread's device synchronization waits (device_sync) until
  // the releaser sets the word, as on a GPU.
  if (releasers() != nullptr) {
    releaser_check(call);
    return;
  }
  const std::string held = held_stream();
  if (!held.empty()) {
    die("a call that synchronizes the device would wait forever (deadlock)", call, held);
  }
}

}  // namespace cudaemu
