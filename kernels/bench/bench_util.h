// What the kernel benchmarks share: ending the run on the first failed call
// (a benchmark has nothing sensible to do after one), and size lists from
// flags.
#ifndef VERDICT_KERNELS_BENCH_BENCH_UTIL_H_
#define VERDICT_KERNELS_BENCH_BENCH_UTIL_H_

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda_check.h"

// Evaluates an absl::Status expression; on failure prints where and exits 1.
#define BENCH_CHECK(expr)                                                          \
  do {                                                                             \
    const absl::Status bench_status = (expr);                                      \
    if (!bench_status.ok()) {                                                      \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,                      \
                   std::string(bench_status.message()).c_str());                   \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

// The same for a CUDA runtime call.
#define BENCH_CUDA(expr) BENCH_CHECK(::verdict::CudaStatus((expr), #expr))

namespace verdict {

// "1,8,32" -> {1, 8, 32}; entries that are not integers >= min_value are
// skipped.
inline std::vector<int> ParseSizeList(const std::string& text, int min_value) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int v = 0;
    if (absl::SimpleAtoi(part, &v) && v >= min_value) out.push_back(v);
  }
  return out;
}

}  // namespace verdict

#endif  // VERDICT_KERNELS_BENCH_BENCH_UTIL_H_
