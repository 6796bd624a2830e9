// A kernel that exercises SharedAddU64 (kernels/shared_sum.cuh), for its GPU
// test.
#ifndef VERDICT_KERNELS_SHARED_SUM_TEST_KERNEL_H_
#define VERDICT_KERNELS_SHARED_SUM_TEST_KERNEL_H_

#include <cstdint>
#include <string>

namespace verdict {

// One CTA of `threads` threads: thread t adds values[t * per_thread + i]
// (i < per_thread) to shared counter (t + i) % counters with SharedAddU64,
// all threads at once; the counters land in sums[0, counters). `values` and
// `sums` are host arrays. Returns "" or the CUDA error.
std::string RunSharedSumKernel(const uint64_t* values, int threads, int per_thread, int counters,
                               uint64_t* sums);

}  // namespace verdict

#endif  // VERDICT_KERNELS_SHARED_SUM_TEST_KERNEL_H_
