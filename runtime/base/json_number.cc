#include "runtime/base/json_number.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace verdict {
namespace {

constexpr size_t kMaxValueChars = 40;

absl::Status Refuse(absl::string_view path, absl::string_view expected, const nlohmann::json& v) {
  return absl::InvalidArgumentError(absl::StrCat(path, path.empty() ? "" : ": ", "expected ",
                                                 expected, ", got ", JsonForMessage(v)));
}

}  // namespace

std::string JsonForMessage(const nlohmann::json& v) {
  std::string text = v.dump();
  if (text.size() > kMaxValueChars) {
    text.resize(kMaxValueChars);
    text += "...";
  }
  return text;
}

absl::StatusOr<int64_t> JsonInteger(const nlohmann::json& v, absl::string_view path, int64_t min,
                                    int64_t max) {
  // nlohmann keeps non-negative literals as unsigned 64-bit and negative ones
  // as signed; each is compared in its own type, so no value is converted
  // (and wrapped) before it is known to fit.
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (max >= 0 && u <= static_cast<uint64_t>(max) &&
        (min <= 0 || u >= static_cast<uint64_t>(min))) {
      return static_cast<int64_t>(u);
    }
  } else if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (s >= min && s <= max) return s;
  }
  return Refuse(path, absl::StrCat("an integer in [", min, ", ", max, "]"), v);
}

absl::StatusOr<uint64_t> JsonUnsigned(const nlohmann::json& v, absl::string_view path, uint64_t min,
                                      uint64_t max) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u >= min && u <= max) return u;
  } else if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (s >= 0 && static_cast<uint64_t>(s) >= min && static_cast<uint64_t>(s) <= max) {
      return static_cast<uint64_t>(s);
    }
  }
  return Refuse(path, absl::StrCat("an integer in [", min, ", ", max, "]"), v);
}

absl::StatusOr<double> JsonFiniteNumber(const nlohmann::json& v, absl::string_view path) {
  if (v.is_number()) {
    const double d = v.get<double>();
    if (std::isfinite(d)) return d;
  }
  return Refuse(path, "a finite number", v);
}

absl::StatusOr<float> JsonFiniteFloat(const nlohmann::json& v, absl::string_view path) {
  if (v.is_number()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::fabs(d) <= std::numeric_limits<float>::max()) {
      return static_cast<float>(d);
    }
  }
  return Refuse(path, absl::StrCat("a finite number within +-", std::numeric_limits<float>::max()),
                v);
}

}  // namespace verdict
