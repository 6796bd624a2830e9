// Turns CUDA runtime errors into absl::Status values that name the call.
#ifndef VERDICT_KERNELS_CUDA_CHECK_H_
#define VERDICT_KERNELS_CUDA_CHECK_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace verdict {

inline absl::Status CudaStatus(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(call, " failed: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

}  // namespace verdict

// Evaluates a CUDA runtime call; on failure returns a Status naming the call.
#define VERDICT_CUDA_RETURN_IF_ERROR(expr)                              \
  do {                                                                  \
    ::absl::Status verdict_cuda_status = ::verdict::CudaStatus((expr), #expr); \
    if (!verdict_cuda_status.ok()) return verdict_cuda_status;          \
  } while (0)

#endif  // VERDICT_KERNELS_CUDA_CHECK_H_
