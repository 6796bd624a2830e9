// Reads lines of JSON strings on stdin and writes, for each, one JSON object
// with what verdict's tokenizer makes of it: the ids without and with
// special tokens, the decoded text (special tokens kept, and skipped), and
// the text that streaming detokenization emits for the ids with special
// tokens. hf_parity_test.py compares these with the `tokenizers` library.
//
//   hf_tokenizer_tool MODEL_DIR_OR_TOKENIZER_JSON < lines.jsonl > out.jsonl
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "runtime/text/hf_tokenizer.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text/utf8.h"

namespace verdict {
namespace {

int Run(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer;
  if (std::filesystem::is_directory(path)) {
    tokenizer = LoadTokenizer(path);
  } else {
    absl::StatusOr<std::unique_ptr<HfTokenizer>> hf = HfTokenizer::Load(path);
    if (hf.ok()) {
      tokenizer = std::unique_ptr<Tokenizer>(*std::move(hf));
    } else {
      tokenizer = hf.status();
    }
  }
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tokenizer.status().message()).c_str());
    return 2;
  }
  const Tokenizer& t = **tokenizer;
  std::string line;
  while (std::getline(std::cin, line)) {
    const nlohmann::json in = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!in.is_string()) {
      std::fprintf(stderr, "not a JSON string: %s\n", line.c_str());
      return 2;
    }
    const std::string text = in.get<std::string>();
    nlohmann::json out;
    absl::StatusOr<std::vector<int32_t>> ids = t.Encode(text, /*add_bos=*/false);
    absl::StatusOr<std::vector<int32_t>> with_special = t.Encode(text, /*add_bos=*/true);
    if (!ids.ok() || !with_special.ok()) {
      out["error"] = std::string((ids.ok() ? with_special.status() : ids.status()).message());
      std::cout << out.dump() << "\n";
      continue;
    }
    out["ids"] = *ids;
    out["ids_special"] = *with_special;
    absl::StatusOr<std::string> decoded = t.Decode(*ids, /*skip_special_tokens=*/false);
    absl::StatusOr<std::string> decoded_skip = t.Decode(*with_special, /*skip_special_tokens=*/true);
    out["decoded"] = decoded.ok() ? *decoded : "ERROR " + std::string(decoded.status().message());
    out["decoded_skip"] =
        decoded_skip.ok() ? *decoded_skip : "ERROR " + std::string(decoded_skip.status().message());
    // Streaming: every emitted piece must be whole UTF-8 on its own.
    IncrementalDetokenizer detokenizer(&t);
    std::string stream;
    bool pieces_valid = true;
    for (int32_t id : *with_special) {
      absl::StatusOr<std::string> piece = detokenizer.Append(id);
      if (!piece.ok()) {
        stream += "ERROR";
        break;
      }
      pieces_valid = pieces_valid && utf8::IsValid(*piece);
      stream += *piece;
    }
    absl::StatusOr<std::string> rest = detokenizer.Finish();
    if (rest.ok()) {
      pieces_valid = pieces_valid && utf8::IsValid(*rest);
      stream += *rest;
    }
    out["stream"] = stream;
    out["stream_pieces_valid"] = pieces_valid;
    std::cout << out.dump() << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace verdict

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR_OR_TOKENIZER_JSON < lines.jsonl\n", argv[0]);
    return 2;
  }
  std::ios::sync_with_stdio(false);
  return verdict::Run(argv[1]);
}
