#include "runtime/cli/tokenize_command.h"

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/text/chat_template.h"
#include "runtime/text/tokenizer.h"

namespace verdict {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The bundled target's tokenizer and chat template, as the command loads them.
class TokenizeLinesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer("models/target");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
    absl::StatusOr<ChatTemplate> chat =
        ChatTemplate::FromTokenizerConfigFile("models/target/tokenizer_config.json");
    ASSERT_TRUE(chat.ok()) << chat.status();
    chat_ = *chat;
    api_ = std::make_unique<OpenAiApi>(ServedModel{"models/target", 0}, *tokenizer_, chat_);
  }

  // The ids of each output line.
  std::vector<std::vector<int32_t>> Run(const std::string& input, absl::Status* status) {
    std::istringstream in(input);
    std::ostringstream out;
    *status = TokenizeLines(*api_, in, out);
    std::vector<std::vector<int32_t>> lines;
    for (absl::string_view line : absl::StrSplit(out.str(), '\n', absl::SkipEmpty())) {
      lines.push_back(json::parse(line).at("ids").get<std::vector<int32_t>>());
    }
    return lines;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  ChatTemplate chat_;
  std::unique_ptr<OpenAiApi> api_;
};

TEST_F(TokenizeLinesTest, TextAndMessagesLines) {
  const std::string text = "It is a truth universally acknowledged";
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Who?"}};
  const std::string input =
      json({{"text", text}}).dump() + "\n" +
      json({{"text", text}, {"add_special_tokens", false}}).dump() + "\n" +
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who?"}]})"
      "\n" +
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who?"}], "add_special_tokens": true, "add_generation_prompt": false})"
      "\n";
  absl::Status status;
  std::vector<std::vector<int32_t>> ids = Run(input, &status);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[0], *tokenizer_->Encode(text, /*add_bos=*/true));
  EXPECT_EQ(ids[1], *tokenizer_->Encode(text, /*add_bos=*/false));
  ASSERT_NE(ids[0], ids[1]);
  EXPECT_EQ(ids[2], *tokenizer_->Encode(*chat_.Render(messages), /*add_bos=*/false));
  ChatRenderOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  EXPECT_EQ(ids[3], *tokenizer_->Encode(*chat_.Render(messages, no_prompt), /*add_bos=*/true));
}

TEST_F(TokenizeLinesTest, AMalformedLineStopsWithItsNumberAndField) {
  struct Case {
    std::string line;
    std::string in_message;
  };
  const std::vector<Case> cases = {
      {R"({"text": 5})", "'text' must be a string"},
      {R"({"text": "x", "add_special_tokens": "yes"})", "'add_special_tokens' must be a boolean"},
      {R"({"messages": [{"content": "hi"}]})", "'messages[0].role' must be a string"},
      {R"({"prompt": "x"})", "'text' or 'messages' is required"},
      {R"({"text": "x", "txet": 1})", "unknown field 'txet'"},
      {R"({"text": "x")", "not valid JSON"},
      {"", "empty line"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.line);
    absl::Status status;
    std::vector<std::vector<int32_t>> ids =
        Run("{\"text\": \"a\"}\n{\"text\": \"b\"}\n" + c.line + "\n{\"text\": \"c\"}\n", &status);
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), StartsWith("line 3: "));
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.in_message));
    // The lines before it were written; none after it.
    EXPECT_EQ(ids.size(), 2u);
  }
}

}  // namespace
}  // namespace verdict
