#include "kernels/model/internal/cublaslt_api.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace verdict {
namespace model_internal {
namespace {

// The soname of the cuBLASLt this build was compiled against.
std::string LibraryName() { return absl::StrCat("libcublasLt.so.", CUBLAS_VER_MAJOR); }

absl::StatusOr<CublasLtApi> Load() {
  const std::string name = LibraryName();
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* error = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load ", name, " (the CUDA backend needs cuBLAS): ",
                     error != nullptr ? error : "unknown error"));
  }
  CublasLtApi api;
  absl::Status status;
  auto bind = [&](auto& field, const char* symbol) {
    void* address = dlsym(library, symbol);
    if (address == nullptr && status.ok()) {
      status = absl::FailedPreconditionError(absl::StrCat(name, " has no symbol ", symbol));
    }
    field = reinterpret_cast<std::remove_reference_t<decltype(field)>>(address);
  };
  bind(api.Create, "cublasLtCreate");
  bind(api.Destroy, "cublasLtDestroy");
  bind(api.GetStatusName, "cublasLtGetStatusName");
  bind(api.GetStatusString, "cublasLtGetStatusString");
  bind(api.Matmul, "cublasLtMatmul");
  bind(api.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  bind(api.MatmulDescCreate, "cublasLtMatmulDescCreate");
  bind(api.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
  bind(api.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  bind(api.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  bind(api.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  bind(api.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  bind(api.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  bind(api.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  if (!status.ok()) return status;
  return api;
}

}  // namespace

absl::StatusOr<const CublasLtApi*> LoadCublasLt() {
  // Loaded once, never unloaded: plans and handles may outlive any caller.
  static const absl::StatusOr<CublasLtApi>* const loaded =
      new absl::StatusOr<CublasLtApi>(Load());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

}  // namespace model_internal
}  // namespace verdict
