// Trains a small SentencePiece model for tests (see BUILD for why this sits
// apart from the tests that use it).
#ifndef VERDICT_RUNTIME_TEXT_INTERNAL_SENTENCEPIECE_TRAINER_H_
#define VERDICT_RUNTIME_TEXT_INTERNAL_SENTENCEPIECE_TRAINER_H_

#include <string>

namespace verdict {
namespace internal {

// `args` in spm_train's flag syntax; returns an empty string on success,
// otherwise the error.
std::string TrainSentencePiece(const std::string& args);

}  // namespace internal
}  // namespace verdict

#endif  // VERDICT_RUNTIME_TEXT_INTERNAL_SENTENCEPIECE_TRAINER_H_
