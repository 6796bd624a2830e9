// Host-side storage for one verify step: owns the arrays that VerifyInputs
// and VerifyOutputs point into, and builds the flat layout of seed 000 from
// per-request pieces. Used by the `verdict sample` tool, the tests and the
// benchmark.
#ifndef VERDICT_KERNELS_VERIFY_STEP_H_
#define VERDICT_KERNELS_VERIFY_STEP_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/verify_sampler.h"

namespace verdict {

// One request of a step, in host form.
struct VerifyRequest {
  // seqlen_q rows of vocab_size target logits each.
  std::vector<std::vector<float>> logits;
  // seqlen_q - 1 drafts: draft k is verified by row k.
  std::vector<int32_t> draft_token_ids;
  // Dense draft distributions, one per draft (dense steps).
  std::vector<std::vector<float>> draft_probs;
  // Sparse draft distributions, one list of (id, p) per draft (sparse steps).
  std::vector<std::vector<std::pair<int32_t, float>>> draft_topk;
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  int64_t position = 0;
  int32_t verify_len = -1;
  std::vector<int32_t> stop_token_ids;
  // Optional, one per row (-1 = none); empty = no overrides.
  std::vector<int32_t> golden_token_ids;
  // Structured-output bitmasks: (local step, bitmask_words words).
  std::vector<std::pair<int32_t, std::vector<uint32_t>>> bitmasks;
};

// Bitmask words allowing exactly `ids`.
std::vector<uint32_t> BitmaskAllowing(int32_t vocab_size, const std::vector<int32_t>& ids);

class HostVerifyStep {
 public:
  // sparse: draft distributions as top-k lists (padded with (0, 0) entries,
  // which add nothing), otherwise dense rows.
  HostVerifyStep(int32_t vocab_size, SamplerConfig config, bool sparse = false);

  // Appends a request; returns its index.
  int32_t Add(const VerifyRequest& request);

  // Stores the logits as bfloat16 (rounded to nearest even) from now on.
  void UseBFloat16Logits();

  // A view of the arrays (valid while this object lives and is not changed).
  VerifyInputs Inputs() const;

  int32_t num_requests() const { return static_cast<int32_t>(seqlen_q_.size()); }
  int32_t total_q() const { return static_cast<int32_t>(golden_.size()); }
  int32_t vocab_size() const { return vocab_size_; }

  // Raw arrays, for tests that corrupt one field and for device copies.
  std::vector<float>& logits() { return logits_; }
  std::vector<int32_t>& draft_token_ids() { return draft_token_ids_; }
  std::vector<float>& draft_probs() { return draft_probs_; }
  std::vector<int32_t>& first_token_positions() { return ftp_; }
  std::vector<int32_t>& seqlen_q() { return seqlen_q_; }
  std::vector<float>& temperatures() { return temperatures_; }
  std::vector<int32_t>& golden_token_ids() { return golden_; }
  std::vector<int32_t>& stop_token_ids() { return stop_ids_; }
  std::vector<int32_t>& draft_topk_ids() { return topk_ids_; }
  const std::vector<uint16_t>& logits_bf16() const { return logits_bf16_; }
  const std::vector<int32_t>& bitmask_request_indices() const { return mask_requests_; }
  const std::vector<int32_t>& bitmask_steps() const { return mask_steps_; }
  const std::vector<uint32_t>& bitmask_bits() const { return mask_bits_; }
  const std::vector<float>& draft_topk_probs() const { return topk_probs_; }
  const std::vector<int64_t>& positions() const { return positions_; }
  const std::vector<int32_t>& verify_lens() const { return verify_lens_; }
  const std::vector<int32_t>& top_ks() const { return top_ks_; }
  const std::vector<float>& top_ps() const { return top_ps_; }
  const std::vector<float>& min_ps() const { return min_ps_; }
  const std::vector<uint64_t>& seeds() const { return seeds_; }
  const std::vector<int32_t>& stop_token_offsets() const { return stop_offsets_; }
  bool sparse() const { return sparse_; }
  int32_t draft_topk() const { return draft_topk_; }
  const SamplerConfig& config() const { return config_; }
  SamplerConfig& mutable_config() { return config_; }

 private:
  int32_t vocab_size_;
  SamplerConfig config_;
  bool sparse_;
  bool bf16_ = false;
  std::vector<float> logits_;
  std::vector<uint16_t> logits_bf16_;
  std::vector<int32_t> ftp_, seqlen_q_, verify_lens_, top_ks_;
  std::vector<int64_t> positions_;
  std::vector<int32_t> draft_token_ids_;
  std::vector<float> draft_probs_;
  int32_t draft_topk_ = 0;
  std::vector<std::vector<std::pair<int32_t, float>>> topk_lists_;
  std::vector<int32_t> topk_ids_;
  std::vector<float> topk_probs_;
  std::vector<float> temperatures_, top_ps_, min_ps_;
  std::vector<uint64_t> seeds_;
  std::vector<int32_t> mask_requests_, mask_steps_;
  std::vector<uint32_t> mask_bits_;
  std::vector<int32_t> golden_;
  std::vector<int32_t> stop_offsets_{0};
  std::vector<int32_t> stop_ids_;
};

// Output arrays sized for a step.
struct HostVerifyOutputs {
  HostVerifyOutputs(const VerifyInputs& inputs, int32_t confidence_stride = 0);
  VerifyOutputs View();

  std::vector<int32_t> row_to_req, local_step;
  std::vector<uint8_t> is_verify, raw_accept, accept, is_final;
  std::vector<int32_t> verified_token_ids, candidate_token_ids;
  std::vector<float> token_logprobs;
  std::vector<int32_t> last_valid_offset, sampled_token_ids;
  std::vector<uint8_t> emitted_stop_token;
  std::vector<int32_t> num_generated_tokens, num_verified_tokens;
  std::vector<float> next_draft_confidences;
  int32_t confidence_stride;
  VerifyErrorRecord error;
};

}  // namespace verdict

#endif  // VERDICT_KERNELS_VERIFY_STEP_H_
