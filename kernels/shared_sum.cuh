// 64-bit sums in shared memory from native 32-bit atomics (device code only).
#ifndef VERDICT_KERNELS_SHARED_SUM_CUH_
#define VERDICT_KERNELS_SHARED_SUM_CUH_

namespace verdict {

// Adds `value` to the 64-bit counter at `address` (shared memory, 8-byte
// aligned), exactly modulo 2^64 once every adder has finished. On sm_90 a
// 64-bit atomicAdd to shared memory is a compare-and-swap loop
// (ATOMS.CAST.SPIN.64), which retries under contention; here the low word
// takes one native 32-bit add, and the add that wraps it carries one into
// the high word with a second. Each wrap is counted exactly once, by the add
// that caused it, so the final value is the true sum; a read while adds are
// still in flight may see the words out of step, so read only after a
// barrier that follows every add.
__device__ __forceinline__ void SharedAddU64(unsigned long long* address,
                                             unsigned long long value) {
  unsigned int* const words = reinterpret_cast<unsigned int*>(address);  // little-endian
  const unsigned int low = static_cast<unsigned int>(value);
  const unsigned int high = static_cast<unsigned int>(value >> 32);
  unsigned int carry = 0;
  if (low != 0) {
    const unsigned int before = atomicAdd(&words[0], low);
    carry = before + low < before ? 1u : 0u;
  }
  if (high + carry != 0) atomicAdd(&words[1], high + carry);
}

}  // namespace verdict

#endif  // VERDICT_KERNELS_SHARED_SUM_CUH_
