// Gemm on the device through cuBLASLt.
//
// Row-major C[m, n] = A[m, k] W[n, k]^T, read column-major, is the product
// C^T[n, m] = W[n, k] A^T[k, m]: cuBLASLt's "A" is our W seen as a
// column-major k x n matrix and transposed (op T), its "B" is our A seen as
// a column-major k x m matrix (op N), and its D is our C seen as a
// column-major n x m matrix. This TN form is the one cuBLAS's fastest kernels are built for,
// and a bias vector (one value per row of D = per output feature) maps onto
// cuBLASLt's BIAS epilogue directly.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cuda_check.h"
#include "kernels/model/add_bias.h"
#include "kernels/model/gemm.h"
#include "kernels/model/internal/cublaslt_api.h"
#include "kernels/model/silu_and_mul.h"
#include "kernels/model/skinny_gemm.h"

namespace verdict {
namespace {

// The loaded cuBLASLt (model_internal::LoadCublasLt). Gemm::Create loads it
// first, so every other use finds it loaded.
const model_internal::CublasLtApi& Lt() { return **model_internal::LoadCublasLt(); }

absl::Status CublasStatus(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, " failed: ", Lt().GetStatusName(status), ": ",
                                          Lt().GetStatusString(status)));
}

#define VERDICT_CUBLAS_RETURN_IF_ERROR(expr)                            \
  do {                                                                  \
    ::absl::Status verdict_cublas_status = CublasStatus((expr), #expr); \
    if (!verdict_cublas_status.ok()) return verdict_cublas_status;      \
  } while (0)

// The largest power of two (up to 256) dividing the address: what the
// heuristic must assume about the pointer.
uint32_t Alignment(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && (v % align) != 0) align >>= 1;
  return align;
}

enum class OutType { kBf16, kF32 };

// Plans differ by shape, output type, whether bias is requested, and the
// alignments the algorithm may rely on.
using PlanKey = std::tuple<int, int, int, OutType, bool, uint32_t, uint32_t, uint32_t, uint32_t>;

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w_layout = nullptr;
  cublasLtMatrixLayout_t a_layout = nullptr;
  cublasLtMatrixLayout_t c_layout = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool bias_in_epilogue = false;  // else AddBias runs after the matmul

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (c_layout != nullptr) Lt().MatrixLayoutDestroy(c_layout);
    if (a_layout != nullptr) Lt().MatrixLayoutDestroy(a_layout);
    if (w_layout != nullptr) Lt().MatrixLayoutDestroy(w_layout);
    if (op != nullptr) Lt().MatmulDescDestroy(op);
  }
};

}  // namespace

struct Gemm::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int autotune_candidates = 0;
  bool skinny = false;  // GemmOptions::skinny_small_m
  mutable absl::Mutex mu;
  absl::flat_hash_map<PlanKey, std::unique_ptr<Plan>> plans ABSL_GUARDED_BY(mu);

  ~Impl() {
    plans.clear();
    if (workspace != nullptr) cudaFree(workspace);
    if (handle != nullptr) Lt().Destroy(handle);
  }

  // Descriptors and the heuristic's first algorithm for one key. With
  // want_bias, tries the BIAS epilogue first (bf16 outputs only) and falls
  // back to a plain matmul plus AddBias if no algorithm supports it.
  // Times each candidate algorithm on the caller's buffers (the call that
  // follows overwrites c with the chosen algorithm's result) and returns the
  // index of the fastest; 0 when timing is impossible (graph capture).
  int FastestAlgorithm(const Plan& plan, const cublasLtMatmulHeuristicResult_t* results, int count,
                       const void* a, const void* w, void* c, cudaStream_t stream) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (count <= 1 || cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
        capture != cudaStreamCaptureStatusNone) {
      return 0;
    }
    cudaEvent_t start = nullptr, stop = nullptr;
    if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
      if (start != nullptr) cudaEventDestroy(start);
      return 0;
    }
    const float alpha = 1.0f, beta = 0.0f;
    constexpr int kReps = 5;
    int best = -1;
    float best_ms = 0.0f;
    for (int i = 0; i < count; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
      auto run = [&] {
        return Lt().Matmul(handle, plan.op, &alpha, w, plan.w_layout, a, plan.a_layout, &beta, c,
                              plan.c_layout, c, plan.c_layout, &results[i].algo, workspace,
                              workspace_bytes, stream);
      };
      if (run() != CUBLAS_STATUS_SUCCESS) continue;  // warm-up, and skip what fails
      cudaEventRecord(start, stream);
      for (int r = 0; r < kReps; ++r) run();
      cudaEventRecord(stop, stream);
      float ms = 0.0f;
      if (cudaEventSynchronize(stop) != cudaSuccess ||
          cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) {
        continue;
      }
      if (best < 0 || ms < best_ms) {
        best = i;
        best_ms = ms;
      }
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaGetLastError();  // a failed candidate must not leak its error to the caller
    return best < 0 ? 0 : best;
  }

  absl::StatusOr<std::unique_ptr<Plan>> MakePlan(int m, int n, int k, OutType out, bool want_bias,
                                                 const void* a, const void* w, const void* bias,
                                                 void* c, cudaStream_t stream) {
    const bool try_epilogue = want_bias && out == OutType::kBf16;
    for (int attempt = try_epilogue ? 0 : 1; attempt < 2; ++attempt) {
      const bool epilogue = attempt == 0;
      auto plan = std::make_unique<Plan>();
      VERDICT_CUBLAS_RETURN_IF_ERROR(
          Lt().MatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cublasOperation_t trans_w = CUBLAS_OP_T, trans_a = CUBLAS_OP_N;
      VERDICT_CUBLAS_RETURN_IF_ERROR(Lt().MatmulDescSetAttribute(
          plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_w, sizeof(trans_w)));
      VERDICT_CUBLAS_RETURN_IF_ERROR(Lt().MatmulDescSetAttribute(
          plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_a, sizeof(trans_a)));
      if (epilogue) {
        const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
        VERDICT_CUBLAS_RETURN_IF_ERROR(
            Lt().MatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)));
        // The heuristic reads the pointer's alignment from here.
        VERDICT_CUBLAS_RETURN_IF_ERROR(Lt().MatmulDescSetAttribute(
            plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
      }
      const cudaDataType_t c_type = out == OutType::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
      VERDICT_CUBLAS_RETURN_IF_ERROR(
          Lt().MatrixLayoutCreate(&plan->w_layout, CUDA_R_16BF, k, n, k));
      VERDICT_CUBLAS_RETURN_IF_ERROR(
          Lt().MatrixLayoutCreate(&plan->a_layout, CUDA_R_16BF, k, m, k));
      VERDICT_CUBLAS_RETURN_IF_ERROR(Lt().MatrixLayoutCreate(&plan->c_layout, c_type, n, m, n));

      cublasLtMatmulPreference_t pref = nullptr;
      VERDICT_CUBLAS_RETURN_IF_ERROR(Lt().MatmulPreferenceCreate(&pref));
      std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, decltype(&cublasLtMatmulPreferenceDestroy)>
          pref_owner(pref, Lt().MatmulPreferenceDestroy);
      const uint64_t ws = workspace_bytes;
      VERDICT_CUBLAS_RETURN_IF_ERROR(Lt().MatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
      const uint32_t align_w = Alignment(w), align_a = Alignment(a), align_c = Alignment(c);
      VERDICT_CUBLAS_RETURN_IF_ERROR(Lt().MatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_w, sizeof(align_w)));
      VERDICT_CUBLAS_RETURN_IF_ERROR(Lt().MatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_a, sizeof(align_a)));
      VERDICT_CUBLAS_RETURN_IF_ERROR(Lt().MatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
      VERDICT_CUBLAS_RETURN_IF_ERROR(Lt().MatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));

      constexpr int kMaxCandidates = 16;
      cublasLtMatmulHeuristicResult_t results[kMaxCandidates] = {};
      const int wanted = std::clamp(autotune_candidates, 1, kMaxCandidates);
      int found = 0;
      const cublasStatus_t st = Lt().MatmulAlgoGetHeuristic(
          handle, plan->op, plan->w_layout, plan->a_layout, plan->c_layout, plan->c_layout, pref,
          wanted, results, &found);
      if (st == CUBLAS_STATUS_SUCCESS && found > 0 && results[0].state == CUBLAS_STATUS_SUCCESS) {
        const int pick = FastestAlgorithm(*plan, results, found, a, w, c, stream);
        plan->algo = results[pick].algo;
        plan->bias_in_epilogue = epilogue;
        return plan;
      }
      if (!epilogue) {
        return absl::InternalError(absl::StrCat(
            "cuBLASLt found no algorithm for m=", m, " n=", n, " k=", k,
            " out=", out == OutType::kBf16 ? "bf16" : "f32", ": ", Lt().GetStatusName(st)));
      }
    }
    return absl::InternalError("unreachable");
  }

  absl::Status Run(const void* a, const void* w, const uint16_t* bias, void* c, OutType out, int m,
                   int n, int k, cudaStream_t stream) {
    if (m < 0 || n <= 0 || k <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("gemm: bad shape m=", m, " n=", n, " k=", k));
    }
    if (m == 0) return absl::OkStatus();
    const bool want_bias = bias != nullptr;
    const PlanKey key{m,
                      n,
                      k,
                      out,
                      want_bias,
                      Alignment(a),
                      Alignment(w),
                      Alignment(c),
                      want_bias ? Alignment(bias) : 0u};
    absl::MutexLock lock(&mu);
    auto it = plans.find(key);
    if (it == plans.end()) {
      absl::StatusOr<std::unique_ptr<Plan>> plan =
          MakePlan(m, n, k, out, want_bias, a, w, bias, c, stream);
      if (!plan.ok()) return plan.status();
      it = plans.emplace(key, *std::move(plan)).first;
    }
    Plan& plan = *it->second;
    if (plan.bias_in_epilogue) {
      VERDICT_CUBLAS_RETURN_IF_ERROR(Lt().MatmulDescSetAttribute(
          plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    const float alpha = 1.0f, beta = 0.0f;
    VERDICT_CUBLAS_RETURN_IF_ERROR(Lt().Matmul(
        handle, plan.op, &alpha, w, plan.w_layout, a, plan.a_layout, &beta, c, plan.c_layout, c,
        plan.c_layout, &plan.algo, workspace, workspace_bytes, stream));
    if (want_bias && !plan.bias_in_epilogue) {
      return out == OutType::kBf16 ? InvokeAddBias(static_cast<uint16_t*>(c), bias, m, n, stream)
                                   : InvokeAddBias(static_cast<float*>(c), bias, m, n, stream);
    }
    return absl::OkStatus();
  }
};

Gemm::Gemm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Gemm::~Gemm() = default;

absl::StatusOr<std::unique_ptr<Gemm>> Gemm::Create(const GemmOptions& options) {
  if (absl::StatusOr<const model_internal::CublasLtApi*> lt = model_internal::LoadCublasLt();
      !lt.ok()) {
    return lt.status();
  }
  auto impl = std::make_unique<Impl>();
  VERDICT_CUBLAS_RETURN_IF_ERROR(Lt().Create(&impl->handle));
  if (options.workspace_bytes > 0) {
    VERDICT_CUDA_RETURN_IF_ERROR(cudaMalloc(&impl->workspace, options.workspace_bytes));
  }
  impl->workspace_bytes = options.workspace_bytes;
  impl->autotune_candidates = options.autotune_candidates;
  impl->skinny = options.skinny_small_m;
  return std::unique_ptr<Gemm>(new Gemm(std::move(impl)));
}

// Where the skinny kernel beats cuBLASLt: on the H200 it read a 1B model's
// k = 2048 weights faster (qkv 3.58 vs 5.12 us, o_proj 3.09 vs 4.94 us, the
// LM head 123.6 vs 126.1 us) and its k = 8192 down_proj slower (11.28 vs
// 10.46 us): longer weight rows need more loads in flight than it keeps.
constexpr int kSkinnyMaxK = 4096;

bool UseSkinny(bool enabled, int m, int k, const void* a, const void* w) {
  return enabled && k <= kSkinnyMaxK && SkinnyGemmFits(m, k, a, w);
}

absl::Status Gemm::Run(const uint16_t* a, const uint16_t* w, const uint16_t* bias, uint16_t* c,
                       int m, int n, int k, cudaStream_t stream) {
  if (UseSkinny(impl_->skinny, m, k, a, w)) {
    return InvokeSkinnyGemm(a, w, bias, c, m, n, k, stream);
  }
  return impl_->Run(a, w, bias, c, OutType::kBf16, m, n, k, stream);
}

absl::Status Gemm::Run(const uint16_t* a, const uint16_t* w, const uint16_t* bias, float* c, int m,
                       int n, int k, cudaStream_t stream) {
  if (UseSkinny(impl_->skinny, m, k, a, w)) {
    return InvokeSkinnyGemm(a, w, bias, c, m, n, k, stream);
  }
  return impl_->Run(a, w, bias, c, OutType::kF32, m, n, k, stream);
}

absl::Status Gemm::RunGateUpSilu(const uint16_t* a, const uint16_t* w_gate_up,
                                 uint16_t* gate_up_scratch, uint16_t* act, int m, int inter, int k,
                                 cudaStream_t stream) {
  // Exactly where Run(gate_up) would take the skinny kernel (the fused
  // kernel takes the same operands), so that act's bits do not depend on
  // which of the two paths ran.
  if (UseSkinny(impl_->skinny, m, k, a, w_gate_up)) {
    return InvokeSkinnyGateUpSilu(a, w_gate_up, act, m, inter, k, stream);
  }
  if (absl::Status s = Run(a, w_gate_up, nullptr, gate_up_scratch, m, 2 * inter, k, stream);
      !s.ok()) {
    return s;
  }
  return InvokeSiluAndMul(gate_up_scratch, act, m, inter, stream);
}

size_t Gemm::cached_plans() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->plans.size();
}

}  // namespace verdict
