// tokenizer.json decoders: turn the token strings of ids back into text.
// Each decoder maps the list of strings to a new list (the `tokenizers`
// library's decode_chain); the text is their concatenation. Supported:
// ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace and Sequence.
#ifndef VERDICT_RUNTIME_TEXT_DECODERS_H_
#define VERDICT_RUNTIME_TEXT_DECODERS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace verdict::hf {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void DecodeChain(std::vector<std::string>* tokens) const = 0;
};

// nullptr for a null spec (the tokens are then joined with spaces).
absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const nlohmann::json& spec);

}  // namespace verdict::hf

#endif  // VERDICT_RUNTIME_TEXT_DECODERS_H_
