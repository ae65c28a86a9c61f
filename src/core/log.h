// Logging: SKETCHCCL_DEBUG level, SKETCHCCL_DEBUG_SUBSYS filter, SKETCHCCL_DEBUG_FILE target.
// Lines read "host:pid:tid SKETCHCCL LEVEL SUBSYS message", written whole under a lock; WARN
// lines also name their source, as NCCL's do: "host:pid:tid file.cc:123 SKETCHCCL WARN ...".
#pragma once

#include <cstdint>
#include <string>

namespace sketchccl {

class Config;

enum class LogLevel : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

// Subsystems, as bits, named as SKETCHCCL_DEBUG_SUBSYS spells them.
enum LogSubsys : uint32_t {
  kLogInit = 1u << 0,
  kLogEnv = 1u << 1,
  kLogBoot = 1u << 2,
  kLogNet = 1u << 3,
  kLogColl = 1u << 4,
  kLogCodec = 1u << 5,
  kLogProxy = 1u << 6,
  kLogAll = ~0u,
};

const char* log_subsys_name(uint32_t subsys);
const char* log_level_name(LogLevel level);

// Applies a configuration; the first log call does this with Config::global() if nobody has.
void log_configure(const Config& cfg);
// For tests: route lines to `path` ("" = stderr) at `level` for `mask`.
void log_configure_raw(LogLevel level, uint32_t mask, const std::string& path);

bool log_enabled(LogLevel level, uint32_t subsys);
// `file` and `line` locate the call (printed on WARN lines only).
void log_write(LogLevel level, uint32_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

// For tests: `hook` receives every WARN line (without its newline), whatever the level, on the
// thread that logs it, before it is written; nullptr removes it. The hook must not log.
// Returns the hook it replaces.
using LogWarnHook = void (*)(const char* line);
LogWarnHook log_set_warn_hook(LogWarnHook hook);

}  // namespace sketchccl

// WARN lines are printed whatever the subsystem filter says, as in NCCL.
#define SCCL_LOG(level, subsys, ...)                                          \
  do {                                                                        \
    if (::sketchccl::log_enabled(level, subsys))                              \
      ::sketchccl::log_write(level, subsys, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define SCCL_WARN(subsys, ...) SCCL_LOG(::sketchccl::LogLevel::kWarn, subsys, __VA_ARGS__)
#define SCCL_INFO(subsys, ...) SCCL_LOG(::sketchccl::LogLevel::kInfo, subsys, __VA_ARGS__)
#define SCCL_TRACE(subsys, ...) SCCL_LOG(::sketchccl::LogLevel::kTrace, subsys, __VA_ARGS__)
