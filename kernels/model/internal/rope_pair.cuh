// The RoPE rotation of one pair (x[i], x[i + head_dim / 2]) of a bf16 head
// (rope.h gives the convention) and where a pair sits, shared by RopeKernel
// and the fused RoPE + KV-cache write kernel. Both must produce the same bits: the fused op's
// contract is that it equals InvokeRope then InvokeKvCacheWrite. Keeping the
// one expression in one place means both kernels compile the same arithmetic
// (the same sincosf and the same candidates for FMA contraction). Device
// code only (included from .cu files).
#ifndef VERDICT_KERNELS_MODEL_INTERNAL_ROPE_PAIR_CUH_
#define VERDICT_KERNELS_MODEL_INTERNAL_ROPE_PAIR_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace verdict {
namespace model_internal {

struct RopePair {
  __nv_bfloat16 lo;  // new x[i]
  __nv_bfloat16 hi;  // new x[i + head_dim / 2]
};

// Rotates (lo, hi) by the angle position * inv_freq, computed in float as HF
// does. sincosf (not __sincosf) keeps full accuracy at large angles (long
// contexts).
__device__ __forceinline__ RopePair RotateRopePair(__nv_bfloat16 lo, __nv_bfloat16 hi,
                                                   int32_t position, float inv_freq) {
  const float a = __bfloat162float(lo);
  const float b = __bfloat162float(hi);
  float s, c;
  sincosf(static_cast<float>(position) * inv_freq, &s, &c);
  return {__float2bfloat16(a * c - b * s), __float2bfloat16(b * c + a * s)};
}

// Where rotated pair `pair` of a token sits in q or k (rope.h's layout):
// pairs run over the q heads, then the k heads, head_dim / 2 to a head. The
// pair is (base[i], base[i + head_dim / 2]); head counts the q heads first.
struct RopePairSlot {
  __nv_bfloat16* base;
  int head;
  int i;
};

__device__ __forceinline__ RopePairSlot LocateRopePair(__nv_bfloat16* q, int64_t q_token_stride,
                                                       __nv_bfloat16* k, int64_t k_token_stride,
                                                       int num_heads, int head_dim, int token,
                                                       int pair) {
  const int half = head_dim / 2;
  const int head = pair / half;
  const int i = pair - head * half;
  __nv_bfloat16* base =
      head < num_heads
          ? q + token * q_token_stride + static_cast<int64_t>(head) * head_dim
          : k + token * k_token_stride + static_cast<int64_t>(head - num_heads) * head_dim;
  return {base, head, i};
}

}  // namespace model_internal
}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_INTERNAL_ROPE_PAIR_CUH_
