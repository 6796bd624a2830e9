// Draft proposal sampling: turns the draft model's logits into the draft
// token, the distribution p it was drawn from (the verify sampler needs p for
// min(1, q/p) and the residual, seed 000), and the confidence signal q_max
// that the acceptance estimator scores (seed 002: the max of the draft
// distribution at the request's temperature, temperature 1 for greedy rows).
//
// p is the draft's processed distribution: z = logit * (1 / T), min-p keeps
// ids with z >= max z + log(min_p) (sampling_math::MinPThreshold, as the
// verify sampler), top-k keeps ids with z >= the k-th largest z (ties at the
// k-th value kept; with min-p, the smaller of the two upper sets), top-p then
// keeps the smallest set of largest ids whose mass reaches top_p (ties kept
// together): the ids whose value v has mass(z > v) < top_p * mass(top-k
// set), p = softmax over the kept ids. Masses are sums of exp(z - max z) in
// 2^-40 fixed point and p = exp(z - max z) / mass, with the arithmetic of
// kernels/sampling_math.h: the CPU twin and the CUDA kernel give the same
// bits, and p is the expression the verify sampler uses for q. Greedy rows
// (T = 0) propose the argmax (lowest id on ties) and p is one-hot there. The
// token is drawn from exactly the p that is returned, by an exponential race
// (the largest p_i / E_i, E_i ~ Exp(1), ties to the lower id) with Philox
// numbers keyed by (seed, position), stream kDraft, so it is the same on every
// rank and backend. The signal is 1 / mass, the largest p (at temperature 1
// and without top-k/top-p for greedy rows).
#ifndef VERDICT_KERNELS_DRAFT_SAMPLER_H_
#define VERDICT_KERNELS_DRAFT_SAMPLER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/model/cuda_stream.h"

namespace verdict {

// The largest vocabulary the sampler takes: Philox block indices (id / 4)
// stay below 2^24 and fixed-point masses below 2^64.
inline constexpr int32_t kMaxDraftVocabSize = 1 << 23;

struct DraftSampleInputs {
  int32_t num_rows = 0;
  int32_t vocab_size = 0;
  const float* logits = nullptr;  // [num_rows, vocab_size]
  // Per row: the request's sampling parameters and the absolute position
  // of the row's input token (the Philox counter).
  const float* temperatures = nullptr;
  const int32_t* top_ks = nullptr;  // 0 = off
  const float* top_ps = nullptr;    // 1 = off
  const uint64_t* seeds = nullptr;
  const int64_t* positions = nullptr;
  const float* min_ps = nullptr;  // optional; 0 = off
};

// Why a row was refused. Of several errors the first row's is reported, and
// in a row bad parameters before logits.
enum class DraftErrorCode : uint32_t {
  kOk = 0,
  kBadSamplingParams = 1,  // detail: the DraftParam at fault
  kNonFiniteLogit = 2,     // detail: the lowest vocabulary id whose z is not finite
};

// The sampling parameter a kBadSamplingParams error names: temperature must
// be finite and >= 0, top_k >= 0, top_p in (0, 1], min_p in [0, 1].
enum class DraftParam : uint32_t { kNone = 0, kTemperature = 1, kTopK = 2, kTopP = 3, kMinP = 4 };

// `key` packs (row + 1) << 40 | code << 32 | detail; 0 when every row is fine.
struct DraftErrorRecord {
  uint64_t key = 0;
};

struct DraftSampleOutputs {
  int32_t* token_ids = nullptr;  // [num_rows]
  float* probs = nullptr;        // [num_rows, vocab_size]: p
  float* signals = nullptr;      // [num_rows]: q_max (temperature 1 when greedy)
  // Optional on the CPU; required by the CUDA launcher, which writes it on
  // every launch (read it back with ReadDraftSampleError).
  DraftErrorRecord* error = nullptr;
};

// Status of an error record: OK for key 0, otherwise InvalidArgument naming
// the row and the reason.
absl::Status DraftErrorStatus(const DraftErrorRecord& record);

// CPU twin: the reference. Host pointers. Refuses non-finite logits (after
// temperature scaling) and bad parameters, naming the row; the outputs of a
// refused call are unspecified.
absl::Status DraftSampleCpu(const DraftSampleInputs& inputs, DraftSampleOutputs* outputs);

// Device memory one stream's CUDA launches share: kDraftSampleWorkspaceBytes,
// zeroed once when allocated; every launch leaves it zeroed again.
inline constexpr int64_t kDraftSampleWorkspaceBytes = 16;

// CUDA launcher: one kernel launch on `stream` for all rows, the same bits as
// DraftSampleCpu. Device pointers (the outputs' error record too). Returns
// launch errors and shape errors (missing arrays, vocabulary size); errors of
// the rows' contents land in outputs->error: read it with
// ReadDraftSampleError, or copy it with the step's other results.
//
// Each row's passes (top-k, top-p and min-p included) run on a cluster of
// DraftSampleCtasPerRow(rows, max_ctas_per_row) CTAs: the same bits as one
// CTA, sooner (docs/PERF.md, draft sampler). `max_ctas_per_row` 1 keeps one
// CTA per row (benchmarks and tests compare the sizes).
inline constexpr int kDraftMaxCtasPerRow = 8;

// Where top-p without top-k finds its threshold from a histogram of counts
// by distance to the maximum (docs/PERF.md, draft sampler): rows whose CTAs
// hold at least `min_part_ids` ids each count it (counting costs every
// counted id a shared-memory atomic), and a counted row takes the
// histogram's candidates where the list of the pivot set it would take
// otherwise exceeds `min_list_ids` ids in some CTA's part. Every choice
// gives the same bits; the defaults are the benchmark's best, and the
// parity tests also run with both at 0 (the histogram on every top-p row).
struct DraftTopPGates {
  int32_t min_part_ids = 16384;
  uint32_t min_list_ids = 2048;
};

absl::Status DraftSampleCuda(const DraftSampleInputs& inputs, DraftSampleOutputs* outputs,
                             void* workspace, cudaStream_t stream,
                             int max_ctas_per_row = kDraftMaxCtasPerRow,
                             DraftTopPGates gates = {});

// The CTAs per row of a launch of `rows` rows on the current device: the
// largest cluster size (8, 4 or 2, at most `max_ctas_per_row`) of which the
// device holds `rows` clusters at once, else 1. The occupancy is looked up
// once per device: call it before capturing launches into a CUDA graph.
int DraftSampleCtasPerRow(int rows, int max_ctas_per_row = kDraftMaxCtasPerRow);

// Clusters of `ctas_per_row` CTAs (2, 4 or 8) the current device holds at
// once (0 where it has none, or for another size).
int DraftSampleClusters(int ctas_per_row);

// Copies the launch's error record to the host (synchronising `stream`) and
// turns it into a Status, the same as DraftSampleCpu's for the same inputs.
absl::Status ReadDraftSampleError(const DraftSampleOutputs& outputs, cudaStream_t stream);

}  // namespace verdict

#endif  // VERDICT_KERNELS_DRAFT_SAMPLER_H_
