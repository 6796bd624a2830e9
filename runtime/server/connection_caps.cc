#include "runtime/server/connection_caps.h"

namespace verdict {

ConnectionCaps::Verdict ConnectionCaps::TryAdmit(absl::string_view address) {
  if (max_total_ > 0 && total_ >= max_total_) return Verdict::kTotalFull;
  auto it = per_address_.find(address);
  const int open = it == per_address_.end() ? 0 : it->second;
  if (max_per_address_ > 0 && open >= max_per_address_) return Verdict::kAddressFull;
  if (it == per_address_.end()) {
    per_address_.emplace(std::string(address), 1);
  } else {
    ++it->second;
  }
  ++total_;
  return Verdict::kAdmitted;
}

void ConnectionCaps::Release(absl::string_view address) {
  auto it = per_address_.find(address);
  if (it == per_address_.end()) return;
  if (--it->second == 0) per_address_.erase(it);
  --total_;
}

int ConnectionCaps::from(absl::string_view address) const {
  auto it = per_address_.find(address);
  return it == per_address_.end() ? 0 : it->second;
}

}  // namespace verdict
