// Caps on the connections a server holds open: per client address and in
// all. A client that opens connections without end would otherwise take
// every file descriptor and every worker thread; with the caps it is told
// to wait (429 or 503) while the others go on being served.
#ifndef VERDICT_RUNTIME_SERVER_CONNECTION_CAPS_H_
#define VERDICT_RUNTIME_SERVER_CONNECTION_CAPS_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace verdict {

// Not thread-safe: the one thread that accepts connections owns it.
class ConnectionCaps {
 public:
  enum class Verdict { kAdmitted, kAddressFull, kTotalFull };

  // 0 for either cap: no cap.
  ConnectionCaps(int max_total, int max_per_address)
      : max_total_(max_total), max_per_address_(max_per_address) {}

  // Counts one more connection from `address` unless a cap is reached.
  // The total cap is checked first: a full server refuses every client.
  Verdict TryAdmit(absl::string_view address);
  // Uncounts one admitted connection from `address`.
  void Release(absl::string_view address);

  int total() const { return total_; }
  int from(absl::string_view address) const;

 private:
  const int max_total_;
  const int max_per_address_;
  int total_ = 0;
  // Only addresses with open connections, so the map stays as small as
  // the number of connections.
  absl::flat_hash_map<std::string, int> per_address_;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_SERVER_CONNECTION_CAPS_H_
