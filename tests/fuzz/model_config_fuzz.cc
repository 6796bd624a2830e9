// config.json.
#include <cstddef>
#include <cstdint>
#include "absl/strings/string_view.h"

#include "runtime/model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  verdict::ParseModelConfig(absl::string_view(reinterpret_cast<const char*>(data), size))
      .IgnoreError();
  return 0;
}
