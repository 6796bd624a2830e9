// Tokenizer: text to token ids and back, behind one interface for the two
// tokenizer kinds, SentencePiece (tokenizer.model) and Hugging Face
// tokenizer.json (hf_tokenizer.h). IncrementalDetokenizer turns a stream of
// generated ids into text pieces for streaming without splitting a UTF-8
// character or losing the spaces that the pieces encode.
#ifndef VERDICT_RUNTIME_TEXT_TOKENIZER_H_
#define VERDICT_RUNTIME_TEXT_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace verdict {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                      bool add_bos) const = 0;
  // Control tokens (BOS, EOS, ...) decode to nothing.
  virtual absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const = 0;
  // With skip_special_tokens false, special tokens decode to their text
  // where the tokenizer has one; by default this is Decode(ids).
  virtual absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                             bool skip_special_tokens) const {
    return Decode(ids);
  }
  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;  // -1 when the model has none
  virtual int eos_id() const = 0;
  // The piece string of one id, for logs and debugging.
  virtual std::string IdToPiece(int32_t id) const = 0;
  // Whether `id` is a byte-fallback piece (<0xXX>) whose text depends on
  // the byte pieces after it: a run of them decodes to its characters when
  // the bytes are valid UTF-8 and to one U+FFFD per byte otherwise, so
  // streaming holds such a run back until an id ends it.
  virtual bool IsBytePiece(int32_t id) const { return false; }
  // Whether Decode drops `id` before its decoders run (special tokens): it
  // adds no text and does not end a run of byte pieces around it.
  virtual bool IsSkippedInDecode(int32_t id) const { return false; }
};

// A SentencePiece `tokenizer.model` (BPE or unigram, with byte fallback).
class SentencePieceTokenizer : public Tokenizer {
 public:
  // Reads the file and checks its normalization tries
  // (sentencepiece_model_check.h) before libsentencepiece parses it.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(const std::string& path);
  ~SentencePieceTokenizer() override;

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_bos) const override;
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  int vocab_size() const override;
  int bos_id() const override;
  int eos_id() const override;
  std::string IdToPiece(int32_t id) const override;

 private:
  struct Impl;
  explicit SentencePieceTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The tokenizer of a model directory: `tokenizer.json` (Hugging Face) when
// the directory has one, else `tokenizer.model` (SentencePiece). Says which
// on stderr, in one line.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_dir);

// Streaming detokenization: decodes a short window of recent ids and emits
// only text that is complete (no trailing U+FFFD from a partial UTF-8
// sequence, no open run of byte pieces), and every piece it emits is whole
// UTF-8. Concatenating every Append result and Finish equals decoding
// all generated ids after the context.
class IncrementalDetokenizer {
 public:
  // `context` (for example the prompt's ids) fixes the leading space of
  // the first generated piece; it is never emitted.
  explicit IncrementalDetokenizer(const Tokenizer* tokenizer,
                                  absl::Span<const int32_t> context = {});

  // Text that `id` completes; empty while a character is still partial,
  // and for an id beyond the tokenizer's pieces (it has no text).
  absl::StatusOr<std::string> Append(int32_t id);
  // Whatever is still held back (a partial character decodes as U+FFFD).
  absl::StatusOr<std::string> Finish();

 private:
  absl::StatusOr<std::string> Emit(bool final);
  // Whether the ids held back since the last emission may now emit text.
  bool WorthDecoding() const;
  // Where the decode window starts once the ids from `emitted_from` on
  // were emitted.
  absl::StatusOr<size_t> NextWindowStart(size_t emitted_from) const;

  // Whether the last id that Decode keeps is a byte piece (a run still
  // open), and whether the id just appended ended such a run.
  void TrackByteRun(int32_t id);

  const Tokenizer* tokenizer_;
  std::vector<int32_t> ids_;
  bool open_bytes_ = false;
  bool run_just_ended_ = false;
  size_t prefix_offset_ = 0;  // start of the decode window
  size_t read_offset_ = 0;    // ids before this are already emitted
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_TEXT_TOKENIZER_H_
