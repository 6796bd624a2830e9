#include "kernels/philox_fill.h"

namespace verdict {

void PhiloxFillCpu(const PhiloxFillArgs& args, float* out) {
  for (int row = 0; row < args.rows; ++row) {
    for (int i = 0; i < args.draws_per_row; ++i) {
      const PhiloxBlock block = PhiloxDraw(args.seed, args.position, row, args.stream,
                                           static_cast<uint32_t>(i / 4));
      out[static_cast<int64_t>(row) * args.draws_per_row + i] = UniformOpen01(block.v[i % 4]);
    }
  }
}

}  // namespace verdict
