// `verdict plan --input STEP.json`.
#include <cstddef>
#include <cstdint>
#include <string>

#include "scheduler/plan_command.h"
#include "tests/fuzz/temp_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  verdict::PlanCommandArgs args;
  args.input_path = verdict::fuzz::WriteScratch("step.json", data, size);
  for (const char* mode : {"static", "compact"}) {
    args.mode = mode;
    verdict::PlanCommandJson(args).IgnoreError();
  }
  return 0;
}
