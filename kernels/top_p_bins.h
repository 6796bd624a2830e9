// Top-p's histograms of counts, shared by the verify and draft samplers'
// kernels: ids binned by their distance d = max - z to the row maximum, at
// `scale` bins per nat (a power of two, so d * scale is exact and a bin is
// exactly the interval [n / scale, (n + 1) / scale) of d). The first level
// has 64 bins per nat from the maximum (bin 0 holds it; everything 2047/64
// or more below it goes to the last bin); a bin's weights exp(-d) lie within
// a factor e^(1/64) of each other, so counts alone bound every bin's mass to
// 1.6%, and the bin of the top-p threshold lies between the first bin whose
// upper bound through it reaches the limit and the last whose lower bound
// below it stays under it. Only those candidate bins' ids need an exact
// selection.
//
// The bin is monotone in z (FSub rounds monotonically, the scaling is
// exact): an id in a lower bin has a strictly larger z.
#ifndef VERDICT_KERNELS_TOP_P_BINS_H_
#define VERDICT_KERNELS_TOP_P_BINS_H_

#include <cmath>
#include <cstdint>

#include "kernels/sampling_math.h"

namespace verdict {
namespace top_p_bins {

constexpr int kFineBins = 2048;
constexpr float kFirstLevelScale = 64.0f;

VERDICT_HD float ScaledDistance(float z, float row_max, float scale) {
  return sampling_math::FMul(sampling_math::FSub(row_max, z), scale);
}

VERDICT_HD uint32_t FirstLevelBin(float z, float row_max) {
  const float x = ScaledDistance(z, row_max, kFirstLevelScale);
  return x < static_cast<float>(kFineBins - 1) ? static_cast<uint32_t>(x) : kFineBins - 1u;
}

// Bounds on the fixed-point weight FixedExpNonPositive(-d) of an id whose
// scaled distance lies in [n, n + 1), from exp(-n / scale) and exp(-(n + 1)
// / scale) (in double): widened by far more than the exponential's few ulp
// and the rounding to an integer.
VERDICT_HD double EdgeExp(int n, float scale) { return exp(-static_cast<double>(n) / scale); }
VERDICT_HD double WeightBelow(double exp_far_edge) {
  return fmax(0.0, 1099511627776.0 * exp_far_edge * (1.0 - 1e-5) - 1.0);
}
VERDICT_HD double WeightAbove(double exp_near_edge) {
  return 1099511627776.0 * exp_near_edge * (1.0 + 1e-5) + 1.0;
}
// Whether an id at scaled distance n or more may weigh anything: below 0.5
// the weight rounds to 0 (to nearest). The top-p threshold weighs something
// (a threshold of weight 0 would leave the whole kept mass above it), so its
// bin is one of these.
VERDICT_HD bool MayWeigh(int n, float scale) {
  return 1099511627776.0 * EdgeExp(n, scale) * (1.0 + 1e-5) >= 0.5;
}

}  // namespace top_p_bins
}  // namespace verdict

#endif  // VERDICT_KERNELS_TOP_P_BINS_H_
