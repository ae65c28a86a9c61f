#include "src/core/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "src/core/config.h"

namespace sketchccl {
namespace {

struct LogState {
  std::mutex mu;
  std::atomic<bool> configured{false};
  std::atomic<int> level{static_cast<int>(LogLevel::kWarn)};
  std::atomic<uint32_t> mask{kLogAll};
  std::atomic<LogWarnHook> warn_hook{nullptr};
  FILE* out = nullptr;  // nullptr = stderr
  char host[64] = {0};
};

LogState& state() {
  static LogState* s = new LogState();  // leaked on purpose: logging works during exit
  return *s;
}

struct SubsysName {
  uint32_t bit;
  const char* name;
};
constexpr SubsysName kSubsysNames[] = {
    {kLogInit, "INIT"}, {kLogEnv, "ENV"},     {kLogBoot, "BOOT"},   {kLogNet, "NET"},
    {kLogColl, "COLL"}, {kLogCodec, "CODEC"}, {kLogProxy, "PROXY"},
};

void set_target(LogState& s, const std::string& path) {
  if (s.out != nullptr) std::fclose(s.out);
  s.out = nullptr;
  if (path.empty()) return;
  std::string expanded = expand_path_pattern(path);
  s.out = std::fopen(expanded.c_str(), "a");
  if (s.out == nullptr) {
    std::fprintf(stderr, "SketchCCL WARN cannot open SKETCHCCL_DEBUG_FILE '%s': %s; using stderr\n",
                 expanded.c_str(), std::strerror(errno));
  } else {
    setvbuf(s.out, nullptr, _IOLBF, 0);
  }
}

void ensure_configured() {
  if (!state().configured.load(std::memory_order_acquire)) log_configure(Config::global());
}

}  // namespace

const char* log_subsys_name(uint32_t subsys) {
  for (const auto& n : kSubsysNames) {
    if (n.bit == subsys) return n.name;
  }
  return "ALL";
}

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kNone:
      return "NONE";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kTrace:
      return "TRACE";
  }
  return "?";
}

void log_configure_raw(LogLevel level, uint32_t mask, const std::string& path) {
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (gethostname(s.host, sizeof s.host - 1) != 0) std::strcpy(s.host, "unknown");
  s.level.store(static_cast<int>(level));
  s.mask.store(mask);
  set_target(s, path);
  s.configured.store(true, std::memory_order_release);
}

void log_configure(const Config& cfg) {
  const std::string& lv = cfg.get_string(Var::kDebug);
  LogLevel level = lv == "NONE"    ? LogLevel::kNone
                   : lv == "INFO"  ? LogLevel::kInfo
                   : lv == "TRACE" ? LogLevel::kTrace
                                   : LogLevel::kWarn;
  uint32_t mask = 0;
  for (const std::string& item : cfg.get_list(Var::kDebugSubsys)) {
    if (item == "ALL") mask = kLogAll;
    for (const auto& n : kSubsysNames) {
      if (item == n.name) mask |= n.bit;
    }
  }
  if (cfg.setting(Var::kDebugSubsys).list_negated) mask = ~mask;
  log_configure_raw(level, mask, cfg.get_string(Var::kDebugFile));
}

LogWarnHook log_set_warn_hook(LogWarnHook hook) {
  return state().warn_hook.exchange(hook, std::memory_order_acq_rel);
}

bool log_enabled(LogLevel level, uint32_t subsys) {
  ensure_configured();
  const LogState& s = state();
  if (level == LogLevel::kWarn && s.warn_hook.load(std::memory_order_acquire) != nullptr)
    return true;  // the hook sees every WARN; log_write still applies the level
  if (static_cast<int>(level) > s.level.load(std::memory_order_relaxed)) return false;
  return level == LogLevel::kWarn || (s.mask.load(std::memory_order_relaxed) & subsys) != 0;
}

void log_write(LogLevel level, uint32_t subsys, const char* file, int line, const char* fmt, ...) {
  ensure_configured();
  LogState& s = state();
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  // WARN lines say where they come from (the file's base name and the line), as NCCL's do.
  char where[128] = "";
  if (level == LogLevel::kWarn && file != nullptr) {
    const char* slash = std::strrchr(file, '/');
    std::snprintf(where, sizeof where, " %s:%d", slash != nullptr ? slash + 1 : file, line);
  }
  char text[2432];
  std::snprintf(text, sizeof text, "%s:%d:%ld%s SKETCHCCL %s %s %s\n", s.host,
                static_cast<int>(getpid()), static_cast<long>(syscall(SYS_gettid)), where,
                log_level_name(level), log_subsys_name(subsys), msg);
  if (level == LogLevel::kWarn) {
    LogWarnHook hook = s.warn_hook.load(std::memory_order_acquire);
    if (hook != nullptr) {
      size_t n = std::strlen(text);
      if (n > 0 && text[n - 1] == '\n') --n;
      hook(std::string(text, n).c_str());
    }
  }
  if (static_cast<int>(level) > s.level.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(s.mu);
  std::fputs(text, s.out != nullptr ? s.out : stderr);
}

}  // namespace sketchccl
