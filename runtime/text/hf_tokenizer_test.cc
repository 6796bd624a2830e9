#include "runtime/text/hf_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/text/tokenizer.h"
#include "runtime/text/utf8.h"

namespace verdict {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::string kTestdata = "runtime/text/testdata";

std::unique_ptr<HfTokenizer> Fixture(const std::string& name) {
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t =
      HfTokenizer::Load(kTestdata + "/" + name + "/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

std::string ReadFixture(const std::string& name) {
  std::ifstream in(kTestdata + "/" + name + "/tokenizer.json");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Streams `ids` through IncrementalDetokenizer; every piece must be whole
// UTF-8.
std::string Stream(const Tokenizer& t, const std::vector<int32_t>& ids,
                   absl::Span<const int32_t> context = {}) {
  IncrementalDetokenizer d(&t, context);
  std::string text;
  for (int32_t id : ids) {
    absl::StatusOr<std::string> piece = d.Append(id);
    EXPECT_TRUE(piece.ok());
    EXPECT_TRUE(utf8::IsValid(*piece)) << "half a character streamed after id " << id;
    text += *piece;
  }
  absl::StatusOr<std::string> rest = d.Finish();
  EXPECT_TRUE(rest.ok());
  return text + *rest;
}

TEST(HfTokenizerTest, ByteLevelRoundTripsAndAddsNoBos) {
  std::unique_ptr<HfTokenizer> t = Fixture("gpt2");
  ASSERT_NE(t, nullptr);
  const std::string text = "It is a truth universally acknowledged,\n\tthat 12345 caf\xC3\xA9s \xE4\xB8\xAD\xF0\x9F\x98\x80!";
  absl::StatusOr<std::vector<int32_t>> ids = t->Encode(text, /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, *t->Encode(text, /*add_bos=*/false));  // GPT-2's template adds nothing
  EXPECT_EQ(*t->Decode(*ids), text);
  EXPECT_EQ(Stream(*t, *ids), text);
  EXPECT_EQ(t->eos_id(), 0);  // <|endoftext|>
  EXPECT_FALSE(t->Encode("bad \xC3", false).ok());
}

TEST(HfTokenizerTest, SpecialTokensMatchWholeAndDecodeOnRequest) {
  std::unique_ptr<HfTokenizer> t = Fixture("qwen2");
  ASSERT_NE(t, nullptr);
  const int32_t im_start = 1, im_end = 2;
  absl::StatusOr<std::vector<int32_t>> ids = t->Encode("<|im_start|>user\nhi<|im_end|>", false);
  ASSERT_TRUE(ids.ok());
  ASSERT_GE(ids->size(), 3u);
  EXPECT_EQ(ids->front(), im_start);
  EXPECT_EQ(ids->back(), im_end);
  EXPECT_EQ(*t->Decode(*ids, /*skip_special_tokens=*/false), "<|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(*t->Decode(*ids, /*skip_special_tokens=*/true), "user\nhi");
  EXPECT_EQ(*t->Decode(*ids), "user\nhi");
  EXPECT_THAT(t->special_token_ids(), ElementsAre(0, 1, 2));
  EXPECT_FALSE(t->Decode({t->vocab_size()}).ok());
}

TEST(HfTokenizerTest, TemplateAddsBos) {
  std::unique_ptr<HfTokenizer> t = Fixture("llama3");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bos_id(), 0);  // <|begin_of_text|>
  absl::StatusOr<std::vector<int32_t>> with = t->Encode("hello", true);
  absl::StatusOr<std::vector<int32_t>> without = t->Encode("hello", false);
  ASSERT_TRUE(with.ok() && without.ok());
  ASSERT_EQ(with->size(), without->size() + 1);
  EXPECT_EQ(with->front(), 0);
}

TEST(HfTokenizerTest, MetaspaceStreamingKeepsEverySpace) {
  for (const char* name : {"metaspace", "metaspace_split"}) {
    std::unique_ptr<HfTokenizer> t = Fixture(name);
    ASSERT_NE(t, nullptr);
    // A special token mid-stream decodes to nothing; the space after it
    // must survive, as must the bytes of byte-fallback characters.
    const std::string text = "the fox</s> jumps  over \xE2\x9C\xA8 \xED\x95\x9C";
    absl::StatusOr<std::vector<int32_t>> ids = t->Encode(text, true);
    ASSERT_TRUE(ids.ok());
    absl::StatusOr<std::string> decoded = t->Decode(*ids);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(Stream(*t, *ids), *decoded) << name;
    EXPECT_THAT(*decoded, HasSubstr(" jumps  over \xE2\x9C\xA8")) << name;
  }
}

// Counts the ids every Decode reads, to bound the work of streaming.
class DecodeCountingTokenizer : public Tokenizer {
 public:
  explicit DecodeCountingTokenizer(const Tokenizer* inner) : inner_(inner) {}
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_bos) const override {
    return inner_->Encode(text, add_bos);
  }
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override {
    decoded_ids_ += ids.size();
    return inner_->Decode(ids);
  }
  int vocab_size() const override { return inner_->vocab_size(); }
  int bos_id() const override { return inner_->bos_id(); }
  int eos_id() const override { return inner_->eos_id(); }
  std::string IdToPiece(int32_t id) const override { return inner_->IdToPiece(id); }
  bool IsBytePiece(int32_t id) const override { return inner_->IsBytePiece(id); }
  bool IsSkippedInDecode(int32_t id) const override { return inner_->IsSkippedInDecode(id); }
  size_t decoded_ids() const { return decoded_ids_; }

 private:
  const Tokenizer* inner_;
  mutable size_t decoded_ids_ = 0;
};

// The first id whose own decoding is `text`, or -1.
int32_t IdDecodingTo(const Tokenizer& t, const std::string& text) {
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    absl::StatusOr<std::string> own = t.Decode({id});
    if (own.ok() && *own == text) return id;
  }
  return -1;
}

int32_t IdWithPiece(const Tokenizer& t, const std::string& piece) {
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    if (t.IdToPiece(id) == piece) return id;
  }
  return -1;
}

TEST(HfTokenizerTest, StreamingLongRunsReadEachIdAFewTimes) {
  // Runs that emit nothing for many ids (skipped special tokens, byte
  // pieces, bytes that are no character) or emit text that alone decodes
  // to nothing (lone "▁"): streaming them stays exact, and the ids
  // decoded in all grow linearly with the run, not with its square.
  constexpr int kRun = 2048;
  for (const char* name : {"gpt2", "qwen2", "metaspace", "metaspace_split"}) {
    std::unique_ptr<HfTokenizer> hf = Fixture(name);
    ASSERT_NE(hf, nullptr);
    absl::StatusOr<std::vector<int32_t>> head = hf->Encode("the fox", false);
    absl::StatusOr<std::vector<int32_t>> tail = hf->Encode(" jumps over", false);
    ASSERT_TRUE(head.ok() && tail.ok());
    const int32_t special = hf->eos_id() >= 0 ? hf->eos_id() : IdDecodingTo(*hf, "");
    std::vector<std::pair<std::string, int32_t>> runs = {{"special", special}};
    // A lone lead byte: in ByteLevel a piece of its own, in byte fallback
    // the piece <0xE4>; every one of them decodes to U+FFFD.
    runs.push_back({"lead byte", IdDecodingTo(*hf, "\xEF\xBF\xBD")});
    // A lone space: the piece "\u2581" (alone it decodes to nothing under
    // Metaspace) or ByteLevel's space byte.
    int32_t space = IdWithPiece(*hf, "\xE2\x96\x81");
    runs.push_back({"space", space >= 0 ? space : IdDecodingTo(*hf, " ")});
    for (const auto& [run_name, id] : runs) {
      ASSERT_GE(id, 0) << name << " has no " << run_name << " id";
      std::vector<int32_t> ids = *head;
      ids.insert(ids.end(), kRun, id);
      ids.insert(ids.end(), tail->begin(), tail->end());
      DecodeCountingTokenizer counting(hf.get());
      absl::StatusOr<std::string> whole = hf->Decode(ids);
      ASSERT_TRUE(whole.ok());
      EXPECT_EQ(Stream(counting, ids), *whole) << name << ", run of " << run_name;
      EXPECT_LE(counting.decoded_ids(), 24u * ids.size()) << name << ", run of " << run_name;
    }
  }
}

TEST(HfTokenizerTest, StreamingTextDecodesAFewIdsPerId) {
  // While text flows, each id is decoded with the one emitted before it:
  // about four ids decoded per id streamed (the window, the window with the
  // new id, and the new id as the next window's start).
  std::string text;
  for (int i = 0; i < 20; ++i) text += "The quick brown fox jumps over the lazy dog, again. ";
  for (const char* name : {"gpt2", "qwen2", "llama3", "metaspace", "metaspace_split"}) {
    std::unique_ptr<HfTokenizer> hf = Fixture(name);
    ASSERT_NE(hf, nullptr);
    absl::StatusOr<std::vector<int32_t>> ids = hf->Encode(text, false);
    ASSERT_TRUE(ids.ok());
    DecodeCountingTokenizer counting(hf.get());
    EXPECT_EQ(Stream(counting, *ids), *hf->Decode(*ids)) << name;
    EXPECT_LE(counting.decoded_ids(), 6u * ids->size()) << name;
  }
}

TEST(HfTokenizerTest, ByteRunsJoinedAcrossSkippedSpecialTokensStreamAsTheyDecode) {
  // Decode drops special tokens before ByteFallback, so the byte pieces on
  // both sides of one form a single run: valid bytes make characters,
  // invalid ones make one U+FFFD each, whatever the window saw before.
  std::unique_ptr<HfTokenizer> t = Fixture("metaspace");
  ASSERT_NE(t, nullptr);
  const int32_t eos = t->eos_id();
  ASSERT_TRUE(t->IsSkippedInDecode(eos));
  auto bytes = [&](std::initializer_list<int> values) {
    std::vector<int32_t> ids;
    for (int v : values) {
      const int32_t id = IdWithPiece(*t, absl::StrFormat("<0x%02X>", v));
      EXPECT_TRUE(id >= 0 && t->IsBytePiece(id)) << v;
      ids.push_back(id);
    }
    return ids;
  };
  const int32_t the = IdWithPiece(*t, "\xE2\x96\x81the");
  ASSERT_GE(the, 0);
  std::vector<std::vector<int32_t>> cases;
  // \xE4\xB8\xAD\xE6\x96\x87, a special token, \xE5\xAD\x97, " the".
  std::vector<int32_t> ids = bytes({0xE4, 0xB8, 0xAD, 0xE6, 0x96, 0x87});
  ids.push_back(eos);
  for (int32_t id : bytes({0xE5, 0xAD, 0x97})) ids.push_back(id);
  ids.push_back(the);
  cases.push_back(ids);
  // A special token inside a run of bytes that are no character.
  ids = bytes({0x45});
  ids.push_back(eos);
  for (int32_t id : bytes({0x9F})) ids.push_back(id);
  ids.push_back(the);
  cases.push_back(ids);
  for (const std::vector<int32_t>& c : cases) {
    for (const std::vector<int32_t>& context : {std::vector<int32_t>{}, *t->Encode("the fox", true)}) {
      std::vector<int32_t> all = context;
      all.insert(all.end(), c.begin(), c.end());
      const std::string streamed = Stream(*t, c, context);
      EXPECT_EQ(*t->Decode(context) + streamed, *t->Decode(all));
    }
  }
}

TEST(HfTokenizerTest, StreamingEqualsTheWholeDecodeOnRandomIds) {
  // Random sequences weighted toward the ids that make streaming hard
  // (special tokens, byte pieces, ids that decode alone to U+FFFD or to
  // nothing, a lone "\u2581"), with ordinary text between them, with and
  // without a context: what streams is what a whole decode gives.
  constexpr int kSequences = 2000;
  for (const char* name : {"gpt2", "qwen2", "llama3", "metaspace", "metaspace_split"}) {
    std::unique_ptr<HfTokenizer> t = Fixture(name);
    ASSERT_NE(t, nullptr);
    std::vector<int32_t> hard;
    for (int32_t id = 0; id < t->vocab_size(); ++id) {
      const std::string own = *t->Decode({id});
      if (own.empty() || absl::StrContains(own, "\xEF\xBF\xBD") || t->IsBytePiece(id) ||
          t->IdToPiece(id) == "\xE2\x96\x81") {
        hard.push_back(id);
      }
    }
    const std::vector<int32_t> words =
        *t->Encode(" the quick brown fox \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 caf\xC3\xA9  x\n\n y",
                   false);
    const std::vector<int32_t> context = *t->Encode("Hello there", false);
    std::mt19937 rng(1234);
    for (int n = 0; n < kSequences; ++n) {
      std::vector<int32_t> ids;
      const int length = 5 + static_cast<int>(rng() % 60);
      for (int k = 0; k < length; ++k) {
        const uint32_t kind = rng() % 10;
        if (kind < 6) {
          ids.push_back(hard[rng() % hard.size()]);
        } else if (kind < 9) {
          ids.push_back(words[rng() % words.size()]);
        } else {
          ids.push_back(static_cast<int32_t>(rng() % t->vocab_size()));
        }
      }
      const bool with_context = n % 2 == 1;
      std::vector<int32_t> all = with_context ? context : std::vector<int32_t>();
      const std::string before = *t->Decode(all);
      all.insert(all.end(), ids.begin(), ids.end());
      const std::string whole = *t->Decode(all);
      ASSERT_EQ(whole.compare(0, before.size(), before), 0) << name;
      const std::string streamed =
          Stream(*t, ids, with_context ? absl::MakeConstSpan(context) : absl::Span<const int32_t>());
      ASSERT_EQ(streamed, whole.substr(before.size())) << name << ", sequence " << n;
    }
  }
}

TEST(HfTokenizerTest, StreamingAfterAContext) {
  std::unique_ptr<HfTokenizer> t = Fixture("metaspace");
  ASSERT_NE(t, nullptr);
  absl::StatusOr<std::vector<int32_t>> prompt = t->Encode("Once upon", true);
  absl::StatusOr<std::vector<int32_t>> all = t->Encode("Once upon a time", true);
  ASSERT_TRUE(prompt.ok() && all.ok());
  ASSERT_TRUE(std::equal(prompt->begin(), prompt->end(), all->begin()));
  const std::vector<int32_t> generated(all->begin() + prompt->size(), all->end());
  EXPECT_EQ(Stream(*t, generated, *prompt), " a time");
}

TEST(HfTokenizerTest, UnsupportedComponentsAreErrorsNamingFileAndComponent) {
  json spec = json::parse(ReadFixture("gpt2"));
  spec["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t = HfTokenizer::FromJson(spec.dump(), "x/tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr("x/tokenizer.json: pre_tokenizer type \"BertPreTokenizer\""));

  spec = json::parse(ReadFixture("gpt2"));
  spec["decoder"] = {{"type", "CTC"}};
  t = HfTokenizer::FromJson(spec.dump(), "f.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("decoder type \"CTC\""));

  spec = json::parse(ReadFixture("gpt2"));
  spec["model"]["type"] = "WordPiece";
  t = HfTokenizer::FromJson(spec.dump(), "f.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("model type \"WordPiece\""));

  spec = json::parse(ReadFixture("gpt2"));
  spec["post_processor"] = {{"type", "Mystery"}};
  t = HfTokenizer::FromJson(spec.dump(), "f.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("post_processor type \"Mystery\""));
}

TEST(HfTokenizerTest, InconsistentFilesAreErrors) {
  json spec = json::parse(ReadFixture("gpt2"));
  spec["added_tokens"].push_back({{"id", 6000}, {"content", "<dup>"}});
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t = HfTokenizer::FromJson(spec.dump(), "f.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("id 6000 is used twice"));

  spec = json::parse(ReadFixture("gpt2"));
  spec["added_tokens"].push_back({{"id", 5}, {"content", "<other>"}});
  t = HfTokenizer::FromJson(spec.dump(), "f.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("which the model gives to"));

  spec = json::parse(ReadFixture("gpt2"));
  spec["model"]["merges"].push_back("Ġ nonexistent");
  t = HfTokenizer::FromJson(spec.dump(), "f.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("f.json: model BPE: merge"));

  t = HfTokenizer::FromJson("{not json", "broken.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("broken.json: not a JSON object"));
  EXPECT_FALSE(HfTokenizer::Load("/nonexistent/tokenizer.json").ok());
}

// A template that names a special token must come with the token's ids.
TEST(HfTokenizerTest, TemplateWithoutSpecialTokensIsAnError) {
  json spec = json::parse(ReadFixture("metaspace"));
  ASSERT_TRUE(spec["post_processor"].contains("special_tokens"));
  spec["post_processor"].erase("special_tokens");
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t = HfTokenizer::FromJson(spec.dump(), "f.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr("special token \"<s>\" has no ids"));
}

// Ids may have gaps; a template id in a gap would be encoded and never
// decode.
TEST(HfTokenizerTest, TemplateIdWithoutATokenIsAnError) {
  const json spec = {
      {"added_tokens", json::array({{{"id", 3}, {"content", "<x>"}, {"special", true}}})},
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"c", 2}}}, {"merges", json::array()}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}}};
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t = HfTokenizer::FromJson(spec.dump(), "f.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("post_processor: id 1 names no token"));
}

// An added token's id bounds the vocabulary's size; one far past the
// model's ids would size every per-id table by it.
TEST(HfTokenizerTest, AddedTokenIdFarBeyondTheModelIsAnError) {
  json spec = {{"added_tokens", json::array({{{"id", 2000000000}, {"content", "<x>"}}})},
               {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}}};
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t = HfTokenizer::FromJson(spec.dump(), "f.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr("added token \"<x>\" has id 2000000000, beyond the model's 1 ids"));
  spec["added_tokens"][0]["id"] = 1;  // right after the model's ids
  EXPECT_TRUE(HfTokenizer::FromJson(spec.dump(), "f.json").ok());
}

// 2^32 + 1 must not be read as id 1 (a real token).
TEST(HfTokenizerTest, PostProcessorIdsBeyondInt32AreErrors) {
  json spec = json::parse(ReadFixture("metaspace"));
  spec["post_processor"]["special_tokens"]["<s>"]["ids"] = {4294967297LL};
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t = HfTokenizer::FromJson(spec.dump(), "f.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("id 2147483647 is outside"));
  spec["post_processor"] = {{"type", "BertProcessing"},
                            {"cls", {"<s>", 18446744073709551615ULL}},
                            {"sep", {"</s>", 2}}};
  t = HfTokenizer::FromJson(spec.dump(), "f.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("is outside the vocabulary"));
}

TEST(HfTokenizerTest, ConcurrentEncodesAgree) {
  std::unique_ptr<HfTokenizer> t = Fixture("llama3");
  ASSERT_NE(t, nullptr);
  std::vector<std::string> lines;
  for (int i = 0; i < 200; ++i) {
    lines.push_back("line " + std::to_string(i * 7919) + ": the quick brown fox \xE4\xB8\xAD" +
                    std::string(i % 5, ' ') + "jumps");
  }
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& line : lines) expected.push_back(*t->Encode(line, false));
  // Fresh words through the shared cache and the per-thread match data.
  std::unique_ptr<HfTokenizer> fresh = Fixture("llama3");
  ASSERT_NE(fresh, nullptr);
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int r = 0; r < 5; ++r) {
        for (size_t i = 0; i < lines.size(); ++i) {
          if (*fresh->Encode(lines[(i + k * 37) % lines.size()], false) !=
              expected[(i + k * 37) % lines.size()]) {
            ++mismatches[k];
          }
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_THAT(mismatches, ElementsAre(0, 0, 0, 0));
}

TEST(HfTokenizerTest, LoadTokenizerPrefersTokenizerJson) {
  const std::string dir = ::testing::TempDir() + "/hf_tokenizer_test_both";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kTestdata + "/llama3/tokenizer.json", dir + "/tokenizer.json");
  // A tokenizer.model beside it is not read: this one would fail to load.
  std::ofstream(dir + "/tokenizer.model") << "not a model";
  std::ofstream(dir + "/tokenizer_config.json") << R"({"eos_token": "<|eot_id|>"})";
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadTokenizer(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 7000);
  EXPECT_EQ((*t)->bos_id(), 0);
  EXPECT_EQ((*t)->eos_id(), 2);  // from tokenizer_config.json
  EXPECT_EQ((*t)->IdToPiece(2), "<|eot_id|>");

  fs::remove(dir + "/tokenizer.json");
  absl::StatusOr<std::unique_ptr<Tokenizer>> sp = LoadTokenizer(dir);
  ASSERT_FALSE(sp.ok());  // now the broken tokenizer.model is read
  EXPECT_THAT(std::string(sp.status().message()), HasSubstr("tokenizer.model"));
}

}  // namespace
}  // namespace verdict
