// Pieces of the draft sampler shared verbatim by the CPU twin
// (draft_sampler.cc) and the CUDA kernel (draft_sampler.cu): the parameter
// checks, the error key, and the per-id arithmetic that p, the signal and the
// proposal race are made of. Written once here, they cannot drift apart; the
// float operations themselves come from kernels/sampling_math.h.
#ifndef VERDICT_KERNELS_DRAFT_SAMPLER_INTERNAL_H_
#define VERDICT_KERNELS_DRAFT_SAMPLER_INTERNAL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/draft_sampler.h"
#include "kernels/philox.h"
#include "kernels/sampling_math.h"

namespace verdict {
namespace draft_internal {

// The checks both backends make before reading any row: every array present,
// the vocabulary in range. Host only (the launcher runs it before launching).
absl::Status CheckShape(const DraftSampleInputs& inputs, const DraftSampleOutputs* outputs);

// (row + 1) << 40 | code << 32 | detail: of several errors the smallest key
// is reported, i.e. the first row, and in it bad parameters before logits.
VERDICT_HD uint64_t ErrorKey(int64_t row, DraftErrorCode code, uint32_t detail) {
  return (static_cast<uint64_t>(row + 1) << 40) |
         (static_cast<uint64_t>(static_cast<uint32_t>(code)) << 32) | detail;
}

VERDICT_HD int64_t ErrorRow(uint64_t key) { return static_cast<int64_t>(key >> 40) - 1; }
VERDICT_HD DraftErrorCode ErrorCode(uint64_t key) {
  return static_cast<DraftErrorCode>((key >> 32) & 0xFFu);
}
VERDICT_HD uint32_t ErrorDetail(uint64_t key) { return static_cast<uint32_t>(key); }

// Which sampling parameter of a row is unusable (DraftParam), or kNone.
VERDICT_HD DraftParam BadParam(float temperature, int32_t top_k, float top_p, float min_p) {
  if (!(temperature >= 0.0f) || !sampling_math::IsFinite(temperature)) {
    return DraftParam::kTemperature;
  }
  if (top_k < 0) return DraftParam::kTopK;
  if (!(top_p > 0.0f && top_p <= 1.0f)) return DraftParam::kTopP;
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return DraftParam::kMinP;
  return DraftParam::kNone;
}

VERDICT_HD float MinPOf(const DraftSampleInputs& in, int32_t row) {
  return in.min_ps != nullptr ? in.min_ps[row] : 0.0f;
}

// Greedy rows score their signal at temperature 1 (seed 002).
VERDICT_HD float RowInverseTemperature(float temperature) {
  return sampling_math::InverseTemperature(temperature);
}

// Top-k is on for 0 < k < vocabulary (k >= vocabulary keeps every id).
VERDICT_HD bool TopKActive(int32_t top_k, int32_t vocab_size) {
  return top_k > 0 && top_k < vocab_size;
}

// Whether a non-greedy row filters its distribution (top-k, top-p or min-p).
VERDICT_HD bool FiltersActive(int32_t top_k, float top_p, float min_p, int32_t vocab_size) {
  return TopKActive(top_k, vocab_size) || top_p < 1.0f || min_p > 0.0f;
}

// exp(z - max) in 2^-40 fixed point: the unit every mass (the softmax
// normaliser, the top-p walk) is summed in, so that a sum is the same in any
// order of addition.
VERDICT_HD uint64_t FixedWeight(float z, float row_max) {
  return sampling_math::FixedExpNonPositive(sampling_math::FSub(z, row_max));
}

// p of one id: exp(z - max) / mass over the kept ids (z >= threshold), 0
// elsewhere. The same expression as the verify sampler's q, so a draft and a
// target with equal logits and parameters give equal distributions.
VERDICT_HD float KeptProb(float z, float row_max, float threshold, float mass) {
  if (!(z >= threshold)) return 0.0f;
  return sampling_math::FDiv(sampling_math::ExpNonPositive(sampling_math::FSub(z, row_max)), mass);
}

// q_max, the largest p of the row. exp(z - max) is exactly 1 at the argmax
// and at most 1 elsewhere, and division by the mass is monotone, so the
// largest p is 1 / mass: no pass over the row is needed to find it.
VERDICT_HD float Signal(uint64_t kept_mass) {
  return sampling_math::FDiv(1.0f, sampling_math::FixedToFloat(kept_mass));
}

// The Philox numbers of the proposal race for ids 4 * group .. 4 * group + 3.
VERDICT_HD PhiloxBlock ProposalBits(uint64_t seed, int64_t position, uint32_t group) {
  return PhiloxDraw(seed, position, 0, RandomStream::kDraft, group);
}

}  // namespace draft_internal
}  // namespace verdict

#endif  // VERDICT_KERNELS_DRAFT_SAMPLER_INTERNAL_H_
