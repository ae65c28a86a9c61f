// Strict mode (CUDAEMU_STRICT=1): calls that take a driver lock or synchronize the device while
// some stream's running work waits on the host fail loudly instead of hanging (or passing by luck).
#include <pthread.h>
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
  if (!g_waiting.empty()) {
    Item* i = *g_waiting.begin();
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

void hazard_lock_call(const char* call) {
  if (!strict()) return;
  const std::string held = held_stream();
  if (!held.empty()) die("a call that may take a driver lock", call, held);
}

void hazard_device_sync_call(const char* call) {
  if (!strict()) return;
  const std::string held = held_stream();
  if (!held.empty()) {
    die("a call that synchronizes the device would wait forever (deadlock)", call, held);
  }
}

}  // namespace cudaemu
