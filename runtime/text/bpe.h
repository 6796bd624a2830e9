// The BPE model of a tokenizer.json: a vocabulary, ranked merges, and the
// options of the `tokenizers` library's BPE (unk_token, fuse_unk,
// byte_fallback, ignore_merges, continuing_subword_prefix,
// end_of_word_suffix). A word is split into characters and the pair of
// adjacent symbols with the lowest merge rank is merged until none is left,
// over a linked list with a priority queue; results are cached per word.
#ifndef VERDICT_RUNTIME_TEXT_BPE_H_
#define VERDICT_RUNTIME_TEXT_BPE_H_

#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace verdict::hf {

class BpeModel {
 public:
  // `spec` is the file's "model" object; `extra_ids` is how many ids beyond
  // the vocabulary's size the file may use (its added tokens), which bounds
  // the vocabulary's ids.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Parse(const nlohmann::json& spec,
                                                         size_t extra_ids);

  // Appends the ids of one pre-tokenized word. Thread-safe.
  void Tokenize(absl::string_view word, std::vector<int32_t>* ids) const;

  // -1 when absent.
  int32_t TokenToId(absl::string_view token) const;
  // nullptr when `id` names no token of the vocabulary.
  const std::string* IdToToken(int32_t id) const;
  // One past the largest id of the vocabulary.
  int32_t id_limit() const { return static_cast<int32_t>(tokens_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };

  BpeModel() = default;
  void MergeWord(absl::string_view word, std::vector<int32_t>* ids) const;
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> tokens_;  // by id; ids without a token are empty
  std::vector<bool> has_token_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  std::vector<int32_t> byte_ids_;  // <0xXX> ids by byte, -1 when absent

  // Words seen before, with their ids: text repeats words, and the merge
  // loop is the cost of encoding.
  mutable absl::Mutex cache_mutex_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_
      ABSL_GUARDED_BY(cache_mutex_);
};

}  // namespace verdict::hf

#endif  // VERDICT_RUNTIME_TEXT_BPE_H_
