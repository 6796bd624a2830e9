// Draft proposal sampling: turns the draft model's logits into the draft
// token, the distribution p it was drawn from (the verify sampler needs p for
// min(1, q/p) and the residual, seed 000), and the confidence signal q_max
// that the acceptance estimator scores (seed 002: the max of the draft
// distribution at the request's temperature, temperature 1 for greedy rows).
//
// p is the draft's processed distribution: z = logit / T, top-k keeps ids
// with z >= the k-th largest z, top-p keeps the smallest set of largest ids
// whose mass reaches top_p (ties kept together), p = softmax over the kept
// ids. Greedy rows (T = 0) propose the argmax (lowest id on ties) and p is
// one-hot there. The token is drawn from exactly the p that is returned, by
// an exponential race with Philox numbers keyed by (seed, position), stream
// kDraft, so it is the same on every rank and backend.
#ifndef VERDICT_KERNELS_DRAFT_SAMPLER_H_
#define VERDICT_KERNELS_DRAFT_SAMPLER_H_

#include <cstdint>

#include "absl/status/status.h"

namespace verdict {

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
};

struct DraftSampleOutputs {
  int32_t* token_ids = nullptr;  // [num_rows]
  float* probs = nullptr;        // [num_rows, vocab_size]: p
  float* signals = nullptr;      // [num_rows]: q_max (temperature 1 when greedy)
};

// CPU twin. Refuses non-finite logits and bad parameters, naming the row.
absl::Status DraftSampleCpu(const DraftSampleInputs& inputs, DraftSampleOutputs* outputs);

}  // namespace verdict

#endif  // VERDICT_KERNELS_DRAFT_SAMPLER_H_
