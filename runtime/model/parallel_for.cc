#include "runtime/model/parallel_for.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace verdict {

void ParallelFor(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn) {
  threads = static_cast<int>(std::min<int64_t>(std::max(threads, 1), n));
  if (threads <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back(fn, n * t / threads, n * (t + 1) / threads);
  }
  fn(0, n / threads);
  for (std::thread& th : pool) th.join();
}

}  // namespace verdict
