// Parity of the CUDA RMSNorm launchers with their CPU twins on random rows.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/bf16.h"
#include "kernels/model/internal/device_buffer.h"
#include "kernels/model/internal/test_util.h"
#include "kernels/model/rms_norm.h"

namespace verdict {
namespace {

using test_util::DeviceBuffer;
using test_util::ExpectAllNear;
using test_util::ExpectAllNearBf16;
using test_util::RandomBf16Floats;
using test_util::RandomFloats;

// bf16 outputs: one rounding (2^-8 relative) plus float summation order.
constexpr float kBf16Rel = 1e-2f;
constexpr float kBf16Abs = 1e-3f;

struct Shape {
  int rows;
  int width;
};

// Width 100 takes the scalar path (not a multiple of 8); the others the
// 16-byte vector path.
const Shape kShapes[] = {{1, 4096}, {6, 4096}, {384, 4096}, {5, 64}, {3, 100}, {9, 5120}};

TEST(RmsNormGpuTest, Float32InputMatchesCpuTwin) {
  for (const Shape& s : kShapes) {
    const size_t n = static_cast<size_t>(s.rows) * s.width;
    const std::vector<float> x = RandomFloats(n, 2.0f, 1 + s.width);
    const std::vector<float> w = RandomBf16Floats(s.width, 1.5f, 2 + s.rows);
    std::vector<float> expected(n);
    RmsNormCpu(x.data(), w.data(), expected.data(), s.rows, s.width, 1e-5f);

    DeviceBuffer<float> d_x(x);
    DeviceBuffer<uint16_t> d_w(FloatToBf16Vector(w));
    DeviceBuffer<uint16_t> d_out(n);
    d_out.Poison();
    ASSERT_TRUE(
        InvokeRmsNorm(d_x.get(), d_w.get(), d_out.get(), s.rows, s.width, 1e-5f, nullptr).ok());
    ExpectAllNearBf16(expected, d_out.Download(), kBf16Rel, kBf16Abs,
                      absl::StrCat("f32 rows=", s.rows, " width=", s.width));
  }
}

TEST(RmsNormGpuTest, Bf16InputMatchesCpuTwin) {
  for (const Shape& s : kShapes) {
    const size_t n = static_cast<size_t>(s.rows) * s.width;
    const std::vector<float> x = RandomBf16Floats(n, 3.0f, 3 + s.width);
    const std::vector<float> w = RandomBf16Floats(s.width, 1.5f, 4 + s.rows);
    std::vector<float> expected(n);
    RmsNormCpu(x.data(), w.data(), expected.data(), s.rows, s.width, 1e-6f);

    DeviceBuffer<uint16_t> d_x(FloatToBf16Vector(x));
    DeviceBuffer<uint16_t> d_w(FloatToBf16Vector(w));
    DeviceBuffer<uint16_t> d_out(n);
    d_out.Poison();
    ASSERT_TRUE(
        InvokeRmsNorm(d_x.get(), d_w.get(), d_out.get(), s.rows, s.width, 1e-6f, nullptr).ok());
    ExpectAllNearBf16(expected, d_out.Download(), kBf16Rel, kBf16Abs,
                      absl::StrCat("bf16 rows=", s.rows, " width=", s.width));
  }
}

TEST(RmsNormGpuTest, AddRmsNormMatchesCpuTwin) {
  for (const Shape& s : kShapes) {
    const size_t n = static_cast<size_t>(s.rows) * s.width;
    const std::vector<float> x = RandomBf16Floats(n, 1.0f, 5 + s.width);
    const std::vector<float> residual = RandomFloats(n, 4.0f, 6 + s.width);
    const std::vector<float> w = RandomBf16Floats(s.width, 1.5f, 7 + s.rows);
    std::vector<float> expected_residual = residual;
    std::vector<float> expected(n);
    AddRmsNormCpu(x.data(), expected_residual.data(), w.data(), expected.data(), s.rows, s.width,
                  1e-5f);

    DeviceBuffer<uint16_t> d_x(FloatToBf16Vector(x));
    DeviceBuffer<float> d_residual(residual);
    DeviceBuffer<uint16_t> d_w(FloatToBf16Vector(w));
    DeviceBuffer<uint16_t> d_out(n);
    d_out.Poison();
    ASSERT_TRUE(InvokeAddRmsNorm(d_x.get(), d_residual.get(), d_w.get(), d_out.get(), s.rows,
                                 s.width, 1e-5f, nullptr)
                    .ok());
    const std::string what = absl::StrCat("add rows=", s.rows, " width=", s.width);
    // The add is one float addition on both sides: exact agreement.
    ExpectAllNear(expected_residual, d_residual.Download(), 0.0f, 0.0f, what + " residual");
    ExpectAllNearBf16(expected, d_out.Download(), kBf16Rel, kBf16Abs, what + " out");
  }
}

TEST(RmsNormGpuTest, HeadRmsNormMatchesCpuTwinInsideFusedBuffer) {
  struct HeadShape {
    int tokens, heads, head_dim, stride_heads;  // stride in heads (q + k + v of a fused qkv)
  };
  const HeadShape cases[] = {{7, 32, 128, 48}, {1, 8, 128, 48}, {5, 16, 64, 20}, {3, 4, 96, 9}};
  for (const HeadShape& c : cases) {
    const int64_t stride = static_cast<int64_t>(c.stride_heads) * c.head_dim;
    const size_t n = static_cast<size_t>(c.tokens) * stride;
    std::vector<float> x = RandomBf16Floats(n, 2.0f, 11 + c.head_dim);
    const std::vector<float> w = RandomBf16Floats(c.head_dim, 1.5f, 12 + c.heads);
    // Normalise the heads that start one head into each token, as k does
    // after q in a fused buffer; the rest must come back untouched.
    const int64_t offset = c.head_dim;
    std::vector<float> expected = x;
    HeadRmsNormCpu(expected.data() + offset, c.tokens, c.heads, c.head_dim, stride, w.data(),
                   1e-6f);

    DeviceBuffer<uint16_t> d_x(FloatToBf16Vector(x));
    DeviceBuffer<uint16_t> d_w(FloatToBf16Vector(w));
    ASSERT_TRUE(InvokeHeadRmsNorm(d_x.get() + offset, c.tokens, c.heads, c.head_dim, stride,
                                  d_w.get(), 1e-6f, nullptr)
                    .ok());
    ExpectAllNearBf16(
        expected, d_x.Download(), kBf16Rel, kBf16Abs,
        absl::StrCat("head tokens=", c.tokens, " heads=", c.heads, " head_dim=", c.head_dim));
  }
}

}  // namespace
}  // namespace verdict
