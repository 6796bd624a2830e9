// CUDA kernel of the draft sampler (semantics: kernels/draft_sampler.h;
// reference: the CPU twin in draft_sampler.cc).
//
// One launch for all rows: a cluster of 8, 4 or 2 CTAs per row (the largest
// size of which the device holds one cluster per row at once; below), or
// one CTA per row when the rows are too many for clusters of 2. A row of
// 152k logits does not fit one SM's shared memory, so each pass reads it
// again (from L2 while the row is hot) and recomputes z = logit * (1 / T),
// which costs a multiply:
//   1. z's maximum, the argmax and the lowest non-finite id;
//   2. the fixed-point mass of the row, and, when top-k or top-p is on, the
//      count and mass of the ids within 1, 2, 4, 8, 12 and 16 of the maximum
//      (greedy rows write their one-hot p here and are done);
//   3. top-k / top-p thresholds: the smallest of those nested "near the top"
//      sets that must hold every kept id (k ids for top-k, top_p of the mass
//      for top-p) is copied to shared memory when it fits, and the thresholds
//      are found there; otherwise on the whole row. Top-p without top-k
//      first tries the histogram of counts by distance to the maximum that
//      pass 2 fills (kernels/top_p_bins.h): only the ids of the threshold's
//      candidate bins are copied, with the exact mass of those above them;
//   4. p = exp(z - max) / mass over the kept ids, written out, and the
//      exponential race over p that picks the token.
// Thresholds come from radix selection on order keys (four 8-bit digits):
// exact, and never a sort. Every sum is a sum of 2^-40 fixed-point integers
// and every race a maximum over (key, id), so the thread and warp order of
// the additions cannot show in the result: it is the CPU twin's, bit for bit.
//
// Split rows: every pass of a row runs on the cluster's CTAs, each over its
// slice of the row, and the CTAs combine their slices' maxima, masses, race
// winners and, for top-k / top-p, each radix round's histogram through
// distributed shared memory; every combination is exact (maxima with ties to
// the lower id, integer sums), so the bits are the single CTA's. A "near the
// top" set that fits one CTA's shared memory is copied slice by slice, each
// CTA keeping its own slice's candidates.
//
// Errors: each row's smallest error key goes to a workspace accumulator; the
// CTA that finishes last publishes it to the error record and zeroes the
// workspace for the next launch (one launch, no memset).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda_check.h"
#include "kernels/draft_sampler.h"
#include "kernels/draft_sampler_internal.h"
#include "kernels/philox.h"
#include "kernels/sampling_math.h"
#include "kernels/block_scan.cuh"
#include "kernels/shared_sum.cuh"
#include "kernels/top_p_bins.h"

namespace verdict {
namespace {

namespace cg = cooperative_groups;
using namespace sampling_math;  // NOLINT: the arithmetic vocabulary of this file
using draft_internal::FixedWeight;

// Threads per CTA, chosen per launch: 1024 while the rows leave an SM to
// each CTA (a lone row's passes are bound by its CTA's issue rate), else 512
// so that two CTAs share an SM (measured on the H200: docs/PERF.md).
constexpr int kMaxThreads = 1024;
constexpr int kMaxWarps = kMaxThreads / 32;
__device__ __forceinline__ int Threads() { return static_cast<int>(blockDim.x); }
__device__ __forceinline__ int Warps() { return static_cast<int>(blockDim.x >> 5); }
constexpr unsigned kFullMask = 0xFFFFFFFFu;
constexpr int32_t kNoId = 0x7FFFFFFF;

// The most CTAs of a split row's cluster (the portable maximum): a 128k row
// gives each about 16k ids. Launches of more rows take clusters of 4 or 2
// (kDraftMaxCtasPerRow in the header is this value).
constexpr int kClusterCtas = kDraftMaxCtasPerRow;
static_assert(kClusterCtas == 8, "the slot arrays below hold a cluster of the portable maximum");

// Shared-memory room for the z values of a "near the top" set (the top-k
// boundary cases of draft_sampler_gpu_test sit at it): 96 KB of
// dynamic shared memory, so that two CTAs of 512 threads still share an SM.
constexpr int kCandidateCap = 24576;
constexpr size_t kCandidateBytes = kCandidateCap * sizeof(float);

// Top-p's histogram of counts (kernels/top_p_bins.h) takes the candidate
// memory's last kFineBins words, from pass 2 until the candidate bins are
// found; the candidates of those bins fill at most the rest.
using top_p_bins::EdgeExp;
using top_p_bins::FirstLevelBin;
using top_p_bins::kFineBins;
using top_p_bins::kFirstLevelScale;
using top_p_bins::MayWeigh;
using top_p_bins::WeightAbove;
using top_p_bins::WeightBelow;
constexpr int kFineListCap = kCandidateCap - kFineBins;
// Bins per thread: CTAs run 512 or 1024 threads.
constexpr int kMaxFineBinsPerThread = kFineBins / 512;

// The nested sets z >= max - d for these d; a 7th, implicit set is the row.
// On logits as flat as normal(0, 3) over 152k ids the top_p 0.9 set reaches
// about 8 below the maximum, and the set within 10 still fits the list
// where the one within 12 would not.
constexpr int kPivots = 6;
__device__ __forceinline__ float PivotDistance(int j) {
  return j < 4 ? static_cast<float>(1 << j) : j == 4 ? 10.0f : 16.0f;  // 1 2 4 8 10 16
}

// Left zeroed between launches: the count of finished CTAs and the complement
// of the smallest error key (atomicMax of ~key; 0 = none).
struct alignas(8) Workspace {
  unsigned int done;
  unsigned int unused;
  unsigned long long error_acc;
};
static_assert(sizeof(Workspace) <= kDraftSampleWorkspaceBytes, "workspace too small");

struct KernelArgs {
  DraftSampleInputs in;
  DraftSampleOutputs out;
  Workspace* workspace;
  bool vector_logits;  // rows start 16-byte aligned: float4 loads
  bool vector_probs;   // likewise for float4 stores of p
  DraftTopPGates top_p_gates;
};

struct Shared {
  float* candidates;  // the kernel's dynamic shared memory, kCandidateCap floats
  int32_t num_candidates;
  // Radix histograms: per bin, the count and the fixed-point mass. Two, used
  // by turns, so that a cluster's CTAs can fill the next round's while their
  // peers still read this one's (Team::Combine).
  uint32_t hist_count[2][256];
  unsigned long long hist_mass[2][256];
  // Radix state, written by warp 0 between rounds.
  uint32_t prefix;
  uint32_t remaining;
  uint32_t count_ge;
  unsigned long long above;
  // Per-warp partials of block reductions, and their broadcast results.
  float warp_f[kMaxWarps];
  int32_t warp_i[kMaxWarps];
  unsigned long long warp_u[kMaxWarps];
  double warp_d[2][kMaxWarps];
  uint32_t warp_pivot_count[kMaxWarps][kPivots];
  unsigned long long warp_pivot_mass[kMaxWarps][kPivots];
  float result_f;
  int32_t result_i;
  unsigned long long result_u;
  uint32_t pivot_count[kPivots];
  unsigned long long pivot_mass[kPivots];
};

__device__ __forceinline__ int Lane() { return threadIdx.x & 31; }
__device__ __forceinline__ int Warp() { return threadIdx.x >> 5; }

// ---------------------------------------------------------------- reductions
// Each returns its result to every thread and leaves shared memory free for
// the next one (see the barrier comments).

// (value, id) with the larger value winning, ties to the lower id.
__device__ __forceinline__ bool MaxBeats(float v, int32_t id, float best, int32_t best_id) {
  return v > best || (v == best && id < best_id);
}

template <typename Beats>
__device__ void BlockBestPair(float* value, int32_t* id, Shared& s, Beats beats) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, *value, o);
    const int32_t oid = __shfl_xor_sync(kFullMask, *id, o);
    if (beats(ov, oid, *value, *id)) {
      *value = ov;
      *id = oid;
    }
  }
  if (Lane() == 0) {
    s.warp_f[Warp()] = *value;
    s.warp_i[Warp()] = *id;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float v = s.warp_f[0];
    int32_t i = s.warp_i[0];
    for (int w = 1; w < Warps(); ++w) {
      if (beats(s.warp_f[w], s.warp_i[w], v, i)) {
        v = s.warp_f[w];
        i = s.warp_i[w];
      }
    }
    s.result_f = v;
    s.result_i = i;
  }
  __syncthreads();
  // Every thread reads the result before any thread passes the first barrier
  // of the next reduction, where thread 0 overwrites it.
  *value = s.result_f;
  *id = s.result_i;
}

__device__ int32_t BlockMin(int32_t v, Shared& s) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(kFullMask, v, o));
  if (Lane() == 0) s.warp_i[Warp()] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < Warps(); ++w) v = min(v, s.warp_i[w]);
    s.result_i = v;
  }
  __syncthreads();
  return s.result_i;
}

__device__ unsigned long long BlockSum(unsigned long long v, Shared& s) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  if (Lane() == 0) s.warp_u[Warp()] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < Warps(); ++w) v += s.warp_u[w];
    s.result_u = v;
  }
  __syncthreads();
  return s.result_u;
}

// Sums the per-thread pivot counts and masses into s.pivot_count/mass
// (written once per row, read afterwards).
__device__ void BlockSumPivots(uint32_t (&count)[kPivots], unsigned long long (&mass)[kPivots],
                               Shared& s) {
#pragma unroll
  for (int j = 0; j < kPivots; ++j) {
    for (int o = 16; o > 0; o >>= 1) {
      count[j] += __shfl_xor_sync(kFullMask, count[j], o);
      mass[j] += __shfl_xor_sync(kFullMask, mass[j], o);
    }
    if (Lane() == 0) {
      s.warp_pivot_count[Warp()][j] = count[j];
      s.warp_pivot_mass[Warp()][j] = mass[j];
    }
  }
  __syncthreads();
  if (threadIdx.x < kPivots) {
    const int j = threadIdx.x;
    uint32_t c = 0;
    unsigned long long m = 0;
    for (int w = 0; w < Warps(); ++w) {
      c += s.warp_pivot_count[w][j];
      m += s.warp_pivot_mass[w][j];
    }
    s.pivot_count[j] = c;
    s.pivot_mass[j] = m;
  }
  __syncthreads();
}

// ---------------------------------------------------------------- the row

// z of one row, four ids (one Philox block) at a time.
struct RowView {
  const float* logits;  // the row's first logit
  int32_t size;         // vocabulary
  float inv_temperature;
  bool vector;

  __device__ int32_t groups() const { return (size + 3) / 4; }

  // z of ids 4g .. 4g + 3; ids past the row read nothing and get -inf.
  __device__ void Load(int32_t g, float (&z)[4]) const {
    if (vector) {
      const float4 x = __ldg(reinterpret_cast<const float4*>(logits) + g);
      z[0] = ScaleLogit(x.x, inv_temperature);
      z[1] = ScaleLogit(x.y, inv_temperature);
      z[2] = ScaleLogit(x.z, inv_temperature);
      z[3] = ScaleLogit(x.w, inv_temperature);
      return;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int32_t id = 4 * g + j;
      z[j] = id < size ? ScaleLogit(__ldg(logits + id), inv_temperature) : kNegInf;
    }
  }
};

__device__ void StoreGroup(float* probs, int32_t g, int32_t size, bool vector,
                           const float (&p)[4]) {
  if (vector) {
    reinterpret_cast<float4*>(probs)[g] = make_float4(p[0], p[1], p[2], p[3]);
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (4 * g + j < size) probs[4 * g + j] = p[j];
  }
}

// The groups (of four ids) a pass visits: the whole row, or one cluster
// CTA's slice of it.
struct GroupRange {
  int32_t begin;
  int32_t end;
};
__device__ __forceinline__ GroupRange WholeRow(const RowView& row) { return {0, row.groups()}; }

// Element sources for the threshold searches. ForEach calls f(z, valid) the
// same number of times in every thread of the CTA, so f may use
// warp-collective operations; invalid calls carry no element.
struct RowSource {
  RowView row;
  GroupRange range;  // the CTA's part of the row
  template <typename F>
  __device__ void ForEach(F f) const {
    for (int32_t base = range.begin; base < range.end; base += Threads()) {
      const int32_t g = base + static_cast<int32_t>(threadIdx.x);
      float z[4] = {kNegInf, kNegInf, kNegInf, kNegInf};
      if (g < range.end) row.Load(g, z);
#pragma unroll
      for (int j = 0; j < 4; ++j) f(z[j], g < range.end && 4 * g + j < row.size);
    }
  }
};

struct ListSource {
  const float* z;
  int32_t size;
  template <typename F>
  __device__ void ForEach(F f) const {
    for (int32_t base = 0; base < size; base += Threads()) {
      const int32_t i = base + static_cast<int32_t>(threadIdx.x);
      f(i < size ? z[i] : kNegInf, i < size);
    }
  }
};

// ---------------------------------------------------------------- teams

// One radix round's histogram.
struct Histogram {
  uint32_t* count;
  unsigned long long* mass;
};

// The CTAs that work on one row. Each visits its part of the row (its
// sources' elements), and the team combines the parts' histograms and sums,
// so every CTA of the team sees the row's. Combinations are integer sums,
// exact in any order, so a row's results are the same bits whatever its
// team; every CTA of a team picks the same digits and thresholds.
//
// A team of one CTA: its part is the whole row.
struct SoloTeam {
  GroupRange range;
  // The most ids of the near-the-top set j (kPivots: the row) in one CTA's
  // part of the row.
  __device__ uint32_t LargestPart(int j, const Shared& s, int32_t row_size) const {
    return j < kPivots ? s.pivot_count[j] : static_cast<uint32_t>(row_size);
  }
  // Whether every part's ids of set j fit one CTA's candidate list.
  __device__ bool PartsFit(int j, const Shared& s, int32_t row_size) const {
    return LargestPart(j, s, row_size) <= kCandidateCap;
  }
  __device__ Histogram NextHistogram(Shared& s) { return {s.hist_count[0], s.hist_mass[0]}; }
  __device__ Histogram Combine(const Histogram& local, bool /*with_mass*/) { return local; }
  __device__ unsigned long long Sum(unsigned long long block_sum, Shared& /*s*/) {
    return block_sum;
  }
  // The row's count in `bin` of the CTAs' histograms at `local`.
  __device__ uint32_t SumCounts(const uint32_t* local, int bin) const { return local[bin]; }
  // Until every CTA of the team is here.
  __device__ void Barrier() const { __syncthreads(); }
};

// What a cluster team's CTAs exchange through distributed shared memory
// besides their histograms: a sum's part, in two slots used by turns (a CTA
// writes the next sum's part only after the cluster barrier of this one,
// which its peers pass only after reading the previous one), and the
// combined histogram.
struct ClusterSums {
  uint32_t largest_part[kPivots + 1];  // the most ids of set j in one slice
  unsigned long long part[2];
  uint32_t hist_count[256];
  unsigned long long hist_mass[256];
};

// A cluster's CTAs, each over its slice of the row.
struct ClusterTeam {
  GroupRange range;
  cg::cluster_group& cluster;
  ClusterSums& x;
  int histogram_turn = 0;
  int sum_turn = 0;

  __device__ uint32_t LargestPart(int j, const Shared& /*s*/, int32_t /*row_size*/) const {
    return x.largest_part[j];
  }
  // Each CTA lists its own slice's candidates, so a set fits when its
  // largest slice does: the cluster holds one list per CTA.
  __device__ bool PartsFit(int j, const Shared& s, int32_t row_size) const {
    return LargestPart(j, s, row_size) <= kCandidateCap;
  }

  __device__ Histogram NextHistogram(Shared& s) {
    const int turn = histogram_turn;
    histogram_turn ^= 1;
    return {s.hist_count[turn], s.hist_mass[turn]};
  }

  // The cluster's histogram from every CTA's `local` (complete in each CTA
  // after its __syncthreads). The local histogram of this turn is not
  // written again before the next round's barrier, which every peer passes
  // only after reading it.
  __device__ Histogram Combine(const Histogram& local, bool with_mass) {
    cluster.sync();
    const int ctas = static_cast<int>(cluster.num_blocks());
    for (int bin = threadIdx.x; bin < 256; bin += Threads()) {
      uint32_t count = 0;
      unsigned long long mass = 0;
      for (int c = 0; c < ctas; ++c) {
        count += cluster.map_shared_rank(local.count, c)[bin];
        if (with_mass) mass += cluster.map_shared_rank(local.mass, c)[bin];
      }
      x.hist_count[bin] = count;
      x.hist_mass[bin] = mass;
    }
    __syncthreads();
    return {x.hist_count, x.hist_mass};
  }

  __device__ uint32_t SumCounts(const uint32_t* local, int bin) const {
    uint32_t count = 0;
    const int ctas = static_cast<int>(cluster.num_blocks());
    for (int c = 0; c < ctas; ++c) count += cluster.map_shared_rank(local, c)[bin];
    return count;
  }
  __device__ void Barrier() const { cluster.sync(); }

  // The cluster's sum of every CTA's `block_sum` (the same in all its threads).
  __device__ unsigned long long Sum(unsigned long long block_sum, Shared& s) {
    const int turn = sum_turn;
    sum_turn ^= 1;
    if (threadIdx.x == 0) x.part[turn] = block_sum;
    cluster.sync();
    if (threadIdx.x == 0) {
      unsigned long long total = 0;
      const int ctas = static_cast<int>(cluster.num_blocks());
      for (int c = 0; c < ctas; ++c) total += *cluster.map_shared_rank(&x.part[turn], c);
      s.result_u = total;
    }
    __syncthreads();
    return s.result_u;
  }
};

// ---------------------------------------------------------------- radix selection

// Sum of x over `peers` (the lanes holding the same histogram bin as this
// one), valid in the group's lowest lane: a tree over each group's lanes,
// all groups at once, in at most five steps. Warp-collective.
__device__ unsigned long long SumOverPeers(unsigned peers, unsigned long long x) {
  const int lane = Lane();
  int rank = __popc(peers & ((1u << lane) - 1u));  // position among the peers
  unsigned higher = peers & ~((2u << lane) - 1u);  // peers in higher lanes
  while (__any_sync(kFullMask, higher != 0)) {
    const int next = __ffs(higher);  // 1-based; 0: none
    const unsigned long long t = __shfl_sync(kFullMask, x, next > 0 ? next - 1 : lane);
    if (next > 0) x += t;
    // Odd positions have been absorbed by their lower neighbour.
    higher &= ~__ballot_sync(kFullMask, rank & 1);
    rank >>= 1;
  }
  return x;
}

// Adds one element per lane to the histogram (with its weight when
// with_mass). Lanes of a warp often share a bin (logits cluster), so each
// group of equal bins adds once, from its lowest lane. Warp-collective.
__device__ void HistogramAdd(bool valid, uint32_t bin, unsigned long long weight,
                             bool with_mass, const Histogram& h) {
  // After the first digit most elements miss the prefix: whole warps skip.
  if (__ballot_sync(kFullMask, valid) == 0) return;
  const unsigned peers = __match_any_sync(kFullMask, valid ? bin : 0xFFFFFFFFu);
  if (with_mass) weight = SumOverPeers(peers, valid ? weight : 0);
  if (valid && __ffs(peers) - 1 == Lane()) {
    atomicAdd(&h.count[bin], static_cast<uint32_t>(__popc(peers)));
    if (with_mass) SharedAddU64(&h.mass[bin], weight);
  }
}

__device__ void ClearHistogram(const Histogram& h) {
  for (int i = threadIdx.x; i < 256; i += Threads()) {
    h.count[i] = 0;
    h.mass[i] = 0;
  }
}

// The bits of a key above digit `shift`.
__device__ __forceinline__ uint32_t HighMask(int shift) {
  return shift == 24 ? 0u : 0xFFFFFFFFu << (shift + 8);
}

// Warp 0, after a top-k round: the digit of the k-th largest key. Lane l
// holds bins 255 - 8l .. 248 - 8l (largest first); the lane where the count
// from the top first reaches `remaining` holds it.
__device__ void PickTopKDigit(int shift, uint32_t k, const Histogram& h, Shared& s) {
  const int lane = Lane();
  uint32_t c[8];
  uint32_t sum = 0;
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    c[q] = h.count[255 - 8 * lane - q];
    sum += c[q];
  }
  uint32_t inclusive = sum;
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t t = __shfl_up_sync(kFullMask, inclusive, o);
    if (lane >= o) inclusive += t;
  }
  const uint32_t remaining = s.remaining;
  const unsigned reached = __ballot_sync(kFullMask, inclusive >= remaining);
  // Always reached: `remaining` never exceeds the elements that match.
  if (reached == 0 || lane != __ffs(reached) - 1) return;
  uint32_t above = inclusive - sum;
  int bin = 248 - 8 * lane;
  uint32_t at = c[7];
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    if (above + c[q] >= remaining) {
      bin = 255 - 8 * lane - q;
      at = c[q];
      break;
    }
    above += c[q];
  }
  s.remaining = remaining - above;
  s.prefix |= static_cast<uint32_t>(bin) << shift;
  // After the last digit: ids above the threshold plus ids equal to it.
  if (shift == 0) s.count_ge = k - s.remaining + at;
}

struct Selection {
  float threshold;
  uint32_t count_ge;  // ids with z >= threshold
};

// The k-th largest z of the source (1 <= k <= its size), by radix selection
// on order keys.
template <typename Source, typename Team>
__device__ Selection SelectTopK(const Source& source, uint32_t k, Team& team, Shared& s) {
  if (threadIdx.x == 0) {
    s.prefix = 0;
    s.remaining = k;
    s.count_ge = 0;
  }
  __syncthreads();
  for (int shift = 24; shift >= 0; shift -= 8) {
    const uint32_t prefix = s.prefix;
    const uint32_t high = HighMask(shift);
    const Histogram local = team.NextHistogram(s);
    ClearHistogram(local);
    __syncthreads();
    source.ForEach([&](float z, bool valid) {
      const uint32_t key = OrderKey(z);
      HistogramAdd(valid && ((key ^ prefix) & high) == 0, (key >> shift) & 0xFFu, 0, false,
                   local);
    });
    __syncthreads();
    const Histogram h = team.Combine(local, /*with_mass=*/false);
    if (Warp() == 0) PickTopKDigit(shift, k, h, s);
    __syncthreads();
  }
  const Selection selection{FromOrderKey(s.prefix), s.count_ge};
  __syncthreads();
  return selection;
}

// Warp 0, after a top-p round: the lowest non-empty bin whose mass above it
// (s.above, the mass above the current prefix, plus the higher bins) is
// still below the limit. That mass only grows towards lower bins, so the
// bins that qualify are the non-empty ones above a crossing point.
__device__ void PickTopPDigit(int shift, double limit, const Histogram& h, Shared& s) {
  const int lane = Lane();
  uint32_t c[8];
  unsigned long long m[8];
  unsigned long long sum = 0;
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    c[q] = h.count[255 - 8 * lane - q];
    m[q] = h.mass[255 - 8 * lane - q];
    sum += m[q];
  }
  unsigned long long inclusive = sum;
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long t = __shfl_up_sync(kFullMask, inclusive, o);
    if (lane >= o) inclusive += t;
  }
  unsigned long long running = s.above + (inclusive - sum);
  int chosen = -1;
  unsigned long long chosen_above = 0;
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    if (c[q] != 0 && FixedToDouble(running) < limit) {
      chosen = 255 - 8 * lane - q;
      chosen_above = running;
    }
    running += m[q];
  }
  const unsigned has = __ballot_sync(kFullMask, chosen >= 0);
  // Never empty: the highest non-empty bin has only s.above above it, and
  // s.above < limit holds from the first round on (limit > 0).
  if (has == 0 || lane != 31 - __clz(has)) return;
  s.prefix |= static_cast<uint32_t>(chosen) << shift;
  s.above = chosen_above;
}

// Among the source's ids with z >= kept_threshold: the smallest value v with
// above + mass(z > v) < limit (draft_sampler.h; `above`: the mass of the
// kept ids above every id of the source, when the source is part of the
// row), by radix selection where each bin also carries its fixed-point mass.
template <typename Source, typename Team>
__device__ float SelectTopP(const Source& source, float kept_threshold, float row_max,
                            double limit, unsigned long long above, Team& team, Shared& s) {
  if (threadIdx.x == 0) {
    s.prefix = 0;
    s.above = above;
  }
  __syncthreads();
  for (int shift = 24; shift >= 0; shift -= 8) {
    const uint32_t prefix = s.prefix;
    const uint32_t high = HighMask(shift);
    const Histogram local = team.NextHistogram(s);
    ClearHistogram(local);
    __syncthreads();
    source.ForEach([&](float z, bool valid) {
      const uint32_t key = OrderKey(z);
      const bool match = valid && z >= kept_threshold && ((key ^ prefix) & high) == 0;
      HistogramAdd(match, (key >> shift) & 0xFFu, match ? FixedWeight(z, row_max) : 0, true,
                   local);
    });
    __syncthreads();
    const Histogram h = team.Combine(local, /*with_mass=*/true);
    if (Warp() == 0) PickTopPDigit(shift, limit, h, s);
    __syncthreads();
  }
  const float threshold = FromOrderKey(s.prefix);
  __syncthreads();
  return threshold;
}

// Fixed-point mass of the source's ids with z >= threshold.
template <typename Source, typename Team>
__device__ unsigned long long KeptMass(const Source& source, float threshold, float row_max,
                                       Team& team, Shared& s) {
  unsigned long long mass = 0;
  source.ForEach([&](float z, bool valid) {
    if (valid && z >= threshold) mass += FixedWeight(z, row_max);
  });
  return team.Sum(BlockSum(mass, s), s);
}

// Copies the z of the row's ids with z >= floor into s.candidates (at most
// kCandidateCap; callers know the count) and returns them as a source.
__device__ ListSource CopyCandidates(const RowSource& source, float floor, Shared& s) {
  if (threadIdx.x == 0) s.num_candidates = 0;
  __syncthreads();
  const int lane = Lane();
  source.ForEach([&](float z, bool valid) {
    const bool take = valid && z >= floor;
    const unsigned taken = __ballot_sync(kFullMask, take);
    int32_t base = 0;
    if (lane == 0 && taken != 0) base = atomicAdd(&s.num_candidates, __popc(taken));
    base = __shfl_sync(kFullMask, base, 0);
    const int32_t slot = base + __popc(taken & ((1u << lane) - 1u));
    if (take && slot < kCandidateCap) s.candidates[slot] = z;
  });
  __syncthreads();
  return ListSource{s.candidates, min(s.num_candidates, kCandidateCap)};
}

// Top-p's candidate bins [first, last] of the first-level histogram
// (kernels/top_p_bins.h), from the team's counts at `fine_hist`; `fit`:
// there are some, and their ids fit kFineListCap.
struct FineCandidates {
  int32_t first;
  int32_t last;
  bool fit;
};

// Bounds on the fixed-point mass of `count` ids of first-level bin n.
__device__ __forceinline__ void BinMassBounds(int n, uint32_t count, double* below,
                                              double* above) {
  *below = count * WeightBelow(EdgeExp(n + 1, kFirstLevelScale));
  *above = count * WeightAbove(EdgeExp(n, kFirstLevelScale));
}

// The histogram leaves out the open-ended last bin (pass 2 does not count
// it): the threshold weighs something, so it is never there (MayWeigh), and
// low temperatures put most ids there, all on one shared address.
template <typename Team>
__device__ FineCandidates FineCandidateBins(const uint32_t* fine_hist, double limit, Team& team,
                                            Shared& s) {
  // Thread t owns bins [t * per, (t + 1) * per), so thread order is bin
  // order; Threads() is 512 or 1024 (the launchers' choices), so per is 4
  // or 2.
  const int per = kFineBins / Threads();
  const int bin0 = static_cast<int>(threadIdx.x) * per;
  // The histograms are complete: pass 2 ended in a block reduction, and a
  // cluster's CTAs exchanged their masses since.
  uint32_t count[kMaxFineBinsPerThread] = {};
#pragma unroll
  for (int j = 0; j < kMaxFineBinsPerThread; ++j) {
    if (j < per) count[j] = team.SumCounts(fine_hist, bin0 + j);
  }
  // Every CTA has read its peers' counts: the candidate memory is free.
  team.Barrier();
  // Bounds on the mass of the bins before this thread's.
  double lo = 0.0, hi = 0.0;
#pragma unroll
  for (int j = 0; j < kMaxFineBinsPerThread; ++j) {
    if (j >= per) break;
    double below, above;
    BinMassBounds(bin0 + j, count[j], &below, &above);
    lo += below;
    hi += above;
  }
  BlockExclusiveScan2(&lo, &hi, s.warp_d[0], s.warp_d[1]);
  // The threshold's bin B has mass(bins < B) < limit <= mass(bins <= B),
  // holds the threshold and may weigh something. (The bounds are computed
  // again rather than kept from the loop above: each sum then compiles to
  // a fused multiply-add of the count and the edge weight, as in that loop;
  // a kept product would round twice and move the bounds by their last
  // bit.)
  int32_t first = kFineBins, last = -1;
#pragma unroll
  for (int j = 0; j < kMaxFineBinsPerThread; ++j) {
    if (j >= per) break;
    const int n = bin0 + j;
    double below, above;
    BinMassBounds(n, count[j], &below, &above);
    if (lo < limit && count[j] != 0 && MayWeigh(n, kFirstLevelScale)) last = n;
    lo += below;
    hi += above;
    if (hi >= limit && first == kFineBins) first = n;
  }
  first = BlockMin(first, s);
  last = -BlockMin(-last, s);
  unsigned long long candidates = 0;
#pragma unroll
  for (int j = 0; j < kMaxFineBinsPerThread; ++j) {
    if (j < per && bin0 + j >= first && bin0 + j <= last) candidates += count[j];
  }
  candidates = BlockSum(candidates, s);
  return FineCandidates{first, last, first <= last && candidates <= kFineListCap};
}

// Copies the z of the part's ids in the candidate bins (and at least
// `floor`) into s.candidates, and sums into *above the team's exact mass of
// the ids nearer the maximum than the candidate bins (all of them kept).
template <typename Team>
__device__ ListSource CopyFineCandidates(const RowSource& source, float row_max, float floor,
                                         const FineCandidates& bins, unsigned long long* above,
                                         Team& team, Shared& s) {
  if (threadIdx.x == 0) s.num_candidates = 0;
  __syncthreads();
  const int lane = Lane();
  const uint32_t first = static_cast<uint32_t>(bins.first);
  const uint32_t last = static_cast<uint32_t>(bins.last);
  unsigned long long mine = 0;
  source.ForEach([&](float z, bool valid) {
    const bool kept = valid && z >= floor;
    const uint32_t bin = FirstLevelBin(z, row_max);
    if (kept && bin < first) mine += FixedWeight(z, row_max);
    const bool take = kept && bin >= first && bin <= last;
    const unsigned taken = __ballot_sync(kFullMask, take);
    int32_t base = 0;
    if (lane == 0 && taken != 0) base = atomicAdd(&s.num_candidates, __popc(taken));
    base = __shfl_sync(kFullMask, base, 0);
    const int32_t slot = base + __popc(taken & ((1u << lane) - 1u));
    if (take && slot < kFineListCap) s.candidates[slot] = z;  // the counts bound the slots
  });
  __syncthreads();
  *above = team.Sum(BlockSum(mine, s), s);
  return ListSource{s.candidates, s.num_candidates};
}

// Top-p's histogram of counts for a row with top-p and no top-k whose
// `ctas` CTAs hold about gates.min_part_ids ids or more each (else null):
// the candidate memory's last kFineBins words. The same for every CTA of a
// row.
__device__ uint32_t* FineHistogram(bool greedy, int32_t top_k, float top_p, int32_t vocab_size,
                                   int ctas, const DraftTopPGates& gates, const Shared& s) {
  const bool on = !greedy && top_p < 1.0f && !draft_internal::TopKActive(top_k, vocab_size) &&
                  vocab_size / ctas >= gates.min_part_ids;
  return on ? reinterpret_cast<uint32_t*>(s.candidates + kFineListCap) : nullptr;
}

// ---------------------------------------------------------------- passes

struct Scan {
  float row_max;
  int32_t argmax;
  int32_t non_finite;  // lowest id whose z is not finite, kNoId if none
};

// Pass 1.
__device__ Scan ScanRow(const RowView& row, GroupRange range, Shared& s) {
  float best = kNegInf;
  int32_t best_id = kNoId;
  int32_t bad = kNoId;
  for (int32_t g = range.begin + threadIdx.x; g < range.end; g += Threads()) {
    float z[4];
    row.Load(g, z);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int32_t id = 4 * g + j;
      if (id >= row.size) continue;
      if (!IsFinite(z[j])) {
        bad = min(bad, id);
      } else if (MaxBeats(z[j], id, best, best_id)) {
        best = z[j];
        best_id = id;
      }
    }
  }
  BlockBestPair(&best, &best_id, s, [](float v, int32_t id, float b, int32_t b_id) {
    return MaxBeats(v, id, b, b_id);
  });
  return Scan{best, best_id, BlockMin(bad, s)};
}

// Pass 2: the row's mass; with `pivots`, the nested near-the-top sets into
// s.pivot_count/mass; with `one_hot` (greedy rows), p = one-hot at the argmax;
// with `fine_hist`, top-p's histogram of counts of the ids with z >=
// fine_floor there. The histogram is a template argument, so that rows
// without it run a loop without its test.
template <bool kFineHist>
__device__ unsigned long long MassPass(const RowView& row, GroupRange range, const Scan& scan,
                                       bool pivots, bool one_hot, uint32_t* fine_hist,
                                       float fine_floor, float* probs, bool vector_probs,
                                       Shared& s) {
  if (kFineHist) {
    for (int i = threadIdx.x; i < kFineBins; i += Threads()) fine_hist[i] = 0;
    __syncthreads();
  }
  float near[kPivots];
#pragma unroll
  for (int j = 0; j < kPivots; ++j) near[j] = FSub(scan.row_max, PivotDistance(j));
  unsigned long long total = 0;
  uint32_t count[kPivots] = {};
  unsigned long long mass[kPivots] = {};
  for (int32_t g = range.begin + threadIdx.x; g < range.end; g += Threads()) {
    float z[4];
    row.Load(g, z);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (4 * g + j >= row.size) continue;
      const unsigned long long w = FixedWeight(z[j], scan.row_max);
      total += w;
      if (kFineHist && z[j] >= fine_floor) {
        const uint32_t bin = FirstLevelBin(z[j], scan.row_max);
        if (bin < kFineBins - 1) atomicAdd(&fine_hist[bin], 1u);  // not the open bin
      }
      if (pivots && z[j] >= near[kPivots - 1]) {
#pragma unroll
        for (int q = 0; q < kPivots; ++q) {
          if (z[j] >= near[q]) {
            ++count[q];
            mass[q] += w;
          }
        }
      }
    }
    if (one_hot) {
      float p[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) p[j] = 4 * g + j == scan.argmax ? 1.0f : 0.0f;
      StoreGroup(probs, g, row.size, vector_probs, p);
    }
  }
  if (pivots) BlockSumPivots(count, mass, s);
  return BlockSum(total, s);
}

// MassPass with top-p's histogram when the row has one (fine_hist set).
__device__ __forceinline__ unsigned long long MassPassOf(const RowView& row, GroupRange range,
                                                         const Scan& scan, bool pivots,
                                                         bool one_hot, uint32_t* fine_hist,
                                                         float fine_floor, float* probs,
                                                         bool vector_probs, Shared& s) {
  return fine_hist != nullptr ? MassPass<true>(row, range, scan, pivots, one_hot, fine_hist,
                                               fine_floor, probs, vector_probs, s)
                              : MassPass<false>(row, range, scan, pivots, one_hot, nullptr,
                                                fine_floor, probs, vector_probs, s);
}

struct Kept {
  float threshold;
  unsigned long long mass;
};

// Pass 3: the top-k / top-p threshold and the mass of the ids it keeps.
// s.pivot_count/mass hold the whole row's near-the-top sets; each of the
// team's CTAs copies candidates from its own part, and the selections
// combine the parts.
template <typename Team>
__device__ Kept Thresholds(const RowView& row, const Scan& scan, unsigned long long total,
                           int32_t top_k, float top_p, float min_p, const uint32_t* fine_hist,
                           uint32_t fine_min_list_ids, Team& team, Shared& s) {
  const bool top_k_on = draft_internal::TopKActive(top_k, row.size);
  const bool top_p_on = top_p < 1.0f;
  const float min_p_threshold = MinPThreshold(scan.row_max, min_p);
  const RowSource whole{row, team.range};
  // The near-the-top set j (j == kPivots: the whole row) and its size.
  const auto floor_of = [&](int j) {
    return j < kPivots ? FSub(scan.row_max, PivotDistance(j)) : kNegInf;
  };

  Kept kept{kNegInf, total};
  bool listed = false;  // s.candidates holds every id of the part with z >= kept.threshold
  ListSource list{nullptr, 0};
  if (min_p_threshold > kNegInf && !top_k_on) {
    kept.threshold = min_p_threshold;
    kept.mass = KeptMass(whole, kept.threshold, scan.row_max, team, s);
  }
  if (top_k_on) {
    // The smallest set with k ids holds the top k.
    int j = 0;
    while (j < kPivots && s.pivot_count[j] < static_cast<uint32_t>(top_k)) ++j;
    if (team.PartsFit(j, s, row.size)) {
      list = CopyCandidates(whole, floor_of(j), s);
      listed = true;
    }
    const Selection selection = listed ? SelectTopK(list, top_k, team, s)
                                        : SelectTopK(whole, top_k, team, s);
    // Min-p and top-k both keep an upper set: the kept set is the smaller.
    kept.threshold = max(selection.threshold, min_p_threshold);
    if (!listed && top_p_on && selection.count_ge <= kCandidateCap) {
      list = CopyCandidates(whole, kept.threshold, s);
      listed = true;
    }
    kept.mass = listed ? KeptMass(list, kept.threshold, scan.row_max, team, s)
                       : KeptMass(whole, kept.threshold, scan.row_max, team, s);
  }
  if (top_p_on) {
    const double limit = DMul(static_cast<double>(top_p), FixedToDouble(kept.mass));
    // No id below a set whose mass reaches the limit is kept: its mass above
    // is at least that set's. With min-p, the kept set itself (mass >=
    // limit) bounds it too.
    int j = 0;
    while (j < kPivots && !(FixedToDouble(s.pivot_mass[j]) >= limit)) ++j;
    // The histogram's candidates cost a fixed number of team barriers and
    // a pass with an exponential per id above them; the pivot set's list
    // costs its ids times the selection's rounds. So (by that reasoning, and
    // the benchmark's best gate) the histogram is taken where the list
    // would be long.
    if (!top_k_on && fine_hist != nullptr &&
        team.LargestPart(j, s, row.size) > fine_min_list_ids) {
      const FineCandidates bins = FineCandidateBins(fine_hist, limit, team, s);
      if (bins.fit) {
        // The threshold is a candidate: ids above the candidate bins are
        // all kept, ids below none.
        unsigned long long above = 0;
        list = CopyFineCandidates(whole, scan.row_max, kept.threshold, bins, &above, team, s);
        kept.threshold = SelectTopP(list, kept.threshold, scan.row_max, limit, above, team, s);
        kept.mass = above + KeptMass(list, kept.threshold, scan.row_max, team, s);
        return kept;
      }
    }
    if (!top_k_on) {
      if (team.PartsFit(j, s, row.size)) {
        list = CopyCandidates(whole, max(floor_of(j), kept.threshold), s);
        listed = true;
      }
    }
    kept.threshold = listed ? SelectTopP(list, kept.threshold, scan.row_max, limit, 0, team, s)
                            : SelectTopP(whole, kept.threshold, scan.row_max, limit, 0, team, s);
    kept.mass = listed ? KeptMass(list, kept.threshold, scan.row_max, team, s)
                       : KeptMass(whole, kept.threshold, scan.row_max, team, s);
  }
  return kept;
}

// True if no key of weight p can beat best_key whatever its uniform:
// UniformOpen01 never exceeds 1 - 2^-24, so the race's exponential is at
// least about 2^-24 and a key at most about p * 2^24; p * 2^25 < best_key
// (exact: a power-of-two scaling) leaves a factor 2 for rounding. Groups
// whose ids are all out of reach skip their Philox block.
__device__ __forceinline__ bool OutOfReach(float p, float best_key) {
  return FMul(p, 33554432.0f) < best_key;  // 2^25
}

// The race's winner: the largest key, ties to the lower id.
struct RaceWinner {
  float key;
  int32_t id;
};

// Pass 4: p over the kept ids, written out, and the race over p.
__device__ RaceWinner ProposalPass(const RowView& row, GroupRange range, const Scan& scan,
                                   const Kept& kept, uint64_t seed, int64_t position, float* probs,
                                   bool vector_probs, Shared& s) {
  const float mass = FixedToFloat(kept.mass);
  float best_key = 0.0f;
  int32_t best_id = kNoId;
  for (int32_t g = range.begin + threadIdx.x; g < range.end; g += Threads()) {
    float z[4];
    row.Load(g, z);
    float p[4];
    bool race = false;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      p[j] = 4 * g + j < row.size
                 ? draft_internal::KeptProb(z[j], scan.row_max, kept.threshold, mass)
                 : 0.0f;
      race |= p[j] > 0.0f && !OutOfReach(p[j], best_key);
    }
    StoreGroup(probs, g, row.size, vector_probs, p);
    if (!race) continue;
    const PhiloxBlock bits =
        draft_internal::ProposalBits(seed, position, static_cast<uint32_t>(g));
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (!(p[j] > 0.0f)) continue;
      const float u = UniformOpen01(bits.v[j]);
      if (RaceCannotBeat(p[j], u, best_key)) continue;
      const float key = RaceKey(p[j], -LogPositive(u));
      if (RaceBeats(key, 4 * g + j, best_key, best_id)) {
        best_key = key;
        best_id = 4 * g + j;
      }
    }
  }
  BlockBestPair(&best_key, &best_id, s, [](float k, int32_t id, float b, int32_t b_id) {
    return RaceBeats(k, id, b, b_id);
  });
  return RaceWinner{best_key, best_id};
}

// One row; returns its error key (0 if none), the same in every thread.
__device__ uint64_t SampleRow(const KernelArgs& a, int32_t row, Shared& s) {
  const DraftSampleInputs& in = a.in;
  const float temperature = in.temperatures[row];
  const int32_t top_k = in.top_ks[row];
  const float top_p = in.top_ps[row];
  const float min_p = draft_internal::MinPOf(in, row);
  const DraftParam bad = draft_internal::BadParam(temperature, top_k, top_p, min_p);
  if (bad != DraftParam::kNone) {
    return draft_internal::ErrorKey(row, DraftErrorCode::kBadSamplingParams,
                                    static_cast<uint32_t>(bad));
  }
  const int64_t offset = static_cast<int64_t>(row) * in.vocab_size;
  const RowView view{in.logits + offset, in.vocab_size,
                     draft_internal::RowInverseTemperature(temperature), a.vector_logits};
  float* probs = a.out.probs + offset;

  const Scan scan = ScanRow(view, WholeRow(view), s);
  if (scan.non_finite != kNoId) {
    return draft_internal::ErrorKey(row, DraftErrorCode::kNonFiniteLogit,
                                    static_cast<uint32_t>(scan.non_finite));
  }
  const bool greedy = temperature == 0.0f;
  const bool pivots =
      !greedy && draft_internal::FiltersActive(top_k, top_p, min_p, in.vocab_size);
  uint32_t* const fine_hist =
      FineHistogram(greedy, top_k, top_p, in.vocab_size, 1, a.top_p_gates, s);
  const float fine_floor = MinPThreshold(scan.row_max, min_p);
  const unsigned long long total = MassPassOf(view, WholeRow(view), scan, pivots, greedy,
                                              fine_hist, fine_floor, probs, a.vector_probs, s);
  if (greedy) {
    if (threadIdx.x == 0) {
      a.out.token_ids[row] = scan.argmax;
      a.out.signals[row] = draft_internal::Signal(total);
    }
    return 0;
  }
  SoloTeam team{WholeRow(view)};
  const Kept kept = Thresholds(view, scan, total, top_k, top_p, min_p, fine_hist,
                               a.top_p_gates.min_list_ids, team, s);
  const int32_t token = ProposalPass(view, WholeRow(view), scan, kept, in.seeds[row],
                                     in.positions[row], probs, a.vector_probs, s)
                            .id;
  if (threadIdx.x == 0) {
    a.out.token_ids[row] = token;
    a.out.signals[row] = draft_internal::Signal(kept.mass);
  }
  return 0;
}

// Thread 0 of every CTA: folds the row's error into the accumulator; the
// last CTA publishes the launch's record and zeroes the workspace.
__device__ void FinishRow(const KernelArgs& a, uint64_t error_key) {
  if (threadIdx.x != 0) return;
  Workspace* ws = a.workspace;
  if (error_key != 0) atomicMax(&ws->error_acc, ~static_cast<unsigned long long>(error_key));
  __threadfence();
  const unsigned int done = atomicAdd(&ws->done, 1u);
  if (done + 1 != gridDim.x) return;
  __threadfence();
  const unsigned long long acc = atomicExch(&ws->error_acc, 0ull);
  a.out.error->key = acc == 0 ? 0 : ~acc;
  atomicExch(&ws->done, 0u);
}

// Every launch gives each CTA kCandidateBytes of dynamic shared memory.
extern __shared__ float candidate_memory[];

__device__ void UseCandidateMemory(Shared& s) {
  if (threadIdx.x == 0) s.candidates = candidate_memory;
  __syncthreads();
}

__global__ void __launch_bounds__(kMaxThreads, 1) DraftSampleKernel(const __grid_constant__ KernelArgs a) {
  __shared__ Shared s;
  UseCandidateMemory(s);
  const int32_t row = static_cast<int32_t>(blockIdx.x);
  const uint64_t error_key = row < a.in.num_rows ? SampleRow(a, row, s) : 0;
  FinishRow(a, error_key);
}

// ---------------------------------------------------------------- split rows

// What a CTA of a split row's cluster shares with its peers (distributed
// shared memory): its slice's result of each exchange, each in its own slot
// so that no exchange waits for the readers of the previous one; and the
// peers' slots, copied in.
struct ScanSlot {
  float row_max;
  int32_t argmax;
  int32_t non_finite;
};
// A slice's mass and, for a row with filters, its near-the-top sets.
struct MassSlot {
  unsigned long long total;
  uint32_t pivot_count[kPivots];
  unsigned long long pivot_mass[kPivots];
};
struct SplitShared {
  ScanSlot scan;
  ScanSlot scans[kClusterCtas];
  MassSlot mass;
  MassSlot masses[kClusterCtas];
  RaceWinner race;
  RaceWinner races[kClusterCtas];
  ClusterSums sums;  // the thresholds' exchanges (ClusterTeam)
};

// Publishes every CTA's `mine` (written by thread 0) and copies the
// cluster's into `all`: one remote read per thread of the first few.
template <typename T>
__device__ void ExchangeAcrossCluster(cg::cluster_group& cluster, T* mine, T* all) {
  cluster.sync();
  if (threadIdx.x < cluster.num_blocks()) {
    all[threadIdx.x] = *cluster.map_shared_rank(mine, static_cast<int>(threadIdx.x));
  }
  __syncthreads();
}

// One row over the cluster; returns its error key (0 if none) in the first
// CTA, 0 in the others. Every branch depends only on the row's parameters
// and on exchanged values, so all CTAs of the cluster take the same one.
__device__ uint64_t SampleSplitRow(const KernelArgs& a, int32_t row, cg::cluster_group& cluster,
                                   Shared& s, SplitShared& x) {
  // The launcher's clusters are 2 to kClusterCtas CTAs (the slot arrays' size).
  const int rank = static_cast<int>(cluster.block_rank());
  const int ctas = static_cast<int>(cluster.num_blocks());
  const DraftSampleInputs& in = a.in;
  const float temperature = in.temperatures[row];
  const int32_t top_k = in.top_ks[row];
  const float top_p = in.top_ps[row];
  const float min_p = draft_internal::MinPOf(in, row);
  const DraftParam bad = draft_internal::BadParam(temperature, top_k, top_p, min_p);
  if (bad != DraftParam::kNone) {
    return rank != 0 ? 0
                     : draft_internal::ErrorKey(row, DraftErrorCode::kBadSamplingParams,
                                                static_cast<uint32_t>(bad));
  }
  const bool greedy = temperature == 0.0f;
  const bool filtered =
      !greedy && draft_internal::FiltersActive(top_k, top_p, min_p, in.vocab_size);
  const int64_t offset = static_cast<int64_t>(row) * in.vocab_size;
  const RowView view{in.logits + offset, in.vocab_size,
                     draft_internal::RowInverseTemperature(temperature), a.vector_logits};
  float* probs = a.out.probs + offset;
  const int32_t groups = view.groups();
  const int32_t per_cta = (groups + ctas - 1) / ctas;
  const GroupRange slice{min(groups, rank * per_cta), min(groups, (rank + 1) * per_cta)};

  const Scan mine = ScanRow(view, slice, s);
  if (threadIdx.x == 0) x.scan = ScanSlot{mine.row_max, mine.argmax, mine.non_finite};
  ExchangeAcrossCluster(cluster, &x.scan, x.scans);
  Scan scan{kNegInf, kNoId, kNoId};
  for (int c = 0; c < ctas; ++c) {
    if (MaxBeats(x.scans[c].row_max, x.scans[c].argmax, scan.row_max, scan.argmax)) {
      scan.row_max = x.scans[c].row_max;
      scan.argmax = x.scans[c].argmax;
    }
    scan.non_finite = min(scan.non_finite, x.scans[c].non_finite);
  }
  if (scan.non_finite != kNoId) {
    return rank != 0 ? 0
                     : draft_internal::ErrorKey(row, DraftErrorCode::kNonFiniteLogit,
                                                static_cast<uint32_t>(scan.non_finite));
  }

  uint32_t* const fine_hist =
      FineHistogram(greedy, top_k, top_p, in.vocab_size, ctas, a.top_p_gates, s);
  const float fine_floor = MinPThreshold(scan.row_max, min_p);
  const unsigned long long slice_mass = MassPassOf(view, slice, scan, filtered, greedy, fine_hist,
                                                   fine_floor, probs, a.vector_probs, s);
  if (threadIdx.x == 0) {
    x.mass.total = slice_mass;
    for (int j = 0; j < kPivots; ++j) {
      x.mass.pivot_count[j] = filtered ? s.pivot_count[j] : 0;
      x.mass.pivot_mass[j] = filtered ? s.pivot_mass[j] : 0;
    }
  }
  ExchangeAcrossCluster(cluster, &x.mass, x.masses);
  unsigned long long total = 0;
  for (int c = 0; c < ctas; ++c) total += x.masses[c].total;
  if (filtered) {
    // The row's near-the-top sets, for the thresholds.
    if (threadIdx.x < kPivots) {
      const int j = threadIdx.x;
      uint32_t count = 0;
      uint32_t largest = 0;
      unsigned long long mass = 0;
      for (int c = 0; c < ctas; ++c) {
        count += x.masses[c].pivot_count[j];
        largest = max(largest, x.masses[c].pivot_count[j]);
        mass += x.masses[c].pivot_mass[j];
      }
      s.pivot_count[j] = count;
      s.pivot_mass[j] = mass;
      x.sums.largest_part[j] = largest;
    }
    if (threadIdx.x == kPivots) {
      x.sums.largest_part[kPivots] = static_cast<uint32_t>(4 * per_cta);  // the largest slice
    }
    __syncthreads();
  }
  if (greedy) {
    if (rank == 0 && threadIdx.x == 0) {
      a.out.token_ids[row] = scan.argmax;
      a.out.signals[row] = draft_internal::Signal(total);
    }
    return 0;
  }

  // The thresholds' selections run on every CTA's slice and combine across
  // the cluster; without filters every id is kept.
  ClusterTeam team{slice, cluster, x.sums};
  const Kept kept = filtered ? Thresholds(view, scan, total, top_k, top_p, min_p, fine_hist,
                                          a.top_p_gates.min_list_ids, team, s)
                             : Kept{kNegInf, total};
  const RaceWinner slice_winner = ProposalPass(view, slice, scan, kept, in.seeds[row],
                                               in.positions[row], probs, a.vector_probs, s);
  if (threadIdx.x == 0) x.race = slice_winner;
  ExchangeAcrossCluster(cluster, &x.race, x.races);
  RaceWinner winner{0.0f, kNoId};
  for (int c = 0; c < ctas; ++c) {
    if (RaceBeats(x.races[c].key, x.races[c].id, winner.key, winner.id)) winner = x.races[c];
  }
  if (rank == 0 && threadIdx.x == 0) {
    a.out.token_ids[row] = winner.id;
    a.out.signals[row] = draft_internal::Signal(kept.mass);
  }
  return 0;
}

__global__ void __launch_bounds__(kMaxThreads, 1)
    DraftSampleSplitKernel(const __grid_constant__ KernelArgs a) {
  __shared__ Shared s;
  __shared__ SplitShared x;
  UseCandidateMemory(s);
  cg::cluster_group cluster = cg::this_cluster();
  const int32_t row = static_cast<int32_t>(blockIdx.x / cluster.num_blocks());
  const uint64_t error_key = row < a.in.num_rows ? SampleSplitRow(a, row, cluster, s, x) : 0;
  // No CTA leaves while a peer may still read its slots.
  cluster.sync();
  FinishRow(a, error_key);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Multiprocessors of the current device, looked up once per device.
int MultiprocessorCount() {
  static std::atomic<int> counts[64];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return 0;
  int count = counts[device].load(std::memory_order_relaxed);
  if (count == 0 &&
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) == cudaSuccess) {
    counts[device].store(count, std::memory_order_relaxed);
  }
  return count;
}

// Lets both kernels take kCandidateBytes of dynamic shared memory (above the
// 48 KB default), once per device.
absl::Status PrepareKernels() {
  static std::atomic<bool> prepared[64];
  int device = 0;
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  if (device < 0 || device >= 64) return absl::InternalError("draft sampler: device index");
  if (prepared[device].load(std::memory_order_acquire)) return absl::OkStatus();
  VERDICT_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      DraftSampleKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kCandidateBytes));
  VERDICT_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      DraftSampleSplitKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kCandidateBytes));
  prepared[device].store(true, std::memory_order_release);
  return absl::OkStatus();
}

// The launch of the split kernel for `rows` rows on clusters of `ctas` CTAs
// (`attribute` holds the cluster size that `config` points to).
void SetSplitLaunch(unsigned ctas, unsigned rows, cudaLaunchConfig_t& config,
                    cudaLaunchAttribute& attribute) {
  attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = ctas;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config = {};
  config.gridDim = dim3(rows * ctas, 1, 1);
  config.blockDim = dim3(kMaxThreads, 1, 1);
  config.dynamicSmemBytes = kCandidateBytes;
  config.attrs = &attribute;
  config.numAttrs = 1;
}

// Cluster sizes of the split kernel: 2 << i CTAs for i < kClusterSizes.
constexpr int kClusterSizes = 3;
static_assert(2 << (kClusterSizes - 1) == kClusterCtas, "the largest size is kClusterCtas");

// Clusters of each size the current device holds at once (0: none), looked
// up together once per device.
std::array<int, kClusterSizes> HeldClusters() {
  // clusters + 1 per size; 0: not looked up yet. Size 0's is stored last
  // (release), so once it is set the others are.
  static std::atomic<int> counts[64][kClusterSizes];
  std::array<int, kClusterSizes> held{};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return held;
  std::atomic<int>* known = counts[device];
  if (known[0].load(std::memory_order_acquire) == 0) {
    if (!PrepareKernels().ok()) return held;
    for (int i = kClusterSizes - 1; i >= 0; --i) {
      cudaLaunchConfig_t config;
      cudaLaunchAttribute attribute;
      SetSplitLaunch(2u << i, 1, config, attribute);
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, DraftSampleSplitKernel, &config) !=
          cudaSuccess) {
        (void)cudaGetLastError();  // no clusters of this size here
        clusters = 0;
      }
      known[i].store(clusters + 1, i == 0 ? std::memory_order_release : std::memory_order_relaxed);
    }
  }
  for (int i = 0; i < kClusterSizes; ++i) held[i] = known[i].load(std::memory_order_relaxed) - 1;
  return held;
}

}  // namespace

int DraftSampleClusters(int ctas_per_row) {
  const std::array<int, kClusterSizes> held = HeldClusters();
  for (int i = 0; i < kClusterSizes; ++i) {
    if (ctas_per_row == 2 << i) return held[i];
  }
  return 0;
}

int DraftSampleCtasPerRow(int rows, int max_ctas_per_row) {
  // The largest cluster of which every row gets one at once: more rows than
  // that would wait for a second wave, which costs more than smaller slices.
  const std::array<int, kClusterSizes> held = HeldClusters();
  for (int i = kClusterSizes - 1; i >= 0; --i) {
    const int ctas = 2 << i;
    if (ctas <= max_ctas_per_row && std::max(rows, 1) <= held[i]) return ctas;
  }
  return 1;
}

absl::Status DraftSampleCuda(const DraftSampleInputs& in, DraftSampleOutputs* out, void* workspace,
                             cudaStream_t stream, int max_ctas_per_row, DraftTopPGates gates) {
  if (absl::Status shape = draft_internal::CheckShape(in, out); !shape.ok()) return shape;
  if (out->error == nullptr || workspace == nullptr) {
    return absl::InvalidArgumentError(
        "draft sampler: the CUDA launcher needs an error record and a workspace");
  }
  if (absl::Status prepared = PrepareKernels(); !prepared.ok()) return prepared;
  KernelArgs args;
  args.in = in;
  args.out = *out;
  args.workspace = static_cast<Workspace*>(workspace);
  args.top_p_gates = gates;
  const int grid_rows = std::max(in.num_rows, 1);
  args.vector_logits = in.vocab_size % 4 == 0 && Aligned16(in.logits);
  args.vector_probs = in.vocab_size % 4 == 0 && Aligned16(out->probs);
  const int ctas = DraftSampleCtasPerRow(grid_rows, max_ctas_per_row);
  if (ctas > 1) {
    // Rows that leave SMs idle (a decode step's drafts below a few dozen
    // requests): each row's passes spread over a cluster of SMs instead of one.
    cudaLaunchConfig_t config;
    cudaLaunchAttribute attribute;
    SetSplitLaunch(static_cast<unsigned>(ctas), static_cast<unsigned>(grid_rows), config,
                   attribute);
    config.stream = stream;
    VERDICT_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&config, DraftSampleSplitKernel, args));
    return absl::OkStatus();
  }
  const int threads = grid_rows <= MultiprocessorCount() ? kMaxThreads : kMaxThreads / 2;
  DraftSampleKernel<<<grid_rows, threads, kCandidateBytes, stream>>>(args);
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status ReadDraftSampleError(const DraftSampleOutputs& outputs, cudaStream_t stream) {
  if (outputs.error == nullptr) {
    return absl::InvalidArgumentError("draft sampler: no error record");
  }
  DraftErrorRecord record;
  VERDICT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&record, outputs.error, sizeof(record),
                                               cudaMemcpyDeviceToHost, stream));
  VERDICT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return DraftErrorStatus(record);
}

}  // namespace verdict
