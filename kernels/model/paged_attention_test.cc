// The paged-attention CPU twin (with the KV-cache write twin) against a
// dense attention written out with an explicit mask, on shuffled paged
// caches whose unread slots hold NaN.
#include "kernels/model/paged_attention.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/model/internal/attention_test_case.h"
#include "kernels/model/internal/test_util.h"
#include "kernels/model/kv_cache_write.h"
#include "kernels/model/rope.h"

namespace verdict {
namespace {

using test_util::AttentionCase;
using test_util::MakeAttentionCase;

TEST(KvCacheWriteCpuTest, StoresEveryTokenAtItsSlot) {
  for (const auto& spec : test_util::StandardAttentionSpecs()) {
    AttentionCase c = MakeAttentionCase(spec);
    const PagedBatch batch = c.Batch();
    KvCacheWriteCpu(c.qkv.data() + c.k_offset(), c.qkv_stride, c.qkv.data() + c.v_offset(),
                    c.qkv_stride, batch, c.layout, c.k_cache.data(), c.v_cache.data());
    const int64_t width = c.layout.slot_stride();
    for (int r = 0; r < batch.num_reqs; ++r) {
      for (int t = c.q_start[r]; t < c.q_start[r + 1]; ++t) {
        const int p = c.positions[t];
        const int64_t slot = KvSlot(c.block_tables.data(), c.layout, r, p);
        for (int64_t i = 0; i < width; ++i) {
          ASSERT_EQ(c.k_cache[slot * width + i], c.dense_k[r][p * width + i]) << spec.Name();
          ASSERT_EQ(c.v_cache[slot * width + i], c.dense_v[r][p * width + i]) << spec.Name();
        }
      }
    }
  }
}

TEST(RopeKvCacheWriteCpuTest, EqualsRopeThenKvCacheWrite) {
  // The fused twin is RopeCpu then KvCacheWriteCpu: the same floats in q, k,
  // v and both caches (compared as bytes, since unowned slots hold NaN).
  for (const auto& spec : test_util::StandardAttentionSpecs()) {
    RopeFrequencyConfig freq;
    freq.head_dim = spec.head_dim;
    const std::vector<float> inv_freq = ComputeRopeInvFreq(freq);
    AttentionCase fused = MakeAttentionCase(spec);
    AttentionCase apart = MakeAttentionCase(spec);
    const int64_t stride = fused.qkv_stride;
    RopeKvCacheWriteCpu(fused.qkv.data(), stride, fused.qkv.data() + fused.k_offset(), stride,
                        fused.qkv.data() + fused.v_offset(), stride, inv_freq.data(),
                        fused.config.num_heads, fused.Batch(), fused.layout, fused.k_cache.data(),
                        fused.v_cache.data());
    const PagedBatch batch = apart.Batch();
    RopeShape shape;
    shape.tokens = batch.total_q;
    shape.num_heads = apart.config.num_heads;
    shape.num_kv_heads = apart.layout.num_kv_heads;
    shape.head_dim = apart.layout.head_dim;
    shape.q_token_stride = shape.k_token_stride = stride;
    RopeCpu(apart.qkv.data(), apart.qkv.data() + apart.k_offset(), batch.positions, inv_freq.data(),
            shape);
    KvCacheWriteCpu(apart.qkv.data() + apart.k_offset(), stride,
                    apart.qkv.data() + apart.v_offset(), stride, batch, apart.layout,
                    apart.k_cache.data(), apart.v_cache.data());
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    EXPECT_TRUE(same(fused.qkv, apart.qkv)) << spec.Name();
    EXPECT_TRUE(same(fused.k_cache, apart.k_cache)) << spec.Name();
    EXPECT_TRUE(same(fused.v_cache, apart.v_cache)) << spec.Name();
    EXPECT_TRUE(fused.qkv != MakeAttentionCase(spec).qkv) << "rotated " << spec.Name();
  }
}

TEST(PagedAttentionCpuTest, MatchesDenseMaskedAttention) {
  for (const auto& spec : test_util::StandardAttentionSpecs()) {
    AttentionCase c = MakeAttentionCase(spec);
    const PagedBatch batch = c.Batch();
    KvCacheWriteCpu(c.qkv.data() + c.k_offset(), c.qkv_stride, c.qkv.data() + c.v_offset(),
                    c.qkv_stride, batch, c.layout, c.k_cache.data(), c.v_cache.data());
    const int64_t out_stride = static_cast<int64_t>(c.config.num_heads) * c.layout.head_dim;
    std::vector<float> out(static_cast<size_t>(c.total_q) * out_stride, -7.0f);
    PagedAttentionCpu(c.qkv.data(), c.qkv_stride, c.k_cache.data(), c.v_cache.data(), batch,
                      c.layout, c.config, out.data(), out_stride);
    test_util::ExpectAllNear(test_util::DenseAttention(c), out, 1e-5f, 1e-6f, spec.Name());
  }
}

TEST(PagedAttentionCpuTest, SingleKeyReturnsItsValue) {
  // Position 0 sees only itself: the output is v exactly, whatever q is.
  test_util::AttentionCaseSpec spec;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.head_dim = 8;
  spec.block_size = 4;
  spec.q_lens = {1};
  spec.kv_lens = {1};
  AttentionCase c = MakeAttentionCase(spec);
  const PagedBatch batch = c.Batch();
  KvCacheWriteCpu(c.qkv.data() + c.k_offset(), c.qkv_stride, c.qkv.data() + c.v_offset(),
                  c.qkv_stride, batch, c.layout, c.k_cache.data(), c.v_cache.data());
  std::vector<float> out(4 * 8);
  PagedAttentionCpu(c.qkv.data(), c.qkv_stride, c.k_cache.data(), c.v_cache.data(), batch, c.layout,
                    c.config, out.data(), 32);
  for (int h = 0; h < 4; ++h) {
    for (int i = 0; i < 8; ++i) {
      EXPECT_FLOAT_EQ(out[h * 8 + i], c.qkv[c.v_offset() + (h / 2) * 8 + i]) << h << "," << i;
    }
  }
}

}  // namespace
}  // namespace verdict
