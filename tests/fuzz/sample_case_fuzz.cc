// `verdict sample --case STEP.json`: parsing the case.
#include <cstddef>
#include <cstdint>

#include "kernels/verify_case.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json json = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  verdict::ParseVerifyCase(json).IgnoreError();
  return 0;
}
