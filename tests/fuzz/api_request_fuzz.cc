// The bodies of POST /v1/completions, /v1/chat/completions, /tokenize and
// /detokenize.
#include <cstddef>
#include <cstdint>
#include "absl/strings/string_view.h"

#include "runtime/server/openai_api.h"
#include "runtime/server/serving_test_util.h"
#include "runtime/text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const verdict::ByteTokenizer* tokenizer = new verdict::ByteTokenizer();
  static const verdict::OpenAiApi* api = new verdict::OpenAiApi(
      verdict::ServedModel{"tiny", 4096, 8, 1700000000}, *tokenizer, verdict::ChatTemplate());
  const absl::string_view body(reinterpret_cast<const char*>(data), size);
  api->ParseCompletion(body).IgnoreError();
  api->ParseChat(body).IgnoreError();
  api->TokenizeReply(body).IgnoreError();
  api->DetokenizeReply(body).IgnoreError();
  return 0;
}
