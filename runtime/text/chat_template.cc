#include "runtime/text/chat_template.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace verdict {
namespace {

using json = nlohmann::json;

// The template's own text when it is a string; the "default" entry of HF's
// list-of-named-templates form; "" when there is none.
absl::StatusOr<std::string> TemplateText(const json& value) {
  if (value.is_null()) return std::string();
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    for (const json& entry : value) {
      if (!entry.is_object()) break;
      auto name = entry.find("name");
      auto text = entry.find("template");
      if (name != entry.end() && text != entry.end() && name->is_string() &&
          text->is_string() && name->get<std::string>() == "default") {
        return text->get<std::string>();
      }
    }
    return std::string();
  }
  return absl::InvalidArgumentError(
      "tokenizer config: chat_template must be a string or a list of {name, template}");
}

}  // namespace

const char kPlainJinja[] =
    "{% for message in messages %}{{ message['role'] | capitalize }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}";

const char* ChatFormatName(ChatFormat format) {
  switch (format) {
    case ChatFormat::kPlain:
      return "plain";
    case ChatFormat::kChatMl:
      return "chatml";
    case ChatFormat::kLlama3:
      return "llama3";
  }
  return "unknown";
}

ChatTemplate::ChatTemplate(ChatFormat format) : format_(format) {
  switch (format) {
    case ChatFormat::kPlain:
      // The model would go on to write the user's next line.
      stop_ = {"\nUser:"};
      break;
    case ChatFormat::kChatMl:
      stop_ = {"<|im_end|>"};
      break;
    case ChatFormat::kLlama3:
      stop_ = {"<|eot_id|>"};
      break;
  }
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfig(absl::string_view config_json) {
  json config = json::parse(config_json.begin(), config_json.end(), nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError("tokenizer config is not a JSON object");
  }
  auto it = config.find("chat_template");
  if (it == config.end()) return ChatTemplate();
  absl::StatusOr<std::string> text = TemplateText(*it);
  if (!text.ok()) return text.status();
  if (absl::StrContains(*text, "<|im_start|>")) return ChatTemplate(ChatFormat::kChatMl);
  if (absl::StrContains(*text, "<|start_header_id|>")) return ChatTemplate(ChatFormat::kLlama3);
  return ChatTemplate();
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ChatTemplate();
  std::ostringstream text;
  text << in.rdbuf();
  absl::StatusOr<ChatTemplate> result = FromTokenizerConfig(text.str());
  if (!result.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", result.status().message()));
  }
  return result;
}

absl::StatusOr<std::string> ChatTemplate::Render(absl::Span<const ChatMessage> messages) const {
  std::string out;
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat(
          "chat role '", m.role, "' is not supported (system, user, assistant)"));
    }
    switch (format_) {
      case ChatFormat::kPlain: {
        std::string role = m.role;
        role[0] = absl::ascii_toupper(role[0]);
        absl::StrAppend(&out, role, ": ", m.content, "\n");
        break;
      }
      case ChatFormat::kChatMl:
        absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
        break;
      case ChatFormat::kLlama3:
        absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n", m.content,
                        "<|eot_id|>");
        break;
    }
  }
  switch (format_) {
    case ChatFormat::kPlain:
      out += "Assistant:";
      break;
    case ChatFormat::kChatMl:
      out += "<|im_start|>assistant\n";
      break;
    case ChatFormat::kLlama3:
      out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
  }
  return out;
}

}  // namespace verdict
