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
  EXPECT_TRUE(t->has_template());
  EXPECT_THAT(t->stop(), ElementsAre("\nUser:"));
}

// The interpreter, running kPlainJinja, renders what the built-in kPlain
// renders, with and without the generation prompt.
TEST(ChatTemplateTest, PlainJinjaRendersLikeBuiltInPlain) {
  nlohmann::json config = {{"chat_template", std::string(kPlainJinja)}};
  absl::StatusOr<ChatTemplate> jinja = ChatTemplate::FromTokenizerConfig(config.dump());
  ASSERT_TRUE(jinja.ok()) << jinja.status();
  const ChatTemplate built_in;
  ASSERT_FALSE(built_in.has_template());
  const std::vector<std::vector<ChatMessage>> conversations = {
      kConversation,
      {{"user", ""}},
      {{"user", "caf\u00e9 \xf0\x9f\x9a\xa2"}, {"assistant", "line\nbreak"}},
  };
  for (const auto& messages : conversations) {
    for (bool prompt : {true, false}) {
      ChatRenderOptions options;
      options.add_generation_prompt = prompt;
      absl::StatusOr<std::string> a = jinja->Render(messages, options);
      absl::StatusOr<std::string> b = built_in.Render(messages, options);
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(*a, *b);
    }
  }
}

TEST(ChatTemplateTest, ChatMlByMarker) {
  nlohmann::json config = {
      {"chat_template",
       "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
       "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"}};
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
  nlohmann::json config = {
      {"chat_template",
       "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m.role + "
       "'<|end_header_id|>\n\n' + m.content | trim + '<|eot_id|>' }}{% endfor %}"
       "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
       "{% endif %}"},
      {"bos_token", {{"__type", "AddedToken"}, {"content", "<|begin_of_text|>"}}}};
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(config.dump());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->format(), ChatFormat::kLlama3);
  EXPECT_EQ(t->bos_token(), "<|begin_of_text|>");
  std::vector<ChatMessage> messages = {{"user", " U "}};
  EXPECT_EQ(*t->Render(messages),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
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
  // Without a default entry there is no template to use: an error, not kPlain.
  config = {{"chat_template", {{{"name", "tool_use"}, {"template", "<|im_start|>"}}}}};
  t = ChatTemplate::FromTokenizerConfig(config.dump());
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("default"));
}

TEST(ChatTemplateTest, MissingTemplateIsBuiltInPlain) {
  for (const char* config : {R"({})", R"({"chat_template": null})"}) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(config);
    ASSERT_TRUE(t.ok()) << config;
    EXPECT_EQ(t->format(), ChatFormat::kPlain) << config;
    EXPECT_FALSE(t->has_template()) << config;
  }
}

// A template without a known marker is executed, never replaced by kPlain.
TEST(ChatTemplateTest, UnknownTemplateIsExecuted) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(
      R"({"chat_template": "{{ messages[0].content }}|{{ eos_token }}", "eos_token": "</s>"})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->format(), ChatFormat::kTemplate);
  EXPECT_TRUE(t->stop().empty());
  std::vector<ChatMessage> messages = {{"user", "first"}, {"user", "second"}};
  EXPECT_EQ(*t->Render(messages), "first|</s>");
}

TEST(ChatTemplateTest, ExtraKeywordArgumentsReachTheTemplate) {
  nlohmann::json config = {
      {"chat_template",
       "{% if add_generation_prompt %}A:{% if enable_thinking is defined and enable_thinking is "
       "false %}<think></think>{% endif %}{% endif %}"}};
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(config.dump());
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<ChatMessage> messages = {{"user", "x"}};
  ChatRenderOptions options;
  EXPECT_EQ(*t->Render(messages, options), "A:");
  options.kwargs = {{"enable_thinking", false}};
  EXPECT_EQ(*t->Render(messages, options), "A:<think></think>");
  options.add_generation_prompt = false;
  EXPECT_EQ(*t->Render(messages, options), "");
}

// A prefilled reply is continued: the text ends right after its content,
// without the end of turn the template writes after it.
TEST(ChatTemplateTest, ContinueFinalMessageCutsAfterItsContent) {
  nlohmann::json config = {
      {"chat_template",
       "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
       "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"}};
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(config.dump());
  ASSERT_TRUE(t.ok()) << t.status();
  ChatRenderOptions options;
  options.add_generation_prompt = false;
  options.continue_final_message = true;
  std::vector<ChatMessage> messages = {{"user", "Where?"}, {"assistant", "The ship is "}};
  absl::StatusOr<std::string> text = t->Render(messages, options);
  ASSERT_TRUE(text.ok()) << text.status();
  // The template keeps the content whole, so its trailing space stays.
  EXPECT_EQ(*text, "<|im_start|>user\nWhere?<|im_end|>\n<|im_start|>assistant\nThe ship is ");
  // The built-in plain format is cut the same way.
  text = ChatTemplate().Render(messages, options);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "User: Where?\nAssistant: The ship is ");
}

TEST(ChatTemplateTest, ContinueFinalMessageOfATrimmingTemplateEndsAtTheTrimmedContent) {
  nlohmann::json config = {
      {"chat_template",
       "{% for m in messages %}[{{ m.role }}]{{ m.content | trim }}</t>{% endfor %}"}};
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(config.dump());
  ASSERT_TRUE(t.ok()) << t.status();
  ChatRenderOptions options;
  options.add_generation_prompt = false;
  options.continue_final_message = true;
  // The same words earlier in the conversation: the last occurrence counts.
  std::vector<ChatMessage> messages = {{"user", "one two"}, {"assistant", "  one two\n"}};
  EXPECT_EQ(*t->Render(messages, options), "[user]one two</t>[assistant]one two");
}

TEST(ChatTemplateTest, ContinueFinalMessageErrors) {
  nlohmann::json config = {{"chat_template", "{% for m in messages %}{{ m.role }};{% endfor %}"}};
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(config.dump());
  ASSERT_TRUE(t.ok()) << t.status();
  ChatRenderOptions options;
  options.continue_final_message = true;
  std::vector<ChatMessage> messages = {{"user", "x"}, {"assistant", "prefilled"}};
  // With the generation prompt still on.
  absl::StatusOr<std::string> text = t->Render(messages, options);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("add_generation_prompt"));
  // A template that does not write the content has nothing to continue.
  options.add_generation_prompt = false;
  text = t->Render(messages, options);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("does not appear"));
  EXPECT_FALSE(t->Render({}, options).ok());
}

TEST(ChatTemplateTest, UnsupportedTemplateFailsAtLoadWithLineAndConstruct) {
  nlohmann::json config = {{"chat_template", "{% for m in messages %}\n{{ m.content | wordwrap }}\n{% endfor %}"}};
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(config.dump());
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("line 2"));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("unsupported filter 'wordwrap'"));
  config = {{"chat_template", "{% include 'other.jinja' %}"}};
  t = ChatTemplate::FromTokenizerConfig(config.dump());
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("unsupported tag 'include'"));
}

TEST(ChatTemplateTest, RaiseExceptionIsARenderError) {
  nlohmann::json config = {
      {"chat_template",
       "{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}ok"}};
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(config.dump());
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<ChatMessage> good = {{"user", "x"}};
  EXPECT_EQ(*t->Render(good), "ok");
  std::vector<ChatMessage> bad = {{"assistant", "x"}};
  absl::StatusOr<std::string> text = t->Render(bad);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("user first"));
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

  // chat_template.jinja beside the config takes precedence.
  std::string jinja_path = testing::TempDir() + "/chat_template.jinja";
  {
    std::ofstream out(jinja_path);
    out << "{% for m in messages %}[{{ m.role }}]{% endfor %}\n";
  }
  t = ChatTemplate::FromTokenizerConfigFile(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->format(), ChatFormat::kTemplate);
  std::vector<ChatMessage> messages = {{"user", "x"}};
  EXPECT_EQ(*t->Render(messages), "[user]");  // one trailing newline is dropped, as jinja2 does
  {
    std::ofstream out(jinja_path);
    out << "{{ messages | nosuchfilter }}";
  }
  t = ChatTemplate::FromTokenizerConfigFile(path);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("chat_template.jinja"));
  std::remove(jinja_path.c_str());
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
