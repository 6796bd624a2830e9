// The embedding CPU twin: rows of its own shard, zeros elsewhere, and the
// shards of a vocabulary summing to the full embedding.
#include "kernels/model/embedding.h"

#include <vector>

#include "gtest/gtest.h"

namespace verdict {
namespace {

TEST(EmbeddingCpuTest, CopiesOwnedRowsAndZeroesOthers) {
  // Shard holds ids 4..6 of a hidden-2 table.
  const std::vector<float> table = {40, 41, 50, 51, 60, 61};
  const EmbeddingShard shard{4, 7, 2};
  const std::vector<int32_t> ids = {5, 3, 6, 7, 4, -1};
  std::vector<float> out(12, -9.0f);
  EmbeddingCpu(ids.data(), 6, table.data(), shard, out.data());
  const std::vector<float> expected = {50, 51, 0, 0, 60, 61, 0, 0, 40, 41, 0, 0};
  EXPECT_EQ(out, expected);
}

TEST(EmbeddingCpuTest, ShardsSumToFullTable) {
  const int vocab = 8, hidden = 3, tp = 4;
  std::vector<float> full(vocab * hidden);
  for (int i = 0; i < vocab * hidden; ++i) full[i] = 0.5f * i + 1.0f;
  const std::vector<int32_t> ids = {7, 0, 3, 4, 4};
  std::vector<float> sum(ids.size() * hidden, 0.0f);
  for (int rank = 0; rank < tp; ++rank) {
    const int rows = vocab / tp;
    const EmbeddingShard shard{rank * rows, (rank + 1) * rows, hidden};
    std::vector<float> out(sum.size());
    EmbeddingCpu(ids.data(), static_cast<int>(ids.size()), full.data() + rank * rows * hidden,
                 shard, out.data());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += out[i];
  }
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int j = 0; j < hidden; ++j) {
      EXPECT_EQ(sum[t * hidden + j], full[ids[t] * hidden + j]) << t << "," << j;
    }
  }
}

}  // namespace
}  // namespace verdict
