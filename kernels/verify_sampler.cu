// CUDA kernel of the fused verify sampler (semantics: kernels/verify_sampler.h;
// reference: the CPU twin in verify_sampler.cc).
//
// One launch per step. A cluster of `splits` CTAs (Hopper thread block
// clusters) owns one row; CTA rank c owns the mass tiles [c * tiles_per_cta,
// (c + 1) * tiles_per_cta) of the row (verify_internal::kMassTileIds ids
// each). A warp streams one tile at a time into registers: temperature,
// bitmask and finiteness, the tile's maximum and its fixed-point mass
// relative to that maximum, with no barrier inside the stream, so every warp
// keeps its loads in flight. The tiles' (maximum, mass) records and each
// CTA's row partials are exchanged once through distributed shared memory;
// every CTA then combines the same records into the row maximum and mass, and
// makes the row's decision redundantly from the same values, so the CTAs
// agree without further communication. Rows that need more than one pass
// (top-k / top-p selection, a residual sample) read their slices again from
// global memory, mostly from L2 (in steps of at most one CTA per SM, a
// filtered row's CTAs keep their slices' z in shared memory instead,
// KernelArgs::stash); a sample from q reads one tile again (the
// tiles race with their masses first, verify_internal::kTileRaceRow). Top-p
// narrows its threshold with histograms of counts by distance to the row
// maximum, which bound the mass above every bin edge, lists the few
// candidates, and lets the cluster's leader select among them (see
// top_p_on_fine_bins); only rows whose candidates do not fit select on the
// whole row with the per-id radix rounds that top-k also uses. The
// leader CTA writes the row's outputs and bumps a done counter; the CTA that
// completes the last row applies the accepted prefix, the counters and the
// stop mask for the whole step and publishes the error record (a "last
// block" tail, so small steps need exactly one launch). Request-level input checks run in the row CTAs,
// step-level ones on the host before the launch.
//
// Only a row whose earlier rows all accepted draws a sample (a residual or a
// bonus), so a rejected row waits for its request's earlier rows' decisions,
// which each row publishes in the workspace as soon as it has made it (before
// any wait of its own). Clusters take their rows in the order they start (a
// ticket), so every row waited for belongs to a cluster that is already
// running: the wait always ends.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/philox.h"
#include "kernels/sampling_math.h"
#include "kernels/block_scan.cuh"
#include "kernels/shared_sum.cuh"
#include "kernels/top_p_bins.h"
#include "kernels/verify_sampler.h"
#include "kernels/verify_sampler_internal.h"
#include "kernels/verify_sampler_launch.h"

namespace verdict {
namespace {

namespace cg = cooperative_groups;
using namespace sampling_math;  // NOLINT: the arithmetic vocabulary of this file
using verify_internal::ErrorKey;
using verify_internal::kMassTileIds;
using verify_internal::Kept;
using verify_internal::LaunchStatus;
using verify_internal::MinKey;
using verify_internal::RowInfo;
using verify_internal::RowKind;
using verify_internal::RowSetup;
using verify_internal::TileMassAtRowMax;

// CTAs of 256 threads. Steps that fill the GPU keep no row in shared memory,
// so their occupancy is set by registers alone: they run a build
// with at least three CTAs per SM (at most 85 registers a thread), to hide
// the stream's latency; steps of at most one CTA per SM, where occupancy
// buys nothing, run a build with two (128 registers, no spills), whose
// passes after the first keep more loads in flight.
constexpr int kThreads = 256;
constexpr int kCtasPerSm = 3;
constexpr int kSmallStepCtasPerSm = 2;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxSplits = 16;
// Tiles of one CTA; with kMaxSplits CTAs they cover the largest vocabulary.
constexpr int kMaxTilesPerCta = 512;
static_assert(int64_t{kMaxSplits} * kMaxTilesPerCta * kMassTileIds >= kMaxVocabSize,
              "a row must fit one cluster");
// Tiles a CTA aims for (128 KiB of float32 logits): CTAs of a row stream
// their slices at the same time, so a slice this short is still in L2 when
// its row's race reads it again.
constexpr int kTargetTilesPerCta = 32;
// The most tiles a CTA keeps in its stash (KernelArgs::stash): 64 KiB of z,
// so that two CTAs of the small-step build still fit an SM with their
// static shared memory; it covers one CTA's slice of a row split over 15
// CTAs up to V = 245760.
constexpr int kMaxStashTiles = 16;
// Ids a top-k row's candidate list holds (per CTA; the bucket round checks
// that the whole cluster's candidates fit one CTA's list, so any split fits).
constexpr int kListCapacity = 2048;
// verify_internal::SetTargetTilesPerCta's value (0: kTargetTilesPerCta).
std::atomic<int32_t> target_tiles_override{0};
// verify_internal::SetSliceStash(false): no launch keeps a stash.
std::atomic<bool> stash_disabled{false};
// A lane's part of a tile: kTileGroups groups of four consecutive ids, the
// warp's groups 128 ids apart (coalesced 16-byte loads).
constexpr int kTileGroups = kMassTileIds / 128;
constexpr int kTileValues = 4 * kTileGroups;
static_assert(kMassTileIds % 128 == 0, "a tile is whole warp-wide groups");
constexpr int32_t kNoId = 0x7FFFFFFF;

// Phase timing, to find where a launch's time goes. Built with
// VERDICT_VERIFY_PHASE_TRACE (`bazel build --config=verify_phase_trace`),
// the first and the last CTA of every row's cluster read the global timer
// at each phase boundary below and print the times since the row's start
// when the row is done (kernels/bench/verify_phase_trace.py summarises
// them). The times wait in shared memory: a printf at every boundary would
// time printf. In the ordinary build each mark compiles to nothing.
enum VerifyPhase : int {
  kPhaseStart,
  kPhaseStreamed,        // this CTA's first pass over its slice
  kPhaseMerged,          // exchange 1: the row maximum and the tile records
  kPhaseMass,            // the row's mass (and an unfiltered row's tile race)
  kPhaseTopKBucket,      // top-k's bucket round
  kPhaseTopKListed,      // its candidate list
  kPhaseTopKSelected,    // its key rounds
  kPhaseTopKMass,        // the kept mass at its threshold
  kPhaseTopPLevel1,      // top-p's first histogram level
  kPhaseTopPLevel2,      // its second level (flat rows)
  kPhaseTopPListed,      // the mass above the candidates, and their lists
  kPhaseTopPSelected,    // the leader's selection among them
  kPhaseFiltered,        // every filter applied: threshold and kept mass
  kPhaseDecided,         // the accept test
  kPhaseResidualSummed,  // the residual's tile sums (a second pass with p)
  kPhaseResidualRaced,   // their tile race
  kPhaseDrawn,           // every race done
  kPhaseEnd,
  kPhases
};
#if defined(VERDICT_VERIFY_PHASE_TRACE)
__device__ __forceinline__ unsigned long long GlobalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#define VERIFY_PHASE(phase)                                          \
  do {                                                               \
    if (threadIdx.x == 0) phase_times[phase] = GlobalTimerNs();      \
  } while (0)
// One line a CTA (one printf, so that CTAs' lines do not interleave): each
// phase's nanoseconds since the start, -1 where the row did not pass it.
// The format names the phases in the enum's order.
static_assert(kPhases == 18, "PrintPhases prints every phase after kPhaseStart");
__device__ void PrintPhases(const unsigned long long* times, int32_t row, int rank) {
  long long d[kPhases];
  for (int k = 0; k < kPhases; ++k) {
    d[k] = times[k] != 0 ? static_cast<long long>(times[k] - times[kPhaseStart]) : -1;
  }
  printf("verify_phase row %d rank %d streamed %lld merged %lld mass %lld top_k_bucket %lld "
         "top_k_listed %lld top_k_selected %lld top_k_mass %lld top_p_level1 %lld "
         "top_p_level2 %lld top_p_listed %lld top_p_selected %lld filtered %lld decided %lld "
         "residual_summed %lld residual_raced %lld drawn %lld end %lld\n",
         row, rank, d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12],
         d[13], d[14], d[15], d[16], d[17]);
}
#else
#define VERIFY_PHASE(phase) \
  do {                      \
  } while (0)
#endif

// Left zeroed between launches: the done counter, the next row ticket, the
// complement of the smallest row-level error key (atomicMax of ~key; 0 =
// none), and from kRowStateOffset one word per row: 0 until the row has
// decided, then kRowAccepted or kRowBlocked.
struct alignas(8) Workspace {
  unsigned int done;
  unsigned int ticket;
  unsigned long long error_acc;
};
constexpr int64_t kRowStateOffset = 64;
static_assert(sizeof(Workspace) <= kRowStateOffset, "workspace header too large");
static_assert(VerifyWorkspaceBytes(1) == kRowStateOffset + 4, "workspace layout");
constexpr uint32_t kRowAccepted = 1;  // a verify row that accepted its draft
constexpr uint32_t kRowBlocked = 2;   // anything else (rejected, bonus, failed)

struct KernelArgs {
  VerifyInputs in;
  VerifyOutputs out;
  float alpha;
  int32_t splits;
  int32_t tiles_per_cta;  // at most kMaxTilesPerCta
  int32_t grid_rows;      // max(total_q, 1)
  bool vector_logits;
  bool vector_probs;
  // A step smaller than the GPU: a sampled verify row asks L2 for its CTA's
  // slice of the draft's p at the start, so that the residual's pass (the
  // rejected row's second pass) finds it there instead of in HBM.
  bool prefetch_probs;
  // A step of at most one CTA per SM whose slices fit shared memory: the
  // first pass of a row with top-k, top-p or min-p keeps each CTA's z (after
  // temperature and bitmask, -inf past the vocabulary) in its stash, and
  // every later pass over the slice (the selections, the kept masses, the
  // residual) reads it there instead of from L2, whose latency those passes
  // cannot hide with one CTA an SM.
  bool stash;
};

// One mass tile of the first pass: its kept maximum (+0 for a zero maximum,
// -inf if it keeps nothing) and its fixed-point mass relative to it.
struct TileRecord {
  float max;
  unsigned long long sum;
};

// The kernel's dynamic shared memory, by byte offset, for `tiles` tiles per
// CTA: TileRecord[tiles], then kept_tile_mass and list_tile_sum (uint64
// each), list_tile_key (uint32), and last the sparse draft's bitmap (one
// bit per id of a CTA; sparse launches only).
struct DynamicLayout {
  __host__ __device__ constexpr explicit DynamicLayout(int64_t tiles)
      : kept_tile_mass(tiles * 16),
        list_tile_sum(kept_tile_mass + tiles * 8),
        list_tile_key(list_tile_sum + tiles * 8),
        listed((list_tile_key + tiles * 4 + 15) / 16 * 16) {}
  __host__ __device__ constexpr int64_t Bytes(int64_t tiles, bool sparse) const {
    return listed + (sparse ? tiles * kMassTileIds / 8 : 0);
  }
  // The stash (KernelArgs::stash) follows: z of every id of the CTA, as
  // float4 groups in id order (group g holds local ids 4g .. 4g + 3).
  __host__ __device__ constexpr int64_t StashOffset(int64_t tiles, bool sparse) const {
    return (Bytes(tiles, sparse) + 15) / 16 * 16;
  }
  __host__ __device__ constexpr int64_t BytesWithStash(int64_t tiles, bool sparse) const {
    return StashOffset(tiles, sparse) + tiles * kMassTileIds * 4;
  }
  int64_t kept_tile_mass;
  int64_t list_tile_sum;
  int64_t list_tile_key;
  int64_t listed;
};
static_assert(sizeof(TileRecord) == 16, "the layout's record size");

// Per-CTA partials that the other CTAs of the cluster read (distributed
// shared memory). Each exchange has its own slot, so one cluster barrier per
// exchange suffices; the radix histograms alternate between two buffers.
struct ExchangeSlots {
  int32_t row;  // the leader's ticket
  float max_z;
  int32_t argmax;
  int32_t allowed;
  int32_t non_finite;
  // One slot per mass exchange of a row: min-p's kept mass, then top-p's
  // mass above its candidates and its kept mass.
  unsigned long long mass[3];
  uint32_t hist_count[2][256];
  unsigned long long hist_mass[2][256];
  float race_key[2];
  int32_t race_id[2];
  int32_t bad_p[2];
  // Top-p on fine bins: the leader's candidate bins, their ids, and the
  // threshold it selected.
  int32_t fine_first;
  int32_t fine_last;
  unsigned long long fine_count;
  unsigned long long fine_above;  // this CTA's exact mass above a second level
  float fine_threshold;
};

// Values every thread of the CTA reads after a barrier.
struct Broadcast {
  int32_t row;
  int32_t request;
  RowInfo info;
  int32_t mask;
  int32_t masks;
  bool skip;
  // Setup (RowSetup has constructors, so shared memory holds its fields).
  bool greedy;
  float inv_temperature;
  int32_t top_k;
  bool stash_row;  // the first pass fills this CTA's stash (KernelArgs::stash)
  float top_p;
  float min_p;
  unsigned long long seed;
  long long position;
  int32_t draft;
  int32_t golden;
  float p_draft;
  unsigned long long error_key;
  // Combined row values.
  float row_max;
  int32_t argmax;
  int32_t allowed;
  int32_t non_finite;
  unsigned long long mass;
  uint32_t prefix;
  int32_t bucket;  // the value bucket a selection narrowed to
  int32_t fine_first;  // top-p's candidate fine bins
  int32_t fine_last;
  float fine_threshold;
  uint32_t remaining;
  unsigned long long mass_above;
  int32_t mode;  // 0: decided; 1: residual race; 2: race over q
  bool raw;
  int32_t race_id;
  int32_t q_tile;  // the winning tile of a race over all of q (see the mass)
  int32_t bad_p;
  bool is_last;
  unsigned long long final_key;
};

struct Scratch {
  float f[kWarps];
  int32_t i[kWarps];
  int32_t j[kWarps];
  int32_t k[kWarps];
  unsigned long long u[kWarps];
  double lo[kWarps];
  double hi[kWarps];
  uint32_t bins[256];
  unsigned long long bin_mass[256];
  int32_t counters[2][kMaxNextn];
};

__device__ __forceinline__ int Lane() { return threadIdx.x & 31; }
__device__ __forceinline__ int Warp() { return threadIdx.x >> 5; }

// (value, id) with the larger value winning, ties to the lower id.
__device__ __forceinline__ bool MaxBeats(float v, int32_t id, float best, int32_t best_id) {
  return v > best || (v == best && id < best_id);
}

// Warp reductions: every lane holds the result.
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}
__device__ __forceinline__ int32_t WarpMin(int32_t v) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}
__device__ __forceinline__ int32_t WarpSum(int32_t v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}
__device__ __forceinline__ unsigned long long WarpSumU64(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// The largest (value, id) over a warp by MaxBeats: every lane holds it.
__device__ __forceinline__ void WarpMaxBest(float* v, int32_t* id) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xFFFFFFFFu, *v, o);
    const int32_t oid = __shfl_xor_sync(0xFFFFFFFFu, *id, o);
    if (MaxBeats(ov, oid, *v, *id)) {
      *v = ov;
      *id = oid;
    }
  }
}

// The race's best (key, id) over a warp: every lane holds it.
__device__ __forceinline__ void WarpRaceBest(float* key, int32_t* id) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ok = __shfl_xor_sync(0xFFFFFFFFu, *key, o);
    const int32_t oid = __shfl_xor_sync(0xFFFFFFFFu, *id, o);
    if (RaceBeats(ok, oid, *key, *id)) {
      *key = ok;
      *id = oid;
    }
  }
}

// Block reductions; the result is valid in thread 0. They end with a
// barrier so the scratch can be reused at once.
__device__ void BlockRaceBest(float* key, int32_t* id, Scratch& s) {
  WarpRaceBest(key, id);
  if (Lane() == 0) {
    s.f[Warp()] = *key;
    s.i[Warp()] = *id;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) {
      if (RaceBeats(s.f[w], s.i[w], *key, *id)) {
        *key = s.f[w];
        *id = s.i[w];
      }
    }
  }
  __syncthreads();
}

__device__ int32_t BlockMinInt(int32_t v, Scratch& s) {
  v = WarpMin(v);
  if (Lane() == 0) s.j[Warp()] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) v = min(v, s.j[w]);
  }
  __syncthreads();
  return v;
}

// The OR of `v` over the CTA, in every thread.
__device__ uint32_t BlockOr(uint32_t v, Scratch& s) {
  v = __reduce_or_sync(0xFFFFFFFFu, v);
  if (Lane() == 0) s.j[Warp()] = static_cast<int32_t>(v);
  __syncthreads();
  uint32_t all = 0;
  for (int w = 0; w < kWarps; ++w) all |= static_cast<uint32_t>(s.j[w]);
  __syncthreads();
  return all;
}

__device__ unsigned long long BlockSumU64(unsigned long long v, Scratch& s) {
  v = WarpSumU64(v);
  if (Lane() == 0) s.u[Warp()] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) v += s.u[w];
  }
  __syncthreads();
  return v;
}

__device__ void ReportError(Workspace* ws, uint64_t key) {
  atomicMax(&ws->error_acc, ~static_cast<unsigned long long>(key));
}

__device__ __forceinline__ uint32_t* RowStates(void* workspace) {
  return reinterpret_cast<uint32_t*>(static_cast<char*>(workspace) + kRowStateOffset);
}

__device__ __forceinline__ void PublishRow(void* workspace, int32_t row, uint32_t state) {
  *reinterpret_cast<volatile uint32_t*>(RowStates(workspace) + row) = state;
}

// Whether rows first_row .. row - 1 all accepted their drafts; waits for
// each decision (nearest first: one rejection settles it).
__device__ bool EarlierRowsAccepted(void* workspace, int32_t first_row, int32_t row) {
  const volatile uint32_t* states = RowStates(workspace);
  for (int32_t r = row - 1; r >= first_row; --r) {
    uint32_t state;
    while ((state = states[r]) == 0) __nanosleep(64);
    if (state != kRowAccepted) return false;
  }
  return true;
}

// The request owning `row`: a 32-ary search by one warp (three dependent
// loads for 32K requests instead of fifteen).
__device__ int32_t FindRequestWarp(const VerifyInputs& in, int32_t row) {
  int32_t lo = 0, hi = in.num_requests;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const int32_t step = (hi - lo + 31) / 32;
    const int32_t idx = lo + Lane() * step;
    const bool le = idx < hi && in.first_token_positions[idx] <= row;
    const unsigned ball = __ballot_sync(0xFFFFFFFFu, le);
    if (ball == 0) return -1;
    lo += (31 - __clz(ball)) * step;
    hi = min(hi, lo + step);
  }
  if (hi - lo == 1 && in.first_token_positions[lo] <= row) return lo;
  return -1;
}

__device__ __forceinline__ uint32_t KeyOf(float z) { return OrderKey(FAdd(z, 0.0f)); }

// A selection's first digit: z's distance to the row maximum in steps of
// 1/8 (bucket 0 holds the maximum), everything 31.875 or more below it in
// bucket 255. Monotone in z, so the buckets split the values in order,
// ties in one bucket.
__device__ __forceinline__ uint32_t ValueBucket(float z, float row_max) {
  const float d = FSub(row_max, z);
  return d < 31.875f ? static_cast<uint32_t>(FMul(d, 8.0f)) : 255u;
}

// Top-p's histograms of counts by distance to the row maximum
// (kernels/top_p_bins.h). A second level, when the first leaves too many
// candidates, splits the first level's candidate bins into up to kFineBins
// finer ones.
using top_p_bins::EdgeExp;
using top_p_bins::FirstLevelBin;
using top_p_bins::kFineBins;
using top_p_bins::kFirstLevelScale;
using top_p_bins::ScaledDistance;
using top_p_bins::WeightAbove;
using top_p_bins::WeightBelow;
constexpr int kFineBinsPerThread = kFineBins / 256;

// Exclusive prefix sum of one 64-bit integer over the CTA's threads.
__device__ unsigned long long BlockExclusiveScanU64(unsigned long long v, Scratch& s) {
  unsigned long long inclusive = v;
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long other = __shfl_up_sync(0xFFFFFFFFu, inclusive, o);
    if (Lane() >= o) inclusive += other;
  }
  if (Lane() == 31) s.u[Warp()] = inclusive;
  __syncthreads();
  unsigned long long base = 0;
  for (int w = 0; w < Warp(); ++w) base += s.u[w];
  __syncthreads();
  return base + inclusive - v;
}

// The selections' walks over 256 bins in the order of decreasing values,
// one position a thread (thread p at position p), with a CTA-wide scan
// instead of one thread's serial walk. Every thread gets the result.
//
// Top-k: the first position whose count, added to the counts before it,
// reaches `need` (the last position if none before it does), and in
// *before the counts before it.
__device__ int WalkToCount(uint32_t count, uint32_t need, Scratch& s, uint32_t* before) {
  __shared__ int chosen_position;
  __shared__ uint32_t chosen_before;
  static_assert(kThreads == 256, "one thread a bin");
  const int tid = threadIdx.x;
  const uint32_t mine = static_cast<uint32_t>(BlockExclusiveScanU64(count, s));
  const bool reaches = tid == 255 || mine + count >= need;
  const int position = BlockMinInt(reaches ? tid : 255, s);
  if (tid == 0) chosen_position = position;
  __syncthreads();
  if (tid == chosen_position) chosen_before = mine;
  __syncthreads();
  *before = chosen_before;
  return chosen_position;
}

// Top-p: the last non-empty position whose mass before it (starting from
// `above`) is below `limit`, or -1; its mass before it in *before. The
// masses before the positions grow along the walk, so this is where a
// serial walk that stops at the first non-empty bin at or over the limit
// would stop.
__device__ int WalkToMass(bool non_empty, unsigned long long mass, unsigned long long above,
                          double limit, Scratch& s, unsigned long long* before) {
  __shared__ int chosen_position;
  __shared__ unsigned long long chosen_before;
  static_assert(kThreads == 256, "one thread a bin");
  const int tid = threadIdx.x;
  const unsigned long long mine = above + BlockExclusiveScanU64(mass, s);
  const bool qualifies = non_empty && FixedToDouble(mine) < limit;
  const int position = -BlockMinInt(qualifies ? -tid : 1, s);
  if (tid == 0) chosen_position = position;
  __syncthreads();
  if (tid == chosen_position) chosen_before = mine;
  __syncthreads();
  *before = chosen_before;
  return chosen_position;
}

// The cluster leader's top-p selection over every CTA's candidate list (the
// ids of the threshold's candidate bins): the smallest listed value v with
// mass_above + mass(listed z > v) < limit, weights relative to the row
// maximum, ties kept together. The lists' values are first gathered into
// `gathered` (kListCapacity floats of the leader's shared memory); then radix
// rounds on digits of up to eight bits of the order keys each bin the
// candidates that match the digits found so far and walk the bins from the
// largest values down (WalkToMass). The candidates lie in a few narrow bins,
// so their keys share their high bits: the rounds start below the highest
// bit where two of them differ (rounds on the shared bits sent every
// candidate to one bin, whose atomics serialised). The caller's bounds
// guarantee mass_above < limit, so the largest candidate always qualifies.
// Every CTA of the cluster must have finished its list (a cluster barrier)
// before the call.
__device__ float SelectTopPOnLists(cg::cluster_group& cluster, int splits, float* list_z,
                                   int32_t* list_size, float* gathered, float row_max,
                                   double limit, unsigned long long mass_above, Scratch& s) {
  __shared__ int32_t offsets[kMaxSplits + 1];
  const int tid = threadIdx.x;
  if (tid == 0) {
    offsets[0] = 0;
    for (int c = 0; c < splits; ++c) offsets[c + 1] = offsets[c] + *cluster.map_shared_rank(list_size, c);
  }
  __syncthreads();
  for (int c = 0; c < splits; ++c) {
    const float* remote = cluster.map_shared_rank(list_z, c);
    const int32_t n = offsets[c + 1] - offsets[c];
    for (int32_t i = tid; i < n; i += kThreads) gathered[offsets[c] + i] = remote[i];
  }
  const int32_t total = offsets[splits];
  __syncthreads();
  // Bits [0, top) of the keys decide; above them every candidate has the
  // first one's bits (with at most one distinct key, no round is needed).
  const uint32_t first_key = total > 0 ? KeyOf(gathered[0]) : 0u;
  uint32_t differ = 0;
  for (int32_t i = tid; i < total; i += kThreads) differ |= KeyOf(gathered[i]) ^ first_key;
  const int top = 32 - __clz(BlockOr(differ, s));
  uint32_t prefix = top >= 32 ? 0u : first_key & ~((1u << top) - 1u);
  unsigned long long above = mass_above;
  for (int digit_end = top; digit_end > 0; digit_end -= 8) {
    // This round's digit: bits [shift, digit_end), at most eight.
    const int shift = max(digit_end - 8, 0);
    const uint32_t high_mask = digit_end >= 32 ? 0u : (0xFFFFFFFFu << digit_end);
    const uint32_t digit_mask = (1u << (digit_end - shift)) - 1u;
    for (int i = tid; i < 256; i += kThreads) {
      s.bins[i] = 0;
      s.bin_mass[i] = 0;
    }
    __syncthreads();
    for (int32_t i = tid; i < total; i += kThreads) {
      const float z = gathered[i];
      const uint32_t key = KeyOf(z);
      if ((key & high_mask) != (prefix & high_mask)) continue;
      const uint32_t bin = (key >> shift) & digit_mask;
      const unsigned long long w = FixedExpNonPositive(FSub(z, row_max));
      if (w > 0) {
        SharedAddU64(&s.bin_mass[bin], w);
      } else {
        atomicAdd(&s.bins[bin], 1u);  // only whether the bin is empty matters
      }
    }
    __syncthreads();
    // Walk position p (thread p) is bin 255 - p: values decrease along it.
    // The last non-empty bin whose mass above is under the limit (the
    // first non-empty one always is).
    const uint32_t bin = 255u - static_cast<uint32_t>(tid);
    const unsigned long long mass = s.bin_mass[bin];
    unsigned long long before;
    const int position = WalkToMass(mass != 0 || s.bins[bin] != 0, mass, above, limit, s, &before);
    if (position >= 0) {  // always: kept should no bin qualify (it cannot)
      prefix |= (255u - static_cast<uint32_t>(position)) << shift;
      above = before;
    }
  }
  return FromOrderKey(prefix);
}

// Logits are read-only for the whole launch and loaded with L2's default
// policy (not evict-first): the passes after the first, top-k / top-p and a
// final row's race, read the CTA's slice again moments later.
template <typename LogitT>
__device__ __forceinline__ float LoadOne(const LogitT* p);
template <>
__device__ __forceinline__ float LoadOne<float>(const float* p) {
  return __ldg(p);
}
template <>
__device__ __forceinline__ float LoadOne<uint16_t>(const uint16_t* p) {
  return BFloat16ToFloat(__ldg(reinterpret_cast<const unsigned short*>(p)));
}

// Four bfloat16 logits packed in two words, as floats (exact).
__device__ __forceinline__ float4 UnpackBFloat16x4(uint2 w) {
  return make_float4(BitsToFloat(w.x << 16), BitsToFloat(w.x & 0xFFFF0000u),
                     BitsToFloat(w.y << 16), BitsToFloat(w.y & 0xFFFF0000u));
}

// Four consecutive logits starting at p (aligned when `vec`).
template <typename LogitT>
__device__ __forceinline__ float4 LoadFour(const LogitT* p, bool vec);
template <>
__device__ __forceinline__ float4 LoadFour<float>(const float* p, bool vec) {
  if (vec) return __ldg(reinterpret_cast<const float4*>(p));
  return make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
}
template <>
__device__ __forceinline__ float4 LoadFour<uint16_t>(const uint16_t* p, bool vec) {
  if (vec) return UnpackBFloat16x4(__ldg(reinterpret_cast<const uint2*>(p)));
  return make_float4(LoadOne(p), LoadOne(p + 1), LoadOne(p + 2), LoadOne(p + 3));
}

// Four consecutive logits from an aligned p, cached in L2 only: for the
// passes after the first, whose slices L2 still holds.
template <typename LogitT>
__device__ __forceinline__ float4 LoadFourL2(const LogitT* p);
template <>
__device__ __forceinline__ float4 LoadFourL2<float>(const float* p) {
  return __ldcg(reinterpret_cast<const float4*>(p));
}
template <>
__device__ __forceinline__ float4 LoadFourL2<uint16_t>(const uint16_t* p) {
  return UnpackBFloat16x4(__ldcg(reinterpret_cast<const uint2*>(p)));
}

__device__ __forceinline__ float Get(const float4& v, int j) {
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

// How a row turns logits into z: temperature (skipped at 1, where it would
// only turn -0 into +0, which no decision sees) and its bitmask (-1: none).
struct RowZ {
  float inv_temperature;
  bool scale;
  int32_t mask;
};

// z of four consecutive ids from `id` (a multiple of 4); ids past the
// vocabulary and ids the bitmask forbids are -inf. For rows whose logits
// passed the finiteness check (every pass after the first).
template <typename LogitT>
__device__ __forceinline__ float4 LoadZGroup(const KernelArgs& a, const LogitT* row_logits,
                                             int32_t id, const RowZ& rz) {
  const VerifyInputs& in = a.in;
  const int32_t v_size = in.vocab_size;
  float t[4];
  if (id + 3 < v_size) {
    const float4 f = LoadFour(row_logits + id, a.vector_logits);
    t[0] = f.x;
    t[1] = f.y;
    t[2] = f.z;
    t[3] = f.w;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) t[j] = id + j < v_size ? LoadOne(row_logits + id + j) : kNegInf;
  }
  // The four ids share one bitmask word (id is a multiple of 4).
  const uint32_t word =
      rz.mask >= 0 && id < v_size
          ? in.bitmask_bits[static_cast<int64_t>(rz.mask) * in.bitmask_words + (id >> 5)]
          : ~0u;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float z = rz.scale ? ScaleLogit(t[j], rz.inv_temperature) : t[j];
    if (!((word >> ((id + j) & 31)) & 1u)) z = kNegInf;
    t[j] = z;
  }
  return make_float4(t[0], t[1], t[2], t[3]);
}

// z, in place, of kCount loaded groups of four ids, id0 + 128 k .. + 3 for
// group k, all inside the vocabulary (a whole tile's): temperature, then
// the bitmask, each one branch for all groups, taken after the groups'
// loads were issued, so that they are in flight together.
template <int kCount>
__device__ __forceinline__ void FormZ(const VerifyInputs& in, float4 (&z4)[kCount], int32_t id0,
                                      const RowZ& rz) {
  if (rz.scale) {
#pragma unroll
    for (int k = 0; k < kCount; ++k) {
      z4[k] = make_float4(ScaleLogit(z4[k].x, rz.inv_temperature),
                          ScaleLogit(z4[k].y, rz.inv_temperature),
                          ScaleLogit(z4[k].z, rz.inv_temperature),
                          ScaleLogit(z4[k].w, rz.inv_temperature));
    }
  }
  if (rz.mask >= 0) {
    const uint32_t* bits = in.bitmask_bits + static_cast<int64_t>(rz.mask) * in.bitmask_words;
    uint32_t words[kCount];
#pragma unroll
    for (int k = 0; k < kCount; ++k) words[k] = __ldg(bits + ((id0 + 128 * k) >> 5));
#pragma unroll
    for (int k = 0; k < kCount; ++k) {
      const int shift = (id0 + 128 * k) & 31;  // the group's four ids share the word
      if (!((words[k] >> shift) & 1u)) z4[k].x = kNegInf;
      if (!((words[k] >> (shift + 1)) & 1u)) z4[k].y = kNegInf;
      if (!((words[k] >> (shift + 2)) & 1u)) z4[k].z = kNegInf;
      if (!((words[k] >> (shift + 3)) & 1u)) z4[k].w = kNegInf;
    }
  }
}

// The groups of the CTA's local tile t in its stash (KernelArgs::stash),
// kMassTileIds / 4 of them in id order; null without a stash.
template <typename Float4>  // float4 or const float4
__device__ __forceinline__ Float4* StashTile(Float4* stash, int32_t t) {
  return stash != nullptr ? stash + t * (kMassTileIds / 4) : nullptr;
}

// Streams a CTA's slice of `tiles` mass tiles from `first_tile`, a tile per
// warp: each lane loads its kTileGroups groups before visiting any of its
// values (the loads in flight together, as in StreamTile; from the CTA's
// `stash` when the launch keeps one, else from global memory), then
// visit(tile, id, z) runs for each value in lockstep across the warp (so a
// visitor may vote with __ballot_sync), ids past the vocabulary included
// (their z is -inf). begin_tile(tile) and end_tile(tile) run around a tile's
// values, for per-tile sums.
template <typename LogitT, typename BeginTile, typename Visit, typename EndTile>
__device__ __forceinline__ void StreamSliceValues(const KernelArgs& a, const LogitT* row_logits,
                                                  const float4* stash, const RowZ& rz,
                                                  int32_t first_tile, int32_t tiles,
                                                  BeginTile&& begin_tile, Visit&& visit,
                                                  EndTile&& end_tile) {
  for (int32_t tile = Warp(); tile < tiles; tile += kWarps) {
    const int32_t base = (first_tile + tile) * kMassTileIds + 4 * Lane();
    begin_tile(tile);
    float4 z4[kTileGroups];
    if (stash != nullptr) {
#pragma unroll
      for (int k = 0; k < kTileGroups; ++k) z4[k] = StashTile(stash, tile)[32 * k + Lane()];
    } else if ((first_tile + tile + 1) * kMassTileIds <= a.in.vocab_size) {
      // Every load of the tile issued before the first is used (LoadZGroup's
      // branches for the row's last tile would make each wait for the one
      // before).
#pragma unroll
      for (int k = 0; k < kTileGroups; ++k) z4[k] = LoadFour(row_logits + base + 128 * k, a.vector_logits);
      FormZ(a.in, z4, base, rz);
    } else {
#pragma unroll
      for (int k = 0; k < kTileGroups; ++k) z4[k] = LoadZGroup(a, row_logits, base + 128 * k, rz);
    }
#pragma unroll
    for (int k = 0; k < kTileGroups; ++k) {
#pragma unroll
      for (int q = 0; q < 4; ++q) visit(tile, base + 128 * k + q, Get(z4[k], q));
    }
    end_tile(tile);
  }
}

// StreamSliceValues without per-tile hooks.
template <typename LogitT, typename Visit>
__device__ __forceinline__ void StreamSliceValues(const KernelArgs& a, const LogitT* row_logits,
                                                  const float4* stash, const RowZ& rz,
                                                  int32_t first_tile, int32_t tiles,
                                                  Visit&& visit) {
  StreamSliceValues(
      a, row_logits, stash, rz, first_tile, tiles, [](int32_t) {}, visit, [](int32_t) {});
}

// What one warp learns from one mass tile (every lane holds the result).
struct TileResult {
  float max;               // kept maximum, +0 for zero, -inf if nothing is kept
  unsigned long long sum;  // fixed-point mass of the kept ids relative to max
  int32_t argmax;          // lowest id at max (find_argmax), else kNoId
  int32_t allowed;         // ids with z > -inf before the threshold (count_allowed)
  int32_t bad;             // lowest id whose z is not finite (check_finite), else kNoId
};

// A tile's z from global memory for StreamTile, lane l's value 4k + j being
// id base + 128k + j (base = tile * kMassTileIds + 4l): temperature, the
// finiteness check (the lowest bad id into r->bad), -inf past the vocabulary
// and for ids the bitmask forbids.
template <typename LogitT>
__device__ __forceinline__ void LoadTileZ(const KernelArgs& a, const LogitT* row_logits,
                                          int32_t base, bool full, const RowZ& rz,
                                          bool check_finite, float (&z)[kTileValues],
                                          TileResult* r) {
  const VerifyInputs& in = a.in;
  const int32_t v_size = in.vocab_size;
  if (full) {
#pragma unroll
    for (int k = 0; k < kTileGroups; ++k) {
      const float4 f = LoadFour(row_logits + base + 128 * k, a.vector_logits);
      z[4 * k] = f.x;
      z[4 * k + 1] = f.y;
      z[4 * k + 2] = f.z;
      z[4 * k + 3] = f.w;
    }
  } else {
    // The row's last tile: ids past the vocabulary read as 0 (finite) and
    // become -inf after the finiteness check.
#pragma unroll
    for (int k = 0; k < kTileGroups; ++k) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int32_t id = base + 128 * k + j;
        z[4 * k + j] = id < v_size ? LoadOne(row_logits + id) : 0.0f;
      }
    }
  }
  if (rz.scale) {
#pragma unroll
    for (int i = 0; i < kTileValues; ++i) z[i] = ScaleLogit(z[i], rz.inv_temperature);
  }
  if (check_finite) {
    // z * 0 is NaN exactly when z is infinite or NaN: one instruction an id,
    // and the lowest bad id is looked for only in a tile that has one.
    float poison = 0.0f;
#pragma unroll
    for (int i = 0; i < kTileValues; ++i) poison = fmaf(z[i], 0.0f, poison);
    int32_t bad = kNoId;
    if (poison != poison) {
#pragma unroll
      for (int i = kTileValues - 1; i >= 0; --i) {
        if (!IsFinite(z[i])) bad = base + 128 * (i / 4) + (i % 4);
      }
    }
    r->bad = WarpMin(bad);
  }
  if (!full) {
#pragma unroll
    for (int i = 0; i < kTileValues; ++i) {
      if (base + 128 * (i / 4) + (i % 4) >= v_size) z[i] = kNegInf;
    }
  }
  if (rz.mask >= 0) {
    const uint32_t* bits = in.bitmask_bits + static_cast<int64_t>(rz.mask) * in.bitmask_words;
#pragma unroll
    for (int k = 0; k < kTileGroups; ++k) {
      const int32_t id = base + 128 * k;  // its four ids share a word
      const uint32_t word = id < v_size ? bits[id >> 5] : 0u;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (!((word >> ((id + j) & 31)) & 1u)) z[4 * k + j] = kNegInf;
      }
    }
  }
}

// One warp streams mass tile `tile` of the row: each lane loads its
// kTileValues ids (all loads issued before any arithmetic), then the tile's
// maximum and mass over the ids kept at `threshold` (kNegInf: every allowed
// id). Lane l's value 4k + j is id tile * kMassTileIds + 128k + 4l + j, so a
// lane's values run in id order. With `stashed` (the tile's groups in the
// CTA's stash, written by the first pass) the tile's z come from there;
// with `stash_to` the first pass writes them there.
template <typename LogitT>
__device__ TileResult StreamTile(const KernelArgs& a, const LogitT* row_logits, int32_t tile,
                                 const RowZ& rz, float threshold, bool find_argmax,
                                 bool count_allowed, bool check_finite,
                                 const float4* stashed = nullptr, float4* stash_to = nullptr) {
  const int32_t v_size = a.in.vocab_size;
  const int32_t base = tile * kMassTileIds + 4 * Lane();
  const bool full = (tile + 1) * kMassTileIds <= v_size;
  float z[kTileValues];
  TileResult r{kNegInf, 0, kNoId, 0, kNoId};
  if (stashed != nullptr) {
#pragma unroll
    for (int k = 0; k < kTileGroups; ++k) {
      const float4 f = stashed[32 * k + Lane()];
      z[4 * k] = f.x;
      z[4 * k + 1] = f.y;
      z[4 * k + 2] = f.z;
      z[4 * k + 3] = f.w;
    }
  } else {
    LoadTileZ(a, row_logits, base, full, rz, check_finite, z, &r);
    if (stash_to != nullptr) {
#pragma unroll
      for (int k = 0; k < kTileGroups; ++k) {
        stash_to[32 * k + Lane()] = make_float4(z[4 * k], z[4 * k + 1], z[4 * k + 2], z[4 * k + 3]);
      }
    }
  }
  if (count_allowed) {
    int32_t allowed = 0;
#pragma unroll
    for (int i = 0; i < kTileValues; ++i) allowed += z[i] > kNegInf ? 1 : 0;
    r.allowed = WarpSum(allowed);
  }
  if (threshold > kNegInf) {
#pragma unroll
    for (int i = 0; i < kTileValues; ++i) z[i] = z[i] >= threshold ? z[i] : kNegInf;
  }
  float m = kNegInf;
#pragma unroll
  for (int i = 0; i < kTileValues; ++i) m = fmaxf(m, z[i]);
  m = FAdd(WarpMax(m), 0.0f);  // -0 becomes +0, as on the CPU
  r.max = m;
  if (m == kNegInf) return r;  // warp-uniform
  // Ids that are not kept hold -inf, whose weight is 0.
  unsigned long long sum = 0;
#pragma unroll
  for (int i = 0; i < kTileValues; ++i) sum += FixedExpNonPositive(FSub(z[i], m));
  r.sum = WarpSumU64(sum);
  if (find_argmax) {
    int32_t arg = kNoId;
#pragma unroll
    for (int i = kTileValues - 1; i >= 0; --i) {
      if (z[i] == m) arg = base + 128 * (i / 4) + (i % 4);
    }
    r.argmax = WarpMin(arg);
  }
  return r;
}

template <typename LogitT, int kMinCtasPerSm>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm) VerifySampleKernel(const __grid_constant__ KernelArgs a) {
  // Per-tile arrays and the sparse residual's bitmap, sized by the launch's
  // tiles per CTA (DynamicSmemBytes): the tiles' first-pass records, their
  // kept masses at the row maximum (the first level of a race over q), and
  // the selections' per-tile kept sums and maxima (order keys).
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  const DynamicLayout layout(a.tiles_per_cta);
  TileRecord* const records = reinterpret_cast<TileRecord*>(dynamic_smem);
  unsigned long long* const kept_tile_mass =
      reinterpret_cast<unsigned long long*>(dynamic_smem + layout.kept_tile_mass);
  unsigned long long* const list_tile_sum =
      reinterpret_cast<unsigned long long*>(dynamic_smem + layout.list_tile_sum);
  uint32_t* const list_tile_key = reinterpret_cast<uint32_t*>(dynamic_smem + layout.list_tile_key);
  // [tiles_per_cta * kMassTileIds / 32]: the sparse draft's listed ids.
  uint32_t* const listed = reinterpret_cast<uint32_t*>(dynamic_smem + layout.listed);
  // [tiles_per_cta * kMassTileIds / 4]: this CTA's z by group of four ids,
  // when the launch keeps a stash (KernelArgs::stash) and the row selects on
  // its slice (set with the row's sampling below); else null.
  float4* stash = nullptr;
  __shared__ ExchangeSlots slots;
  __shared__ Broadcast b;
  __shared__ Scratch scratch;
  __shared__ int32_t next_tile;  // the stream's tile counter
  // Top-k's candidate list (ids near the row maximum).
  __shared__ float list_z[kListCapacity];
  __shared__ int32_t list_id[kListCapacity];
  __shared__ int32_t list_size;
  // Top-p's histogram of this CTA's kept ids by distance to the maximum
  // (and the leader's gathered candidates; the tail's staged accepts).
  __shared__ __align__(16) uint32_t fine_hist[kFineBins];
#if defined(VERDICT_VERIFY_PHASE_TRACE)
  __shared__ unsigned long long phase_times[kPhases];
  if (threadIdx.x < kPhases) phase_times[threadIdx.x] = 0;  // before the ticket's barriers
#endif

  cg::cluster_group cluster = cg::this_cluster();
  const VerifyInputs& in = a.in;
  const VerifyOutputs& out = a.out;
  Workspace* ws = static_cast<Workspace*>(out.workspace);
  const int splits = a.splits;
  const int rank = static_cast<int>(cluster.block_rank());
  const bool leader = rank == 0;
  const int tid = threadIdx.x;
  // The row: the leader's ticket, shared with the cluster.
  if (leader && tid == 0) slots.row = static_cast<int32_t>(atomicAdd(&ws->ticket, 1u));
  cluster.sync();
  if (tid == 0) b.row = cluster.map_shared_rank(&slots, 0)->row;
  __syncthreads();
  const int32_t row = b.row;
  VERIFY_PHASE(kPhaseStart);
  const int32_t v_size = in.vocab_size;
  const int32_t tiles = verify_internal::NumMassTiles(v_size);
  const int32_t first_tile = rank * a.tiles_per_cta;
  const int32_t my_tiles = max(0, min(tiles - first_tile, a.tiles_per_cta));
  // This CTA's ids: [c0, c0 + n), whole tiles but for the row's last.
  const int32_t c0 = first_tile * kMassTileIds;
  const int32_t n = max(0, min(v_size - c0, my_tiles * kMassTileIds));
  bool published = false;  // by the leader's thread 0

  // ---- 1. Where the row is (warp 0); skipped rows read nothing. Warp 1 of
  // the leader checks every grid_rows-th request and bitmask (the step-level
  // checks ran on the host), so the tail has no checks left to run.
  if (leader && Warp() == 1) {
    uint64_t key = 0;
    for (int32_t r = row + Lane() * a.grid_rows; r < in.num_requests; r += 32 * a.grid_rows) {
      key = MinKey(key, verify_internal::CheckRequest(in, r));
    }
    for (int32_t m = row + Lane() * a.grid_rows; m < in.num_bitmasks; m += 32 * a.grid_rows) {
      key = MinKey(key, verify_internal::CheckBitmask(in, m));
    }
    unsigned long long smallest = key == 0 ? ~0ull : key;
    for (int o = 16; o > 0; o >>= 1) {
      const unsigned long long other = __shfl_xor_sync(0xFFFFFFFFu, smallest, o);
      smallest = other < smallest ? other : smallest;
    }
    if (Lane() == 0 && smallest != ~0ull) {
      ReportError(ws, smallest);
      __threadfence();
    }
  }
  if (Warp() == 0) {
    const int32_t r = row < in.total_q ? FindRequestWarp(in, row) : -1;
    if (Lane() == 0) {
      b.request = r;
      b.info = row < in.total_q ? verify_internal::LocateRowIn(in, row, r) : verify_internal::UncoveredRow();
      b.skip = b.info.kind == RowKind::kUncovered || b.info.kind == RowKind::kSkipped;
    }
  }
  __syncthreads();
  if (leader && tid == 0 && row < in.total_q) {
    out.row_to_req[row] = b.info.request;
    out.local_step[row] = b.info.local_step;
    out.is_verify[row] = b.info.kind == RowKind::kVerify ? 1 : 0;
    out.raw_accept[row] = 0;
    out.candidate_token_ids[row] = -1;
    out.token_logprobs[row] = 0.0f;
  }
  bool row_done = b.skip;
  const LogitT* row_logits =
      static_cast<const LogitT*>(in.logits) + static_cast<int64_t>(row) * v_size;
  RowZ rz{1.0f, false, -1};

  if (!row_done) {
    // ---- 2. Warp 0: what the stream needs (temperature, top-k, the row's
    // bitmask); the rest of the row's setup follows in warp 0's lane 0 while
    // the other warps already stream.
    if (Warp() == 0) {
      if (Lane() == 0) {
        const verify_internal::RowSampling sampling = verify_internal::SamplingOf(in, b.info.request);
        b.greedy = sampling.greedy;
        b.inv_temperature = sampling.inv_temperature;
        b.top_k = sampling.top_k;
        // Only a filtered row's selections and kept masses pass over its
        // slice often enough for the stash to pay (the residual's pass,
        // bound by p's loads, and a sample's one tile gain nothing).
        b.stash_row = a.stash && !sampling.greedy &&
                      (sampling.top_k > 0 || verify_internal::TopP(in, b.info.request) < 1.0f ||
                       verify_internal::MinP(in, b.info.request) > 0.0f);
        next_tile = 0;
        if (a.prefetch_probs && b.info.kind == RowKind::kVerify && !sampling.greedy && n >= 4) {
          // Row starts are 16-byte aligned (vector_probs), and so is c0.
          const float* p_slice =
              in.draft_probs + b.info.draft_index * int64_t{in.draft_vocab_size} + c0;
          asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p_slice),
                       "r"(static_cast<uint32_t>(n / 4 * 16))
                       : "memory");
        }
      }
      int32_t first = kNoId;
      int32_t count = 0;
      if (in.bitmask_words == (v_size + 31) / 32) {  // else the step check reports it
        for (int32_t m = Lane(); m < in.num_bitmasks; m += 32) {
          if (in.bitmask_request_indices[m] == b.info.request &&
              in.bitmask_steps[m] == b.info.local_step) {
            first = min(first, m);
            ++count;
          }
        }
      }
      first = WarpMin(first);
      count = WarpSum(count);
      if (Lane() == 0) {
        b.mask = first == kNoId ? -1 : first;
        b.masks = count;
      }
    }
    __syncthreads();
    rz = RowZ{b.inv_temperature, b.inv_temperature != 1.0f, b.mask};
    if (b.stash_row) {
      stash = reinterpret_cast<float4*>(
          dynamic_smem + layout.StashOffset(a.tiles_per_cta, in.draft_probs == nullptr));
    }
    const bool find_argmax = b.greedy;
    const bool count_allowed = !b.greedy && b.top_k > 0;
    if (Warp() == 0 && Lane() == 0) {
      // The same function the CPU twin calls (its greedy, temperature and
      // top-k are SamplingOf's, read above).
      const RowSetup s = verify_internal::SetupLocatedRow(in, row, b.info);
      b.top_p = s.top_p;
      b.min_p = s.min_p;
      b.seed = s.seed;
      b.position = s.position;
      b.draft = s.draft;
      b.golden = s.golden;
      b.p_draft = s.p_draft;
      b.error_key = s.error_key;
    }

    // ---- 3. The stream: every tile of this CTA once, its record kept for
    // the mass; per warp the row partials (max and argmax, allowed ids, the
    // lowest non-finite id). Warps take tiles from a counter, so warp 0,
    // which starts late, takes fewer.
    float best = kNegInf;
    int32_t best_id = kNoId;
    int32_t allowed = 0;
    int32_t bad = kNoId;
    for (;;) {
      int32_t t = 0;
      if (Lane() == 0) t = atomicAdd(&next_tile, 1);
      t = __shfl_sync(0xFFFFFFFFu, t, 0);
      if (t >= my_tiles) break;
      const TileResult r =
          StreamTile(a, row_logits, first_tile + t, rz, kNegInf, find_argmax, count_allowed, true,
                     nullptr, StashTile(stash, t));
      if (Lane() == 0) records[t] = TileRecord{r.max, r.sum};
      if (MaxBeats(r.max, r.argmax, best, best_id)) {
        best = r.max;
        best_id = r.argmax;
      }
      allowed += r.allowed;
      bad = min(bad, r.bad);
    }
    if (Lane() == 0) {
      scratch.f[Warp()] = best;
      scratch.i[Warp()] = best_id;
      scratch.j[Warp()] = allowed;
      scratch.k[Warp()] = bad;
    }
    __syncthreads();
    if (tid == 0) {
      for (int w = 1; w < kWarps; ++w) {
        if (MaxBeats(scratch.f[w], scratch.i[w], best, best_id)) {
          best = scratch.f[w];
          best_id = scratch.i[w];
        }
        allowed += scratch.j[w];
        bad = min(bad, scratch.k[w]);
      }
      slots.max_z = best;
      slots.argmax = best_id;
      slots.allowed = allowed;
      slots.non_finite = bad;
    }
    VERIFY_PHASE(kPhaseStreamed);
    cluster.sync();  // exchange 1: row partials and every tile record
    // Warp 0 merges the CTAs' partials, lane c reading CTA c's, so the
    // remote reads overlap (the merges are exact in any order: integer sums,
    // minima, and a maximum with ties to the lower id).
    static_assert(kMaxSplits <= 32, "a lane a CTA");
    if (Warp() == 0) {
      float m = kNegInf;
      int32_t arg = kNoId, allowed_total = 0, nf = kNoId;
      if (Lane() < splits) {
        const ExchangeSlots* rs = cluster.map_shared_rank(&slots, Lane());
        m = rs->max_z;
        arg = rs->argmax;
        allowed_total = rs->allowed;
        nf = rs->non_finite;
      }
      WarpMaxBest(&m, &arg);
      allowed_total = WarpSum(allowed_total);
      nf = WarpMin(nf);
      if (Lane() == 0) {
        b.row_max = m;
        b.argmax = arg;
        b.allowed = allowed_total;
        b.non_finite = nf;
        uint64_t key = b.error_key;
        if (b.masks > 1) {
          key = MinKey(key, ErrorKey(row, VerifyErrorCode::kDuplicateBitmask,
                                     static_cast<uint32_t>(b.masks)));
        }
        if (nf != kNoId) {
          key = MinKey(key, ErrorKey(row, VerifyErrorCode::kNonFiniteLogit,
                                     static_cast<uint32_t>(nf)));
        }
        // No allowed id: the row maximum is -inf (a non-finite logit, the
        // smaller key, is reported instead when there is one).
        if (m == kNegInf) key = MinKey(key, ErrorKey(row, VerifyErrorCode::kNoAllowedToken, 0));
        b.error_key = key;
      }
    }
    __syncthreads();
    VERIFY_PHASE(kPhaseMerged);
    if (b.error_key != 0) {
      if (leader && tid == 0) ReportError(ws, b.error_key);
      row_done = true;
    }
  }

  if (!row_done) {
    const float row_max = b.row_max;
    const bool verify = b.info.kind == RowKind::kVerify;
    float threshold = kNegInf;
    // Whether a filter keeps fewer ids than every allowed one (each then
    // sets a threshold above -inf), and whether the row samples q over every
    // allowed id: not greedy, not verified, no golden id, no filter.
    const float min_p_threshold = MinPThreshold(row_max, b.min_p);
    const bool top_k_on = b.top_k > 0 && b.top_k < b.allowed;
    const bool filtered = top_k_on || b.top_p < 1.0f || min_p_threshold > kNegInf;
    const bool unfiltered_q = !b.greedy && !verify && b.golden < 0 && !filtered;

    // The mass of every allowed id, from all tile records of the cluster
    // (each CTA sums the same records, so all hold the same total). A row
    // that samples q unfiltered also races the tiles with these masses here,
    // the first level of its race: every CTA sees every tile, so each finds
    // the cluster's winner without an exchange.
    {
      unsigned long long local = 0;
      float tile_key = 0.0f;
      int32_t tile_id = kNoId;
      const int32_t slots_total = splits * a.tiles_per_cta;
      for (int32_t idx = tid; idx < slots_total; idx += kThreads) {
        const int c = idx / a.tiles_per_cta;
        const int32_t j = idx - c * a.tiles_per_cta;
        const int32_t tile = c * a.tiles_per_cta + j;
        if (tile >= tiles) continue;
        const TileRecord rec = *cluster.map_shared_rank(&records[j], c);
        const unsigned long long tile_mass = TileMassAtRowMax(rec.sum, rec.max, row_max);
        if (c == rank) kept_tile_mass[j] = tile_mass;
        local += tile_mass;
        if (unfiltered_q && tile_mass != 0) {
          const float key = verify_internal::TileRaceKey(b.seed, b.position, RandomStream::kBonus,
                                                         tile, tile_mass);
          if (RaceBeats(key, tile, tile_key, tile_id)) {
            tile_key = key;
            tile_id = tile;
          }
        }
      }
      local = WarpSumU64(local);
      WarpRaceBest(&tile_key, &tile_id);
      if (Lane() == 0) {
        scratch.u[Warp()] = local;
        scratch.f[Warp()] = tile_key;
        scratch.i[Warp()] = tile_id;
      }
      __syncthreads();
      if (tid == 0) {
        for (int w = 1; w < kWarps; ++w) {
          local += scratch.u[w];
          if (RaceBeats(scratch.f[w], scratch.i[w], tile_key, tile_id)) {
            tile_key = scratch.f[w];
            tile_id = scratch.i[w];
          }
        }
        b.mass = local;
        b.q_tile = tile_id;
      }
      __syncthreads();
    }

    VERIFY_PHASE(kPhaseMass);

    // The mass of the ids kept at threshold t, streamed again tile by tile
    // (top-k / top-p rows), summed over the cluster.
    int exchanges = 0;  // mass slots used
    // The CTAs' partial masses summed over the cluster (every CTA gets the
    // total), through a slot of its own per exchange.
    auto sum_over_cluster = [&](unsigned long long local) -> unsigned long long {
      local = BlockSumU64(local, scratch);
      const int slot = exchanges++;
      if (tid == 0) slots.mass[slot] = local;
      cluster.sync();
      if (Warp() == 0) {
        const unsigned long long part =
            Lane() < splits ? cluster.map_shared_rank(&slots, Lane())->mass[slot] : 0ull;
        const unsigned long long total = WarpSumU64(part);
        if (Lane() == 0) b.mass = total;
      }
      __syncthreads();
      return b.mass;
    };
    auto cluster_kept_mass = [&](float t) -> unsigned long long {
      unsigned long long local = 0;
      for (int32_t tile = Warp(); tile < my_tiles; tile += kWarps) {
        const TileResult r =
            StreamTile(a, row_logits, first_tile + tile, rz, t, false, false, false,
                       StashTile(stash, tile));
        if (Lane() == 0) {
          const unsigned long long tile_mass = TileMassAtRowMax(r.sum, r.max, row_max);
          kept_tile_mass[tile] = tile_mass;
          local += tile_mass;
        }
      }
      return sum_over_cluster(local);
    };

    // One selection round: a histogram of the ids kept at `t` (counts, and
    // with `with_mass` their fixed-point masses relative to the row maximum),
    // summed over the cluster into scratch.bins / scratch.bin_mass. Round
    // kBucketRound bins ids by their distance to the row maximum
    // (ValueBucket, bin 0 nearest; `bucket` >= 0 then restricts the key
    // rounds to that bucket's ids); the key rounds bin ids by the 8-bit digit
    // of their order key at `shift`, among those matching `prefix` above it.
    // Logits cluster in a few exponent bytes, so a first round on key bits
    // would send most ids of a row to one or two bins, whose shared-memory
    // atomics serialise; the distance to the maximum spreads them. With
    // masses, an id of zero weight adds to the count and one of positive
    // weight to the mass (one atomic an id in the key rounds): the walk only
    // needs to know whether a bin is empty, and its mass. `listed`: the ids are this CTA's
    // candidate list instead of its slice of the row.
    constexpr int kBucketRound = -1;
    int round = 0;
    auto selection_round = [&](bool from_list, int shift, uint32_t prefix, int bucket,
                               bool with_mass, float t) {
      const int buf = round++ & 1;
      const uint32_t high_mask = shift >= 24 ? 0u : (0xFFFFFFFFu << (shift + 8));
      for (int i = tid; i < 256; i += kThreads) {
        slots.hist_count[buf][i] = 0;
        slots.hist_mass[buf][i] = 0;
      }
      __syncthreads();
      const auto add = [&](float zi) {
        if (!Kept(zi, t)) return;
        uint32_t bin;
        if (shift == kBucketRound) {
          bin = ValueBucket(zi, row_max);
        } else {
          if (bucket >= 0 && static_cast<int>(ValueBucket(zi, row_max)) != bucket) return;
          const uint32_t key = KeyOf(zi);
          if ((key & high_mask) != (prefix & high_mask)) return;
          bin = (key >> shift) & 0xFFu;
        }
        const unsigned long long w =
            with_mass ? static_cast<unsigned long long>(FixedExpNonPositive(FSub(zi, row_max)))
                      : 0ull;
        if (w > 0) SharedAddU64(&slots.hist_mass[buf][bin], w);
        // The bucket round counts every id: a bucket's size decides whether
        // its ids fit the candidate lists.
        if (w == 0 || shift == kBucketRound) atomicAdd(&slots.hist_count[buf][bin], 1u);
      };
      if (from_list) {
        for (int32_t i = tid; i < list_size; i += kThreads) add(list_z[i]);
      } else {
        StreamSliceValues(a, row_logits, stash, rz, first_tile, my_tiles,
                          [&](int32_t, int32_t id, float zi) {
                            if (id < v_size) add(zi);  // else past the vocabulary
                          });
      }
      __syncthreads();
      cluster.sync();
      for (int i = tid; i < 256; i += kThreads) {
        uint32_t count = 0;
        unsigned long long mass = 0;
        for (int c = 0; c < splits; ++c) {
          const ExchangeSlots* rs = cluster.map_shared_rank(&slots, c);
          count += rs->hist_count[buf][i];
          mass += rs->hist_mass[buf][i];
        }
        scratch.bins[i] = count;
        scratch.bin_mass[i] = mass;
      }
      __syncthreads();
    };
    // Bins in the order of decreasing values: buckets count up from the
    // maximum, key digits down.
    auto bin_at = [](int shift, int i) { return shift == kBucketRound ? i : 255 - i; };

    // Selections (cluster-uniform: every CTA walks the same summed bins).
    // Top-k: the k-th largest z among the ids, the bins from `first_round`
    // on (0: the bucket, then four key bytes; 1: the key bytes only).
    auto select_top_k = [&](bool from_list, int first_round) -> float {
      if (tid == 0) {
        b.prefix = 0;
        b.remaining = static_cast<uint32_t>(b.top_k);
        b.bucket = -1;
      }
      __syncthreads();
      for (int r = first_round; r < 5; ++r) {
        const int shift = r == 0 ? kBucketRound : 32 - 8 * r;
        selection_round(from_list, shift, b.prefix, b.bucket, false, kNegInf);
        uint32_t above;
        const int i = WalkToCount(scratch.bins[bin_at(shift, tid)], b.remaining, scratch, &above);
        if (tid == 0) {
          b.remaining -= above;
          if (shift == kBucketRound) {
            b.bucket = i;
          } else {
            b.prefix |= static_cast<uint32_t>(bin_at(shift, i)) << shift;
          }
        }
        __syncthreads();
      }
      return FromOrderKey(b.prefix);
    };
    // Top-p: the smallest value v kept at `t` with mass(z > v) < limit: the
    // last non-empty bin whose mass above is below the limit, round by round.
    // `bucket` and `mass_above`: where a bucket round already narrowed the
    // search (-1 and 0 for none).
    auto select_top_p = [&](bool from_list, int first_round, float t, double limit, int bucket,
                            unsigned long long mass_above) -> float {
      if (tid == 0) {
        b.prefix = 0;
        b.bucket = bucket;
        b.mass_above = mass_above;
      }
      __syncthreads();
      for (int r = first_round; r < 5; ++r) {
        const int shift = r == 0 ? kBucketRound : 32 - 8 * r;
        selection_round(from_list, shift, b.prefix, b.bucket, true, t);
        const int bin = bin_at(shift, tid);
        unsigned long long g_chosen;
        const int position =
            WalkToMass(scratch.bins[bin] != 0 || scratch.bin_mass[bin] != 0, scratch.bin_mass[bin],
                       b.mass_above, limit, scratch, &g_chosen);
        if (tid == 0) {
          if (position >= 0) {  // always true: the largest kept value qualifies
            const int chosen = bin_at(shift, position);
            if (shift == kBucketRound) {
              b.bucket = chosen;
            } else {
              b.prefix |= static_cast<uint32_t>(chosen) << shift;
            }
            b.mass_above = g_chosen;
          }
        }
        __syncthreads();
      }
      return FromOrderKey(b.prefix);
    };

    // Appends the lanes' (id, z) that `take` to the candidate list, one
    // shared atomic a warp; every lane of the warp calls it together. The
    // callers count their candidates first, so the list has room.
    auto list_if = [&](bool take, int32_t id, float zi) {
      const unsigned taken = __ballot_sync(0xFFFFFFFFu, take);
      if (taken == 0) return;
      int32_t at = 0;
      if (Lane() == 0) at = atomicAdd(&list_size, __popc(taken));
      at = __shfl_sync(0xFFFFFFFFu, at, 0) + __popc(taken & ((1u << Lane()) - 1u));
      if (take) {
        list_z[at] = zi;
        list_id[at] = id;
      }
    };

    // The candidate list: this CTA's ids kept at `t` whose value
    // bucket is at most `bucket` (every id at least as large as the
    // bucket's), or with `only_bucket` that bucket's, with their z.
    auto build_list = [&](float t, int bucket, bool only_bucket) {
      if (tid == 0) list_size = 0;
      __syncthreads();
      StreamSliceValues(a, row_logits, stash, rz, first_tile, my_tiles,
                        [&](int32_t, int32_t id, float zi) {
                          const int zb = static_cast<int>(ValueBucket(zi, row_max));
                          const bool take = id < v_size && Kept(zi, t) &&
                                            (only_bucket ? zb == bucket : zb <= bucket);
                          list_if(take, id, zi);
                        });
      __syncthreads();
    };
    // The kept mass at t from the list, tile by tile as cluster_kept_mass
    // (and StreamTile) sums it, when the list holds every kept id.
    auto list_kept_mass = [&](float t) -> unsigned long long {
      for (int32_t i = tid; i < my_tiles; i += kThreads) {
        list_tile_key[i] = 0;  // below every order key of a finite value
        list_tile_sum[i] = 0;
      }
      __syncthreads();
      for (int32_t i = tid; i < list_size; i += kThreads) {
        if (Kept(list_z[i], t)) {
          atomicMax(&list_tile_key[(list_id[i] - c0) / kMassTileIds], KeyOf(list_z[i]));
        }
      }
      __syncthreads();
      for (int32_t i = tid; i < list_size; i += kThreads) {
        if (!Kept(list_z[i], t)) continue;
        const int32_t tile = (list_id[i] - c0) / kMassTileIds;
        const float m = FromOrderKey(list_tile_key[tile]);  // +0 for a zero maximum
        SharedAddU64(&list_tile_sum[tile],
                     static_cast<unsigned long long>(FixedExpNonPositive(FSub(list_z[i], m))));
      }
      __syncthreads();
      unsigned long long local = 0;
      for (int32_t i = tid; i < my_tiles; i += kThreads) {
        const unsigned long long tile_mass =
            list_tile_key[i] != 0
                ? TileMassAtRowMax(list_tile_sum[i], FromOrderKey(list_tile_key[i]), row_max)
                : 0ull;
        kept_tile_mass[i] = tile_mass;
        local += tile_mass;
      }
      return sum_over_cluster(local);
    };

    // Top-p over the whole row in two or three passes over the slice, with
    // the cluster's leader doing the selection (an exchange through one CTA
    // instead of every CTA reading every other's histograms):
    //  1. every CTA bins its kept ids by their distance to the maximum
    //     (counts only; ScaledDistance); the leader sums the counts, which
    //     bound mass(z > v) at every bin edge, and finds the few bins that
    //     can hold the threshold. When they hold too many ids (a flat row),
    //     a second level splits those bins finely, its pass also summing
    //     exactly the mass of the ids above them;
    //  2. every CTA sums exactly the mass of its ids above the candidate
    //     bins (in registers), adds their weights to their tiles' kept sums,
    //     and lists the candidates; the leader gathers the lists and finds
    //     the threshold among them in radix rounds on the order keys,
    //     with no cluster barrier between rounds;
    //  3. every CTA adds its listed ids at or above the threshold to their
    //     tiles' sums, and the kept masses are summed over the cluster.
    // Returns false, having changed nothing the caller reads, when the
    // candidates do not fit one list or the bounds cannot exclude the first
    // level's open-ended bin (the caller then selects on the row). On
    // success sets the threshold and the kept mass, with kept_tile_mass
    // filled.
    //
    // One level: the histogram at `scale` of the kept ids whose scaled
    // distance is at least `offset` (the first level, `open_ended`: all,
    // the farthest in the last bin), and the leader's candidate bins
    // [b.fine_first, b.fine_last] with their ids' count in b.remaining.
    auto fine_level = [&](float t, double limit, float scale, int32_t offset, bool open_ended) {
      for (int i = tid; i < kFineBins; i += kThreads) fine_hist[i] = 0;
      __syncthreads();
      const float end = static_cast<float>(offset + kFineBins);
      unsigned long long above = 0;  // ids nearer the maximum than `offset` (second level)
      StreamSliceValues(a, row_logits, stash, rz, first_tile, my_tiles,
                        [&](int32_t, int32_t, float zi) {  // zi: -inf past the vocabulary
                          if (!Kept(zi, t)) return;
                          if (open_ended) {
                            atomicAdd(&fine_hist[FirstLevelBin(zi, row_max)], 1u);
                            return;
                          }
                          const float x = ScaledDistance(zi, row_max, scale);
                          if (x < static_cast<float>(offset)) {
                            above += FixedExpNonPositive(FSub(zi, row_max));
                          } else if (x < end) {
                            atomicAdd(&fine_hist[static_cast<int32_t>(x) - offset], 1u);
                          }
                        });
      if (!open_ended) {
        above = BlockSumU64(above, scratch);
        if (tid == 0) slots.fine_above = above;
      }
      __syncthreads();
      cluster.sync();
      if (leader) {
        // Thread i owns bins [8i, 8i + 8): the cluster's counts (every
        // CTA's loads in flight at once), and bounds on the mass of the
        // ids in the bins below each of them.
        static_assert(kFineBinsPerThread == 8, "two 16-byte loads a CTA");
        const int bin0 = tid * kFineBinsPerThread;
        uint32_t count[kFineBinsPerThread] = {};
        unsigned long long exact_above = 0;
#pragma unroll
        for (int c = 0; c < kMaxSplits; ++c) {
          if (c < splits) {
            const uint4* remote =
                reinterpret_cast<const uint4*>(cluster.map_shared_rank(fine_hist, c) + bin0);
            const uint4 x = remote[0], y = remote[1];
            count[0] += x.x;
            count[1] += x.y;
            count[2] += x.z;
            count[3] += x.w;
            count[4] += y.x;
            count[5] += y.y;
            count[6] += y.z;
            count[7] += y.w;
            if (!open_ended) exact_above += cluster.map_shared_rank(&slots, c)->fine_above;
          }
        }
        double below[kFineBinsPerThread], above_w[kFineBinsPerThread];
        double lo = 0.0, hi = 0.0;
        double near_edge = EdgeExp(offset + bin0, scale);
#pragma unroll
        for (int j = 0; j < kFineBinsPerThread; ++j) {
          const double far_edge = EdgeExp(offset + bin0 + j + 1, scale);
          // The first level's last bin also holds everything farther.
          const bool open_bin = open_ended && bin0 + j == kFineBins - 1;
          below[j] = open_bin ? 0.0 : count[j] * WeightBelow(far_edge);
          above_w[j] = count[j] * WeightAbove(near_edge);
          near_edge = far_edge;
          lo += below[j];
          hi += above_w[j];
        }
        BlockExclusiveScan2(&lo, &hi, scratch.lo, scratch.hi);
        // The mass of the ids above the histogram, exact up to the double's
        // rounding.
        const double base = FixedToDouble(exact_above);
        lo += base * (1.0 - 1e-12);
        hi += base * (1.0 + 1e-12);
        // The threshold's bin B has mass(bins < B) < limit <= mass(bins
        // <= B): B is at least the first bin whose upper bound through it
        // reaches the limit and at most the last whose lower bound below
        // it stays under it.
        int32_t first_bin = kFineBins, last_bin = -1;
#pragma unroll
        for (int j = 0; j < kFineBinsPerThread; ++j) {
          if (lo < limit) last_bin = bin0 + j;
          lo += below[j];
          hi += above_w[j];
          if (hi >= limit && first_bin == kFineBins) first_bin = bin0 + j;
        }
        first_bin = BlockMinInt(first_bin, scratch);
        last_bin = -BlockMinInt(-last_bin, scratch);
        if (tid == 0) {
          slots.fine_first = first_bin;
          slots.fine_last = last_bin;
        }
        __syncthreads();
        first_bin = slots.fine_first;
        last_bin = slots.fine_last;
        unsigned long long candidates = 0;
#pragma unroll
        for (int j = 0; j < kFineBinsPerThread; ++j) {
          if (bin0 + j >= first_bin && bin0 + j <= last_bin) candidates += count[j];
        }
        candidates = BlockSumU64(candidates, scratch);
        if (tid == 0) slots.fine_count = candidates;
      }
      cluster.sync();
      if (tid == 0) {
        const ExchangeSlots* ls = cluster.map_shared_rank(&slots, 0);
        b.fine_first = ls->fine_first;
        b.fine_last = ls->fine_last;
        b.remaining = ls->fine_count > kListCapacity ? kListCapacity + 1u
                                                      : static_cast<uint32_t>(ls->fine_count);
      }
      __syncthreads();
    };
    auto top_p_on_fine_bins = [&](float t, double limit, float* threshold_out,
                                  unsigned long long* mass_out) -> bool {
      fine_level(t, limit, kFirstLevelScale, 0, true);
      VERIFY_PHASE(kPhaseTopPLevel1);
      if (b.fine_first > b.fine_last || b.fine_last == kFineBins - 1) return false;
      float scale = kFirstLevelScale;
      int32_t first_x = b.fine_first, last_x = b.fine_last;  // in units of 1 / scale
      if (b.remaining > static_cast<uint32_t>(kListCapacity)) {
        // The second level: the first level's candidate bins, each split
        // into 2^k (as many as kFineBins bins hold).
        const int32_t bins = last_x - first_x + 1;
        int k = 0;
        while ((bins << (k + 1)) <= kFineBins) ++k;
        if (k == 0) return false;
        scale = kFirstLevelScale * static_cast<float>(1 << k);
        const int32_t offset = first_x << k;
        fine_level(t, limit, scale, offset, false);
        VERIFY_PHASE(kPhaseTopPLevel2);
        if (b.fine_first > b.fine_last || b.remaining > static_cast<uint32_t>(kListCapacity)) {
          return false;
        }
        first_x = offset + b.fine_first;
        last_x = offset + b.fine_last;
      }
      const float first_edge = static_cast<float>(first_x);
      const float last_end = static_cast<float>(last_x + 1);
      // The listing pass: every id nearer the maximum than the candidate
      // bins is kept (its weight goes to mass_above and to its tile's sum
      // relative to the tile's maximum, which is then the tile's kept
      // maximum); the candidates go to the list.
      if (tid == 0) list_size = 0;
      __syncthreads();
      unsigned long long above = 0;
      // The ids above are sparse in a row, but a lane that meets one would
      // hold its warp through two exponentials at nearly every position:
      // instead each warp queues their z in `pending` (the histogram is free
      // now) and a full warp's worth at a time takes its exponentials.
      float* const pending = reinterpret_cast<float*>(fine_hist) + Warp() * 64;
      const uint32_t lanes_below = (1u << Lane()) - 1u;
      int32_t pending_count = 0;  // warp-uniform
      float tile_max = 0.0f;
      unsigned long long tile_sum = 0;
      auto weigh = [&](float zp) {
        above += FixedExpNonPositive(FSub(zp, row_max));
        tile_sum += FixedExpNonPositive(FSub(zp, tile_max));
      };
      StreamSliceValues(
          a, row_logits, stash, rz, first_tile, my_tiles,
          [&](int32_t tile) {
            tile_max = records[tile].max;
            tile_sum = 0;
          },
          [&](int32_t, int32_t id, float zi) {
            const float x = Kept(zi, t) ? ScaledDistance(zi, row_max, scale) : -kNegInf;
            const bool is_above = x < first_edge;
            const uint32_t queued = __ballot_sync(0xFFFFFFFFu, is_above);
            if (queued != 0) {
              if (is_above) pending[pending_count + __popc(queued & lanes_below)] = zi;
              pending_count += __popc(queued);
              if (pending_count >= 32) {
                __syncwarp();
                weigh(pending[Lane()]);
                __syncwarp();
                pending_count -= 32;
                if (Lane() < pending_count) pending[Lane()] = pending[32 + Lane()];
                __syncwarp();
              }
            }
            list_if(x >= first_edge && x < last_end, id, zi);
          },
          [&](int32_t tile) {
            __syncwarp();
            if (Lane() < pending_count) weigh(pending[Lane()]);
            pending_count = 0;
            __syncwarp();
            tile_sum = WarpSumU64(tile_sum);
            if (Lane() == 0) list_tile_sum[tile] = tile_sum;
          });
      // The exchange also publishes every CTA's list to the leader.
      const unsigned long long mass_above = sum_over_cluster(above);
      VERIFY_PHASE(kPhaseTopPListed);
      if (leader) {
        const float v =
            SelectTopPOnLists(cluster, splits, list_z, &list_size,
                              reinterpret_cast<float*>(fine_hist), row_max, limit, mass_above,
                              scratch);
        if (tid == 0) slots.fine_threshold = v;
      }
      cluster.sync();
      if (tid == 0) b.fine_threshold = cluster.map_shared_rank(&slots, 0)->fine_threshold;
      __syncthreads();
      const float v = b.fine_threshold;
      VERIFY_PHASE(kPhaseTopPSelected);
      // The listed ids kept at v join their tiles' sums; a tile keeps its
      // maximum exactly when the maximum is at least v.
      for (int32_t i = tid; i < list_size; i += kThreads) {
        if (!Kept(list_z[i], v)) continue;
        const int32_t tile = (list_id[i] - c0) / kMassTileIds;
        SharedAddU64(&list_tile_sum[tile],
                     static_cast<unsigned long long>(
                         FixedExpNonPositive(FSub(list_z[i], records[tile].max))));
      }
      __syncthreads();
      unsigned long long local = 0;
      for (int32_t i = tid; i < my_tiles; i += kThreads) {
        const float m = records[i].max;
        const unsigned long long tile_mass =
            Kept(m, v) ? TileMassAtRowMax(list_tile_sum[i], m, row_max) : 0ull;
        kept_tile_mass[i] = tile_mass;
        local += tile_mass;
      }
      *mass_out = sum_over_cluster(local);
      *threshold_out = v;
      return true;
    };

    unsigned long long mass = b.mass;
    if (!b.greedy) {
      // Min-p: a threshold relative to the row maximum.
      threshold = min_p_threshold;
      if (threshold > kNegInf && !top_k_on) mass = cluster_kept_mass(threshold);
      bool listed = false;  // the CTAs' lists hold every kept id
      if (top_k_on) {
        // The bucket round finds the bucket that holds the k-th largest z;
        // when the ids down to that bucket fit the lists, the rest of the
        // selection (and top-p after it) runs on them, not on the row.
        selection_round(false, kBucketRound, 0, -1, false, kNegInf);
        uint32_t above;
        const int i =
            WalkToCount(scratch.bins[tid], static_cast<uint32_t>(b.top_k), scratch, &above);
        if (tid == 0) {
          b.bucket = i;
          b.remaining = above + scratch.bins[i];  // ids in buckets 0 .. i
        }
        __syncthreads();
        listed = b.remaining <= static_cast<uint32_t>(kListCapacity);
        VERIFY_PHASE(kPhaseTopKBucket);
        if (listed) build_list(kNegInf, b.bucket, false);
        VERIFY_PHASE(kPhaseTopKListed);
        const float k_threshold = listed ? select_top_k(true, 1) : select_top_k(false, 1);
        // Min-p and top-k both keep an upper set: the kept set is the smaller.
        threshold = fmaxf(threshold, k_threshold);
        VERIFY_PHASE(kPhaseTopKSelected);
        mass = listed ? list_kept_mass(threshold) : cluster_kept_mass(threshold);
        VERIFY_PHASE(kPhaseTopKMass);
      }
      if (b.top_p < 1.0f) {
        const double limit = DMul(static_cast<double>(b.top_p), FixedToDouble(mass));
        if (listed) {
          threshold = select_top_p(true, 1, threshold, limit, -1, 0);
          mass = list_kept_mass(threshold);
        } else if (!top_p_on_fine_bins(threshold, limit, &threshold, &mass)) {
          // The bucket round over the row finds the bucket of the threshold
          // (and the mass above it); its ids, when they fit, go to the lists
          // for the key rounds. The kept mass takes one more pass.
          selection_round(false, kBucketRound, 0, -1, true, threshold);
          unsigned long long g_chosen;
          const int position = WalkToMass(scratch.bins[tid] != 0, scratch.bin_mass[tid], 0, limit,
                                          scratch, &g_chosen);
          if (tid == 0) {
            // Bucket 0 holds the maximum, always kept (and always qualifies).
            const int chosen = position >= 0 ? position : 0;
            if (position < 0) g_chosen = 0;
            b.bucket = chosen;
            b.mass_above = g_chosen;
            b.remaining = scratch.bins[chosen];
          }
          __syncthreads();
          const bool bucket_listed = b.remaining <= static_cast<uint32_t>(kListCapacity);
          const int bucket = b.bucket;
          const unsigned long long above = b.mass_above;
          if (bucket_listed) build_list(threshold, bucket, true);
          threshold = select_top_p(bucket_listed, 1, threshold, limit, bucket, above);
          mass = cluster_kept_mass(threshold);
        }
      }
    }
    const float mass_f = FixedToFloat(mass);
    VERIFY_PHASE(kPhaseFiltered);
    // ---- 4. The decision (same inputs in every CTA of the cluster).
    if (tid == 0) {
      int mode = 0;
      int32_t candidate = -1;
      bool raw = true;
      const bool simulated = verify && verify_internal::SimulatesAcceptance(in, b.golden);
      if (b.greedy) {
        candidate = b.golden >= 0 ? b.golden : b.argmax;
        raw = !verify || b.draft == candidate;
        if (simulated) {
          raw = verify_internal::SimulatedAccept(b.seed, b.position,
                                                 in.config.simulated_acceptance);
          candidate = raw ? b.draft : b.argmax;
        }
      } else if (b.golden >= 0) {
        candidate = b.golden;
        raw = !verify || b.draft == b.golden;
      } else if (verify) {
        if (simulated) {
          raw = verify_internal::SimulatedAccept(b.seed, b.position,
                                                 in.config.simulated_acceptance);
        } else {
          const float zd =
              verify_internal::ProcessedLogit(in, row, b.mask, b.draft, b.inv_temperature);
          const float q_draft =
              Kept(zd, threshold) ? FDiv(ExpNonPositive(FSub(zd, row_max)), mass_f) : 0.0f;
          raw = AcceptDraft(verify_internal::AcceptUniform(b.seed, b.position), b.p_draft,
                            q_draft);
        }
        if (raw) {
          candidate = b.draft;
        } else {
          mode = 1;
        }
      } else {
        mode = 2;
      }
      if (leader) {
        PublishRow(out.workspace, row, verify && raw ? kRowAccepted : kRowBlocked);
        published = true;
      }
      if (mode != 0 && !EarlierRowsAccepted(out.workspace, row - b.info.local_step, row)) {
        mode = 0;  // never emitted: nothing to draw
        candidate = -1;
      }
      // An unfiltered race over q took its first level with the mass.
      b.race_id = mode == 2 && unfiltered_q ? b.q_tile : candidate;
      b.mode = mode;
      b.raw = raw;
    }
    __syncthreads();
    int mode = b.mode;
    VERIFY_PHASE(kPhaseDecided);
    const bool raw = b.raw;

    // ---- 5. Exponential races over e = exp(z - max): a race over q reads
    // one tile; the residual's streams this CTA's slice again with its p.
    for (int attempt = 0; mode != 0; ++attempt) {
      const bool residual = mode == 1;
      const RandomStream stream =
          (residual || attempt > 0) ? RandomStream::kResidual : RandomStream::kBonus;
      const int slot = attempt < 2 ? attempt : 1;
      const float alpha_s = FMul(a.alpha, mass_f);
      // The first level (verify_internal::kTileRaceRow): this CTA's tiles
      // race with `weights`, one thread a tile; the cluster's winning tile
      // (kNoId if no tile has weight) lands in b.race_id and the cluster's
      // smallest bad id of p (`bad`: this thread's) in b.bad_p.
      const auto race_tiles = [&](const unsigned long long* weights, int32_t bad) {
        float tile_key = 0.0f;
        int32_t tile_id = kNoId;
        for (int32_t t = tid; t < my_tiles; t += kThreads) {
          if (weights[t] == 0) continue;
          const int32_t tile = first_tile + t;
          const float key =
              verify_internal::TileRaceKey(b.seed, b.position, stream, tile, weights[t]);
          if (RaceBeats(key, tile, tile_key, tile_id)) {
            tile_key = key;
            tile_id = tile;
          }
        }
        BlockRaceBest(&tile_key, &tile_id, scratch);
        bad = BlockMinInt(bad, scratch);
        if (tid == 0) {
          slots.race_key[slot] = tile_key;
          slots.race_id[slot] = tile_id;
          slots.bad_p[slot] = bad;
        }
        cluster.sync();
        if (Warp() == 0) {
          // A CTA whose tiles have no weight published (0, kNoId), which
          // no key beats and which beats nothing: the merge's order is free.
          float k = 0.0f;
          int32_t id = kNoId, bp = kNoId;
          if (Lane() < splits) {
            const ExchangeSlots* rs = cluster.map_shared_rank(&slots, Lane());
            k = rs->race_key[slot];
            id = rs->race_id[slot];
            bp = rs->bad_p[slot];
          }
          WarpRaceBest(&k, &id);
          bp = WarpMin(bp);
          if (Lane() == 0) {
            b.race_id = id;
            b.bad_p = bp;
          }
        }
        __syncthreads();
      };
      // The second level: every CTA races the ids of tile b.race_id, one
      // group of four a thread, with weights weight(e, id) (e = exp(z - max)
      // of a kept id, else 0), so all agree on the winner without another
      // exchange; it lands in b.race_id.
      static_assert(kMassTileIds == 4 * kThreads, "a tile is one group per thread");
      const auto race_tile_ids = [&](auto weight) {
        const int32_t first_id = b.race_id * kMassTileIds + 4 * tid;
        float best_key = 0.0f;
        int32_t best_id = kNoId;
        if (b.race_id != kNoId && first_id < v_size) {
          // From L2, not from the owning CTA's stash: every CTA of the
          // cluster reading one CTA's shared memory at once was slower.
          const float4 z4 = LoadZGroup(a, row_logits, first_id, rz);
          const PhiloxBlock bits =
              PhiloxDraw(b.seed, b.position, 0, stream, static_cast<uint32_t>(first_id >> 2));
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const float zq = Get(z4, q);
            const float e = Kept(zq, threshold) ? ExpNonPositive(FSub(zq, row_max)) : 0.0f;
            const float w = weight(e, first_id + q);
            if (!(w > 0.0f)) continue;
            const float key = RaceKey(w, RaceExponential(bits.v[q]));
            if (RaceBeats(key, first_id + q, best_key, best_id)) {
              best_key = key;
              best_id = first_id + q;
            }
          }
        }
        BlockRaceBest(&best_key, &best_id, scratch);
        if (tid == 0) b.race_id = best_id;  // a tile with weight holds an id with weight
        __syncthreads();
      };
      if (!residual) {
        // A sample from q: the tiles race with their kept masses, which the
        // mass pass left in kept_tile_mass (the maximum's tile always has
        // mass); an unfiltered row's first race ran with the mass.
        if (attempt > 0 || !unfiltered_q) race_tiles(kept_tile_mass, kNoId);
        race_tile_ids([](float e, int32_t) { return e; });
        mode = 0;
        continue;
      }
      // The residual, in two levels as for q: the tiles race with the
      // fixed-point sums of their residual weights (this CTA's slice
      // streamed again with its p), then every CTA races the winning tile's
      // ids.
      const bool sparse = in.draft_probs == nullptr;
      const int64_t j = b.info.draft_index;
      const float* p_row = sparse ? nullptr : in.draft_probs + j * in.draft_vocab_size + c0;
      // The residual's sum of each of this CTA's tiles (the selection's
      // per-tile sums are no longer needed). A warp takes a batch of one
      // tile's groups at a time: one warp reduction per batch, and the
      // batches spread over the warps more evenly than whole tiles would.
      unsigned long long* tile_weights = list_tile_sum;
      for (int32_t t = tid; t < my_tiles; t += kThreads) tile_weights[t] = 0;
      if (sparse) {
        for (int w = tid; w < (n + 31) / 32; w += kThreads) listed[w] = 0;
        __syncthreads();
        for (int32_t i = tid; i < in.draft_topk; i += kThreads) {
          const int32_t id = in.draft_topk_ids[j * in.draft_topk + i] - c0;
          if (id >= 0 && id < n) atomicOr(&listed[id >> 5], 1u << (id & 31));
        }
      }
      __syncthreads();
      int32_t bad_p = kNoId;
      // A weight's share of the sum, from z and p of a kept-or-not id; the
      // select before the exponential keeps the arithmetic branch-free.
      const auto fixed_weight = [&](float zq, float pq) {
        const float e = ExpNonPositive(Kept(zq, threshold) ? FSub(zq, row_max) : kNegInf);
        return ToFixed(ResidualWeight(e, alpha_s, pq));
      };
      // Negative, NaN or infinite (!(p >= 0) || !IsFinite(p)) in two compares.
      const auto p_is_bad = [](float pq) { return !(pq >= 0.0f && pq <= 3.40282347e38f); };
      // A batch: kResidualBatch of lane l's kTileGroups groups of a tile
      // (ids 128 k + 4 l .. + 3 of the tile), logits and p, in flight
      // together before the math on them. `full`: a tile of dense, aligned
      // p and logits inside the slice, with no per-id bounds or listed
      // checks (every tile but the row's last in the common case); the
      // general body serves the rest.
      constexpr int kResidualBatch = 4;
      constexpr int kBatchesPerTile = kTileGroups / kResidualBatch;
      static_assert(kTileGroups % kResidualBatch == 0, "whole batches per tile");
      const auto sum_batch = [&](int32_t t, int k0, auto full) {
        float4 z4[kResidualBatch];
        float4 p4[kResidualBatch];
        unsigned long long sum = 0;
        if constexpr (decltype(full)::value) {
          const int32_t i0 = t * kMassTileIds + 128 * k0 + 4 * Lane();  // local id of group 0
          if (stash != nullptr) {
#pragma unroll
            for (int u = 0; u < kResidualBatch; ++u) {
              z4[u] = stash[(i0 + 128 * u) / 4];
              p4[u] = __ldcs(reinterpret_cast<const float4*>(p_row + i0 + 128 * u));
            }
          } else {
#pragma unroll
            for (int u = 0; u < kResidualBatch; ++u) {
              z4[u] = LoadFourL2(row_logits + c0 + i0 + 128 * u);
              p4[u] = __ldcs(reinterpret_cast<const float4*>(p_row + i0 + 128 * u));
            }
            FormZ(in, z4, c0 + i0, rz);
          }
          // Every value's first use is this pass over the batch (the
          // largest z and any bad p), so all of its loads are in flight
          // before any math on them.
          float z_max = kNegInf;
          bool any_bad = false;
#pragma unroll
          for (int u = 0; u < kResidualBatch; ++u) {
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              z_max = fmaxf(z_max, Get(z4[u], q));
              any_bad |= p_is_bad(Get(p4[u], q));
            }
          }
          // A batch whose ids all lie more than 29 below the row maximum
          // weighs exactly 0: each weight is at most e = exp(z - max) <
          // 2^-41, which rounds to 0 in fixed point (a bad p fails the row
          // below, whatever the sum).
          if (__any_sync(0xFFFFFFFFu, FSub(z_max, row_max) >= -29.0f)) {
#pragma unroll
            for (int u = 0; u < kResidualBatch; ++u) {
#pragma unroll
              for (int q = 0; q < 4; ++q) sum += fixed_weight(Get(z4[u], q), Get(p4[u], q));
            }
          }
          if (any_bad) {
            // Rare (the step fails with the smallest bad id): the batch's p
            // read again to find it.
            for (int u = 0; u < kResidualBatch; ++u) {
              for (int q = 0; q < 4; ++q) {
                const int32_t i = t * kMassTileIds + 128 * (k0 + u) + 4 * Lane() + q;
                if (p_is_bad(p_row[i])) bad_p = min(bad_p, c0 + i);
              }
            }
          }
        } else {
#pragma unroll
          for (int u = 0; u < kResidualBatch; ++u) {
            const int32_t i = t * kMassTileIds + 128 * (k0 + u) + 4 * Lane();  // local id
            z4[u] = i >= n             ? make_float4(kNegInf, kNegInf, kNegInf, kNegInf)
                    : stash != nullptr ? stash[i / 4]
                                       : LoadZGroup(a, row_logits, c0 + i, rz);
            float pt[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) pt[q] = p_row != nullptr && i + q < n ? __ldcs(p_row + i + q) : 0.0f;
            p4[u] = make_float4(pt[0], pt[1], pt[2], pt[3]);
          }
#pragma unroll
          for (int u = 0; u < kResidualBatch; ++u) {
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              const int32_t i = t * kMassTileIds + 128 * (k0 + u) + 4 * Lane() + q;
              if (i >= n) continue;
              const float pq = Get(p4[u], q);
              if (p_row != nullptr && p_is_bad(pq)) bad_p = min(bad_p, c0 + i);
              if (sparse && ((listed[i >> 5] >> (i & 31)) & 1u)) continue;
              sum += fixed_weight(Get(z4[u], q), pq);
            }
          }
        }
        sum = WarpSumU64(sum);
        if (Lane() == 0 && sum != 0) SharedAddU64(&tile_weights[t], sum);
      };
      const bool dense_aligned = p_row != nullptr && a.vector_probs && a.vector_logits;
      for (int32_t unit = Warp(); unit < my_tiles * kBatchesPerTile; unit += kWarps) {
        const int32_t t = unit / kBatchesPerTile;
        const int k0 = unit % kBatchesPerTile * kResidualBatch;
        if (dense_aligned && (t + 1) * kMassTileIds <= n) {
          sum_batch(t, k0, std::true_type{});
        } else {
          sum_batch(t, k0, std::false_type{});
        }
      }
      // The sparse draft's listed ids: p is the sum of their entries, in list
      // order.
      const auto sparse_p = [&](int32_t id) {
        float p = 0.0f;
        for (int32_t k = 0; k < in.draft_topk; ++k) {
          if (in.draft_topk_ids[j * in.draft_topk + k] == id) {
            p = FAdd(p, in.draft_topk_probs[j * in.draft_topk + k]);
          }
        }
        return p;
      };
      if (sparse) {
        for (int32_t i = tid; i < in.draft_topk; i += kThreads) {
          const int32_t id = in.draft_topk_ids[j * in.draft_topk + i];
          if (id < c0 || id >= c0 + n) continue;
          bool first = true;
          for (int32_t k = 0; k < i; ++k) first &= in.draft_topk_ids[j * in.draft_topk + k] != id;
          if (!first) continue;
          const float zi = verify_internal::ProcessedLogit(in, row, b.mask, id, b.inv_temperature);
          const float e = Kept(zi, threshold) ? ExpNonPositive(FSub(zi, row_max)) : 0.0f;
          const unsigned long long w = ToFixed(ResidualWeight(e, alpha_s, sparse_p(id)));
          if (w != 0) SharedAddU64(&tile_weights[(id - c0) / kMassTileIds], w);
        }
      }
      __syncthreads();
      VERIFY_PHASE(kPhaseResidualSummed);
      race_tiles(tile_weights, bad_p);
      VERIFY_PHASE(kPhaseResidualRaced);
      if (b.bad_p != kNoId) {
        if (leader && tid == 0) {
          ReportError(ws, ErrorKey(row, VerifyErrorCode::kBadDraftProb,
                                   static_cast<uint32_t>(b.bad_p)));
        }
        row_done = true;
        break;
      }
      if (b.race_id == kNoId) {  // no residual weight (p not normalised): q itself
        mode = 2;
        continue;
      }
      race_tile_ids([&](float e, int32_t id) {
        const float p = id >= v_size ? 0.0f
                        : sparse     ? sparse_p(id)
                                     : in.draft_probs[j * in.draft_vocab_size + id];
        return ResidualWeight(e, alpha_s, p);
      });
      mode = 0;
    }

    VERIFY_PHASE(kPhaseDrawn);

    // ---- 6. The leader writes the row (a row that drew nothing keeps
    // candidate -1 and logprob 0).
    if (!row_done && leader && tid == 0) out.raw_accept[row] = raw ? 1 : 0;
    if (!row_done && leader && tid == 0 && b.race_id >= 0) {
      const int32_t candidate = b.race_id;
      out.candidate_token_ids[row] = candidate;
      const float zc = verify_internal::ProcessedLogit(in, row, b.mask, candidate, b.inv_temperature);
      out.token_logprobs[row] = Kept(zc, threshold)
                                    ? verify_internal::KeptLogprob(zc, row_max, mass_f)
                                    : kNegInf;
    }
  }

  // ---- 7. A row that stopped before deciding still tells later rows. No CTA
  // leaves while another may read its slots; then the leader counts the row,
  // and the CTA that counts the last row runs the tail.
  if (leader && tid == 0 && !published && row < in.total_q) {
    PublishRow(out.workspace, row, kRowBlocked);
  }
  VERIFY_PHASE(kPhaseEnd);
#if defined(VERDICT_VERIFY_PHASE_TRACE)
  if (threadIdx.x == 0 && (rank == 0 || rank == splits - 1)) PrintPhases(phase_times, row, rank);
#endif
  cluster.sync();
  if (!leader) return;
  if (tid == 0) {
    __threadfence();
    const unsigned int done = atomicAdd(&ws->done, 1u);
    b.is_last = done + 1 == static_cast<unsigned int>(a.grid_rows);
  }
  __syncthreads();
  if (!b.is_last) return;
  __threadfence();

  // ---- 8. Tail: the accepted prefix, the counters, the error record.
  if (tid == 0) {
    const unsigned long long acc = atomicAdd(&ws->error_acc, 0ull);
    b.final_key = acc == 0 ? 0 : ~acc;
  }
  for (int32_t r = tid; r < in.total_q; r += kThreads) RowStates(out.workspace)[r] = 0;
  __syncthreads();
  const unsigned long long final_key = b.final_key;
  if (final_key == 0) {
    const int32_t slots_used = in.config.nextn;
    for (int32_t s = tid; s < slots_used; s += kThreads) {
      scratch.counters[0][s] = 0;
      scratch.counters[1][s] = 0;
    }
    // Stage the rows' raw accepts (a byte each) in this CTA's now free tile
    // records when they fit: the walk over each request's rows then waits on
    // one load per request, its final row's candidate.
    const int32_t rows = in.total_q;
    const bool staged = static_cast<int64_t>(rows) <= static_cast<int64_t>(sizeof(fine_hist));
    uint8_t* staged_raw = reinterpret_cast<uint8_t*>(fine_hist);
    if (staged) {
      for (int32_t r = tid; r < rows; r += kThreads) staged_raw[r] = __ldcg(out.raw_accept + r);
    }
    __syncthreads();
    for (int32_t r = tid; r < in.num_requests; r += kThreads) {
      verify_internal::FinalizeRequest(
          in, out, r,
          [&](int32_t row) {
            return (staged ? staged_raw[row] : __ldcg(out.raw_accept + row)) != 0;
          },
          [&](int32_t row) { return __ldcg(out.candidate_token_ids + row); },
          [&](int which, int32_t slot) { atomicAdd(&scratch.counters[which][slot], 1); });
    }
    __syncthreads();
    for (int32_t s = tid; s < slots_used; s += kThreads) {
      out.num_generated_tokens[s] = scratch.counters[0][s];
      out.num_verified_tokens[s] = scratch.counters[1][s];
    }
  }
  if (tid == 0) {
    *out.error = verify_internal::MakeErrorRecord(in, final_key);
    ws->done = 0;
    ws->ticket = 0;
    ws->error_acc = 0;
    __threadfence();
  }
}

// A launch failure, without Abseil (the launcher also links into a shared
// library for the benchmark, where the system's static Abseil cannot go).
struct LaunchError {
  LaunchStatus code = LaunchStatus::kOk;
  std::string message;
};

LaunchStatus Fail(LaunchError* error, LaunchStatus code, std::string message) {
  error->code = code;
  error->message = std::move(message);
  return code;
}

#define VERDICT_LAUNCH_CUDA(expr)                                                       \
  do {                                                                                  \
    const cudaError_t launch_err = (expr);                                              \
    if (launch_err != cudaSuccess) {                                                    \
      return Fail(error, LaunchStatus::kCudaError,                                      \
                  std::string(#expr) + " failed: " + cudaGetErrorName(launch_err) + ": " + \
                      cudaGetErrorString(launch_err));                                  \
    }                                                                                   \
  } while (0)

// Launch configurations already checked with cudaOccupancyMaxActiveClusters
// (a host call too slow to repeat on every step).
struct CheckedConfig {
  int64_t splits = 0;
  int64_t dynamic_smem = 0;
  bool fits = false;
};

// Per kernel build: index 2 * dtype + (1 for the small-step build).
constexpr int kKernelBuilds = 4;
struct DeviceInfo {
  int sms = 0;
  bool attributes_set[kKernelBuilds] = {};
  int ctas_per_sm[kKernelBuilds] = {};
  CheckedConfig checked[kKernelBuilds][8];
  int next_checked[kKernelBuilds] = {};
};

LaunchStatus GetDeviceInfo(DeviceInfo** info, LaunchError* error) {
  static DeviceInfo infos[64];
  int device = 0;
  VERDICT_LAUNCH_CUDA(cudaGetDevice(&device));
  if (device < 0 || device >= 64) {
    return Fail(error, LaunchStatus::kCudaError, "verify sampler: device id > 63");
  }
  DeviceInfo& d = infos[device];
  if (d.sms == 0) {
    int sms = 0;
    VERDICT_LAUNCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    d.sms = sms;
  }
  *info = &d;
  return LaunchStatus::kOk;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Sets a kernel build's attributes once per device and process, and counts
// the CTAs per SM its registers allow (dense drafts need no dynamic shared
// memory; FitsCluster sees the real configuration).
template <typename Kernel>
LaunchStatus PrepareBuild(Kernel kernel, DeviceInfo& device, int build, LaunchError* error) {
  if (device.attributes_set[build]) return LaunchStatus::kOk;
  constexpr int64_t kMaxDynamicSmem =
      std::max(DynamicLayout(kMaxTilesPerCta).Bytes(kMaxTilesPerCta, true),
               DynamicLayout(kMaxStashTiles).BytesWithStash(kMaxStashTiles, true));
  VERDICT_LAUNCH_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(kMaxDynamicSmem)));
  VERDICT_LAUNCH_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  int blocks = 0;
  VERDICT_LAUNCH_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, 0));
  device.ctas_per_sm[build] = std::max(blocks, 1);
  device.attributes_set[build] = true;
  return LaunchStatus::kOk;
}

// Whether a cluster of the configuration fits the GPU with this build,
// remembered per (splits, dynamic shared memory).
template <typename Kernel>
bool FitsCluster(Kernel kernel, DeviceInfo& device, int build, int64_t splits, int64_t dynamic,
                 const cudaLaunchConfig_t& config) {
  for (const CheckedConfig& c : device.checked[build]) {
    if (c.splits == splits && c.dynamic_smem == dynamic) return c.fits;
  }
  int clusters = 0;
  const cudaError_t err = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
  if (err != cudaSuccess) (void)cudaGetLastError();
  CheckedConfig& slot = device.checked[build][device.next_checked[build]++ % 8];
  slot = CheckedConfig{splits, dynamic, err == cudaSuccess && clusters > 0};
  return slot.fits;
}

template <typename LogitT>
LaunchStatus Launch(const KernelArgs& args_in, DeviceInfo& device, int dtype_index,
                    cudaStream_t stream, LaunchError* error) {
  KernelArgs args = args_in;
  auto kernel = VerifySampleKernel<LogitT, kCtasPerSm>;
  auto small_step_kernel = VerifySampleKernel<LogitT, kSmallStepCtasPerSm>;
  const int build = 2 * dtype_index;
  const int small_build = build + 1;
  LaunchStatus status = PrepareBuild(kernel, device, build, error);
  if (status == LaunchStatus::kOk) status = PrepareBuild(small_step_kernel, device, small_build, error);
  if (status != LaunchStatus::kOk) return status;
  const int64_t tiles = verify_internal::NumMassTiles(args.in.vocab_size);
  const int64_t rows = args.grid_rows;
  const bool sparse = args.in.draft_probs == nullptr;
  const auto dynamic_of = [&](int64_t tiles_per_cta) {
    return DynamicLayout(tiles_per_cta).Bytes(tiles_per_cta, sparse);
  };
  const int64_t min_splits = CeilDiv(tiles, kMaxTilesPerCta);
  if (min_splits > kMaxSplits) {
    return Fail(error, LaunchStatus::kUnsupported,
                "verify sampler: vocabulary " + std::to_string(args.in.vocab_size) +
                    " does not fit " + std::to_string(kMaxSplits) + " CTAs");
  }
  // Enough CTAs to fill every SM's CTA slots, at least one tile each, and
  // slices short enough that a pass after the first finds them in L2.
  const int64_t slots = int64_t{device.ctas_per_sm[build]} * device.sms;
  const int32_t target_override = target_tiles_override.load(std::memory_order_relaxed);
  const int64_t target_tiles = target_override > 0 ? target_override : kTargetTilesPerCta;
  // An override sets the split alone, also for steps too small to fill the
  // GPU, so that a benchmark can time small steps at every split.
  const int64_t fill_splits = target_override > 0 ? 1 : CeilDiv(slots, rows);
  int64_t splits = std::max({min_splits, fill_splits, CeilDiv(tiles, target_tiles)});
  splits = std::min({splits, int64_t{kMaxSplits}, tiles});

  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  config.blockDim = dim3(kThreads, 1, 1);
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  for (;;) {
    // No CTA without tiles: as many CTAs as the tiles per CTA need.
    const int64_t tiles_per_cta = CeilDiv(tiles, splits);
    splits = CeilDiv(tiles, tiles_per_cta);
    args.splits = static_cast<int32_t>(splits);
    args.tiles_per_cta = static_cast<int32_t>(tiles_per_cta);
    args.prefetch_probs = args.vector_probs && rows * splits <= slots;
    const int64_t dynamic = dynamic_of(tiles_per_cta);
    config.gridDim = dim3(static_cast<unsigned>(rows * splits), 1, 1);
    config.dynamicSmemBytes = static_cast<size_t>(dynamic);
    attribute[0].val.clusterDim.x = static_cast<unsigned>(splits);
    attribute[0].val.clusterDim.y = 1;
    attribute[0].val.clusterDim.z = 1;
    // A step of at most one CTA per SM runs the small-step build where its
    // cluster fits, with a stash of its slices where they fit too; every
    // build computes the same values.
    if (rows * splits <= device.sms) {
      if (tiles_per_cta <= kMaxStashTiles && !stash_disabled.load(std::memory_order_relaxed)) {
        const int64_t stashed = DynamicLayout(tiles_per_cta).BytesWithStash(tiles_per_cta, sparse);
        config.dynamicSmemBytes = static_cast<size_t>(stashed);
        if (FitsCluster(small_step_kernel, device, small_build, splits, stashed, config)) {
          args.stash = true;
          VERDICT_LAUNCH_CUDA(cudaLaunchKernelEx(&config, small_step_kernel, args));
          return LaunchStatus::kOk;
        }
        config.dynamicSmemBytes = static_cast<size_t>(dynamic);
      }
      if (FitsCluster(small_step_kernel, device, small_build, splits, dynamic, config)) {
        VERDICT_LAUNCH_CUDA(cudaLaunchKernelEx(&config, small_step_kernel, args));
        return LaunchStatus::kOk;
      }
    }
    if (FitsCluster(kernel, device, build, splits, dynamic, config)) break;
    if (splits <= min_splits) {
      return Fail(error, LaunchStatus::kUnsupported,
                  "verify sampler: no cluster of " + std::to_string(splits) +
                      " CTAs fits this GPU");
    }
    splits = std::max(min_splits, splits / 2);
  }
  VERDICT_LAUNCH_CUDA(cudaLaunchKernelEx(&config, kernel, args));
  return LaunchStatus::kOk;
}

}  // namespace

namespace verify_internal {

void SetTargetTilesPerCta(int32_t tiles) {
  target_tiles_override.store(tiles > 0 ? tiles : 0, std::memory_order_relaxed);
}

void SetSliceStash(bool enabled) { stash_disabled.store(!enabled, std::memory_order_relaxed); }

LaunchStatus LaunchVerifySample(const VerifyInputs& in, VerifyOutputs* out, void* cuda_stream,
                                uint64_t* step_error_key, std::string* message) {
  LaunchError error;
  *step_error_key = 0;
  const auto finish = [&](LaunchStatus status) {
    if (message != nullptr) *message = error.message;
    return status;
  };
  if (out == nullptr || out->error == nullptr || out->workspace == nullptr) {
    return finish(Fail(&error, LaunchStatus::kInvalidArgument,
                       "verify sampler: outputs, error and workspace are required"));
  }
  // Step-level checks read no device memory: refuse bad shapes before launching.
  if (const uint64_t key = CheckStep(in); key != 0) {
    *step_error_key = key;
    return finish(Fail(&error, LaunchStatus::kInvalidArgument, "verify sampler: bad step"));
  }
  const bool rows_ok = in.total_q == 0 ||
                       (out->row_to_req && out->local_step && out->is_verify && out->raw_accept &&
                        out->accept && out->is_final && out->verified_token_ids &&
                        out->candidate_token_ids && out->token_logprobs);
  const bool requests_ok = in.num_requests == 0 || (out->last_valid_offset &&
                                                    out->sampled_token_ids &&
                                                    out->emitted_stop_token);
  const bool steps_ok =
      in.config.nextn <= 0 || (out->num_generated_tokens && out->num_verified_tokens);
  if (!rows_ok || !requests_ok || !steps_ok || out->confidence_stride < 0) {
    return finish(Fail(&error, LaunchStatus::kInvalidArgument,
                       "verify sampler: an output array is missing for a non-empty dimension"));
  }
  DeviceInfo* device = nullptr;
  if (GetDeviceInfo(&device, &error) != LaunchStatus::kOk) return finish(error.code);

  KernelArgs args;
  args.in = in;
  args.out = *out;
  args.alpha = static_cast<float>(std::exp(-static_cast<double>(in.config.penalty)));
  args.grid_rows = std::max(in.total_q, 1);
  const bool bf16 = in.logits_dtype == LogitsDtype::kBFloat16;
  const uintptr_t logits_addr = reinterpret_cast<uintptr_t>(in.logits);
  args.vector_logits = in.vocab_size % 4 == 0 && logits_addr % (bf16 ? 8 : 16) == 0;
  args.vector_probs = in.draft_probs != nullptr && in.vocab_size % 4 == 0 &&
                      reinterpret_cast<uintptr_t>(in.draft_probs) % 16 == 0;
  args.splits = 1;
  args.prefetch_probs = false;
  args.stash = false;
  args.tiles_per_cta = 1;
  const cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  const LaunchStatus status = bf16 ? Launch<uint16_t>(args, *device, 1, stream, &error)
                                   : Launch<float>(args, *device, 0, stream, &error);
  return finish(status);
}

}  // namespace verify_internal
}  // namespace verdict
