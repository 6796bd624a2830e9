#include "runtime/text/added_tokens.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "runtime/text/text_pattern.h"
#include "runtime/text/utf8.h"

namespace verdict::hf {
namespace {

using nlohmann::json;

// The character before `end` (end > 0).
uint32_t CharBefore(absl::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return utf8::Decode(text, start);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (int i = 0; i < static_cast<int>(tokens_.size()); ++i) {
    if (tokens_[i].content.empty()) continue;
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  }
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](int a, int b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

int AddedTokenMatcher::LongestAt(absl::string_view text, size_t pos) const {
  for (int i : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    const std::string& c = tokens_[i].content;
    if (c.size() <= text.size() - pos && std::memcmp(text.data() + pos, c.data(), c.size()) == 0) {
      return i;
    }
  }
  return -1;
}

void AddedTokenMatcher::Split(absl::string_view text, std::vector<Segment>* segments) const {
  if (text.empty()) return;
  size_t emitted = 0;  // text before this is in segments
  size_t pos = 0;
  while (pos < text.size()) {
    const int k = by_first_byte_[static_cast<unsigned char>(text[pos])].empty()
                      ? -1
                      : LongestAt(text, pos);
    if (k < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[k];
    size_t begin = pos, end = pos + t.content.size();
    // The search goes on after the match whatever the rules below decide,
    // as a non-overlapping leftmost-longest search does.
    pos = end;
    if (t.single_word) {
      const bool word_before = begin > 0 && IsWordChar(CharBefore(text, begin));
      const bool word_after = end < text.size() && IsWordChar(utf8::Decode(text, end));
      if (word_before || word_after) continue;
    }
    if (t.lstrip) {
      const absl::string_view before = TrimTrailingWhitespace(text.substr(0, begin));
      begin = std::max(before.size(), emitted);
    }
    if (t.rstrip) {
      end = text.size() - TrimLeadingWhitespace(text.substr(end)).size();
    }
    if (begin > emitted) segments->push_back({emitted, begin, -1});
    segments->push_back({begin, end, t.id});
    emitted = end;
    pos = std::max(pos, end);
  }
  if (emitted < text.size()) segments->push_back({emitted, text.size(), -1});
}

absl::StatusOr<std::vector<AddedToken>> ParseAddedTokens(const json& spec) {
  std::vector<AddedToken> tokens;
  if (spec.is_null()) return tokens;
  if (!spec.is_array()) return absl::InvalidArgumentError("added_tokens: not a list");
  absl::flat_hash_set<int32_t> ids;
  absl::flat_hash_set<std::string> contents;
  for (const json& t : spec) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string()) {
      return absl::InvalidArgumentError("added_tokens: an entry lacks an integer id or a content");
    }
    // Read wide and checked, since a plain int32 read would wrap 2^32 to 0.
    const int64_t id = t["id"].get<int64_t>();
    if (id > std::numeric_limits<int32_t>::max() - 1) {
      return absl::InvalidArgumentError(absl::StrCat("added_tokens: id ", id, " is too large"));
    }
    AddedToken token;
    token.id = static_cast<int32_t>(id);
    token.content = t["content"].get<std::string>();
    const auto flag = [&](const char* name, bool fallback) {
      return t.contains(name) && t[name].is_boolean() ? t[name].get<bool>() : fallback;
    };
    token.special = flag("special", false);
    token.lstrip = flag("lstrip", false);
    token.rstrip = flag("rstrip", false);
    token.single_word = flag("single_word", false);
    token.normalized = flag("normalized", !token.special);
    if (token.id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("added_tokens: \"", token.content, "\" has a negative id"));
    }
    if (token.content.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("added_tokens: id ", token.id, " is empty"));
    }
    if (!utf8::IsValid(token.content)) {
      return absl::InvalidArgumentError(
          absl::StrCat("added_tokens: id ", token.id, " is not valid UTF-8"));
    }
    if (!ids.insert(token.id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("added_tokens: id ", token.id, " is used twice"));
    }
    if (!contents.insert(token.content).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("added_tokens: \"", token.content, "\" is listed twice"));
    }
    tokens.push_back(std::move(token));
  }
  return tokens;
}

}  // namespace verdict::hf
