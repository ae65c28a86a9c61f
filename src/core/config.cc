#include "src/core/config.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

extern char** environ;

namespace sketchccl {
namespace {

constexpr const char* kPrefix = "SKETCHCCL_";

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

std::string lower(std::string s) {
  for (char& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

Status bad_value(const VarSpec& spec, const std::string& raw, const char* why) {
  return errorf(Code::kInvalidArgument, "%s='%s' is not valid%s%s: accepted is %s", spec.name,
                raw.c_str(), why[0] ? ": " : "", why, spec.accepted);
}

// Integer with an optional binary suffix K, M, G, T (and an optional trailing B or iB).
bool parse_size(const std::string& text, int64_t* out) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno == ERANGE) return false;
  std::string suffix = lower(end);
  if (suffix.size() >= 2 && suffix.compare(suffix.size() - 2, 2, "ib") == 0) {
    suffix.resize(suffix.size() - 2);
    if (suffix.empty()) return false;  // "iB" alone is not a unit
  } else if (!suffix.empty() && suffix.back() == 'b') {
    suffix.pop_back();
  }
  int shift = 0;
  if (suffix == "")
    shift = 0;
  else if (suffix == "k")
    shift = 10;
  else if (suffix == "m")
    shift = 20;
  else if (suffix == "g")
    shift = 30;
  else if (suffix == "t")
    shift = 40;
  else
    return false;
  if (v > (static_cast<unsigned long long>(INT64_MAX) >> shift)) return false;
  *out = static_cast<int64_t>(v << shift);
  return true;
}

bool parse_int(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0') return false;
  *out = v;
  return true;
}

bool parse_double(const std::string& text, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (errno == ERANGE || *end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

// Matches an enum item case-insensitively; returns the canonical spelling or "".
std::string match_enum(const VarSpec& spec, const std::string& item) {
  for (const std::string& choice : split(spec.accepted, '|')) {
    if (lower(choice) == lower(item)) return choice;
  }
  return "";
}

std::string format_number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

bool is_blank_or_comment(const std::string& line) {
  return line.empty() || line[0] == '#';
}

}  // namespace

const std::vector<VarSpec>& var_specs() {
  static const std::vector<VarSpec> specs = {
#define SCCL_VAR(id, name, type, def, accepted, min, max, proto, desc) \
  {Var::id, name, VarType::type, def, accepted, min, max, proto != 0, desc},
#include "src/core/config_vars.def"
#undef SCCL_VAR
  };
  return specs;
}

const VarSpec& var_spec(Var v) {
  return var_specs()[static_cast<size_t>(v)];
}

const VarSpec* find_var(std::string_view name) {
  for (const VarSpec& s : var_specs()) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

const char* var_type_name(VarType t) {
  switch (t) {
    case VarType::Bool:
      return "bool";
    case VarType::Int:
      return "int";
    case VarType::Size:
      return "size";
    case VarType::Double:
      return "number";
    case VarType::Enum:
      return "enum";
    case VarType::EnumList:
      return "list";
    case VarType::String:
      return "string";
  }
  return "?";
}

std::string Origin::describe() const {
  switch (kind) {
    case kDefault:
      return "default";
    case kEnv:
      return "environment";
    case kFile:
      return file + ":" + std::to_string(line);
  }
  return "?";
}

Status parse_value(const VarSpec& spec, const std::string& raw, Setting* out) {
  out->raw = raw;
  const std::string text = trim(raw);
  switch (spec.type) {
    case VarType::Bool: {
      std::string t = lower(text);
      if (t == "1" || t == "true" || t == "yes" || t == "on") {
        out->bool_value = true;
      } else if (t == "0" || t == "false" || t == "no" || t == "off") {
        out->bool_value = false;
      } else {
        return bad_value(spec, raw, "");
      }
      out->canonical = out->bool_value ? "1" : "0";
      out->int_value = out->bool_value;
      return Status::Ok();
    }
    case VarType::Int: {
      int64_t v = 0;
      if (!parse_int(text, &v)) return bad_value(spec, raw, "not an integer");
      if (v < spec.min || v > spec.max) return bad_value(spec, raw, "out of range");
      out->int_value = v;
      out->double_value = static_cast<double>(v);
      out->canonical = std::to_string(v);
      return Status::Ok();
    }
    case VarType::Size: {
      int64_t v = 0;
      if (!parse_size(text, &v)) return bad_value(spec, raw, "not a size");
      if (static_cast<double>(v) < spec.min || static_cast<double>(v) > spec.max) {
        return bad_value(spec, raw, "out of range");
      }
      out->int_value = v;
      out->double_value = static_cast<double>(v);
      out->canonical = std::to_string(v);
      return Status::Ok();
    }
    case VarType::Double: {
      double v = 0;
      if (!parse_double(text, &v)) return bad_value(spec, raw, "not a number");
      if (v < spec.min || v > spec.max) return bad_value(spec, raw, "out of range");
      out->double_value = v;
      out->canonical = format_number(v);
      return Status::Ok();
    }
    case VarType::Enum: {
      std::string c = match_enum(spec, text);
      if (c.empty()) return bad_value(spec, raw, "");
      out->canonical = c;
      return Status::Ok();
    }
    case VarType::EnumList: {
      std::string body = text;
      out->list_negated = !body.empty() && body[0] == '^';
      if (out->list_negated) body = body.substr(1);
      out->list_value.clear();
      std::string canonical;
      for (const std::string& item : split(body, ',')) {
        std::string c = match_enum(spec, trim(item));
        if (c.empty()) return bad_value(spec, raw, ("unknown item '" + trim(item) + "'").c_str());
        canonical += (canonical.empty() ? "" : ",") + c;
        out->list_value.push_back(c);
      }
      out->canonical = (out->list_negated ? "^" : "") + canonical;
      return Status::Ok();
    }
    case VarType::String:
      out->canonical = text;
      return Status::Ok();
  }
  return bad_value(spec, raw, "unknown type");
}

ConfigSources ConfigSources::from_process() {
  ConfigSources s;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    std::string name(*e, static_cast<size_t>(eq - *e));
    if (name.rfind(kPrefix, 0) == 0) s.env[name] = eq + 1;
  }
  auto conf = s.env.find("SKETCHCCL_CONF_FILE");
  if (conf != s.env.end() && !trim(conf->second).empty()) {
    s.files.push_back(trim(conf->second));
    s.must_exist.push_back(trim(conf->second));
  } else if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0') {
    s.files.push_back(std::string(home) + "/.sketchccl.conf");
  }
  s.files.push_back("/etc/sketchccl.conf");
  return s;
}

Config Config::load(const ConfigSources& sources) {
  Config cfg;
  const auto& specs = var_specs();
  cfg.settings_.resize(specs.size());
  std::vector<bool> set(specs.size(), false);

  // Lowest precedence first, so that later sources overwrite earlier ones.
  for (const VarSpec& spec : specs) {
    Setting s;
    Status st = parse_value(spec, spec.default_value, &s);
    if (!st.ok()) cfg.errors_.push_back("internal: bad default: " + st.message());
    cfg.settings_[static_cast<size_t>(spec.id)] = s;
  }

  std::set<std::string> unknown;
  auto apply = [&](const std::string& name, const std::string& value, const Origin& origin) {
    const VarSpec* spec = find_var(name);
    if (spec == nullptr) {
      if (unknown.insert(name).second) {
        cfg.unknown_.push_back(name);
        cfg.warnings_.push_back("unknown variable " + name + " (from " + origin.describe() +
                                ") is ignored; see sketchccl-info --help for the list");
      }
      return;
    }
    if (trim(value).empty()) return;  // empty means unset, as for NCCL variables
    if (spec->id == Var::kConfFile && origin.kind == Origin::kFile) {
      cfg.warnings_.push_back(name + " in " + origin.describe() +
                              " is ignored: it is read from the environment only");
      return;
    }
    Setting s;
    Status st = parse_value(*spec, value, &s);
    if (!st.ok()) {
      std::string where = origin.kind == Origin::kEnv ? "" : " (in " + origin.describe() + ")";
      cfg.errors_.push_back(st.message() + where);
      return;
    }
    s.origin = origin;
    cfg.settings_[static_cast<size_t>(spec->id)] = s;
  };

  for (auto f = sources.files.rbegin(); f != sources.files.rend(); ++f) {
    std::ifstream in(*f);
    if (!in) {
      bool named = false;
      for (const std::string& m : sources.must_exist)
        named = named || m == *f;
      if (named) {
        cfg.errors_.push_back("SKETCHCCL_CONF_FILE='" + *f +
                              "' cannot be read: " + std::strerror(errno));
      }
      continue;
    }
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      std::string t = trim(line);
      if (is_blank_or_comment(t)) continue;
      // A '#' after whitespace starts a trailing comment.
      for (size_t i = 1; i < t.size(); ++i) {
        if (t[i] == '#' && (t[i - 1] == ' ' || t[i - 1] == '\t')) {
          t = trim(t.substr(0, i));
          break;
        }
      }
      Origin origin{Origin::kFile, *f, lineno};
      size_t eq = t.find('=');
      if (eq == std::string::npos || eq == 0) {
        cfg.errors_.push_back(origin.describe() + ": expected NAME=value, got '" + t + "'");
        continue;
      }
      std::string name = trim(t.substr(0, eq));
      std::string value = trim(t.substr(eq + 1));
      if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
          value.back() == value.front()) {
        value = value.substr(1, value.size() - 2);
      }
      if (name.rfind(kPrefix, 0) != 0) {
        cfg.warnings_.push_back(origin.describe() + ": " + name +
                                " is not a SKETCHCCL_ variable and is ignored");
        continue;
      }
      apply(name, value, origin);
    }
  }
  for (const auto& [name, value] : sources.env) {
    if (name.rfind(kPrefix, 0) == 0) apply(name, value, Origin{Origin::kEnv, "", 0});
  }
  return cfg;
}

const Config& Config::global() {
  static const Config cfg = Config::load(ConfigSources::from_process());
  return cfg;
}

const Config& Config::defaults() {
  static const Config cfg = Config::load(ConfigSources{});
  return cfg;
}

Status Config::status() const {
  if (errors_.empty()) return Status::Ok();
  std::string msg = "bad configuration: ";
  for (size_t i = 0; i < errors_.size(); ++i)
    msg += (i ? "; " : "") + errors_[i];
  return Status(Code::kInvalidArgument, msg);
}

uint64_t Config::protocol_hash() const {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const std::string& s) {
    for (unsigned char c : s)
      h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;  // separator, so "ab","c" != "a","bc"
  };
  for (const VarSpec& spec : var_specs()) {
    if (!spec.protocol) continue;
    mix(spec.name);
    mix(at(spec.id).canonical);
  }
  return h;
}

std::string expand_path_pattern(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[i + 1];
      if (c == 'h') {
        char host[256] = {0};
        if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown");
        out += host;
        ++i;
        continue;
      }
      if (c == 'p') {
        out += std::to_string(getpid());
        ++i;
        continue;
      }
      if (c == '%') {
        out += '%';
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

}  // namespace sketchccl
