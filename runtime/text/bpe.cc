#include "runtime/text/bpe.h"

#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/text/json_fields.h"
#include "runtime/text/utf8.h"

namespace verdict::hf {
namespace {

using nlohmann::json;

// Words longer than this (in bytes) are not cached: they are rare, and
// would let one input fill the cache.
constexpr size_t kMaxCachedWordBytes = 256;
// The cache is dropped when it reaches this many words.
constexpr size_t kMaxCachedWords = 200000;

// One symbol of a word being merged: a token id over bytes of the word,
// linked to its live neighbours.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  bool live;
};

// A candidate merge of the symbol at `pos` with the one after it. The
// queue pops the lowest rank first, and the leftmost among equal ranks.
struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t merged_id;
  bool operator<(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

absl::StatusOr<std::pair<std::string, std::string>> MergePair(const json& merge, size_t index) {
  if (merge.is_string()) {
    const std::string s = merge.get<std::string>();
    const size_t space = s.find(' ', 1);
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("model BPE: merge ", index, " \"", s, "\" is not two tokens"));
    }
    return std::make_pair(s.substr(0, space), s.substr(space + 1));
  }
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return std::make_pair(merge[0].get<std::string>(), merge[1].get<std::string>());
  }
  return absl::InvalidArgumentError(
      absl::StrCat("model BPE: merge ", index, " is neither \"a b\" nor [\"a\", \"b\"]"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Parse(const json& spec, size_t extra_ids) {
  absl::StatusOr<std::string> type = TypeOf(spec, "model");
  if (!type.ok()) return type.status();
  if (*type != "BPE") {
    return absl::UnimplementedError(absl::StrCat("model type \"", *type, "\" is not supported"));
  }
  constexpr absl::string_view kWhere = "model BPE";
  if (spec.contains("dropout") && !spec["dropout"].is_null()) {
    return absl::UnimplementedError("model BPE: dropout is not supported");
  }
  auto model = std::unique_ptr<BpeModel>(new BpeModel());
  absl::StatusOr<bool> fuse = BoolField(spec, "fuse_unk", kWhere, false);
  absl::StatusOr<bool> fallback = BoolField(spec, "byte_fallback", kWhere, false);
  absl::StatusOr<bool> ignore = BoolField(spec, "ignore_merges", kWhere, false);
  absl::StatusOr<std::string> prefix = OptionalStringField(spec, "continuing_subword_prefix", kWhere, "");
  absl::StatusOr<std::string> suffix = OptionalStringField(spec, "end_of_word_suffix", kWhere, "");
  absl::StatusOr<std::string> unk = OptionalStringField(spec, "unk_token", kWhere, "");
  for (const absl::Status& s : {fuse.status(), fallback.status(), ignore.status(), prefix.status(),
                                suffix.status(), unk.status()}) {
    if (!s.ok()) return s;
  }
  model->fuse_unk_ = *fuse;
  model->byte_fallback_ = *fallback;
  model->ignore_merges_ = *ignore;
  model->continuing_subword_prefix_ = *prefix;
  model->end_of_word_suffix_ = *suffix;

  if (!spec.contains("vocab") || !spec["vocab"].is_object()) {
    return absl::InvalidArgumentError("model BPE: \"vocab\" is not an object");
  }
  const json& vocab = spec["vocab"];
  const int64_t limit = static_cast<int64_t>(vocab.size() + extra_ids);
  int32_t max_id = -1;
  model->vocab_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model BPE: the id of \"", it.key(), "\" is not an integer"));
    }
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= limit) {
      return absl::InvalidArgumentError(absl::StrCat("model BPE: token \"", it.key(), "\" has id ",
                                                     id, ", outside [0, ", limit, ")"));
    }
    model->vocab_.emplace(it.key(), static_cast<int32_t>(id));
    max_id = std::max(max_id, static_cast<int32_t>(id));
  }
  model->tokens_.resize(max_id + 1);
  model->has_token_.assign(max_id + 1, false);
  for (const auto& [token, id] : model->vocab_) {
    if (model->has_token_[id]) {
      return absl::InvalidArgumentError(absl::StrCat("model BPE: id ", id, " is given to both \"",
                                                     model->tokens_[id], "\" and \"", token, "\""));
    }
    model->tokens_[id] = token;
    model->has_token_[id] = true;
  }
  if (!unk->empty()) {
    model->unk_id_ = model->TokenToId(*unk);
    if (model->unk_id_ < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model BPE: unk_token \"", *unk, "\" is not in the vocabulary"));
    }
  }
  model->byte_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) model->byte_ids_[b] = model->TokenToId(absl::StrFormat("<0x%02X>", b));

  if (!spec.contains("merges") || !spec["merges"].is_array()) {
    return absl::InvalidArgumentError("model BPE: \"merges\" is not a list");
  }
  const json& merges = spec["merges"];
  model->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    absl::StatusOr<std::pair<std::string, std::string>> pair = MergePair(merges[rank], rank);
    if (!pair.ok()) return pair.status();
    const auto& [left, right] = *pair;
    const int32_t left_id = model->TokenToId(left);
    const int32_t right_id = model->TokenToId(right);
    if (left_id < 0 || right_id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("model BPE: merge ", rank, " (\"", left,
                                                     "\", \"", right, "\") names a token \"",
                                                     left_id < 0 ? left : right,
                                                     "\" that is not in the vocabulary"));
    }
    // With a continuing-subword prefix, the right part carries it and the
    // merged token does not repeat it.
    std::string merged = left;
    const std::string& p = model->continuing_subword_prefix_;
    if (!p.empty() && right.compare(0, p.size(), p) == 0) {
      merged += right.substr(p.size());
    } else {
      merged += right;
    }
    const int32_t merged_id = model->TokenToId(merged);
    if (merged_id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("model BPE: merge ", rank, " (\"", left,
                                                     "\", \"", right, "\") makes \"", merged,
                                                     "\", which is not in the vocabulary"));
    }
    // A repeated pair keeps its first (best) rank, as a map insert would.
    model->merges_.try_emplace(PairKey(left_id, right_id),
                               Merge{static_cast<int32_t>(rank), merged_id});
  }
  return model;
}

int32_t BpeModel::TokenToId(absl::string_view token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= id_limit() || !has_token_[id]) return nullptr;
  return &tokens_[id];
}

void BpeModel::Tokenize(absl::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t id = TokenToId(word);
    if (id >= 0) {
      ids->push_back(id);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    absl::MutexLock lock(&cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = ids->size();
  MergeWord(word, ids);
  if (cacheable) {
    std::vector<int32_t> result(ids->begin() + first, ids->end());
    absl::MutexLock lock(&cache_mutex_);
    if (cache_.size() >= kMaxCachedWords) cache_.clear();
    cache_.emplace(std::string(word), std::move(result));
  }
}

void BpeModel::MergeWord(absl::string_view word, std::vector<int32_t>* ids) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  // A pending <unk>, kept open so that fuse_unk can extend it.
  bool unk_pending = false;
  const auto add = [&](int32_t id) {
    const int32_t n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, true});
  };
  std::string piece;
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(utf8::CharLength(static_cast<unsigned char>(word[i])), word.size() - i);
    const bool is_first = i == 0, is_last = i + n == word.size();
    piece.assign(word.data() + i, n);
    if (!is_first && !continuing_subword_prefix_.empty()) piece.insert(0, continuing_subword_prefix_);
    if (is_last && !end_of_word_suffix_.empty()) piece += end_of_word_suffix_;
    i += n;
    const int32_t id = TokenToId(piece);
    if (id >= 0) {
      if (unk_pending) {
        add(unk_id_);
        unk_pending = false;
      }
      add(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : piece) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        // The library adds the bytes without closing a pending <unk> first.
        for (char c : piece) add(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (unk_pending && !fuse_unk_) add(unk_id_);
      unk_pending = true;
    }
  }
  if (unk_pending) add(unk_id_);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Candidate> queue;
  const auto consider = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    auto it = merges_.find(PairKey(symbols[pos].id, symbols[next].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.merged_id});
  };
  for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos) consider(pos);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.live || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // A stale candidate: one of its symbols has merged since it was queued.
    auto it = merges_.find(PairKey(left.id, right.id));
    if (it == merges_.end() || it->second.merged_id != top.merged_id) continue;
    left.id = top.merged_id;
    right.live = false;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (const Symbol& s : symbols) {
    if (s.live) ids->push_back(s.id);
  }
}

}  // namespace verdict::hf
