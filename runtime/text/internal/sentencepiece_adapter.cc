#include "runtime/text/internal/sentencepiece_adapter.h"

#include <exception>

#include "sentencepiece_processor.h"

namespace verdict {
namespace internal {

struct SentencePieceAdapter::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

SentencePieceAdapter::SentencePieceAdapter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SentencePieceAdapter::~SentencePieceAdapter() = default;

std::unique_ptr<SentencePieceAdapter> SentencePieceAdapter::LoadFromSerialized(
    std::string_view model, std::string* error) {
  auto impl = std::make_unique<Impl>();
  // The library reports most broken models as a status, but the tries it
  // builds (darts-clone) throw on some; that is a load error too.
  try {
    const sentencepiece::util::Status status = impl->processor.LoadFromSerializedProto(model);
    if (!status.ok()) {
      *error = status.ToString();
      return nullptr;
    }
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
  return std::unique_ptr<SentencePieceAdapter>(new SentencePieceAdapter(std::move(impl)));
}

bool SentencePieceAdapter::Encode(std::string_view text, std::vector<int>* ids,
                                  std::string* error) const {
  const sentencepiece::util::Status status = impl_->processor.Encode(text, ids);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

bool SentencePieceAdapter::Decode(const std::vector<int>& ids, std::string* text,
                                  std::string* error) const {
  const sentencepiece::util::Status status = impl_->processor.Decode(ids, text);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

int SentencePieceAdapter::piece_size() const { return impl_->processor.GetPieceSize(); }
int SentencePieceAdapter::bos_id() const { return impl_->processor.bos_id(); }
int SentencePieceAdapter::eos_id() const { return impl_->processor.eos_id(); }
std::string SentencePieceAdapter::IdToPiece(int id) const { return impl_->processor.IdToPiece(id); }

}  // namespace internal
}  // namespace verdict
