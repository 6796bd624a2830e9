#include "runtime/text/internal/sentencepiece_trainer.h"

#include <sentencepiece_trainer.h>

namespace verdict {
namespace internal {

std::string TrainSentencePiece(const std::string& args) {
  const sentencepiece::util::Status status = sentencepiece::SentencePieceTrainer::Train(args);
  return status.ok() ? std::string() : status.ToString();
}

}  // namespace internal
}  // namespace verdict
