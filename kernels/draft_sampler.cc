#include "kernels/draft_sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/philox.h"
#include "kernels/sampling_math.h"

namespace verdict {
namespace {

// Softmax of z over the ids with z >= threshold, in double for the sums.
void KeptSoftmax(const std::vector<float>& z, float threshold, float* probs) {
  const float max_z = *std::max_element(z.begin(), z.end());
  double sum = 0;
  for (float zi : z) {
    if (zi >= threshold) sum += std::exp(static_cast<double>(zi) - max_z);
  }
  for (size_t i = 0; i < z.size(); ++i) {
    probs[i] = z[i] >= threshold
                   ? static_cast<float>(std::exp(static_cast<double>(z[i]) - max_z) / sum)
                   : 0.0f;
  }
}

}  // namespace

absl::Status DraftSampleCpu(const DraftSampleInputs& in, DraftSampleOutputs* out) {
  if (in.num_rows < 0 || in.vocab_size <= 0 || in.logits == nullptr || out == nullptr ||
      out->token_ids == nullptr || out->probs == nullptr || out->signals == nullptr ||
      in.temperatures == nullptr || in.top_ks == nullptr || in.top_ps == nullptr ||
      in.seeds == nullptr || in.positions == nullptr) {
    return absl::InvalidArgumentError("draft sampler: missing inputs or outputs");
  }
  const int32_t v = in.vocab_size;
  std::vector<float> z(v);
  std::vector<int32_t> order(v);
  for (int32_t row = 0; row < in.num_rows; ++row) {
    const float* logits = in.logits + static_cast<int64_t>(row) * v;
    const float temperature = in.temperatures[row];
    const int32_t top_k = in.top_ks[row];
    const float top_p = in.top_ps[row];
    if (!(temperature >= 0.0f) || !std::isfinite(temperature) || top_k < 0 ||
        !(top_p > 0.0f && top_p <= 1.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("draft sampler: row ", row, ": bad sampling parameters (temperature ",
                       temperature, ", top_k ", top_k, ", top_p ", top_p, ")"));
    }
    for (int32_t i = 0; i < v; ++i) {
      if (!std::isfinite(logits[i])) {
        return absl::InvalidArgumentError(absl::StrCat("draft sampler: row ", row,
                                                       ": non-finite logit at id ", i));
      }
    }
    float* probs = out->probs + static_cast<int64_t>(row) * v;

    if (temperature == 0.0f) {
      const int32_t argmax =
          static_cast<int32_t>(std::max_element(logits, logits + v) - logits);  // first max
      std::vector<float> t1(logits, logits + v);
      KeptSoftmax(t1, -INFINITY, probs);
      out->signals[row] = probs[argmax];
      std::fill(probs, probs + v, 0.0f);
      probs[argmax] = 1.0f;
      out->token_ids[row] = argmax;
      continue;
    }

    const float inv_t = sampling_math::InverseTemperature(temperature);
    for (int32_t i = 0; i < v; ++i) z[i] = sampling_math::ScaleLogit(logits[i], inv_t);
    float threshold = -INFINITY;
    if (top_k > 0 && top_k < v) {
      std::vector<float> sorted(z);
      std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(),
                       std::greater<float>());
      threshold = sorted[top_k - 1];
    }
    KeptSoftmax(z, threshold, probs);
    if (top_p < 1.0f) {
      // Largest first; equal values enter together so ties are kept as one.
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return z[a] > z[b]; });
      double mass = 0;
      float cut = threshold;
      for (int32_t i = 0; i < v; ++i) {
        const float value = z[order[i]];
        if (value < threshold) break;  // outside the top-k set
        mass += probs[order[i]];
        cut = value;
        if (mass >= top_p && (i + 1 == v || z[order[i + 1]] < value)) break;
      }
      KeptSoftmax(z, cut, probs);
    }
    out->signals[row] = *std::max_element(probs, probs + v);

    // Exponential race over p: id i wins with probability p_i.
    float best_key = 0.0f;
    int32_t best_id = -1;
    PhiloxBlock bits{};
    for (int32_t i = 0; i < v; ++i) {
      if ((i & 3) == 0) {
        bits = PhiloxDraw(in.seeds[row], in.positions[row], 0, RandomStream::kDraft, i >> 2);
      }
      if (probs[i] <= 0.0f) continue;
      const float key =
          sampling_math::RaceKey(probs[i], sampling_math::RaceExponential(bits.v[i & 3]));
      if (sampling_math::RaceBeats(key, i, best_key, best_id)) {
        best_key = key;
        best_id = i;
      }
    }
    out->token_ids[row] = best_id;
  }
  return absl::OkStatus();
}

}  // namespace verdict
