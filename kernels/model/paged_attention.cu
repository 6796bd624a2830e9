// Paged attention on tensor cores (mma.sync m16n8k16, bf16 in, float
// accumulators), flash-attention style with an online softmax.
//
// Work split. A CTA owns one (request, kv head, row group, KV split). Its
// query rows are the request's (token, q head of the kv head's group) pairs,
// row = token * group + head_in_group, so all q heads sharing a kv head read
// each K/V tile once. A CTA has 4 warps and a row group of 64 / kKeyWarps
// rows: each warp owns 16 rows and a 1/kKeyWarps share of every 64-key
// tile, keeping its own running max, sum and output; the warps that shared
// rows are merged through shared memory at the end. Few rows (decode and
// verify: 1-8 tokens x group) use kKeyWarps = 4 or 2 so every warp has keys
// to work on; prefill uses kKeyWarps = 1 and many row groups.
//
// When the batch has fewer CTAs than the GPU holds at once, the KV range is
// split too (flash-decoding), as far as all CTAs still fit in one wave: each
// split writes a normalised partial output with its max and sum, and a
// second kernel, launched as a programmatic dependent so its launch overlaps
// the first kernel's tail, merges them.
//
// K/V tiles are gathered from the paged cache with cp.async (16 bytes per
// thread, slots looked up per key), three stages deep; keys past the CTA's
// last needed position are zero-filled, so nothing outside the request's
// written context is ever read. Shared-memory rows are padded by 16 bytes so
// that ldmatrix's eight row addresses fall in distinct banks.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.h"
#include "kernels/model/internal/device_utils.cuh"
#include "kernels/model/paged_attention.h"

namespace verdict {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileKeys = 64;
constexpr int kMaxSplits = 32;
constexpr float kLog2e = 1.4426950408889634f;

struct AttentionParams {
  const __nv_bfloat16* q;
  int64_t q_stride;
  const __nv_bfloat16* k_cache;
  const __nv_bfloat16* v_cache;
  const int32_t* q_start;
  const int32_t* kv_len;
  const int32_t* positions;
  const int32_t* block_tables;
  KvCacheLayout layout;
  int num_heads;
  int group;  // q heads per kv head
  int window;
  float scale_log2;  // softmax scale * log2(e): scores live in the exp2 domain
  __nv_bfloat16* out;
  int64_t out_stride;
  // Split mode (num_splits > 1): partial outputs [split, token, head, dim]
  // and (max, sum) pairs [split, token, head], and per [token, head] the
  // splits that hold keys (a prefix: a short context leaves the rest
  // empty, and they write nothing).
  float* part_out;
  float2* part_ml;
  int* part_count;
  int num_splits;
  int total_q;
};

// ---- PTX wrappers ----

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; with valid == false the destination is zero-filled
// and the source is not read.
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddress(smem)),
               "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(smem)));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(smem)));
}

// d += a * b for one 16x8x16 tile.
__device__ __forceinline__ void Mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---- shared memory layout ----

template <int kHeadDim>
struct SmemLayout {
  static constexpr int kStages = 3;               // K/V tiles in flight: two ahead
  static constexpr int kRowElems = kHeadDim + 8;  // 16-byte pad per row
  static constexpr int kTileElems = kTileKeys * kRowElems;
  static constexpr int kKvBytes = 2 /*K,V*/ * kStages * kTileElems * 2;
  static constexpr int kPosBytes = 64 * 4;
  // Q (at most 64 rows) is staged in the last stage's K buffer: it moves to
  // registers before that stage is first filled.
  static_assert(64 * kRowElems <= kTileElems, "Q staging must fit in one tile buffer");
  // After the KV loop the K/V area holds each warp's (16 x head_dim) output
  // and its per-row max and sum.
  static constexpr int kMergeRowFloats = kHeadDim + 8;
  static constexpr int kMergeOutFloats = kWarps * 16 * kMergeRowFloats;
  static constexpr int kMergeBytes = (kMergeOutFloats + kWarps * 16 * 2) * 4;
  static_assert(kMergeBytes <= kKvBytes, "merge scratch must fit in the K/V area");
  static constexpr int kBytes = kKvBytes + kPosBytes;
};

// Two CTAs per multiprocessor: the register budget this allows (up to 255
// per thread) holds the Q fragments, the scores and the output accumulators
// without spilling.
template <int kHeadDim, int kKeyWarps>
__global__ void __launch_bounds__(kThreads, 2) PagedAttentionKernel(const AttentionParams p) {
  // Launched as a programmatic dependent (model_internal::LaunchDependent):
  // q and the cache writes of the kernels before it are visible after this.
  model_internal::WaitForPredecessor();
  using L = SmemLayout<kHeadDim>;
  constexpr int kRowsPerCta = 64 / kKeyWarps;
  constexpr int kKeysPerWarp = kTileKeys / kKeyWarps;
  constexpr int kKeyFrags = kKeysPerWarp / 8;  // n8 fragments of scores per warp
  constexpr int kDimFrags = kHeadDim / 8;      // n8 fragments of output
  constexpr int kDimSteps = kHeadDim / 16;     // k16 steps of q.k
  constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte pieces of a row

  constexpr int kStages = L::kStages;
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* s_kv = reinterpret_cast<__nv_bfloat16*>(smem);
  int* s_pos = reinterpret_cast<int*>(smem + L::kKvBytes);
  auto s_k = [&](int stage) { return s_kv + stage * L::kTileElems; };
  auto s_v = [&](int stage) { return s_kv + (kStages + stage) * L::kTileElems; };
  __nv_bfloat16* s_q = s_k(kStages - 1);

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int split = blockIdx.x % p.num_splits;
  const int row_group = blockIdx.x / p.num_splits;
  const int kv_head = blockIdx.y;
  const int req = blockIdx.z;

  const int q0 = p.q_start[req];
  const int rows_total = (p.q_start[req + 1] - q0) * p.group;
  const int row_base = row_group * kRowsPerCta;
  if (row_base >= rows_total) return;  // this request has no rows here
  const int kv_len = p.kv_len[req];

  // Positions of this CTA's rows; -1 marks padding rows (they see no key).
  if (tid < kRowsPerCta) {
    const int r = row_base + tid;
    s_pos[tid] = r < rows_total ? p.positions[q0 + r / p.group] : -1;
  }
  __syncthreads();
  // The key range the CTA's rows need: [k_lo, k_hi].
  int k_hi = -1, min_pos = INT32_MAX;
  for (int i = 0; i < kRowsPerCta; ++i) {
    const int pos = s_pos[i];
    if (pos >= 0) {
      k_hi = max(k_hi, min(pos, kv_len - 1));
      min_pos = min(min_pos, pos);
    }
  }
  const int k_lo = p.window > 0 ? max(0, min_pos - p.window + 1) : 0;
  const int num_tiles = k_hi >= k_lo ? (k_hi - k_lo + kTileKeys) / kTileKeys : 0;
  const int tiles_per_split = (num_tiles + p.num_splits - 1) / p.num_splits;
  const int tile_begin = min(num_tiles, split * tiles_per_split);
  const int tile_end = min(num_tiles, tile_begin + tiles_per_split);
  if (p.num_splits > 1) {
    // The launch's splits follow a bound on the context, not this
    // request's: the splits past its keys return at once, and the merge
    // reads only the ones before (split 0 always runs, so that a row with
    // no key still gets its zero output).
    if (split == 0) {
      const int active = tiles_per_split > 0 ? (num_tiles + tiles_per_split - 1) / tiles_per_split
                                             : 1;
      for (int i = tid; i < kRowsPerCta; i += kThreads) {
        const int r = row_base + i;
        if (r >= rows_total) break;
        p.part_count[(q0 + r / p.group) * p.num_heads + kv_head * p.group + r % p.group] =
            max(active, 1);
      }
    } else if (tile_begin >= tile_end) {
      return;
    }
  }

  // Q rows -> shared memory (zero for padding rows).
  for (int c = tid; c < kRowsPerCta * kChunksPerRow; c += kThreads) {
    const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    const int r = row_base + row;
    const bool valid = r < rows_total;
    const __nv_bfloat16* src =
        valid ? p.q + (q0 + r / p.group) * p.q_stride +
                    static_cast<int64_t>(kv_head * p.group + r % p.group) * kHeadDim + chunk * 8
              : p.q;
    CpAsync16(s_q + row * L::kRowElems + chunk * 8, src, valid);
  }
  CpAsyncCommit();

  const int64_t slot_stride = p.layout.slot_stride();
  // Block sizes are powers of two in practice: shifts instead of divisions
  // in the per-key slot lookup.
  const int block_size = p.layout.block_size;
  const bool pow2_blocks = (block_size & (block_size - 1)) == 0;
  const int block_shift = __ffs(block_size) - 1;
  const int32_t* table_row =
      p.block_tables + static_cast<int64_t>(req) * p.layout.max_blocks_per_req;
  auto slot_of = [&](int pos) -> int64_t {
    if (!pow2_blocks) return KvSlot(p.block_tables, p.layout, req, pos);
    int logical = pos >> block_shift;
    if (p.layout.ring_blocks > 0) logical %= p.layout.ring_blocks;
    return (static_cast<int64_t>(table_row[logical]) << block_shift) + (pos & (block_size - 1));
  };
  auto load_tile = [&](int tile, int stage) {
    const int key_base = k_lo + tile * kTileKeys;
    for (int c = tid; c < kTileKeys * kChunksPerRow; c += kThreads) {
      const int key = c / kChunksPerRow, chunk = c % kChunksPerRow;
      const int pos = key_base + key;
      const bool valid = pos <= k_hi;
      int64_t offset = 0;
      if (valid) {
        offset = slot_of(pos) * slot_stride + static_cast<int64_t>(kv_head) * kHeadDim + chunk * 8;
      }
      CpAsync16(s_k(stage) + key * L::kRowElems + chunk * 8, p.k_cache + offset, valid);
      CpAsync16(s_v(stage) + key * L::kRowElems + chunk * 8, p.v_cache + offset, valid);
    }
  };
  // Prologue: the first kStages - 1 tiles, one commit group each (empty
  // groups keep the count uniform).
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (tile_begin + i < tile_end) load_tile(tile_begin + i, i);
    CpAsyncCommit();
  }

  // Wait for Q (the oldest group), then keep it in registers as A fragments.
  CpAsyncWait<kStages - 1>();
  __syncthreads();
  const int row_tile = warp / kKeyWarps;       // which 16 rows of the CTA
  const int key_part = warp % kKeyWarps;       // which share of each key tile
  const int lane_row = lane / 4;               // fragment row (and +8)
  const int lane_col = 2 * (lane % 4);         // fragment column pair
  const int ld_i = lane / 8, ld_j = lane % 8;  // ldmatrix: matrix, row within it
  uint32_t q_frag[kDimSteps][4];
#pragma unroll
  for (int ks = 0; ks < kDimSteps; ++ks) {
    const int row = row_tile * 16 + ld_j + (ld_i % 2) * 8;
    const int col = ks * 16 + (ld_i / 2) * 8;
    LdMatrixX4(q_frag[ks], s_q + row * L::kRowElems + col);
  }

  // The thread's two rows: visible keys are [lo, hi] for each.
  int row_lo[2], row_hi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int pos = s_pos[row_tile * 16 + lane_row + 8 * h];
    row_hi[h] = pos >= 0 ? min(pos, kv_len - 1) : -1;
    row_lo[h] = p.window > 0 ? pos - p.window + 1 : 0;
  }

  float o[kDimFrags][4];
#pragma unroll
  for (int i = 0; i < kDimFrags; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};  // this thread's columns only until the end
  __syncthreads();                  // every warp has its Q fragments: the Q staging buffer is free

  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int step = tile - tile_begin;
    const int stage = step % kStages;
    if (tile + kStages - 1 < tile_end)
      load_tile(tile + kStages - 1, (step + kStages - 1) % kStages);
    CpAsyncCommit();
    CpAsyncWait<kStages - 1>();  // this tile's group has landed
    __syncthreads();

    const __nv_bfloat16* k_tile = s_k(stage);
    const __nv_bfloat16* v_tile = s_v(stage);
    const int warp_key0 = key_part * kKeysPerWarp;

    // S = Q K^T for this warp's 16 rows x kKeysPerWarp keys.
    float s[kKeyFrags][4];
#pragma unroll
    for (int i = 0; i < kKeyFrags; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kDimSteps; ++ks) {
#pragma unroll
      for (int nf2 = 0; nf2 < kKeyFrags / 2; ++nf2) {
        uint32_t b[4];
        const int key = warp_key0 + nf2 * 16 + ld_j + (ld_i / 2) * 8;
        const int col = ks * 16 + (ld_i % 2) * 8;
        LdMatrixX4(b, k_tile + key * L::kRowElems + col);
        Mma16816(s[2 * nf2], q_frag[ks], b[0], b[1]);
        Mma16816(s[2 * nf2 + 1], q_frag[ks], b[2], b[3]);
      }
    }

    // Mask, scale, online softmax.
    const int key_base = k_lo + tile * kTileKeys + warp_key0;
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nf = 0; nf < kKeyFrags; ++nf) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2;
        const int pos = key_base + nf * 8 + lane_col + (e % 2);
        const bool visible = pos >= row_lo[h] && pos <= row_hi[h];
        s[nf][e] = visible ? s[nf][e] * p.scale_log2 : -INFINITY;
        tile_max[h] = fmaxf(tile_max[h], s[nf][e]);
      }
    }
    float scale_old[2], base[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float new_max = fmaxf(row_max[h], QuadMax(tile_max[h]));
      // A row with no visible key so far keeps max -inf; 0 as the base
      // keeps exp2 away from (-inf) - (-inf).
      base[h] = new_max == -INFINITY ? 0.0f : new_max;
      scale_old[h] = exp2f(row_max[h] - base[h]);
      row_max[h] = new_max;
      row_sum[h] *= scale_old[h];
    }
#pragma unroll
    for (int i = 0; i < kDimFrags; ++i) {
      o[i][0] *= scale_old[0];
      o[i][1] *= scale_old[0];
      o[i][2] *= scale_old[1];
      o[i][3] *= scale_old[1];
    }
#pragma unroll
    for (int nf = 0; nf < kKeyFrags; ++nf) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nf][e] = exp2f(s[nf][e] - base[e / 2]);
        row_sum[e / 2] += s[nf][e];
      }
    }

    // O += P V: the score accumulators of two adjacent key fragments are
    // exactly the A fragment of one k16 step.
#pragma unroll
    for (int kk = 0; kk < kKeysPerWarp / 16; ++kk) {
      uint32_t a[4];
      a[0] = PackBf16(s[2 * kk][0], s[2 * kk][1]);
      a[1] = PackBf16(s[2 * kk][2], s[2 * kk][3]);
      a[2] = PackBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = PackBf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dn2 = 0; dn2 < kDimFrags / 2; ++dn2) {
        uint32_t b[4];
        const int key = warp_key0 + kk * 16 + ld_j + (ld_i % 2) * 8;
        const int col = dn2 * 16 + (ld_i / 2) * 8;
        LdMatrixX4Trans(b, v_tile + key * L::kRowElems + col);
        Mma16816(o[2 * dn2], a, b[0], b[1]);
        Mma16816(o[2 * dn2 + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // the stage is refilled kStages - 1 tiles later
  }
  CpAsyncWait<0>();
  // The next kernel (the split merge, or the output projection) may start
  // its launch now; it waits for this grid's completion before reading.
  model_internal::AllowDependents();
  __syncthreads();

  // Each warp parks its rows' output, max and sum in the K/V area.
  float* merge_out = reinterpret_cast<float*>(s_kv);
  float* merge_ml = merge_out + L::kMergeOutFloats;  // [warp][16][2]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float sum = QuadSum(row_sum[h]);
    const int row = lane_row + 8 * h;
    if (lane % 4 == 0) {
      merge_ml[(warp * 16 + row) * 2] = row_max[h];
      merge_ml[(warp * 16 + row) * 2 + 1] = sum;
    }
  }
#pragma unroll
  for (int i = 0; i < kDimFrags; ++i) {
    float* row0 = merge_out + (warp * 16 + lane_row) * L::kMergeRowFloats + i * 8 + lane_col;
    float* row8 = row0 + 8 * L::kMergeRowFloats;
    *reinterpret_cast<float2*>(row0) = make_float2(o[i][0], o[i][1]);
    *reinterpret_cast<float2*>(row8) = make_float2(o[i][2], o[i][3]);
  }
  __syncthreads();

  // Merge the kKeyWarps warps of each row and write 8 values per thread.
  for (int c = tid; c < kRowsPerCta * kChunksPerRow; c += kThreads) {
    const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    const int r = row_base + row;
    if (r >= rows_total) continue;
    const int tile16 = row / 16, row16 = row % 16;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kKeyWarps; ++w) {
      m = fmaxf(m, merge_ml[((tile16 * kKeyWarps + w) * 16 + row16) * 2]);
    }
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    float sum = 0.0f;
    if (m != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kKeyWarps; ++w) {
        const int wr = (tile16 * kKeyWarps + w) * 16 + row16;
        const float wm = merge_ml[wr * 2];
        if (wm == -INFINITY) continue;
        const float f = exp2f(wm - m);
        sum += f * merge_ml[wr * 2 + 1];
        float v[8];
        model_internal::LoadF32x8(merge_out + wr * L::kMergeRowFloats + chunk * 8, v);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[j] += f * v[j];
      }
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j] *= inv;
    const int token = q0 + r / p.group;
    const int head = kv_head * p.group + r % p.group;
    if (p.num_splits == 1) {
      model_internal::StoreBf16x8(
          p.out + token * p.out_stride + static_cast<int64_t>(head) * kHeadDim + chunk * 8, acc);
    } else {
      const int64_t unit = (static_cast<int64_t>(split) * p.total_q + token) * p.num_heads + head;
      model_internal::StoreF32x8(p.part_out + unit * kHeadDim + chunk * 8, acc);
      if (chunk == 0) p.part_ml[unit] = make_float2(m, sum);
    }
  }
}

// Merges the splits' partial outputs: one thread per 8 values of one
// (token, head), so even a one-token step spreads over many threads.
template <int kHeadDim>
__global__ void __launch_bounds__(kThreads) MergeSplitsKernel(const AttentionParams p) {
  constexpr int kChunks = kHeadDim / 8;
  // Launched as a programmatic dependent of the main kernel: wait until it
  // has finished and its partials are visible.
  model_internal::WaitForPredecessor();
  model_internal::AllowDependents();
  const int64_t unit_count = static_cast<int64_t>(p.total_q) * p.num_heads * kChunks;
  const int64_t u = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (u >= unit_count) return;
  const int chunk = static_cast<int>(u % kChunks);
  const int64_t token_head = u / kChunks;  // token * num_heads + head
  const int64_t split_stride = static_cast<int64_t>(p.total_q) * p.num_heads;
  const float2* __restrict__ ml = p.part_ml;
  // Split 0 records how many splits hold keys; the bound keeps a bad count
  // from reading past the partials.
  const int splits = min(p.part_count[token_head], p.num_splits);
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, ml[s * split_stride + token_head].x);
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  float sum = 0.0f;
  if (m != -INFINITY) {
    for (int s = 0; s < splits; ++s) {
      const int64_t unit = s * split_stride + token_head;
      const float2 split_ml = ml[unit];
      if (split_ml.x == -INFINITY) continue;
      // Partials are normalised by their own sum: weight = e^(m_s - m) l_s.
      const float w = exp2f(split_ml.x - m) * split_ml.y;
      sum += w;
      float v[8];
      model_internal::LoadF32x8(p.part_out + unit * kHeadDim + chunk * 8, v);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] += w * v[j];
    }
  }
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] *= inv;
  const int64_t token = token_head / p.num_heads;
  const int head = static_cast<int>(token_head % p.num_heads);
  model_internal::StoreBf16x8(
      p.out + token * p.out_stride + static_cast<int64_t>(head) * kHeadDim + chunk * 8, acc);
}

// ---- host side ----

int KeyWarpsFor(int rows_per_request) {
  if (rows_per_request <= 16) return 4;
  if (rows_per_request <= 32) return 2;
  return 1;
}

int MultiprocessorCount() {
  int device = 0, count = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 132;
  }
  return count;
}

// Per kernel instantiation, set up once: the dynamic shared-memory limit it
// needs, and how many of its CTAs fit on one multiprocessor.
struct KernelInfo {
  cudaError_t status = cudaSuccess;
  int ctas_per_sm = 1;
};

template <int kHeadDim, int kKeyWarps>
const KernelInfo& GetKernelInfo() {
  static const KernelInfo info = [] {
    KernelInfo k;
    constexpr int kBytes = SmemLayout<kHeadDim>::kBytes;
    k.status = cudaFuncSetAttribute(PagedAttentionKernel<kHeadDim, kKeyWarps>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
    if (k.status == cudaSuccess) {
      k.status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &k.ctas_per_sm, PagedAttentionKernel<kHeadDim, kKeyWarps>, kThreads, kBytes);
    }
    k.ctas_per_sm = std::max(1, k.ctas_per_sm);
    return k;
  }();
  return info;
}

const KernelInfo& KernelInfoFor(int head_dim, int key_warps) {
  if (head_dim == 64) {
    return key_warps == 4   ? GetKernelInfo<64, 4>()
           : key_warps == 2 ? GetKernelInfo<64, 2>()
                            : GetKernelInfo<64, 1>();
  }
  return key_warps == 4   ? GetKernelInfo<128, 4>()
         : key_warps == 2 ? GetKernelInfo<128, 2>()
                          : GetKernelInfo<128, 1>();
}

// The merge's per-[token, head] split counts after the partials.
size_t SplitCountBytes(const PagedBatch& batch, const AttentionConfig& config) {
  return static_cast<size_t>(batch.total_q) * config.num_heads * sizeof(int);
}

struct LaunchPlan {
  int key_warps = 4;
  int row_groups = 1;
  int num_splits = 1;
};

LaunchPlan PlanLaunch(const PagedBatch& batch, const KvCacheLayout& layout,
                      const AttentionConfig& config, size_t workspace_bytes) {
  LaunchPlan plan;
  const int group = config.num_heads / layout.num_kv_heads;
  const int rows = std::max(1, batch.max_query_len) * group;
  plan.key_warps = KeyWarpsFor(rows);
  const int rows_per_cta = 64 / plan.key_warps;
  plan.row_groups = (rows + rows_per_cta - 1) / rows_per_cta;
  // Keys one CTA may need: the whole context, or the window plus the
  // query block.
  int span = std::max(1, batch.max_kv_len);
  if (config.sliding_window > 0) span = std::min(span, config.sliding_window + rows / group);
  const int max_tiles = (span + kTileKeys - 1) / kTileKeys;
  // Split the KV range only while every CTA still fits in one wave: a
  // partial second wave costs more than the splits save.
  const int64_t ctas = static_cast<int64_t>(batch.num_reqs) * layout.num_kv_heads * plan.row_groups;
  const int64_t slots = static_cast<int64_t>(MultiprocessorCount()) *
                        KernelInfoFor(layout.head_dim, plan.key_warps).ctas_per_sm;
  int splits = static_cast<int>(
      std::clamp<int64_t>(slots / std::max<int64_t>(ctas, 1), 1, std::min(kMaxSplits, max_tiles)));
  // As many splits as the tiles need once each split's share is rounded up.
  const int tiles_per_split = (max_tiles + splits - 1) / splits;
  splits = (max_tiles + tiles_per_split - 1) / tiles_per_split;
  const size_t per_split = static_cast<size_t>(batch.total_q) * config.num_heads *
                           (layout.head_dim * sizeof(float) + sizeof(float2));
  const size_t counts = SplitCountBytes(batch, config);
  if (splits > 1 && per_split > 0) {
    splits = workspace_bytes > counts
                 ? static_cast<int>(std::min<size_t>(splits, (workspace_bytes - counts) / per_split))
                 : 1;
  }
  plan.num_splits = std::max(1, splits);
  return plan;
}

absl::Status Validate(const PagedBatch& batch, const KvCacheLayout& layout,
                      const AttentionConfig& config) {
  if (layout.head_dim != 64 && layout.head_dim != 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("paged_attention: head_dim ", layout.head_dim, " (64 or 128 supported)"));
  }
  if (layout.num_kv_heads <= 0 || config.num_heads <= 0 ||
      config.num_heads % layout.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("paged_attention: heads ", config.num_heads,
                                                   " not a multiple of kv heads ",
                                                   layout.num_kv_heads));
  }
  if (layout.block_size <= 0 || layout.max_blocks_per_req <= 0 || batch.num_reqs < 0 ||
      batch.total_q < 0 || batch.num_reqs > 65535) {
    return absl::InvalidArgumentError("paged_attention: bad batch or cache layout");
  }
  return absl::OkStatus();
}

template <int kHeadDim, int kKeyWarps>
absl::Status LaunchMain(const AttentionParams& params, const LaunchPlan& plan, int num_reqs,
                        int num_kv_heads, cudaStream_t stream) {
  const KernelInfo& info = GetKernelInfo<kHeadDim, kKeyWarps>();
  VERDICT_CUDA_RETURN_IF_ERROR(info.status);
  const dim3 grid(plan.row_groups * plan.num_splits, num_kv_heads, num_reqs);
  VERDICT_CUDA_RETURN_IF_ERROR(
      model_internal::LaunchDependent(PagedAttentionKernel<kHeadDim, kKeyWarps>, grid, kThreads,
                                      SmemLayout<kHeadDim>::kBytes, stream, params));
  return absl::OkStatus();
}

template <int kHeadDim>
absl::Status LaunchForHeadDim(const AttentionParams& params, const LaunchPlan& plan, int num_reqs,
                              int num_kv_heads, int total_q, cudaStream_t stream) {
  using LaunchFn =
      absl::Status (*)(const AttentionParams&, const LaunchPlan&, int, int, cudaStream_t);
  const LaunchFn launch = plan.key_warps == 4   ? &LaunchMain<kHeadDim, 4>
                          : plan.key_warps == 2 ? &LaunchMain<kHeadDim, 2>
                                                : &LaunchMain<kHeadDim, 1>;
  const absl::Status status = launch(params, plan, num_reqs, num_kv_heads, stream);
  if (!status.ok() || plan.num_splits == 1) return status;
  const int64_t merge_threads = static_cast<int64_t>(total_q) * params.num_heads * (kHeadDim / 8);
  // The merge's launch overlaps the main kernel's tail.
  const unsigned merge_blocks = static_cast<unsigned>((merge_threads + kThreads - 1) / kThreads);
  VERDICT_CUDA_RETURN_IF_ERROR(model_internal::LaunchDependent(
      MergeSplitsKernel<kHeadDim>, merge_blocks, kThreads, 0, stream, params));
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

size_t PagedAttentionWorkspaceBytes(const PagedBatch& batch, const KvCacheLayout& layout,
                                    const AttentionConfig& config) {
  if (!Validate(batch, layout, config).ok()) return 0;
  const LaunchPlan plan = PlanLaunch(batch, layout, config, SIZE_MAX);
  if (plan.num_splits == 1) return 0;
  return static_cast<size_t>(plan.num_splits) * batch.total_q * config.num_heads *
             (layout.head_dim * sizeof(float) + sizeof(float2)) +
         SplitCountBytes(batch, config);
}

absl::Status InvokePagedAttention(const uint16_t* q, int64_t q_token_stride,
                                  const uint16_t* k_cache, const uint16_t* v_cache,
                                  const PagedBatch& batch, const KvCacheLayout& layout,
                                  const AttentionConfig& config, uint16_t* out,
                                  int64_t out_token_stride, void* workspace, size_t workspace_bytes,
                                  cudaStream_t stream) {
  if (absl::Status s = Validate(batch, layout, config); !s.ok()) return s;
  if (!model_internal::IsAligned16(q) || !model_internal::IsAligned16(k_cache) ||
      !model_internal::IsAligned16(v_cache) || !model_internal::IsAligned16(out) ||
      q_token_stride % 8 != 0 || out_token_stride % 8 != 0 ||
      !model_internal::IsAligned16(workspace)) {
    return absl::InvalidArgumentError(
        "paged_attention: q, out, caches and workspace must be 16-byte aligned and token "
        "strides multiples of 8");
  }
  if (batch.total_q == 0 || batch.num_reqs == 0) return absl::OkStatus();
  const LaunchPlan plan = PlanLaunch(batch, layout, config, workspace_bytes);

  AttentionParams params;
  params.q = reinterpret_cast<const __nv_bfloat16*>(q);
  params.q_stride = q_token_stride;
  params.k_cache = reinterpret_cast<const __nv_bfloat16*>(k_cache);
  params.v_cache = reinterpret_cast<const __nv_bfloat16*>(v_cache);
  params.q_start = batch.q_start;
  params.kv_len = batch.kv_len;
  params.positions = batch.positions;
  params.block_tables = batch.block_tables;
  params.layout = layout;
  params.num_heads = config.num_heads;
  params.group = config.num_heads / layout.num_kv_heads;
  params.window = config.sliding_window;
  const float scale =
      config.scale > 0.0f
          ? config.scale
          : static_cast<float>(1.0 / std::sqrt(static_cast<double>(layout.head_dim)));
  params.scale_log2 = scale * kLog2e;
  params.out = reinterpret_cast<__nv_bfloat16*>(out);
  params.out_stride = out_token_stride;
  params.num_splits = plan.num_splits;
  params.total_q = batch.total_q;
  params.part_out = static_cast<float*>(workspace);
  const size_t partials = static_cast<size_t>(plan.num_splits) * batch.total_q * config.num_heads;
  params.part_ml = reinterpret_cast<float2*>(static_cast<char*>(workspace) +
                                             partials * layout.head_dim * sizeof(float));
  params.part_count = reinterpret_cast<int*>(params.part_ml + partials);
  if (plan.num_splits == 1) {
    params.part_out = nullptr;
    params.part_ml = nullptr;
    params.part_count = nullptr;
  }
  if (layout.head_dim == 64) {
    return LaunchForHeadDim<64>(params, plan, batch.num_reqs, layout.num_kv_heads, batch.total_q,
                                stream);
  }
  return LaunchForHeadDim<128>(params, plan, batch.num_reqs, layout.num_kv_heads, batch.total_q,
                               stream);
}

}  // namespace verdict
