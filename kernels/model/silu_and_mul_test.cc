// The SiLU-and-mul CPU twin against values computed by hand.
#include "kernels/model/silu_and_mul.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace verdict {
namespace {

TEST(SiluAndMulCpuTest, GateFirstThenUp) {
  // Two tokens, inter = 2: rows are [g0, g1, u0, u1].
  const std::vector<float> gate_up = {0.0f, 1.0f, 3.0f, -2.0f, -1.0f, 2.0f, 0.5f, 4.0f};
  std::vector<float> out(4);
  SiluAndMulCpu(gate_up.data(), out.data(), 2, 2);
  auto silu = [](double g) { return g / (1.0 + std::exp(-g)); };
  EXPECT_NEAR(out[0], silu(0.0) * 3.0, 1e-6);   // silu(0) = 0
  EXPECT_NEAR(out[1], silu(1.0) * -2.0, 1e-6);  // 0.7310586 * -2
  EXPECT_NEAR(out[2], silu(-1.0) * 0.5, 1e-6);
  EXPECT_NEAR(out[3], silu(2.0) * 4.0, 1e-6);
  EXPECT_NEAR(silu(1.0), 0.7310585786, 1e-9);
}

}  // namespace
}  // namespace verdict
