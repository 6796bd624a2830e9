// Checked reads of numbers from parsed JSON input.
//
// nlohmann's get<int32_t>() converts whatever number it finds: 2^32 + 1
// becomes 1, -1 read as unsigned becomes 2^64 - 1, 1.5 becomes 1 and 1e30 is
// undefined behaviour. Every parser of outside input (case files, step files,
// cost tables, config.json, safetensors headers, prompt files) reads its
// numbers through these functions instead, so that a value that does not fit
// its field is refused with an error that names the field and the range.
//
// Integer fields take JSON integers only: a float is refused even when its
// value is integral (1.0), as the OpenAI API does, so that a file that was
// written by something computing in floating point is noticed rather than
// rounded. Booleans, strings and null are never numbers.
//
// Errors are InvalidArgument with the message "PATH: expected ..., got
// VALUE". PATH is the caller's name for the field, a JSON path such as
// "requests[2].draft_token_ids[0]"; with an empty PATH the message is only
// "expected ..., got VALUE", for callers that format the field themselves.
#ifndef VERDICT_RUNTIME_BASE_JSON_NUMBER_H_
#define VERDICT_RUNTIME_BASE_JSON_NUMBER_H_

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace verdict {

// A JSON integer in [min, max] (signed or stored as unsigned 64-bit).
absl::StatusOr<int64_t> JsonInteger(const nlohmann::json& v, absl::string_view path, int64_t min,
                                    int64_t max);

// A JSON integer in [min, max] for unsigned fields, whose range may reach
// past INT64_MAX; negative integers are refused.
absl::StatusOr<uint64_t> JsonUnsigned(const nlohmann::json& v, absl::string_view path, uint64_t min,
                                      uint64_t max);

// A JSON integer that fits T, or [min, max] within T when given.
template <typename T>
absl::StatusOr<T> JsonIntegerAs(const nlohmann::json& v, absl::string_view path,
                                T min = std::numeric_limits<T>::min(),
                                T max = std::numeric_limits<T>::max()) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool> && sizeof(T) <= 8,
                "JsonIntegerAs reads integer fields of at most 64 bits");
  if constexpr (std::is_unsigned_v<T>) {
    absl::StatusOr<uint64_t> value = JsonUnsigned(v, path, min, max);
    if (!value.ok()) return value.status();
    return static_cast<T>(*value);
  } else {
    absl::StatusOr<int64_t> value = JsonInteger(v, path, min, max);
    if (!value.ok()) return value.status();
    return static_cast<T>(*value);
  }
}

// A finite JSON number (integer or float). JSON cannot spell NaN or Inf,
// but a literal such as 1e400 overflows to Inf where a parser accepts it,
// and values built in code can hold either.
absl::StatusOr<double> JsonFiniteNumber(const nlohmann::json& v, absl::string_view path);

// A JSON number that is finite as a float too: 1e39 is a finite double but
// an infinite float.
absl::StatusOr<float> JsonFiniteFloat(const nlohmann::json& v, absl::string_view path);

// The value as JSON, cut to a length that fits an error message (a field
// can hold a whole row of logits).
std::string JsonForMessage(const nlohmann::json& v);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_BASE_JSON_NUMBER_H_
