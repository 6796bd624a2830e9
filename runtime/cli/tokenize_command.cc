#include "runtime/cli/tokenize_command.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/cli/engine_flags.h"
#include "runtime/text/chat_template.h"
#include "runtime/text/tokenizer.h"

ABSL_DECLARE_FLAG(std::string, input);

namespace verdict {

const char kTokenizeInputFormat[] =
    R"(JSON Lines on stdin (or --input FILE), one object a line:
  {"text": "..."}                  BOS added unless "add_special_tokens": false
  {"messages": [{"role", "content"}, ...]}
                                   rendered by the model's chat template; no
                                   BOS added unless "add_special_tokens": true
                                   (then: the ids /v1/chat/completions uses);
                                   "add_generation_prompt" (true),
                                   "continue_final_message" (false) and
                                   "chat_template_kwargs" ({}) as in the API
Writes one line {"ids": [...]} per line. A line that is not such an object
stops the command with exit 1 and names the line number and the field.)";

absl::Status TokenizeLines(const OpenAiApi& api, std::istream& in, std::ostream& out) {
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    absl::Status error;
    if (absl::StripAsciiWhitespace(line).empty()) {
      error = absl::InvalidArgumentError("empty line; each line must be one JSON object");
    } else if (absl::StatusOr<TokenizedPrompt> prompt = api.Tokenize(line, "text"); prompt.ok()) {
      nlohmann::json ids = {{"ids", prompt->token_ids}};
      if (prompt->return_token_strs) {
        nlohmann::json pieces = nlohmann::json::array();
        for (int32_t id : prompt->token_ids) pieces.push_back(api.tokenizer().IdToPiece(id));
        ids["token_strs"] = std::move(pieces);
      }
      out << ids.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      continue;
    } else {
      error = prompt.status();
    }
    return absl::Status(error.code(), absl::StrCat("line ", number, ": ", error.message()));
  }
  return absl::OkStatus();
}

int RunTokenizeCommand(absl::Span<char* const> positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "verdict tokenize: unexpected argument '%s'\n", positional[0]);
    return 2;
  }
  const std::string model_dir = TargetModelDirFromFlags();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(TokenizerDirFromFlags());
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "verdict tokenize: %s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<ChatTemplate> chat =
      ChatTemplate::FromTokenizerConfigFile(model_dir + "/tokenizer_config.json");
  if (!chat.ok()) {
    std::fprintf(stderr, "verdict tokenize: chat template: %s\n",
                 chat.status().ToString().c_str());
    return 1;
  }
  // A line may name the model by its directory; no context limit applies
  // to counting tokens.
  OpenAiApi api(ServedModel{model_dir, 0}, **tokenizer, *std::move(chat));

  const std::string input = absl::GetFlag(FLAGS_input);
  std::ifstream file;
  if (!input.empty()) {
    file.open(input);
    if (!file) {
      std::fprintf(stderr, "verdict tokenize: cannot read --input %s\n", input.c_str());
      return 1;
    }
  }
  absl::Status s = TokenizeLines(api, input.empty() ? std::cin : file, std::cout);
  std::cout.flush();
  if (!s.ok()) {
    std::fprintf(stderr, "verdict tokenize: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace verdict
