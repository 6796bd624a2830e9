#include "scheduler/stop_checker.h"

#include <string>

#include "gtest/gtest.h"

namespace verdict {
namespace {

StopConditions Conditions() {
  StopConditions c;
  c.eos_token_ids = {2};
  c.stop_token_ids = {7};
  c.max_tokens = 100;
  return c;
}

TEST(StopCheckerTest, EosStopsAndAddsNoText) {
  StopChecker checker(Conditions());
  EXPECT_EQ(checker.Append(10, "Hello"), StopReason::kNone);
  EXPECT_EQ(checker.Append(2, "</s>"), StopReason::kEos);
  EXPECT_EQ(checker.TakeEmittableText(), "Hello");
  // Anything after a stop is ignored (seed 000: tokens after a stop are dropped).
  EXPECT_EQ(checker.Append(11, " more"), StopReason::kEos);
  EXPECT_EQ(checker.TakeEmittableText(), "");
  EXPECT_EQ(checker.num_tokens(), 2);
}

TEST(StopCheckerTest, IgnoreEosKeepsGoing) {
  StopConditions c = Conditions();
  c.ignore_eos = true;
  StopChecker checker(c);
  EXPECT_EQ(checker.Append(2, "x"), StopReason::kNone);
  EXPECT_EQ(checker.TakeEmittableText(), "x");
}

TEST(StopCheckerTest, StopTokenId) {
  StopChecker checker(Conditions());
  EXPECT_EQ(checker.Append(5, "a"), StopReason::kNone);
  EXPECT_EQ(checker.Append(7, "b"), StopReason::kStopToken);
  EXPECT_EQ(checker.TakeEmittableText(), "a");
}

TEST(StopCheckerTest, LengthLimitCountsTokens) {
  StopConditions c = Conditions();
  c.max_tokens = 3;
  StopChecker checker(c);
  EXPECT_EQ(checker.Append(5, "a"), StopReason::kNone);
  EXPECT_EQ(checker.Append(5, "b"), StopReason::kNone);
  EXPECT_EQ(checker.Append(5, "c"), StopReason::kLength);
  EXPECT_EQ(checker.TakeEmittableText(), "abc");
}

TEST(StopCheckerTest, StopStringAcrossTokensIsCutAndNeverEmitted) {
  StopConditions c = Conditions();
  c.stop_strings = {"THE END"};
  StopChecker checker(c);
  EXPECT_EQ(checker.Append(5, "and so TH"), StopReason::kNone);
  // "TH" might begin the stop string: held back.
  EXPECT_EQ(checker.TakeEmittableText(), "and so ");
  EXPECT_EQ(checker.Append(6, "E EN"), StopReason::kNone);
  EXPECT_EQ(checker.TakeEmittableText(), "");
  EXPECT_EQ(checker.Append(8, "D!"), StopReason::kStopString);
  EXPECT_EQ(checker.TakeEmittableText(), "");
}

TEST(StopCheckerTest, HeldBackTextIsReleasedWhenItStopsMatching) {
  StopConditions c = Conditions();
  c.stop_strings = {"###"};
  StopChecker checker(c);
  EXPECT_EQ(checker.Append(5, "a##"), StopReason::kNone);
  EXPECT_EQ(checker.TakeEmittableText(), "a");
  EXPECT_EQ(checker.Append(5, "b"), StopReason::kNone);
  EXPECT_EQ(checker.TakeEmittableText(), "##b");
}

TEST(StopCheckerTest, EarliestOfSeveralStopStringsWins) {
  StopConditions c = Conditions();
  c.stop_strings = {"cd", "bcx", ""};
  StopChecker checker(c);
  EXPECT_EQ(checker.Append(5, "abcdef"), StopReason::kStopString);
  EXPECT_EQ(checker.TakeEmittableText(), "ab");
}

TEST(StopCheckerTest, StopStringInsideOneTokenDropsTheRestOfTheToken) {
  StopConditions c = Conditions();
  c.stop_strings = {"\n\n"};
  StopChecker checker(c);
  EXPECT_EQ(checker.Append(5, "Hi."), StopReason::kNone);
  EXPECT_EQ(checker.Append(5, "\n\nNext"), StopReason::kStopString);
  EXPECT_EQ(checker.TakeEmittableText(), "Hi.");
}

// A stop string matched at the limit token wins over the length reason.
TEST(StopCheckerTest, FinalTextJoinsTheOutputUnlessAStopStringEndedIt) {
  // Text the detokenizer held until the generation ended (here: the
  // length limit, then EOS) is output; a stop string inside it cuts it.
  StopConditions c = Conditions();
  c.max_tokens = 2;
  c.stop_strings = {"END"};
  StopChecker length(c);
  EXPECT_EQ(length.Append(10, "ab"), StopReason::kNone);
  EXPECT_EQ(length.Append(11, ""), StopReason::kLength);
  length.AppendFinalText("cd");
  EXPECT_EQ(length.reason(), StopReason::kLength);
  EXPECT_EQ(length.TakeEmittableText(), "abcd");

  StopChecker eos(c);
  EXPECT_EQ(eos.Append(10, "ab"), StopReason::kNone);
  EXPECT_EQ(eos.Append(2, ""), StopReason::kEos);
  eos.AppendFinalText("cEND and more");
  EXPECT_EQ(eos.reason(), StopReason::kStopString);
  EXPECT_EQ(eos.TakeEmittableText(), "abc");

  StopChecker stopped(c);
  EXPECT_EQ(stopped.Append(10, "xEN"), StopReason::kNone);
  EXPECT_EQ(stopped.Append(11, "Dy"), StopReason::kStopString);
  stopped.AppendFinalText("zz");
  EXPECT_EQ(stopped.TakeEmittableText(), "x");
}

TEST(StopCheckerTest, StopStringOnLastAllowedTokenReportsStopString) {
  StopConditions c = Conditions();
  c.max_tokens = 2;
  c.stop_strings = {"!"};
  StopChecker checker(c);
  EXPECT_EQ(checker.Append(5, "a"), StopReason::kNone);
  EXPECT_EQ(checker.Append(5, "b!"), StopReason::kStopString);
  EXPECT_EQ(checker.TakeEmittableText(), "ab");
}

}  // namespace
}  // namespace verdict
