#include "runtime/bench/bench_prompts.h"

#include <cstdio>
#include <fstream>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BuiltinPromptsTest, ThirtyTwoDistinctAsciiTexts) {
  const std::vector<BenchPrompt>& prompts = BuiltinPrompts();
  ASSERT_EQ(prompts.size(), 32u);
  std::set<std::string> distinct;
  for (const BenchPrompt& p : prompts) {
    EXPECT_TRUE(p.token_ids.empty());
    EXPECT_GT(p.text.size(), 40u) << p.text;
    for (char c : p.text) EXPECT_TRUE(c == '\n' || (c >= 32 && c < 127)) << p.text;
    EXPECT_EQ(p.ToJson(), nlohmann::json(p.text));
    distinct.insert(p.text);
  }
  EXPECT_EQ(distinct.size(), prompts.size());
  EXPECT_EQ(&BuiltinPrompts(), &prompts);  // one set, always in one order
}

TEST(ParsePromptsJsonlTest, TextAndTokenIds) {
  absl::StatusOr<std::vector<BenchPrompt>> p = ParsePromptsJsonl(
      "{\"prompt\": \"Call me Ishmael.\", \"source\": \"ignored\"}\n"
      "\n"
      "  {\"prompt\": [1, 300, 4095]}\r\n");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].text, "Call me Ishmael.");
  EXPECT_EQ((*p)[0].ToJson(), "Call me Ishmael.");
  EXPECT_THAT((*p)[1].token_ids, ElementsAre(1, 300, 4095));
  EXPECT_EQ((*p)[1].ToJson(), nlohmann::json({1, 300, 4095}));
}

TEST(ParsePromptsJsonlTest, ErrorsNameTheLine) {
  auto error = [](const char* text) {
    absl::StatusOr<std::vector<BenchPrompt>> p = ParsePromptsJsonl(text);
    return p.ok() ? std::string("ok") : std::string(p.status().message());
  };
  EXPECT_THAT(error("{\"prompt\": \"a\"}\n{oops"), HasSubstr("line 2: not valid JSON"));
  EXPECT_THAT(error("[1, 2]"), HasSubstr("line 1: not a JSON object"));
  EXPECT_THAT(error("{\"text\": \"a\"}"), HasSubstr("no \"prompt\""));
  EXPECT_THAT(error("{\"prompt\": \"\"}"), HasSubstr("empty"));
  EXPECT_THAT(error("{\"prompt\": []}"), HasSubstr("empty"));
  EXPECT_THAT(error("{\"prompt\": [1, -2]}"), HasSubstr("not a token id"));
  EXPECT_THAT(error("{\"prompt\": [1, 2.5]}"), HasSubstr("not a token id"));
  EXPECT_THAT(error("{\"prompt\": 7}"), HasSubstr("neither"));
  EXPECT_THAT(error("\n\n"), HasSubstr("no prompt"));
}

// A token id is an int32 of the vocabulary: 2^32 + 1 is not id 1.
TEST(ParsePromptsJsonlTest, TokenIdsMustFitInt32) {
  auto error = [](const std::string& text) {
    absl::StatusOr<std::vector<BenchPrompt>> p = ParsePromptsJsonl(text);
    return p.ok() ? std::string("ok") : std::string(p.status().message());
  };
  EXPECT_EQ(error("{\"prompt\": [1]}\n{\"prompt\": [1, 4294967297]}"),
            "prompts line 2: a token id list holds something that is not a token id: "
            "prompt[1]: expected an integer in [0, 2147483647], got 4294967297");
  EXPECT_THAT(error("{\"prompt\": [2147483648]}"),
              HasSubstr("prompt[0]: expected an integer in [0, 2147483647], got 2147483648"));
  EXPECT_THAT(error("{\"prompt\": [18446744073709551615]}"),
              HasSubstr("prompt[0]: expected an integer in [0, 2147483647], got "
                        "18446744073709551615"));
  EXPECT_THAT(error("{\"prompt\": [-1]}"),
              HasSubstr("prompt[0]: expected an integer in [0, 2147483647], got -1"));
  EXPECT_THAT(error("{\"prompt\": [1.0]}"),
              HasSubstr("prompt[0]: expected an integer in [0, 2147483647], got 1.0"));
  EXPECT_THAT(error("{\"prompt\": [true]}"),
              HasSubstr("prompt[0]: expected an integer in [0, 2147483647], got true"));
  EXPECT_EQ(error("{\"prompt\": [0, 2147483647]}"), "ok");

  const std::string path = ::testing::TempDir() + "/wide_ids.jsonl";
  std::ofstream(path) << "{\"prompt\": [4294967297]}\n";
  absl::StatusOr<std::vector<BenchPrompt>> loaded = LoadPrompts(path);
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr(path + ": prompts line 1: a token id list holds something that is not a "
                               "token id: prompt[0]"));
}

TEST(LoadPromptsTest, BuiltinOrFile) {
  absl::StatusOr<std::vector<BenchPrompt>> builtin = LoadPrompts("builtin");
  ASSERT_TRUE(builtin.ok());
  EXPECT_EQ(builtin->size(), 32u);

  const std::string path =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
      "/bench_prompts_test.jsonl";
  std::ofstream(path) << "{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n";
  absl::StatusOr<std::vector<BenchPrompt>> file = LoadPrompts(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->size(), 2u);
  EXPECT_EQ((*file)[1].text, "two");
  std::remove(path.c_str());

  absl::StatusOr<std::vector<BenchPrompt>> missing = LoadPrompts(path);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace verdict
