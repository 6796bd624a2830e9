#include "runtime/server/http_exchange.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "runtime/server/request_head.h"

namespace verdict {
namespace {

// Past civetweb's own limit on a request head (16 KiB), which it refuses.
constexpr size_t kMaxHead = size_t{32} << 10;
constexpr size_t kMaxChunkLine = 4096;
constexpr size_t kMaxTrailers = size_t{16} << 10;

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), absl::ascii_isdigit);
}

}  // namespace

size_t HttpMessageFramer::Feed(absl::string_view bytes, bool* ended, Message* message) {
  *ended = false;
  size_t i = 0;
  while (i < bytes.size() && !*ended && state_ != State::kLost) {
    switch (state_) {
      case State::kStart:
        if (bytes[i] == '\r' || bytes[i] == '\n') {
          // Empty lines before a request are allowed (and skipped by
          // civetweb); an answer starts with its status line.
          if (!requests_) {
            state_ = State::kLost;
          } else {
            ++i;
          }
          break;
        }
        head_.clear();
        head_scanned_ = 0;
        state_ = State::kHead;
        break;
      case State::kHead: {
        const size_t before = head_.size();
        const size_t take = std::min(bytes.size() - i, kMaxHead + 1 - before);
        head_.append(bytes.data() + i, take);
        // The end of the head ends at or past the bytes just added: its
        // first line feed is at most two bytes before them.
        const size_t from = head_scanned_ >= 2 ? head_scanned_ - 2 : 0;
        const std::optional<size_t> length =
            RequestHeadLength(absl::string_view(head_).substr(from));
        if (!length.has_value()) {
          if (head_.size() > kMaxHead) {
            state_ = State::kLost;
            std::string().swap(head_);
          }
          head_scanned_ = head_.size();
          i += take;
          break;
        }
        const size_t end = from + *length;
        head_.resize(end);
        i += end - before;
        TakeHead(message);
        // Only a long head's memory is given back.
        if (head_.capacity() > 4096) std::string().swap(head_);
        if (state_ == State::kStart) *ended = true;
        break;
      }
      case State::kBody:
      case State::kChunkData: {
        const size_t take =
            static_cast<size_t>(std::min<uint64_t>(remaining_, bytes.size() - i));
        i += take;
        remaining_ -= take;
        if (remaining_ > 0) break;
        if (state_ == State::kBody) {
          *message = pending_;
          *ended = true;
          state_ = State::kStart;
        } else {
          seen_cr_ = false;
          state_ = State::kChunkDataEnd;
        }
        break;
      }
      case State::kChunkDataEnd: {
        const char c = bytes[i++];
        if (c == '\r' && !seen_cr_) {
          seen_cr_ = true;
        } else if (c == '\n') {
          line_.clear();
          state_ = State::kChunkSize;
        } else {
          state_ = State::kLost;
        }
        break;
      }
      case State::kChunkSize:
      case State::kTrailer: {
        const char c = bytes[i++];
        if (c != '\n') {
          line_.push_back(c);
          if (line_.size() > kMaxChunkLine) state_ = State::kLost;
          if (state_ == State::kTrailer && ++trailer_bytes_ > kMaxTrailers) state_ = State::kLost;
          break;
        }
        if (!line_.empty() && line_.back() == '\r') line_.pop_back();
        if (state_ == State::kChunkSize) {
          TakeChunkSizeLine();
        } else if (line_.empty()) {
          *message = pending_;
          *ended = true;
          state_ = State::kStart;
        } else {
          line_.clear();  // a trailer field
        }
        break;
      }
      case State::kLost:
        break;
    }
  }
  return i;
}

void HttpMessageFramer::TakeHead(Message* message) {
  std::vector<absl::string_view> lines = absl::StrSplit(head_, '\n');
  for (absl::string_view& line : lines) absl::ConsumeSuffix(&line, "\r");
  state_ = State::kLost;
  bool http10 = false;
  int status = 0;
  if (requests_) {
    std::vector<absl::string_view> parts = absl::StrSplit(lines[0], ' ');
    if (parts.size() != 3 || parts[0].empty() || parts[1].empty()) return;
    // A HEAD's answer has a body or not depending on the server; a
    // CONNECT's is a tunnel.
    if (parts[0] == "HEAD" || parts[0] == "CONNECT") return;
    if (parts[2] == "HTTP/1.0") {
      http10 = true;
    } else if (parts[2] != "HTTP/1.1") {
      return;
    }
  } else {
    absl::string_view line = lines[0];
    if (absl::ConsumePrefix(&line, "HTTP/1.0 ")) {
      http10 = true;
    } else if (!absl::ConsumePrefix(&line, "HTTP/1.1 ")) {
      return;
    }
    if (line.size() < 3 || !AllDigits(line.substr(0, 3)) || (line.size() > 3 && line[3] != ' ')) {
      return;
    }
    status = (line[0] - '0') * 100 + (line[1] - '0') * 10 + (line[2] - '0');
    if (status < 100 || status == 101) return;  // 101: the connection is no longer HTTP
  }
  bool has_length = false, chunked = false, close = false, keep_alive = false;
  uint64_t length = 0;
  for (size_t n = 1; n < lines.size(); ++n) {
    absl::string_view line = lines[n];
    if (line.empty()) continue;
    if (line[0] == ' ' || line[0] == '\t') return;  // a folded line
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos || colon == 0) return;
    absl::string_view name = line.substr(0, colon);
    if (name.find_first_of(" \t") != absl::string_view::npos) return;
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (absl::EqualsIgnoreCase(name, "Content-Length")) {
      if (has_length || !AllDigits(value) || value.size() > 18 ||
          !absl::SimpleAtoi(value, &length)) {
        return;
      }
      has_length = true;
    } else if (absl::EqualsIgnoreCase(name, "Transfer-Encoding")) {
      if (chunked || !absl::EqualsIgnoreCase(value, "chunked")) return;
      chunked = true;
    } else if (absl::EqualsIgnoreCase(name, "Upgrade")) {
      return;
    } else if (absl::EqualsIgnoreCase(name, "Connection")) {
      for (absl::string_view option : absl::StrSplit(value, ',')) {
        option = absl::StripAsciiWhitespace(option);
        if (absl::EqualsIgnoreCase(option, "close")) close = true;
        if (absl::EqualsIgnoreCase(option, "keep-alive")) keep_alive = true;
        if (absl::EqualsIgnoreCase(option, "upgrade")) return;
      }
    }
  }
  if (has_length && chunked) return;
  pending_ = Message{close || (http10 && !keep_alive), status >= 100 && status < 200};
  *message = pending_;
  if (!requests_) {
    if (pending_.interim || status == 204 || status == 304) {
      state_ = State::kStart;
      return;
    }
    // Neither: the answer ends where the connection does.
    if (!has_length && !chunked) return;
  }
  if (chunked) {
    line_.clear();
    state_ = State::kChunkSize;
  } else if (length > 0) {
    remaining_ = length;
    state_ = State::kBody;
  } else {
    state_ = State::kStart;
  }
}

void HttpMessageFramer::TakeChunkSizeLine() {
  absl::string_view line = line_;
  const size_t digits = std::min(line.find_first_not_of("0123456789abcdefABCDEF"), line.size());
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(line.substr(digits));
  uint64_t size = 0;
  if (digits == 0 || digits > 15 || (!rest.empty() && rest[0] != ';') ||
      !absl::SimpleHexAtoi(line.substr(0, digits), &size)) {
    state_ = State::kLost;
    return;
  }
  line_.clear();
  if (size == 0) {
    trailer_bytes_ = 0;
    state_ = State::kTrailer;
  } else {
    remaining_ = size;
    state_ = State::kChunkData;
  }
}

void HttpExchange::FromClient(absl::string_view bytes) {
  while (!lost_ && !closing_ && !bytes.empty()) {
    bool ended = false;
    HttpMessageFramer::Message message;
    const size_t n = requests_.Feed(bytes, &ended, &message);
    bytes.remove_prefix(n);
    if (requests_.lost()) {
      lost_ = true;
      return;
    }
    if (!ended) continue;  // all of it consumed
    if (answered_early_) {
      answered_early_ = false;
    } else if (unanswered_.size() >= kMaxPipelined) {
      lost_ = true;
    } else {
      unanswered_.push_back(message.close);
    }
  }
}

void HttpExchange::FromUpstream(absl::string_view bytes) {
  while (!lost_ && !closing_ && !bytes.empty()) {
    bool ended = false;
    HttpMessageFramer::Message message;
    const size_t n = answers_.Feed(bytes, &ended, &message);
    bytes.remove_prefix(n);
    upstream_seen_ += n;
    if (answers_.lost()) {
      lost_ = true;
      return;
    }
    if (!ended || message.interim) continue;
    answered_through_ = upstream_seen_;
    bool close = message.close;
    if (!unanswered_.empty()) {
      close = close || unanswered_.front();
      unanswered_.pop_front();
    } else if (!requests_.at_start() && !answered_early_) {
      answered_early_ = true;
    } else if (!close) {
      lost_ = true;  // an answer to no request
      return;
    }
    if (close) closing_ = true;
  }
}

bool HttpExchange::idle() const {
  return !lost_ && unanswered_.empty() && !answered_early_ && requests_.at_start() &&
         answers_.at_start();
}

}  // namespace verdict
