#include "runtime/text/chat_template.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace verdict {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::vector<ChatMessage> kConversation = {
    {"system", "You are terse."},
    {"user", "Hello?"},
    {"assistant", "Hi."},
    {"user", "Where is the ship?"},
};

TEST(ChatTemplateTest, DefaultIsPlainAndRendersDocumentedFormat) {
  ChatTemplate t;
  EXPECT_EQ(t.format(), ChatFormat::kPlain);
  absl::StatusOr<std::string> text = t.Render(kConversation);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "System: You are terse.\n"
            "User: Hello?\n"
            "Assistant: Hi.\n"
            "User: Where is the ship?\n"
            "Assistant:");
  EXPECT_THAT(t.stop(), ElementsAre("\nUser:"));
}

// The chat_template of models/target and models/draft, verbatim: the
// default format, written in Jinja.
TEST(ChatTemplateTest, BundledModelsTemplateIsPlain) {
  const std::string bundled =
      "{% for message in messages %}{{ message['role'] | capitalize }}: "
      "{{ message['content'] }}\n{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}";
  EXPECT_EQ(bundled, kPlainJinja);
  nlohmann::json config = {{"tokenizer_class", "LlamaTokenizer"}, {"chat_template", bundled}};
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(config.dump());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->format(), ChatFormat::kPlain);
}

TEST(ChatTemplateTest, ChatMlByMarker) {
  nlohmann::json config = {
      {"chat_template",
       "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"}};
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(config.dump());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->format(), ChatFormat::kChatMl);
  std::vector<ChatMessage> messages = {{"system", "S"}, {"user", "U"}};
  EXPECT_EQ(*t->Render(messages),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_THAT(t->stop(), ElementsAre("<|im_end|>"));
}

TEST(ChatTemplateTest, Llama3ByMarker) {
  nlohmann::json config = {{"chat_template", "{{ '<|start_header_id|>' + m.role }}"},
                           {"bos_token", "<|begin_of_text|>"}};
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(config.dump());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->format(), ChatFormat::kLlama3);
  std::vector<ChatMessage> messages = {{"user", "U"}};
  EXPECT_EQ(*t->Render(messages),
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_THAT(t->stop(), ElementsAre("<|eot_id|>"));
}

TEST(ChatTemplateTest, NamedTemplateListUsesDefaultEntry) {
  nlohmann::json config = {
      {"chat_template",
       {{{"name", "tool_use"}, {"template", "<|start_header_id|>"}},
        {{"name", "default"}, {"template", "<|im_start|>"}}}}};
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(config.dump());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->format(), ChatFormat::kChatMl);
}

TEST(ChatTemplateTest, UnknownOrMissingTemplateFallsBackToPlain) {
  for (const char* config : {R"({})", R"({"chat_template": null})",
                             R"({"chat_template": "{{ messages[0].content }}"})"}) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(config);
    ASSERT_TRUE(t.ok()) << config;
    EXPECT_EQ(t->format(), ChatFormat::kPlain) << config;
  }
  // kPlainJinja is the default format written for other tools.
  nlohmann::json config = {{"chat_template", std::string(kPlainJinja)}};
  EXPECT_EQ(ChatTemplate::FromTokenizerConfig(config.dump())->format(), ChatFormat::kPlain);
}

TEST(ChatTemplateTest, BadConfigIsAnError) {
  EXPECT_FALSE(ChatTemplate::FromTokenizerConfig("not json").ok());
  EXPECT_FALSE(ChatTemplate::FromTokenizerConfig("[1]").ok());
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(R"({"chat_template": 3})");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("chat_template"));
}

TEST(ChatTemplateTest, FileMissingGivesDefaultFilePresentIsRead) {
  EXPECT_EQ(ChatTemplate::FromTokenizerConfigFile("/nonexistent/tokenizer_config.json")->format(),
            ChatFormat::kPlain);
  std::string path = testing::TempDir() + "/tokenizer_config.json";
  {
    std::ofstream out(path);
    out << R"({"chat_template": "<|im_start|>"})";
  }
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfigFile(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->format(), ChatFormat::kChatMl);
  std::remove(path.c_str());
}

TEST(ChatTemplateTest, UnknownRoleIsRejected) {
  std::vector<ChatMessage> messages = {{"tool", "x"}};
  absl::StatusOr<std::string> text = ChatTemplate().Render(messages);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("'tool'"));
}

}  // namespace
}  // namespace verdict
