#include "runtime/model/generation_config.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(GenerationConfigTest, EosAsListAndSamplingDefaults) {
  absl::StatusOr<GenerationConfig> c = ParseGenerationConfig(
      R"({"bos_token_id": 128000, "do_sample": true,
          "eos_token_id": [128001, 128008, 128009], "temperature": 0.6, "top_p": 0.9,
          "min_p": 0.05, "transformers_version": "4.45.0"})",
      "g.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->eos_token_ids, ElementsAre(128001, 128008, 128009));
  EXPECT_EQ(c->bos_token_id, 128000);
  EXPECT_FALSE(c->pad_token_id.has_value());
  EXPECT_FLOAT_EQ(*c->temperature, 0.6f);
  EXPECT_FLOAT_EQ(*c->top_p, 0.9f);
  EXPECT_FLOAT_EQ(*c->min_p, 0.05f);
  EXPECT_FALSE(c->top_k.has_value());
  EXPECT_TRUE(c->has_sampling_defaults());
}

TEST(GenerationConfigTest, EosAsNumberAndNoSampling) {
  absl::StatusOr<GenerationConfig> c =
      ParseGenerationConfig(R"({"eos_token_id": 2, "pad_token_id": null, "top_k": 20})", "g.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2));
  EXPECT_EQ(c->top_k, 20);
  EXPECT_TRUE(c->has_sampling_defaults());
  absl::StatusOr<GenerationConfig> empty = ParseGenerationConfig("{}", "g.json");
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->has_sampling_defaults());
  EXPECT_TRUE(empty->eos_token_ids.empty());
}

TEST(GenerationConfigTest, BadFieldsNameTheFileAndField) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"[1]", "not a JSON object"},
      {"{", "not a JSON object"},
      {R"({"eos_token_id": [1, 4294967297]})", "eos_token_id[1]"},
      {R"({"eos_token_id": -1})", "eos_token_id"},
      {R"({"eos_token_id": "2"})", "eos_token_id"},
      {R"({"bos_token_id": 1.0})", "bos_token_id"},
      {R"({"temperature": -0.5})", "temperature"},
      {R"({"temperature": "hot"})", "temperature"},
      {R"({"top_p": 0})", "top_p"},
      {R"({"top_p": 1.5})", "top_p"},
      {R"({"min_p": 1.5})", "min_p must be in [0, 1]"},
      {R"({"min_p": -0.1})", "min_p must be in [0, 1]"},
      {R"({"min_p": "low"})", "min_p"},
      {R"({"top_k": -3})", "top_k"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<GenerationConfig> parsed = ParseGenerationConfig(c.text, "dir/g.json");
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("dir/g.json")) << c.text;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(c.expect)) << c.text;
  }
}

TEST(GenerationConfigTest, LoadFromAFolder) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/generation_config";
  std::filesystem::create_directories(dir);
  absl::StatusOr<GenerationConfig> none = LoadGenerationConfig(dir);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->eos_token_ids.empty());
  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": [7, 9]})";
  absl::StatusOr<GenerationConfig> some = LoadGenerationConfig(dir);
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_THAT(some->eos_token_ids, ElementsAre(7, 9));
}

}  // namespace
}  // namespace verdict
