// tokenizer_config.json's chat_template.
#include <cstddef>
#include <cstdint>
#include "absl/strings/string_view.h"

#include "runtime/text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  verdict::ChatTemplate::FromTokenizerConfig(
      absl::string_view(reinterpret_cast<const char*>(data), size))
      .IgnoreError();
  return 0;
}
