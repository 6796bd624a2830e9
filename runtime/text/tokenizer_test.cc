#include "runtime/text/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/text/internal/sentencepiece_trainer.h"

namespace verdict {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// Trains one small BPE model with byte fallback for the whole suite.
class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/tokenizer_test");
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    const std::string corpus = *dir_ + "/corpus.txt";
    {
      std::ofstream out(corpus);
      const char* words[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog",
                             "speculative", "decoding", "verifies", "draft", "tokens", "café",
                             "naïve", "model", "target", "accepts"};
      for (int i = 0; i < 400; ++i) {
        for (int j = 0; j < 8; ++j) out << words[(i * 7 + j * 3 + i / 5) % 18] << " ";
        out << "\n";
      }
    }
    const std::string error = internal::TrainSentencePiece(absl::StrCat(
        "--input=", corpus, " --model_prefix=", *dir_,
        "/tokenizer --vocab_size=320 --model_type=bpe --byte_fallback=true"
        " --character_coverage=1.0 --hard_vocab_limit=false --minloglevel=2"));
    ASSERT_EQ(error, "");
    absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> t =
        SentencePieceTokenizer::Load(*dir_ + "/tokenizer.model");
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = t->release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete dir_;
  }

  std::vector<int32_t> Encode(const std::string& text) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(text, /*add_bos=*/false);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>();
  }

  static std::string* dir_;
  static SentencePieceTokenizer* tokenizer_;
};

std::string* TokenizerTest::dir_ = nullptr;
SentencePieceTokenizer* TokenizerTest::tokenizer_ = nullptr;

TEST_F(TokenizerTest, SpecialIdsAndVocab) {
  EXPECT_EQ(tokenizer_->bos_id(), 1);
  EXPECT_EQ(tokenizer_->eos_id(), 2);
  EXPECT_GT(tokenizer_->vocab_size(), 256);  // byte pieces plus merges
  EXPECT_EQ(tokenizer_->IdToPiece(tokenizer_->eos_id()), "</s>");
  EXPECT_EQ(tokenizer_->IdToPiece(-1), "");
}

TEST_F(TokenizerTest, RoundTrips) {
  for (const std::string text :
       {"the quick brown fox", "speculative decoding verifies draft tokens",
        "café naïve model", "unseen: 日本語 and emoji \xF0\x9F\x98\x80 ok", "  spaces  kept?"}) {
    std::vector<int32_t> ids = Encode(text);
    EXPECT_FALSE(ids.empty());
    absl::StatusOr<std::string> back = tokenizer_->Decode(ids);
    ASSERT_TRUE(back.ok());
    // SentencePiece folds runs of whitespace; everything else survives.
    if (text.find("  ") == std::string::npos) EXPECT_EQ(*back, text);
  }
}

TEST_F(TokenizerTest, AddsBosAndDecodesControlTokensToNothing) {
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode("the dog", /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ((*ids)[0], 1);
  std::vector<int32_t> with_eos = *ids;
  with_eos.push_back(tokenizer_->eos_id());
  EXPECT_EQ(*tokenizer_->Decode(with_eos), "the dog");
}

TEST_F(TokenizerTest, DecodeRefusesIdsOutsideVocab) {
  std::vector<int32_t> ids = {5, tokenizer_->vocab_size()};
  absl::StatusOr<std::string> text = tokenizer_->Decode(ids);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("outside the vocabulary"));
}

TEST_F(TokenizerTest, StreamingEqualsDecodingAndNeverSplitsCharacters) {
  const std::string text = "the café 日本 fox \xF0\x9F\x98\x80 jumps";
  std::vector<int32_t> ids = Encode(text);
  IncrementalDetokenizer detok(tokenizer_);
  std::string streamed;
  int held_back = 0;
  for (int32_t id : ids) {
    absl::StatusOr<std::string> piece = detok.Append(id);
    ASSERT_TRUE(piece.ok());
    EXPECT_THAT(*piece, ::testing::Not(HasSubstr("\xEF\xBF\xBD")));
    if (piece->empty()) ++held_back;
    streamed += *piece;
  }
  absl::StatusOr<std::string> rest = detok.Finish();
  ASSERT_TRUE(rest.ok());
  streamed += *rest;
  EXPECT_EQ(streamed, text);
  // The CJK characters and the emoji arrive as byte pieces: several ids
  // emit nothing until their character is complete.
  EXPECT_GE(held_back, 3);
}

TEST_F(TokenizerTest, StreamingAfterContextKeepsLeadingSpace) {
  std::vector<int32_t> prompt = Encode("the quick brown");
  std::vector<int32_t> generated = Encode("fox jumps over");
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), generated.begin(), generated.end());
  IncrementalDetokenizer detok(tokenizer_, prompt);
  std::string streamed;
  for (int32_t id : generated) streamed += *detok.Append(id);
  streamed += *detok.Finish();
  EXPECT_EQ(streamed, " fox jumps over");
  EXPECT_EQ(*tokenizer_->Decode(all), "the quick brown" + streamed);
}

TEST_F(TokenizerTest, StreamingSkipsIdsBeyondTheTokenizer) {
  // Ids past the tokenizer's pieces (a model's padded rows) add no text and
  // leave the text around them intact; a negative id is an error.
  std::vector<int32_t> ids = Encode("fox jumps");
  IncrementalDetokenizer detok(tokenizer_);
  std::string streamed;
  for (int32_t id : ids) {
    streamed += *detok.Append(id);
    absl::StatusOr<std::string> padding = detok.Append(tokenizer_->vocab_size() + 7);
    ASSERT_TRUE(padding.ok()) << padding.status();
    EXPECT_EQ(*padding, "");
  }
  streamed += *detok.Finish();
  EXPECT_EQ(streamed, "fox jumps");
  EXPECT_FALSE(detok.Append(-1).ok());
}

TEST_F(TokenizerTest, FinishFlushesPartialCharacter) {
  // The first byte of a three-byte character alone.
  std::vector<int32_t> ids = Encode("日");
  ASSERT_GE(ids.size(), 2u);
  IncrementalDetokenizer detok(tokenizer_);
  std::string streamed;
  for (size_t i = 0; i + 1 < ids.size(); ++i) streamed += *detok.Append(ids[i]);
  EXPECT_EQ(streamed, "");
  EXPECT_THAT(*detok.Finish(), HasSubstr("\xEF\xBF\xBD"));
}

TEST_F(TokenizerTest, LoadTokenizerFindsModelFile) {
  const std::string model_dir = *dir_ + "/model_dir";
  fs::create_directories(model_dir);
  fs::copy_file(*dir_ + "/tokenizer.model", model_dir + "/tokenizer.model",
                fs::copy_options::overwrite_existing);
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadTokenizer(model_dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), tokenizer_->vocab_size());
}

TEST_F(TokenizerTest, LoadTokenizerErrors) {
  const std::string empty = *dir_ + "/empty";
  fs::create_directories(empty);
  EXPECT_EQ(LoadTokenizer(empty).status().code(), absl::StatusCode::kNotFound);

  const std::string json_only = *dir_ + "/json_only";
  fs::create_directories(json_only);
  std::ofstream(json_only + "/tokenizer.json") << "{}";
  absl::StatusOr<std::unique_ptr<Tokenizer>> no_model = LoadTokenizer(json_only);
  EXPECT_EQ(no_model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_model.status().message()),
              HasSubstr(json_only + "/tokenizer.json: no \"model\""));

  const std::string garbage = *dir_ + "/garbage";
  fs::create_directories(garbage);
  std::ofstream(garbage + "/tokenizer.model") << "not a model";
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadTokenizer(garbage);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(garbage + "/tokenizer.model"));
}

}  // namespace
}  // namespace verdict
