#include "runtime/text/chat_template.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/text/jinja/evaluator.h"
#include "runtime/text/jinja/value.h"

namespace verdict {
namespace {

using json = nlohmann::json;

// The template's own text when it is a string; the "default" entry of HF's
// list-of-named-templates form; "" when there is none (null).
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
    // transformers refuses a list without a default too; falling back to
    // another format would hide the checkpoint's own.
    return absl::InvalidArgumentError(
        "tokenizer config: chat_template lists named templates but none named \"default\"");
  }
  return absl::InvalidArgumentError(
      "tokenizer config: chat_template must be a string or a list of {name, template}");
}

// The special tokens apply_chat_template passes as template variables; HF
// writes each as a string or as an AddedToken object {"content": ...}.
constexpr const char* kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "pad_token",
                                          "sep_token", "cls_token", "mask_token"};

std::optional<std::string> SpecialToken(const json& config, const char* name) {
  auto it = config.find(name);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return std::nullopt;
}

// The format a template's marker names, for its stop strings.
ChatFormat FormatOfTemplate(const std::string& text) {
  if (text == kPlainJinja) return ChatFormat::kPlain;
  if (absl::StrContains(text, "<|im_start|>")) return ChatFormat::kChatMl;
  if (absl::StrContains(text, "<|start_header_id|>")) return ChatFormat::kLlama3;
  return ChatFormat::kTemplate;
}

std::optional<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The rendered text up to the end of the final message's content. Templates
// may strip the content (Python's str.strip), so it is looked up stripped,
// at its last occurrence; the content's trailing whitespace is kept when the
// text has it there, as transformers keeps it.
absl::StatusOr<std::string> CutAfterFinalMessage(std::string text, const std::string& content) {
  const std::string stripped = jinja::PythonStrip(content, true, true);
  const size_t at = text.rfind(stripped);
  if (at == std::string::npos) {
    return absl::InvalidArgumentError(
        "continue_final_message: the final message's content does not appear in the rendered "
        "chat (the template drops or rewrites it), so there is nothing to continue");
  }
  // Equal only when the content has no leading whitespace and the text
  // holds it whole, trailing whitespace included.
  const size_t kept = jinja::PythonStrip(content, true, false).size();
  if (text.compare(at, kept, content) == 0) {
    text.resize(at + kept);
  } else {
    text.resize(at + stripped.size());
  }
  return text;
}

}  // namespace

struct ChatTemplate::Compiled {
  jinja::Template program;
  jinja::Dict special_tokens;
};

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
    case ChatFormat::kTemplate:
      return "template";
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
    case ChatFormat::kTemplate:
      break;
  }
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfig(
    absl::string_view config_json, const std::string* template_override) {
  json config = json::parse(config_json.begin(), config_json.end(), nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError("tokenizer config is not a JSON object");
  }
  std::string text;
  std::string source = "chat_template";
  if (template_override != nullptr) {
    text = *template_override;
    source = "chat_template.jinja";
  } else if (auto it = config.find("chat_template"); it != config.end()) {
    absl::StatusOr<std::string> found = TemplateText(*it);
    if (!found.ok()) return found.status();
    text = *std::move(found);
  }
  if (text.empty() && template_override == nullptr) return ChatTemplate();
  absl::StatusOr<jinja::Template> program = jinja::Template::Compile(text);
  if (!program.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, " ", program.status().message()));
  }
  ChatTemplate result(FormatOfTemplate(text));
  auto compiled = std::make_shared<Compiled>(Compiled{*std::move(program), {}});
  for (const char* name : kSpecialTokens) {
    if (std::optional<std::string> token = SpecialToken(config, name)) {
      compiled->special_tokens.Set(jinja::Value(name), jinja::Value(*token));
      if (std::string(name) == "bos_token") result.bos_token_ = *token;
    }
  }
  result.compiled_ = std::move(compiled);
  return result;
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfigFile(const std::string& path) {
  std::string config = ReadText(path).value_or("{}");
  // transformers saves the template in chat_template.jinja beside the config
  // and prefers it when both exist.
  const std::string jinja_path =
      (std::filesystem::path(path).parent_path() / "chat_template.jinja").string();
  std::optional<std::string> jinja_text = ReadText(jinja_path);
  absl::StatusOr<ChatTemplate> result =
      FromTokenizerConfig(config, jinja_text ? &*jinja_text : nullptr);
  if (!result.ok()) {
    // The directory: the message names the file in it (chat_template.jinja,
    // or tokenizer_config.json's chat_template).
    return absl::InvalidArgumentError(absl::StrCat(
        std::filesystem::path(path).parent_path().string(), ": ", result.status().message()));
  }
  return result;
}

absl::StatusOr<std::string> ChatTemplate::Render(absl::Span<const ChatMessage> messages) const {
  return Render(messages, ChatRenderOptions());
}

absl::StatusOr<std::string> ChatTemplate::Render(absl::Span<const ChatMessage> messages,
                                                 const ChatRenderOptions& options) const {
  if (!options.continue_final_message) return RenderConversation(messages, options);
  if (options.add_generation_prompt) {
    return absl::InvalidArgumentError(
        "continue_final_message and add_generation_prompt cannot both be true: the first "
        "continues the final message, the second opens a new one");
  }
  if (messages.empty()) {
    return absl::InvalidArgumentError("continue_final_message needs a final message");
  }
  absl::StatusOr<std::string> text = RenderConversation(messages, options);
  if (!text.ok()) return text;
  return CutAfterFinalMessage(*std::move(text), messages.back().content);
}

absl::StatusOr<std::string> ChatTemplate::RenderConversation(
    absl::Span<const ChatMessage> messages, const ChatRenderOptions& options) const {
  if (compiled_ == nullptr) return RenderBuiltIn(messages, options.add_generation_prompt);
  // The variables apply_chat_template passes: the messages, tools and
  // documents (none here), add_generation_prompt, the special tokens, then
  // the extra keyword arguments.
  std::vector<jinja::Value> items;
  for (const ChatMessage& m : messages) {
    jinja::Dict message;
    message.Set(jinja::Value("role"), jinja::Value(m.role));
    message.Set(jinja::Value("content"), jinja::Value(m.content));
    items.push_back(jinja::Value::FromDict(std::move(message)));
  }
  jinja::Dict context;
  context.Set(jinja::Value("messages"), jinja::Value::List(std::move(items)));
  context.Set(jinja::Value("tools"), jinja::Value::None());
  context.Set(jinja::Value("documents"), jinja::Value::None());
  context.Set(jinja::Value("add_generation_prompt"), jinja::Value(options.add_generation_prompt));
  for (const auto& [key, value] : compiled_->special_tokens.entries()) context.Set(key, value);
  if (options.kwargs.is_object()) {
    for (const auto& [key, value] : options.kwargs.items()) {
      context.Set(jinja::Value(key), jinja::Value::FromJson(value));
    }
  }
  absl::StatusOr<std::string> text = compiled_->program.Render(context);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template ", text.status().message()));
  }
  return text;
}

absl::StatusOr<std::string> ChatTemplate::RenderBuiltIn(absl::Span<const ChatMessage> messages,
                                                        bool add_generation_prompt) const {
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
      case ChatFormat::kTemplate:
        return absl::InternalError("a kTemplate chat format has no built-in rendering");
    }
  }
  if (!add_generation_prompt) return out;
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
    case ChatFormat::kTemplate:
      break;
  }
  return out;
}

}  // namespace verdict
