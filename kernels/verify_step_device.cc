#include "kernels/verify_step_device.h"

#include <cuda_runtime_api.h>

#include <type_traits>

#include "kernels/cuda_check.h"

namespace verdict {

DeviceBuffers::~DeviceBuffers() {
  for (void* p : allocations_) cudaFree(p);
}

absl::StatusOr<void*> DeviceBuffers::Upload(const void* host, size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  VERDICT_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  allocations_.push_back(p);
  if (host != nullptr) {
    VERDICT_CUDA_RETURN_IF_ERROR(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
  } else {
    VERDICT_CUDA_RETURN_IF_ERROR(cudaMemset(p, 0, bytes));
  }
  return p;
}

#define VERDICT_ASSIGN_OR_RETURN(lhs, expr) \
  do {                                      \
    auto verdict_value = (expr);            \
    if (!verdict_value.ok()) return verdict_value.status(); \
    lhs = static_cast<decltype(lhs)>(*verdict_value); \
  } while (0)

absl::StatusOr<std::unique_ptr<DeviceVerifyStep>> DeviceVerifyStep::Create(
    const HostVerifyStep& host) {
  auto step = std::unique_ptr<DeviceVerifyStep>(new DeviceVerifyStep());
  DeviceBuffers& b = step->buffers_;
  const VerifyInputs h = host.Inputs();
  VerifyInputs& d = step->inputs_;
  d = h;  // scalars; every pointer is replaced below
  const size_t logits = static_cast<size_t>(h.total_q) * h.vocab_size;
  if (h.logits_dtype == LogitsDtype::kBFloat16) {
    VERDICT_ASSIGN_OR_RETURN(d.logits, b.Upload(h.logits, logits * sizeof(uint16_t)));
  } else {
    VERDICT_ASSIGN_OR_RETURN(d.logits, b.Upload(h.logits, logits * sizeof(float)));
  }
  HostVerifyStep& m = const_cast<HostVerifyStep&>(host);
  VERDICT_ASSIGN_OR_RETURN(d.first_token_positions, b.Upload(m.first_token_positions()));
  VERDICT_ASSIGN_OR_RETURN(d.seqlen_q, b.Upload(m.seqlen_q()));
  VERDICT_ASSIGN_OR_RETURN(d.positions, b.Upload(host.positions()));
  VERDICT_ASSIGN_OR_RETURN(d.verify_lens, b.Upload(host.verify_lens()));
  VERDICT_ASSIGN_OR_RETURN(d.draft_token_ids, b.Upload(m.draft_token_ids()));
  if (host.sparse()) {
    VERDICT_ASSIGN_OR_RETURN(d.draft_topk_ids, b.Upload(m.draft_topk_ids()));
    VERDICT_ASSIGN_OR_RETURN(d.draft_topk_probs, b.Upload(host.draft_topk_probs()));
  } else {
    VERDICT_ASSIGN_OR_RETURN(d.draft_probs, b.Upload(m.draft_probs()));
  }
  VERDICT_ASSIGN_OR_RETURN(d.temperatures, b.Upload(m.temperatures()));
  VERDICT_ASSIGN_OR_RETURN(d.top_ks, b.Upload(host.top_ks()));
  VERDICT_ASSIGN_OR_RETURN(d.top_ps, b.Upload(host.top_ps()));
  VERDICT_ASSIGN_OR_RETURN(d.min_ps, b.Upload(host.min_ps()));
  VERDICT_ASSIGN_OR_RETURN(d.seeds, b.Upload(host.seeds()));
  if (h.num_bitmasks > 0) {
    VERDICT_ASSIGN_OR_RETURN(d.bitmask_request_indices, b.Upload(host.bitmask_request_indices()));
    VERDICT_ASSIGN_OR_RETURN(d.bitmask_steps, b.Upload(host.bitmask_steps()));
    VERDICT_ASSIGN_OR_RETURN(d.bitmask_bits, b.Upload(host.bitmask_bits()));
  }
  VERDICT_ASSIGN_OR_RETURN(d.golden_token_ids, b.Upload(m.golden_token_ids()));
  VERDICT_ASSIGN_OR_RETURN(d.stop_token_offsets, b.Upload(host.stop_token_offsets()));
  VERDICT_ASSIGN_OR_RETURN(d.stop_token_ids, b.Upload(m.stop_token_ids()));
  return step;
}

absl::StatusOr<std::unique_ptr<DeviceVerifyOutputs>> DeviceVerifyOutputs::Create(
    const VerifyInputs& in, int32_t stride) {
  auto out = std::unique_ptr<DeviceVerifyOutputs>(new DeviceVerifyOutputs());
  DeviceBuffers& b = out->buffers_;
  VerifyOutputs& o = out->outputs_;
  const size_t rows = in.total_q, reqs = in.num_requests;
  const size_t slots = in.config.nextn > 0 ? in.config.nextn : 0;
  VERDICT_ASSIGN_OR_RETURN(o.row_to_req, b.Upload(nullptr, rows * 4));
  VERDICT_ASSIGN_OR_RETURN(o.local_step, b.Upload(nullptr, rows * 4));
  VERDICT_ASSIGN_OR_RETURN(o.is_verify, b.Upload(nullptr, rows));
  VERDICT_ASSIGN_OR_RETURN(o.raw_accept, b.Upload(nullptr, rows));
  VERDICT_ASSIGN_OR_RETURN(o.accept, b.Upload(nullptr, rows));
  VERDICT_ASSIGN_OR_RETURN(o.is_final, b.Upload(nullptr, rows));
  VERDICT_ASSIGN_OR_RETURN(o.verified_token_ids, b.Upload(nullptr, rows * 4));
  VERDICT_ASSIGN_OR_RETURN(o.candidate_token_ids, b.Upload(nullptr, rows * 4));
  VERDICT_ASSIGN_OR_RETURN(o.token_logprobs, b.Upload(nullptr, rows * 4));
  VERDICT_ASSIGN_OR_RETURN(o.last_valid_offset, b.Upload(nullptr, reqs * 4));
  VERDICT_ASSIGN_OR_RETURN(o.sampled_token_ids, b.Upload(nullptr, reqs * 4));
  VERDICT_ASSIGN_OR_RETURN(o.emitted_stop_token, b.Upload(nullptr, reqs));
  VERDICT_ASSIGN_OR_RETURN(o.num_generated_tokens, b.Upload(nullptr, slots * 4));
  VERDICT_ASSIGN_OR_RETURN(o.num_verified_tokens, b.Upload(nullptr, slots * 4));
  if (stride > 0) {
    std::vector<float> ones(reqs * stride, 1.0f);
    VERDICT_ASSIGN_OR_RETURN(o.next_draft_confidences, b.Upload(ones));
    o.confidence_stride = stride;
  }
  VERDICT_ASSIGN_OR_RETURN(o.error, b.Upload(nullptr, sizeof(VerifyErrorRecord)));
  VERDICT_ASSIGN_OR_RETURN(o.workspace, b.Upload(nullptr, VerifyWorkspaceBytes(in.total_q)));
  return out;
}

namespace {

template <typename T>
absl::Status Download(std::vector<T>* host, const T* device) {
  if (host->empty()) return absl::OkStatus();
  VERDICT_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(host->data(), device, host->size() * sizeof(T), cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

}  // namespace

absl::Status DeviceVerifyOutputs::CopyTo(HostVerifyOutputs* h) const {
  const VerifyOutputs& o = outputs_;
  for (absl::Status s : {Download(&h->row_to_req, o.row_to_req),
                         Download(&h->local_step, o.local_step),
                         Download(&h->is_verify, o.is_verify),
                         Download(&h->raw_accept, o.raw_accept),
                         Download(&h->accept, o.accept),
                         Download(&h->is_final, o.is_final),
                         Download(&h->verified_token_ids, o.verified_token_ids),
                         Download(&h->candidate_token_ids, o.candidate_token_ids),
                         Download(&h->token_logprobs, o.token_logprobs),
                         Download(&h->last_valid_offset, o.last_valid_offset),
                         Download(&h->sampled_token_ids, o.sampled_token_ids),
                         Download(&h->emitted_stop_token, o.emitted_stop_token),
                         Download(&h->num_generated_tokens, o.num_generated_tokens),
                         Download(&h->num_verified_tokens, o.num_verified_tokens)}) {
    if (!s.ok()) return s;
  }
  if (o.next_draft_confidences != nullptr) {
    if (absl::Status s = Download(&h->next_draft_confidences,
                                  static_cast<const float*>(o.next_draft_confidences));
        !s.ok()) {
      return s;
    }
  }
  VERDICT_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(&h->error, o.error, sizeof(VerifyErrorRecord), cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

}  // namespace verdict
