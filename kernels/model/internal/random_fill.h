// Fills device buffers with seeded uniform values that are never zero, for
// benchmarks that need realistic (non-zero, non-constant) weights without
// a host round trip.
#ifndef VERDICT_KERNELS_MODEL_INTERNAL_RANDOM_FILL_H_
#define VERDICT_KERNELS_MODEL_INTERNAL_RANDOM_FILL_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/model/cuda_stream.h"

namespace verdict {
namespace model_internal {

// Element i of `out` (bf16 bits) is uniform in +-[scale/64, scale], from a
// hash of (seed, i).
absl::Status InvokeRandomBf16Fill(uint16_t* out, size_t count, uint64_t seed, float scale,
                                  cudaStream_t stream);

// Same for float32.
absl::Status InvokeRandomF32Fill(float* out, size_t count, uint64_t seed, float scale,
                                 cudaStream_t stream);

}  // namespace model_internal
}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_INTERNAL_RANDOM_FILL_H_
