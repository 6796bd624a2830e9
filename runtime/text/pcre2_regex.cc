#include "runtime/text/pcre2_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace verdict {
namespace {

pcre2_code* Code(void* p) { return static_cast<pcre2_code*>(p); }

// Length of the UTF-8 sequence that starts with `lead` (1 for a stray
// continuation byte, which valid input never has at a match end).
size_t Utf8Length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Match data sized for the pattern with the most groups this thread has
// used; one allocation per thread instead of one per search.
class ThreadMatchData {
 public:
  ~ThreadMatchData() {
    if (data_ != nullptr) pcre2_match_data_free(data_);
  }
  pcre2_match_data* For(const pcre2_code* code) {
    uint32_t pairs = 0;
    pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &pairs);
    ++pairs;
    if (data_ == nullptr || pairs > pairs_) {
      if (data_ != nullptr) pcre2_match_data_free(data_);
      data_ = pcre2_match_data_create(pairs, nullptr);
      pairs_ = pairs;
    }
    return data_;
  }

 private:
  pcre2_match_data* data_ = nullptr;
  uint32_t pairs_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Pcre2Regex>> Pcre2Regex::Compile(absl::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("regex /", pattern, "/ at offset ", offset,
                                                   ": ", reinterpret_cast<char*>(message)));
  }
  uint32_t jit_available = 0;
  pcre2_config(PCRE2_CONFIG_JIT, &jit_available);
  const bool jit = jit_available != 0 && pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::unique_ptr<Pcre2Regex>(new Pcre2Regex(std::string(pattern), code, jit));
}

Pcre2Regex::Pcre2Regex(std::string pattern, void* code, bool jit)
    : pattern_(std::move(pattern)), code_(code), jit_(jit) {}

Pcre2Regex::~Pcre2Regex() { pcre2_code_free(Code(code_)); }

void Pcre2Regex::FindAll(absl::string_view text, std::vector<Match>* matches) const {
  thread_local ThreadMatchData thread_data;
  pcre2_match_data* data = thread_data.For(Code(code_));
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(Code(code_), subject, text.size(), start, PCRE2_NO_UTF_CHECK, data,
                         nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // Deeply nested backtracking past JIT's default stack: the interpreter
      // gives the same answer with heap frames.
      rc = pcre2_match(Code(code_), subject, text.size(), start,
                       PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data, nullptr);
    }
    // No further match. (A match-limit error on pathological input also
    // ends the search: the rest of the text stays one unmatched stretch.)
    if (rc < 0) return;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      matches->emplace_back(begin, end);
      start = end;
    } else {
      if (begin >= text.size()) return;
      start = begin + Utf8Length(static_cast<unsigned char>(text[begin]));
    }
  }
}

}  // namespace verdict
