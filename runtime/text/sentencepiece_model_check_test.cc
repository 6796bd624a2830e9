#include "runtime/text/sentencepiece_model_check.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/text/internal/sentencepiece_trainer.h"
#include "runtime/text/tokenizer.h"

namespace verdict {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}

// A length-delimited field.
std::string Bytes(int number, const std::string& payload) {
  return Varint(static_cast<uint64_t>(number) << 3 | 2) + Varint(payload.size()) + payload;
}

std::string Le32(uint32_t v) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(v >> (8 * i));
  return out;
}

// A charsmap: trie size, the units, then the strings.
std::string CharsMap(const std::vector<uint32_t>& units, const std::string& strings) {
  std::string out = Le32(static_cast<uint32_t>(4 * units.size()));
  for (uint32_t u : units) out += Le32(u);
  return out + strings;
}

// A trie whose root has no children beyond itself: 256 zero units.
std::vector<uint32_t> EmptyTrie() { return std::vector<uint32_t>(256, 0); }

TEST(PrecompiledCharsMapTest, AcceptsEmptyAndAWellFormedTrie) {
  EXPECT_TRUE(CheckPrecompiledCharsMap("").ok());
  EXPECT_TRUE(CheckPrecompiledCharsMap(CharsMap(EmptyTrie(), std::string("x\0", 2))).ok());
  // 'a' under the root, with a leaf whose value (its own unit: offset 0)
  // is 0x161, inside 400 bytes of strings.
  std::vector<uint32_t> units = EmptyTrie();
  units['a'] = 'a' | 1u << 8;
  EXPECT_TRUE(CheckPrecompiledCharsMap(CharsMap(units, std::string(400, '\0'))).ok());
}

TEST(PrecompiledCharsMapTest, RefusesWhatTheLibraryWouldReadPast) {
  const std::string nul("\0", 1);
  EXPECT_THAT(std::string(CheckPrecompiledCharsMap("\x01\x00").message()),
              HasSubstr("too short"));
  EXPECT_THAT(std::string(CheckPrecompiledCharsMap(Le32(0x7ffffff0) + std::string(12, 'x')).message()),
              HasSubstr("leaves no strings"));
  EXPECT_THAT(std::string(CheckPrecompiledCharsMap(CharsMap(EmptyTrie(), "abc")).message()),
              HasSubstr("do not end in NUL"));
  EXPECT_THAT(std::string(CheckPrecompiledCharsMap(CharsMap({}, nul)).message()),
              HasSubstr("no root"));
  // 255 units: the root's block of 256 children runs past the end.
  EXPECT_THAT(
      std::string(CheckPrecompiledCharsMap(CharsMap(std::vector<uint32_t>(255, 0), nul)).message()),
      HasSubstr("unit 0: its children lie past the end"));
  // A child whose offset points its own children past the end.
  std::vector<uint32_t> far = EmptyTrie();
  far['b'] = 'b' | (1000u << 10);
  EXPECT_THAT(std::string(CheckPrecompiledCharsMap(CharsMap(far, nul)).message()),
              HasSubstr("unit 98: its children lie past the end"));
  // A leaf whose value points past the strings.
  std::vector<uint32_t> leaf = EmptyTrie();
  leaf['a'] = 'a' | 1u << 8;
  EXPECT_THAT(std::string(CheckPrecompiledCharsMap(CharsMap(leaf, std::string(8, '\0'))).message()),
              HasSubstr("unit 97: its value points past the strings"));
}

TEST(SentencePieceModelCheckTest, RefusesBrokenWireFormat) {
  EXPECT_TRUE(CheckSentencePieceModel("").ok());
  EXPECT_THAT(std::string(CheckSentencePieceModel("\x0a\xff\xff\xff\xff\x0f" "abc").message()),
              HasSubstr("claims 4294967295 bytes, 3 are left"));
  EXPECT_THAT(std::string(CheckSentencePieceModel("\x0a").message()), HasSubstr("cut off"));
  EXPECT_THAT(std::string(CheckSentencePieceModel("\x0b\x0c").message()), HasSubstr("wire type 3"));
  // Inside a normalizer_spec too.
  EXPECT_THAT(std::string(CheckSentencePieceModel(Bytes(3, "\x12\x05" "ab")).message()),
              HasSubstr("claims 5 bytes, 2 are left"));
}

TEST(SentencePieceModelCheckTest, TheLastCharsMapCounts) {
  const std::string good = Bytes(3, Bytes(2, CharsMap(EmptyTrie(), std::string("x\0", 2))));
  const std::string bad = Bytes(3, Bytes(2, CharsMap(std::vector<uint32_t>(255, 0), std::string("\0", 1))));
  EXPECT_TRUE(CheckSentencePieceModel(good).ok());
  EXPECT_THAT(std::string(CheckSentencePieceModel(good + bad).message()), HasSubstr("normalizer_spec: "));
  EXPECT_TRUE(CheckSentencePieceModel(bad + good).ok());
  EXPECT_THAT(std::string(CheckSentencePieceModel(Bytes(5, Bytes(2, "\x01\x02"))).message()),
              HasSubstr("denormalizer_spec: "));
}

// A real model, trained with the default normalization (nmt_nfkc, so its
// charsmap is a real trie of the library's own making), and that model with
// a broken trie appended, which libsentencepiece loads and then crashes on
// at the first Encode.
class SentencePieceModelFileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/sentencepiece_model_check_test");
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    const std::string corpus = *dir_ + "/corpus.txt";
    {
      std::ofstream out(corpus);
      for (int i = 0; i < 200; ++i) out << "the quick brown fox jumps over the lazy dog ＡＢＣ ①\n";
    }
    ASSERT_EQ(internal::TrainSentencePiece(absl::StrCat(
                  "--input=", corpus, " --model_prefix=", *dir_,
                  "/trained --vocab_size=40 --model_type=unigram --hard_vocab_limit=false"
                  " --minloglevel=2")),
              "");
    std::ifstream in(*dir_ + "/trained.model", std::ios::binary);
    model_ = new std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  static void TearDownTestSuite() {
    delete model_;
    delete dir_;
  }

  static std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = *dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  static std::string* dir_;
  static std::string* model_;
};

std::string* SentencePieceModelFileTest::dir_ = nullptr;
std::string* SentencePieceModelFileTest::model_ = nullptr;

TEST_F(SentencePieceModelFileTest, ATrainedModelPassesAndLoads) {
  ASSERT_GT(model_->size(), 10000u);  // the nmt_nfkc charsmap is in it
  EXPECT_TRUE(CheckSentencePieceModel(*model_).ok()) << CheckSentencePieceModel(*model_);
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> t =
      SentencePieceTokenizer::Load(Write("good.model", *model_));
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<std::vector<int32_t>> ids = (*t)->Encode("ＡＢＣ fox", /*add_bos=*/false);
  ASSERT_TRUE(ids.ok()) << ids.status();
  absl::StatusOr<std::string> text = (*t)->Decode(*ids);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "ABC fox");  // NFKC folded the full-width letters
}

TEST_F(SentencePieceModelFileTest, ABrokenTrieIsRefusedAtLoad) {
  // The trie of the fuzz corpus's charsmap_garbage_trie.model: 4 units of
  // counting bytes, whose root's children lie far past them.
  std::string trie;
  for (char c = 1; c <= 16; ++c) trie.push_back(c);
  const std::string charsmap = Le32(16) + trie + std::string("abc\0", 4);
  for (int spec : {3, 5}) {
    const std::string path =
        Write(absl::StrCat("broken", spec, ".model"), *model_ + Bytes(spec, Bytes(2, charsmap)));
    absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> t = SentencePieceTokenizer::Load(path);
    ASSERT_FALSE(t.ok()) << "spec " << spec;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(path + ": "));
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("trie (4 units) is broken at unit 0"));
  }
}

TEST_F(SentencePieceModelFileTest, APieceHoldingANulIsRefusedAtLoad) {
  // A unigram model builds a trie of its pieces as C strings: "\0x" is an
  // empty key there, on which the library's darts-clone throws.
  for (const std::string& text : {std::string("\0x", 2), std::string("a\0b", 3)}) {
    const std::string piece = Bytes(1, Bytes(1, text) + std::string("\x15\x00\x00\x80\xbf", 5));
    EXPECT_THAT(std::string(CheckSentencePieceModel(*model_ + piece).message()),
                HasSubstr("holds a NUL byte"));
    const std::string path = Write("nul_piece.model", *model_ + piece);
    absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> t = SentencePieceTokenizer::Load(path);
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(path + ": piece "));
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("holds a NUL byte"));
  }
}

TEST_F(SentencePieceModelFileTest, AMissingFileIsNotFound) {
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> t =
      SentencePieceTokenizer::Load(*dir_ + "/absent.model");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace verdict
