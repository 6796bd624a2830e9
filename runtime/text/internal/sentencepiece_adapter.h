// A SentencePiece processor behind std-only types (see BUILD for why).
#ifndef VERDICT_RUNTIME_TEXT_INTERNAL_SENTENCEPIECE_ADAPTER_H_
#define VERDICT_RUNTIME_TEXT_INTERNAL_SENTENCEPIECE_ADAPTER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace verdict {
namespace internal {

class SentencePieceAdapter {
 public:
  // From a serialized ModelProto (a tokenizer.model's bytes); nullptr and
  // `error` set when the model cannot be loaded.
  static std::unique_ptr<SentencePieceAdapter> LoadFromSerialized(std::string_view model,
                                                                  std::string* error);
  ~SentencePieceAdapter();

  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const;
  bool Decode(const std::vector<int>& ids, std::string* text, std::string* error) const;
  int piece_size() const;
  int bos_id() const;
  int eos_id() const;
  std::string IdToPiece(int id) const;

 private:
  struct Impl;
  explicit SentencePieceAdapter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace internal
}  // namespace verdict

#endif  // VERDICT_RUNTIME_TEXT_INTERNAL_SENTENCEPIECE_ADAPTER_H_
