#include "transport/ucx/host_settings.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace sketchccl::transport {

std::vector<std::string> ucx_host_settings(const char* (*lookup)(const char*)) {
  const auto unset = [lookup](const char* name) { return lookup(name) == nullptr; };
  std::vector<std::string> out;
  if (unset("UCX_MEM_EVENTS")) {
    out.emplace_back("UCX_MEM_EVENTS=n");
    if (unset("UCX_MEM_MALLOC_HOOKS")) out.emplace_back("UCX_MEM_MALLOC_HOOKS=n");
    if (unset("UCX_MEM_MALLOC_RELOC")) out.emplace_back("UCX_MEM_MALLOC_RELOC=n");
  }
  if (unset("UCX_HANDLE_ERRORS") && unset("UCX_ERROR_SIGNALS")) {
    out.emplace_back("UCX_HANDLE_ERRORS=none");
  }
  if (unset("UCX_DEBUG_SIGNO")) out.emplace_back("UCX_DEBUG_SIGNO=0");
  return out;
}

namespace {

// Memory a reader of the environment may still hold is never freed; it stays reachable from here
// (so that a leak checker does not report it).
struct Retired {
  Retired* next;
  void* p;
};
Retired* g_retired = nullptr;

void retire(void* p) {
  auto* r = static_cast<Retired*>(std::malloc(sizeof(Retired)));
  if (r == nullptr) return;  // leaked unreachable instead: still never freed
  r->p = p;
  r->next = __atomic_load_n(&g_retired, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(&g_retired, &r->next, r, true, __ATOMIC_RELEASE,
                                      __ATOMIC_RELAXED)) {
  }
}

size_t count(char** env) {
  size_t n = 0;
  while (env != nullptr && env[n] != nullptr)
    ++n;
  return n;
}

}  // namespace

ScopedEnvironment::ScopedEnvironment(const std::vector<std::string>& entries) {
  if (entries.empty()) return;
  for (const std::string& e : entries) {
    char* s = strdup(e.c_str());
    if (s == nullptr) continue;
    retire(s);
    added_.push_back(s);
  }
  // A thread that replaced the environment between the read and the store would lose its change:
  // the store is a compare-and-swap, retried.
  for (int attempt = 0; attempt < 100 && !added_.empty(); ++attempt) {
    char** cur = __atomic_load_n(&environ, __ATOMIC_ACQUIRE);
    const size_t n = count(cur);
    // No memory: UCX keeps its defaults (as before these settings existed).
    auto* arr = static_cast<char**>(std::malloc((n + added_.size() + 1) * sizeof(char*)));
    if (arr == nullptr) return;
    for (size_t i = 0; i < n; ++i)
      arr[i] = cur[i];
    for (size_t i = 0; i < added_.size(); ++i)
      arr[n + i] = const_cast<char*>(added_[i]);
    arr[n + added_.size()] = nullptr;
    if (__atomic_compare_exchange_n(&environ, &cur, arr, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
      mine_ = arr;
      retire(arr);
      return;
    }
    std::free(arr);  // never published
  }
}

ScopedEnvironment::~ScopedEnvironment() {
  if (mine_ == nullptr) return;
  if (__atomic_load_n(&environ, __ATOMIC_ACQUIRE) != mine_) return;  // replaced meanwhile
  const size_t n = count(mine_);
  auto* arr = static_cast<char**>(std::malloc((n + 1) * sizeof(char*)));
  if (arr == nullptr) return;  // the entries stay: harmless but for UCX in child processes
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    bool ours = false;
    for (const char* a : added_)
      ours = ours || mine_[i] == a;
    if (!ours) arr[k++] = mine_[i];
  }
  arr[k] = nullptr;
  char** expected = mine_;
  if (__atomic_compare_exchange_n(&environ, &expected, arr, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    retire(arr);
  } else {
    std::free(arr);  // never published
  }
}

bool ucx_tls_may_use_tcp(const char* tls) {
  if (tls == nullptr || *tls == '\0') return true;
  const bool exclude = *tls == '^';
  std::string list(exclude ? tls + 1 : tls);
  bool named = false;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, end - start);
    if (name == "tcp" || (!exclude && name == "all")) named = true;
    start = end + 1;
  }
  return exclude ? !named : named;
}

}  // namespace sketchccl::transport
