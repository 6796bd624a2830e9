// chat_template_render: renders conversations through ChatTemplate for the
// transformers parity test. Each stdin line is a JSON object {"config":
// {tokenizer_config.json's fields}, "messages": [{"role", "content"}],
// "add_generation_prompt": bool, "continue_final_message": bool, "kwargs":
// {...}}; each stdout line is {"text": "..."} or {"error": "..."}.
#include <iostream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "runtime/text/chat_template.h"

namespace {

using json = nlohmann::ordered_json;

json RenderLine(const std::string& line) {
  json request = json::parse(line, nullptr, false);
  if (request.is_discarded() || !request.is_object()) return {{"error", "bad request line"}};
  absl::StatusOr<verdict::ChatTemplate> chat =
      verdict::ChatTemplate::FromTokenizerConfig(request.value("config", json::object()).dump());
  if (!chat.ok()) return {{"error", std::string(chat.status().message())}};
  std::vector<verdict::ChatMessage> messages;
  for (const json& m : request.value("messages", json::array())) {
    messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  }
  verdict::ChatRenderOptions options;
  options.add_generation_prompt = request.value("add_generation_prompt", true);
  options.continue_final_message = request.value("continue_final_message", false);
  options.kwargs = request.value("kwargs", json::object());
  absl::StatusOr<std::string> text = chat->Render(messages, options);
  if (!text.ok()) return {{"error", std::string(text.status().message())}};
  return {{"text", *text}};
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::cout << RenderLine(line).dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    std::cout.flush();
  }
  return 0;
}
