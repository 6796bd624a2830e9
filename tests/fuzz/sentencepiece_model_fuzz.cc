// A model folder's SentencePiece tokenizer.model (a folder without a
// tokenizer.json), loaded as the server loads it, through LoadTokenizer;
// then the loaded tokenizer encodes and decodes.
//
// The whole input is the tokenizer.model file. The text encoded besides
// fixed ones is the input's last bytes (up to kTailText), so that a mutation
// changes the text as well as the model.
//
// Beyond not crashing, a tokenizer that loads must keep its contract
// (tests/fuzz/tokenizer_contract.h).
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
#include "tests/fuzz/tokenizer_contract.h"

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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = ModelDir();
  verdict::fuzz::WriteScratch("sentencepiece_model/tokenizer.model", data, size);
  absl::StatusOr<std::unique_ptr<verdict::Tokenizer>> tokenizer = verdict::LoadTokenizer(dir);
  if (!tokenizer.ok()) return 0;
  const auto nothing_more = [](const std::vector<int32_t>&) {};
  for (std::string_view t : kTexts) {
    verdict::fuzz::CheckText("sentencepiece_model", **tokenizer, t, nothing_more);
  }
  const size_t tail = size < kTailText ? size : kTailText;
  verdict::fuzz::CheckText("sentencepiece_model", **tokenizer,
                           std::string_view(reinterpret_cast<const char*>(data) + size - tail, tail),
                           nothing_more);
  verdict::fuzz::CheckIds(**tokenizer, verdict::fuzz::EdgeIds(**tokenizer));
  return 0;
}
