// Typed reads of tokenizer.json fields, each failure a Status naming the
// component and the field.
#ifndef VERDICT_RUNTIME_TEXT_JSON_FIELDS_H_
#define VERDICT_RUNTIME_TEXT_JSON_FIELDS_H_

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
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

}  // namespace verdict::hf

#endif  // VERDICT_RUNTIME_TEXT_JSON_FIELDS_H_
