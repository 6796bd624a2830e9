// Fills a buffer with the sampler's uniform draws: element i of row r is
// draw i of (seed, position, r, stream). The CPU twin defines the values; the
// CUDA launcher must reproduce them bit for bit. Used to check that host and
// device agree on every random number before any sampling decision does.
#ifndef VERDICT_KERNELS_PHILOX_FILL_H_
#define VERDICT_KERNELS_PHILOX_FILL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/philox.h"

namespace verdict {

struct PhiloxFillArgs {
  uint64_t seed = 0;
  int64_t position = 0;
  RandomStream stream = RandomStream::kAccept;
  int rows = 0;
  int draws_per_row = 0;  // any count; groups of four come from one block
};

// CPU twin: writes rows * draws_per_row floats to `out`.
void PhiloxFillCpu(const PhiloxFillArgs& args, float* out);

// CUDA launcher: `out_device` holds rows * draws_per_row floats.
absl::Status InvokePhiloxFill(const PhiloxFillArgs& args, float* out_device,
                              void* cuda_stream);

}  // namespace verdict

#endif  // VERDICT_KERNELS_PHILOX_FILL_H_
