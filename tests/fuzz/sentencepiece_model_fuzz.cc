// A model folder's SentencePiece tokenizer.model (a folder without a
// tokenizer.json), loaded as the server loads it, through LoadTokenizer;
// then the loaded tokenizer encodes and decodes.
//
// The whole input is the tokenizer.model file. The text encoded besides
// fixed ones is the input's last bytes (up to kTailText), so that a mutation
// changes the text as well as the model.
//
// Beyond not crashing, a tokenizer that loads must keep its contract: every
// id it encodes lies in [0, vocab_size()) and decodes again, and decoding or
// streaming any ids (its own or arbitrary ones) returns text or an error.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/text/tokenizer.h"
#include "tests/fuzz/temp_file.h"

namespace {

constexpr size_t kTailText = 24;

constexpr std::string_view kTexts[] = {
    "Hello world",
    "  two  spaces\n\nnew lines\tand a tab ",
    "it's 1234567 they'll",
    "\xc3\xbc" "n" "\xc3\xaf" "c" "\xc3\xb6" "d" "\xc3\xa9 \xe6\x95\xb0\xe5\xad\x97 \xf0\x9f\x99\x82",  // ünïcödé 数字 🙂
    "<s>hi</s><|im_start|>user<|im_end|>",
    "",
};

void Fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "sentencepiece_model: %s (text \"%.*s\")\n", what,
               static_cast<int>(text.size()), text.data());
  std::abort();
}

// A folder of its own, holding only tokenizer.model, so that LoadTokenizer
// takes the SentencePiece path.
const std::string& ModelDir() {
  static const std::string dir = [] {
    const std::string d = verdict::fuzz::ScratchDir() + "/sentencepiece_model";
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

void Stream(const verdict::Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  verdict::IncrementalDetokenizer stream(&tokenizer);
  for (int32_t id : ids) stream.Append(id).IgnoreError();
  stream.Finish().IgnoreError();
}

void CheckText(const verdict::Tokenizer& tokenizer, std::string_view text) {
  for (bool add_bos : {false, true}) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text, add_bos);
    if (!ids.ok()) continue;
    for (int32_t id : *ids) {
      if (id < 0 || id >= tokenizer.vocab_size()) Fail("an encoded id is outside the vocabulary", text);
    }
    if (!tokenizer.Decode(*ids).ok()) Fail("its own ids do not decode", text);
    Stream(tokenizer, *ids);
  }
}

// Ids around every edge: negative, the ends of the vocabulary, BOS and EOS,
// one at a time and as one sequence.
void CheckIds(const verdict::Tokenizer& tokenizer) {
  const int32_t n = tokenizer.vocab_size();
  std::vector<int32_t> ids = {-1, 0, 1, n - 1, n, n + 1, tokenizer.bos_id(), tokenizer.eos_id(),
                              INT32_MIN, INT32_MAX};
  for (int32_t id : ids) {
    tokenizer.IdToPiece(id);
    tokenizer.Decode({&id, 1}).IgnoreError();
  }
  tokenizer.Decode(ids).IgnoreError();
  Stream(tokenizer, ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = ModelDir();
  verdict::fuzz::WriteScratch("sentencepiece_model/tokenizer.model", data, size);
  absl::StatusOr<std::unique_ptr<verdict::Tokenizer>> tokenizer = verdict::LoadTokenizer(dir);
  if (!tokenizer.ok()) return 0;
  for (std::string_view t : kTexts) CheckText(**tokenizer, t);
  const size_t tail = size < kTailText ? size : kTailText;
  CheckText(**tokenizer, std::string_view(reinterpret_cast<const char*>(data) + size - tail, tail));
  CheckIds(**tokenizer);
  return 0;
}
