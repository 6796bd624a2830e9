// The executor's device-side bookkeeping on a scripted model, greedy: every
// row's argmax is its input token + 1 (mod the vocabulary), for the draft
// and the target alike, so every draft is accepted and each step's tokens
// are known in advance.
#include "runtime/engine/step_executor.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict {
namespace {

using ::testing::ElementsAre;

constexpr int kVocab = 8;
constexpr int kGamma = 3;

class CountingModel : public ModelRunner {
 public:
  CountingModel() { config_.vocab_size = kVocab; }
  const ModelConfig& config() const override { return config_; }
  absl::Status Forward(const ForwardBatch& batch, float* logits) override {
    int64_t row = 0;
    for (const ForwardRequest& r : batch.requests) {
      start_positions.push_back(r.start_position);
      token_counts.push_back(static_cast<int64_t>(r.token_ids.size()));
      const int n = static_cast<int>(r.token_ids.size());
      for (int k = n - r.logit_rows(); k < n; ++k, ++row) {
        float* z = logits + row * kVocab;
        for (int v = 0; v < kVocab; ++v) z[v] = 0.0f;
        z[(r.token_ids[k] + 1) % kVocab] = 10.0f;
      }
    }
    return absl::OkStatus();
  }
  std::vector<int64_t> start_positions;  // of every request of every call
  std::vector<int64_t> token_counts;     // likewise

 private:
  ModelConfig config_;
};

ExecutorRequest Greedy(int64_t id, std::vector<int32_t> prompt, int max_tokens) {
  ExecutorRequest r;
  r.id = id;
  r.prompt_token_ids = std::move(prompt);
  r.target_kv = 0;
  r.draft_kv = 0;
  r.speculative = true;
  r.max_tokens = max_tokens;
  r.temperature = 0.0f;
  return r;
}

StepJob Job(int64_t step, std::vector<int64_t> batch, std::vector<int32_t> verify_lens) {
  StepJob job;
  job.step = step;
  job.batch = std::move(batch);
  job.verify_lens = std::move(verify_lens);
  job.draft_depths.assign(job.batch.size(), kGamma);
  return job;
}

std::vector<int32_t> Tokens(const StepOutcome& out, int i) {
  return std::vector<int32_t>(out.tokens.begin() + out.token_offsets[i],
                              out.tokens.begin() + out.token_offsets[i + 1]);
}

class StepExecutorTest : public ::testing::Test {
 protected:
  // Prompts read by prefill passes of their own, whose positions the tests
  // below check; the in-step tests pass true.
  StepExecutor::Options Options(bool fused_prefill = false) const {
    StepExecutor::Options options;
    options.gamma = kGamma;
    options.vocab_size = kVocab;
    options.sampler.nextn = kGamma;
    options.fused_prefill = fused_prefill;
    return options;
  }
  CountingModel target_, draft_;
};

// Seed 000: a step whose emitted tokens hold a stop id flags the request on
// the device, and the step after it, already planned with every draft,
// proposes none for it and verifies one row; positions follow the accepted
// tokens, not the plan.
TEST_F(StepExecutorTest, DeviceStopGivesZeroDraftsInTheNextStep) {
  StepExecutor executor(Options(), &target_, &draft_, nullptr);
  ExecutorRequest request = Greedy(7, {1, 2, 3}, 20);
  request.stop_token_ids = {6};
  ASSERT_TRUE(executor.Admit({request}).ok());

  StepOutcome first;
  StepJob job = Job(1, {7}, {kGamma + 1});
  ASSERT_TRUE(executor.ProposeDrafts(job, &first).ok());
  ASSERT_TRUE(executor.Verify(job, &first).ok());
  EXPECT_THAT(first.drafted, ElementsAre(1));
  EXPECT_THAT(first.accepted, ElementsAre(3));
  EXPECT_THAT(Tokens(first, 0), ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(first.emitted_stop, ElementsAre(1));

  target_.start_positions.clear();
  StepOutcome second;
  job = Job(2, {7}, {kGamma + 1});
  ASSERT_TRUE(executor.ProposeDrafts(job, &second).ok());
  ASSERT_TRUE(executor.Verify(job, &second).ok());
  EXPECT_THAT(second.drafted, ElementsAre(0));
  EXPECT_THAT(second.stop_skipped, ElementsAre(1));
  EXPECT_THAT(second.verify_lens, ElementsAre(1));
  EXPECT_EQ(second.verify_tokens, 1);
  // Row 0's input is the last emitted token (7), at its position: after 3
  // prompt and 4 emitted tokens, 6.
  EXPECT_THAT(target_.start_positions, ElementsAre(6));
  EXPECT_THAT(Tokens(second, 0), ElementsAre(0));
}

// The step after an admission carries its prefills (the prompt tokens but
// the last, each model's forward timed); the step after that carries none.
TEST_F(StepExecutorTest, OutcomeCarriesThePrefillsAdmittedBeforeIt) {
  StepExecutor executor(Options(), &target_, &draft_, nullptr);
  ASSERT_TRUE(executor.Admit({Greedy(1, {1, 2, 3}, 20), Greedy(2, {4, 5}, 20)}).ok());
  ASSERT_TRUE(executor.Admit({Greedy(3, {6, 7, 8, 9}, 20)}).ok());
  StepOutcome first;
  StepJob job = Job(1, {1, 2, 3}, {kGamma + 1, kGamma + 1, kGamma + 1});
  ASSERT_TRUE(executor.ProposeDrafts(job, &first).ok());
  ASSERT_TRUE(executor.Verify(job, &first).ok());
  EXPECT_EQ(first.prefill_tokens, 2 + 1 + 3);
  EXPECT_GT(first.target_prefill_nanoseconds, 0);
  EXPECT_GT(first.draft_prefill_nanoseconds, 0);
  StepOutcome second;
  job = Job(2, {1, 2, 3}, {kGamma + 1, kGamma + 1, kGamma + 1});
  ASSERT_TRUE(executor.ProposeDrafts(job, &second).ok());
  ASSERT_TRUE(executor.Verify(job, &second).ok());
  EXPECT_EQ(second.prefill_tokens, 0);
  EXPECT_EQ(second.target_prefill_nanoseconds, 0);
  EXPECT_EQ(second.draft_prefill_nanoseconds, 0);
}

// A request admitted without the draft's prefill: the draft runs nothing at
// admission, and the first draft pass starts at position 0 with the whole
// prompt; its drafts are those of a prefilled draft.
TEST_F(StepExecutorTest, ADraftAdmittedWithoutPrefillCatchesUpOnThePrompt) {
  StepExecutor executor(Options(), &target_, &draft_, nullptr);
  ExecutorRequest request = Greedy(1, {1, 2, 3}, 20);
  request.prefill_draft = false;
  ASSERT_TRUE(executor.Admit({request}).ok());
  EXPECT_TRUE(draft_.start_positions.empty());
  EXPECT_THAT(target_.start_positions, ElementsAre(0));
  StepOutcome out;
  StepJob job = Job(1, {1}, {kGamma + 1});
  ASSERT_TRUE(executor.ProposeDrafts(job, &out).ok());
  ASSERT_TRUE(executor.Verify(job, &out).ok());
  EXPECT_EQ(out.prefill_tokens, 2);
  EXPECT_EQ(out.draft_prefill_nanoseconds, 0);
  // Pass 0 from position 0 (the prompt), then one position per pass.
  EXPECT_THAT(draft_.start_positions, ElementsAre(0, 3, 4));
  EXPECT_THAT(out.drafted, ElementsAre(1));
  EXPECT_THAT(Tokens(out, 0), ElementsAre(4, 5, 6, 7));
}

// In-step prefill: Admit runs no forward; the first step's verify forward
// reads each prompt (but its last token) ahead of the request's verify rows,
// with logits for those rows only, and the draft's first pass reads it as
// catch-up once the request drafts. The tokens are those of the separate
// prefill passes, step after step.
TEST_F(StepExecutorTest, InStepPrefillReadsThePromptInTheStepsOwnPasses) {
  CountingModel separate_target, separate_draft;
  StepExecutor separate(Options(false), &separate_target, &separate_draft, nullptr);
  StepExecutor in_step(Options(true), &target_, &draft_, nullptr);
  const std::vector<ExecutorRequest> joining = {Greedy(1, {1, 2, 3}, 20), Greedy(2, {4}, 20),
                                                Greedy(3, {6, 7, 0, 1}, 20)};
  ASSERT_TRUE(separate.Admit(joining).ok());
  ASSERT_TRUE(in_step.Admit(joining).ok());
  EXPECT_TRUE(target_.start_positions.empty());
  EXPECT_TRUE(draft_.start_positions.empty());

  // Step 1: request 2 does not draft; 1 and 3 draft one token.
  StepJob job = Job(1, {1, 2, 3}, {2, 1, 2});
  job.draft_depths = {1, 0, 1};
  StepOutcome a, b;
  ASSERT_TRUE(separate.ProposeDrafts(job, &a).ok());
  ASSERT_TRUE(separate.Verify(job, &a).ok());
  ASSERT_TRUE(in_step.ProposeDrafts(job, &b).ok());
  ASSERT_TRUE(in_step.Verify(job, &b).ok());
  // The draft's one pass: requests 1 and 3, each its whole prompt from
  // position 0.
  EXPECT_THAT(draft_.start_positions, ElementsAre(0, 0));
  EXPECT_THAT(draft_.token_counts, ElementsAre(3, 4));
  // The verify: each request from position 0, prompt then rows.
  EXPECT_THAT(target_.start_positions, ElementsAre(0, 0, 0));
  EXPECT_THAT(target_.token_counts, ElementsAre(2 + 2, 0 + 1, 3 + 2));
  EXPECT_EQ(b.verify_tokens, 2 + 1 + 2);
  EXPECT_EQ(b.prefill_tokens, 2 + 0 + 3);
  EXPECT_EQ(a.prefill_tokens, b.prefill_tokens);
  EXPECT_EQ(b.target_prefill_nanoseconds, 0);
  EXPECT_EQ(b.draft_prefill_nanoseconds, 0);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.token_offsets, b.token_offsets);

  // Step 2: request 2 drafts for the first time and catches up on its
  // whole context (prompt and first token); nothing is a prefill any more.
  target_.start_positions.clear();
  draft_.start_positions.clear();
  job = Job(2, {1, 2, 3}, {kGamma + 1, kGamma + 1, kGamma + 1});
  ASSERT_TRUE(separate.ProposeDrafts(job, &a).ok());
  ASSERT_TRUE(separate.Verify(job, &a).ok());
  ASSERT_TRUE(in_step.ProposeDrafts(job, &b).ok());
  ASSERT_TRUE(in_step.Verify(job, &b).ok());
  EXPECT_EQ(b.prefill_tokens, 0);
  EXPECT_THAT(target_.start_positions, ElementsAre(4, 1, 5));
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.token_offsets, b.token_offsets);
  EXPECT_EQ(a.accepted, b.accepted);
}

// The plan may come from a CPU a step behind: the device caps it at the
// tokens the request has left, and a request that has emitted them all
// drafts nothing more.
TEST_F(StepExecutorTest, PlanIsCappedByTheTokensLeftOnTheDevice) {
  StepExecutor executor(Options(), &target_, &draft_, nullptr);
  ASSERT_TRUE(executor.Admit({Greedy(1, {2}, 2)}).ok());
  StepOutcome out;
  StepJob job = Job(1, {1}, {kGamma + 1});
  ASSERT_TRUE(executor.ProposeDrafts(job, &out).ok());
  ASSERT_TRUE(executor.Verify(job, &out).ok());
  EXPECT_THAT(out.verify_lens, ElementsAre(2));
  EXPECT_THAT(Tokens(out, 0), ElementsAre(3, 4));
  job = Job(2, {1}, {kGamma + 1});
  ASSERT_TRUE(executor.ProposeDrafts(job, &out).ok());
  ASSERT_TRUE(executor.Verify(job, &out).ok());
  EXPECT_THAT(out.drafted, ElementsAre(0));
  EXPECT_THAT(out.stop_skipped, ElementsAre(0));
  EXPECT_THAT(out.verify_lens, ElementsAre(1));
}

// The plan's layout: a packed job runs each request's planned rows, a
// uniform one the full block of every drafting request, its verify length
// applied by the sampler's cutoff. Both commit the same tokens.
TEST_F(StepExecutorTest, PackedJobsRunThePlannedRowsUniformOnesTheFullBlock) {
  for (const bool packed : {true, false}) {
    StepExecutor executor(Options(), &target_, &draft_, nullptr);
    ASSERT_TRUE(executor.Admit({Greedy(1, {1}, 20), Greedy(2, {5}, 20)}).ok());
    StepOutcome out;
    StepJob job = Job(1, {1, 2}, {2, kGamma + 1});
    job.packed = packed;
    ASSERT_TRUE(executor.ProposeDrafts(job, &out).ok());
    ASSERT_TRUE(executor.Verify(job, &out).ok());
    EXPECT_THAT(out.verify_lens, ElementsAre(2, kGamma + 1)) << "packed " << packed;
    EXPECT_EQ(out.verify_tokens, packed ? 2 + kGamma + 1 : 2 * (kGamma + 1)) << "packed " << packed;
    // Request 1 accepts its one verified draft and takes the next row's
    // token; request 2 accepts all three drafts and the bonus.
    EXPECT_THAT(out.accepted, ElementsAre(1, kGamma)) << "packed " << packed;
    EXPECT_THAT(Tokens(out, 0), ElementsAre(2, 3)) << "packed " << packed;
    EXPECT_THAT(Tokens(out, 1), ElementsAre(6, 7, 0, 1)) << "packed " << packed;
  }
}

// A draft plan with a depth per request: a request of depth 0 is a plain
// decode row of the verify, the others propose their depth's drafts in
// max(depth) passes, each pass over the requests that draft that deep; the
// uniform layout verifies each request's drafts and its last row. The next
// step's first pass catches the draft up on what it did not see.
TEST_F(StepExecutorTest, DraftDepthsPerRequestRunMaxDepthPassesOverTheDeepRows) {
  StepExecutor executor(Options(), &target_, &draft_, nullptr);
  ASSERT_TRUE(
      executor.Admit({Greedy(1, {0, 1}, 20), Greedy(2, {1, 2}, 20), Greedy(3, {0, 1}, 20)})
          .ok());
  draft_.start_positions.clear();
  StepOutcome out;
  StepJob job = Job(1, {1, 2, 3}, {1, 2, kGamma + 1});
  job.draft_depths = {0, 1, kGamma};
  ASSERT_TRUE(executor.ProposeDrafts(job, &out).ok());
  ASSERT_TRUE(executor.Verify(job, &out).ok());
  EXPECT_THAT(out.drafted, ElementsAre(0, 1, 1));
  EXPECT_THAT(out.draft_depths, ElementsAre(0, 1, kGamma));
  EXPECT_EQ(out.draft_passes, kGamma);
  // Pass 0 runs requests 3 and 2 (deepest first), passes 1 and 2 request 3.
  EXPECT_THAT(draft_.start_positions, ElementsAre(1, 1, 2, 3));
  EXPECT_THAT(out.verify_lens, ElementsAre(1, 2, kGamma + 1));
  EXPECT_EQ(out.verify_tokens, 1 + 2 + (kGamma + 1));
  EXPECT_THAT(Tokens(out, 0), ElementsAre(2));
  EXPECT_THAT(Tokens(out, 1), ElementsAre(3, 4));
  EXPECT_THAT(Tokens(out, 2), ElementsAre(2, 3, 4, 5));
  // Only proposed drafts have signals.
  EXPECT_EQ(out.signals[0 * kGamma + 0], 0.0f);
  EXPECT_GT(out.signals[1 * kGamma + 0], 0.0f);
  EXPECT_EQ(out.signals[1 * kGamma + 1], 0.0f);
  EXPECT_GT(out.signals[2 * kGamma + kGamma - 1], 0.0f);

  // Every request drafts one: request 1's draft catches up on the token it
  // missed (from position 1, two tokens), request 2's on its accepted draft
  // and bonus token (from 2), request 3's on its bonus token after all of
  // its drafts were accepted (from 1 + kGamma).
  draft_.start_positions.clear();
  job = Job(2, {1, 2, 3}, {2, 2, 2});
  job.draft_depths = {1, 1, 1};
  ASSERT_TRUE(executor.ProposeDrafts(job, &out).ok());
  ASSERT_TRUE(executor.Verify(job, &out).ok());
  EXPECT_THAT(draft_.start_positions, ElementsAre(1, 2, 1 + kGamma));
  EXPECT_EQ(out.draft_passes, 1);
  EXPECT_THAT(Tokens(out, 0), ElementsAre(3, 4));
  EXPECT_THAT(Tokens(out, 1), ElementsAre(5, 6));
  EXPECT_THAT(Tokens(out, 2), ElementsAre(6, 7));

  // A step where nobody drafts runs no draft pass at all.
  draft_.start_positions.clear();
  job = Job(3, {1, 2, 3}, {kGamma + 1, kGamma + 1, kGamma + 1});
  job.draft_depths = {0, 0, 0};
  ASSERT_TRUE(executor.ProposeDrafts(job, &out).ok());
  ASSERT_TRUE(executor.Verify(job, &out).ok());
  EXPECT_TRUE(draft_.start_positions.empty());
  EXPECT_EQ(out.draft_passes, 0);
  EXPECT_EQ(out.verify_tokens, 3);
  EXPECT_THAT(Tokens(out, 0), ElementsAre(5));
}

// The worker runs jobs first in first out: admissions with the job that
// needs them, releases before it; after an error the later jobs end with it
// unrun.
TEST_F(StepExecutorTest, WorkerRunsJobsInOrderAndStopsAtTheFirstError) {
  StepExecutor executor(Options(), &target_, &draft_, nullptr);
  executor.Start();
  StepJob first = Job(1, {1}, {kGamma + 1});
  first.admitted = {Greedy(1, {2}, 20)};
  executor.Enqueue(first);
  StepJob second = Job(2, {1}, {1});
  executor.Enqueue(second);
  StepJob third = Job(3, {1}, {1});
  third.released = {1};  // gone before the step that still names it
  executor.Enqueue(third);
  executor.Enqueue(Job(4, {}, {}));
  EXPECT_EQ(executor.in_flight(), 4);

  absl::StatusOr<StepOutcome> out = executor.Await();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->step, 1);
  EXPECT_THAT(Tokens(*out, 0), ElementsAre(3, 4, 5, 6));
  out = executor.Await();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->step, 2);
  EXPECT_THAT(Tokens(*out, 0), ElementsAre(7));
  out = executor.Await();
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(out.status().message()), ::testing::HasSubstr("step 3"));
  const absl::Status third_error = out.status();
  out = executor.Await();
  EXPECT_EQ(out.status(), third_error);
  EXPECT_EQ(executor.in_flight(), 0);
  executor.Stop();
}

}  // namespace
}  // namespace verdict
