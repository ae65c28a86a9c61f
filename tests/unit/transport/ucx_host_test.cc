// UCX loaded into a host process that already runs threads: the settings SketchCCL chooses
// (transport/ucx/host_settings.h), how it puts them in the environment, and what loading libucp
// then leaves of the process (the heap, libc's code, the signal handlers, the environment). The
// loads run in forked children, each a process that has not loaded UCX yet.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <ucm/api/ucm.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "transport/ucx/host_settings.h"
#include "transport/ucx/ucx_api.h"

using namespace sketchccl::transport;

namespace {

std::map<std::string, std::string> g_fake_env;

const char* fake_getenv(const char* name) {
  auto it = g_fake_env.find(name);
  return it == g_fake_env.end() ? nullptr : it->second.c_str();
}

std::vector<std::string> settings_with(std::map<std::string, std::string> env) {
  g_fake_env = std::move(env);
  return ucx_host_settings(fake_getenv);
}

std::set<std::string> environment() {
  std::set<std::string> s;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    s.insert(*e);
  return s;
}

TEST(UcxHostSettings, TurnsOffTheMemoryHooksAndTheSignalHandlersByDefault) {
  EXPECT_EQ(settings_with({}),
            (std::vector<std::string>{"UCX_MEM_EVENTS=n", "UCX_MEM_MALLOC_HOOKS=n",
                                      "UCX_MEM_MALLOC_RELOC=n", "UCX_HANDLE_ERRORS=none",
                                      "UCX_DEBUG_SIGNO=0"}));
}

TEST(UcxHostSettings, NeverOverridesAVariableTheUserSet) {
  // Set, even empty: the user's.
  EXPECT_EQ(settings_with({{"UCX_MEM_MALLOC_HOOKS", ""}, {"UCX_DEBUG_SIGNO", "SIGUSR2"}}),
            (std::vector<std::string>{"UCX_MEM_EVENTS=n", "UCX_MEM_MALLOC_RELOC=n",
                                      "UCX_HANDLE_ERRORS=none"}));
  // Events turned on: the malloc hooks stay UCX's (its registration cache relies on them).
  EXPECT_EQ(settings_with({{"UCX_MEM_EVENTS", "y"}}),
            (std::vector<std::string>{"UCX_HANDLE_ERRORS=none", "UCX_DEBUG_SIGNO=0"}));
  // Error signals chosen (either variable): UCX handles them as told.
  EXPECT_EQ(settings_with({{"UCX_MEM_EVENTS", "n"}, {"UCX_ERROR_SIGNALS", "SIGBUS"}}),
            (std::vector<std::string>{"UCX_DEBUG_SIGNO=0"}));
  EXPECT_EQ(settings_with({{"UCX_MEM_EVENTS", "n"}, {"UCX_HANDLE_ERRORS", "bt"}}),
            (std::vector<std::string>{"UCX_DEBUG_SIGNO=0"}));
}

TEST(ScopedEnvironment, AddsItsEntriesForItsLifetimeOnly) {
  ASSERT_EQ(getenv("SCCL_T_ADDED"), nullptr);
  const std::set<std::string> before = environment();
  {
    ScopedEnvironment env({"SCCL_T_ADDED=1", "SCCL_T_EMPTY="});
    ASSERT_TRUE(env.active());
    ASSERT_NE(getenv("SCCL_T_ADDED"), nullptr);
    EXPECT_STREQ(getenv("SCCL_T_ADDED"), "1");
    EXPECT_STREQ(getenv("SCCL_T_EMPTY"), "");
  }
  EXPECT_EQ(getenv("SCCL_T_ADDED"), nullptr);
  EXPECT_EQ(getenv("SCCL_T_EMPTY"), nullptr);
  EXPECT_EQ(environment(), before);
  EXPECT_FALSE(ScopedEnvironment({}).active());
}

TEST(ScopedEnvironment, KeepsAValueAnotherThreadChangedMeanwhile) {
  setenv("SCCL_T_EXISTING", "1", 1);
  {
    ScopedEnvironment env({"SCCL_T_ADDED=1"});
    setenv("SCCL_T_EXISTING", "2", 1);  // glibc rewrites the entry in place, in this array
    unsetenv("SCCL_T_GONE");
  }
  EXPECT_STREQ(getenv("SCCL_T_EXISTING"), "2");
  EXPECT_EQ(getenv("SCCL_T_ADDED"), nullptr);
  unsetenv("SCCL_T_EXISTING");
}

TEST(ScopedEnvironment, LeavesAnEnvironmentAnotherThreadReplacedMeanwhile) {
  {
    ScopedEnvironment env({"SCCL_T_ADDED=1"});
    setenv("SCCL_T_NEW", "1", 1);  // a new name: glibc copies the array into one of its own
  }
  EXPECT_STREQ(getenv("SCCL_T_NEW"), "1");
  EXPECT_STREQ(getenv("SCCL_T_ADDED"), "1");  // in glibc's copy: documented, harmless
  unsetenv("SCCL_T_NEW");
  unsetenv("SCCL_T_ADDED");
}

// The reason for the mechanism: readers on other threads while the environment changes (the
// sanitizer build reports any read of freed memory).
TEST(ScopedEnvironment, ReadersOnOtherThreadsAlwaysSeeAWholeEnvironment) {
  setenv("SCCL_T_EXISTING", "1", 1);
  std::atomic<bool> stop{false};
  std::atomic<long> wrong{0};
  std::thread reader([&] {
    while (!stop.load()) {
      const char* v = getenv("SCCL_T_EXISTING");
      if (v == nullptr || std::strcmp(v, "1") != 0) wrong.fetch_add(1);
      (void)getenv("SCCL_T_ADDED");
    }
  });
  for (int i = 0; i < 2000; ++i) {
    ScopedEnvironment env({"SCCL_T_ADDED=1", "SCCL_T_ADDED2=2"});
  }
  stop.store(true);
  reader.join();
  EXPECT_EQ(wrong.load(), 0);
  unsetenv("SCCL_T_EXISTING");
}

// ---------------------------------------------------------------------------------------------
// Loading UCX in a child process.

constexpr int kWatched[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGHUP};
void sentinel(int) {}

// The first bytes of libc's functions that UCX's "bistro" hooks would rewrite.
std::vector<uint8_t> code_of(const char* fn) {
  const auto* p = static_cast<const uint8_t*>(dlsym(RTLD_DEFAULT, fn));
  return p == nullptr ? std::vector<uint8_t>{} : std::vector<uint8_t>(p, p + 16);
}
constexpr const char* kHooked[] = {"sbrk", "brk", "mmap", "munmap", "mremap", "madvise", "shmat"};

// What a child reports: empty when every check held, else one line per failed check.
std::string g_report;
void expect(bool ok, const std::string& what) {
  if (!ok) g_report += what + "\n";
}

std::vector<std::vector<uint8_t>> g_code;  // of kHooked, before the load
std::set<std::string> g_env_before;
bool g_loader_altstack = false;  // the load changed the loading thread's signal stack

bool code_unchanged() {
  bool same = true;
  for (size_t i = 0; i < std::size(kHooked); ++i) {
    const bool s = code_of(kHooked[i]) == g_code[i];
    expect(s, std::string("libc's ") + kHooked[i] + " was patched");
    same = same && s;
  }
  return same;
}

// In a child: `setup` (the user's variables), then UCX loaded by SketchCCL's loader on a second
// thread (while this one grows and trims the main heap through brk when `busy_heap`), then
// `check`.
template <typename Setup, typename Check>
std::string in_child(Setup setup, Check check, bool busy_heap) {
  int p[2];
  if (pipe(p) != 0) return "pipe failed";
  fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    setup();
    for (int s : kWatched)
      signal(s, sentinel);
    for (const char* fn : kHooked)
      g_code.push_back(code_of(fn));
    g_env_before = environment();
    std::atomic<bool> loaded{false};
    std::string why;
    std::thread loader([&] {
      stack_t before{}, after{};
      sigaltstack(nullptr, &before);  // (a sanitizer's own, or none)
      if (load_ucx_api(&why) == nullptr) why = "UCX did not load: " + why;
      sigaltstack(nullptr, &after);
      g_loader_altstack = after.ss_sp != before.ss_sp || after.ss_flags != before.ss_flags;
      loaded.store(true);
    });
    // main_arena is the one heap that grows with brk: its top moves while UCX loads.
    while (busy_heap && !loaded.load()) {
      void* blocks[64];
      for (void*& b : blocks) {
        b = malloc(8000);
        std::memset(b, 1, 8000);
      }
      for (void* b : blocks)
        free(b);
    }
    loader.join();
    expect(why.empty(), why);
    void* ucm = dlopen("libucm.so.0", RTLD_NOW | RTLD_NOLOAD);
    const auto* opts =
        ucm ? static_cast<ucm_global_config_t*>(dlsym(ucm, "ucm_global_opts")) : nullptr;
    expect(opts != nullptr, "no ucm_global_opts in libucm.so.0");
    if (opts != nullptr) check(*opts);
    // The heap is whole: blocks split from the top of main_arena, written, freed.
    for (int k = 0; k < 64; ++k) {
      void* b = malloc(100000);
      std::memset(b, 2, 100000);
      free(b);
    }
    const ssize_t n = write(p[1], g_report.data(), g_report.size());
    _exit(n == static_cast<ssize_t>(g_report.size()) ? 0 : 1);
  }
  close(p[1]);
  // A heap cut under malloc can also end in a hang (UCX's crash handler calls malloc): bounded.
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 6000 && !exited; ++i) {
    exited = waitpid(pid, &status, WNOHANG) == pid;
    if (!exited) usleep(10000);
  }
  std::string out;
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    out += "the child hung for 60 s\n";
  } else if (!WIFEXITED(status)) {
    out += "the child died of signal " + std::to_string(WTERMSIG(status)) + "\n";
  }
  char buf[512];  // (the report fits in the pipe: the child never waits for this read)
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0)
    out.append(buf, static_cast<size_t>(n));
  close(p[0]);
  return out;
}

bool handler_is(int sig, void (*h)(int)) {
  struct sigaction sa {};
  sigaction(sig, nullptr, &sa);
  return sa.sa_handler == h;
}

TEST(UcxLoad, LeavesTheHeapLibcsCodeAndTheSignalHandlersOfAThreadedHostAlone) {
  const std::string report = in_child(
      [] {
        for (const char* v : {"UCX_MEM_EVENTS", "UCX_MEM_MALLOC_HOOKS", "UCX_MEM_MALLOC_RELOC",
                              "UCX_HANDLE_ERRORS", "UCX_ERROR_SIGNALS", "UCX_DEBUG_SIGNO"})
          unsetenv(v);
      },
      [](const ucm_global_config_t& opts) {
        expect(opts.enable_events == 0, "UCX's memory events are on");
        expect(opts.enable_malloc_hooks == 0, "UCX's malloc hooks are on");
        expect(opts.enable_malloc_reloc == 0, "UCX's malloc relocations are on");
        code_unchanged();
        expect(environment() == g_env_before, "the environment differs after the load");
        for (int s : kWatched)
          expect(handler_is(s, sentinel),
                 std::string("UCX replaced the handler of ") + strsignal(s));
        expect(!g_loader_altstack, "UCX set an alternate signal stack on the loading thread");
      },
      true);
  EXPECT_EQ(report, "");
}

TEST(UcxLoad, HonoursTheUsersUcxVariables) {
  const std::string report = in_child(
      [] {
        setenv("UCX_MEM_EVENTS", "y", 1);
        setenv("UCX_MEM_MALLOC_HOOKS", "n", 1);  // (UCX's malloc is no part of this test)
        unsetenv("UCX_MEM_MALLOC_RELOC");
        setenv("UCX_ERROR_SIGNALS", "SIGBUS", 1);
        unsetenv("UCX_HANDLE_ERRORS");
        unsetenv("UCX_DEBUG_SIGNO");
      },
      [](const ucm_global_config_t& opts) {
        expect(opts.enable_events == 1, "UCX_MEM_EVENTS=y was not honoured");
        expect(opts.enable_malloc_reloc == 1, "UCX_MEM_MALLOC_RELOC was set though events are on");
        expect(!handler_is(SIGBUS, sentinel), "UCX_ERROR_SIGNALS=SIGBUS was not honoured");
        expect(handler_is(SIGSEGV, sentinel), "UCX replaced the SIGSEGV handler");
        expect(handler_is(SIGHUP, sentinel), "UCX replaced the SIGHUP handler");
        expect(environment() == g_env_before, "the environment differs after the load");
      },
      false);
  EXPECT_EQ(report, "");
}

// tcp's own settings go to UCX only where UCX_TLS lets tcp open.
TEST(UcxHostSettings, TcpMayOpenUnlessUcxTlsLeavesItOut) {
  EXPECT_TRUE(ucx_tls_may_use_tcp(nullptr));
  EXPECT_TRUE(ucx_tls_may_use_tcp(""));
  EXPECT_TRUE(ucx_tls_may_use_tcp("tcp"));
  EXPECT_TRUE(ucx_tls_may_use_tcp("posix,tcp,self"));
  EXPECT_TRUE(ucx_tls_may_use_tcp("all"));
  EXPECT_TRUE(ucx_tls_may_use_tcp("^posix"));
  EXPECT_FALSE(ucx_tls_may_use_tcp("posix,self"));
  EXPECT_FALSE(ucx_tls_may_use_tcp("sm"));
  EXPECT_FALSE(ucx_tls_may_use_tcp("tcpx"));
  EXPECT_FALSE(ucx_tls_may_use_tcp("^tcp"));
  EXPECT_FALSE(ucx_tls_may_use_tcp("^posix,tcp"));
}

}  // namespace
