// Checks a SentencePiece tokenizer.model before it reaches libsentencepiece.
//
// The library trusts the normalization rules a model carries: the
// precompiled charsmap of its normalizer_spec and denormalizer_spec (a
// little-endian uint32 trie size, a double-array trie of uint32 units, then
// NUL-terminated replacement strings). It checks only the trie's size, so a
// trie whose nodes point past its end makes Encode read out of bounds (a
// SEGV in Normalizer::NormalizePrefix). This check walks the model's wire
// format far enough to find both charsmaps and refuses one the library
// could read past. It also refuses a piece holding a NUL byte: the library
// builds its piece tries from NUL-terminated strings, and an empty key ends
// the process unless caught (darts-clone throws from inside the library).
#ifndef VERDICT_RUNTIME_TEXT_SENTENCEPIECE_MODEL_CHECK_H_
#define VERDICT_RUNTIME_TEXT_SENTENCEPIECE_MODEL_CHECK_H_

#include <string_view>

#include "absl/status/status.h"

namespace verdict {

// OK when `model` (a serialized ModelProto) is well-formed protobuf wire
// format and every precompiled charsmap in it is empty or safe to search:
// every node the trie can reach has all its children and its value unit
// inside the trie, every value points into the replacement strings, and
// those end in NUL; and no piece's string holds a NUL byte. Groups (wire
// types 3 and 4) are refused: a SentencePiece model has none.
absl::Status CheckSentencePieceModel(std::string_view model);

// The same check for one precompiled charsmap.
absl::Status CheckPrecompiledCharsMap(std::string_view charsmap);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_TEXT_SENTENCEPIECE_MODEL_CHECK_H_
