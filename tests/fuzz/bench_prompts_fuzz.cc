// `verdict bench --bench-prompts FILE.jsonl`.
#include <cstddef>
#include <cstdint>
#include "absl/strings/string_view.h"

#include "runtime/bench/bench_prompts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  verdict::ParsePromptsJsonl(absl::string_view(reinterpret_cast<const char*>(data), size))
      .IgnoreError();
  return 0;
}
