// The request headers that verdict itself interprets, as functions of plain
// strings: civetweb parses the request line and splits the headers, and
// these decide what verdict makes of them (tests/fuzz/http_request drives
// them through a real server).
#ifndef VERDICT_RUNTIME_SERVER_REQUEST_HEADERS_H_
#define VERDICT_RUNTIME_SERVER_REQUEST_HEADERS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace verdict {

struct HeaderField {
  absl::string_view name;
  absl::string_view value;
};

// InvalidArgument when the headers give the body two possible lengths:
// more than one Content-Length, Content-Length beside Transfer-Encoding,
// or a Transfer-Encoding other than a single "chunked". civetweb takes the
// first Content-Length and lets chunked win, while a proxy in front may
// pick the other; the bytes one of them counts as the next request would
// then reach verdict unseen by the proxy (request smuggling), so such a
// request is refused instead (RFC 9112, section 6.3).
absl::Status CheckBodyFraming(absl::Span<const HeaderField> headers);

// Whether an Authorization header's value is "Bearer <key>" (the scheme in
// any case, spaces around the token allowed). Takes time that depends on
// the key's length only, so the answer's timing does not tell how much of
// a guess was right.
bool BearerKeyMatches(absl::string_view authorization, absl::string_view key);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_SERVER_REQUEST_HEADERS_H_
