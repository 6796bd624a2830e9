#include "runtime/text/tokenizer_match.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace verdict {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::string kTestdata = "runtime/text/testdata";

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// A model folder holding `tokenizer` as its tokenizer.json.
std::string WriteFolder(const std::string& name, const json& tokenizer) {
  const fs::path dir = fs::path(std::getenv("TEST_TMPDIR")) / name;
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
  return dir.string();
}

TEST(CheckDraftTokenizer, SameTokenizerInTwoFoldersIsAccepted) {
  const json gpt2 = ReadJson(kTestdata + "/gpt2/tokenizer.json");
  const std::string a = WriteFolder("same_a", gpt2);
  const std::string b = WriteFolder("same_b", gpt2);
  EXPECT_TRUE(CheckDraftTokenizer(a, b).ok()) << CheckDraftTokenizer(a, b);
}

TEST(CheckDraftTokenizer, BundledSentencePieceModelsMatch) {
  EXPECT_TRUE(CheckDraftTokenizer("models/target", "models/draft").ok());
}

TEST(CheckDraftTokenizer, DifferentSizeNamesBothFoldersAndSizes) {
  const std::string target = WriteFolder("size_t", ReadJson(kTestdata + "/gpt2/tokenizer.json"));
  const std::string draft = WriteFolder("size_d", ReadJson(kTestdata + "/qwen2/tokenizer.json"));
  absl::Status s = CheckDraftTokenizer(target, draft);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr(target), HasSubstr(draft),
                                 HasSubstr("vocabulary size 6002 (target) vs 7000 (draft)")));
}

// Two vocabularies of one size are still different tokenizers.
TEST(CheckDraftTokenizer, SameSizeDifferentPiecesIsRefused) {
  const std::string target =
      WriteFolder("pieces_t", ReadJson(kTestdata + "/qwen2/tokenizer.json"));
  const std::string draft =
      WriteFolder("pieces_d", ReadJson(kTestdata + "/llama3/tokenizer.json"));
  absl::Status s = CheckDraftTokenizer(target, draft);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr(target), HasSubstr(draft),
                                 HasSubstr("BOS id -1 (target) vs 0 (draft)")));
}

// Two pieces that trade ids: the same strings, a different vocabulary.
TEST(CheckDraftTokenizer, TwoPiecesSwappedIsTheFirstDifference) {
  json gpt2 = ReadJson(kTestdata + "/gpt2/tokenizer.json");
  const std::string target = WriteFolder("swapped_t", gpt2);
  std::string a, b;
  for (auto& [token, id] : gpt2["model"]["vocab"].items()) {
    if (id.get<int>() == 300) a = token;
    if (id.get<int>() == 301) b = token;
  }
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  gpt2["model"]["vocab"][a] = 301;
  gpt2["model"]["vocab"][b] = 300;
  const std::string draft = WriteFolder("swapped_d", gpt2);
  absl::Status s = CheckDraftTokenizer(target, draft);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("id 300 is \"" + a + "\" (target) vs \"" + b +
                                     "\" (draft)"));
}

TEST(CheckDraftTokenizer, SpecialInOneTokenizerOnlyIsRefused) {
  json gpt2 = ReadJson(kTestdata + "/gpt2/tokenizer.json");
  const std::string target = WriteFolder("special_t", gpt2);
  for (json& added : gpt2["added_tokens"]) {
    if (added["id"] == 6001) added["special"] = true;
  }
  const std::string draft = WriteFolder("special_d", gpt2);
  absl::Status s = CheckDraftTokenizer(target, draft);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("id 6001 (\"[[code]]\") decodes to \"[[code]]\" (target) vs "
                                     "\"\" (draft)"));
}

// A target tokenizer loaded once (the one the server then serves with) is
// compared with each draft folder as the folder form compares them.
TEST(CheckDraftTokenizer, LoadedTargetIsComparedWithTheDraftFolder) {
  const std::string target = WriteFolder("loaded_t", ReadJson(kTestdata + "/gpt2/tokenizer.json"));
  absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = LoadTokenizer(target);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const std::string same = WriteFolder("loaded_same", ReadJson(kTestdata + "/gpt2/tokenizer.json"));
  EXPECT_TRUE(CheckDraftTokenizer(**loaded, target, same).ok());
  const std::string other = WriteFolder("loaded_other", ReadJson(kTestdata + "/qwen2/tokenizer.json"));
  absl::Status s = CheckDraftTokenizer(**loaded, target, other);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s, CheckDraftTokenizer(target, other));
}

TEST(CheckDraftTokenizer, UnreadableDraftTokenizerNamesItsFolder) {
  const std::string target = WriteFolder("bad_t", ReadJson(kTestdata + "/gpt2/tokenizer.json"));
  const fs::path draft = fs::path(std::getenv("TEST_TMPDIR")) / "bad_d";
  fs::create_directories(draft);
  std::ofstream(draft / "tokenizer.json") << "{ not json";
  absl::Status s = CheckDraftTokenizer(target, draft.string());
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(draft.string()));
}

}  // namespace
}  // namespace verdict
