// Typed reads of tokenizer.json fields, each failure a Status naming the
// component and the field.
#ifndef VERDICT_RUNTIME_TEXT_JSON_FIELDS_H_
#define VERDICT_RUNTIME_TEXT_JSON_FIELDS_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace verdict::hf {

// spec["type"]; `kind` ("normalizer", "decoder", ...) names it in errors.
absl::StatusOr<std::string> TypeOf(const nlohmann::json& spec, absl::string_view kind);

// A required string field.
absl::StatusOr<std::string> StringField(const nlohmann::json& spec, absl::string_view field,
                                        absl::string_view where);
// Optional fields: `fallback` when absent or null.
absl::StatusOr<bool> BoolField(const nlohmann::json& spec, absl::string_view field,
                               absl::string_view where, bool fallback);
absl::StatusOr<int64_t> IntField(const nlohmann::json& spec, absl::string_view field,
                                 absl::string_view where, int64_t fallback);
absl::StatusOr<std::string> OptionalStringField(const nlohmann::json& spec, absl::string_view field,
                                                absl::string_view where, std::string fallback);


// Where Metaspace puts its replacement character (the pre-tokenizer and the
// decoder read the same field).
enum class PrependScheme { kAlways, kFirst, kNever };

// `prepend_scheme`, or for files written before it existed,
// `add_prefix_space` (true: always).
absl::StatusOr<PrependScheme> PrependSchemeField(const nlohmann::json& spec,
                                                 absl::string_view where);

// The steps of a Sequence component: spec[field] must be a list, each entry
// parsed by `parse` (which may give nullptr for a step that does nothing).
template <typename T, typename Parse>
absl::StatusOr<std::vector<std::unique_ptr<T>>> SequenceSteps(const nlohmann::json& spec,
                                                             const std::string& field,
                                                             absl::string_view where,
                                                             Parse parse) {
  if (!spec.contains(field) || !spec[field].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"", field, "\" is not a list"));
  }
  std::vector<std::unique_ptr<T>> steps;
  for (const nlohmann::json& step : spec[field]) {
    absl::StatusOr<std::unique_ptr<T>> parsed = parse(step);
    if (!parsed.ok()) return parsed.status();
    if (*parsed != nullptr) steps.push_back(*std::move(parsed));
  }
  return steps;
}

}  // namespace verdict::hf

#endif  // VERDICT_RUNTIME_TEXT_JSON_FIELDS_H_
