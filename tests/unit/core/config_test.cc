#include "src/core/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace sketchccl {
namespace {

// A temporary file removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char tmpl[] = "/tmp/sketchccl_config_test_XXXXXX";
    int fd = mkstemp(tmpl);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = tmpl;
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

Config load(std::map<std::string, std::string> env, std::vector<std::string> files = {}) {
  ConfigSources src;
  src.env = std::move(env);
  src.files = std::move(files);
  return Config::load(src);
}

TEST(Config, DefaultsComeFromTheTable) {
  Config c = load({});
  EXPECT_TRUE(c.errors().empty());
  EXPECT_EQ(c.get_string(Var::kCodec), "auto");
  EXPECT_EQ(c.get_size(Var::kMinBytes), 1u << 20);
  EXPECT_EQ(c.get_size(Var::kSliceBytes), 1u << 20);
  EXPECT_TRUE(c.get_bool(Var::kEnable));
  EXPECT_FALSE(c.get_bool(Var::kErrorFeedback));
  EXPECT_EQ(c.get_int(Var::kS2Rows), 3);
  EXPECT_DOUBLE_EQ(c.get_double(Var::kTimeout), 300.0);
  EXPECT_EQ(c.setting(Var::kCodec).origin.kind, Origin::kDefault);
  // Every default in the table parses.
  for (const VarSpec& s : var_specs()) {
    Setting out;
    EXPECT_TRUE(parse_value(s, s.default_value, &out).ok()) << s.name;
  }
}

TEST(Config, DefaultsAloneIgnoreTheEnvironment) {
  setenv("SKETCHCCL_SEED", "7", 1);
  const Config& d = Config::defaults();
  unsetenv("SKETCHCCL_SEED");
  EXPECT_TRUE(d.errors().empty());
  Config c = load({});
  for (const VarSpec& s : var_specs())
    EXPECT_EQ(d.setting(s.id).canonical, c.setting(s.id).canonical) << s.name;
  EXPECT_EQ(d.get_int(Var::kSeed), 0);
}

// The compile-time view of the table is the table.
TEST(Config, AcceptedAtCompileTimeMatchesTheTable) {
  for (const VarSpec& s : var_specs())
    EXPECT_EQ(var_accepted(s.id), s.accepted) << s.name;
  static_assert(var_accepted(Var::kTransport) == "auto|ucx|socket");  // no ibverbs: not built
}

TEST(Config, EnvironmentBeatsUserFileBeatsSystemFile) {
  TempFile user("SKETCHCCL_CODEC=q4\nSKETCHCCL_SEED=7\n");
  TempFile system("SKETCHCCL_CODEC=q2\nSKETCHCCL_SEED=9\nSKETCHCCL_S2_ROWS=5\n");
  Config c = load({{"SKETCHCCL_CODEC", "bf16"}}, {user.path(), system.path()});
  ASSERT_TRUE(c.errors().empty());
  EXPECT_EQ(c.get_string(Var::kCodec), "bf16");
  EXPECT_EQ(c.setting(Var::kCodec).origin.kind, Origin::kEnv);
  EXPECT_EQ(c.get_int(Var::kSeed), 7);
  EXPECT_EQ(c.setting(Var::kSeed).origin.file, user.path());
  EXPECT_EQ(c.setting(Var::kSeed).origin.line, 2);
  EXPECT_EQ(c.get_int(Var::kS2Rows), 5);
  EXPECT_EQ(c.setting(Var::kS2Rows).origin.describe(), system.path() + ":3");
}

TEST(Config, CommentsBlankLinesWhitespaceAndQuotes) {
  TempFile f(
      "# a comment\n"
      "\n"
      "   \t\n"
      "  SKETCHCCL_CODEC  =  q8   # trailing comment\n"
      "\tSKETCHCCL_DEBUG_FILE = \"/tmp/with#hash %p.log\"\n"
      "SKETCHCCL_MIN_BYTES=\t4M\r\n");
  Config c = load({}, {f.path()});
  ASSERT_TRUE(c.errors().empty()) << c.status().message();
  EXPECT_EQ(c.get_string(Var::kCodec), "q8");
  EXPECT_EQ(c.get_string(Var::kDebugFile), "/tmp/with#hash %p.log");
  EXPECT_EQ(c.get_size(Var::kMinBytes), 4u << 20);
  EXPECT_EQ(c.setting(Var::kMinBytes).origin.line, 6);
}

TEST(Config, EnvValuesAreTrimmedAndEnumsAreCaseInsensitive) {
  Config c = load({{"SKETCHCCL_CODEC", " CASQ2 "}, {"SKETCHCCL_DEBUG", "info"}});
  ASSERT_TRUE(c.errors().empty());
  EXPECT_EQ(c.get_string(Var::kCodec), "casq2");
  EXPECT_EQ(c.get_string(Var::kDebug), "INFO");
}

TEST(Config, EmptyValueMeansUnset) {
  TempFile f("SKETCHCCL_CODEC=q4\n");
  Config c = load({{"SKETCHCCL_CODEC", ""}}, {f.path()});
  EXPECT_EQ(c.get_string(Var::kCodec), "q4");
}

TEST(Config, UnknownNamesAreWarnedAndListedOnce) {
  TempFile f("SKETCHCCL_CODCE=q8\nNCCL_DEBUG=INFO\n");
  Config c = load({{"SKETCHCCL_CODCE", "q4"}, {"SKETCHCCL_FOO", "1"}}, {f.path()});
  EXPECT_TRUE(c.errors().empty());
  EXPECT_EQ(c.unknown_names(), (std::vector<std::string>{"SKETCHCCL_CODCE", "SKETCHCCL_FOO"}));
  ASSERT_EQ(c.warnings().size(), 3u);  // two unknown names, one foreign name in the file
  EXPECT_NE(c.warnings()[1].find("NCCL_DEBUG is not a SKETCHCCL_ variable"), std::string::npos);
}

TEST(Config, MalformedFileLineIsAnErrorWithFileAndLine) {
  TempFile f("SKETCHCCL_CODEC=q8\njust words\n=value\n");
  Config c = load({}, {f.path()});
  ASSERT_EQ(c.errors().size(), 2u);
  EXPECT_NE(c.errors()[0].find(f.path() + ":2: expected NAME=value"), std::string::npos);
  EXPECT_NE(c.errors()[1].find(f.path() + ":3"), std::string::npos);
  EXPECT_EQ(c.get_string(Var::kCodec), "q8");
}

TEST(Config, NamedConfFileThatIsMissingIsAnError) {
  ConfigSources src;
  src.files = {"/nonexistent/sketchccl.conf"};
  src.must_exist = src.files;
  Config c = Config::load(src);
  ASSERT_EQ(c.errors().size(), 1u);
  EXPECT_NE(c.errors()[0].find("SKETCHCCL_CONF_FILE='/nonexistent/sketchccl.conf' cannot be read"),
            std::string::npos);
  // An absent default file is not an error.
  src.must_exist.clear();
  EXPECT_TRUE(Config::load(src).errors().empty());
}

TEST(Config, ConfFileCannotBeSetFromAFile) {
  TempFile f("SKETCHCCL_CONF_FILE=/etc/other\n");
  Config c = load({}, {f.path()});
  EXPECT_TRUE(c.errors().empty());
  EXPECT_EQ(c.get_string(Var::kConfFile), "");
  EXPECT_EQ(c.warnings().size(), 1u);
}

struct BadValue {
  const char* name;
  const char* value;
  const char* why;  // part of the message
};

class ConfigBadValue : public ::testing::TestWithParam<BadValue> {};

TEST_P(ConfigBadValue, NamesVariableValueAndWhatIsAccepted) {
  const BadValue& p = GetParam();
  Config c = load({{p.name, p.value}});
  ASSERT_EQ(c.errors().size(), 1u) << p.name << "=" << p.value;
  const std::string& msg = c.errors()[0];
  EXPECT_NE(msg.find(std::string(p.name) + "='" + p.value + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("accepted is " + std::string(find_var(p.name)->accepted)), std::string::npos)
      << msg;
  EXPECT_NE(msg.find(p.why), std::string::npos) << msg;
  EXPECT_FALSE(c.status().ok());
  EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
  // The bad value does not replace the default.
  const VarSpec* spec = find_var(p.name);
  Setting def;
  ASSERT_TRUE(parse_value(*spec, spec->default_value, &def).ok());
  EXPECT_EQ(c.setting(spec->id).canonical, def.canonical);
}

INSTANTIATE_TEST_SUITE_P(
    EveryKind, ConfigBadValue,
    ::testing::Values(BadValue{"SKETCHCCL_CODEC", "bogus", "not valid"},
                      BadValue{"SKETCHCCL_ENABLE", "maybe", "not valid"},
                      BadValue{"SKETCHCCL_ENABLE", "2", "not valid"},
                      BadValue{"SKETCHCCL_S2_ROWS", "three", "not an integer"},
                      BadValue{"SKETCHCCL_S2_ROWS", "3.5", "not an integer"},
                      BadValue{"SKETCHCCL_S2_ROWS", "0", "out of range"},
                      BadValue{"SKETCHCCL_S2_ROWS", "99999999999999999999", "not an integer"},
                      BadValue{"SKETCHCCL_SEED", "-1", "out of range"},
                      BadValue{"SKETCHCCL_MIN_BYTES", "1X", "not a size"},
                      BadValue{"SKETCHCCL_MIN_BYTES", "-5", "not a size"},
                      BadValue{"SKETCHCCL_MIN_BYTES", "M", "not a size"},
                      BadValue{"SKETCHCCL_MIN_BYTES", "99999999999T", "not a size"},
                      BadValue{"SKETCHCCL_SLICE_BYTES", "1K", "out of range"},
                      BadValue{"SKETCHCCL_TIMEOUT", "soon", "not a number"},
                      BadValue{"SKETCHCCL_TIMEOUT", "nan", "not a number"},
                      BadValue{"SKETCHCCL_TIMEOUT", "inf", "not a number"},
                      BadValue{"SKETCHCCL_TIMEOUT", "0", "out of range"},
                      BadValue{"SKETCHCCL_S2_BUDGET", "1e400", "not a number"},
                      BadValue{"SKETCHCCL_DEBUG_SUBSYS", "INIT,FOO", "unknown item 'FOO'"},
                      BadValue{"SKETCHCCL_TRANSPORT", "carrier-pigeon", "not valid"}));

TEST(Config, SizesAcceptBinarySuffixes) {
  const VarSpec& spec = var_spec(Var::kMinBytes);
  struct {
    const char* text;
    uint64_t bytes;
  } cases[] = {{"0", 0},           {"4096", 4096},      {"4K", 4096},     {"4k", 4096},
               {"4KB", 4096},      {"4KiB", 4096},      {"2M", 2u << 20}, {"1G", 1u << 30},
               {"1T", 1ull << 40}, {" 16M ", 16u << 20}};
  for (const auto& c : cases) {
    Setting s;
    ASSERT_TRUE(parse_value(spec, c.text, &s).ok()) << c.text;
    EXPECT_EQ(static_cast<uint64_t>(s.int_value), c.bytes) << c.text;
  }
}

TEST(Config, SubsysListAndNegation) {
  Config c = load({{"SKETCHCCL_DEBUG_SUBSYS", "^net, coll"}});
  ASSERT_TRUE(c.errors().empty());
  EXPECT_TRUE(c.setting(Var::kDebugSubsys).list_negated);
  EXPECT_EQ(c.get_list(Var::kDebugSubsys), (std::vector<std::string>{"NET", "COLL"}));
  EXPECT_EQ(c.get_string(Var::kDebugSubsys), "^NET,COLL");
}

TEST(Config, ProtocolHashCoversOnlyProtocolVariables) {
  uint64_t base = load({}).protocol_hash();
  EXPECT_EQ(base, load({{"SKETCHCCL_DEBUG", "TRACE"}}).protocol_hash());
  EXPECT_EQ(base, load({{"SKETCHCCL_TIMEOUT", "10"}}).protocol_hash());
  EXPECT_NE(base, load({{"SKETCHCCL_CODEC", "q4"}}).protocol_hash());
  EXPECT_NE(base, load({{"SKETCHCCL_SLICE_BYTES", "2M"}}).protocol_hash());
  // Spelling does not matter, the value does.
  EXPECT_EQ(load({{"SKETCHCCL_MIN_BYTES", "1024K"}}).protocol_hash(), base);
}

TEST(Config, ExpandPathPattern) {
  std::string p = expand_path_pattern("/tmp/x.%h.%p.%%.log");
  EXPECT_NE(p.find(std::to_string(getpid())), std::string::npos);
  EXPECT_EQ(p.find("%h"), std::string::npos);
  EXPECT_NE(p.find(".%.log"), std::string::npos);
}

}  // namespace
}  // namespace sketchccl
