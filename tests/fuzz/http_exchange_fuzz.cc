// The connection gate's framing of the bytes it relays
// (runtime/server/http_exchange.h): a client's requests and civetweb's
// answers, as a hostile client or a confused upstream could send them.
//
// Input: one byte says where the client's bytes end (as a share of the
// rest), then the client's bytes, then civetweb's. Each side goes in
// whole to one exchange, and in pieces of the sizes the input's own bytes
// give to another, alternating sides: both must agree, and an exchange
// never claims more answered bytes than it was given.
#include <cstddef>
#include <cstdint>
#include <algorithm>

#include "absl/strings/string_view.h"
#include "runtime/server/http_exchange.h"

namespace {

struct State {
  bool lost, idle, closing;
  uint64_t through;
  bool operator==(const State&) const = default;
};

State Of(const verdict::HttpExchange& e) {
  return {e.lost(), e.idle(), e.closing(), e.answered_through()};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = rest.size() * data[0] / 255;
  const absl::string_view client = rest.substr(0, split);
  const absl::string_view upstream = rest.substr(split);

  verdict::HttpExchange whole;
  whole.FromClient(client);
  whole.FromUpstream(upstream);

  // Pieces of 1 to 16 bytes, their sizes taken from the bytes themselves,
  // the two sides interleaved (the client's first, as the gate sees them).
  verdict::HttpExchange pieces;
  size_t c = 0, u = 0;
  while (c < client.size() || u < upstream.size()) {
    if (c < client.size()) {
      const size_t n = std::min<size_t>(client.size() - c, 1 + (client[c] & 15));
      pieces.FromClient(client.substr(c, n));
      c += n;
    } else {
      const size_t n = std::min<size_t>(upstream.size() - u, 1 + (upstream[u] & 15));
      pieces.FromUpstream(upstream.substr(u, n));
      u += n;
    }
  }
  if (!(Of(whole) == Of(pieces))) __builtin_trap();
  if (whole.answered_through() > upstream.size()) __builtin_trap();
  return 0;
}
