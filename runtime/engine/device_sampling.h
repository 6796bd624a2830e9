// The step's sampling on the device, for the CUDA backend: the draft
// sampler and the fused verify sampler read the models' logits where the
// forward passes wrote them, and the draft distributions p never leave the
// device. Only the small per-request arrays cross: sampling parameters and
// draft ids go up, tokens, signals and the verify outcome come down.
//
// Draft distributions live in a store of [rows, gamma, vocab] floats: row s
// is the s-th speculative request of the step, slot (s, j) its draft j. The
// verify sampler wants them packed in verify order (each request's verified
// drafts back to back); Verify packs the store's prefixes before launching.
#ifndef VERDICT_RUNTIME_ENGINE_DEVICE_SAMPLING_H_
#define VERDICT_RUNTIME_ENGINE_DEVICE_SAMPLING_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/draft_sampler.h"
#include "kernels/verify_sampler.h"
#include "kernels/verify_step.h"

namespace verdict {

class DeviceSampling {
 public:
  // On the calling thread's current device, which every later call
  // selects again (calls may come from another thread).
  static absl::StatusOr<std::unique_ptr<DeviceSampling>> Create(int vocab_size, int gamma);
  ~DeviceSampling();
  DeviceSampling(const DeviceSampling&) = delete;
  DeviceSampling& operator=(const DeviceSampling&) = delete;

  // Device memory for `rows` rows of logits (reused; valid until the next
  // call of the same kind).
  absl::StatusOr<float*> DraftLogits(int64_t rows);
  absl::StatusOr<float*> VerifyLogits(int64_t rows);

  // The draft passes of one step, queued on `stream` (the draft model's
  // device queue; null: this object's own) without waiting in between.
  // BeginDrafts takes the rows' parameters (host arrays; params.logits is
  // ignored, params.positions are pass 0's and pass j samples at position +
  // j). SampleDraft(j) samples pass j of every row from the logits in
  // DraftLogits, once the queue reaches them, writing its tokens to
  // DraftTokens(j) (device memory: the next pass's input) and each row's p
  // to the store's slot (row, j). FinishDrafts waits for the queue and
  // copies the first `passes` passes' tokens and signals to the host arrays
  // ([pass][row]), or returns the first pass's sampling error.
  absl::Status BeginDrafts(const DraftSampleInputs& params, void* stream);
  absl::Status SampleDraft(int j);
  const int32_t* DraftTokens(int j) const;
  absl::Status FinishDrafts(int passes, int32_t* tokens, float* signals);

  // Runs the fused verify sampler on the logits in VerifyLogits. `params`
  // holds host arrays (its logits and draft_probs are ignored); the draft
  // distributions come from the store: request r's verified drafts are the
  // first seqlen_q[r] - 1 slots of store row store_rows[r] (-1 for a request
  // without drafts). Fills `out` (sized for `params`).
  absl::Status Verify(const VerifyInputs& params, absl::Span<const int32_t> store_rows,
                      HostVerifyOutputs* out);

 private:
  DeviceSampling(int vocab_size, int gamma);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int vocab_;
  int gamma_;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_ENGINE_DEVICE_SAMPLING_H_
