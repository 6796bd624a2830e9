// CPU twin of the draft sampler: the reference semantics
// (kernels/draft_sampler.h). Each step is written with the arithmetic the
// CUDA kernel uses (kernels/draft_sampler_internal.h, sampling_math.h), and
// every sum is an integer sum, so the kernel reproduces it bit for bit
// whatever order its threads add in.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/draft_sampler.h"
#include "kernels/draft_sampler_internal.h"
#include "kernels/philox.h"
#include "kernels/sampling_math.h"

namespace verdict {
namespace {

using namespace sampling_math;  // NOLINT: the arithmetic vocabulary of this file
using draft_internal::ErrorKey;
using draft_internal::FixedWeight;

constexpr int32_t kNoId = 0x7FFFFFFF;

// Fixed-point mass of the ids with z >= threshold.
uint64_t KeptMass(const std::vector<float>& z, float row_max, float threshold) {
  uint64_t mass = 0;
  for (const float zi : z) {
    if (zi >= threshold) mass += FixedWeight(zi, row_max);
  }
  return mass;
}

// The k-th largest z, counting equal values (0 < k < z.size()).
float TopKThreshold(const std::vector<float>& z, int32_t k) {
  std::vector<float> sorted(z);
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(),
                   std::greater<float>());
  return sorted[k - 1];
}

// The smallest value v among the ids with z >= threshold for which
// mass(z > v) < top_p * kept_mass. Values are visited from the top in groups
// of equal z; mass(z > v) only grows, so the first group that fails ends the
// walk (the largest value always passes: nothing is above it).
float TopPThreshold(const std::vector<float>& z, float row_max, float threshold,
                    uint64_t kept_mass, float top_p) {
  std::vector<float> kept;
  for (const float zi : z) {
    if (zi >= threshold) kept.push_back(zi);
  }
  std::sort(kept.begin(), kept.end(), std::greater<float>());
  const double limit = DMul(static_cast<double>(top_p), FixedToDouble(kept_mass));
  uint64_t above = 0;
  float lowest = kept.front();
  for (size_t i = 0; i < kept.size();) {
    if (!(FixedToDouble(above) < limit)) break;
    lowest = kept[i];
    size_t j = i;
    while (j < kept.size() && kept[j] == kept[i]) above += FixedWeight(kept[j++], row_max);
    i = j;
  }
  return lowest;
}

// Samples one row into `out`; returns its error key (0 if none).
uint64_t SampleRow(const DraftSampleInputs& in, int32_t row, std::vector<float>& z,
                   const DraftSampleOutputs& out) {
  const int32_t v_size = in.vocab_size;
  const float temperature = in.temperatures[row];
  const int32_t top_k = in.top_ks[row];
  const float top_p = in.top_ps[row];
  const float min_p = draft_internal::MinPOf(in, row);
  if (const DraftParam bad = draft_internal::BadParam(temperature, top_k, top_p, min_p);
      bad != DraftParam::kNone) {
    return ErrorKey(row, DraftErrorCode::kBadSamplingParams, static_cast<uint32_t>(bad));
  }
  const bool greedy = temperature == 0.0f;
  const float inv_t = draft_internal::RowInverseTemperature(temperature);

  // z, its maximum and the argmax (ties to the lowest id).
  const float* logits = in.logits + static_cast<int64_t>(row) * v_size;
  float row_max = kNegInf;
  int32_t argmax = kNoId;
  for (int32_t i = 0; i < v_size; ++i) {
    z[i] = ScaleLogit(logits[i], inv_t);
    if (!IsFinite(z[i])) {
      return ErrorKey(row, DraftErrorCode::kNonFiniteLogit, static_cast<uint32_t>(i));
    }
    if (z[i] > row_max) {
      row_max = z[i];
      argmax = i;
    }
  }
  float* probs = out.probs + static_cast<int64_t>(row) * v_size;

  if (greedy) {
    out.signals[row] = draft_internal::Signal(KeptMass(z, row_max, kNegInf));
    std::fill(probs, probs + v_size, 0.0f);
    probs[argmax] = 1.0f;
    out.token_ids[row] = argmax;
    return 0;
  }

  float threshold = MinPThreshold(row_max, min_p);
  if (draft_internal::TopKActive(top_k, v_size)) {
    threshold = std::max(threshold, TopKThreshold(z, top_k));
  }
  uint64_t mass = KeptMass(z, row_max, threshold);
  if (top_p < 1.0f) {
    threshold = TopPThreshold(z, row_max, threshold, mass, top_p);
    mass = KeptMass(z, row_max, threshold);
  }
  const float mass_f = FixedToFloat(mass);
  for (int32_t i = 0; i < v_size; ++i) {
    probs[i] = draft_internal::KeptProb(z[i], row_max, threshold, mass_f);
  }
  out.signals[row] = draft_internal::Signal(mass);

  // Exponential race over p: id i wins with probability p_i.
  float best_key = 0.0f;
  int32_t best_id = kNoId;
  PhiloxBlock bits{};
  for (int32_t i = 0; i < v_size; ++i) {
    if ((i & 3) == 0) {
      bits = draft_internal::ProposalBits(in.seeds[row], in.positions[row],
                                          static_cast<uint32_t>(i >> 2));
    }
    if (probs[i] <= 0.0f) continue;
    const float key = RaceKey(probs[i], RaceExponential(bits.v[i & 3]));
    if (RaceBeats(key, i, best_key, best_id)) {
      best_key = key;
      best_id = i;
    }
  }
  out.token_ids[row] = best_id;  // the argmax has p = 1 / mass > 0: never empty
  return 0;
}

}  // namespace

absl::Status DraftErrorStatus(const DraftErrorRecord& record) {
  if (record.key == 0) return absl::OkStatus();
  const int64_t row = draft_internal::ErrorRow(record.key);
  const uint32_t detail = draft_internal::ErrorDetail(record.key);
  std::string what;
  switch (draft_internal::ErrorCode(record.key)) {
    case DraftErrorCode::kBadSamplingParams: {
      const char* param = detail == static_cast<uint32_t>(DraftParam::kTemperature)
                              ? "temperature (must be finite and >= 0)"
                          : detail == static_cast<uint32_t>(DraftParam::kTopK)
                              ? "top_k (must be >= 0)"
                          : detail == static_cast<uint32_t>(DraftParam::kTopP)
                              ? "top_p (must be in (0, 1])"
                              : "min_p (must be in [0, 1])";
      what = absl::StrCat("bad sampling parameter: ", param);
      break;
    }
    case DraftErrorCode::kNonFiniteLogit:
      what = absl::StrCat("logit of vocabulary id ", detail,
                          " is NaN or infinite (after temperature scaling)");
      break;
    default:
      what = absl::StrCat("unknown error code ",
                          static_cast<uint32_t>(draft_internal::ErrorCode(record.key)));
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("draft sampler: row ", row, ": ", what));
}

namespace draft_internal {

absl::Status CheckShape(const DraftSampleInputs& in, const DraftSampleOutputs* out) {
  if (in.num_rows < 0 || in.vocab_size <= 0 || in.logits == nullptr || out == nullptr ||
      out->token_ids == nullptr || out->probs == nullptr || out->signals == nullptr ||
      in.temperatures == nullptr || in.top_ks == nullptr || in.top_ps == nullptr ||
      in.seeds == nullptr || in.positions == nullptr) {
    return absl::InvalidArgumentError("draft sampler: missing inputs or outputs");
  }
  if (in.vocab_size > kMaxDraftVocabSize) {
    return absl::InvalidArgumentError(absl::StrCat("draft sampler: vocabulary ", in.vocab_size,
                                                   " above ", kMaxDraftVocabSize));
  }
  return absl::OkStatus();
}

}  // namespace draft_internal

absl::Status DraftSampleCpu(const DraftSampleInputs& in, DraftSampleOutputs* out) {
  if (absl::Status shape = draft_internal::CheckShape(in, out); !shape.ok()) return shape;
  std::vector<float> z(in.vocab_size);
  DraftErrorRecord record;
  for (int32_t row = 0; row < in.num_rows && record.key == 0; ++row) {
    record.key = SampleRow(in, row, z, *out);
  }
  if (out->error != nullptr) *out->error = record;
  return DraftErrorStatus(record);
}

}  // namespace verdict
