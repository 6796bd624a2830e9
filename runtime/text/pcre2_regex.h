// A compiled PCRE2 pattern over UTF-8 text, with Unicode properties (UTF and
// UCP) and look-ahead, which tokenizer.json regexes need (`\p{L}`,
// `\s+(?!\S)`). JIT-compiled where the library supports it.
#ifndef VERDICT_RUNTIME_TEXT_PCRE2_REGEX_H_
#define VERDICT_RUNTIME_TEXT_PCRE2_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace verdict {

class Pcre2Regex {
 public:
  // A byte range [begin, end) of the searched text.
  using Match = std::pair<size_t, size_t>;

  static absl::StatusOr<std::unique_ptr<Pcre2Regex>> Compile(absl::string_view pattern);
  ~Pcre2Regex();
  Pcre2Regex(const Pcre2Regex&) = delete;
  Pcre2Regex& operator=(const Pcre2Regex&) = delete;

  // Appends the leftmost non-overlapping matches in `text`, left to right.
  // Empty matches are not reported (a split on them would produce nothing).
  // `text` must be valid UTF-8: the caller checks it once per input, so the
  // per-match check is skipped. Safe to call from several threads.
  void FindAll(absl::string_view text, std::vector<Match>* matches) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

 private:
  Pcre2Regex(std::string pattern, void* code, bool jit);

  std::string pattern_;
  void* code_;  // pcre2_code_8*, kept out of the header with pcre2.h's macros
  bool jit_;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_TEXT_PCRE2_REGEX_H_
