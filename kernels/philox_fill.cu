#include <cuda_runtime.h>

#include "kernels/cuda_check.h"
#include "kernels/philox_fill.h"

namespace verdict {
namespace {

// One thread per group of four draws of a row.
__global__ void PhiloxFillKernel(PhiloxFillArgs args, float* out) {
  const int groups_per_row = (args.draws_per_row + 3) / 4;
  const int64_t total = static_cast<int64_t>(args.rows) * groups_per_row;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < total;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int row = static_cast<int>(g / groups_per_row);
    const int group = static_cast<int>(g % groups_per_row);
    const PhiloxBlock block = PhiloxDraw(args.seed, args.position, row, args.stream, group);
    for (int j = 0; j < 4; ++j) {
      const int i = group * 4 + j;
      if (i < args.draws_per_row) {
        out[static_cast<int64_t>(row) * args.draws_per_row + i] = UniformOpen01(block.v[j]);
      }
    }
  }
}

}  // namespace

absl::Status InvokePhiloxFill(const PhiloxFillArgs& args, float* out_device,
                              void* cuda_stream) {
  if (args.rows <= 0 || args.draws_per_row <= 0) return absl::OkStatus();
  const int64_t groups =
      static_cast<int64_t>(args.rows) * ((args.draws_per_row + 3) / 4);
  const int threads = 256;
  const int blocks = static_cast<int>(groups < 4096 * threads ? (groups + threads - 1) / threads : 4096);
  PhiloxFillKernel<<<blocks, threads, 0, static_cast<cudaStream_t>(cuda_stream)>>>(args,
                                                                                   out_device);
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace verdict
