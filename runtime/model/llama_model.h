// The model forward pass over a ragged batch, and its CPU backend.
//
// A ForwardBatch packs the query tokens of several requests back to back:
// a draft step brings 1 token, a verification gamma + 1, a prefill many.
// Each request's tokens sit at positions start_position ... start + n - 1;
// the step writes their keys and values into the request's cache slots,
// then every query attends to the request's keys at positions <= its own
// (and inside the window on sliding layers). Positions advance by accepted
// tokens only: the caller starts the next step at the first position whose
// token was not accepted, and the rows written for rejected drafts are
// simply written again.
//
// ModelRunner is the seam between the engine and a backend. The CPU backend
// (CreateCpuLlamaModel) is plain float32 C++, built from the CPU twins of
// kernels/model, and the oracle every other backend is tested against.
#ifndef VERDICT_RUNTIME_MODEL_LLAMA_MODEL_H_
#define VERDICT_RUNTIME_MODEL_LLAMA_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "runtime/model/graph_shapes.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/model_config.h"
#include "runtime/model/weights.h"

namespace verdict {

struct ForwardRequest {
  int kv_handle = -1;          // from KvCache::Allocate
  int64_t start_position = 0;  // position of token_ids[0]
  absl::Span<const int32_t> token_ids;  // not owned; alive during Forward
  // Logit rows wanted: the last `num_logits` query tokens (a prefill wants
  // 1, a verification all gamma + 1). -1 means every query token.
  int num_logits = -1;

  int logit_rows() const {
    return num_logits < 0 ? static_cast<int>(token_ids.size()) : num_logits;
  }
};

struct ForwardBatch {
  std::vector<ForwardRequest> requests;
  // Backends with a device_queue() only (the CUDA backend's draft loop): the
  // device address of each request's query token, one token per request, in
  // batch order; token_ids then only give the count. A token that a device
  // sampler just wrote feeds the next pass without a trip to the host.
  const int32_t* device_token_ids = nullptr;
  // False, on backends with a device_queue(): Forward returns once the pass
  // is queued there; the logits (device memory) are written when the queue
  // reaches them, so only work queued after them may read them. Passes with
  // collectives (TP > 1) wait anyway, so that a dead peer is an error.
  bool wait = true;

  int64_t num_tokens() const;
  int64_t num_logit_rows() const;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const ModelConfig& config() const = 0;

  // Runs the batch and writes num_logit_rows() x vocab_size float32 logits,
  // requests in batch order, each request's rows in position order. Every
  // tensor-parallel rank calls Forward with the same batch and receives the
  // same full-vocabulary logits. `logits` is host memory, or device memory
  // on a backend whose logits_on_device_ok() is true. One Forward at a time
  // per model; it returns once the logits are written.
  virtual absl::Status Forward(const ForwardBatch& batch, float* logits) = 0;

  // True when Forward may also write its logits to device memory (the CUDA
  // backend), so that device samplers read them in place.
  virtual bool logits_on_device_ok() const { return false; }

  // The device queue (a cudaStream_t) the passes run on, for work that must
  // follow a pass that did not wait; null on host backends, whose Forward
  // always waits and takes no device token ids.
  virtual void* device_queue() const { return nullptr; }

  // Passes replayed from a captured CUDA graph so far (the CUDA backend);
  // 0 on host backends. Safe to read while another thread runs Forward.
  virtual int64_t graph_replays() const { return 0; }

  // Passes that ran eagerly although CUDA graphs are on, by why (the CUDA
  // backend; 0 on host backends). Safe to read while Forward runs.
  enum class EagerReason {
    kFirstUse,       // a launch shape's first pass, and the pass that captures it
    kPartialLogits,  // only some rows want logits (a prefill): never captured
    kUncapturable,   // the communicator's collectives cannot be captured
    kCaptureFailed,  // the shape's capture was refused: it stays eager
    // larger than the buffers of the graphs captured ahead of serving:
    // growing those would drop every graph
    kOutgrewGraphBuffers,
  };
  static constexpr EagerReason kEagerReasons[] = {
      EagerReason::kFirstUse, EagerReason::kPartialLogits, EagerReason::kUncapturable,
      EagerReason::kCaptureFailed, EagerReason::kOutgrewGraphBuffers};
  static const char* EagerReasonName(EagerReason reason);
  virtual int64_t eager_passes(EagerReason /*reason*/) const { return 0; }

  // Captures the CUDA graphs of these launch shapes ahead of serving, so
  // that no step of theirs runs eagerly on its first use (the CUDA backend
  // with graphs on; host backends do nothing). Each shape runs once eagerly
  // on phantom requests only, which touch no request's keys, then is
  // captured. `progress` (if set) is called after each shape with the
  // number done. Every tensor-parallel rank calls it with the same shapes.
  struct GraphCapture {
    int captured = 0;           // graphs held after it, of these shapes or captured before
    int failed = 0;             // shapes whose capture was refused (retried while serving)
    int64_t buffer_bytes = 0;   // device memory the shapes' step buffers took
    int64_t graph_bytes = 0;    // device memory the graphs took
  };
  virtual absl::StatusOr<GraphCapture> CaptureGraphs(
      const std::vector<GraphShape>& /*shapes*/,
      const std::function<void(int done)>& /*progress*/ = nullptr) {
    return GraphCapture{};
  }
};

struct CpuModelOptions {
  // Threads for the matrix products; 0 = hardware concurrency. Results do
  // not depend on it (each output element is summed in a fixed order).
  int num_threads = 0;
};

// Loads this rank's shard of the weights from `source` and keeps a host KV
// storage for `kv_cache` (which must outlive the model and be built for the
// same model and tp). `comm` may be null for a single rank; otherwise its
// world size is the tensor-parallel degree.
absl::StatusOr<std::unique_ptr<ModelRunner>> CreateCpuLlamaModel(const ModelConfig& config,
                                                                 const WeightSource& source,
                                                                 const KvCache* kv_cache,
                                                                 Communicator* comm,
                                                                 CpuModelOptions options = {});

// Checks a batch against the cache before any work: live handles, positions
// inside each request's reservation, token ids inside the vocabulary, logit
// counts no larger than the query tokens, no handle twice.
absl::Status ValidateForwardBatch(const ForwardBatch& batch, const ModelConfig& config,
                                  const KvCache& kv_cache);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_MODEL_LLAMA_MODEL_H_
