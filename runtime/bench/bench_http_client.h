// A small blocking HTTP/1.1 client for `verdict bench`: one request per
// connection, the body handed over piece by piece as it arrives (de-chunked)
// with the time each piece was read, and a parser for the server-sent events
// of a streaming completion. Written on raw sockets so that every timestamp
// is taken right where the bytes come off the socket.
#ifndef VERDICT_RUNTIME_BENCH_BENCH_HTTP_CLIENT_H_
#define VERDICT_RUNTIME_BENCH_BENCH_HTTP_CLIENT_H_

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace verdict {

using BenchClock = std::chrono::steady_clock;

// Where requests go: "http://host:port" with an optional path prefix, which
// paths are appended to ("http://h:8000/v1" + "/completions").
struct HttpTarget {
  std::string host;
  int port = 80;
  std::string base_path;  // "" or "/v1" (no trailing slash)
};

// Parses "http://host[:port][/path]"; https is not supported.
absl::StatusOr<HttpTarget> ParseHttpUrl(absl::string_view url);

struct HttpRequestSpec {
  std::string method = "GET";
  std::string path;  // appended to the target's base_path
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  absl::Duration timeout = absl::Seconds(60);  // each connect, read and write
};

struct HttpResponseHead {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
};

// Receives the response: the head once, then the body in pieces, each with
// the time its bytes were read. Returning false from on_body closes the
// connection early (the server sees a client that went away).
struct HttpResponseHandler {
  std::function<void(const HttpResponseHead&)> on_head;
  std::function<bool(absl::string_view piece, BenchClock::time_point at)> on_body;
};

// Sends one request and reads the whole response into the handler.
// Errors: the connection fails or times out (Unavailable, DeadlineExceeded),
// or the response is not HTTP/1.x (DataLoss).
absl::Status SendHttpRequest(const HttpTarget& target, const HttpRequestSpec& request,
                             const HttpResponseHandler& handler);

struct HttpResponse {
  int status = 0;
  std::string body;
};

// A request whose whole body is wanted at once (/health, /metrics).
absl::StatusOr<HttpResponse> FetchHttp(const HttpTarget& target, const HttpRequestSpec& request);

// Splits a server-sent event stream into the `data` of each event: events
// end at a blank line, comments (": keep-alive") are skipped, and the data
// lines of one event are joined with newlines. Accepts \n and \r\n.
class SseParser {
 public:
  // Feeds bytes; returns the data of every event completed by them.
  std::vector<std::string> Feed(absl::string_view bytes);

 private:
  std::string pending_;  // bytes of the current, unfinished line
  std::string data_;     // data lines of the current event so far
  bool has_data_ = false;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_BENCH_BENCH_HTTP_CLIENT_H_
