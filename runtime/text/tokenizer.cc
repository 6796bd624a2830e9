#include "runtime/text/tokenizer.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "runtime/text/hf_tokenizer.h"
#include "runtime/text/internal/sentencepiece_adapter.h"
#include "runtime/text/sentencepiece_model_check.h"

namespace verdict {

struct SentencePieceTokenizer::Impl {
  std::unique_ptr<internal::SentencePieceAdapter> processor;
};

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Load(
    const std::string& path) {
  // Read here and checked before libsentencepiece parses it: the library
  // trusts the model's normalization tries (sentencepiece_model_check.h).
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  const std::string model((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": cannot read"));
  if (absl::Status s = CheckSentencePieceModel(model); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  auto impl = std::make_unique<Impl>();
  std::string error;
  impl->processor = internal::SentencePieceAdapter::LoadFromSerialized(model, &error);
  if (impl->processor == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot load SentencePiece model: ", error));
  }
  return std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer(std::move(impl)));
}

absl::StatusOr<std::vector<int32_t>> SentencePieceTokenizer::Encode(std::string_view text,
                                                                    bool add_bos) const {
  std::vector<int> pieces;
  std::string error;
  if (!impl_->processor->Encode(text, &pieces, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("SentencePiece encode: ", error));
  }
  std::vector<int32_t> ids;
  ids.reserve(pieces.size() + 1);
  if (add_bos && bos_id() >= 0) ids.push_back(bos_id());
  ids.insert(ids.end(), pieces.begin(), pieces.end());
  return ids;
}

absl::StatusOr<std::string> SentencePieceTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::vector<int> pieces(ids.begin(), ids.end());
  for (int id : pieces) {
    if (id < 0 || id >= vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " outside the vocabulary (", vocab_size(), ")"));
    }
  }
  std::string text, error;
  if (!impl_->processor->Decode(pieces, &text, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("SentencePiece decode: ", error));
  }
  return text;
}

int SentencePieceTokenizer::vocab_size() const { return impl_->processor->piece_size(); }
int SentencePieceTokenizer::bos_id() const { return impl_->processor->bos_id(); }
int SentencePieceTokenizer::eos_id() const { return impl_->processor->eos_id(); }

std::string SentencePieceTokenizer::IdToPiece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return impl_->processor->IdToPiece(id);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path hf = fs::path(model_dir) / "tokenizer.json";
  if (fs::exists(hf, ec)) {
    absl::StatusOr<std::unique_ptr<HfTokenizer>> t = HfTokenizer::Load(hf.string());
    if (!t.ok()) return t.status();
    std::fprintf(stderr, "verdict: tokenizer %s (Hugging Face tokenizer.json, %d ids)\n",
                 hf.string().c_str(), (*t)->vocab_size());
    return std::unique_ptr<Tokenizer>(*std::move(t));
  }
  const fs::path sp = fs::path(model_dir) / "tokenizer.model";
  if (fs::exists(sp, ec)) {
    absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> t =
        SentencePieceTokenizer::Load(sp.string());
    if (!t.ok()) return t.status();
    std::fprintf(stderr, "verdict: tokenizer %s (SentencePiece tokenizer.model, %d ids)\n",
                 sp.string().c_str(), (*t)->vocab_size());
    return std::unique_ptr<Tokenizer>(*std::move(t));
  }
  return absl::NotFoundError(
      absl::StrCat(model_dir, ": no tokenizer.json or tokenizer.model"));
}

namespace {

// U+FFFD, which decoders produce for an incomplete UTF-8 sequence.
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// Ids of context kept in the decode window: enough for the leading-space
// rule of the first generated piece.
constexpr size_t kContextWindow = 6;

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer* tokenizer,
                                               absl::Span<const int32_t> context)
    : tokenizer_(tokenizer), ids_(context.begin(), context.end()) {
  read_offset_ = ids_.size();
  prefix_offset_ = ids_.size() > kContextWindow ? ids_.size() - kContextWindow : 0;
}

absl::StatusOr<std::string> IncrementalDetokenizer::Append(int32_t id) {
  if (id < 0) return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is negative"));
  // A model may have more ids than its tokenizer has pieces (padded
  // embedding rows; dummy-weight benchmarks at real shapes with a small
  // tokenizer). Those ids have no text.
  if (id >= tokenizer_->vocab_size()) return std::string();
  ids_.push_back(id);
  return Emit(/*final=*/false);
}

absl::StatusOr<std::string> IncrementalDetokenizer::Finish() { return Emit(/*final=*/true); }

absl::StatusOr<std::string> IncrementalDetokenizer::Emit(bool final) {
  if (read_offset_ == ids_.size()) return std::string();
  absl::Span<const int32_t> all(ids_);
  absl::StatusOr<std::string> prefix =
      tokenizer_->Decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_));
  if (!prefix.ok()) return prefix.status();
  absl::StatusOr<std::string> full = tokenizer_->Decode(all.subspan(prefix_offset_));
  if (!full.ok()) return full.status();
  const bool partial = full->size() >= kReplacementChar.size() &&
                       full->compare(full->size() - kReplacementChar.size(),
                                     kReplacementChar.size(), kReplacementChar) == 0;
  const bool open_bytes = tokenizer_->IsBytePiece(ids_.back());
  if (!final && (full->size() <= prefix->size() || partial || open_bytes)) return std::string();
  // The window's text normally extends the prefix's; where it does not, the
  // new text starts at the next character boundary so that no piece holds
  // half a character.
  size_t from = prefix->size();
  if (full->compare(0, from, *prefix) != 0) {
    while (from < full->size() && (static_cast<unsigned char>((*full)[from]) & 0xC0) == 0x80) {
      ++from;
    }
  }
  std::string delta = full->size() > from ? full->substr(from) : std::string();
  // The next window starts at the ids just emitted, unless they decode to
  // nothing on their own (special tokens, a lone Metaspace "▁" that a
  // decoder drops at the start of a text): a window starting there would
  // lose the leading space of the text that follows.
  absl::StatusOr<std::string> next = tokenizer_->Decode(all.subspan(read_offset_));
  if (!next.ok()) return next.status();
  if (!next->empty()) prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return delta;
}

}  // namespace verdict
