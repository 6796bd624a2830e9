#include "runtime/server/request_headers.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace verdict {
namespace {

bool ConstantTimeEquals(absl::string_view given, absl::string_view expected) {
  volatile unsigned char diff = given.size() != expected.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = diff | (g ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0;
}

}  // namespace

absl::Status CheckBodyFraming(absl::Span<const HeaderField> headers) {
  int lengths = 0, encodings = 0;
  for (const HeaderField& h : headers) {
    if (absl::EqualsIgnoreCase(h.name, "Content-Length")) {
      ++lengths;
    } else if (absl::EqualsIgnoreCase(h.name, "Transfer-Encoding")) {
      ++encodings;
      if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(h.value), "chunked")) {
        return absl::InvalidArgumentError(
            absl::StrCat("Transfer-Encoding \"", h.value, "\" is not supported; use chunked"));
      }
    }
  }
  if (lengths > 1) return absl::InvalidArgumentError("more than one Content-Length header");
  if (encodings > 1) return absl::InvalidArgumentError("more than one Transfer-Encoding header");
  if (lengths > 0 && encodings > 0) {
    return absl::InvalidArgumentError("both Content-Length and Transfer-Encoding");
  }
  return absl::OkStatus();
}

bool BearerKeyMatches(absl::string_view authorization, absl::string_view key) {
  const absl::string_view value = absl::StripAsciiWhitespace(authorization);
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() < kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return false;
  }
  return ConstantTimeEquals(absl::StripLeadingAsciiWhitespace(value.substr(kScheme.size())), key);
}

}  // namespace verdict
