#include "runtime/server/request_head.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace verdict {

std::optional<size_t> RequestHeadLength(absl::string_view data) {
  for (size_t i = data.find('\n'); i != absl::string_view::npos; i = data.find('\n', i + 1)) {
    if (i + 1 < data.size() && data[i + 1] == '\n') return i + 2;
    if (i + 2 < data.size() && data[i + 1] == '\r' && data[i + 2] == '\n') return i + 3;
  }
  return std::nullopt;
}

std::optional<ProbeRequest> ParseProbe(absl::string_view head) {
  std::vector<absl::string_view> lines = absl::StrSplit(head, '\n');
  if (lines.empty()) return std::nullopt;
  for (absl::string_view& line : lines) absl::ConsumeSuffix(&line, "\r");
  std::vector<absl::string_view> request = absl::StrSplit(lines[0], ' ');
  if (request.size() != 3 || request[0] != "GET") return std::nullopt;
  const bool http11 = request[2] == "HTTP/1.1";
  if (!http11 && request[2] != "HTTP/1.0") return std::nullopt;
  absl::string_view path = request[1].substr(0, request[1].find('?'));
  if (path != "/health" && path != "/ready") return std::nullopt;
  ProbeRequest probe{std::string(path), http11};
  bool has_length = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    // Folded or nameless lines: civetweb's judgement, not the gate's.
    if (colon == absl::string_view::npos || colon == 0 || line[0] == ' ' || line[0] == '\t') {
      return std::nullopt;
    }
    absl::string_view name = line.substr(0, colon);
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    // A body, however framed, is civetweb's to read (and to refuse); one
    // "Content-Length: 0" says there is none, as many clients send.
    if (absl::EqualsIgnoreCase(name, "Content-Length")) {
      if (has_length || value != "0") return std::nullopt;
      has_length = true;
    }
    if (absl::EqualsIgnoreCase(name, "Transfer-Encoding")) return std::nullopt;
    if (absl::EqualsIgnoreCase(name, "Connection")) {
      for (absl::string_view option : absl::StrSplit(value, ',')) {
        if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(option), "close")) {
          probe.keep_alive = false;
        }
      }
    }
  }
  return probe;
}

}  // namespace verdict
