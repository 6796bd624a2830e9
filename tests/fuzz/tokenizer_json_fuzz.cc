// A model folder's tokenizer.json, with its tokenizer_config.json, loaded
// as the server loads them; then the loaded tokenizer encodes and decodes.
//
// The input is the tokenizer.json text, optionally followed by a NUL byte
// and a tokenizer_config.json, optionally followed by another NUL byte and a
// text to encode (JSON text holds no raw NUL, so the cut is unambiguous).
//
// Beyond not crashing, a tokenizer that loads must keep its own contract:
// every id it encodes lies in [0, vocab_size()) and decodes again, and
// decoding or streaming any ids (its own or arbitrary ones) returns text or
// an error.
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

void Fail(const char* what, absl::string_view text) {
  std::fprintf(stderr, "tokenizer_json: %s (text \"%.*s\")\n", what,
               static_cast<int>(text.size()), text.data());
  std::abort();
}

// Streams `ids` through an IncrementalDetokenizer, as the server streams a
// generation; errors are fine, crashes are not.
void Stream(const verdict::Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  verdict::IncrementalDetokenizer stream(&tokenizer);
  for (int32_t id : ids) stream.Append(id).IgnoreError();
  stream.Finish().IgnoreError();
}

void CheckText(const verdict::HfTokenizer& tokenizer, absl::string_view text) {
  for (bool add_bos : {false, true}) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(std::string_view(text.data(), text.size()), add_bos);
    if (!ids.ok()) continue;  // not UTF-8
    for (int32_t id : *ids) {
      if (id < 0 || id >= tokenizer.vocab_size()) Fail("an encoded id is outside the vocabulary", text);
    }
    if (!tokenizer.Decode(*ids).ok()) Fail("its own ids do not decode", text);
    if (!tokenizer.Decode(*ids, /*skip_special_tokens=*/false).ok()) {
      Fail("its own ids do not decode with special tokens", text);
    }
    Stream(tokenizer, *ids);
  }
}

// Ids around every edge: negative, the ends of the vocabulary, BOS/EOS and
// the byte pieces, one at a time and as one sequence.
void CheckIds(const verdict::HfTokenizer& tokenizer) {
  const int32_t n = tokenizer.vocab_size();
  std::vector<int32_t> ids = {-1, 0, 1, n - 1, n, n + 1, tokenizer.bos_id(), tokenizer.eos_id(),
                              INT32_MIN, INT32_MAX};
  for (int32_t id : tokenizer.special_token_ids()) ids.push_back(id);
  for (int32_t id = 0; id < n && id < 300; ++id) {
    if (tokenizer.IsBytePiece(id)) ids.push_back(id);
  }
  for (int32_t id : ids) {
    tokenizer.IdToPiece(id);
    tokenizer.IsBytePiece(id);
    tokenizer.Decode({&id, 1}).IgnoreError();
  }
  tokenizer.Decode(ids).IgnoreError();
  tokenizer.Decode(ids, /*skip_special_tokens=*/false).IgnoreError();
  Stream(tokenizer, ids);
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
