// Configuration: environment first, then $SKETCHCCL_CONF_FILE or ~/.sketchccl.conf, then
// /etc/sketchccl.conf, then the defaults of config_vars.def.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/status.h"

namespace sketchccl {

enum class VarType { Bool, Int, Size, Double, Enum, EnumList, String };

enum class Var : int {
#define SCCL_VAR(id, name, type, def, accepted, min, max, proto, desc) id,
#include "src/core/config_vars.def"
#undef SCCL_VAR
  kCount
};

struct VarSpec {
  Var id;
  const char* name;
  VarType type;
  const char* default_value;
  const char* accepted;
  double min;
  double max;
  bool protocol;  // must agree across the ranks of a communicator
  const char* description;
};

// The table, in declaration order.
const std::vector<VarSpec>& var_specs();

// A variable's accepted text at compile time, so that code can static_assert that it handles
// exactly the values an Enum accepts (its '|'-separated names).
constexpr std::string_view var_accepted(Var v) {
  constexpr std::string_view kAccepted[] = {
#define SCCL_VAR(id, name, type, def, accepted, min, max, proto, desc) accepted,
#include "src/core/config_vars.def"
#undef SCCL_VAR
  };
  return kAccepted[static_cast<int>(v)];
}

const VarSpec& var_spec(Var v);
const VarSpec* find_var(std::string_view name);
const char* var_type_name(VarType t);

// Where a value came from.
struct Origin {
  enum Kind { kDefault, kEnv, kFile } kind = kDefault;
  std::string file;              // for kFile
  int line = 0;                  // for kFile
  std::string describe() const;  // "default", "environment", "/etc/sketchccl.conf:3"
};

// One resolved variable: raw text, canonical text and the parsed value.
struct Setting {
  std::string raw;
  std::string canonical;  // normalised spelling (enum canonical case, size in bytes, ...)
  Origin origin;
  bool bool_value = false;
  int64_t int_value = 0;  // Int and Size
  double double_value = 0;
  std::vector<std::string> list_value;  // EnumList items, canonical spelling
  bool list_negated = false;            // EnumList written with a leading '^': all but these
};

// What to read: a snapshot of the environment and the files in precedence order.
struct ConfigSources {
  std::map<std::string, std::string> env;
  std::vector<std::string> files;       // highest precedence first
  std::vector<std::string> must_exist;  // files named explicitly (SKETCHCCL_CONF_FILE)

  // The process environment; files: $SKETCHCCL_CONF_FILE or ~/.sketchccl.conf, then /etc.
  static ConfigSources from_process();
};

// Parses one value for a variable; on failure the message names the variable, the value and
// what is accepted. Exposed for tests.
Status parse_value(const VarSpec& spec, const std::string& raw, Setting* out);

class Config {
 public:
  // Reads every source and collects all problems (never stops at the first).
  static Config load(const ConfigSources& sources);
  // The process-wide configuration, loaded once on first use (thread-safe).
  static const Config& global();
  // The table's defaults alone (no environment, no file): what typed settings structs start
  // from, so that no default is written twice.
  static const Config& defaults();

  bool get_bool(Var v) const { return at(v).bool_value; }
  int64_t get_int(Var v) const { return at(v).int_value; }
  uint64_t get_size(Var v) const { return static_cast<uint64_t>(at(v).int_value); }
  double get_double(Var v) const { return at(v).double_value; }
  const std::string& get_string(Var v) const { return at(v).canonical; }
  const std::vector<std::string>& get_list(Var v) const { return at(v).list_value; }
  const Setting& setting(Var v) const { return at(v); }

  // Bad values, unreadable named files, malformed lines: each a full sentence.
  const std::vector<std::string>& errors() const { return errors_; }
  // Unknown SKETCHCCL_* names and ignored lines: each a full sentence.
  const std::vector<std::string>& warnings() const { return warnings_; }
  const std::vector<std::string>& unknown_names() const { return unknown_; }
  // Ok, or kInvalidArgument carrying every error.
  Status status() const;
  // FNV-1a over the canonical values of the protocol variables, for cross-rank checks.
  uint64_t protocol_hash() const;

 private:
  const Setting& at(Var v) const { return settings_[static_cast<size_t>(v)]; }
  std::vector<Setting> settings_;
  std::vector<std::string> errors_;
  std::vector<std::string> warnings_;
  std::vector<std::string> unknown_;
};

// Expands %h (host name) and %p (pid) in a path pattern, as NCCL_DEBUG_FILE does.
std::string expand_path_pattern(const std::string& pattern);

}  // namespace sketchccl
