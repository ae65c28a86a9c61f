// Typed settings come from the configuration table and never substitute a codec silently.
#include "src/coll/settings.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace sketchccl::coll {
namespace {

Config load(std::map<std::string, std::string> env) {
  ConfigSources src;
  src.env = std::move(env);
  return Config::load(src);
}

// Each name the table accepts for a codec variable (but auto) must be a codec the kernels
// build: a name added to config_vars.def without a codec fails here (and at compile time).
TEST(Settings, EveryCodecNameInTheTableHasACodec) {
  for (Var v : {Var::kCodec, Var::kDenseCodec}) {
    const VarSpec& spec = var_spec(v);
    std::string accepted = spec.accepted;
    size_t start = 0;
    while (start <= accepted.size()) {
      size_t bar = accepted.find('|', start);
      if (bar == std::string::npos) bar = accepted.size();
      const std::string name = accepted.substr(start, bar - start);
      start = bar + 1;
      if (name == "auto") continue;
      kernels::CodecId id{};
      Status st = codec_setting(spec, name, &id);
      EXPECT_TRUE(st.ok()) << st.message();
      EXPECT_EQ(name, kernels::codec_name(id));
      Settings s;
      Config c = load({{spec.name, name}});
      ASSERT_TRUE(c.status().ok()) << c.status().message();
      ASSERT_TRUE(Settings::from_config(c, &s).ok()) << spec.name << "=" << name;
      EXPECT_EQ(v == Var::kCodec ? s.codec : s.dense_codec, id);
    }
  }
}

TEST(Settings, ACodecNameWithoutACodecIsAnErrorNotQ8) {
  kernels::CodecId id = kernels::CodecId::kNone;
  Status st = codec_setting(var_spec(Var::kCodec), "q3", &id);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("SKETCHCCL_CODEC='q3'"), std::string::npos) << st.message();
  EXPECT_EQ(id, kernels::CodecId::kNone);
}

TEST(Settings, DefaultsAreTheTables) {
  Settings s;
  const Config& d = Config::defaults();
  EXPECT_EQ(s.auto_codec, d.get_string(Var::kCodec) == "auto");
  EXPECT_EQ(s.dense_codec, kernels::CodecId::kQ8);
  EXPECT_EQ(s.slice_elems, d.get_size(Var::kSliceBytes) / sizeof(float));
  EXPECT_EQ(s.depth, d.get_int(Var::kPipelineDepth));
  EXPECT_EQ(s.s2_rows, d.get_int(Var::kS2Rows));
  EXPECT_EQ(s.timeout_s, d.get_double(Var::kTimeout));
}

TEST(Settings, FromConfigReadsEveryVariable) {
  Config c = load({{"SKETCHCCL_CODEC", "s2"},
                   {"SKETCHCCL_DENSE_CODEC", "q4"},
                   {"SKETCHCCL_SLICE_BYTES", "64K"},
                   {"SKETCHCCL_PIPELINE_DEPTH", "2"},
                   {"SKETCHCCL_SEED", "9"},
                   {"SKETCHCCL_TIMEOUT", "12.5"}});
  ASSERT_TRUE(c.status().ok());
  Settings s;
  ASSERT_TRUE(Settings::from_config(c, &s).ok());
  EXPECT_FALSE(s.auto_codec);
  EXPECT_EQ(s.codec, kernels::CodecId::kS2);
  EXPECT_EQ(s.dense_codec, kernels::CodecId::kQ4);
  EXPECT_EQ(s.slice_elems, 16384u);
  EXPECT_EQ(s.depth, 2);
  EXPECT_EQ(s.seed, 9u);
  EXPECT_EQ(s.timeout_s, 12.5);
}

// A variable the table no longer has (SKETCHCCL_CASQ_BUCKETS, which changed nothing) is a
// warning naming it, never an error: old job scripts still run.
TEST(Settings, ARemovedVariableIsOnlyAWarning) {
  Config c = load({{"SKETCHCCL_CASQ_BUCKETS", "0.01"}, {"SKETCHCCL_CODEC", "casq2"}});
  ASSERT_TRUE(c.status().ok()) << c.status().message();
  ASSERT_EQ(c.unknown_names().size(), 1u);
  EXPECT_EQ(c.unknown_names()[0], "SKETCHCCL_CASQ_BUCKETS");
  bool warned = false;
  for (const std::string& w : c.warnings())
    warned = warned || w.find("SKETCHCCL_CASQ_BUCKETS") != std::string::npos;
  EXPECT_TRUE(warned);
  Settings s;
  ASSERT_TRUE(Settings::from_config(c, &s).ok());
  EXPECT_EQ(s.codec, kernels::CodecId::kCasq2);
}

}  // namespace
}  // namespace sketchccl::coll
