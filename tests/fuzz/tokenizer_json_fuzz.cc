// A model folder's tokenizer.json, with its tokenizer_config.json, loaded
// as the server loads them; then the loaded tokenizer encodes and decodes.
//
// The input is the tokenizer.json text, optionally followed by a NUL byte
// and a tokenizer_config.json, optionally followed by another NUL byte and a
// text to encode (JSON text holds no raw NUL, so the cut is unambiguous).
//
// Beyond not crashing, a tokenizer that loads must keep its contract
// (tests/fuzz/tokenizer_contract.h), and its ids decode with the special
// tokens kept as well.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/text/hf_tokenizer.h"
#include "runtime/text/tokenizer.h"
#include "tests/fuzz/tokenizer_contract.h"

namespace {

// Texts that reach the normalizers, the pre-tokenizers' patterns, the
// added-token matcher and byte fallback of the seed files.
constexpr absl::string_view kTexts[] = {
    "Hello world",
    "  two  spaces\n\nnew lines\tand a tab ",
    "it's 1234567 they'll",
    "\xc3\xbc" "n" "\xc3\xaf" "c" "\xc3\xb6" "d" "\xc3\xa9 \xe6\x95\xb0\xe5\xad\x97 \xf0\x9f\x99\x82",  // ünïcödé 数字 🙂
    "<s>hi</s><|endoftext|><|im_start|>user<|im_end|> verdict <mask> [[code]]",
    "",
};

// What an HfTokenizer adds to the contract: its own ids decode with the
// special tokens kept too.
void CheckSpecialDecode(const verdict::Tokenizer& tokenizer, std::string_view text,
                        const std::vector<int32_t>& ids) {
  if (!tokenizer.Decode(ids, /*skip_special_tokens=*/false).ok()) {
    verdict::fuzz::BreachOfContract("tokenizer_json",
                                    "its own ids do not decode with special tokens", text);
  }
}

void CheckText(const verdict::HfTokenizer& tokenizer, absl::string_view input) {
  const std::string_view text(input.data(), input.size());
  verdict::fuzz::CheckText("tokenizer_json", tokenizer, text,
                           [&](const std::vector<int32_t>& ids) {
                             CheckSpecialDecode(tokenizer, text, ids);
                           });
}

// The edges, the special tokens and the byte pieces.
void CheckIds(const verdict::HfTokenizer& tokenizer) {
  std::vector<int32_t> ids = verdict::fuzz::EdgeIds(tokenizer);
  for (int32_t id : tokenizer.special_token_ids()) ids.push_back(id);
  for (int32_t id = 0; id < tokenizer.vocab_size() && id < 300; ++id) {
    if (tokenizer.IsBytePiece(id)) ids.push_back(id);
  }
  for (int32_t id : ids) tokenizer.IsBytePiece(id);
  verdict::fuzz::CheckIds(tokenizer, ids);
  tokenizer.Decode(ids, /*skip_special_tokens=*/false).IgnoreError();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t cut1 = input.find('\0');
  const absl::string_view json = input.substr(0, cut1);
  absl::string_view config, text;
  bool has_text = false;
  if (cut1 != absl::string_view::npos) {
    const absl::string_view rest = input.substr(cut1 + 1);
    const size_t cut2 = rest.find('\0');
    config = rest.substr(0, cut2);
    if (cut2 != absl::string_view::npos) {
      text = rest.substr(cut2 + 1);
      has_text = true;
    }
  }
  absl::StatusOr<std::unique_ptr<verdict::HfTokenizer>> tokenizer =
      verdict::HfTokenizer::FromJson(json, "tokenizer.json", config);
  if (!tokenizer.ok()) return 0;
  for (absl::string_view t : kTexts) CheckText(**tokenizer, t);
  if (has_text) CheckText(**tokenizer, text);
  CheckIds(**tokenizer);
  return 0;
}
