// Parity of the CUDA SiLU-and-mul with its CPU twin on random inputs.
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/bf16.h"
#include "kernels/model/internal/device_buffer.h"
#include "kernels/model/internal/test_util.h"
#include "kernels/model/silu_and_mul.h"

namespace verdict {
namespace {

using test_util::DeviceBuffer;

TEST(SiluAndMulGpuTest, MatchesCpuTwin) {
  struct Shape {
    int tokens, inter;
  };
  // 14336 is Llama-3-8B's width; 1792 its TP=8 shard; 37 takes the scalar path.
  const Shape shapes[] = {{1, 14336}, {6, 1792}, {384, 14336}, {3, 37}, {5, 64}};
  for (const Shape& s : shapes) {
    const size_t in_n = static_cast<size_t>(s.tokens) * 2 * s.inter;
    const size_t out_n = static_cast<size_t>(s.tokens) * s.inter;
    const std::vector<float> gate_up = test_util::RandomBf16Floats(in_n, 6.0f, 21 + s.inter);
    std::vector<float> expected(out_n);
    SiluAndMulCpu(gate_up.data(), expected.data(), s.tokens, s.inter);

    DeviceBuffer<uint16_t> d_in(FloatToBf16Vector(gate_up));
    DeviceBuffer<uint16_t> d_out(out_n);
    d_out.Poison();
    ASSERT_TRUE(InvokeSiluAndMul(d_in.get(), d_out.get(), s.tokens, s.inter, nullptr).ok());
    test_util::ExpectAllNearBf16(expected, d_out.Download(), 1e-2f, 1e-4f,
                                 absl::StrCat("tokens=", s.tokens, " inter=", s.inter));
  }
}

}  // namespace
}  // namespace verdict
