// Parity of the CUDA KV-cache write and paged attention with their CPU
// twins: ragged batches, shuffled blocks, NaN in every slot a kernel must
// not read, GQA 1/4/8, head_dim 64/128, sliding windows (linear and ring),
// prefill blocks, with and without the split-KV workspace.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/bf16.h"
#include "kernels/model/internal/attention_test_case.h"
#include "kernels/model/internal/device_buffer.h"
#include "kernels/model/internal/test_util.h"
#include "kernels/model/kv_cache_write.h"
#include "kernels/model/paged_attention.h"

namespace verdict {
namespace {

using test_util::AttentionCase;
using test_util::AttentionCaseSpec;
using test_util::DeviceBuffer;

using DeviceBatch = test_util::DevicePagedBatch<test_util::HostPagedBatch>;

// bf16 outputs of a softmax-weighted mean of O(1) values, with P rounded to
// bf16 inside the kernel: 1e-2 relative plus a small absolute floor for
// outputs near zero.
constexpr float kRel = 1e-2f;
constexpr float kAbs = 4e-3f;

void RunCase(const AttentionCaseSpec& spec) {
  SCOPED_TRACE(spec.Name());
  AttentionCase c = test_util::MakeAttentionCase(spec);
  const PagedBatch host_batch = c.Batch();

  // CPU: write then attend.
  std::vector<float> k_cache = c.k_cache, v_cache = c.v_cache;
  KvCacheWriteCpu(c.qkv.data() + c.k_offset(), c.qkv_stride, c.qkv.data() + c.v_offset(),
                  c.qkv_stride, host_batch, c.layout, k_cache.data(), v_cache.data());
  const int64_t out_stride = static_cast<int64_t>(c.config.num_heads) * c.layout.head_dim;
  std::vector<float> expected(static_cast<size_t>(c.total_q) * out_stride);
  PagedAttentionCpu(c.qkv.data(), c.qkv_stride, k_cache.data(), v_cache.data(), host_batch,
                    c.layout, c.config, expected.data(), out_stride);

  // Device: same inputs (the NaN poison survives the bf16 conversion).
  DeviceBatch d_batch(c);
  const PagedBatch batch = d_batch.Get(c);
  DeviceBuffer<uint16_t> d_qkv(FloatToBf16Vector(c.qkv));
  DeviceBuffer<uint16_t> d_k(FloatToBf16Vector(c.k_cache));
  DeviceBuffer<uint16_t> d_v(FloatToBf16Vector(c.v_cache));
  ASSERT_TRUE(InvokeKvCacheWrite(d_qkv.get() + c.k_offset(), c.qkv_stride,
                                 d_qkv.get() + c.v_offset(), c.qkv_stride, batch, c.layout,
                                 d_k.get(), d_v.get(), nullptr)
                  .ok());
  // The written caches equal the CPU's bit for bit (NaN where unwritten).
  {
    const std::vector<uint16_t> expect_k = FloatToBf16Vector(k_cache);
    const std::vector<uint16_t> expect_v = FloatToBf16Vector(v_cache);
    EXPECT_TRUE(expect_k == d_k.Download()) << "k cache after write";
    EXPECT_TRUE(expect_v == d_v.Download()) << "v cache after write";
  }

  const size_t ws_bytes = PagedAttentionWorkspaceBytes(batch, c.layout, c.config);
  DeviceBuffer<uint8_t> d_ws(ws_bytes);
  DeviceBuffer<uint16_t> d_out(expected.size());
  for (int with_workspace = 0; with_workspace < 2; ++with_workspace) {
    d_out.Poison();
    const absl::Status s = InvokePagedAttention(
        d_qkv.get(), c.qkv_stride, d_k.get(), d_v.get(), batch, c.layout, c.config, d_out.get(),
        out_stride, with_workspace ? d_ws.get() : nullptr, with_workspace ? ws_bytes : 0, nullptr);
    ASSERT_TRUE(s.ok()) << s;
    test_util::ExpectAllNearBf16(expected, d_out.Download(), kRel, kAbs,
                                 absl::StrCat("workspace=", with_workspace ? ws_bytes : 0));
  }
}

TEST(PagedAttentionGpuTest, StandardCases) {
  for (const AttentionCaseSpec& spec : test_util::StandardAttentionSpecs()) RunCase(spec);
}

TEST(PagedAttentionGpuTest, BenchmarkShapes) {
  // The decoder benchmark's shapes: 8B Llama-3 attention, 6 tokens per
  // request after 512 tokens of context, at batch 1, 8 and 64.
  for (int batch : {1, 8, 64}) {
    AttentionCaseSpec spec;
    spec.num_heads = 32;
    spec.num_kv_heads = 8;
    spec.head_dim = 128;
    spec.q_lens.assign(batch, 6);
    spec.kv_lens.assign(batch, 518);
    spec.seed = 77 + batch;
    RunCase(spec);
  }
}

// A launch whose context bound is far longer than the requests' contexts
// (a CUDA graph that serves every context): most KV splits hold no key and
// return at once, and the merge reads only the ones before them. Decode and
// verify blocks, a request with no query tokens, a sliding window.
TEST(PagedAttentionGpuTest, ShortContextsUnderALongBound) {
  for (const int bound : {4096, 131072}) {
    AttentionCaseSpec decode;
    decode.num_heads = 32;
    decode.num_kv_heads = 8;
    decode.q_lens = {1};
    decode.kv_lens = {37};
    decode.launch_kv_bound = bound;
    RunCase(decode);

    AttentionCaseSpec verify = decode;
    verify.q_lens = {6, 0, 6, 3};
    verify.kv_lens = {300, 1, 70, 129};
    verify.seed = 9;
    RunCase(verify);

    AttentionCaseSpec window = verify;
    window.window = 64;
    window.seed = 10;
    RunCase(window);
  }
}

TEST(PagedAttentionGpuTest, MoreCases) {
  // Long decode context (splits), MHA prefill with head_dim 64, a request
  // with no query tokens in the middle of the batch, block size 8, and block
  // sizes that are not powers of two.
  AttentionCaseSpec long_decode;
  long_decode.num_heads = 8;
  long_decode.num_kv_heads = 1;
  long_decode.head_dim = 128;
  long_decode.q_lens = {1};
  long_decode.kv_lens = {5000};
  RunCase(long_decode);

  AttentionCaseSpec prefill;
  prefill.num_heads = 4;
  prefill.num_kv_heads = 4;
  prefill.head_dim = 64;
  prefill.q_lens = {129, 64, 1};
  prefill.kv_lens = {129, 100, 9};
  prefill.seed = 5;
  RunCase(prefill);

  AttentionCaseSpec empty_middle;
  empty_middle.num_heads = 8;
  empty_middle.num_kv_heads = 2;
  empty_middle.head_dim = 128;
  empty_middle.block_size = 8;
  empty_middle.q_lens = {3, 0, 2};
  empty_middle.kv_lens = {70, 40, 9};
  empty_middle.seed = 6;
  RunCase(empty_middle);

  // Block sizes that are not powers of two (the kernel's division path),
  // linear and as a ring.
  AttentionCaseSpec odd_blocks;
  odd_blocks.num_heads = 8;
  odd_blocks.num_kv_heads = 2;
  odd_blocks.head_dim = 128;
  odd_blocks.block_size = 12;
  odd_blocks.q_lens = {6, 2};
  odd_blocks.kv_lens = {300, 45};
  odd_blocks.seed = 7;
  RunCase(odd_blocks);

  AttentionCaseSpec odd_ring = odd_blocks;
  odd_ring.block_size = 24;
  odd_ring.window = 50;
  odd_ring.ring = true;
  odd_ring.seed = 8;
  RunCase(odd_ring);
}

}  // namespace
}  // namespace verdict
