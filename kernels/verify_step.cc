#include "kernels/verify_step.h"

#include <algorithm>

#include "kernels/bf16.h"

namespace verdict {

std::vector<uint32_t> BitmaskAllowing(int32_t vocab_size, const std::vector<int32_t>& ids) {
  std::vector<uint32_t> words((vocab_size + 31) / 32, 0u);
  for (const int32_t id : ids) words[id >> 5] |= 1u << (id & 31);
  return words;
}

HostVerifyStep::HostVerifyStep(int32_t vocab_size, SamplerConfig config, bool sparse)
    : vocab_size_(vocab_size), config_(config), sparse_(sparse) {}

void HostVerifyStep::UseBFloat16Logits() {
  bf16_ = true;
  logits_bf16_.resize(logits_.size());
  for (size_t i = 0; i < logits_.size(); ++i) logits_bf16_[i] = FloatToBf16(logits_[i]);
}

int32_t HostVerifyStep::Add(const VerifyRequest& request) {
  const int32_t r = num_requests();
  const int32_t seqlen = static_cast<int32_t>(request.logits.size());
  ftp_.push_back(total_q());
  seqlen_q_.push_back(seqlen);
  positions_.push_back(request.position);
  verify_lens_.push_back(request.verify_len);
  temperatures_.push_back(request.temperature);
  top_ks_.push_back(request.top_k);
  top_ps_.push_back(request.top_p);
  min_ps_.push_back(request.min_p);
  seeds_.push_back(request.seed);
  for (int32_t k = 0; k < seqlen; ++k) {
    std::vector<float> row = request.logits[k];
    row.resize(vocab_size_, 0.0f);
    logits_.insert(logits_.end(), row.begin(), row.end());
    if (bf16_) {
      for (const float x : row) logits_bf16_.push_back(FloatToBf16(x));
    }
    golden_.push_back(k < static_cast<int32_t>(request.golden_token_ids.size())
                          ? request.golden_token_ids[k]
                          : -1);
  }
  for (int32_t k = 0; k + 1 < seqlen; ++k) {
    draft_token_ids_.push_back(
        k < static_cast<int32_t>(request.draft_token_ids.size()) ? request.draft_token_ids[k] : 0);
    if (sparse_) {
      topk_lists_.push_back(k < static_cast<int32_t>(request.draft_topk.size())
                                ? request.draft_topk[k]
                                : std::vector<std::pair<int32_t, float>>{});
    } else {
      std::vector<float> p = k < static_cast<int32_t>(request.draft_probs.size())
                                 ? request.draft_probs[k]
                                 : std::vector<float>{};
      p.resize(vocab_size_, 0.0f);
      draft_probs_.insert(draft_probs_.end(), p.begin(), p.end());
    }
  }
  if (sparse_) {
    // Re-pack every list to the longest one.
    for (const auto& list : topk_lists_) {
      draft_topk_ = std::max(draft_topk_, static_cast<int32_t>(list.size()));
    }
    draft_topk_ = std::max(draft_topk_, 1);
    topk_ids_.assign(topk_lists_.size() * draft_topk_, 0);
    topk_probs_.assign(topk_lists_.size() * draft_topk_, 0.0f);
    for (size_t j = 0; j < topk_lists_.size(); ++j) {
      for (size_t i = 0; i < topk_lists_[j].size(); ++i) {
        topk_ids_[j * draft_topk_ + i] = topk_lists_[j][i].first;
        topk_probs_[j * draft_topk_ + i] = topk_lists_[j][i].second;
      }
    }
  }
  stop_ids_.insert(stop_ids_.end(), request.stop_token_ids.begin(), request.stop_token_ids.end());
  stop_offsets_.push_back(static_cast<int32_t>(stop_ids_.size()));
  for (const auto& [step, words] : request.bitmasks) {
    mask_requests_.push_back(r);
    mask_steps_.push_back(step);
    std::vector<uint32_t> w = words;
    w.resize((vocab_size_ + 31) / 32, 0u);
    mask_bits_.insert(mask_bits_.end(), w.begin(), w.end());
  }
  return r;
}

VerifyInputs HostVerifyStep::Inputs() const {
  VerifyInputs in;
  in.num_requests = num_requests();
  in.total_q = total_q();
  in.vocab_size = vocab_size_;
  in.logits = bf16_ ? static_cast<const void*>(logits_bf16_.data())
                    : static_cast<const void*>(logits_.data());
  in.logits_dtype = bf16_ ? LogitsDtype::kBFloat16 : LogitsDtype::kFloat32;
  in.first_token_positions = ftp_.data();
  in.seqlen_q = seqlen_q_.data();
  in.positions = positions_.data();
  in.verify_lens = verify_lens_.data();
  in.draft_token_ids = draft_token_ids_.data();
  if (sparse_) {
    in.draft_topk_ids = topk_ids_.data();
    in.draft_topk_probs = topk_probs_.data();
    in.draft_topk = draft_topk_;
  } else {
    in.draft_probs = draft_probs_.data();
    in.draft_vocab_size = vocab_size_;
  }
  in.temperatures = temperatures_.data();
  in.top_ks = top_ks_.data();
  in.top_ps = top_ps_.data();
  in.min_ps = min_ps_.data();
  in.seeds = seeds_.data();
  in.num_bitmasks = static_cast<int32_t>(mask_requests_.size());
  if (in.num_bitmasks > 0) {
    in.bitmask_request_indices = mask_requests_.data();
    in.bitmask_steps = mask_steps_.data();
    in.bitmask_bits = mask_bits_.data();
    in.bitmask_words = (vocab_size_ + 31) / 32;
  }
  in.golden_token_ids = golden_.data();
  in.stop_token_offsets = stop_offsets_.data();
  in.stop_token_ids = stop_ids_.data();
  in.config = config_;
  return in;
}

HostVerifyOutputs::HostVerifyOutputs(const VerifyInputs& in, int32_t stride)
    : row_to_req(in.total_q),
      local_step(in.total_q),
      is_verify(in.total_q),
      raw_accept(in.total_q),
      accept(in.total_q),
      is_final(in.total_q),
      verified_token_ids(in.total_q),
      candidate_token_ids(in.total_q),
      token_logprobs(in.total_q),
      last_valid_offset(in.num_requests),
      sampled_token_ids(in.num_requests),
      emitted_stop_token(in.num_requests),
      num_generated_tokens(std::max(in.config.nextn, 0)),
      num_verified_tokens(std::max(in.config.nextn, 0)),
      next_draft_confidences(static_cast<size_t>(in.num_requests) * stride, 1.0f),
      confidence_stride(stride) {}

VerifyOutputs HostVerifyOutputs::View() {
  VerifyOutputs out;
  out.row_to_req = row_to_req.data();
  out.local_step = local_step.data();
  out.is_verify = is_verify.data();
  out.raw_accept = raw_accept.data();
  out.accept = accept.data();
  out.is_final = is_final.data();
  out.verified_token_ids = verified_token_ids.data();
  out.candidate_token_ids = candidate_token_ids.data();
  out.token_logprobs = token_logprobs.data();
  out.last_valid_offset = last_valid_offset.data();
  out.sampled_token_ids = sampled_token_ids.data();
  out.emitted_stop_token = emitted_stop_token.data();
  out.num_generated_tokens = num_generated_tokens.data();
  out.num_verified_tokens = num_verified_tokens.data();
  if (confidence_stride > 0) {
    out.next_draft_confidences = next_draft_confidences.data();
    out.confidence_stride = confidence_stride;
  }
  out.error = &error;
  return out;
}

}  // namespace verdict
