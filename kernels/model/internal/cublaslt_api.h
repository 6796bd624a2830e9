// cuBLASLt, loaded with dlopen on first use instead of linked.
//
// cuBLASLt carries about 94 KB of static thread-local storage. Linked into
// the binary, that storage is carved out of every thread's stack, and
// libraries that start threads with small fixed stacks (civetweb, under the
// HTTP server) then fail to create them. Loaded at run time its storage is
// allocated per thread on demand, and the binary also runs on machines
// without cuBLAS as long as the CPU backend is used.
#ifndef VERDICT_KERNELS_MODEL_INTERNAL_CUBLASLT_API_H_
#define VERDICT_KERNELS_MODEL_INTERNAL_CUBLASLT_API_H_

#include <cublasLt.h>

#include "absl/status/statusor.h"

namespace verdict {
namespace model_internal {

// The cuBLASLt entry points the Gemm uses.
struct CublasLtApi {
  decltype(&cublasLtCreate) Create;
  decltype(&cublasLtDestroy) Destroy;
  decltype(&cublasLtGetStatusName) GetStatusName;
  decltype(&cublasLtGetStatusString) GetStatusString;
  decltype(&cublasLtMatmul) Matmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
};

// Loads the library once (thread-safe); later calls return the same table,
// or the same error naming the library and the missing symbol.
absl::StatusOr<const CublasLtApi*> LoadCublasLt();

}  // namespace model_internal
}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_INTERNAL_CUBLASLT_API_H_
