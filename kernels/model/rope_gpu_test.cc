// Parity of the CUDA RoPE with its CPU twin, on q and k inside a fused qkv
// buffer, with Llama-3 frequencies and positions up to 131071.
#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/bf16.h"
#include "kernels/model/internal/device_buffer.h"
#include "kernels/model/internal/test_util.h"
#include "kernels/model/rope.h"

namespace verdict {
namespace {

using test_util::DeviceBuffer;

TEST(RopeGpuTest, MatchesCpuTwinInFusedQkv) {
  struct Case {
    int tokens, heads, kv_heads, head_dim;
    RopeFrequencyConfig::Scaling scaling;
    int max_position;
  };
  const Case cases[] = {
      {6, 32, 8, 128, RopeFrequencyConfig::Scaling::kLlama3, 131071},
      {384, 4, 1, 128, RopeFrequencyConfig::Scaling::kLlama3, 4096},
      {5, 16, 16, 64, RopeFrequencyConfig::Scaling::kNone, 2048},
      {3, 14, 2, 64, RopeFrequencyConfig::Scaling::kLinear, 100000},
  };
  for (const Case& c : cases) {
    RopeFrequencyConfig config;
    config.head_dim = c.head_dim;
    config.theta = c.scaling == RopeFrequencyConfig::Scaling::kLlama3 ? 500000.0 : 10000.0;
    config.scaling = c.scaling;
    config.factor = c.scaling == RopeFrequencyConfig::Scaling::kNone ? 1.0 : 8.0;
    const std::vector<float> inv_freq = ComputeRopeInvFreq(config);

    const int64_t stride = static_cast<int64_t>(c.heads + 2 * c.kv_heads) * c.head_dim;
    const size_t n = static_cast<size_t>(c.tokens) * stride;
    const std::vector<float> qkv = test_util::RandomBf16Floats(n, 2.0f, 41 + c.tokens);
    std::mt19937 rng(c.heads);
    std::uniform_int_distribution<int32_t> pos_dist(0, c.max_position);
    std::vector<int32_t> positions(c.tokens);
    for (auto& p : positions) p = pos_dist(rng);
    positions[0] = c.max_position;
    const RopeShape shape{c.tokens, c.heads, c.kv_heads, c.head_dim, stride, stride};
    const int64_t k_offset = static_cast<int64_t>(c.heads) * c.head_dim;
    std::vector<float> expected = qkv;
    RopeCpu(expected.data(), expected.data() + k_offset, positions.data(), inv_freq.data(), shape);

    DeviceBuffer<uint16_t> d_qkv(FloatToBf16Vector(qkv));
    DeviceBuffer<int32_t> d_pos(positions);
    DeviceBuffer<float> d_freq(inv_freq);
    ASSERT_TRUE(
        InvokeRope(d_qkv.get(), d_qkv.get() + k_offset, d_pos.get(), d_freq.get(), shape, nullptr)
            .ok());
    // Values are O(2); the absolute term covers one bf16 ulp near 2 plus
    // cos/sin rounding differences at angles ~1e5.
    test_util::ExpectAllNearBf16(
        expected, d_qkv.Download(), 1e-2f, 2e-2f,
        absl::StrCat("tokens=", c.tokens, " heads=", c.heads, " head_dim=", c.head_dim));
  }
}

}  // namespace
}  // namespace verdict
