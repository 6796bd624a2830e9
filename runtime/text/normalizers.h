// tokenizer.json normalizers: the text rewrites that run on each stretch of
// input between added tokens, before pre-tokenization. Supported: NFC, NFD,
// NFKC, NFKD, Prepend, Replace (string or regex), Strip and Sequence.
#ifndef VERDICT_RUNTIME_TEXT_NORMALIZERS_H_
#define VERDICT_RUNTIME_TEXT_NORMALIZERS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace verdict::hf {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites valid UTF-8 in place; the result is valid UTF-8.
  virtual void Normalize(std::string* text) const = 0;
};

// The normalizer that a tokenizer.json "normalizer" object describes; an
// unknown type or a malformed field is an error naming it. A null value
// gives nullptr (no normalization).
absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& spec);

}  // namespace verdict::hf

#endif  // VERDICT_RUNTIME_TEXT_NORMALIZERS_H_
