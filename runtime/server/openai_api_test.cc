#include "runtime/server/openai_api.h"

#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/server/serving_test_util.h"

namespace verdict {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr int kContext = 64;

class OpenAiApiTest : public ::testing::Test {
 protected:
  OpenAiApiTest() : api_(ServedModel{"tiny", kContext, 8, 1700000000}, tokenizer_, ChatTemplate()) {}

  ApiRequest Completion(const json& body) {
    absl::StatusOr<ApiRequest> r = api_.ParseCompletion(body.dump());
    EXPECT_TRUE(r.ok()) << body.dump() << ": " << r.status();
    return r.ok() ? *r : ApiRequest();
  }
  ApiRequest Chat(const json& body) {
    absl::StatusOr<ApiRequest> r = api_.ParseChat(body.dump());
    EXPECT_TRUE(r.ok()) << body.dump() << ": " << r.status();
    return r.ok() ? *r : ApiRequest();
  }

  ByteTokenizer tokenizer_;
  OpenAiApi api_;
};

std::vector<int32_t> Ids(const std::string& text) {
  std::vector<int32_t> ids = {ByteTokenizer::kBos};
  for (char c : text) ids.push_back(ByteTokenizer::IdOf(c));
  return ids;
}

TEST_F(OpenAiApiTest, CompletionDefaults) {
  ApiRequest r = Completion({{"model", "tiny"}, {"prompt", "Hi"}});
  EXPECT_EQ(r.endpoint, ApiEndpoint::kCompletions);
  EXPECT_EQ(r.generation.prompt_token_ids, Ids("Hi"));
  const SamplingParams& p = r.generation.params;
  EXPECT_EQ(p.max_tokens, kDefaultCompletionMaxTokens);
  EXPECT_EQ(p.temperature, 1.0f);
  EXPECT_EQ(p.top_p, 1.0f);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_FALSE(p.seed.has_value());
  EXPECT_TRUE(p.speculation);
  EXPECT_EQ(p.max_draft_tokens, -1);
  EXPECT_EQ(p.logprobs, 0);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.logprobs);
  EXPECT_THAT(r.ignored_fields, IsEmpty());
  // The default shrinks to the room left in the context.
  ApiRequest near_full = Completion({{"prompt", std::string(kContext - 5, 'x')}});
  EXPECT_EQ(near_full.generation.params.max_tokens, 4);
}

TEST_F(OpenAiApiTest, CompletionPromptForms) {
  EXPECT_EQ(Completion({{"prompt", {7, 8, 9}}}).generation.prompt_token_ids,
            (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(Completion({{"prompt", {{7, 8}}}}).generation.prompt_token_ids,
            (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(Completion({{"prompt", {"ab"}}}).generation.prompt_token_ids, Ids("ab"));
  // An empty text prompt is BOS alone.
  EXPECT_EQ(Completion({{"prompt", ""}}).generation.prompt_token_ids, Ids(""));
}

TEST_F(OpenAiApiTest, CompletionAllParameters) {
  json body = {{"model", "tiny"},
               {"prompt", "Hi"},
               {"max_tokens", 10},
               {"temperature", 0},
               {"top_p", 0.5},
               {"min_p", 0.05},
               {"top_k", -1},
               {"seed", 18446744073709551615ull},
               {"stop", {"\n", "END"}},
               {"stop_token_ids", {2, 259}},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"logprobs", 1},
               {"speculation", false},
               {"max_draft_tokens", 4},
               {"ignore_eos", true},
               {"n", 1},
               {"best_of", 1},
               {"echo", false},
               {"presence_penalty", 0},
               {"frequency_penalty", 0.0},
               {"logit_bias", json::object()},
               {"suffix", nullptr},
               {"user", "someone"}};
  ApiRequest r = Completion(body);
  const SamplingParams& p = r.generation.params;
  EXPECT_EQ(p.max_tokens, 10);
  EXPECT_EQ(p.temperature, 0.0f);
  EXPECT_EQ(p.top_p, 0.5f);
  EXPECT_EQ(p.min_p, 0.05f);
  EXPECT_EQ(p.top_k, 0);
  ASSERT_TRUE(p.seed.has_value());
  EXPECT_EQ(*p.seed, std::numeric_limits<uint64_t>::max());
  EXPECT_THAT(p.stop, ElementsAre("\n", "END"));
  EXPECT_THAT(p.stop_token_ids, ElementsAre(2, 259));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 1);
  EXPECT_EQ(p.logprobs, 1);
  EXPECT_FALSE(p.speculation);
  EXPECT_EQ(p.max_draft_tokens, 4);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_THAT(r.ignored_fields, IsEmpty());

  // logprobs 0 still reports the sampled token's logprob.
  ApiRequest zero = Completion({{"prompt", "Hi"}, {"logprobs", 0}, {"stop", "x"}, {"seed", -3}});
  EXPECT_TRUE(zero.logprobs);
  EXPECT_EQ(zero.generation.params.logprobs, 1);
  EXPECT_THAT(zero.generation.params.stop, ElementsAre("x"));
  EXPECT_EQ(*zero.generation.params.seed, static_cast<uint64_t>(int64_t{-3}));
}

TEST_F(OpenAiApiTest, CheckpointSamplingDefaultsApplyWhereTheRequestIsSilent) {
  api_.set_sampling_defaults({.temperature = 0.6f, .top_p = 0.9f, .top_k = 20, .min_p = 0.1f});
  ApiRequest silent = Completion({{"prompt", "Hi"}});
  EXPECT_EQ(silent.generation.params.min_p, 0.1f);
  EXPECT_EQ(silent.generation.params.temperature, 0.6f);
  EXPECT_EQ(silent.generation.params.top_p, 0.9f);
  EXPECT_EQ(silent.generation.params.top_k, 20);
  ApiRequest chat = Chat({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_p", 0.5}});
  EXPECT_EQ(chat.generation.params.temperature, 0.6f);
  EXPECT_EQ(chat.generation.params.top_p, 0.5f);
  EXPECT_EQ(chat.generation.params.top_k, 20);
  ApiRequest given = Completion({{"prompt", "Hi"}, {"temperature", 0}, {"top_k", 0}});
  EXPECT_EQ(given.generation.params.temperature, 0.0f);
  EXPECT_EQ(given.generation.params.top_k, 0);
}

// A checkpoint's template that writes BOS itself gets one BOS, not two:
// the tokenizer adds it, so the rendered text's copy is dropped.
TEST_F(OpenAiApiTest, TemplateWrittenBosIsNotDoubled) {
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromTokenizerConfig(
      R"({"bos_token": "<s>",
          "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}"})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  OpenAiApi api(ServedModel{"tiny", kContext, 8, 1700000000}, tokenizer_, *chat);
  absl::StatusOr<ApiRequest> r =
      api.ParseChat(R"({"messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generation.prompt_token_ids, *tokenizer_.Encode("[hi]", /*add_bos=*/true));

  // BOS text elsewhere in the prompt is the template's business.
  absl::StatusOr<ChatTemplate> later = ChatTemplate::FromTokenizerConfig(
      R"({"bos_token": "<s>",
          "chat_template": "{% for m in messages %}[{{ m.content }}]{% endfor %}{{ bos_token }}"})");
  ASSERT_TRUE(later.ok()) << later.status();
  OpenAiApi api_later(ServedModel{"tiny", kContext, 8, 1700000000}, tokenizer_, *later);
  absl::StatusOr<ApiRequest> kept =
      api_later.ParseChat(R"({"messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->generation.prompt_token_ids, *tokenizer_.Encode("[hi]<s>", /*add_bos=*/true));
}

// A tokenizer whose Encode adds no BOS (a tokenizer.json with a byte-level
// post-processor, as SmolLM2's): BOS is a token like any other to it.
class NoBosTokenizer : public ByteTokenizer {
 public:
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool) const override {
    return ByteTokenizer::Encode(text, /*add_bos=*/false);
  }
};

// With such a tokenizer the template's BOS is the prompt's only one, so it
// stays: SmolLM2's ChatML template starts with its BOS, <|im_start|>.
TEST_F(OpenAiApiTest, TemplateWrittenBosStaysWhenTheTokenizerAddsNone) {
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromTokenizerConfig(
      R"({"bos_token": "<s>",
          "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}"})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  NoBosTokenizer no_bos;
  OpenAiApi api(ServedModel{"tiny", kContext, 8, 1700000000}, no_bos, *chat);
  absl::StatusOr<ApiRequest> r =
      api.ParseChat(R"({"messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generation.prompt_token_ids, *no_bos.Encode("<s>[hi]", /*add_bos=*/false));
}

TEST_F(OpenAiApiTest, NullMeansNotGiven) {
  ApiRequest r = Completion({{"prompt", "Hi"}, {"max_tokens", nullptr}, {"temperature", nullptr},
                             {"stop", nullptr}, {"n", nullptr}, {"model", nullptr}});
  EXPECT_EQ(r.generation.params.max_tokens, kDefaultCompletionMaxTokens);
  EXPECT_EQ(r.generation.params.temperature, 1.0f);
}

TEST_F(OpenAiApiTest, UnknownFieldsAreReportedWhenAccepted) {
  api_.set_accept_unknown_fields(true);
  ApiRequest r = Completion({{"prompt", "Hi"},
                             {"typical_p", 0.1},
                             {"repetition_penalty", 1.1},
                             {"stream", true},
                             {"stream_options", {{"include_usage", false}, {"continuous", true}}}});
  EXPECT_THAT(r.ignored_fields,
              UnorderedElementsAre("typical_p", "repetition_penalty", "stream_options.continuous"));
  ApiRequest c = Chat({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"guided_json", "{}"}});
  EXPECT_THAT(c.ignored_fields, ElementsAre("guided_json"));
}

TEST_F(OpenAiApiTest, ChatRendersTemplateAndAddsItsStop) {
  json messages = {{{"role", "developer"}, {"content", "Hush."}},
                   {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hi"}},
                                                   {{"type", "text"}, {"text", "yo"}}}}},
                   {{"role", "assistant"}, {"content", nullptr}},
                   {{"role", "user"}, {"content", "Go"}, {"name", "bob"}}};
  ApiRequest r = Chat({{"model", "tiny"}, {"messages", messages}, {"stop", "END"}});
  EXPECT_EQ(r.endpoint, ApiEndpoint::kChatCompletions);
  EXPECT_EQ(r.generation.prompt_token_ids,
            Ids("System: Hush.\nUser: Hi\nyo\nAssistant: \nUser: Go\nAssistant:"));
  EXPECT_THAT(r.generation.params.stop, ElementsAre("END", "\nUser:"));
  // Chat's default max_tokens is the room left in the context.
  EXPECT_EQ(r.generation.params.max_tokens,
            kContext - static_cast<int>(r.generation.prompt_token_ids.size()));
}

TEST_F(OpenAiApiTest, ChatParameters) {
  json messages = {{{"role", "user"}, {"content", "Hi"}}};
  ApiRequest r = Chat({{"messages", messages},
                       {"max_tokens", 5},
                       {"max_completion_tokens", 7},
                       {"logprobs", true},
                       {"top_logprobs", 1},
                       {"tools", json::array()},
                       {"tool_choice", "none"},
                       {"response_format", {{"type", "text"}}},
                       {"parallel_tool_calls", true},
                       {"store", false},
                       {"metadata", {{"k", "v"}}},
                       {"service_tier", "auto"},
                       {"stop", {"\nUser:"}}});
  EXPECT_EQ(r.generation.params.max_tokens, 7);  // the newer name wins
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 1);
  EXPECT_EQ(r.generation.params.logprobs, 1);
  EXPECT_THAT(r.generation.params.stop, ElementsAre("\nUser:"));  // not added twice
  EXPECT_THAT(r.ignored_fields, IsEmpty());
}

// The chat template arguments reach the rendering: no generation prompt, a
// continued final message (the default plain format's "Assistant: " line,
// cut after the prefilled words), and extra template variables.
TEST_F(OpenAiApiTest, ChatTemplateArguments) {
  json ask = {{{"role", "user"}, {"content", "Where?"}}};
  EXPECT_EQ(Chat({{"messages", ask}, {"add_generation_prompt", false}}).generation.prompt_token_ids,
            Ids("User: Where?\n"));
  json prefilled = {{{"role", "user"}, {"content", "Where?"}},
                    {{"role", "assistant"}, {"content", "The ship is "}}};
  const std::vector<int32_t> continued = Ids("User: Where?\nAssistant: The ship is ");
  // continue_final_message alone turns the generation prompt off.
  EXPECT_EQ(Chat({{"messages", prefilled}, {"continue_final_message", true}})
                .generation.prompt_token_ids,
            continued);
  EXPECT_EQ(Chat({{"messages", prefilled},
                  {"continue_final_message", true},
                  {"add_generation_prompt", false}})
                .generation.prompt_token_ids,
            continued);

  absl::StatusOr<ChatTemplate> thinking = ChatTemplate::FromTokenizerConfig(
      R"({"chat_template": "{% for m in messages %}[{{ m.content }}]{% endfor %}{% if add_generation_prompt %}A:{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}"})");
  ASSERT_TRUE(thinking.ok()) << thinking.status();
  OpenAiApi api(ServedModel{"tiny", kContext, 8, 1700000000}, tokenizer_, *thinking);
  absl::StatusOr<ApiRequest> r = api.ParseChat(
      R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generation.prompt_token_ids, Ids("[x]A:<think></think>"));
  r = api.ParseChat(
      R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"enable_thinking": true}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generation.prompt_token_ids, Ids("[x]A:"));
  // A final message the template does not write cannot be continued.
  absl::StatusOr<ChatTemplate> silent =
      ChatTemplate::FromTokenizerConfig(R"({"chat_template": "{{ messages | length }}"})");
  ASSERT_TRUE(silent.ok()) << silent.status();
  OpenAiApi silent_api(ServedModel{"tiny", kContext, 8, 1700000000}, tokenizer_, *silent);
  r = silent_api.ParseChat(
      R"({"messages": [{"role": "assistant", "content": "prefilled"}], "continue_final_message": true})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(HttpStatusFor(r.status()), 400);
  EXPECT_THAT(ErrorBody(r.status()), HasSubstr(R"("param":"messages")"));
}

TEST_F(OpenAiApiTest, TokenizeText) {
  absl::StatusOr<ApiReply> reply = api_.TokenizeReply(R"({"model": "tiny", "prompt": "Hi!"})");
  ASSERT_TRUE(reply.ok()) << reply.status();
  json body = json::parse(reply->body);
  EXPECT_EQ(body["tokens"].get<std::vector<int32_t>>(), Ids("Hi!"));
  EXPECT_EQ(body["count"], 4);
  EXPECT_EQ(body["max_model_len"], kContext);
  EXPECT_FALSE(body.contains("token_strs"));
  // Without special tokens the text alone; the pieces when asked for.
  reply = api_.TokenizeReply(
      R"({"prompt": "Hi", "add_special_tokens": false, "return_token_strs": true})");
  ASSERT_TRUE(reply.ok()) << reply.status();
  body = json::parse(reply->body);
  std::vector<int32_t> text_only = {ByteTokenizer::IdOf('H'), ByteTokenizer::IdOf('i')};
  EXPECT_EQ(body["tokens"].get<std::vector<int32_t>>(), text_only);
  EXPECT_EQ(body["count"], 2);
  EXPECT_EQ(body["token_strs"], json({tokenizer_.IdToPiece(text_only[0]),
                                      tokenizer_.IdToPiece(text_only[1])}));
  // What /v1/completions generates from.
  EXPECT_EQ(api_.Tokenize(R"({"prompt": "Once upon"})")->token_ids,
            Completion({{"prompt", "Once upon"}}).generation.prompt_token_ids);
}

TEST_F(OpenAiApiTest, TokenizeMessages) {
  json messages = {{{"role", "system"}, {"content", "Hush."}},
                   {{"role", "user"}, {"content", "Where?"}}};
  // vLLM's default for a conversation: no special tokens added.
  absl::StatusOr<TokenizedPrompt> t = api_.Tokenize(json({{"messages", messages}}).dump());
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<int32_t> expected = Ids("System: Hush.\nUser: Where?\nAssistant:");
  expected.erase(expected.begin());  // no BOS
  EXPECT_EQ(t->token_ids, expected);
  // With them: exactly the chat completion's prompt, template arguments included.
  for (const json& extra : {json::object(), json({{"add_generation_prompt", false}}),
                            json({{"continue_final_message", true}})}) {
    json request = {{"messages", messages}};
    request.update(extra);
    ApiRequest chat = Chat(request);
    request["add_special_tokens"] = true;
    t = api_.Tokenize(request.dump());
    ASSERT_TRUE(t.ok()) << request.dump() << ": " << t.status();
    EXPECT_EQ(t->token_ids, chat.generation.prompt_token_ids) << request.dump();
  }
  // A template's BOS text stays text without special tokens, and becomes
  // the one BOS with them.
  absl::StatusOr<ChatTemplate> with_bos = ChatTemplate::FromTokenizerConfig(
      R"({"bos_token": "<s>", "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}"})");
  ASSERT_TRUE(with_bos.ok()) << with_bos.status();
  OpenAiApi api(ServedModel{"tiny", kContext, 8, 1700000000}, tokenizer_, *with_bos);
  const std::string hi = R"({"messages": [{"role": "user", "content": "hi"}])";
  EXPECT_EQ(api.Tokenize(hi + "}")->token_ids, *tokenizer_.Encode("<s>[hi]", false));
  EXPECT_EQ(api.Tokenize(hi + R"(, "add_special_tokens": true})")->token_ids,
            *tokenizer_.Encode("[hi]", true));
  // The CLI's lines name the text "text".
  EXPECT_EQ(api_.Tokenize(R"({"text": "Hi"})", "text")->token_ids, Ids("Hi"));
}

TEST_F(OpenAiApiTest, Detokenize) {
  std::vector<int32_t> ids = Ids("Hi there");
  json request = {{"model", "tiny"}, {"tokens", ids}};
  absl::StatusOr<ApiReply> reply = api_.DetokenizeReply(request.dump());
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(json::parse(reply->body), json({{"prompt", "Hi there"}}));
  reply = api_.DetokenizeReply(R"({"tokens": []})");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(json::parse(reply->body), json({{"prompt", ""}}));
}

struct BadTokenizerRequest {
  bool detokenize;
  std::string body;
  int http_status;
  std::string param;
  std::string in_message;
};

TEST_F(OpenAiApiTest, BadTokenizeAndDetokenizeRequestsNameTheField) {
  const std::vector<BadTokenizerRequest> cases = {
      {false, "{", 400, "", "not valid JSON"},
      {false, "[]", 400, "", "JSON object"},
      {false, R"({})", 400, "prompt", "'prompt' or 'messages' is required"},
      {false, R"({"prompt": "x", "messages": []})", 400, "messages", "not both"},
      {false, R"({"prompt": 5})", 400, "prompt", "a string"},
      {false, R"({"prompt": [1, 2]})", 400, "prompt", "a string"},
      {false, R"({"prompt": "x", "add_special_tokens": "no"})", 400, "add_special_tokens",
       "a boolean"},
      {false, R"({"prompt": "x", "return_token_strs": 1})", 400, "return_token_strs", "a boolean"},
      {false, R"({"prompt": "x", "model": "other"})", 404, "model", "other"},
      {false, R"({"prompt": "x", "add_generation_prompt": true})", 400, "add_generation_prompt",
       "unknown field"},
      {false, R"({"prompt": "x", "max_tokens": 3})", 400, "max_tokens", "unknown field"},
      {false, R"({"messages": []})", 400, "messages", "must not be empty"},
      {false, R"({"messages": [{"role": "user"}]})", 400, "messages[0].content", "required"},
      {false, R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true, "add_generation_prompt": true})",
       400, "continue_final_message", "cannot both be true"},
      {false, R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 3})",
       400, "chat_template_kwargs", "an object"},
      {true, R"({})", 400, "tokens", "required"},
      {true, R"({"tokens": "abc"})", 400, "tokens", "an array"},
      {true, R"({"tokens": [5, 260]})", 400, "tokens[1]", "outside the vocabulary [0, 260)"},
      {true, R"({"tokens": [-1]})", 400, "tokens[0]", "outside the vocabulary"},
      {true, R"({"tokens": [5, 1.5]})", 400, "tokens[1]", "a token id (integer)"},
      {true, R"({"tokens": [5], "skip_special_tokens": true})", 400, "skip_special_tokens",
       "unknown field"},
      {true, R"({"tokens": [5], "model": "other"})", 404, "model", "other"},
  };
  for (const BadTokenizerRequest& c : cases) {
    SCOPED_TRACE(c.body);
    absl::StatusOr<ApiReply> r =
        c.detokenize ? api_.DetokenizeReply(c.body) : api_.TokenizeReply(c.body);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(HttpStatusFor(r.status()), c.http_status);
    json error = json::parse(ErrorBody(r.status()));
    EXPECT_THAT(error["error"]["message"].get<std::string>(), HasSubstr(c.in_message));
    if (c.param.empty()) {
      EXPECT_TRUE(error["error"]["param"].is_null());
    } else {
      EXPECT_EQ(error["error"]["param"], c.param);
    }
  }
  // Accepted unknown fields are reported instead.
  api_.set_accept_unknown_fields(true);
  absl::StatusOr<ApiReply> r = api_.TokenizeReply(R"({"prompt": "x", "max_tokens": 3})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->ignored_fields, ElementsAre("max_tokens"));
}

struct BadRequest {
  bool chat;
  std::string body;
  int http_status;
  std::string param;         // "" expects null
  std::string in_message;    // a substring of the message
};

// Each malformed request is answered with the right status and a message
// that names the field at fault.
// Nesting is bounded on every endpoint: the body's object and 63 levels
// below it parse; one level more is a 400 that says so (the handlers run on
// small worker stacks, and 200,000 levels in chat_template_kwargs crashed
// the server).
TEST_F(OpenAiApiTest, BodiesNestedDeeperThanTheLimitAreRefused) {
  const auto nested = [](int levels) {  // `levels` arrays, one inside the next
    return std::string(levels, '[') + std::string(levels, ']');
  };
  const std::string chat = R"({"messages": [{"role": "user", "content": "x"}], )";
  const int below = kMaxRequestJsonDepth - 1;  // the body's own object is one level
  absl::StatusOr<ApiRequest> fits =
      api_.ParseChat(chat + R"("chat_template_kwargs": {"x": )" + nested(below - 1) + "}}");
  ASSERT_TRUE(fits.ok()) << fits.status();
  const std::vector<std::string> deep = {
      chat + R"("chat_template_kwargs": {"x": )" + nested(below) + "}}",
      chat + R"("chat_template_kwargs": {"x": )" + nested(200000) + "}}",
      R"({"prompt": "x", "stop": )" + nested(kMaxRequestJsonDepth) + "}",
  };
  for (const std::string& body : deep) {
    for (bool is_chat : {true, false}) {
      absl::StatusOr<ApiRequest> r = is_chat ? api_.ParseChat(body) : api_.ParseCompletion(body);
      ASSERT_FALSE(r.ok()) << body.substr(0, 120);
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(r.status().message()),
                  HasSubstr(absl::StrCat("deeper than ", kMaxRequestJsonDepth, " levels")));
    }
  }
  const std::string deep_tokenize = R"({"prompt": "x", "x": )" + nested(100000) + "}";
  EXPECT_THAT(std::string(api_.TokenizeReply(deep_tokenize).status().message()),
              HasSubstr("deeper than"));
  EXPECT_THAT(std::string(api_.DetokenizeReply(deep_tokenize).status().message()),
              HasSubstr("deeper than"));
}

TEST_F(OpenAiApiTest, MalformedRequestsNameTheField) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  const std::vector<BadRequest> cases = {
      {false, "", 400, "", "not valid JSON"},
      {false, "{", 400, "", "not valid JSON"},
      {false, R"({"prompt": "x",})", 400, "", "line 1"},
      {false, "[1, 2]", 400, "", "JSON object"},
      {false, "\"text\"", 400, "", "JSON object"},
      {false, R"({"model": "gpt-4", "prompt": "x"})", 404, "model", "gpt-4"},
      {false, R"({"model": 5, "prompt": "x"})", 400, "model", "'model' must be a string"},
      {false, R"({})", 400, "prompt", "'prompt' is required"},
      {false, R"({"prompt": 5})", 400, "prompt", "'prompt' must be a string or a list"},
      {false, R"({"prompt": []})", 400, "prompt", "must not be empty"},
      {false, R"({"prompt": ["a", "b"]})", 400, "prompt", "2 prompts"},
      {false, R"({"prompt": [1, "a"]})", 400, "prompt[1]", "token id"},
      {false, R"({"prompt": [1, 260]})", 400, "prompt[1]", "outside the vocabulary"},
      {false, R"({"prompt": [-1]})", 400, "prompt[0]", "outside the vocabulary"},
      {false, R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens", "between 1"},
      {false, R"({"prompt": "x", "max_tokens": "5"})", 400, "max_tokens", "an integer"},
      {false, R"({"prompt": "x", "max_tokens": 2.5})", 400, "max_tokens", "an integer"},
      {false, R"({"prompt": "x", "max_tokens": 1000})", 400, "max_tokens", "room for at most 62"},
      {false, R"({"prompt": "x", "temperature": 2.5})", 400, "temperature", "between 0 and 2"},
      {false, R"({"prompt": "x", "temperature": -0.1})", 400, "temperature", "between 0 and 2"},
      {false, R"({"prompt": "x", "temperature": "hot"})", 400, "temperature", "a number"},
      {false, R"({"prompt": "x", "temperature": true})", 400, "temperature", "a number"},
      {false, R"({"prompt": "x", "top_p": 0})", 400, "top_p", "greater than 0"},
      {false, R"({"prompt": "x", "top_p": 1.5})", 400, "top_p", "at most 1"},
      {false, R"({"prompt": "x", "min_p": 2})", 400, "min_p", "between 0 and 1"},
      {false, R"({"prompt": "x", "min_p": -0.1})", 400, "min_p", "between 0 and 1"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "min_p": "a"})", 400, "min_p",
       "a number"},
      {false, R"({"prompt": "x", "top_k": -2})", 400, "top_k", "between -1"},
      {false, R"({"prompt": "x", "seed": 1.5})", 400, "seed", "an integer"},
      {false, R"({"prompt": "x", "seed": "1"})", 400, "seed", "an integer"},
      {false, R"({"prompt": "x", "stop": 3})", 400, "stop", "a string or an array"},
      {false, R"({"prompt": "x", "stop": ""})", 400, "stop", "empty string"},
      {false, R"({"prompt": "x", "stop": ["a", 1]})", 400, "stop[1]", "a string"},
      {false, R"({"prompt": "x", "stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})",
       400, "stop", "at most 16"},
      {false, R"({"prompt": "x", "stop_token_ids": 2})", 400, "stop_token_ids", "an array"},
      {false, R"({"prompt": "x", "stop_token_ids": [2, 999]})", 400, "stop_token_ids[1]",
       "outside the vocabulary"},
      {false, R"({"prompt": "x", "stream": "yes"})", 400, "stream", "a boolean"},
      {false, R"({"prompt": "x", "stream_options": {"include_usage": true}})", 400,
       "stream_options", "only allowed when 'stream' is true"},
      {false, R"({"prompt": "x", "stream": true, "stream_options": []})", 400, "stream_options",
       "an object"},
      {false, R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})", 400,
       "stream_options.include_usage", "a boolean"},
      {false, R"({"prompt": "x", "logprobs": 2})", 400, "logprobs", "between 0 and 1"},
      {false, R"({"prompt": "x", "temperature": 1e-5})", 400, "temperature",
       "0 (greedy) or at least 0.0001"},
      {false, R"({"prompt": "x", "temperature": 5e-324})", 400, "temperature",
       "0 (greedy) or at least 0.0001"},
      {false, R"({"prompt": "x", "mirostat": 2})", 400, "mirostat", "unknown field 'mirostat'"},
      {false, R"({"prompt": "x", "stream": true, "stream_options": {"usage": true}})", 400,
       "stream_options.usage", "unknown field 'stream_options.usage'"},
      {false, R"({"prompt": "x", "logprobs": true})", 400, "logprobs", "an integer"},
      {false, R"({"prompt": "x", "n": 2})", 400, "n", "'n' is not supported"},
      {false, R"({"prompt": "x", "best_of": 3})", 400, "best_of", "not supported"},
      {false, R"({"prompt": "x", "echo": true})", 400, "echo", "not supported"},
      {false, R"({"prompt": "x", "suffix": "end"})", 400, "suffix", "not supported"},
      {false, R"({"prompt": "x", "presence_penalty": 0.5})", 400, "presence_penalty",
       "not supported"},
      {false, R"({"prompt": "x", "frequency_penalty": 1})", 400, "frequency_penalty",
       "not supported"},
      {false, R"({"prompt": "x", "logit_bias": {"5": 10}})", 400, "logit_bias", "not supported"},
      {false, R"({"prompt": "x", "speculation": 1})", 400, "speculation", "a boolean"},
      {false, R"({"prompt": "x", "max_draft_tokens": 9})", 400, "max_draft_tokens",
       "between -1 and 8"},
      {false, R"({"prompt": "x", "ignore_eos": "no"})", 400, "ignore_eos", "a boolean"},
      {false, R"({"prompt": "x", "user": 7})", 400, "user", "a string"},
      {false, "{\"prompt\": \"" + std::string(kContext, 'x') + "\"}", 400, "prompt",
       "context is 64 tokens"},
      {true, R"({})", 400, "messages", "'messages' is required"},
      {true, R"({"messages": "hi"})", 400, "messages", "an array"},
      {true, R"({"messages": []})", 400, "messages", "must not be empty"},
      {true, R"({"messages": [5]})", 400, "messages[0]", "an object"},
      {true, R"({"messages": [{"content": "hi"}]})", 400, "messages[0].role", "a string"},
      {true, R"({"messages": [{"role": "tool", "content": "hi"}]})", 400, "messages[0].role",
       "'tool'"},
      {true, R"({"messages": [{"role": "user"}]})", 400, "messages[0].content", "required"},
      {true, R"({"messages": [{"role": "user", "content": 3}]})", 400, "messages[0].content",
       "a string or an array"},
      {true, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400,
       "messages[0].content[0].type", "image_url"},
      {true, R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", 400,
       "messages[0].content[0].text", "a string"},
      {true, R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{}]}]})", 400,
       "messages[0].tool_calls", "tool calls"},
      {true, "{" + msgs + R"(, "logprobs": 1})", 400, "logprobs", "a boolean"},
      {true, "{" + msgs + R"(, "top_logprobs": 2})", 400, "top_logprobs", "requires 'logprobs'"},
      {true, "{" + msgs + R"(, "logprobs": true, "top_logprobs": 2})", 400, "top_logprobs",
       "between 0 and 1"},
      {true, "{" + msgs + R"(, "guided_json": "{}"})", 400, "guided_json",
       "unknown field 'guided_json'"},
      {true, "{" + msgs + R"(, "max_completion_tokens": 0})", 400, "max_completion_tokens",
       "between 1"},
      {true, "{" + msgs + R"(, "tools": [{"type": "function"}]})", 400, "tools", "not supported"},
      {true, "{" + msgs + R"(, "tool_choice": "auto"})", 400, "tool_choice", "not supported"},
      {true, "{" + msgs + R"(, "response_format": {"type": "json_object"}})", 400,
       "response_format", "not supported"},
      {true, "{" + msgs + R"(, "n": 3})", 400, "n", "not supported"},
      {true, "{" + msgs + R"(, "model": "other"})", 404, "model", "other"},
      {true, "{" + msgs + R"(, "add_generation_prompt": 1})", 400, "add_generation_prompt",
       "a boolean"},
      {true, "{" + msgs + R"(, "continue_final_message": "yes"})", 400,
       "continue_final_message", "a boolean"},
      {true, "{" + msgs + R"(, "continue_final_message": true, "add_generation_prompt": true})",
       400, "continue_final_message", "cannot both be true"},
      {true, "{" + msgs + R"(, "chat_template_kwargs": [1]})", 400, "chat_template_kwargs",
       "an object"},
      {true, "{" + msgs + R"(, "chat_template_kwargs": {"messages": []}})", 400,
       "chat_template_kwargs.messages", "set by the request itself"},
  };
  ASSERT_GE(cases.size(), 30u);
  for (const BadRequest& c : cases) {
    SCOPED_TRACE(c.body);
    absl::StatusOr<ApiRequest> r = c.chat ? api_.ParseChat(c.body) : api_.ParseCompletion(c.body);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(HttpStatusFor(r.status()), c.http_status);
    json error = json::parse(ErrorBody(r.status()), nullptr, false);
    ASSERT_TRUE(error.is_object());
    ASSERT_TRUE(error.contains("error"));
    const json& e = error["error"];
    EXPECT_THAT(e["message"].get<std::string>(), HasSubstr(c.in_message));
    EXPECT_EQ(e["type"], "invalid_request_error");
    if (c.param.empty()) {
      EXPECT_TRUE(e["param"].is_null());
    } else {
      EXPECT_EQ(e["param"], c.param);
    }
    EXPECT_TRUE(e.contains("code"));
  }
}

TEST_F(OpenAiApiTest, ErrorCodes) {
  absl::StatusOr<ApiRequest> r = api_.ParseCompletion(R"({"model": "x", "prompt": "a"})");
  EXPECT_EQ(json::parse(ErrorBody(r.status()))["error"]["code"], "model_not_found");
  r = api_.ParseCompletion(R"({"prompt": "a", "max_tokens": 100})");
  EXPECT_EQ(json::parse(ErrorBody(r.status()))["error"]["code"], "context_length_exceeded");
  r = api_.ParseCompletion(R"({"prompt": "a", "n": 2})");
  EXPECT_EQ(json::parse(ErrorBody(r.status()))["error"]["code"], "unsupported_parameter");

  EXPECT_EQ(HttpStatusFor(absl::ResourceExhaustedError("full")), 429);
  EXPECT_EQ(HttpStatusFor(absl::UnavailableError("draining")), 503);
  EXPECT_EQ(HttpStatusFor(absl::OutOfRangeError("too long")), 400);
  EXPECT_EQ(HttpStatusFor(absl::InternalError("bug")), 500);
  json e = json::parse(ErrorBody(absl::InternalError("bug")))["error"];
  EXPECT_EQ(e["type"], "server_error");
  EXPECT_TRUE(e["param"].is_null());
  json limit = json::parse(ErrorBody(413, "too big", "body"))["error"];
  EXPECT_EQ(limit["param"], "body");
  EXPECT_EQ(limit["type"], "invalid_request_error");
}

TEST_F(OpenAiApiTest, Models) {
  json models = json::parse(api_.ModelsBody());
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(models["data"][0]["object"], "model");
  EXPECT_EQ(models["data"][0]["created"], 1700000000);
  EXPECT_EQ(models["data"][0]["max_model_len"], kContext);
  EXPECT_EQ(json::parse(*api_.ModelBody("tiny"))["id"], "tiny");
  EXPECT_EQ(HttpStatusFor(api_.ModelBody("other").status()), 404);
}

GenerationEvent Event(std::string text, bool finished = false,
                      FinishReason reason = FinishReason::kNone) {
  GenerationEvent e;
  for (char c : text) e.token_ids.push_back(ByteTokenizer::IdOf(c));
  for (size_t i = 0; i < text.size(); ++i) e.logprobs.push_back(-0.5f);
  e.text = std::move(text);
  e.finished = finished;
  e.finish_reason = reason;
  return e;
}

// Splits an SSE stream into its data payloads, checking the framing.
std::vector<std::string> SseData(const std::string& stream) {
  std::vector<std::string> data;
  for (absl::string_view frame : absl::StrSplit(stream, "\n\n", absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(frame, "data: ")) << frame;
    data.emplace_back(frame.substr(6));
  }
  EXPECT_TRUE(absl::EndsWith(stream, "\n\n"));
  return data;
}

TEST_F(OpenAiApiTest, CompletionBody) {
  ApiRequest r = Completion({{"prompt", "Hi"}, {"max_tokens", 3}, {"logprobs", 1}});
  ResponseEncoder enc(api_, r, "cmpl-1", 42);
  GenerationEvent first = Event("ab");
  first.usage = {3, 2, 4, 2, 1};
  enc.Add(first);
  EXPECT_FALSE(enc.finished());
  GenerationEvent last = Event("c", true, FinishReason::kLength);
  last.usage = {3, 3, 6, 3, 2};
  enc.Add(last);
  ASSERT_TRUE(enc.finished());
  absl::StatusOr<std::string> body = enc.Body();
  ASSERT_TRUE(body.ok()) << body.status();
  json j = json::parse(*body);
  EXPECT_EQ(j["id"], "cmpl-1");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 42);
  EXPECT_EQ(j["model"], "tiny");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["text"], "abc");
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  const json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"a", "b", "c"}));
  EXPECT_EQ(lp["token_logprobs"], json({-0.5, -0.5, -0.5}));
  EXPECT_EQ(lp["text_offset"], json({0, 1, 2}));
  EXPECT_EQ(lp["top_logprobs"][1], json({{"b", -0.5}}));
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], 6);
  EXPECT_EQ(j["usage"]["speculative"]["draft_tokens"], 6);
  EXPECT_EQ(j["usage"]["speculative"]["accepted_tokens"], 3);
  EXPECT_EQ(j["usage"]["speculative"]["verify_steps"], 2);
}

TEST_F(OpenAiApiTest, ChatBodyWithLogprobs) {
  ApiRequest r = Chat({{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                       {"logprobs", true},
                       {"top_logprobs", 1}});
  ResponseEncoder enc(api_, r, "chatcmpl-1", 7);
  GenerationEvent e = Event("ok", true, FinishReason::kStop);
  e.logprobs = {-0.5f, -std::numeric_limits<float>::infinity()};
  enc.Add(e);
  json j = json::parse(*enc.Body());
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"], json({{"role", "assistant"}, {"content", "ok"}}));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "o");
  EXPECT_EQ(content[0]["logprob"], -0.5);
  EXPECT_EQ(content[0]["bytes"], json::array({111}));
  EXPECT_EQ(content[0]["top_logprobs"][0]["token"], "o");
  EXPECT_EQ(content[1]["logprob"], -9999.0);  // -inf has no JSON spelling
}

TEST_F(OpenAiApiTest, CompletionStream) {
  ApiRequest r = Completion({{"prompt", "Hi"},
                             {"stream", true},
                             {"stream_options", {{"include_usage", true}}}});
  ResponseEncoder enc(api_, r, "cmpl-2", 1);
  std::string stream = enc.StreamEvent(Event("ab"));
  stream += enc.StreamEvent(GenerationEvent());  // nothing new: nothing sent
  GenerationEvent last = Event("c", true, FinishReason::kStop);
  last.usage = {3, 3, 0, 0, 0};
  stream += enc.StreamEvent(last);
  EXPECT_EQ(enc.StreamEvent(Event("late")), "");  // nothing after the end
  std::vector<std::string> data = SseData(stream);
  ASSERT_EQ(data.size(), 5u);
  std::string text;
  for (int i = 0; i < 2; ++i) {
    json chunk = json::parse(data[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_EQ(chunk["id"], "cmpl-2");
    EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
    EXPECT_TRUE(chunk.contains("usage") && chunk["usage"].is_null());
    text += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "abc");
  EXPECT_EQ(json::parse(data[2])["choices"][0]["finish_reason"], "stop");
  json usage = json::parse(data[3]);
  EXPECT_THAT(usage["choices"], IsEmpty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
  EXPECT_EQ(usage["usage"]["total_tokens"], 6);
  EXPECT_EQ(data[4], "[DONE]");
}

TEST_F(OpenAiApiTest, ChatStream) {
  ApiRequest r = Chat({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"stream", true}});
  ResponseEncoder enc(api_, r, "chatcmpl-2", 1);
  std::string stream = enc.StreamEvent(GenerationEvent());
  stream += enc.StreamEvent(Event("he"));
  stream += enc.StreamEvent(Event("y", true, FinishReason::kLength));
  std::vector<std::string> data = SseData(stream);
  ASSERT_EQ(data.size(), 5u);
  json role = json::parse(data[0]);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_FALSE(role.contains("usage"));
  EXPECT_EQ(json::parse(data[1])["choices"][0]["delta"], json({{"content", "he"}}));
  EXPECT_EQ(json::parse(data[2])["choices"][0]["delta"], json({{"content", "y"}}));
  json finish = json::parse(data[3]);
  EXPECT_EQ(finish["choices"][0]["delta"], json::object());
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(data[4], "[DONE]");
}

TEST_F(OpenAiApiTest, ErrorAndCancelEndings) {
  ApiRequest r = Completion({{"prompt", "Hi"}});
  {
    ResponseEncoder enc(api_, r, "cmpl-3", 1);
    GenerationEvent e = Event("a", true, FinishReason::kError);
    e.error = "device lost";
    enc.Add(e);
    absl::StatusOr<std::string> body = enc.Body();
    ASSERT_FALSE(body.ok());
    EXPECT_EQ(HttpStatusFor(body.status()), 500);
    EXPECT_THAT(std::string(body.status().message()), HasSubstr("device lost"));
  }
  {
    ResponseEncoder enc(api_, r, "cmpl-4", 1);
    enc.Add(Event("", true, FinishReason::kCancelled));
    EXPECT_EQ(HttpStatusFor(enc.Body().status()), 503);
  }
  {
    ApiRequest s = Completion({{"prompt", "Hi"}, {"stream", true}});
    ResponseEncoder enc(api_, s, "cmpl-5", 1);
    std::vector<std::string> data = SseData(enc.StreamEvent(Event("a", true, FinishReason::kCancelled)));
    ASSERT_EQ(data.size(), 3u);
    EXPECT_EQ(json::parse(data[0])["choices"][0]["text"], "a");
    EXPECT_EQ(json::parse(data[1])["error"]["type"], "server_error");
    EXPECT_EQ(data[2], "[DONE]");
  }
}

TEST_F(OpenAiApiTest, InvalidUtf8InOutputIsReplacedNotFatal) {
  ApiRequest r = Completion({{"prompt", "Hi"}});
  ResponseEncoder enc(api_, r, "cmpl-6", 1);
  GenerationEvent e;
  e.token_ids = {200};
  e.text = "\xC3";  // half of a two-byte character
  e.finished = true;
  e.finish_reason = FinishReason::kLength;
  enc.Add(e);
  absl::StatusOr<std::string> body = enc.Body();
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(json::parse(*body)["choices"][0]["text"], "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace verdict
