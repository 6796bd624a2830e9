#include "runtime/bench/bench_http_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace verdict {
namespace {

// A connected socket that closes itself; reads and writes wait at most
// `timeout` for progress.
class Socket {
 public:
  Socket() = default;
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  absl::Status Connect(const HttpTarget& target, absl::Duration timeout) {
    timeout_ms_ = static_cast<int>(absl::ToInt64Milliseconds(timeout));
    addrinfo hints = {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string port = absl::StrCat(target.port);
    if (int rc = getaddrinfo(target.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot resolve ", target.host, ": ", gai_strerror(rc)));
    }
    std::string last_error = "no address";
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) continue;
      // A blocking connect bounded by SO_SNDTIMEO, which Linux applies to
      // connect as well.
      timeval tv = {timeout_ms_ / 1000, (timeout_ms_ % 1000) * 1000};
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        fd_ = fd;
        break;
      }
      last_error = std::strerror(errno);
      close(fd);
    }
    freeaddrinfo(found);
    if (fd_ < 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to ", target.host, ":", target.port, ": ", last_error));
    }
    return absl::OkStatus();
  }

  absl::Status WriteAll(absl::string_view data) {
    while (!data.empty()) {
      ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return absl::UnavailableError(absl::StrCat("send failed: ", std::strerror(errno)));
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

  // Appends what arrives to `out`; returns the byte count, 0 at the end of
  // the stream.
  absl::StatusOr<size_t> ReadSome(std::string* out) {
    pollfd p = {fd_, POLLIN, 0};
    int ready;
    do {
      ready = poll(&p, 1, timeout_ms_);
    } while (ready < 0 && errno == EINTR);
    if (ready == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("no response bytes for ", timeout_ms_ / 1000.0, " s"));
    }
    char buffer[16384];
    ssize_t n;
    do {
      n = recv(fd_, buffer, sizeof(buffer), 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return absl::UnavailableError(absl::StrCat("recv failed: ", std::strerror(errno)));
    out->append(buffer, static_cast<size_t>(n));
    return static_cast<size_t>(n);
  }

 private:
  int fd_ = -1;
  int timeout_ms_ = 60000;
};

absl::StatusOr<HttpResponseHead> ParseHead(absl::string_view head) {
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  HttpResponseHead out;
  std::vector<absl::string_view> status_line = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  if (status_line.size() < 2 || !absl::StartsWith(status_line[0], "HTTP/1.") ||
      !absl::SimpleAtoi(status_line[1], &out.status)) {
    return absl::DataLossError(absl::StrCat("not an HTTP/1.x status line: '", lines[0], "'"));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) continue;
    out.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  return out;
}

// Undoes chunked transfer encoding incrementally.
class ChunkDecoder {
 public:
  // Moves the decoded bytes of `buffer` to `out`, leaving an incomplete
  // chunk header or trailer in `buffer`. Returns true after the last chunk.
  absl::StatusOr<bool> Decode(std::string* buffer, std::string* out) {
    size_t pos = 0;
    while (true) {
      if (remaining_ > 0) {
        size_t take = std::min(remaining_, buffer->size() - pos);
        out->append(*buffer, pos, take);
        pos += take;
        remaining_ -= take;
        if (remaining_ > 0) break;
        after_data_ = true;
      }
      size_t eol = buffer->find("\r\n", pos);
      if (eol == std::string::npos) break;
      absl::string_view line(buffer->data() + pos, eol - pos);
      pos = eol + 2;
      if (after_data_) {  // the CRLF that ends a chunk's data
        after_data_ = false;
        if (!line.empty()) return absl::DataLossError("chunk data longer than its size");
        continue;
      }
      if (in_trailer_) {
        if (line.empty()) {
          buffer->erase(0, pos);
          return true;
        }
        continue;
      }
      line = line.substr(0, line.find(';'));  // chunk extensions
      uint64_t size = 0;
      if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(line), &size)) {
        return absl::DataLossError(absl::StrCat("bad chunk size line '", line, "'"));
      }
      if (size == 0) {
        in_trailer_ = true;
        continue;
      }
      remaining_ = size;
    }
    buffer->erase(0, pos);
    return false;
  }

 private:
  size_t remaining_ = 0;
  bool after_data_ = false;
  bool in_trailer_ = false;
};

}  // namespace

absl::StatusOr<HttpTarget> ParseHttpUrl(absl::string_view url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", url, "' is not an http:// URL (https is not supported)"));
  }
  HttpTarget target;
  size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  if (slash != absl::string_view::npos) {
    target.base_path = std::string(absl::StripSuffix(rest.substr(slash), "/"));
  }
  size_t colon = authority.rfind(':');
  if (colon != absl::string_view::npos && authority.find(']', colon) == absl::string_view::npos) {
    if (!absl::SimpleAtoi(authority.substr(colon + 1), &target.port) || target.port <= 0 ||
        target.port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("bad port in '", url, "'"));
    }
    authority = authority.substr(0, colon);
  }
  absl::ConsumePrefix(&authority, "[");
  absl::ConsumeSuffix(&authority, "]");
  if (authority.empty()) return absl::InvalidArgumentError(absl::StrCat("no host in '", url, "'"));
  target.host = std::string(authority);
  return target;
}

absl::Status SendHttpRequest(const HttpTarget& target, const HttpRequestSpec& request,
                             const HttpResponseHandler& handler) {
  Socket socket;
  if (absl::Status s = socket.Connect(target, request.timeout); !s.ok()) return s;
  std::string message = absl::StrCat(request.method, " ", target.base_path, request.path,
                                     " HTTP/1.1\r\nHost: ", target.host, ":", target.port,
                                     "\r\nConnection: close\r\n");
  if (!request.body.empty() || request.method == "POST") {
    absl::StrAppend(&message,
                    "Content-Type: application/json\r\nContent-Length: ", request.body.size(),
                    "\r\n");
  }
  for (const auto& [name, value] : request.headers) {
    absl::StrAppend(&message, name, ": ", value, "\r\n");
  }
  absl::StrAppend(&message, "\r\n", request.body);
  if (absl::Status s = socket.WriteAll(message); !s.ok()) return s;

  std::string buffer;
  size_t head_end;
  while ((head_end = buffer.find("\r\n\r\n")) == std::string::npos) {
    absl::StatusOr<size_t> n = socket.ReadSome(&buffer);
    if (!n.ok()) return n.status();
    if (*n == 0) return absl::DataLossError("the connection closed before the response head");
  }
  absl::StatusOr<HttpResponseHead> head = ParseHead(absl::string_view(buffer).substr(0, head_end));
  if (!head.ok()) return head.status();
  buffer.erase(0, head_end + 4);
  if (handler.on_head) handler.on_head(*head);

  const bool chunked =
      absl::StrContains(absl::AsciiStrToLower(head->headers["transfer-encoding"]), "chunked");
  int64_t content_left = -1;  // -1: until the connection closes
  if (!chunked && head->headers.count("content-length") &&
      !absl::SimpleAtoi(head->headers["content-length"], &content_left)) {
    return absl::DataLossError("bad Content-Length");
  }
  ChunkDecoder decoder;
  std::string piece;
  BenchClock::time_point at = BenchClock::now();
  while (true) {
    bool done = false;
    piece.clear();
    if (chunked) {
      absl::StatusOr<bool> last = decoder.Decode(&buffer, &piece);
      if (!last.ok()) return last.status();
      done = *last;
    } else {
      size_t take = content_left < 0 ? buffer.size()
                                     : std::min(buffer.size(), static_cast<size_t>(content_left));
      piece.assign(buffer, 0, take);
      buffer.erase(0, take);
      if (content_left >= 0) {
        content_left -= static_cast<int64_t>(take);
        done = content_left == 0;
      }
    }
    if (!piece.empty() && handler.on_body && !handler.on_body(piece, at)) return absl::OkStatus();
    if (done) return absl::OkStatus();
    absl::StatusOr<size_t> n = socket.ReadSome(&buffer);
    at = BenchClock::now();
    if (!n.ok()) return n.status();
    if (*n == 0) {
      if (content_left < 0 && !chunked) return absl::OkStatus();
      return absl::DataLossError("the connection closed in the middle of the response body");
    }
  }
}

absl::StatusOr<HttpResponse> FetchHttp(const HttpTarget& target, const HttpRequestSpec& request) {
  HttpResponse response;
  HttpResponseHandler handler;
  handler.on_head = [&](const HttpResponseHead& head) { response.status = head.status; };
  handler.on_body = [&](absl::string_view piece, BenchClock::time_point) {
    response.body.append(piece.data(), piece.size());
    return true;
  };
  if (absl::Status s = SendHttpRequest(target, request, handler); !s.ok()) return s;
  return response;
}

std::vector<std::string> SseParser::Feed(absl::string_view bytes) {
  std::vector<std::string> events;
  pending_.append(bytes.data(), bytes.size());
  size_t start = 0, eol;
  while ((eol = pending_.find('\n', start)) != std::string::npos) {
    absl::string_view line(pending_.data() + start, eol - start);
    start = eol + 1;
    absl::ConsumeSuffix(&line, "\r");
    if (line.empty()) {
      if (has_data_) events.push_back(std::move(data_));
      data_.clear();
      has_data_ = false;
      continue;
    }
    if (line[0] == ':') continue;  // a comment
    absl::string_view field = line.substr(0, line.find(':'));
    absl::string_view value =
        field.size() < line.size() ? line.substr(field.size() + 1) : absl::string_view();
    absl::ConsumePrefix(&value, " ");
    if (field != "data") continue;  // event, id and retry mean nothing here
    if (has_data_) data_ += '\n';
    data_.append(value.data(), value.size());
    has_data_ = true;
  }
  pending_.erase(0, start);
  return events;
}

}  // namespace verdict
