// Random benchmark inputs generated on the device (host generation of
// gigabytes of logits would dominate the benchmark's run time).
#ifndef VERDICT_KERNELS_BENCH_VERIFY_BENCH_INPUTS_H_
#define VERDICT_KERNELS_BENCH_VERIFY_BENCH_INPUTS_H_

#include <cstdint>

#include "absl/status/status.h"

namespace verdict {

// logits[rows, vocab]: approximately normal with standard deviation `scale`.
absl::Status FillBenchLogits(float* logits, int64_t rows, int32_t vocab, uint64_t seed,
                             float scale, void* cuda_stream);

// probs[rows, vocab]: each row an independent random distribution (uniform
// weights, normalised), so that most drafts are rejected and every verify
// row reads its whole p (the sampler's most expensive path).
absl::Status FillBenchDraftProbs(float* probs, int64_t rows, int32_t vocab, uint64_t seed,
                                 void* cuda_stream);

}  // namespace verdict

#endif  // VERDICT_KERNELS_BENCH_VERIFY_BENCH_INPUTS_H_
