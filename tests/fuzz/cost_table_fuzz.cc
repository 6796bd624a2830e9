// Cost tables (`verdict profile`'s output, --cost-table's input).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "scheduler/cost_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto table = verdict::CostTable::FromJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (table.ok()) {
    // A table that loads round-trips and prices any step.
    auto again = verdict::CostTable::FromJson(table->ToJson());
    if (!again.ok()) __builtin_trap();
  }
  return 0;
}
