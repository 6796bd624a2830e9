#include "runtime/engine/step_control.h"

#include "gtest/gtest.h"

namespace verdict {
namespace {

TEST(StepControlTest, RoundTripsEveryField) {
  StepControl control;
  control.shutdown = true;
  ArrivedRequest a;
  a.request.id = "cmpl-1";
  a.request.prompt_token_ids = {1, 200, 3};
  SamplingParams& p = a.request.params;
  p.temperature = 0.7f;
  p.top_k = 20;
  p.top_p = 0.95f;
  p.min_p = 0.07f;
  p.seed = 0xFFFFFFFFFFFFFFF0ull;
  p.max_tokens = 33;
  p.stop = {"\nUser:", "", "THE END"};
  p.stop_token_ids = {2, 5};
  p.ignore_eos = true;
  p.logprobs = 1;
  p.speculation = false;
  p.max_draft_tokens = 3;
  control.arrived.push_back(a);
  ArrivedRequest b;
  b.request.id = "cmpl-2";
  b.request.prompt_token_ids = {9};
  control.arrived.push_back(b);
  control.cancelled = {"cmpl-0", "x"};

  absl::StatusOr<StepControl> parsed = ParseStepControl(SerializeStepControl(control));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->shutdown);
  ASSERT_EQ(parsed->arrived.size(), 2u);
  const GenerationRequest& r = parsed->arrived[0].request;
  EXPECT_EQ(r.id, "cmpl-1");
  EXPECT_EQ(r.prompt_token_ids, a.request.prompt_token_ids);
  EXPECT_EQ(r.params.temperature, 0.7f);
  EXPECT_EQ(r.params.top_k, 20);
  EXPECT_EQ(r.params.top_p, 0.95f);
  EXPECT_EQ(r.params.min_p, 0.07f);
  ASSERT_TRUE(r.params.seed.has_value());
  EXPECT_EQ(*r.params.seed, 0xFFFFFFFFFFFFFFF0ull);
  EXPECT_EQ(r.params.max_tokens, 33);
  EXPECT_EQ(r.params.stop, p.stop);
  EXPECT_EQ(r.params.stop_token_ids, p.stop_token_ids);
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_EQ(r.params.logprobs, 1);
  EXPECT_FALSE(r.params.speculation);
  EXPECT_EQ(r.params.max_draft_tokens, 3);
  EXPECT_FALSE(parsed->arrived[1].request.params.seed.has_value());
  EXPECT_EQ(parsed->cancelled, control.cancelled);
}

TEST(StepControlTest, BudgetPinChangesRoundTrip) {
  StepControl none;
  absl::StatusOr<StepControl> parsed = ParseStepControl(SerializeStepControl(none));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->budget_pin.has_value());
  EXPECT_TRUE(parsed->empty());

  StepControl pin;
  pin.budget_pin = BudgetPinChange{0.375};
  EXPECT_FALSE(pin.empty());
  parsed = ParseStepControl(SerializeStepControl(pin));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->budget_pin.has_value());
  ASSERT_TRUE(parsed->budget_pin->fraction.has_value());
  EXPECT_EQ(*parsed->budget_pin->fraction, 0.375);

  StepControl unpin;
  unpin.budget_pin = BudgetPinChange{std::nullopt};
  unpin.cancelled = {"a"};
  parsed = ParseStepControl(SerializeStepControl(unpin));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->budget_pin.has_value());
  EXPECT_FALSE(parsed->budget_pin->fraction.has_value());
  EXPECT_EQ(parsed->cancelled, unpin.cancelled);

  // Every truncation of a message with a pin is refused too.
  const std::string bytes = SerializeStepControl(pin);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(ParseStepControl(bytes.substr(0, cut)).ok()) << "cut at " << cut;
  }
}

TEST(StepControlTest, DraftPinChangesRoundTripBesideABudgetPin) {
  StepControl pin;
  pin.draft_pin = DraftPinChange{1};
  pin.budget_pin = BudgetPinChange{1.0};
  EXPECT_FALSE(pin.empty());
  absl::StatusOr<StepControl> parsed = ParseStepControl(SerializeStepControl(pin));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->draft_pin.has_value());
  ASSERT_TRUE(parsed->draft_pin->depth.has_value());
  EXPECT_EQ(*parsed->draft_pin->depth, 1);
  ASSERT_TRUE(parsed->budget_pin.has_value());
  EXPECT_EQ(parsed->budget_pin->fraction, 1.0);

  StepControl only_draft;
  only_draft.draft_pin = DraftPinChange{std::nullopt};
  EXPECT_FALSE(only_draft.empty());
  parsed = ParseStepControl(SerializeStepControl(only_draft));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->draft_pin.has_value());
  EXPECT_FALSE(parsed->draft_pin->depth.has_value());
  EXPECT_FALSE(parsed->budget_pin.has_value());

  const std::string bytes = SerializeStepControl(pin);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(ParseStepControl(bytes.substr(0, cut)).ok()) << "cut at " << cut;
  }
}

TEST(StepControlTest, TruncatedOrPaddedMessagesAreRefused) {
  StepControl control;
  ArrivedRequest a;
  a.request.id = "r";
  a.request.prompt_token_ids = {1, 2, 3};
  control.arrived.push_back(a);
  const std::string bytes = SerializeStepControl(control);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(ParseStepControl(bytes.substr(0, cut)).ok()) << "cut at " << cut;
  }
  EXPECT_FALSE(ParseStepControl(bytes + "x").ok());
}

}  // namespace
}  // namespace verdict
