// absl::Status face of the CUDA launcher (kernels/verify_sampler.cu).
#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"
#include "kernels/cuda_check.h"
#include "kernels/verify_sampler.h"
#include "kernels/verify_sampler_internal.h"
#include "kernels/verify_sampler_launch.h"

namespace verdict {

absl::Status InvokeVerifySample(const VerifyInputs& in, VerifyOutputs* out, void* cuda_stream) {
  uint64_t step_key = 0;
  std::string message;
  switch (verify_internal::LaunchVerifySample(in, out, cuda_stream, &step_key, &message)) {
    case verify_internal::LaunchStatus::kOk:
      return absl::OkStatus();
    case verify_internal::LaunchStatus::kInvalidArgument:
      // Step-level input errors read the same as on the CPU path.
      if (step_key != 0) return VerifyErrorStatus(verify_internal::MakeErrorRecord(in, step_key));
      return absl::InvalidArgumentError(message);
    case verify_internal::LaunchStatus::kUnsupported:
      return absl::UnimplementedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status ReadVerifyError(const VerifyOutputs& device_outputs, void* cuda_stream) {
  if (device_outputs.error == nullptr) {
    return absl::InvalidArgumentError("verify sampler: no error record");
  }
  VerifyErrorRecord record;
  const cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  VERDICT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&record, device_outputs.error, sizeof(record),
                                               cudaMemcpyDeviceToHost, stream));
  VERDICT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return VerifyErrorStatus(record);
}

}  // namespace verdict
