// generation_config.json.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "runtime/model/generation_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  verdict::ParseGenerationConfig(absl::string_view(reinterpret_cast<const char*>(data), size),
                                 "generation_config.json")
      .IgnoreError();
  return 0;
}
