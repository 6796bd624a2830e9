// Turns the messages of a /v1/chat/completions request into prompt text.
//
// A checkpoint's chat template (tokenizer_config.json's `chat_template`, or
// chat_template.jinja beside it) is executed by verdict's Jinja interpreter
// (runtime/text/jinja), rendering what transformers' apply_chat_template
// renders; a template it cannot execute is an error when it is loaded, never
// replaced by another format. A marker in the template names the strings
// that end the assistant's turn for the formats below; a template without a
// known marker is kTemplate and adds no stop strings (the tokenizer's EOS
// still ends generation). Without any template the documented default,
// kPlain, is rendered by the built-in code:
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
//                      "<|eot_id|>". The tokenizer adds BOS, so the built-in
//                      format does not write <|begin_of_text|>.
//   kTemplate          The checkpoint's own template, no known marker.
#ifndef VERDICT_RUNTIME_TEXT_CHAT_TEMPLATE_H_
#define VERDICT_RUNTIME_TEXT_CHAT_TEMPLATE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"

namespace verdict {

// One chat message; `role` is "system", "user" or "assistant" (the API layer
// maps OpenAI's "developer" to "system" before rendering).
struct ChatMessage {
  std::string role;
  std::string content;
};

enum class ChatFormat { kPlain, kChatMl, kLlama3, kTemplate };

const char* ChatFormatName(ChatFormat format);

// kPlain written as a Jinja chat_template (renders what Render renders).
extern const char kPlainJinja[];

// What apply_chat_template takes besides the messages.
struct ChatRenderOptions {
  bool add_generation_prompt = true;
  // Render the conversation so that the model goes on writing the final
  // message (a prefilled assistant reply): the text is cut right after that
  // message's content, dropping whatever the template writes to close the
  // turn, as transformers does (apply_chat_template's
  // continue_final_message). Excludes add_generation_prompt.
  bool continue_final_message = false;
  // Extra keyword arguments for the template (e.g. {"enable_thinking":
  // false}); they override the special tokens of the same name.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // The documented default, kPlain.
  ChatTemplate() : ChatTemplate(ChatFormat::kPlain) {}
  // A built-in format (kPlain, kChatMl, kLlama3), rendered without Jinja.
  explicit ChatTemplate(ChatFormat format);

  // The checkpoint's template from the text of a tokenizer_config.json
  // (`template_override`, when given, is the text of chat_template.jinja,
  // which takes precedence as in transformers). HF's list form ([{"name",
  // "template"}]) uses the entry named "default". The special tokens
  // (bos_token, eos_token, ...) become template variables. A missing or
  // null `chat_template` gives kPlain (see has_template()).
  // Errors (InvalidArgument): the text is not a JSON object,
  // `chat_template` has a type HF does not define, or the template does
  // not compile (its line and the construct are named).
  static absl::StatusOr<ChatTemplate> FromTokenizerConfig(
      absl::string_view config_json, const std::string* template_override = nullptr);

  // As FromTokenizerConfig, reading the file and chat_template.jinja in the
  // same directory; a missing tokenizer_config.json counts as {} (a model
  // directory need not carry one).
  static absl::StatusOr<ChatTemplate> FromTokenizerConfigFile(const std::string& path);

  ChatFormat format() const { return format_; }
  // Whether Render executes a checkpoint's Jinja template (false: the
  // built-in format() renders).
  bool has_template() const { return compiled_ != nullptr; }
  // The tokenizer's BOS text as the template sees it ("" when unset).
  const std::string& bos_token() const { return bos_token_; }

  // Prompt text for `messages`, with the cue for the assistant's turn.
  // Errors (InvalidArgument): for a built-in format, a role other than
  // system/user/assistant; for a template, what it raises
  // (raise_exception) or fails on at run time; with
  // continue_final_message, add_generation_prompt set too, no messages, or
  // a final message whose content (stripped) is not in the rendered text.
  absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages) const;
  absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages,
                                     const ChatRenderOptions& options) const;

  // Strings that end the assistant's turn in this format; the API layer
  // adds them to every chat request's stop strings.
  const std::vector<std::string>& stop() const { return stop_; }

 private:
  struct Compiled;

  absl::StatusOr<std::string> RenderConversation(absl::Span<const ChatMessage> messages,
                                                 const ChatRenderOptions& options) const;
  absl::StatusOr<std::string> RenderBuiltIn(absl::Span<const ChatMessage> messages,
                                            bool add_generation_prompt) const;

  ChatFormat format_;
  std::vector<std::string> stop_;
  std::string bos_token_;
  std::shared_ptr<const Compiled> compiled_;  // shared: copies render the same template
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_TEXT_CHAT_TEMPLATE_H_
