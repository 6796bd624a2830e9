#include "runtime/text/bpe.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict::hf {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<BpeModel> Model(const std::string& spec) {
  absl::StatusOr<std::unique_ptr<BpeModel>> m = BpeModel::Parse(json::parse(spec), 0);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

std::vector<int32_t> Ids(const BpeModel& m, const std::string& word) {
  std::vector<int32_t> ids;
  m.Tokenize(word, &ids);
  return ids;
}

constexpr char kAbc[] = R"({"type": "BPE",
    "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "cc": 6},
    "merges": [["b", "c"], "a b", ["a", "bc"], "c c"]})";

TEST(BpeTest, LowestRankMergesFirst) {
  std::unique_ptr<BpeModel> m = Model(kAbc);
  ASSERT_NE(m, nullptr);
  // "b c" outranks "a b", so "abc" goes a+bc -> abc, and "abab" a+b twice.
  EXPECT_THAT(Ids(*m, "abc"), ElementsAre(5));
  EXPECT_THAT(Ids(*m, "abab"), ElementsAre(3, 3));
  // Equal ranks merge leftmost first: "ccc" is cc + c.
  EXPECT_THAT(Ids(*m, "ccc"), ElementsAre(6, 2));
  EXPECT_THAT(Ids(*m, "cabc"), ElementsAre(2, 5));
  // A second time comes from the cache, with the same answer.
  EXPECT_THAT(Ids(*m, "abc"), ElementsAre(5));
  EXPECT_EQ(m->TokenToId("bc"), 4);
  EXPECT_EQ(*m->IdToToken(6), "cc");
  EXPECT_EQ(m->IdToToken(7), nullptr);
}

TEST(BpeTest, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  // Without ignore_merges "aab" is a + ab (the merges never make "aab").
  const std::string vocab = R"("vocab": {"a": 0, "b": 1, "ab": 2, "aab": 3}, "merges": ["a b"])";
  std::unique_ptr<BpeModel> plain = Model(R"({"type": "BPE", )" + vocab + "}");
  std::unique_ptr<BpeModel> ignore = Model(R"({"type": "BPE", "ignore_merges": true, )" + vocab + "}");
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(ignore, nullptr);
  EXPECT_THAT(Ids(*plain, "aab"), ElementsAre(0, 2));
  EXPECT_THAT(Ids(*ignore, "aab"), ElementsAre(3));
}

TEST(BpeTest, ByteFallbackAndFusedUnknowns) {
  std::unique_ptr<BpeModel> m = Model(R"({"type": "BPE", "unk_token": "<unk>", "fuse_unk": true,
      "byte_fallback": true, "vocab": {"<unk>": 0, "a": 1, "<0xC3>": 2, "<0xA9>": 3},
      "merges": []})");
  ASSERT_NE(m, nullptr);
  // "é" is C3 A9, both byte pieces exist; "ü" (C3 BC) lacks BC and is <unk>;
  // two unknowns in a row fuse into one.
  EXPECT_THAT(Ids(*m, "a\xC3\xA9"), ElementsAre(1, 2, 3));
  EXPECT_THAT(Ids(*m, "\xC3\xBC\xC3\xBC" "a"), ElementsAre(0, 1));
  std::unique_ptr<BpeModel> no_unk = Model(R"({"type": "BPE", "vocab": {"a": 0}, "merges": []})");
  ASSERT_NE(no_unk, nullptr);
  EXPECT_THAT(Ids(*no_unk, "xa"), ElementsAre(0));  // the library drops what it cannot spell
}

TEST(BpeTest, ContinuingSubwordPrefixAndSuffix) {
  std::unique_ptr<BpeModel> m = Model(R"({"type": "BPE", "continuing_subword_prefix": "##",
      "vocab": {"a": 0, "##b": 1, "ab": 2}, "merges": ["a ##b"]})");
  ASSERT_NE(m, nullptr);
  EXPECT_THAT(Ids(*m, "ab"), ElementsAre(2));
}

TEST(BpeTest, InconsistentFilesAreErrors) {
  const auto error = [](const std::string& spec, size_t extra = 0) {
    absl::StatusOr<std::unique_ptr<BpeModel>> m = BpeModel::Parse(json::parse(spec), extra);
    EXPECT_FALSE(m.ok());
    return std::string(m.status().message());
  };
  EXPECT_THAT(error(R"({"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []})"),
              HasSubstr("id 0 is given to both"));
  EXPECT_THAT(error(R"({"type": "BPE", "vocab": {"a": 0, "b": 5}, "merges": []})"),
              HasSubstr("\"b\" has id 5, outside [0, 2)"));
  EXPECT_THAT(error(R"({"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a c"]})"),
              HasSubstr("names a token \"c\""));
  EXPECT_THAT(error(R"({"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]})"),
              HasSubstr("makes \"ab\""));
  EXPECT_THAT(error(R"({"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]})"),
              HasSubstr("is not two tokens"));
  EXPECT_THAT(error(R"({"type": "BPE", "unk_token": "<unk>", "vocab": {"a": 0}, "merges": []})"),
              HasSubstr("unk_token \"<unk>\""));
  EXPECT_THAT(error(R"({"type": "Unigram", "vocab": []})"), HasSubstr("model type \"Unigram\""));
  // Ids beyond the vocabulary are fine up to the added tokens' count.
  EXPECT_TRUE(BpeModel::Parse(json::parse(R"({"type": "BPE", "vocab": {"a": 0, "b": 2}, "merges": []})"), 1)
                  .ok());
}

}  // namespace
}  // namespace verdict::hf
