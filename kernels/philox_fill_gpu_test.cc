// Parity of the CUDA Philox fill with its CPU twin: every draw bit-equal.
#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/philox_fill.h"

namespace verdict {
namespace {

TEST(PhiloxFillGpuTest, DeviceDrawsEqualCpuTwinBitForBit) {
  const PhiloxFillArgs cases[] = {
      {0x0123456789abcdefull, 0, RandomStream::kAccept, 1, 1},
      {42, 123456789012ll, RandomStream::kResidual, 37, 7},
      {~0ull, 5, RandomStream::kBonus, 1000, 129},
  };
  for (const PhiloxFillArgs& args : cases) {
    const size_t n = static_cast<size_t>(args.rows) * args.draws_per_row;
    std::vector<float> expected(n), actual(n, -1.0f);
    PhiloxFillCpu(args, expected.data());
    float* device = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemset(device, 0xff, n * sizeof(float)), cudaSuccess);  // poison
    ASSERT_TRUE(InvokePhiloxFill(args, device, nullptr).ok());
    ASSERT_EQ(cudaMemcpy(actual.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(cudaFree(device), cudaSuccess);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(&expected[i], &actual[i], sizeof(float)), 0)
          << "element " << i << " of rows=" << args.rows << " draws=" << args.draws_per_row;
    }
  }
}

}  // namespace
}  // namespace verdict
