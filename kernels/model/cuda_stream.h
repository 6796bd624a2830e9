// Declares cudaStream_t exactly as the CUDA runtime does, so that the model
// ops' headers (included by the CPU backend too) need no CUDA header. The
// repeated typedef is legal C++ when a file also includes cuda_runtime.h.
#ifndef VERDICT_KERNELS_MODEL_CUDA_STREAM_H_
#define VERDICT_KERNELS_MODEL_CUDA_STREAM_H_

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

#endif  // VERDICT_KERNELS_MODEL_CUDA_STREAM_H_
