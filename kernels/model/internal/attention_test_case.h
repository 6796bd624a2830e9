// Random paged-attention problems for the attention tests: a ragged batch
// whose step tokens sit at the tail of each request's context, a fused qkv
// buffer for the step, earlier context already in a paged cache whose
// blocks are shuffled, and NaN everywhere a correct kernel never reads
// (unowned blocks, unwritten tail slots, unused block-table entries point at
// a NaN block), so a wrong slot shows up in the output.
#ifndef VERDICT_KERNELS_MODEL_INTERNAL_ATTENTION_TEST_CASE_H_
#define VERDICT_KERNELS_MODEL_INTERNAL_ATTENTION_TEST_CASE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/bf16.h"
#include "kernels/model/paged_attention.h"
#include "kernels/model/paged_kv.h"

namespace verdict {
namespace test_util {

struct AttentionCaseSpec {
  int num_heads = 8;
  int num_kv_heads = 8;
  int head_dim = 128;
  int block_size = 16;
  int window = 0;            // sliding window, 0 = none
  bool ring = false;         // window layers only: the cache is a ring of blocks
  int ring_blocks = 0;       // ring only; 0: enough blocks for window + query tokens
  std::vector<int> q_lens;   // query tokens per request this step
  std::vector<int> kv_lens;  // context per request after this step's write
  // > 0: the launch's bound on the context (PagedBatch::max_kv_len) when
  // longer than every request's, as for a CUDA graph that serves any
  // context: its KV splits past a request's keys are empty.
  int launch_kv_bound = 0;
  uint64_t seed = 1;

  std::string Name() const {
    return absl::StrCat("heads=", num_heads, "/", num_kv_heads, " head_dim=", head_dim,
                        " block=", block_size, " window=", window, ring ? " ring" : "",
                        launch_kv_bound > 0 ? absl::StrCat(" bound=", launch_kv_bound) : "",
                        " q_lens=[",
                        absl::StrJoin(q_lens, ","), "] kv_lens=[", absl::StrJoin(kv_lens, ","),
                        "]");
  }
};

// A paged batch's arrays on the host (paged_kv.h) and the PagedBatch that
// points at them.
struct HostPagedBatch {
  int total_q = 0;
  int max_q = 0;
  int max_kv = 0;
  std::vector<int32_t> q_start, kv_len, positions, block_tables;

  PagedBatch Batch() const {  // host pointers
    PagedBatch b;
    b.num_reqs = static_cast<int>(kv_len.size());
    b.total_q = total_q;
    b.q_start = q_start.data();
    b.kv_len = kv_len.data();
    b.positions = positions.data();
    b.block_tables = block_tables.data();
    b.max_query_len = max_q;
    b.max_kv_len = max_kv;
    return b;
  }
};

struct AttentionCase : HostPagedBatch {
  AttentionCaseSpec spec;
  KvCacheLayout layout;
  AttentionConfig config;
  int64_t qkv_stride = 0;      // (heads + 2 * kv_heads) * head_dim
  std::vector<float> qkv;      // [total_q, qkv_stride], bf16-exact
  std::vector<float> k_cache;  // earlier context only; NaN elsewhere
  std::vector<float> v_cache;
  // Dense keys/values of every request, [kv_len, kv_heads, head_dim]: the
  // earlier context followed by this step's tokens.
  std::vector<std::vector<float>> dense_k, dense_v;

  int64_t k_offset() const { return static_cast<int64_t>(config.num_heads) * layout.head_dim; }
  int64_t v_offset() const { return k_offset() + layout.slot_stride(); }
};

inline AttentionCase MakeAttentionCase(const AttentionCaseSpec& spec) {
  AttentionCase c;
  c.spec = spec;
  const int num_reqs = static_cast<int>(spec.q_lens.size());
  const int bs = spec.block_size;
  std::mt19937_64 rng(spec.seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  auto random_value = [&] {
    float x = uni(rng);
    if (std::fabs(x) < 1.0f / 64) x = x < 0 ? -1.0f / 64 : 1.0f / 64;  // never zero
    return RoundToBf16(x);
  };

  // Blocks each request's table row needs.
  int max_blocks = 0;
  std::vector<int> blocks_needed(num_reqs);
  int ring_blocks = 0;
  if (spec.ring) {
    const int max_q = *std::max_element(spec.q_lens.begin(), spec.q_lens.end());
    ring_blocks = spec.ring_blocks > 0 ? spec.ring_blocks : (spec.window + max_q + bs - 1) / bs + 1;
  }
  for (int r = 0; r < num_reqs; ++r) {
    const int linear = (spec.kv_lens[r] + bs - 1) / bs;
    blocks_needed[r] = spec.ring ? std::min(linear, ring_blocks) : linear;
    max_blocks = std::max(max_blocks, spec.ring ? ring_blocks : linear);
  }
  max_blocks += 2;  // unused entries at the end of every row
  // Block 0 is the NaN block unused entries point to; two more are unowned.
  const int owned = std::accumulate(blocks_needed.begin(), blocks_needed.end(), 0);
  const int num_blocks = owned + 3;

  c.layout.num_blocks = num_blocks;
  c.layout.block_size = bs;
  c.layout.num_kv_heads = spec.num_kv_heads;
  c.layout.head_dim = spec.head_dim;
  c.layout.max_blocks_per_req = max_blocks;
  c.layout.ring_blocks = spec.ring ? ring_blocks : 0;
  c.config.num_heads = spec.num_heads;
  c.config.sliding_window = spec.window;

  std::vector<int32_t> physical(num_blocks - 1);
  std::iota(physical.begin(), physical.end(), 1);
  std::shuffle(physical.begin(), physical.end(), rng);
  c.block_tables.assign(static_cast<size_t>(num_reqs) * max_blocks, 0);
  int next = 0;
  for (int r = 0; r < num_reqs; ++r) {
    for (int b = 0; b < blocks_needed[r]; ++b)
      c.block_tables[r * max_blocks + b] = physical[next++];
  }

  c.q_start.assign(1, 0);
  for (int r = 0; r < num_reqs; ++r) {
    c.q_start.push_back(c.q_start.back() + spec.q_lens[r]);
    c.kv_len.push_back(spec.kv_lens[r]);
    for (int i = 0; i < spec.q_lens[r]; ++i) {
      c.positions.push_back(spec.kv_lens[r] - spec.q_lens[r] + i);
    }
    c.max_q = std::max(c.max_q, spec.q_lens[r]);
    c.max_kv = std::max({c.max_kv, spec.kv_lens[r], spec.launch_kv_bound});
  }
  c.total_q = c.q_start.back();

  const int64_t width = c.layout.slot_stride();
  c.qkv_stride = static_cast<int64_t>(spec.num_heads + 2 * spec.num_kv_heads) * spec.head_dim;
  c.qkv.resize(static_cast<size_t>(c.total_q) * c.qkv_stride);
  for (auto& x : c.qkv) x = random_value();

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const size_t cache_n = static_cast<size_t>(num_blocks) * bs * width;
  c.k_cache.assign(cache_n, nan);
  c.v_cache.assign(cache_n, nan);
  c.dense_k.resize(num_reqs);
  c.dense_v.resize(num_reqs);
  for (int r = 0; r < num_reqs; ++r) {
    const int kv = spec.kv_lens[r];
    const int context = kv - spec.q_lens[r];
    c.dense_k[r].resize(static_cast<size_t>(kv) * width);
    c.dense_v[r].resize(static_cast<size_t>(kv) * width);
    for (int p = 0; p < kv; ++p) {
      float* dk = c.dense_k[r].data() + p * width;
      float* dv = c.dense_v[r].data() + p * width;
      if (p < context) {
        for (int64_t i = 0; i < width; ++i) dk[i] = random_value();
        for (int64_t i = 0; i < width; ++i) dv[i] = random_value();
        // Earlier context goes straight into the cache, in position order,
        // so a ring keeps the newest positions.
        const int64_t slot = KvSlot(c.block_tables.data(), c.layout, r, p);
        std::copy(dk, dk + width, c.k_cache.begin() + slot * width);
        std::copy(dv, dv + width, c.v_cache.begin() + slot * width);
      } else {
        const int t = c.q_start[r] + (p - context);
        const float* row = c.qkv.data() + t * c.qkv_stride;
        std::copy(row + c.k_offset(), row + c.k_offset() + width, dk);
        std::copy(row + c.v_offset(), row + c.v_offset() + width, dv);
      }
    }
  }
  return c;
}

// Dense reference: softmax over the mask written out position by position,
// in double. out is [total_q, num_heads, head_dim].
inline std::vector<float> DenseAttention(const AttentionCase& c) {
  const int h_count = c.config.num_heads, d = c.layout.head_dim;
  const int group = h_count / c.layout.num_kv_heads;
  const int64_t width = c.layout.slot_stride();
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<float> out(static_cast<size_t>(c.total_q) * h_count * d);
  for (size_t r = 0; r + 1 < c.q_start.size(); ++r) {
    for (int t = c.q_start[r]; t < c.q_start[r + 1]; ++t) {
      const int pos = c.positions[t];
      for (int h = 0; h < h_count; ++h) {
        const float* q = c.qkv.data() + t * c.qkv_stride + h * d;
        const int64_t kv_off = static_cast<int64_t>(h / group) * d;
        std::vector<double> w(c.kv_len[r], 0.0);
        double max_s = -1e300;
        for (int p = 0; p < c.kv_len[r]; ++p) {
          const bool visible = p <= pos && (c.spec.window == 0 || p > pos - c.spec.window);
          if (!visible) continue;
          double s = 0.0;
          for (int i = 0; i < d; ++i) s += double(q[i]) * c.dense_k[r][p * width + kv_off + i];
          w[p] = s * scale;
          max_s = std::max(max_s, w[p]);
        }
        double denom = 0.0;
        std::vector<double> acc(d, 0.0);
        for (int p = 0; p < c.kv_len[r]; ++p) {
          const bool visible = p <= pos && (c.spec.window == 0 || p > pos - c.spec.window);
          if (!visible) continue;
          const double e = std::exp(w[p] - max_s);
          denom += e;
          for (int i = 0; i < d; ++i) acc[i] += e * c.dense_v[r][p * width + kv_off + i];
        }
        float* o = out.data() + (static_cast<int64_t>(t) * h_count + h) * d;
        for (int i = 0; i < d; ++i) o[i] = static_cast<float>(acc[i] / denom);
      }
    }
  }
  return out;
}

// Shapes both attention tests run: GQA 1, 4 and 8; head_dim 64 and 128;
// ragged lengths; sliding windows linear and ring; block sizes 16 and 32.
inline std::vector<AttentionCaseSpec> StandardAttentionSpecs() {
  std::vector<AttentionCaseSpec> specs;
  auto add = [&](int heads, int kv_heads, int head_dim, int block, int window, bool ring,
                 std::vector<int> q_lens, std::vector<int> kv_lens) {
    AttentionCaseSpec s;
    s.num_heads = heads;
    s.num_kv_heads = kv_heads;
    s.head_dim = head_dim;
    s.block_size = block;
    s.window = window;
    s.ring = ring;
    s.q_lens = std::move(q_lens);
    s.kv_lens = std::move(kv_lens);
    s.seed = 1000 + specs.size();
    specs.push_back(s);
  };
  // Decode / verify, GQA 4 (Llama-3-8B), ragged.
  add(32, 8, 128, 16, 0, false, {6, 1, 8, 3}, {518, 1, 2049, 40});
  // GQA 1 and head_dim 64.
  add(8, 8, 64, 16, 0, false, {1, 5, 2}, {700, 5, 33});
  // GQA 8 with 8 query tokens: 64 rows per kv head.
  add(16, 2, 128, 32, 0, false, {8, 7}, {300, 1000});
  // Sliding window, linear table.
  add(8, 2, 128, 16, 100, false, {6, 1, 4}, {518, 90, 2000});
  // Sliding window ring of blocks (window 128 + 6 speculative slots).
  add(8, 2, 64, 16, 128, true, {6, 6, 2}, {1000, 130, 50});
  // The runtime's sliding-window ring: one block of window + 6 slots per
  // request, used as a ring of one block (slot = ring * 134 + p % 134).
  add(8, 2, 128, 134, 128, true, {6, 3, 1}, {1000, 134, 20});
  specs.back().ring_blocks = 1;
  // Prefill: one long query block, causal within itself, plus a decode.
  add(8, 2, 128, 16, 0, false, {300, 1}, {300, 77});
  // Prefill with GQA 8 and a window.
  add(16, 2, 64, 16, 64, false, {150}, {200});
  return specs;
}

}  // namespace test_util
}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_INTERNAL_ATTENTION_TEST_CASE_H_
