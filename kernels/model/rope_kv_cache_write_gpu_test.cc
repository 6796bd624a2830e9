// The fused RoPE + KV-cache write against the two launches it replaces
// (InvokeRope then InvokeKvCacheWrite, bit for bit: q, k, v and both caches)
// and against its CPU twin: Llama-3.2-1B, Llama-3.1-8B and a small odd
// shape; 1, 6 and 384 tokens over 1-4 ragged requests at positions up to
// ~100000; shuffled paged blocks, rings of blocks and the runtime's one-block
// ring; the fused qkv buffer and separate q, k, v with their own strides; a
// batch beyond one grid's 65535 tokens; bad shapes.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "kernels/bf16.h"
#include "kernels/model/internal/attention_test_case.h"
#include "kernels/model/internal/device_buffer.h"
#include "kernels/model/internal/test_util.h"
#include "kernels/model/kv_cache_write.h"
#include "kernels/model/paged_kv.h"
#include "kernels/model/rope.h"

namespace verdict {
namespace {

using test_util::DeviceBuffer;

struct FusedSpec {
  int heads = 32;
  int kv_heads = 8;
  int head_dim = 128;
  std::vector<int> q_lens;  // query tokens per request
  int max_position = 100000;
  int block_size = 16;
  // 0: a linear table; > 0: a ring of this many table entries, each request
  // getting its own blocks (sliding-window layers).
  int ring_blocks = 0;
  // false: q, k and v sit in one fused qkv row (the runtime's layout);
  // true: three separate buffers whose token strides differ and carry
  // padding, so a stride mix-up shows.
  bool separate = false;
  // RoPE frequencies (rope.h): Llama-3 scaling by default, as Llama 3.1.
  RopeFrequencyConfig::Scaling scaling = RopeFrequencyConfig::Scaling::kLlama3;
  double theta = 500000.0;
  double factor = 8.0;
  uint64_t seed = 1;

  std::string Name() const {
    return absl::StrCat("heads=", heads, "/", kv_heads, " head_dim=", head_dim, " q_lens=[",
                        absl::StrJoin(q_lens, ","), "] block=", block_size,
                        " ring_blocks=", ring_blocks, separate ? " separate" : " fused");
  }
};

// A host problem: one bf16-exact float buffer holding q, k and v (at their
// offsets and strides), random caches, and the paged batch.
struct FusedProblem : test_util::HostPagedBatch {
  FusedSpec spec;
  KvCacheLayout layout;
  std::vector<float> inv_freq;
  int64_t q_offset = 0, k_offset = 0, v_offset = 0;
  int64_t q_stride = 0, k_stride = 0, v_stride = 0;
  std::vector<float> qkv;
  std::vector<float> k_cache, v_cache;
};

FusedProblem MakeProblem(const FusedSpec& spec) {
  FusedProblem p;
  p.spec = spec;
  std::mt19937_64 rng(spec.seed);
  const int num_reqs = static_cast<int>(spec.q_lens.size());
  const int bs = spec.block_size;

  RopeFrequencyConfig freq;
  freq.head_dim = spec.head_dim;
  freq.scaling = spec.scaling;
  freq.theta = spec.theta;
  freq.factor = spec.factor;
  p.inv_freq = ComputeRopeInvFreq(freq);

  // Each request's step tokens end at a random position (the first request
  // at max_position), consecutive like a decode or verify block.
  p.q_start.assign(1, 0);
  for (int r = 0; r < num_reqs; ++r) {
    const int len = spec.q_lens[r];
    std::uniform_int_distribution<int> last_dist(len - 1, spec.max_position);
    const int last = r == 0 ? spec.max_position : last_dist(rng);
    for (int i = 0; i < len; ++i) p.positions.push_back(last - len + 1 + i);
    p.q_start.push_back(p.q_start.back() + len);
    p.kv_len.push_back(last + 1);
    p.max_q = std::max(p.max_q, len);
    p.max_kv = std::max(p.max_kv, last + 1);
  }
  p.total_q = p.q_start.back();

  // Table entries each request's tokens touch: the logical blocks of its
  // positions (linear) or the whole ring. Physical block 0 is the target of
  // every unused entry and, like the other blocks, must come out as it went
  // in where no token maps.
  const int row = spec.ring_blocks > 0 ? spec.ring_blocks + 2 : spec.max_position / bs + 3;
  std::vector<std::vector<int>> entries(num_reqs);
  int owned = 0;
  for (int r = 0; r < num_reqs; ++r) {
    if (spec.ring_blocks > 0) {
      entries[r].resize(spec.ring_blocks);
      std::iota(entries[r].begin(), entries[r].end(), 0);
    } else {
      const int first = p.positions[p.q_start[r]] / bs;
      const int last = p.positions[p.q_start[r + 1] - 1] / bs;
      for (int b = first; b <= last; ++b) entries[r].push_back(b);
    }
    owned += static_cast<int>(entries[r].size());
  }
  const int num_blocks = owned + 3;
  std::vector<int32_t> physical(num_blocks - 1);
  std::iota(physical.begin(), physical.end(), 1);
  std::shuffle(physical.begin(), physical.end(), rng);
  p.block_tables.assign(static_cast<size_t>(num_reqs) * row, 0);
  int next = 0;
  for (int r = 0; r < num_reqs; ++r) {
    for (int e : entries[r]) p.block_tables[static_cast<size_t>(r) * row + e] = physical[next++];
  }

  p.layout.num_blocks = num_blocks;
  p.layout.block_size = bs;
  p.layout.num_kv_heads = spec.kv_heads;
  p.layout.head_dim = spec.head_dim;
  p.layout.max_blocks_per_req = row;
  p.layout.ring_blocks = spec.ring_blocks;

  const int64_t q_size = static_cast<int64_t>(spec.heads) * spec.head_dim;
  const int64_t kv_size = static_cast<int64_t>(spec.kv_heads) * spec.head_dim;
  const int64_t t = p.total_q;
  if (spec.separate) {
    p.q_stride = q_size + 2;
    p.k_stride = kv_size + 6;
    p.v_stride = kv_size + 4;
    p.q_offset = 0;
    p.k_offset = t * p.q_stride;
    p.v_offset = p.k_offset + t * p.k_stride;
    p.qkv = test_util::RandomBf16Floats(p.v_offset + t * p.v_stride, 2.0f, spec.seed + 1);
  } else {
    p.q_stride = p.k_stride = p.v_stride = q_size + 2 * kv_size;
    p.q_offset = 0;
    p.k_offset = q_size;
    p.v_offset = q_size + kv_size;
    p.qkv = test_util::RandomBf16Floats(t * p.q_stride, 2.0f, spec.seed + 1);
  }
  const size_t cache_n = static_cast<size_t>(num_blocks) * bs * kv_size;
  p.k_cache = test_util::RandomBf16Floats(cache_n, 2.0f, spec.seed + 2);
  p.v_cache = test_util::RandomBf16Floats(cache_n, 2.0f, spec.seed + 3);
  return p;
}

using DeviceBatch = test_util::DevicePagedBatch<test_util::HostPagedBatch>;

// Bit equality with the first few differing indices on failure.
void ExpectSameBits(const std::vector<uint16_t>& expected, const std::vector<uint16_t>& actual,
                    const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] != actual[i]) {
      ADD_FAILURE() << what << ": element " << i << " expected bits " << expected[i] << " got "
                    << actual[i];
      if (++failures >= 8) return;
    }
  }
}

// Values are O(2) (rope_gpu_test's tolerances): the absolute term covers
// one bf16 ulp near 2 plus cos/sin rounding differences at angles ~1e5.
constexpr float kRel = 1e-2f;
constexpr float kAbs = 2e-2f;

void RunCase(const FusedSpec& spec) {
  SCOPED_TRACE(spec.Name());
  const FusedProblem p = MakeProblem(spec);
  const PagedBatch host_batch = p.Batch();

  // CPU twin.
  std::vector<float> cpu_qkv = p.qkv, cpu_k = p.k_cache, cpu_v = p.v_cache;
  RopeKvCacheWriteCpu(cpu_qkv.data() + p.q_offset, p.q_stride, cpu_qkv.data() + p.k_offset,
                      p.k_stride, cpu_qkv.data() + p.v_offset, p.v_stride, p.inv_freq.data(),
                      spec.heads, host_batch, p.layout, cpu_k.data(), cpu_v.data());

  DeviceBatch d_batch(p);
  const PagedBatch batch = d_batch.Get(p);
  DeviceBuffer<float> d_freq(p.inv_freq);
  const std::vector<uint16_t> qkv_bits = FloatToBf16Vector(p.qkv);
  const std::vector<uint16_t> k_bits = FloatToBf16Vector(p.k_cache);
  const std::vector<uint16_t> v_bits = FloatToBf16Vector(p.v_cache);

  // Reference: the two launches the fused one replaces.
  DeviceBuffer<uint16_t> ref_qkv(qkv_bits), ref_k(k_bits), ref_v(v_bits);
  const RopeShape rope{p.total_q, spec.heads, spec.kv_heads, spec.head_dim, p.q_stride, p.k_stride};
  absl::Status s = InvokeRope(ref_qkv.get() + p.q_offset, ref_qkv.get() + p.k_offset,
                              d_batch.positions.get(), d_freq.get(), rope, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = InvokeKvCacheWrite(ref_qkv.get() + p.k_offset, p.k_stride, ref_qkv.get() + p.v_offset,
                         p.v_stride, batch, p.layout, ref_k.get(), ref_v.get(), nullptr);
  ASSERT_TRUE(s.ok()) << s;

  // The fused launch on a copy of the same inputs.
  DeviceBuffer<uint16_t> qkv(qkv_bits), k_cache(k_bits), v_cache(v_bits);
  s = InvokeRopeKvCacheWrite(qkv.get() + p.q_offset, p.q_stride, qkv.get() + p.k_offset, p.k_stride,
                             qkv.get() + p.v_offset, p.v_stride, d_freq.get(), spec.heads, batch,
                             p.layout, k_cache.get(), v_cache.get(), nullptr);
  ASSERT_TRUE(s.ok()) << s;

  const std::vector<uint16_t> got_qkv = qkv.Download();
  const std::vector<uint16_t> got_k = k_cache.Download();
  const std::vector<uint16_t> got_v = v_cache.Download();
  // Bit for bit the two launches' results: rotated q and k, untouched v and
  // padding, every cache slot.
  ExpectSameBits(ref_qkv.Download(), got_qkv, "qkv vs InvokeRope");
  ExpectSameBits(ref_k.Download(), got_k, "k cache vs InvokeKvCacheWrite");
  ExpectSameBits(ref_v.Download(), got_v, "v cache vs InvokeKvCacheWrite");
  // And close to the CPU twin.
  test_util::ExpectAllNearBf16(cpu_qkv, got_qkv, kRel, kAbs, "qkv vs CPU twin");
  test_util::ExpectAllNearBf16(cpu_k, got_k, kRel, kAbs, "k cache vs CPU twin");
  test_util::ExpectAllNearBf16(cpu_v, got_v, kRel, kAbs, "v cache vs CPU twin");
}

TEST(RopeKvCacheWriteGpuTest, MatchesRopeThenKvCacheWrite) {
  struct Shape {
    int heads, kv_heads, head_dim;
    RopeFrequencyConfig::Scaling scaling;
    double theta, factor;
  };
  const Shape shapes[] = {
      {32, 8, 64, RopeFrequencyConfig::Scaling::kLlama3, 500000.0, 32.0},  // Llama-3.2-1B
      {32, 8, 128, RopeFrequencyConfig::Scaling::kLlama3, 500000.0, 8.0},  // Llama-3.1-8B
      {14, 2, 64, RopeFrequencyConfig::Scaling::kNone, 1000000.0, 1.0},    // small, odd
  };
  // 1, 6 and 384 tokens over 1-4 requests with ragged lengths.
  const std::vector<std::vector<int>> q_lens = {{1}, {3, 1, 2}, {200, 1, 150, 33}};
  uint64_t seed = 100;
  for (const Shape& shape : shapes) {
    for (const std::vector<int>& lens : q_lens) {
      for (int layout = 0; layout < 3; ++layout) {
        FusedSpec spec;
        spec.heads = shape.heads;
        spec.kv_heads = shape.kv_heads;
        spec.head_dim = shape.head_dim;
        spec.scaling = shape.scaling;
        spec.theta = shape.theta;
        spec.factor = shape.factor;
        spec.q_lens = lens;
        spec.seed = ++seed;
        const int max_q = *std::max_element(lens.begin(), lens.end());
        if (layout == 1) {
          // A ring of 16-token blocks that holds the step's tokens plus one
          // block, as a sliding-window layer's table.
          spec.ring_blocks = (max_q + 15) / 16 + 1;
        } else if (layout == 2) {
          // Separate q, k, v buffers, and a linear table.
          spec.separate = true;
        }
        RunCase(spec);
      }
    }
  }
}

TEST(RopeKvCacheWriteGpuTest, RuntimeSlidingWindowRing) {
  // The runtime's sliding-window cache: one block of window + 6 slots per
  // request used as a ring of one block (slot = ring * 134 + p % 134).
  FusedSpec spec;
  spec.heads = 14;
  spec.kv_heads = 2;
  spec.head_dim = 64;
  spec.q_lens = {6, 1, 4};
  spec.block_size = 134;
  spec.ring_blocks = 1;
  spec.seed = 7;
  RunCase(spec);
  spec.heads = 32;
  spec.kv_heads = 8;
  spec.head_dim = 128;
  spec.separate = true;
  spec.seed = 8;
  RunCase(spec);
}

TEST(RopeKvCacheWriteGpuTest, MoreTokensThanOneGridHolds) {
  // 70001 tokens: a second launch with a token offset, whose request lookup
  // needs the token's index in the whole batch (requests span the split).
  FusedSpec spec;
  spec.heads = 2;
  spec.kv_heads = 1;
  spec.head_dim = 64;
  spec.q_lens = {30000, 1, 40000};
  spec.seed = 9;
  RunCase(spec);
}

TEST(RopeKvCacheWriteGpuTest, RejectsBadShapes) {
  KvCacheLayout good;
  good.num_blocks = 4;
  good.block_size = 16;
  good.num_kv_heads = 2;
  good.head_dim = 64;
  good.max_blocks_per_req = 4;
  PagedBatch batch;
  batch.num_reqs = 1;
  batch.total_q = 1;
  auto run = [&](const PagedBatch& b, const KvCacheLayout& layout, int heads) {
    // The checks come before any device access, so null pointers are fine.
    return InvokeRopeKvCacheWrite(nullptr, 512, nullptr, 512, nullptr, 512, nullptr, heads, b,
                                  layout, nullptr, nullptr, nullptr);
  };
  auto expect_invalid = [](const absl::Status& s, const std::string& what) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
  };
  KvCacheLayout layout = good;
  layout.head_dim = 63;
  expect_invalid(run(batch, layout, 8), "odd head_dim");
  layout.head_dim = 0;
  expect_invalid(run(batch, layout, 8), "head_dim 0");
  layout = good;
  layout.num_kv_heads = 0;
  expect_invalid(run(batch, layout, 8), "no kv heads");
  layout = good;
  layout.block_size = 0;
  expect_invalid(run(batch, layout, 8), "block_size 0");
  layout = good;
  layout.max_blocks_per_req = 0;
  expect_invalid(run(batch, layout, 8), "empty table rows");
  expect_invalid(run(batch, good, -1), "negative heads");
  PagedBatch bad = batch;
  bad.total_q = -1;
  expect_invalid(run(bad, good, 8), "negative total_q");
  bad = batch;
  bad.num_reqs = -1;
  expect_invalid(run(bad, good, 8), "negative num_reqs");
  bad = batch;
  bad.num_reqs = 0;
  expect_invalid(run(bad, good, 8), "tokens without requests");
  layout = good;
  layout.num_kv_heads = 1 << 20;
  layout.head_dim = 1 << 12;
  expect_invalid(run(batch, layout, 8), "rows too wide for int indices");
  // An empty batch is fine and touches nothing.
  PagedBatch empty;
  EXPECT_TRUE(run(empty, good, 8).ok());
}

}  // namespace
}  // namespace verdict
