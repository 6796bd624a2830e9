// A Hugging Face `tokenizer.json` tokenizer that gives the ids and text of
// the `tokenizers` library: added tokens are cut out first, then each
// stretch between them is normalized, pre-tokenized and split by the BPE
// model; the post-processor's template adds BOS/EOS when asked.
//
// Supported components (anything else in the file is a load error naming
// it): model BPE; normalizers NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip,
// Sequence; pre-tokenizers ByteLevel, Split, Digits, Metaspace, Whitespace,
// WhitespaceSplit, Sequence; decoders ByteLevel, Metaspace, ByteFallback,
// Fuse, Strip, Replace, Sequence; post-processors TemplateProcessing,
// ByteLevel, RobertaProcessing, BertProcessing, Sequence.
#ifndef VERDICT_RUNTIME_TEXT_HF_TOKENIZER_H_
#define VERDICT_RUNTIME_TEXT_HF_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/text/added_tokens.h"
#include "runtime/text/bpe.h"
#include "runtime/text/decoders.h"
#include "runtime/text/normalizers.h"
#include "runtime/text/pretokenizers.h"
#include "runtime/text/tokenizer.h"

namespace verdict {

class HfTokenizer : public Tokenizer {
 public:
  // Reads `path` (a tokenizer.json). BOS and EOS come from a
  // tokenizer_config.json beside it when it names them, else from the
  // post-processor's template and the usual special-token names.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Load(const std::string& path);
  // Parses the contents of a tokenizer.json; `name` labels errors.
  // `config_json`, when not empty, is a tokenizer_config.json.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> FromJson(absl::string_view json,
                                                               absl::string_view name,
                                                               absl::string_view config_json = "");
  ~HfTokenizer() override;

  // add_bos applies the post-processor's template (the library's
  // add_special_tokens): BOS for Llama-style files, nothing for GPT-2's.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_bos) const override;
  // Special tokens decode to nothing.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     bool skip_special_tokens) const override;
  int vocab_size() const override { return vocab_size_; }
  int bos_id() const override { return bos_id_; }
  int eos_id() const override { return eos_id_; }
  std::string IdToPiece(int32_t id) const override;
  bool IsBytePiece(int32_t id) const override;
  bool IsSkippedInDecode(int32_t id) const override;

  // The added tokens' ids that are special (BOS, EOS, chat markers, ...).
  std::vector<int32_t> special_token_ids() const;

 private:
  HfTokenizer();
  absl::Status Init(absl::string_view json, absl::string_view config_json);
  void EncodeText(absl::string_view text, bool at_start, std::vector<int32_t>* ids) const;
  const std::string* TokenOf(int32_t id) const;

  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<hf::BpeModel> model_;
  std::unique_ptr<hf::Decoder> decoder_;
  std::unique_ptr<hf::AddedTokenMatcher> raw_tokens_;         // normalized: false
  std::unique_ptr<hf::AddedTokenMatcher> normalized_tokens_;  // normalized: true
  absl::flat_hash_map<int32_t, hf::AddedToken> added_by_id_;
  std::vector<int32_t> template_prefix_;  // the template's ids before $A
  std::vector<int32_t> template_suffix_;  // and after
  int vocab_size_ = 0;
  int bos_id_ = -1;
  int eos_id_ = -1;
  std::vector<bool> byte_piece_;  // by id: <0xXX> under a ByteFallback decoder
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_TEXT_HF_TOKENIZER_H_
