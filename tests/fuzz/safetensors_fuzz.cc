// A .safetensors file: its length prefix, JSON header and data offsets.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/model/safetensors.h"
#include "tests/fuzz/temp_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = verdict::fuzz::WriteScratch("model.safetensors", data, size);
  auto file = verdict::SafetensorsFile::Open(path);
  if (file.ok()) {
    // Reading every tensor the header names must stay inside the file.
    for (const verdict::TensorInfo& info : (*file)->tensors()) {
      volatile size_t n = (*file)->Data(info).size();
      (void)n;
    }
  }
  return 0;
}
