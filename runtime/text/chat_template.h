// Turns the messages of a /v1/chat/completions request into prompt text.
//
// verdict does not execute Jinja. A tokenizer_config.json `chat_template` is
// recognised by a marker that identifies one of a few known formats; any
// other template, or none, selects the documented default (kPlain):
//
//   kPlain (default)   System: {system}\nUser: {user}\nAssistant: {reply}\n
//                      ... ending with the cue "Assistant:". Stop: "\nUser:".
//                      Plain words, no special tokens, so a small model
//                      trained on prose can follow it like a play script.
//                      kPlainJinja is this format in Jinja: the chat_template
//                      of the bundled models (models/*/tokenizer_config.json).
//   kChatMl            <|im_start|>{role}\n{content}<|im_end|>\n ... ending
//                      with "<|im_start|>assistant\n". Marker "<|im_start|>".
//                      Stop: "<|im_end|>".
//   kLlama3            <|start_header_id|>{role}<|end_header_id|>\n\n
//                      {content}<|eot_id|> ... ending with the assistant
//                      header. Marker "<|start_header_id|>". Stop:
//                      "<|eot_id|>". The tokenizer adds BOS, so the template
//                      does not write <|begin_of_text|>.
#ifndef VERDICT_RUNTIME_TEXT_CHAT_TEMPLATE_H_
#define VERDICT_RUNTIME_TEXT_CHAT_TEMPLATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace verdict {

// One chat message; `role` is "system", "user" or "assistant" (the API layer
// maps OpenAI's "developer" to "system" before rendering).
struct ChatMessage {
  std::string role;
  std::string content;
};

enum class ChatFormat { kPlain, kChatMl, kLlama3 };

const char* ChatFormatName(ChatFormat format);

// kPlain written as a Jinja chat_template (renders what Render renders).
extern const char kPlainJinja[];

class ChatTemplate {
 public:
  // The documented default, kPlain.
  ChatTemplate() : ChatTemplate(ChatFormat::kPlain) {}
  explicit ChatTemplate(ChatFormat format);

  // Chooses the format from the text of a tokenizer_config.json. A missing
  // or null `chat_template`, or one without a known marker, gives kPlain;
  // HF's list form ([{"name", "template"}]) uses the entry named "default".
  // Errors: the text is not a JSON object, or `chat_template` has a type
  // HF does not define (InvalidArgument).
  static absl::StatusOr<ChatTemplate> FromTokenizerConfig(absl::string_view config_json);

  // As FromTokenizerConfig, reading the file; a missing file gives kPlain
  // (a model directory need not carry tokenizer_config.json).
  static absl::StatusOr<ChatTemplate> FromTokenizerConfigFile(const std::string& path);

  ChatFormat format() const { return format_; }

  // Prompt text for `messages`, ending with the cue for the assistant's
  // turn. Errors: a role other than system/user/assistant (InvalidArgument).
  absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages) const;

  // Strings that end the assistant's turn in this format; the API layer
  // adds them to every chat request's stop strings.
  const std::vector<std::string>& stop() const { return stop_; }

 private:
  ChatFormat format_;
  std::vector<std::string> stop_;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_TEXT_CHAT_TEMPLATE_H_
