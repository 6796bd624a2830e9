// The CUDA launcher of the verify sampler without Abseil types, so that it
// can also link into a shared library (the system's static Abseil is not
// position independent). InvokeVerifySample (verify_sampler.h) wraps it.
#ifndef VERDICT_KERNELS_VERIFY_SAMPLER_LAUNCH_H_
#define VERDICT_KERNELS_VERIFY_SAMPLER_LAUNCH_H_

#include <cstdint>
#include <string>

#include "kernels/verify_sampler.h"

namespace verdict {
namespace verify_internal {

enum class LaunchStatus : int32_t {
  kOk = 0,
  kInvalidArgument = 1,  // step_error_key set for step-level input errors
  kCudaError = 2,
  kUnsupported = 3,  // e.g. a vocabulary too large for the kernel
};

// Launches the step on `cuda_stream` (device pointers). On failure, `message`
// (if given) says why.
LaunchStatus LaunchVerifySample(const VerifyInputs& in, VerifyOutputs* out, void* cuda_stream,
                                uint64_t* step_error_key, std::string* message);

// Tuning for benchmarks: how many mass tiles a CTA of the kernel aims for
// (0 restores the default, kTargetTilesPerCta in verify_sampler.cu). Set, it
// alone sets the split, also for steps too small to fill the GPU (which
// otherwise take the most CTAs per row). Process-wide;
// verify_sampler_benchmark --tiles_per_cta sweeps it.
void SetTargetTilesPerCta(int32_t tiles);

// Whether small steps keep their slices of z in shared memory for the passes
// after the first (the default; KernelArgs::stash in verify_sampler.cu).
// Both ways give the same outputs. Process-wide; for the GPU parity tests
// (which check both) and verify_sampler_benchmark --compare_stash.
void SetSliceStash(bool enabled);

}  // namespace verify_internal
}  // namespace verdict

#endif  // VERDICT_KERNELS_VERIFY_SAMPLER_LAUNCH_H_
