// The CUDA backend of the model: the same forward pass as the CPU backend
// (llama_model.h), on one GPU per tensor-parallel rank, with bf16 weights and
// KV cache, cuBLASLt GEMMs and the kernels of kernels/model.
//
// The residual stream stays float32 on the device; everything a GEMM reads
// is bf16 (kernels/model/README.md walks one layer). Under tensor
// parallelism the row-parallel projections' bf16 partial sums and the
// vocab-parallel embedding's float32 rows are all-reduced, and the LM head's
// vocabulary slices all-gathered, through a device Communicator (NCCL) on
// the model's own stream.
//
// The KV cache geometry and slot assignment come from the engine's KvCache
// (the same bookkeeping as the CPU backend); this backend mirrors it in
// device memory: full-attention layers as paged blocks, sliding-window
// layers as one ring per request (a one-entry block table holding the ring
// index, block size = ring size).
#ifndef VERDICT_RUNTIME_MODEL_CUDA_LLAMA_MODEL_H_
#define VERDICT_RUNTIME_MODEL_CUDA_LLAMA_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/nvlink_all_reduce.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/llama_model.h"
#include "runtime/model/model_config.h"
#include "runtime/model/weights.h"

namespace verdict {

struct CudaModelOptions {
  // CUDA device of this rank; -1 keeps the calling thread's current device
  // (the NCCL communicator has already selected the rank's device).
  int device = -1;
  // Threads that read weight shards (dummy generation, bf16 conversion).
  int load_threads = 0;  // 0: hardware concurrency
  // Replay repeated step shapes from CUDA graphs (passes whose every row
  // wants logits: draft and verify steps; at TP > 1 with their all-reduces,
  // when the communicator can be captured). The same kernels run either
  // way, so the logits are the same bits.
  bool cuda_graphs = true;
  // With cuda_graphs: a graphable pass runs padded to a launch shape that
  // repeats (phantom requests up to a request bucket, tokens up to a
  // multiple of the longest query), so ragged steps replay graphs too. The
  // phantoms touch only a scratch KV block and ring of their own.
  bool pad_graph_shapes = true;
  // With cuda_graphs: the tokens of the largest graphable pass expected
  // (0: unknown). The graphs' buffers are sized for it at the first pass,
  // so that a growing batch does not move them, which would drop every
  // captured graph; a larger pass still grows them.
  int64_t graph_pass_tokens = 0;
  // The longest context (tokens) a graph serves. Passes whose requests'
  // contexts all fit launch the attention for this context and hold block
  // tables this wide on the device, so their graphs do not depend on the
  // contexts' lengths and can be captured ahead of serving
  // (ModelRunner::CaptureGraphs). It applies with cuda_graphs off too, so
  // that the same kernels run either way. 0, or a longer pass: the launch
  // follows the pass's own context, rounded up to 256 tokens.
  int64_t graph_max_context = 0;
  // Products of a few rows run the skinny GEMM (kernels/model/gemm.h,
  // GemmOptions::skinny_small_m): faster for a draft's decode passes, but
  // summed in another order than larger products, so a model's decode rows
  // then differ in the last bits from the same rows in a larger pass. The
  // engine turns it on for the draft only: the target's verify rows must
  // equal its decode rows (greedy speculation equals greedy decoding).
  bool skinny_gemm = false;
  // At TP > 1, if set: all-reduces of at most its max_bytes() run as the
  // one-shot kernel over peer-mapped memory (comm/nvlink_all_reduce.h)
  // instead of NCCL; larger ones stay on NCCL. At TP 2 both give the same
  // bits (one rounded addition). One per model, outliving it: two models'
  // passes may run at once on the device, and each instance holds one
  // exchange buffer.
  NvlinkAllReduce* one_shot_all_reduce = nullptr;
};

// Loads this rank's shard as bf16 into device memory and allocates the
// device KV cache for `kv_cache`'s geometry. `device_comm` is a device
// (NCCL) communicator whose world is the tensor-parallel group, or null for
// one rank. Forward's `logits` may be host memory (as with the CPU backend)
// or device memory of the rank's GPU, where the device samplers read them
// without a round trip.
absl::StatusOr<std::unique_ptr<ModelRunner>> CreateCudaLlamaModel(const ModelConfig& config,
                                                                  const WeightSource& source,
                                                                  const KvCache* kv_cache,
                                                                  Communicator* device_comm,
                                                                  CudaModelOptions options = {});

// The name CUDA gives the calling thread's current device ("NVIDIA H200"),
// which keys the cost tables measured on it.
absl::StatusOr<std::string> CudaDeviceName();

}  // namespace verdict

#endif  // VERDICT_RUNTIME_MODEL_CUDA_LLAMA_MODEL_H_
