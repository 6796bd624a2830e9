// model.safetensors.index.json of a sharded checkpoint.
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/model/safetensors.h"
#include "tests/fuzz/temp_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  verdict::fuzz::WriteScratch("model.safetensors.index.json", data, size);
  verdict::SafetensorsCheckpoint::Open(verdict::fuzz::ScratchDir()).IgnoreError();
  return 0;
}
