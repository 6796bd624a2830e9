// CTA-wide scans shared by the sampler kernels (device code only).
#ifndef VERDICT_KERNELS_BLOCK_SCAN_CUH_
#define VERDICT_KERNELS_BLOCK_SCAN_CUH_

namespace verdict {

// Exclusive prefix sums of two doubles over the CTA's threads, in thread
// order (the same order, so the same roundings, in every CTA). `warp_a` and
// `warp_b` hold one slot per warp of the CTA.
__device__ inline void BlockExclusiveScan2(double* a, double* b, double* warp_a, double* warp_b) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  double ia = *a, ib = *b;
  for (int o = 1; o < 32; o <<= 1) {
    const double ta = __shfl_up_sync(0xFFFFFFFFu, ia, o);
    const double tb = __shfl_up_sync(0xFFFFFFFFu, ib, o);
    if (lane >= o) {
      ia += ta;
      ib += tb;
    }
  }
  if (lane == 31) {
    warp_a[warp] = ia;
    warp_b[warp] = ib;
  }
  __syncthreads();
  double base_a = 0.0, base_b = 0.0;
  for (int w = 0; w < warp; ++w) {
    base_a += warp_a[w];
    base_b += warp_b[w];
  }
  // This thread's exclusive sums: the inclusive sums of the lane before.
  double ea = __shfl_up_sync(0xFFFFFFFFu, ia, 1);
  double eb = __shfl_up_sync(0xFFFFFFFFu, ib, 1);
  if (lane == 0) ea = eb = 0.0;
  *a = base_a + ea;
  *b = base_b + eb;
  __syncthreads();
}

}  // namespace verdict

#endif  // VERDICT_KERNELS_BLOCK_SCAN_CUH_
