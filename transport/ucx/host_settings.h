// What SketchCCL turns off in UCX before it loads libucp into a host process (docs/transport.md,
// "UCX inside a host process"), and how it hands those settings to UCX.
//
// UCX reads its memory-hook and signal settings from the environment once, in libucs's
// constructor, i.e. inside the dlopen of libucp. Its defaults assume a library loaded at the start
// of a single-threaded process: with them, loading it later, next to the host's threads, moves
// the program break down under glibc's malloc (a heap that crashes at a later free) and puts
// UCX's handlers over the application's SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGHUP.
#pragma once

#include <string>
#include <vector>

namespace sketchccl::transport {

// "NAME=value" entries for the settings the user has left to UCX's defaults; `lookup` is getenv
// (or a test's stand-in). A variable the user set, even empty, is never overridden:
//   UCX_MEM_EVENTS=n: no memory hooks (no brk/sbrk test calls, no patching of libc's mmap, munmap
//     and brk, no malloc replacement), and so no registration cache;
//   UCX_MEM_MALLOC_HOOKS=n, UCX_MEM_MALLOC_RELOC=n: unless the user set UCX_MEM_EVENTS (who turns
//     the events on takes UCX's whole memory machinery, as a partial one could miss releases);
//   UCX_HANDLE_ERRORS=none: unless UCX_HANDLE_ERRORS or UCX_ERROR_SIGNALS is set (no handlers
//     for the error signals, no alternate signal stack on the loading thread);
//   UCX_DEBUG_SIGNO=0: no SIGHUP handler.
std::vector<std::string> ucx_host_settings(const char* (*lookup)(const char*));

// Whether UCX_TLS (`tls`; null or empty: unset) lets UCX open its tcp transport: "all", a list
// naming "tcp", or an exclusion ("^...") that does not name it. A tcp-only setting applied where
// tcp is not opened makes UCX warn at every worker ("invalid configuration").
bool ucx_tls_may_use_tcp(const char* tls);

// Adds `entries` ("NAME=value", names absent from the environment) to the environment for its
// lifetime without setenv, whose growth frees the array that another thread's getenv may be
// reading: it publishes a new array (the current entries, then these) with one pointer store and
// never frees an array or a string that a reader may still hold (a few hundred bytes, once).
// At the end it publishes, the same way, its array's entries less its own (so a value another
// thread changed in place meanwhile is kept); if another thread replaced the environment
// meanwhile (setenv of a new name), the copy it made keeps the entries and they stay.
class ScopedEnvironment {
 public:
  explicit ScopedEnvironment(const std::vector<std::string>& entries);
  ~ScopedEnvironment();
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

  // False when nothing was added (no entries, or no memory for the array).
  bool active() const { return mine_ != nullptr; }

 private:
  char** mine_ = nullptr;  // the array published, while this object lives
  std::vector<const char*> added_;
};

}  // namespace sketchccl::transport
