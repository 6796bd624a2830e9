// What the connection gate (connection_gate.h) reads of a request before
// civetweb does: where the request head ends, and whether the request is a
// health or readiness probe the gate may answer itself.
#ifndef VERDICT_RUNTIME_SERVER_REQUEST_HEAD_H_
#define VERDICT_RUNTIME_SERVER_REQUEST_HEAD_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace verdict {

// The length of the request head at the start of `data` (request line and
// headers, through the empty line), or nullopt while it is incomplete.
// Lines may end in "\r\n" or "\n", as civetweb accepts both.
std::optional<size_t> RequestHeadLength(absl::string_view data);

struct ProbeRequest {
  std::string path;  // "/health" or "/ready"
  bool keep_alive;   // HTTP/1.1 without "Connection: close"
};

// A "GET /health" or "GET /ready" (HTTP/1.0 or 1.1, any query string) with
// no body (no Transfer-Encoding, no Content-Length but one of 0): nothing
// of it but its path and its keep-alive matters, so the gate can answer it
// without civetweb. Anything else, malformed requests included, is nullopt
// and goes on to civetweb, which answers it as before. `head` is a whole
// head (RequestHeadLength bytes).
std::optional<ProbeRequest> ParseProbe(absl::string_view head);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_SERVER_REQUEST_HEAD_H_
