#include "scheduler/stop_checker.h"

#include <algorithm>

namespace verdict {
namespace {

bool Contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

StopChecker::StopChecker(StopConditions conditions) : conditions_(std::move(conditions)) {
  // An empty stop string would match everywhere; it means nothing.
  auto& stops = conditions_.stop_strings;
  stops.erase(std::remove(stops.begin(), stops.end(), std::string()), stops.end());
  for (const std::string& s : stops) max_stop_length_ = std::max(max_stop_length_, s.size());
}

StopReason StopChecker::Append(int32_t token_id, const std::string& text_delta) {
  if (reason_ != StopReason::kNone) return reason_;
  ++num_tokens_;
  if (!conditions_.ignore_eos && Contains(conditions_.eos_token_ids, token_id)) {
    reason_ = StopReason::kEos;
  } else if (Contains(conditions_.stop_token_ids, token_id)) {
    reason_ = StopReason::kStopToken;
  } else {
    AppendText(text_delta);
  }
  if (reason_ == StopReason::kNone && num_tokens_ >= conditions_.max_tokens) {
    reason_ = StopReason::kLength;
  }
  return reason_;
}

void StopChecker::AppendFinalText(const std::string& text) {
  if (reason_ == StopReason::kStopString) return;
  AppendText(text);
}

void StopChecker::AppendText(const std::string& text) {
  // Only a match that ends inside the new text can be new: search from
  // max_stop_length_ - 1 bytes before it.
  const size_t old_size = text_.size();
  text_ += text;
  const size_t from = old_size >= max_stop_length_ ? old_size - max_stop_length_ + 1 : 0;
  size_t first_match = std::string::npos;
  for (const std::string& stop : conditions_.stop_strings) {
    const size_t at = text_.find(stop, from);
    if (at != std::string::npos) first_match = std::min(first_match, at);
  }
  if (first_match != std::string::npos) {
    text_.resize(std::max(first_match, emitted_));
    reason_ = StopReason::kStopString;
  }
}

size_t StopChecker::HeldBackLength() const {
  size_t held = 0;
  for (const std::string& stop : conditions_.stop_strings) {
    const size_t longest = std::min(stop.size() - 1, text_.size() - emitted_);
    for (size_t len = longest; len > held; --len) {
      if (text_.compare(text_.size() - len, len, stop, 0, len) == 0) {
        held = len;
        break;
      }
    }
  }
  return held;
}

std::string StopChecker::TakeEmittableText() {
  const size_t end = reason_ == StopReason::kNone ? text_.size() - HeldBackLength() : text_.size();
  if (end <= emitted_) return std::string();
  std::string out = text_.substr(emitted_, end - emitted_);
  emitted_ = end;
  return out;
}

const char* StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kNone:
      return "none";
    case StopReason::kEos:
      return "eos";
    case StopReason::kStopToken:
      return "stop_token";
    case StopReason::kStopString:
      return "stop_string";
    case StopReason::kLength:
      return "length";
  }
  return "unknown";
}

}  // namespace verdict
