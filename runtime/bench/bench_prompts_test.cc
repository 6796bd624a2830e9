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
