#include "runtime/text/json_fields.h"

#include "absl/strings/str_cat.h"

namespace verdict::hf {

using nlohmann::json;

absl::StatusOr<std::string> TypeOf(const json& spec, absl::string_view kind) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(kind, ": expected an object with a \"type\""));
  }
  return spec["type"].get<std::string>();
}

absl::StatusOr<std::string> StringField(const json& spec, absl::string_view field,
                                        absl::string_view where) {
  const std::string key(field);
  if (!spec.contains(key) || !spec[key].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"", field, "\" is not a string"));
  }
  return spec[key].get<std::string>();
}

absl::StatusOr<bool> BoolField(const json& spec, absl::string_view field, absl::string_view where,
                               bool fallback) {
  const std::string key(field);
  if (!spec.contains(key) || spec[key].is_null()) return fallback;
  if (!spec[key].is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"", field, "\" is not a boolean"));
  }
  return spec[key].get<bool>();
}

absl::StatusOr<int64_t> IntField(const json& spec, absl::string_view field, absl::string_view where,
                                 int64_t fallback) {
  const std::string key(field);
  if (!spec.contains(key) || spec[key].is_null()) return fallback;
  if (!spec[key].is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"", field, "\" is not an integer"));
  }
  return spec[key].get<int64_t>();
}

absl::StatusOr<std::string> OptionalStringField(const json& spec, absl::string_view field,
                                                absl::string_view where, std::string fallback) {
  const std::string key(field);
  if (!spec.contains(key) || spec[key].is_null()) return fallback;
  if (!spec[key].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"", field, "\" is not a string"));
  }
  return spec[key].get<std::string>();
}

absl::StatusOr<PrependScheme> PrependSchemeField(const json& spec, absl::string_view where) {
  if (!spec.contains("prepend_scheme") || spec["prepend_scheme"].is_null()) {
    absl::StatusOr<bool> prefix = BoolField(spec, "add_prefix_space", where, true);
    if (!prefix.ok()) return prefix.status();
    return *prefix ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  absl::StatusOr<std::string> name = StringField(spec, "prepend_scheme", where);
  if (!name.ok()) return name.status();
  if (*name == "always") return PrependScheme::kAlways;
  if (*name == "first") return PrependScheme::kFirst;
  if (*name == "never") return PrependScheme::kNever;
  return absl::InvalidArgumentError(absl::StrCat(where, ": unknown prepend_scheme \"", *name, "\""));
}

}  // namespace verdict::hf
