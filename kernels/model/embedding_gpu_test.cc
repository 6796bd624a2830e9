// Parity of the CUDA embedding gather with its CPU twin, for whole and
// sharded vocabularies, float32 and bf16 outputs.
#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/bf16.h"
#include "kernels/model/embedding.h"
#include "kernels/model/internal/device_buffer.h"
#include "kernels/model/internal/test_util.h"

namespace verdict {
namespace {

using test_util::DeviceBuffer;

TEST(EmbeddingGpuTest, MatchesCpuTwin) {
  struct Case {
    int vocab_start, vocab_end, hidden, tokens, full_vocab;
  };
  const Case cases[] = {
      {0, 1000, 4096, 6, 1000},    // whole vocabulary
      {250, 500, 512, 384, 1000},  // shard 1 of 4: most ids fall outside
      {0, 77, 100, 9, 300},        // scalar path (hidden % 8 != 0)
  };
  for (const Case& c : cases) {
    const EmbeddingShard shard{c.vocab_start, c.vocab_end, c.hidden};
    const int rows = c.vocab_end - c.vocab_start;
    const std::vector<float> table =
        test_util::RandomBf16Floats(static_cast<size_t>(rows) * c.hidden, 1.0f, 31 + c.hidden);
    std::mt19937 rng(c.tokens);
    std::uniform_int_distribution<int32_t> id_dist(-2, c.full_vocab + 1);
    std::vector<int32_t> ids(c.tokens);
    for (auto& id : ids) id = id_dist(rng);
    ids[0] = c.vocab_start;  // both ends of the owned range
    ids.back() = c.vocab_end - 1;
    const size_t out_n = static_cast<size_t>(c.tokens) * c.hidden;
    std::vector<float> expected(out_n);
    EmbeddingCpu(ids.data(), c.tokens, table.data(), shard, expected.data());

    DeviceBuffer<int32_t> d_ids(ids);
    DeviceBuffer<uint16_t> d_table(FloatToBf16Vector(table));
    DeviceBuffer<float> d_out_f32(out_n);
    DeviceBuffer<uint16_t> d_out_bf16(out_n);
    d_out_f32.Poison();
    d_out_bf16.Poison();
    ASSERT_TRUE(
        InvokeEmbedding(d_ids.get(), c.tokens, d_table.get(), shard, d_out_f32.get(), nullptr)
            .ok());
    ASSERT_TRUE(
        InvokeEmbedding(d_ids.get(), c.tokens, d_table.get(), shard, d_out_bf16.get(), nullptr)
            .ok());
    // A gather copies exact bf16 values: no tolerance.
    const std::string what =
        absl::StrCat("vocab=[", c.vocab_start, ",", c.vocab_end, ") hidden=", c.hidden);
    test_util::ExpectAllNear(expected, d_out_f32.Download(), 0.0f, 0.0f, what + " f32");
    test_util::ExpectAllNearBf16(expected, d_out_bf16.Download(), 0.0f, 0.0f, what + " bf16");
  }
}

}  // namespace
}  // namespace verdict
