#include "runtime/text/pretokenizers.h"

#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/text/json_fields.h"
#include "runtime/text/pcre2_regex.h"
#include "runtime/text/text_pattern.h"
#include "runtime/text/utf8.h"

namespace verdict::hf {
namespace {

using nlohmann::json;
using Match = Pcre2Regex::Match;

// A stretch of a piece and whether it is a match of the pattern.
struct Span {
  size_t begin, end;
  bool is_match;
};

// Cuts `text` at `matches` into alternating spans, then applies the
// behaviour, as the `tokenizers` library's NormalizedString::split does.
std::vector<Span> SplitSpans(size_t size, const std::vector<Match>& matches,
                             SplitBehavior behavior, bool invert) {
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  size_t last = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > last) spans.push_back({last, begin, invert});
    spans.push_back({begin, end, !invert});
    last = end;
  }
  if (last < size) spans.push_back({last, size, invert});

  std::vector<Span> out;
  out.reserve(spans.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      return spans;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) out.push_back(s);
      }
      return out;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (!out.empty() && s.is_match && out.back().is_match) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
      }
      return out;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.is_match;
      }
      return out;
    }
    case SplitBehavior::kMergedWithNext: {
      // Walk from the end: a match joins the span after it unless that one
      // is a match too.
      bool next_match = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.is_match && !next_match && !out.empty()) {
          out.back().begin = s.begin;
        } else {
          out.push_back(s);
        }
        next_match = s.is_match;
      }
      return std::vector<Span>(out.rbegin(), out.rend());
    }
  }
  return spans;
}

// Splits every piece at the pattern's matches.
void SplitPieces(const TextPattern& pattern, SplitBehavior behavior, bool invert,
                 std::vector<Piece>* pieces) {
  std::vector<Piece> out;
  out.reserve(pieces->size() * 2);
  std::vector<Match> matches;
  for (Piece& piece : *pieces) {
    matches.clear();
    pattern.FindAll(piece.text, &matches);
    if (matches.empty() && !invert) {
      out.push_back(std::move(piece));
      continue;
    }
    for (const Span& s : SplitSpans(piece.text.size(), matches, behavior, invert)) {
      if (s.end == s.begin) continue;
      out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_start && s.begin == 0});
    }
  }
  *pieces = std::move(out);
}

class Split : public PreTokenizer {
 public:
  Split(TextPattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    SplitPieces(pattern_, behavior_, invert_, pieces);
  }

 private:
  TextPattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, std::unique_ptr<TextPattern> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : *pieces) {
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, " ");
      }
    }
    if (regex_ != nullptr) SplitPieces(*regex_, SplitBehavior::kIsolated, false, pieces);
    std::string mapped;
    for (Piece& p : *pieces) {
      mapped.clear();
      for (char c : p.text) mapped += ByteLevelChar(static_cast<unsigned char>(c));
      p.text.swap(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<TextPattern> regex_;  // null without use_regex
};

class Metaspace : public PreTokenizer {
 public:
  Metaspace(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)),
        space_(TextPattern::Literal(" ")),
        replacement_pattern_(TextPattern::Literal(replacement_)),
        scheme_(scheme),
        split_(split) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    for (Piece& p : *pieces) {
      p.text = space_.ReplaceAll(p.text, replacement_);
      const bool starts = p.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::kAlways ||
                      (scheme_ == PrependScheme::kFirst && p.at_start))) {
        p.text.insert(0, replacement_);
      }
    }
    if (split_) SplitPieces(replacement_pattern_, SplitBehavior::kMergedWithNext, false, pieces);
  }

 private:
  std::string replacement_;
  TextPattern space_;
  TextPattern replacement_pattern_;
  PrependScheme scheme_;
  bool split_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    for (const auto& step : steps_) step->PreTokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

absl::StatusOr<SplitBehavior> ParseBehavior(const json& spec, absl::string_view where) {
  absl::StatusOr<std::string> name = StringField(spec, "behavior", where);
  if (!name.ok()) return name.status();
  if (*name == "Removed") return SplitBehavior::kRemoved;
  if (*name == "Isolated") return SplitBehavior::kIsolated;
  if (*name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (*name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (*name == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError(absl::StrCat(where, ": unknown behavior \"", *name, "\""));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> RegexSplit(const std::string& regex,
                                                         SplitBehavior behavior,
                                                         absl::string_view where) {
  absl::StatusOr<TextPattern> pattern = TextPattern::Regex(regex);
  if (!pattern.ok()) {
    return absl::InternalError(absl::StrCat(where, ": ", pattern.status().message()));
  }
  return std::make_unique<Split>(*std::move(pattern), behavior, false);
}

}  // namespace

const std::string& ByteLevelChar(unsigned char b) {
  static const std::array<std::string, 256>* const kChars = [] {
    auto* chars = new std::array<std::string, 256>();
    uint32_t next = 256;
    for (int c = 0; c < 256; ++c) {
      const bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
      utf8::Append(printable ? static_cast<uint32_t>(c) : next++, &(*chars)[c]);
    }
    return chars;
  }();
  return (*kChars)[b];
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const json& spec) {
  if (spec.is_null()) return std::unique_ptr<PreTokenizer>();
  absl::StatusOr<std::string> type = TypeOf(spec, "pre_tokenizer");
  if (!type.ok()) return type.status();
  const std::string where = absl::StrCat("pre_tokenizer ", *type);
  if (*type == "ByteLevel") {
    absl::StatusOr<bool> prefix = BoolField(spec, "add_prefix_space", where, true);
    if (!prefix.ok()) return prefix.status();
    absl::StatusOr<bool> use_regex = BoolField(spec, "use_regex", where, true);
    if (!use_regex.ok()) return use_regex.status();
    std::unique_ptr<TextPattern> regex;
    if (*use_regex) {
      absl::StatusOr<TextPattern> gpt2 = TextPattern::Regex(kGpt2Regex);
      if (!gpt2.ok()) return gpt2.status();
      regex = std::make_unique<TextPattern>(*std::move(gpt2));
    }
    return std::make_unique<ByteLevel>(*prefix, std::move(regex));
  }
  if (*type == "Split") {
    absl::StatusOr<TextPattern> pattern = TextPattern::Parse(spec, where);
    if (!pattern.ok()) return pattern.status();
    absl::StatusOr<SplitBehavior> behavior = ParseBehavior(spec, where);
    if (!behavior.ok()) return behavior.status();
    absl::StatusOr<bool> invert = BoolField(spec, "invert", where, false);
    if (!invert.ok()) return invert.status();
    return std::make_unique<Split>(*std::move(pattern), *behavior, *invert);
  }
  if (*type == "Digits") {
    absl::StatusOr<bool> individual = BoolField(spec, "individual_digits", where, false);
    if (!individual.ok()) return individual.status();
    // Rust's char::is_numeric is the N categories, which \p{N} names.
    return RegexSplit(*individual ? R"(\p{N})" : R"(\p{N}+)", SplitBehavior::kIsolated, where);
  }
  if (*type == "Whitespace") {
    return RegexSplit(R"(\w+|[^\w\s]+)", SplitBehavior::kIsolated, where);
  }
  if (*type == "WhitespaceSplit") {
    return RegexSplit(R"(\s+)", SplitBehavior::kRemoved, where);
  }
  if (*type == "Metaspace") {
    absl::StatusOr<std::string> replacement = OptionalStringField(spec, "replacement", where, "\u2581");
    if (!replacement.ok()) return replacement.status();
    if (replacement->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": empty replacement"));
    }
    absl::StatusOr<PrependScheme> scheme = PrependSchemeField(spec, where);
    if (!scheme.ok()) return scheme.status();
    absl::StatusOr<bool> split = BoolField(spec, "split", where, true);
    if (!split.ok()) return split.status();
    return std::make_unique<Metaspace>(*std::move(replacement), *scheme, *split);
  }
  if (*type == "Sequence") {
    absl::StatusOr<std::vector<std::unique_ptr<PreTokenizer>>> steps =
        SequenceSteps<PreTokenizer>(spec, "pretokenizers", where, ParsePreTokenizer);
    if (!steps.ok()) return steps.status();
    return std::make_unique<Sequence>(*std::move(steps));
  }
  return absl::UnimplementedError(
      absl::StrCat("pre_tokenizer type \"", *type, "\" is not supported"));
}

}  // namespace verdict::hf
