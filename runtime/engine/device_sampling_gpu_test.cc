// DeviceSampling against the CPU samplers on the same logits: the draft
// steps' tokens and signals, and every verify output, bit for bit, through
// the draft-distribution store and its packing (requests verifying
// different numbers of drafts, one without drafts, store rows out of order).
#include "runtime/engine/device_sampling.h"

#include <cuda_runtime_api.h>

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/draft_sampler.h"
#include "kernels/verify_sampler.h"
#include "kernels/verify_step.h"

namespace verdict {
namespace {

constexpr int kVocab = 1531;
constexpr int kGamma = 4;

std::vector<float> RandomLogits(std::mt19937& rng, int rows) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(rows) * kVocab);
  for (float& x : logits) x = normal(rng);
  return logits;
}

// Copies `logits` to the device and waits: from pageable memory cudaMemcpy
// may return before the DMA lands, and the sampler's stream is non-blocking.
void UploadLogits(float* device, const std::vector<float>& logits) {
  ASSERT_EQ(
      cudaMemcpy(device, logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice),
      cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(DeviceSamplingGpuTest, MatchesTheCpuSamplers) {
  auto sampling = DeviceSampling::Create(kVocab, kGamma);
  ASSERT_TRUE(sampling.ok()) << sampling.status();
  std::mt19937 rng(5);

  for (int trial = 0; trial < 4; ++trial) {
    // Five speculative rows (store rows 0..4) with mixed sampling settings.
    const int n = 5;
    std::vector<float> temperatures = {0.0f, 1.0f, 0.7f, 1.3f, 1.0f};
    std::vector<int32_t> top_ks = {0, 0, 50, 0, 7};
    std::vector<float> top_ps = {1.0f, 0.9f, 1.0f, 0.8f, 1.0f};
    std::vector<uint64_t> seeds = {11, 12, 13, 14, 15 + static_cast<uint64_t>(trial)};
    std::vector<int32_t> tokens(n * kGamma), cpu_tokens(n);
    std::vector<float> signals(n * kGamma), cpu_signals(n);
    std::vector<float> cpu_probs(static_cast<size_t>(n) * kGamma * kVocab);
    // Pass j samples at position 100 s + trial + j.
    std::vector<int64_t> draft_positions(n);
    for (int s = 0; s < n; ++s) draft_positions[s] = 100 * s + trial;
    DraftSampleInputs draft_params;
    draft_params.num_rows = n;
    draft_params.vocab_size = kVocab;
    draft_params.temperatures = temperatures.data();
    draft_params.top_ks = top_ks.data();
    draft_params.top_ps = top_ps.data();
    draft_params.seeds = seeds.data();
    draft_params.positions = draft_positions.data();
    ASSERT_TRUE((*sampling)->BeginDrafts(draft_params, nullptr).ok());
    for (int j = 0; j < kGamma; ++j) {
      std::vector<int64_t> pass_positions(n);
      for (int s = 0; s < n; ++s) pass_positions[s] = draft_positions[s] + j;
      std::vector<float> logits = RandomLogits(rng, n);
      DraftSampleInputs pass = draft_params;
      pass.logits = logits.data();
      pass.positions = pass_positions.data();
      std::vector<float> step_probs(static_cast<size_t>(n) * kVocab);
      DraftSampleOutputs cpu{cpu_tokens.data(), step_probs.data(), cpu_signals.data()};
      ASSERT_TRUE(DraftSampleCpu(pass, &cpu).ok());
      for (int s = 0; s < n; ++s) {
        std::copy_n(step_probs.data() + static_cast<size_t>(s) * kVocab, kVocab,
                    cpu_probs.data() + (static_cast<size_t>(s) * kGamma + j) * kVocab);
      }
      absl::StatusOr<float*> device_logits = (*sampling)->DraftLogits(n);
      ASSERT_TRUE(device_logits.ok());
      UploadLogits(*device_logits, logits);
      absl::Status s = (*sampling)->SampleDraft(j);
      ASSERT_TRUE(s.ok()) << s;
      // Waiting after every pass (the next pass rewrites the logits): the
      // passes so far come back, the latest last.
      std::vector<int32_t> pass_tokens(static_cast<size_t>(j + 1) * n);
      std::vector<float> pass_signals(static_cast<size_t>(j + 1) * n);
      s = (*sampling)->FinishDrafts(j + 1, pass_tokens.data(), pass_signals.data());
      ASSERT_TRUE(s.ok()) << s;
      const std::vector<int32_t> step_tokens(pass_tokens.end() - n, pass_tokens.end());
      const std::vector<float> step_signals(pass_signals.end() - n, pass_signals.end());
      EXPECT_EQ(step_tokens, cpu_tokens) << "draft step " << j;
      EXPECT_EQ(step_signals, cpu_signals) << "draft step " << j;
      // The same tokens where the next draft pass reads them.
      std::vector<int32_t> on_device(n);
      ASSERT_EQ(cudaMemcpy(on_device.data(), (*sampling)->DraftTokens(j), n * sizeof(int32_t),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
      EXPECT_EQ(on_device, cpu_tokens) << "draft step " << j;
      for (int r = 0; r < n; ++r) tokens[r * kGamma + j] = step_tokens[r];
    }

    // The verify step: four requests over store rows 3, 0, none and 1,
    // verifying 4, 2, 0 and 1 drafts (5, 3, 1 and 2 rows).
    const std::vector<int32_t> store_rows = {3, 0, -1, 1};
    const std::vector<int32_t> seqlen = {kGamma + 1, 3, 1, 2};
    const int b = static_cast<int>(store_rows.size());
    std::vector<int32_t> ftp(b), drafts, cutoff = {kGamma, 1, 0, 1}, stop_offsets = {0, 1, 1, 2, 2},
                                         stop_ids = {tokens[3 * kGamma + 1], 2};
    std::vector<int64_t> positions = {300, 0, 77, 100};
    std::vector<float> v_temps = {temperatures[3], temperatures[0], 1.0f, temperatures[1]};
    std::vector<int32_t> v_topk = {top_ks[3], top_ks[0], 0, top_ks[1]};
    std::vector<float> v_topp = {top_ps[3], top_ps[0], 1.0f, top_ps[1]};
    std::vector<uint64_t> v_seeds = {seeds[3], seeds[0], 99, seeds[1]};
    std::vector<float> packed;
    int total_q = 0;
    for (int r = 0; r < b; ++r) {
      ftp[r] = total_q;
      total_q += seqlen[r];
      for (int k = 0; k + 1 < seqlen[r]; ++k) {
        drafts.push_back(tokens[store_rows[r] * kGamma + k]);
        const float* p = cpu_probs.data() + (static_cast<size_t>(store_rows[r]) * kGamma + k) * kVocab;
        packed.insert(packed.end(), p, p + kVocab);
      }
    }
    std::vector<float> logits = RandomLogits(rng, total_q);
    VerifyInputs in;
    in.num_requests = b;
    in.total_q = total_q;
    in.vocab_size = kVocab;
    in.logits = logits.data();
    in.first_token_positions = ftp.data();
    in.seqlen_q = seqlen.data();
    in.positions = positions.data();
    in.verify_lens = cutoff.data();
    in.draft_token_ids = drafts.data();
    in.draft_probs = packed.data();
    in.draft_vocab_size = kVocab;
    in.temperatures = v_temps.data();
    in.top_ks = v_topk.data();
    in.top_ps = v_topp.data();
    in.seeds = v_seeds.data();
    in.stop_token_offsets = stop_offsets.data();
    in.stop_token_ids = stop_ids.data();
    in.config.nextn = kGamma;
    HostVerifyOutputs cpu(in, kGamma);
    VerifyOutputs cpu_view = cpu.View();
    ASSERT_TRUE(VerifySampleCpu(in, &cpu_view).ok());

    absl::StatusOr<float*> device_logits = (*sampling)->VerifyLogits(total_q);
    ASSERT_TRUE(device_logits.ok());
    UploadLogits(*device_logits, logits);
    HostVerifyOutputs gpu(in, kGamma);
    absl::Status s = (*sampling)->Verify(in, store_rows, &gpu);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(gpu.accept, cpu.accept);
    EXPECT_EQ(gpu.raw_accept, cpu.raw_accept);
    EXPECT_EQ(gpu.is_final, cpu.is_final);
    EXPECT_EQ(gpu.verified_token_ids, cpu.verified_token_ids);
    EXPECT_EQ(gpu.candidate_token_ids, cpu.candidate_token_ids);
    EXPECT_EQ(gpu.token_logprobs, cpu.token_logprobs);
    EXPECT_EQ(gpu.last_valid_offset, cpu.last_valid_offset);
    EXPECT_EQ(gpu.sampled_token_ids, cpu.sampled_token_ids);
    EXPECT_EQ(gpu.emitted_stop_token, cpu.emitted_stop_token);
    EXPECT_EQ(gpu.num_generated_tokens, cpu.num_generated_tokens);
    EXPECT_EQ(gpu.num_verified_tokens, cpu.num_verified_tokens);
    EXPECT_EQ(gpu.next_draft_confidences, cpu.next_draft_confidences);
  }
}

TEST(DeviceSamplingGpuTest, ErrorsNameTheRow) {
  auto sampling = DeviceSampling::Create(kVocab, kGamma);
  ASSERT_TRUE(sampling.ok());
  std::mt19937 rng(9);
  std::vector<float> logits = RandomLogits(rng, 2);
  logits[kVocab + 17] = NAN;
  std::vector<float> temperatures = {1.0f, 1.0f}, top_ps = {1.0f, 1.0f};
  std::vector<int32_t> top_ks = {0, 0};
  std::vector<uint64_t> seeds = {1, 2};
  std::vector<int64_t> positions = {0, 0};
  DraftSampleInputs in;
  in.num_rows = 2;
  in.vocab_size = kVocab;
  in.temperatures = temperatures.data();
  in.top_ks = top_ks.data();
  in.top_ps = top_ps.data();
  in.seeds = seeds.data();
  in.positions = positions.data();
  absl::StatusOr<float*> device_logits = (*sampling)->DraftLogits(2);
  ASSERT_TRUE(device_logits.ok());
  UploadLogits(*device_logits, logits);
  std::vector<int32_t> tokens(2);
  std::vector<float> signals(2);
  ASSERT_TRUE((*sampling)->BeginDrafts(in, nullptr).ok());
  ASSERT_TRUE((*sampling)->SampleDraft(0).ok());
  absl::Status device = (*sampling)->FinishDrafts(1, tokens.data(), signals.data());
  in.logits = logits.data();
  std::vector<float> probs(2 * kVocab);
  DraftSampleOutputs out{tokens.data(), probs.data(), signals.data()};
  absl::Status cpu = DraftSampleCpu(in, &out);
  EXPECT_FALSE(device.ok());
  EXPECT_EQ(device, cpu);
}

}  // namespace
}  // namespace verdict
