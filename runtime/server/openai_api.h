// The OpenAI-compatible request and response formats of /v1/completions and
// /v1/chat/completions, independent of HTTP: request bodies are checked
// field by field and turned into a GenerationRequest; engine events are
// turned into response bodies or server-sent-event chunks.
//
// Request rules (OpenAI's, narrowed to what verdict serves):
// - `model` may be left out; when given it must name the served model
//   (404, code "model_not_found", as OpenAI answers).
// - A JSON null counts as "not given". Unknown fields are ignored and
//   reported in ApiRequest::ignored_fields so the caller can log them.
// - OpenAI parameters verdict does not implement (n, best_of, echo, suffix,
//   presence/frequency_penalty, logit_bias, tools, ...) are accepted only at
//   their default value; anything else is a 400 that names the parameter.
// - Extensions: `top_k` (-1 or 0: off), `stop_token_ids`, `ignore_eos`,
//   `speculation` (false: plain decoding), `max_draft_tokens` (-1: the
//   engine's choice).
// - max_tokens defaults to 16 for completions and to the room left in the
//   context for chat; a prompt that fills the context, or a max_tokens past
//   the room left, is a 400 with code "context_length_exceeded".
// Errors are absl::Status values whose code gives the HTTP status
// (HttpStatusFor) and whose payloads carry OpenAI's `param` and `code`;
// ErrorBody renders them as {"error": {"message", "type", "param", "code"}}.
#ifndef VERDICT_RUNTIME_SERVER_OPENAI_API_H_
#define VERDICT_RUNTIME_SERVER_OPENAI_API_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/engine/generation.h"
#include "runtime/text/chat_template.h"
#include "runtime/text/tokenizer.h"

namespace verdict {

struct ServedModel {
  std::string name;          // the `model` requests must name
  int context_length = 0;    // prompt plus completion tokens
  int max_draft_tokens = 64; // the largest per-request max_draft_tokens accepted
  int64_t created = 0;       // unix time /v1/models reports
};

// Limits of the request format.
inline constexpr int kMaxStopStrings = 16;
inline constexpr int kMaxStopTokenIds = 64;
// Alternatives per token in logprobs: the sampled token's own (the sampler
// reports no others), so `top_logprobs` / legacy `logprobs` above it are
// refused rather than answered with fewer.
inline constexpr int kMaxLogprobs = 1;
inline constexpr int kDefaultCompletionMaxTokens = 16;
// Objects and arrays open at once in a request body, the body's own object
// the first; deeper bodies are refused (400).
inline constexpr int kMaxRequestJsonDepth = 64;

enum class ApiEndpoint { kCompletions, kChatCompletions };

// A checked request, ready for GenerationService::Submit once the caller
// gives generation.id a value.
struct ApiRequest {
  ApiEndpoint endpoint = ApiEndpoint::kCompletions;
  GenerationRequest generation;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;       // report each token's logprob
  int top_logprobs = 0;        // alternatives per token asked for (0..5)
  std::vector<std::string> ignored_fields;  // unknown fields, as dotted paths
};

// An API error: `code` picks the HTTP status (see HttpStatusFor); `param`
// names the offending field ("" for none); `error_code` is OpenAI's
// machine-readable code ("" for none).
absl::Status ApiError(absl::StatusCode code, absl::string_view message,
                      absl::string_view param = "", absl::string_view error_code = "");

// InvalidArgument, OutOfRange, FailedPrecondition: 400; Unauthenticated:
// 401; PermissionDenied: 403; NotFound: 404; ResourceExhausted: 429;
// Unavailable, Cancelled, Aborted: 503; anything else: 500.
int HttpStatusFor(const absl::Status& status);

// {"error": {"message", "type", "param", "code"}} for a status from
// ApiError (or any other status: param and code are then null).
std::string ErrorBody(const absl::Status& status);
// The same for errors that have no Status code of their own (413, 405).
std::string ErrorBody(int http_status, absl::string_view message, absl::string_view param = "",
                      absl::string_view error_code = "");

// The answer of an endpoint that needs no engine (/tokenize, /detokenize).
struct ApiReply {
  std::string body;
  std::vector<std::string> ignored_fields;  // unknown fields, as dotted paths
};

// A /tokenize request's ids.
struct TokenizedPrompt {
  std::vector<int32_t> token_ids;
  bool return_token_strs = false;
  std::vector<std::string> ignored_fields;
};

// Sampling values for requests that leave them out (the checkpoint's
// generation_config.json); unset: the API's own defaults (temperature 1,
// top_p 1, no top-k, no min-p).
struct SamplingDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<float> min_p;
};

class OpenAiApi {
 public:
  // `tokenizer` must outlive this object. Prompts are encoded with BOS
  // where the tokenizer adds one.
  OpenAiApi(ServedModel model, const Tokenizer& tokenizer, ChatTemplate chat_template);

  // A request field the API does not know is a 400 naming it (a misspelt
  // parameter would otherwise do nothing, silently); true accepts such
  // fields and reports them in ApiRequest::ignored_fields instead.
  void set_accept_unknown_fields(bool accept) { accept_unknown_fields_ = accept; }
  void set_sampling_defaults(SamplingDefaults defaults) { sampling_defaults_ = defaults; }

  absl::StatusOr<ApiRequest> ParseCompletion(absl::string_view body) const;
  absl::StatusOr<ApiRequest> ParseChat(absl::string_view body) const;

  // POST /tokenize and /detokenize (see above).
  absl::StatusOr<ApiReply> TokenizeReply(absl::string_view body) const;
  absl::StatusOr<ApiReply> DetokenizeReply(absl::string_view body) const;
  // The ids of a /tokenize body, whose text field is named `text_field`
  // ("prompt" on the HTTP API; `verdict tokenize` lines call it "text").
  absl::StatusOr<TokenizedPrompt> Tokenize(absl::string_view body,
                                           absl::string_view text_field = "prompt") const;

  // The body of GET /v1/models.
  std::string ModelsBody() const;
  // The body of GET /v1/models/{name}; NotFound for another name.
  absl::StatusOr<std::string> ModelBody(absl::string_view name) const;

  const ServedModel& model() const { return model_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const ChatTemplate& chat_template() const { return chat_template_; }

 private:
  ServedModel model_;
  const Tokenizer& tokenizer_;
  ChatTemplate chat_template_;
  bool encode_adds_bos_;  // whether tokenizer_.Encode(text, true) starts with BOS
  bool accept_unknown_fields_ = false;
  SamplingDefaults sampling_defaults_;

  void ApplySamplingDefaults(SamplingParams* params) const;
  absl::Status CheckUnknownFields(const std::vector<std::string>& ignored) const;
};

// Builds the response of one request from its engine events, either as one
// JSON body or as server-sent events ("data: {...}\n\n" ... "data: [DONE]\n\n").
class ResponseEncoder {
 public:
  // `api` and `request` must outlive the encoder. `id` is the response id
  // (and the engine request id); `created` is unix time.
  ResponseEncoder(const OpenAiApi& api, const ApiRequest& request, std::string id,
                  int64_t created);

  // Streaming: the text to send for `event` (possibly empty). After the
  // final event it ends with the finish chunk, the usage chunk when
  // stream_options.include_usage asked for it, and "data: [DONE]". A
  // request that ended in an error or was cancelled gets an error event
  // ({"error": {...}}) before [DONE].
  std::string StreamEvent(const GenerationEvent& event);

  // Non-streaming: collects one event.
  void Add(const GenerationEvent& event);
  // After the final event: the response body; Internal for a request that
  // ended in an error, Unavailable for one that was cancelled.
  absl::StatusOr<std::string> Body() const;

  bool finished() const { return finished_; }
  FinishReason finish_reason() const { return finish_reason_; }
  const std::string& id() const { return id_; }

 private:
  bool is_chat() const { return request_.endpoint == ApiEndpoint::kChatCompletions; }
  // One SSE chunk; `token_texts` and `logprobs` are empty unless the
  // request asked for logprobs.
  std::string Chunk(const std::string& text, const std::vector<std::string>& token_texts,
                    const std::vector<float>& logprobs, const char* finish_reason);
  // The text each token adds to the output (empty unless logprobs were
  // asked for).
  std::vector<std::string> TokenTexts(const std::vector<int32_t>& token_ids);
  absl::Status EndStatus() const;

  const OpenAiApi& api_;
  const ApiRequest& request_;
  std::string id_;
  int64_t created_;

  std::string text_;
  std::vector<std::string> token_texts_;  // when logprobs were asked for
  std::vector<float> logprobs_;
  GenerationUsage usage_;
  bool finished_ = false;
  FinishReason finish_reason_ = FinishReason::kNone;
  std::string error_;
  bool sent_role_ = false;   // chat streams open with a role-only delta
  size_t text_offset_ = 0;   // completions logprobs.text_offset so far
  IncrementalDetokenizer detokenizer_;  // names the tokens of logprobs
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_SERVER_OPENAI_API_H_
