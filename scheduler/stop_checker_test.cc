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
  // Text the detokenizer held until the generation ended is output; a stop
  // string inside it cuts it; after a stop string nothing more joins.
  struct Case {
    int32_t last_token;
    std::string last_text;
    StopReason ended;
    std::string final_text;
    StopReason reason;
    std::string output;
  };
  const Case cases[] = {
      {11, "", StopReason::kLength, "cd", StopReason::kLength, "abcd"},
      {2, "", StopReason::kEos, "cEND and more", StopReason::kStopString, "abc"},
      {11, "EN", StopReason::kStopString, "zz", StopReason::kStopString, "a"},
  };
  for (const Case& t : cases) {
    StopConditions c = Conditions();
    c.max_tokens = 2;
    c.stop_strings = {"END", "bEN"};
    StopChecker checker(c);
    EXPECT_EQ(checker.Append(10, "ab"), StopReason::kNone);
    EXPECT_EQ(checker.Append(t.last_token, t.last_text), t.ended) << t.final_text;
    checker.AppendFinalText(t.final_text);
    EXPECT_EQ(checker.reason(), t.reason) << t.final_text;
    EXPECT_EQ(checker.TakeEmittableText(), t.output) << t.final_text;
  }
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
