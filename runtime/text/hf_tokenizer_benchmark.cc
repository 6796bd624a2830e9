// Encode throughput of verdict's tokenizer.json tokenizer on one thread:
// reads lines of JSON strings, encodes every line (no special tokens) once
// per repeat, and prints one JSON object with the seconds and MB/s of each
// repeat. tools/bench/tokenizer_throughput.py runs it beside the
// `tokenizers` library on the same text.
//
//   hf_tokenizer_benchmark TOKENIZER_JSON LINES_JSONL [REPEATS]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "runtime/text/hf_tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON LINES_JSONL [REPEATS]\n", argv[0]);
    return 2;
  }
  const int repeats = argc == 4 ? std::atoi(argv[3]) : 5;
  absl::StatusOr<std::unique_ptr<verdict::HfTokenizer>> tokenizer =
      verdict::HfTokenizer::Load(argv[1]);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tokenizer.status().message()).c_str());
    return 2;
  }
  std::ifstream in(argv[2]);
  std::vector<std::string> lines;
  size_t bytes = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json v = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!v.is_string()) continue;
    lines.push_back(v.get<std::string>());
    bytes += lines.back().size();
  }
  nlohmann::json out = {{"lines", lines.size()}, {"bytes", bytes}};
  size_t tokens = 0;
  for (int r = 0; r < repeats; ++r) {
    tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const std::string& line : lines) {
      absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(line, /*add_bos=*/false);
      if (!ids.ok()) {
        std::fprintf(stderr, "%s\n", std::string(ids.status().message()).c_str());
        return 1;
      }
      tokens += ids->size();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out["seconds"].push_back(seconds);
    out["mb_per_s"].push_back(bytes / seconds / 1e6);
  }
  out["tokens"] = tokens;
  std::cout << out.dump() << "\n";
  return 0;
}
