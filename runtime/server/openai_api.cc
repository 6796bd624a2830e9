#include "runtime/server/openai_api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace verdict {
namespace {

using json = nlohmann::json;

constexpr char kParamPayload[] = "verdict.dev/openai/param";
constexpr char kCodePayload[] = "verdict.dev/openai/code";

// Model output may split a UTF-8 sequence across tokens; replace rather than
// fail when such text reaches a JSON string.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string Sse(const json& j) { return absl::StrCat("data: ", Dump(j), "\n\n"); }

const char* ErrorType(int http_status) {
  if (http_status == 401) return "authentication_error";
  if (http_status == 429) return "rate_limit_error";
  if (http_status >= 500) return "server_error";
  return "invalid_request_error";
}

json ErrorObject(int http_status, absl::string_view message, absl::string_view param,
                 absl::string_view error_code) {
  json error = {{"message", std::string(message)},
                {"type", ErrorType(http_status)},
                {"param", nullptr},
                {"code", nullptr}};
  if (!param.empty()) error["param"] = std::string(param);
  if (!error_code.empty()) error["code"] = std::string(error_code);
  return {{"error", std::move(error)}};
}

json ErrorObject(const absl::Status& status) {
  auto param = status.GetPayload(kParamPayload);
  auto code = status.GetPayload(kCodePayload);
  return ErrorObject(HttpStatusFor(status), status.message(),
                     param ? std::string(*param) : std::string(),
                     code ? std::string(*code) : std::string());
}

absl::Status Invalid(absl::string_view param, absl::string_view message,
                     absl::string_view error_code = "") {
  return ApiError(absl::StatusCode::kInvalidArgument, message, param, error_code);
}

// How a value appears in an error message: scalars as written, containers
// by kind, long text cut short.
std::string Describe(const json& v) {
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  std::string text = Dump(v);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

absl::Status TypeError(absl::string_view param, absl::string_view expected, const json& v) {
  return Invalid(param, absl::StrCat("'", param, "' must be ", expected, ", got ", Describe(v)));
}

// The request object's fields. Every field the parser asks for counts as
// known; the rest are reported as ignored.
class Fields {
 public:
  Fields(const json& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {}

  // The value, or nullptr when the field is absent or null.
  const json* Get(const char* name) {
    asked_.insert(name);
    auto it = object_.find(name);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  void AppendUnknown(std::vector<std::string>* out) const {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      if (!asked_.count(it.key())) out->push_back(prefix_ + it.key());
    }
  }

 private:
  const json& object_;
  std::string prefix_;
  std::set<std::string> asked_;
};

absl::Status ReadBool(const json* v, const char* param, bool* out) {
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return TypeError(param, "a boolean", *v);
  *out = v->get<bool>();
  return absl::OkStatus();
}

// Integers only (1.0 is not an integer, as in OpenAI's API); [lo, hi].
absl::Status ReadInt(const json* v, const char* param, int64_t lo, int64_t hi, int64_t* out) {
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number_integer()) return TypeError(param, "an integer", *v);
  bool too_big = v->is_number_unsigned() &&
                 v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  int64_t value = too_big ? std::numeric_limits<int64_t>::max() : v->get<int64_t>();
  if (too_big || value < lo || value > hi) {
    return Invalid(param, absl::StrCat("'", param, "' must be between ", lo, " and ", hi,
                                       ", got ", Describe(*v)));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ReadInt(const json* v, const char* param, int64_t lo, int64_t hi, int* out) {
  int64_t value = *out;
  absl::Status s = ReadInt(v, param, lo, hi, &value);
  *out = static_cast<int>(value);
  return s;
}

// A number in [lo, hi], or (lo, hi] when lo_open.
absl::Status ReadNumber(const json* v, const char* param, double lo, double hi, bool lo_open,
                        float* out) {
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return TypeError(param, "a number", *v);
  double value = v->get<double>();
  bool below = lo_open ? !(value > lo) : !(value >= lo);
  if (below || !(value <= hi)) {
    std::string range = lo_open ? absl::StrCat("greater than ", lo, " and at most ", hi)
                                : absl::StrCat("between ", lo, " and ", hi);
    return Invalid(param, absl::StrCat("'", param, "' must be ", range, ", got ", Describe(*v)));
  }
  *out = static_cast<float>(value);
  return absl::OkStatus();
}

absl::Status ReadTokenId(const json& v, const std::string& param, int vocab_size, int32_t* out) {
  if (!v.is_number_integer()) return TypeError(param, "a token id (integer)", v);
  if (v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(vocab_size)
                             : (v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab_size)) {
    return Invalid(param, absl::StrCat("'", param, "' is token id ", Describe(v),
                                       ", outside the vocabulary [0, ", vocab_size, ")"));
  }
  *out = v.get<int32_t>();
  return absl::OkStatus();
}

// OpenAI parameters verdict does not implement, accepted at their default.
struct Unsupported {
  const char* name;
  const char* required;  // the accepted value, for the error message
  bool (*is_default)(const json&);
};

bool IsOne(const json& v) { return v.is_number_integer() && v.get<int64_t>() == 1; }
bool IsFalse(const json& v) { return v.is_boolean() && !v.get<bool>(); }
bool IsZero(const json& v) { return v.is_number() && v.get<double>() == 0.0; }
bool IsEmptyObject(const json& v) { return v.is_object() && v.empty(); }
bool IsEmptyArray(const json& v) { return v.is_array() && v.empty(); }
bool IsEmptyString(const json& v) { return v.is_string() && v.get<std::string>().empty(); }
bool IsNone(const json& v) { return v.is_string() && v.get<std::string>() == "none"; }
bool IsNever(const json&) { return false; }
bool IsTextFormat(const json& v) {
  return v.is_object() && v.size() == 1 && v.contains("type") && v["type"] == "text";
}
bool IsTextModality(const json& v) { return v == json::array({"text"}); }

constexpr Unsupported kCommonUnsupported[] = {
    {"n", "1", &IsOne},
    {"presence_penalty", "0", &IsZero},
    {"frequency_penalty", "0", &IsZero},
    {"logit_bias", "{}", &IsEmptyObject},
};
constexpr Unsupported kCompletionUnsupported[] = {
    {"best_of", "1", &IsOne},
    {"echo", "false", &IsFalse},
    {"suffix", "null", &IsEmptyString},
};
constexpr Unsupported kChatUnsupported[] = {
    {"tools", "[]", &IsEmptyArray},
    {"tool_choice", "\"none\"", &IsNone},
    {"functions", "[]", &IsEmptyArray},
    {"function_call", "\"none\"", &IsNone},
    {"response_format", "{\"type\": \"text\"}", &IsTextFormat},
    {"modalities", "[\"text\"]", &IsTextModality},
    {"audio", "null", &IsNever},
    {"prediction", "null", &IsNever},
    {"reasoning_effort", "null", &IsNever},
    {"web_search_options", "null", &IsNever},
    {"store", "false", &IsFalse},
};

template <size_t N>
absl::Status CheckUnsupported(Fields& fields, const Unsupported (&table)[N]) {
  for (const Unsupported& u : table) {
    const json* v = fields.Get(u.name);
    if (v != nullptr && !u.is_default(*v)) {
      return Invalid(u.name, absl::StrCat("'", u.name, "' is not supported by verdict; it must be ",
                                          u.required, " or absent, got ", Describe(*v)),
                     "unsupported_parameter");
    }
  }
  return absl::OkStatus();
}

// Known fields that change nothing here; checked for type only.
absl::Status CheckIgnored(Fields& fields, bool chat) {
  if (const json* v = fields.Get("user"); v != nullptr && !v->is_string()) {
    return TypeError("user", "a string", *v);
  }
  if (!chat) return absl::OkStatus();
  if (const json* v = fields.Get("parallel_tool_calls"); v != nullptr && !v->is_boolean()) {
    return TypeError("parallel_tool_calls", "a boolean", *v);
  }
  if (const json* v = fields.Get("service_tier"); v != nullptr && !v->is_string()) {
    return TypeError("service_tier", "a string", *v);
  }
  if (const json* v = fields.Get("metadata"); v != nullptr && !v->is_object()) {
    return TypeError("metadata", "an object", *v);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> ParsePrompt(const json* v, const Tokenizer& tokenizer) {
  if (v == nullptr) return Invalid("prompt", "'prompt' is required");
  auto token_ids = [&](const json& list, const std::string& param)
      -> absl::StatusOr<std::vector<int32_t>> {
    std::vector<int32_t> ids(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      absl::Status s =
          ReadTokenId(list[i], absl::StrCat(param, "[", i, "]"), tokenizer.vocab_size(), &ids[i]);
      if (!s.ok()) return s;
    }
    return ids;
  };
  const json* single = v;
  std::string param = "prompt";
  if (v->is_array() && !v->empty() && !(*v)[0].is_number()) {
    // A list of prompts: OpenAI's batch form, accepted with one entry.
    if (v->size() > 1) {
      return Invalid("prompt", absl::StrCat("'prompt' holds ", v->size(),
                                            " prompts; verdict serves one prompt per request"));
    }
    single = &(*v)[0];
    param = "prompt[0]";
  }
  std::vector<int32_t> ids;
  if (single->is_string()) {
    absl::StatusOr<std::vector<int32_t>> encoded =
        tokenizer.Encode(single->get<std::string>(), /*add_bos=*/true);
    if (!encoded.ok()) {
      return Invalid(param, absl::StrCat("'", param,
                                         "' could not be tokenized: ", encoded.status().message()));
    }
    ids = *std::move(encoded);
  } else if (single->is_array()) {
    absl::StatusOr<std::vector<int32_t>> listed = token_ids(*single, param);
    if (!listed.ok()) return listed.status();
    ids = *std::move(listed);
  } else {
    return TypeError(param, "a string or a list of token ids", *single);
  }
  if (ids.empty()) return Invalid(param, absl::StrCat("'", param, "' must not be empty"));
  return ids;
}

absl::StatusOr<std::vector<ChatMessage>> ParseMessages(const json* v) {
  if (v == nullptr) return Invalid("messages", "'messages' is required");
  if (!v->is_array()) return TypeError("messages", "an array of messages", *v);
  if (v->empty()) return Invalid("messages", "'messages' must not be empty");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    std::string at = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return TypeError(at, "an object", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return Invalid(at + ".role", absl::StrCat("'", at, ".role' must be a string"));
    }
    ChatMessage message{role->get<std::string>(), ""};
    if (message.role == "developer") message.role = "system";
    if (message.role != "system" && message.role != "user" && message.role != "assistant") {
      return Invalid(at + ".role",
                     absl::StrCat("'", at, ".role' is '", message.role,
                                  "'; verdict supports system, developer, user and assistant"),
                     "unsupported_parameter");
    }
    if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null() &&
                                           !(calls->is_array() && calls->empty())) {
      return Invalid(at + ".tool_calls", "tool calls are not supported by verdict",
                     "unsupported_parameter");
    }
    auto content = m.find("content");
    std::string content_param = at + ".content";
    if (content == m.end() || content->is_null()) {
      if (message.role != "assistant") {
        return Invalid(content_param, absl::StrCat("'", content_param, "' is required"));
      }
    } else if (content->is_string()) {
      message.content = content->get<std::string>();
    } else if (content->is_array()) {
      std::vector<std::string> texts;
      for (size_t k = 0; k < content->size(); ++k) {
        const json& part = (*content)[k];
        std::string part_param = absl::StrCat(content_param, "[", k, "]");
        auto type = part.is_object() ? part.find("type") : part.end();
        if (!part.is_object() || type == part.end() || !type->is_string()) {
          return Invalid(part_param, absl::StrCat("'", part_param,
                                                  "' must be an object with a string 'type'"));
        }
        if (*type != "text") {
          return Invalid(part_param + ".type",
                         absl::StrCat("content parts of type ", Describe(*type),
                                      " are not supported by verdict; only \"text\""),
                         "unsupported_parameter");
        }
        auto text = part.find("text");
        if (text == part.end() || !text->is_string()) {
          return Invalid(part_param + ".text",
                         absl::StrCat("'", part_param, ".text' must be a string"));
        }
        texts.push_back(text->get<std::string>());
      }
      message.content = absl::StrJoin(texts, "\n");
    } else {
      return TypeError(content_param, "a string or an array of content parts", *content);
    }
    messages.push_back(std::move(message));
  }
  return messages;
}

// Template variables the request itself sets; chat_template_kwargs may not.
constexpr const char* kTemplateOwnVariables[] = {"messages", "tools", "documents",
                                                 "add_generation_prompt"};

// The chat template arguments: add_generation_prompt, continue_final_message
// and chat_template_kwargs.
absl::StatusOr<ChatRenderOptions> ParseChatOptions(Fields& fields) {
  ChatRenderOptions options;
  const json* generation_prompt = fields.Get("add_generation_prompt");
  absl::Status s =
      ReadBool(generation_prompt, "add_generation_prompt", &options.add_generation_prompt);
  if (!s.ok()) return s;
  if (s = ReadBool(fields.Get("continue_final_message"), "continue_final_message",
                   &options.continue_final_message);
      !s.ok()) {
    return s;
  }
  if (options.continue_final_message) {
    // The generation prompt would open a new turn after the message that is
    // to be continued; only an explicit request for both is an error.
    if (generation_prompt != nullptr && options.add_generation_prompt) {
      return Invalid("continue_final_message",
                     "'continue_final_message' and 'add_generation_prompt' cannot both be true: "
                     "the first continues the final message, the second opens a new turn");
    }
    options.add_generation_prompt = false;
  }
  if (const json* v = fields.Get("chat_template_kwargs")) {
    if (!v->is_object()) return TypeError("chat_template_kwargs", "an object", *v);
    for (const char* name : kTemplateOwnVariables) {
      if (v->contains(name)) {
        const std::string param = absl::StrCat("chat_template_kwargs.", name);
        return Invalid(param, absl::StrCat("'", param, "' is set by the request itself, not by "
                                           "chat_template_kwargs"));
      }
    }
    options.kwargs = nlohmann::ordered_json(*v);
  }
  return options;
}

// The ids of a conversation's prompt. With add_special_tokens, the ids the
// engine generates from: where the tokenizer adds BOS (`encode_adds_bos`), a
// BOS the template writes as text gives way to it, so there is one BOS
// either way. Without, the rendered text alone.
absl::StatusOr<std::vector<int32_t>> ChatPromptIds(const ChatTemplate& chat_template,
                                                   const Tokenizer& tokenizer,
                                                   const std::vector<ChatMessage>& messages,
                                                   const ChatRenderOptions& options,
                                                   bool add_special_tokens, bool encode_adds_bos) {
  absl::StatusOr<std::string> prompt = chat_template.Render(messages, options);
  if (!prompt.ok()) return Invalid("messages", prompt.status().message());
  // A checkpoint's template may write BOS itself (transformers then encodes
  // without adding one); where the tokenizer adds it here, the text's copy
  // goes. Where it adds none, the text's BOS is the only one and stays
  // (SmolLM2's BOS is <|im_start|>, which its ChatML template writes).
  const std::string& bos = chat_template.bos_token();
  if (add_special_tokens && encode_adds_bos && chat_template.has_template() && !bos.empty() &&
      absl::StartsWith(*prompt, bos)) {
    prompt->erase(0, bos.size());
  }
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(*prompt, add_special_tokens);
  if (!ids.ok()) {
    return Invalid("messages",
                   absl::StrCat("'messages' could not be tokenized: ", ids.status().message()));
  }
  return ids;
}

absl::Status ParseStop(const json* v, std::vector<std::string>* out) {
  if (v == nullptr) return absl::OkStatus();
  if (v->is_string()) {
    if (v->get<std::string>().empty()) return Invalid("stop", "'stop' must not be an empty string");
    out->push_back(v->get<std::string>());
    return absl::OkStatus();
  }
  if (!v->is_array()) return TypeError("stop", "a string or an array of strings", *v);
  if (v->size() > kMaxStopStrings) {
    return Invalid("stop", absl::StrCat("'stop' holds ", v->size(), " strings; at most ",
                                        kMaxStopStrings, " are allowed"));
  }
  for (size_t i = 0; i < v->size(); ++i) {
    std::string param = absl::StrCat("stop[", i, "]");
    if (!(*v)[i].is_string()) return TypeError(param, "a string", (*v)[i]);
    if ((*v)[i].get<std::string>().empty()) {
      return Invalid(param, absl::StrCat("'", param, "' must not be an empty string"));
    }
    out->push_back((*v)[i].get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status ParseStopTokenIds(const json* v, int vocab_size, std::vector<int32_t>* out) {
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_array()) return TypeError("stop_token_ids", "an array of token ids", *v);
  if (v->size() > kMaxStopTokenIds) {
    return Invalid("stop_token_ids", absl::StrCat("'stop_token_ids' holds ", v->size(),
                                                  " ids; at most ", kMaxStopTokenIds,
                                                  " are allowed"));
  }
  out->resize(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    absl::Status s =
        ReadTokenId((*v)[i], absl::StrCat("stop_token_ids[", i, "]"), vocab_size, &(*out)[i]);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// A parse error with its position, found by a second, validating pass so
// the common path parses once.
std::string JsonErrorMessage(absl::string_view body) {
  struct ErrorSax : nlohmann::json_sax<json> {
    std::string message = "Request body is not valid JSON";
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return true; }
    bool key(string_t&) override { return true; }
    bool end_object() override { return true; }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
      message = absl::StrCat("Request body is not valid JSON: ", e.what());
      return false;
    }
  } sax;
  json::sax_parse(body.begin(), body.end(), &sax, json::input_format_t::json, /*strict=*/true);
  return sax.message;
}

// What both endpoints share, read once request->generation holds the
// prompt: the context check, max_tokens (default `default_max_tokens`, or
// the room left in the context when that is 0), sampling, stop, stream and
// the extensions. `prompt_param` names the prompt's field in errors.
absl::Status ParseCommon(Fields& fields, const ServedModel& model, int vocab_size,
                         const char* prompt_param, int default_max_tokens, ApiRequest* request) {
  SamplingParams& p = request->generation.params;
  const int prompt_tokens = static_cast<int>(request->generation.prompt_token_ids.size());
  const int room = model.context_length - prompt_tokens;
  if (room < 1) {
    return Invalid(prompt_param,
                   absl::StrCat("'", prompt_param, "' is ", prompt_tokens,
                                " tokens; the model's context is ", model.context_length,
                                " tokens, so a prompt may hold at most ", model.context_length - 1,
                                " (one token of room for the completion)"),
                   "context_length_exceeded");
  }

  int64_t max_tokens = default_max_tokens > 0 ? std::min(default_max_tokens, room) : room;
  const char* max_tokens_param = "max_tokens";
  const json* max_tokens_value = fields.Get("max_tokens");
  if (request->endpoint == ApiEndpoint::kChatCompletions) {
    // OpenAI's newer name wins when both are given.
    if (const json* v = fields.Get("max_completion_tokens")) {
      max_tokens_param = "max_completion_tokens";
      max_tokens_value = v;
    }
  }
  absl::Status s = ReadInt(max_tokens_value, max_tokens_param, 1,
                           std::numeric_limits<int32_t>::max(), &max_tokens);
  if (!s.ok()) return s;
  if (max_tokens > room) {
    return Invalid(max_tokens_param,
                   absl::StrCat("'", max_tokens_param, "' is ", max_tokens, " but the prompt (",
                                prompt_tokens, " tokens) leaves room for at most ", room,
                                " in the model's context of ", model.context_length, " tokens"),
                   "context_length_exceeded");
  }
  p.max_tokens = static_cast<int>(max_tokens);

  if (s = ReadNumber(fields.Get("temperature"), "temperature", 0.0, 2.0, false, &p.temperature);
      !s.ok()) {
    return s;
  }
  // Checked before the conversion to float, which rounds 5e-324 to 0.
  if (const json* v = fields.Get("temperature");
      v != nullptr && v->get<double>() > 0.0 && v->get<double>() < kMinTemperature) {
    return Invalid("temperature", absl::StrCat("'temperature' must be 0 (greedy) or at least ",
                                               kMinTemperature, ", got ", Describe(*v)));
  }
  if (s = ReadNumber(fields.Get("top_p"), "top_p", 0.0, 1.0, true, &p.top_p); !s.ok()) return s;
  if (s = ReadNumber(fields.Get("min_p"), "min_p", 0.0, 1.0, false, &p.min_p); !s.ok()) return s;
  int top_k = p.top_k;  // the served model's default unless given
  if (s = ReadInt(fields.Get("top_k"), "top_k", -1, std::numeric_limits<int32_t>::max(), &top_k);
      !s.ok()) {
    return s;
  }
  p.top_k = std::max(top_k, 0);  // -1, like 0, means no top-k filter
  if (const json* v = fields.Get("seed")) {
    if (!v->is_number_integer()) return TypeError("seed", "an integer", *v);
    p.seed = v->is_number_unsigned() ? v->get<uint64_t>()
                                     : static_cast<uint64_t>(v->get<int64_t>());
  }
  if (s = ParseStop(fields.Get("stop"), &p.stop); !s.ok()) return s;
  if (s = ParseStopTokenIds(fields.Get("stop_token_ids"), vocab_size, &p.stop_token_ids);
      !s.ok()) {
    return s;
  }

  if (s = ReadBool(fields.Get("stream"), "stream", &request->stream); !s.ok()) return s;
  if (const json* v = fields.Get("stream_options")) {
    if (!v->is_object()) return TypeError("stream_options", "an object", *v);
    if (!request->stream) {
      return Invalid("stream_options", "'stream_options' is only allowed when 'stream' is true");
    }
    Fields options(*v, "stream_options.");
    if (s = ReadBool(options.Get("include_usage"), "stream_options.include_usage",
                     &request->include_usage);
        !s.ok()) {
      return s;
    }
    options.AppendUnknown(&request->ignored_fields);
  }

  if (s = ReadBool(fields.Get("speculation"), "speculation", &p.speculation); !s.ok()) return s;
  if (s = ReadInt(fields.Get("max_draft_tokens"), "max_draft_tokens", -1, model.max_draft_tokens,
                  &p.max_draft_tokens);
      !s.ok()) {
    return s;
  }
  if (s = ReadBool(fields.Get("ignore_eos"), "ignore_eos", &p.ignore_eos); !s.ok()) return s;
  return CheckUnsupported(fields, kCommonUnsupported);
}

// The body as a JSON object naming the served model (or none). Nesting is
// bounded: the handlers run on civetweb's worker threads, whose stacks are
// small (100 KiB in Debian's build), and the chat template's arguments go
// through recursive code (their conversion, the template's evaluator).
absl::StatusOr<json> ParseBody(absl::string_view body, const ServedModel& model) {
  bool too_deep = false;
  const json::parser_callback_t bound_depth = [&too_deep](int depth, json::parse_event_t event,
                                                          json&) {
    const bool opens =
        event == json::parse_event_t::object_start || event == json::parse_event_t::array_start;
    if (opens && depth >= kMaxRequestJsonDepth) too_deep = true;
    return !too_deep;  // what lies deeper is dropped, not built
  };
  json root = json::parse(body.begin(), body.end(), bound_depth, false);
  if (too_deep) {
    return Invalid("", absl::StrCat("Request body nests objects and arrays deeper than ",
                                    kMaxRequestJsonDepth, " levels"));
  }
  if (root.is_discarded()) return Invalid("", JsonErrorMessage(body));
  if (!root.is_object()) return Invalid("", "Request body must be a JSON object");
  auto it = root.find("model");
  if (it != root.end() && !it->is_null()) {
    if (!it->is_string()) return TypeError("model", "a string", *it);
    if (it->get<std::string>() != model.name) {
      return ApiError(absl::StatusCode::kNotFound,
                      absl::StrCat("The model '", it->get<std::string>(),
                                   "' does not exist; this server serves '", model.name, "'"),
                      "model", "model_not_found");
    }
  }
  return root;
}

json UsageJson(const GenerationUsage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"speculative",
           {{"draft_tokens", u.draft_tokens},
            {"accepted_tokens", u.accepted_tokens},
            {"verify_steps", u.verify_steps},
            {"plain_steps", u.plain_steps}}}};
}

// Token i's logprob as JSON: null where the engine gave none (NaN marks a
// gap), -9999 for -inf, which JSON cannot spell.
json LogprobJson(const std::vector<float>& lps, size_t i) {
  if (i >= lps.size() || std::isnan(lps[i])) return nullptr;
  return std::isfinite(lps[i]) ? static_cast<double>(lps[i]) : -9999.0;
}

json Bytes(const std::string& s) {
  json bytes = json::array();
  for (unsigned char c : s) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// The legacy completions form: tokens, token_logprobs, top_logprobs,
// text_offset. The engine reports the sampled token's logprob only, so
// top_logprobs lists that token.
json CompletionLogprobs(const std::vector<std::string>& texts, const std::vector<float>& lps,
                        int top_logprobs, size_t* text_offset) {
  json out = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", top_logprobs > 0 ? json::array() : json(nullptr)},
              {"text_offset", json::array()}};
  for (size_t i = 0; i < texts.size(); ++i) {
    json lp = LogprobJson(lps, i);
    out["tokens"].push_back(texts[i]);
    out["token_logprobs"].push_back(lp);
    if (top_logprobs > 0) out["top_logprobs"].push_back(json::object({{texts[i], lp}}));
    out["text_offset"].push_back(*text_offset);
    *text_offset += texts[i].size();
  }
  return out;
}

json ChatLogprobs(const std::vector<std::string>& texts, const std::vector<float>& lps,
                  int top_logprobs) {
  json content = json::array();
  for (size_t i = 0; i < texts.size(); ++i) {
    json entry = {{"token", texts[i]}, {"logprob", LogprobJson(lps, i)}, {"bytes", Bytes(texts[i])}};
    json top = json::array();
    if (top_logprobs > 0) top.push_back(entry);
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return {{"content", std::move(content)}};
}

// The fields every streamed chunk starts with.
json ChunkHead(const std::string& id, bool chat, int64_t created, const std::string& model) {
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model}};
}

const char* FinishReasonString(FinishReason reason) {
  return reason == FinishReason::kLength ? "length" : "stop";
}

}  // namespace

absl::Status ApiError(absl::StatusCode code, absl::string_view message, absl::string_view param,
                      absl::string_view error_code) {
  absl::Status status(code, message);
  if (!param.empty()) status.SetPayload(kParamPayload, absl::Cord(param));
  if (!error_code.empty()) status.SetPayload(kCodePayload, absl::Cord(error_code));
  return status;
}

int HttpStatusFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kAborted:
      return 503;
    default:
      return 500;
  }
}

std::string ErrorBody(const absl::Status& status) { return Dump(ErrorObject(status)); }

std::string ErrorBody(int http_status, absl::string_view message, absl::string_view param,
                      absl::string_view error_code) {
  return Dump(ErrorObject(http_status, message, param, error_code));
}

// Whether Encode(..., add_bos=true) puts BOS in front: a SentencePiece
// model with one does, a tokenizer.json does when its post-processor's
// template starts with it, and a byte-level post-processor (SmolLM2's) adds
// nothing.
static bool EncodeAddsBos(const Tokenizer& tokenizer) {
  if (tokenizer.bos_id() < 0) return false;
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode("", /*add_bos=*/true);
  return ids.ok() && !ids->empty() && ids->front() == tokenizer.bos_id();
}

OpenAiApi::OpenAiApi(ServedModel model, const Tokenizer& tokenizer, ChatTemplate chat_template)
    : model_(std::move(model)),
      tokenizer_(tokenizer),
      chat_template_(std::move(chat_template)),
      encode_adds_bos_(EncodeAddsBos(tokenizer)) {}

absl::StatusOr<ApiRequest> OpenAiApi::ParseCompletion(absl::string_view body) const {
  absl::StatusOr<json> root = ParseBody(body, model_);
  if (!root.ok()) return root.status();
  Fields fields(*root, "");
  fields.Get("model");  // checked by ParseBody
  ApiRequest request;
  request.endpoint = ApiEndpoint::kCompletions;
  ApplySamplingDefaults(&request.generation.params);
  absl::StatusOr<std::vector<int32_t>> prompt = ParsePrompt(fields.Get("prompt"), tokenizer_);
  if (!prompt.ok()) return prompt.status();
  request.generation.prompt_token_ids = *std::move(prompt);

  absl::Status s = ParseCommon(fields, model_, tokenizer_.vocab_size(), "prompt",
                               kDefaultCompletionMaxTokens, &request);
  if (!s.ok()) return s;
  if (const json* v = fields.Get("logprobs")) {
    // Legacy form: the number of alternatives per token, 0 for the sampled
    // token's logprob alone.
    if (s = ReadInt(v, "logprobs", 0, kMaxLogprobs, &request.top_logprobs); !s.ok()) return s;
    request.logprobs = true;
  }
  if (s = CheckUnsupported(fields, kCompletionUnsupported); !s.ok()) return s;
  if (s = CheckIgnored(fields, /*chat=*/false); !s.ok()) return s;
  request.generation.params.logprobs = request.logprobs ? std::max(1, request.top_logprobs) : 0;
  fields.AppendUnknown(&request.ignored_fields);
  if (s = CheckUnknownFields(request.ignored_fields); !s.ok()) return s;
  return request;
}

void OpenAiApi::ApplySamplingDefaults(SamplingParams* params) const {
  if (sampling_defaults_.temperature) params->temperature = *sampling_defaults_.temperature;
  if (sampling_defaults_.top_p) params->top_p = *sampling_defaults_.top_p;
  if (sampling_defaults_.top_k) params->top_k = *sampling_defaults_.top_k;
  if (sampling_defaults_.min_p) params->min_p = *sampling_defaults_.min_p;
}

absl::Status OpenAiApi::CheckUnknownFields(const std::vector<std::string>& ignored) const {
  if (accept_unknown_fields_ || ignored.empty()) return absl::OkStatus();
  const std::string& field = ignored.front();
  return Invalid(field, absl::StrCat("unknown field '", field,
                                     "' (`verdict serve --accept-unknown-fields` ignores "
                                     "unknown fields instead)"));
}

absl::StatusOr<ApiRequest> OpenAiApi::ParseChat(absl::string_view body) const {
  absl::StatusOr<json> root = ParseBody(body, model_);
  if (!root.ok()) return root.status();
  Fields fields(*root, "");
  fields.Get("model");  // checked by ParseBody
  ApiRequest request;
  request.endpoint = ApiEndpoint::kChatCompletions;
  ApplySamplingDefaults(&request.generation.params);
  absl::StatusOr<std::vector<ChatMessage>> messages = ParseMessages(fields.Get("messages"));
  if (!messages.ok()) return messages.status();
  absl::StatusOr<ChatRenderOptions> options = ParseChatOptions(fields);
  if (!options.ok()) return options.status();
  absl::StatusOr<std::vector<int32_t>> ids =
      ChatPromptIds(chat_template_, tokenizer_, *messages, *options, /*add_special_tokens=*/true,
                    encode_adds_bos_);
  if (!ids.ok()) return ids.status();
  request.generation.prompt_token_ids = *std::move(ids);

  absl::Status s = ParseCommon(fields, model_, tokenizer_.vocab_size(), "messages",
                               /*default_max_tokens=*/0, &request);
  if (!s.ok()) return s;
  if (s = ReadBool(fields.Get("logprobs"), "logprobs", &request.logprobs); !s.ok()) return s;
  if (const json* v = fields.Get("top_logprobs")) {
    if (!request.logprobs) {
      return Invalid("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    }
    if (s = ReadInt(v, "top_logprobs", 0, kMaxLogprobs, &request.top_logprobs); !s.ok()) return s;
  }
  if (s = CheckUnsupported(fields, kChatUnsupported); !s.ok()) return s;
  if (s = CheckIgnored(fields, /*chat=*/true); !s.ok()) return s;
  request.generation.params.logprobs = request.logprobs ? std::max(1, request.top_logprobs) : 0;
  std::vector<std::string>& stop = request.generation.params.stop;
  for (const std::string& end_of_turn : chat_template_.stop()) {
    if (std::find(stop.begin(), stop.end(), end_of_turn) == stop.end()) stop.push_back(end_of_turn);
  }
  fields.AppendUnknown(&request.ignored_fields);
  if (s = CheckUnknownFields(request.ignored_fields); !s.ok()) return s;
  return request;
}

absl::StatusOr<TokenizedPrompt> OpenAiApi::Tokenize(absl::string_view body,
                                                    absl::string_view text_field) const {
  absl::StatusOr<json> root = ParseBody(body, model_);
  if (!root.ok()) return root.status();
  Fields fields(*root, "");
  fields.Get("model");  // checked by ParseBody
  const std::string text_name(text_field);
  const json* text = fields.Get(text_name.c_str());
  const json* messages_value = fields.Get("messages");
  if (text == nullptr && messages_value == nullptr) {
    return Invalid(text_name, absl::StrCat("'", text_name, "' or 'messages' is required"));
  }
  if (text != nullptr && messages_value != nullptr) {
    return Invalid("messages", absl::StrCat("give '", text_name, "' or 'messages', not both"));
  }
  TokenizedPrompt result;
  // vLLM's defaults: a text gets BOS; a conversation's template writes its
  // own special tokens.
  bool add_special_tokens = text != nullptr;
  absl::Status s =
      ReadBool(fields.Get("add_special_tokens"), "add_special_tokens", &add_special_tokens);
  if (!s.ok()) return s;
  if (s = ReadBool(fields.Get("return_token_strs"), "return_token_strs",
                   &result.return_token_strs);
      !s.ok()) {
    return s;
  }
  if (text != nullptr) {
    if (!text->is_string()) return TypeError(text_name, "a string", *text);
    absl::StatusOr<std::vector<int32_t>> ids =
        tokenizer_.Encode(text->get<std::string>(), add_special_tokens);
    if (!ids.ok()) {
      return Invalid(text_name, absl::StrCat("'", text_name,
                                             "' could not be tokenized: ", ids.status().message()));
    }
    result.token_ids = *std::move(ids);
  } else {
    absl::StatusOr<std::vector<ChatMessage>> messages = ParseMessages(messages_value);
    if (!messages.ok()) return messages.status();
    absl::StatusOr<ChatRenderOptions> options = ParseChatOptions(fields);
    if (!options.ok()) return options.status();
    absl::StatusOr<std::vector<int32_t>> ids =
        ChatPromptIds(chat_template_, tokenizer_, *messages, *options, add_special_tokens,
                      encode_adds_bos_);
    if (!ids.ok()) return ids.status();
    result.token_ids = *std::move(ids);
  }
  fields.AppendUnknown(&result.ignored_fields);
  if (s = CheckUnknownFields(result.ignored_fields); !s.ok()) return s;
  return result;
}

absl::StatusOr<ApiReply> OpenAiApi::TokenizeReply(absl::string_view body) const {
  absl::StatusOr<TokenizedPrompt> prompt = Tokenize(body);
  if (!prompt.ok()) return prompt.status();
  json out = {{"count", prompt->token_ids.size()},
              {"max_model_len", model_.context_length},
              {"tokens", prompt->token_ids}};
  if (prompt->return_token_strs) {
    json pieces = json::array();
    for (int32_t id : prompt->token_ids) pieces.push_back(tokenizer_.IdToPiece(id));
    out["token_strs"] = std::move(pieces);
  }
  return ApiReply{Dump(out), std::move(prompt->ignored_fields)};
}

absl::StatusOr<ApiReply> OpenAiApi::DetokenizeReply(absl::string_view body) const {
  absl::StatusOr<json> root = ParseBody(body, model_);
  if (!root.ok()) return root.status();
  Fields fields(*root, "");
  fields.Get("model");  // checked by ParseBody
  const json* tokens = fields.Get("tokens");
  if (tokens == nullptr) return Invalid("tokens", "'tokens' is required");
  if (!tokens->is_array()) return TypeError("tokens", "an array of token ids", *tokens);
  std::vector<int32_t> ids(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) {
    absl::Status s = ReadTokenId((*tokens)[i], absl::StrCat("tokens[", i, "]"),
                                 tokenizer_.vocab_size(), &ids[i]);
    if (!s.ok()) return s;
  }
  ApiReply reply;
  fields.AppendUnknown(&reply.ignored_fields);
  if (absl::Status s = CheckUnknownFields(reply.ignored_fields); !s.ok()) return s;
  // As vLLM decodes: special tokens keep their text.
  absl::StatusOr<std::string> text = tokenizer_.Decode(ids, /*skip_special_tokens=*/false);
  if (!text.ok()) {
    return Invalid("tokens",
                   absl::StrCat("'tokens' could not be decoded: ", text.status().message()));
  }
  reply.body = Dump({{"prompt", *text}});
  return reply;
}

std::string OpenAiApi::ModelsBody() const {
  json model = json::parse(*ModelBody(model_.name));
  return Dump({{"object", "list"}, {"data", json::array({std::move(model)})}});
}

absl::StatusOr<std::string> OpenAiApi::ModelBody(absl::string_view name) const {
  if (name != model_.name) {
    return ApiError(absl::StatusCode::kNotFound,
                    absl::StrCat("The model '", name, "' does not exist"), "model",
                    "model_not_found");
  }
  return Dump({{"id", model_.name},
               {"object", "model"},
               {"created", model_.created},
               {"owned_by", "verdict"},
               {"max_model_len", model_.context_length}});
}

ResponseEncoder::ResponseEncoder(const OpenAiApi& api, const ApiRequest& request, std::string id,
                                 int64_t created)
    : api_(api),
      request_(request),
      id_(std::move(id)),
      created_(created),
      detokenizer_(&api.tokenizer(), request.generation.prompt_token_ids) {}

std::vector<std::string> ResponseEncoder::TokenTexts(const std::vector<int32_t>& token_ids) {
  std::vector<std::string> texts;
  if (!request_.logprobs) return texts;
  for (int32_t id : token_ids) {
    absl::StatusOr<std::string> text = detokenizer_.Append(id);
    texts.push_back(text.ok() ? *std::move(text) : std::string());
  }
  return texts;
}

std::string ResponseEncoder::Chunk(const std::string& text,
                                   const std::vector<std::string>& token_texts,
                                   const std::vector<float>& logprobs, const char* finish_reason) {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (finish_reason != nullptr) choice["finish_reason"] = finish_reason;
  if (!token_texts.empty()) {
    choice["logprobs"] =
        is_chat() ? ChatLogprobs(token_texts, logprobs, request_.top_logprobs)
                  : CompletionLogprobs(token_texts, logprobs, request_.top_logprobs, &text_offset_);
  }
  if (is_chat()) {
    json delta = json::object();
    if (!sent_role_) {
      delta["role"] = "assistant";
      sent_role_ = true;
    }
    if (finish_reason == nullptr) delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  json chunk = ChunkHead(id_, is_chat(), created_, api_.model().name);
  chunk["choices"] = json::array({std::move(choice)});
  if (request_.include_usage) chunk["usage"] = nullptr;
  return Sse(chunk);
}

std::string ResponseEncoder::StreamEvent(const GenerationEvent& event) {
  if (finished_) return "";
  usage_ = event.usage;
  std::string out;
  if (!event.token_ids.empty() || !event.text.empty() || (is_chat() && !sent_role_)) {
    out += Chunk(event.text, TokenTexts(event.token_ids), event.logprobs, nullptr);
  }
  if (!event.finished) return out;
  finished_ = true;
  finish_reason_ = event.finish_reason;
  error_ = event.error;
  if (absl::Status end = EndStatus(); !end.ok()) {
    out += Sse(ErrorObject(end));
  } else {
    out += Chunk("", {}, {}, FinishReasonString(finish_reason_));
    if (request_.include_usage) {
      json chunk = ChunkHead(id_, is_chat(), created_, api_.model().name);
      chunk["choices"] = json::array();
      chunk["usage"] = UsageJson(usage_);
      out += Sse(chunk);
    }
  }
  return out + "data: [DONE]\n\n";
}

void ResponseEncoder::Add(const GenerationEvent& event) {
  if (finished_) return;
  text_ += event.text;
  if (request_.logprobs) {
    std::vector<std::string> texts = TokenTexts(event.token_ids);
    token_texts_.insert(token_texts_.end(), texts.begin(), texts.end());
    // Keep logprobs aligned with tokens when an event lacks some.
    logprobs_.insert(logprobs_.end(), event.logprobs.begin(),
                     event.logprobs.begin() + std::min(event.logprobs.size(), texts.size()));
    logprobs_.resize(token_texts_.size(), std::numeric_limits<float>::quiet_NaN());
  }
  usage_ = event.usage;
  if (event.finished) {
    finished_ = true;
    finish_reason_ = event.finish_reason;
    error_ = event.error;
  }
}

absl::Status ResponseEncoder::EndStatus() const {
  if (finish_reason_ == FinishReason::kError) {
    return ApiError(absl::StatusCode::kInternal,
                    absl::StrCat("generation failed: ", error_.empty() ? "unknown error" : error_));
  }
  if (finish_reason_ == FinishReason::kCancelled) {
    return ApiError(absl::StatusCode::kUnavailable,
                    "the request was cancelled before it finished (the server may be shutting "
                    "down); retry it");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ResponseEncoder::Body() const {
  if (!finished_) return absl::FailedPreconditionError("the request has not finished");
  if (absl::Status end = EndStatus(); !end.ok()) return end;
  json choice = {{"index", 0},
                 {"logprobs", nullptr},
                 {"finish_reason", FinishReasonString(finish_reason_)}};
  if (request_.logprobs) {
    size_t text_offset = 0;
    choice["logprobs"] = is_chat() ? ChatLogprobs(token_texts_, logprobs_, request_.top_logprobs)
                                   : CompletionLogprobs(token_texts_, logprobs_,
                                                        request_.top_logprobs, &text_offset);
  }
  if (is_chat()) {
    choice["message"] = {{"role", "assistant"}, {"content", text_}};
  } else {
    choice["text"] = text_;
  }
  return Dump({{"id", id_},
               {"object", is_chat() ? "chat.completion" : "text_completion"},
               {"created", created_},
               {"model", api_.model().name},
               {"choices", json::array({std::move(choice)})},
               {"usage", UsageJson(usage_)}});
}

}  // namespace verdict
