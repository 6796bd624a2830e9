#include "scheduler/cost_table.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict {
namespace {

using ::testing::HasSubstr;

// seconds = 0.001 * B + 0.0001 * M + 0.002: bilinear interpolation and
// linear extrapolation reproduce an affine function, up to rounding.
CostTable AffineTable() {
  const std::vector<double> bs = {1, 4, 16};
  const std::vector<double> ms = {1, 8, 32, 128};
  std::vector<double> seconds;
  for (double b : bs) {
    for (double m : ms) seconds.push_back(0.001 * b + 0.0001 * m + 0.002);
  }
  return *CostTable::Create(bs, ms, seconds);
}

double Affine(double b, double m) { return 0.001 * b + 0.0001 * m + 0.002; }

// The grid of the draft-split tests, as JSON members.
constexpr char kSplitGrid[] =
    R"("batch_sizes": [1, 4], "verify_tokens": [1, 8], "seconds": [[0.010, 0.012], [0.020, 0.030]])";

// A split table with a one-pass phase: at B = 4 four passes take 0.008 s
// and one pass 0.005 s.
constexpr char kOnePassTable[] =
    R"({"batch_sizes": [1, 4], "verify_tokens": [1, 8], "seconds": [[0.010, 0.012],
        [0.020, 0.030]], "draft_passes": 4, "draft_pass_seconds": [0.001, 0.002],
        "one_pass_draft_seconds": [0.0025, 0.005]})";

// `json` does not load, and the message says `why`.
void ExpectRefused(const std::string& json, const std::string& why) {
  const absl::StatusOr<CostTable> bad = CostTable::FromJson(json);
  ASSERT_FALSE(bad.ok()) << json;
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(why)) << json;
}

TEST(CostTableTest, ReproducesCellsExactly) {
  const CostTable t = AffineTable();
  for (size_t b = 0; b < t.batch_sizes().size(); ++b) {
    for (size_t m = 0; m < t.verify_tokens().size(); ++m) {
      EXPECT_NEAR(t.Predict(t.batch_sizes()[b], t.verify_tokens()[m]), t.seconds(b, m), 1e-18);
    }
  }
}

TEST(CostTableTest, BilinearInsideLinearOutside) {
  const CostTable t = AffineTable();
  for (double b : {1.0, 2.0, 3.5, 9.0, 16.0, 24.0, 100.0}) {
    for (double m : {1.0, 5.0, 20.0, 100.0, 128.0, 300.0, 2048.0}) {
      EXPECT_NEAR(t.Predict(b, m), Affine(b, m), 1e-15) << b << " " << m;
    }
  }
  // Below the grid the edge slope continues until the floor.
  EXPECT_NEAR(t.Predict(0.5, 1), Affine(0.5, 1), 1e-15);
}

TEST(CostTableTest, BilinearOnANonAffineCell) {
  // One cell: f = 1 + x y on the unit square; bilinear is exact for x y.
  const CostTable t = *CostTable::Create({1, 2}, {1, 2}, {2, 3, 3, 5});
  EXPECT_NEAR(t.Predict(1.5, 1.5), 1 + 1.5 * 1.5, 1e-15);
  EXPECT_NEAR(t.Predict(1.25, 1.75), 1 + 1.25 * 1.75, 1e-15);
  // Extrapolation is linear along each axis with the edge segment: for a
  // bilinear cell that is the same polynomial.
  EXPECT_NEAR(t.Predict(3, 4), 1 + 3 * 4, 1e-13);
}

TEST(CostTableTest, NeverPredictsBelowTheFloor) {
  const CostTable t = *CostTable::Create({1, 2}, {10, 20}, {0.001, 0.002, 0.001, 0.002});
  EXPECT_EQ(t.Predict(1, 0), kMinStepSeconds);  // 0.001 - 0.001 = 0 -> floor
  EXPECT_GE(t.Predict(1, -100), kMinStepSeconds);
}

TEST(CostTableTest, SingleKnotAxisIsConstant) {
  const CostTable t = *CostTable::Create({8}, {1, 100}, {0.01, 0.03});
  EXPECT_NEAR(t.Predict(1, 50.5), 0.02, 1e-15);
  EXPECT_NEAR(t.Predict(512, 50.5), 0.02, 1e-15);
}

TEST(CostTableTest, CurveMatchesPredictBitForBit) {
  const CostTable t = *CostTable::Create({1, 4, 16, 64}, {1, 8, 32, 128, 512},
                                         {0.011, 0.012, 0.013, 0.017, 0.031,  //
                                          0.012, 0.013, 0.015, 0.019, 0.033,  //
                                          0.013, 0.015, 0.016, 0.021, 0.040,  //
                                          0.016, 0.019, 0.021, 0.027, 0.051});
  CostCurve curve;
  for (double b : {0.5, 1.0, 3.0, 7.0, 16.0, 33.0, 64.0, 200.0}) {
    t.CurveAt(b, &curve);
    int segment = 0;
    for (double m = 0; m <= 700; m += 1.0) {
      const double want = t.Predict(b, m);
      EXPECT_EQ(curve.At(m), want) << b << " " << m;
      EXPECT_EQ(curve.AtNondecreasing(m, &segment), want) << b << " " << m;
    }
  }
}

TEST(CostTableTest, SweepMatchesPredictBitForBit) {
  const CostTable t = *CostTable::Create({1, 4, 16}, {2, 8, 9, 32, 100},
                                         {0.011, 0.012, 0.013, 0.017, 0.031,  //
                                          0.012, 0.013, 0.019, 0.019, 0.033,  //
                                          0.013, 0.015, 0.016, 0.021, 0.040});
  CostCurve curve;
  for (double b : {1.0, 2.0, 5.0, 16.0, 40.0}) {
    t.CurveAt(b, &curve);
    for (double first : {0.0, 1.0, 2.0, 7.0, 8.0, 9.0, 31.0, 100.0, 150.0}) {
      int64_t visited = 0;
      curve.Sweep(first, 120, [&](int64_t k, double cost) {
        EXPECT_EQ(k, visited++);
        EXPECT_EQ(cost, t.Predict(b, first + static_cast<double>(k)))
            << b << " " << first << " " << k;
      });
      EXPECT_EQ(visited, 120);
    }
  }
  // A table with a single token knot: constant along tokens.
  const CostTable flat = *CostTable::Create({1, 2}, {8}, {0.5, 0.7});
  flat.CurveAt(1.5, &curve);
  curve.Sweep(1, 10, [&](int64_t, double cost) { EXPECT_EQ(cost, flat.Predict(1.5, 3)); });
}

TEST(CostTableTest, JsonRoundTripsExactly) {
  const CostTable t =
      *CostTable::Create({1, 3, 7.5}, {2, 9}, {0.1, 1.0 / 3.0, 2e-5, 0.7, 1e-3, 12.25});
  const absl::StatusOr<CostTable> back = CostTable::FromJson(t.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->batch_sizes(), t.batch_sizes());
  EXPECT_EQ(back->verify_tokens(), t.verify_tokens());
  for (size_t b = 0; b < 3; ++b) {
    for (size_t m = 0; m < 2; ++m) EXPECT_EQ(back->seconds(b, m), t.seconds(b, m));
  }
  EXPECT_THAT(t.ToJson(), HasSubstr("\"batch_sizes\""));
}

// The optional draft split: the price of one draft pass per batch size,
// at the table's number of draft passes; a step with fewer passes costs
// that many passes less.
TEST(CostTableTest, DraftSplitLoadsRoundTripsAndPricesFewerPasses) {
  const absl::StatusOr<CostTable> t = CostTable::FromJson(
      R"({"batch_sizes": [1, 4], "verify_tokens": [1, 8], "seconds": [[0.010, 0.012],
          [0.020, 0.030]], "draft_passes": 4, "draft_pass_seconds": [0.001, 0.002]})");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->has_draft_split());
  EXPECT_DOUBLE_EQ(t->PredictDraftPass(4), 0.002);
  EXPECT_DOUBLE_EQ(t->PredictStep(4, 8, 4), t->Predict(4, 8));
  EXPECT_DOUBLE_EQ(t->PredictStep(4, 8, 0), 0.030 - 4 * 0.002);
  EXPECT_DOUBLE_EQ(t->PredictStep(1, 1, 1), 0.010 - 3 * 0.001);
  const absl::StatusOr<CostTable> back = CostTable::FromJson(t->ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->has_draft_split());
  EXPECT_DOUBLE_EQ(back->PredictStep(4, 8, 0), t->PredictStep(4, 8, 0));

  const std::string grid = kSplitGrid;
  ExpectRefused("{" + grid + R"(, "draft_passes": 4})", "come together");
  ExpectRefused("{" + grid + R"(, "draft_passes": 4, "draft_pass_seconds": [0.001]})",
                "batch grid");
  ExpectRefused("{" + grid + R"(, "draft_passes": 4, "draft_pass_seconds": [0.001, 0.006]})",
          "no time for the verify");
  ExpectRefused("{" + grid + R"(, "draft_passes": 0, "draft_pass_seconds": [0.001, 0.002]})",
          "draft_passes");
  // A table without the split prices every step whole.
  const CostTable whole = *CostTable::Create({1, 4}, {1, 8}, {0.010, 0.012, 0.020, 0.030});
  EXPECT_FALSE(whole.has_draft_split());
  EXPECT_DOUBLE_EQ(whole.PredictStep(4, 8, 0), whole.Predict(4, 8));
}

// The one-pass draft phase: a step of P passes is priced on the line
// through the measured one-pass and draft_passes-pass phases, not P times
// the mean pass.
TEST(CostTableTest, OnePassDraftPricesTheFirstPassApart) {
  const absl::StatusOr<CostTable> t = CostTable::FromJson(kOnePassTable);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->has_one_pass_draft());
  // B = 4: all four passes 0.008 s, one pass 0.005 s, each later 0.001 s.
  EXPECT_DOUBLE_EQ(t->PredictDraftPhase(4, 0), 0.0);
  EXPECT_DOUBLE_EQ(t->PredictDraftPhase(4, 1), 0.005);
  EXPECT_DOUBLE_EQ(t->PredictDraftPhase(4, 2), 0.006);
  EXPECT_DOUBLE_EQ(t->PredictDraftPhase(4, 4), 0.008);
  EXPECT_DOUBLE_EQ(t->PredictStep(4, 8, 4), t->Predict(4, 8));
  EXPECT_DOUBLE_EQ(t->PredictStep(4, 8, 1), 0.030 - 0.003);
  EXPECT_DOUBLE_EQ(t->PredictStep(4, 8, 0), 0.030 - 0.008);  // plain decode: as without it
  // Between batch sizes both points are linear in B: at B = 2.5 one pass is
  // 0.00375 s and all four 0.006 s.
  EXPECT_NEAR(t->PredictDraftPhase(2.5, 1), 0.00375, 1e-15);
  EXPECT_NEAR(t->PredictDraftPhase(2.5, 3), 0.00375 + 2 * (0.006 - 0.00375) / 3, 1e-15);
  const absl::StatusOr<CostTable> back = CostTable::FromJson(t->ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->one_pass_draft_seconds(), t->one_pass_draft_seconds());
  EXPECT_DOUBLE_EQ(back->PredictStep(1, 1, 2), t->PredictStep(1, 1, 2));

  // Without the key, P passes cost P mean passes.
  const absl::StatusOr<CostTable> mean = CostTable::FromJson(
      R"({"batch_sizes": [1, 4], "verify_tokens": [1, 8], "seconds": [[0.010, 0.012],
          [0.020, 0.030]], "draft_passes": 4, "draft_pass_seconds": [0.001, 0.002]})");
  ASSERT_TRUE(mean.ok());
  EXPECT_FALSE(mean->has_one_pass_draft());
  EXPECT_DOUBLE_EQ(mean->PredictDraftPhase(4, 1), 0.002);
  EXPECT_DOUBLE_EQ(mean->PredictStep(4, 8, 1), 0.030 - 3 * 0.002);

  const std::string grid = kSplitGrid;
  const std::string split = R"(, "draft_passes": 4, "draft_pass_seconds": [0.001, 0.002])";
  ExpectRefused("{" + grid + R"(, "one_pass_draft_seconds": [0.001, 0.002]})",
                "needs the draft split");
  ExpectRefused("{" + grid + split + R"(, "one_pass_draft_seconds": [0.001]})", "batch grid");
  ExpectRefused("{" + grid + split + R"(, "one_pass_draft_seconds": [0.001, 0]})",
          "one_pass_draft_seconds[1] = 0 is not a positive time");
  ExpectRefused("{" + grid + split + R"(, "one_pass_draft_seconds": [0.001, 0.009]})",
          "more than the 4 passes");
  ExpectRefused("{" + grid + split + R"(, "one_pass_draft_seconds": 0.001})", "not an array");
  ExpectRefused("{" + grid + R"(, "draft_passes": 1, "draft_pass_seconds": [0.001, 0.002],
          "one_pass_draft_seconds": [0.001, 0.002]})", "draft_passes 1");
}

// Passes over fewer rows than the batch: each is priced at its own rows.
TEST(CostTableTest, DraftPassesArePricedAtTheirRows) {
  const absl::StatusOr<CostTable> t = CostTable::FromJson(kOnePassTable);
  ASSERT_TRUE(t.ok()) << t.status();
  // At one row: the first pass 0.0025 s, each later (0.004 - 0.0025) / 3.
  EXPECT_DOUBLE_EQ(t->PredictDraftPassAt(1, true), 0.0025);
  EXPECT_DOUBLE_EQ(t->PredictDraftPassAt(1, false), 0.0005);
  EXPECT_EQ(t->PredictDraftPassAt(0, true), 0.0);
  const std::vector<int64_t> none;
  const std::vector<int64_t> whole = {4, 4, 4, 4};
  const std::vector<int64_t> one_deep = {4, 1};  // everyone drafts one, one request two
  EXPECT_EQ(t->PredictDraftPhaseAt(none), 0.0);
  EXPECT_NEAR(t->PredictDraftPhaseAt(whole), t->PredictDraftPhase(4, 4), 1e-15);
  EXPECT_NEAR(t->PredictDraftPhaseAt(one_deep), 0.005 + 0.0005, 1e-15);
  // The step: the table's verify at (4, 8) plus the phase that ran.
  EXPECT_NEAR(t->PredictStepAt(4, 8, whole), t->PredictStep(4, 8, 4), 1e-15);
  EXPECT_NEAR(t->PredictStepAt(4, 8, none), t->PredictStep(4, 8, 0), 1e-15);
  EXPECT_NEAR(t->PredictStepAt(4, 8, one_deep), 0.030 - 0.008 + 0.0055, 1e-15);
  EXPECT_LT(t->PredictStepAt(4, 8, one_deep), t->PredictStep(4, 8, 2));
  // Without a split the rows change nothing.
  const CostTable plain = *CostTable::Create({1, 4}, {1, 8}, {0.010, 0.012, 0.020, 0.030});
  EXPECT_EQ(plain.PredictStepAt(4, 8, one_deep), plain.Predict(4, 8));
}

TEST(CostTableTest, DraftRowsPerPassCountsTheRequestsDeeperThanEachPass) {
  std::vector<int64_t> rows = {9, 9, 9};  // overwritten
  const std::vector<int32_t> depths = {0, 3, 1, 0, 2};
  DraftRowsPerPass(depths, &rows);
  EXPECT_EQ(rows, (std::vector<int64_t>{3, 2, 1}));
  const std::vector<int32_t> plain = {0, 0};
  DraftRowsPerPass(plain, &rows);
  EXPECT_TRUE(rows.empty());
}

TEST(CostTableTest, SaveAndLoad) {
  const CostTable t = AffineTable();
  const std::string path = std::string(::testing::TempDir()) + "/cost_table_test.json";
  ASSERT_TRUE(t.Save(path).ok());
  const absl::StatusOr<CostTable> back = CostTable::Load(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Predict(5, 17), t.Predict(5, 17));
  std::remove(path.c_str());
  EXPECT_EQ(CostTable::Load(path).status().code(), absl::StatusCode::kNotFound);
}

TEST(CostTableTest, KeepsTheTpItWasMeasuredAt) {
  CostTable t = AffineTable();
  EXPECT_EQ(t.measured_tp(), 0);
  EXPECT_THAT(t.ToJson(), ::testing::Not(HasSubstr("\"tp\"")));
  t.set_measured_tp(4);
  const absl::StatusOr<CostTable> back = CostTable::FromJson(t.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->measured_tp(), 4);
  EXPECT_EQ(back->Predict(5, 17), t.Predict(5, 17));
}

TEST(CostTableTest, KeepsWhereItWasMeasured) {
  CostTable t = AffineTable();
  EXPECT_FALSE(t.origin().has_value());
  EXPECT_THAT(t.ToJson(), ::testing::Not(HasSubstr("measured_on")));
  const CostTableOrigin origin{"NVIDIA H200", "llama h4096", "llama h2048"};
  t.set_origin(origin);
  const absl::StatusOr<CostTable> back = CostTable::FromJson(t.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->origin().has_value());
  EXPECT_EQ(*back->origin(), origin);
}

TEST(CostTableTest, IgnoresUnknownKeys) {
  const absl::StatusOr<CostTable> t = CostTable::FromJson(
      R"({"device": "H200", "batch_sizes": [1], "verify_tokens": [1, 2],
          "seconds": [[0.5, 0.75]]})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NEAR(t->Predict(1, 1.5), 0.625, 1e-16);
}

struct BadTable {
  const char* name;
  const char* json;
  const char* message;
};

class CostTableRefusalTest : public ::testing::TestWithParam<BadTable> {};

TEST_P(CostTableRefusalTest, NamesTheProblem) {
  const absl::StatusOr<CostTable> t = CostTable::FromJson(GetParam().json);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Refusals, CostTableRefusalTest,
    ::testing::Values(
        BadTable{"MissingCell", R"({"batch_sizes": [1, 8], "verify_tokens": [1, 16, 64],
                  "seconds": [[0.1, 0.2, 0.3], [0.2, 0.3]]})",
                 "seconds[1][2] (batch 8, tokens 64) is missing"},
        BadTable{"NullCell", R"({"batch_sizes": [1, 8], "verify_tokens": [1, 16],
                  "seconds": [[0.1, null], [0.2, 0.3]]})",
                 "seconds[0][1] (batch 1, tokens 16) is missing"},
        BadTable{"MissingRow",
                 R"({"batch_sizes": [1, 8], "verify_tokens": [1, 16], "seconds": [[0.1, 0.2]]})",
                 "seconds[1][0] (batch 8, tokens 1) is missing"},
        BadTable{"ZeroTime", R"({"batch_sizes": [1, 8], "verify_tokens": [1, 16],
                  "seconds": [[0.1, 0.2], [0.0, 0.3]]})",
                 "seconds[1][0] (batch 8, tokens 1) = 0 is not a positive time"},
        BadTable{"NegativeTime", R"({"batch_sizes": [1, 8], "verify_tokens": [1, 16],
                  "seconds": [[0.1, -0.2], [0.1, 0.3]]})",
                 "seconds[0][1] (batch 1, tokens 16) = -0.2 is not a positive time"},
        BadTable{"StringTime",
                 R"({"batch_sizes": [1], "verify_tokens": [1], "seconds": [["fast"]]})",
                 "seconds[0][0] (batch 1, tokens 1) is not a number"},
        BadTable{"RepeatedBatch", R"({"batch_sizes": [1, 8, 8], "verify_tokens": [1],
                  "seconds": [[0.1], [0.2], [0.3]]})",
                 "batch_sizes[2] = 8 is not above batch_sizes[1] = 8"},
        BadTable{"DecreasingTokens", R"({"batch_sizes": [1], "verify_tokens": [16, 4],
                  "seconds": [[0.1, 0.2]]})",
                 "verify_tokens[1] = 4 is not above verify_tokens[0] = 16"},
        BadTable{"ZeroGridValue",
                 R"({"batch_sizes": [0, 1], "verify_tokens": [1], "seconds": [[0.1], [0.2]]})",
                 "batch_sizes[0] = 0 is not a positive number"},
        BadTable{"ExtraRow",
                 R"({"batch_sizes": [1], "verify_tokens": [1], "seconds": [[0.1], [0.2]]})",
                 "'seconds' has 2 rows, the batch grid has 1"},
        BadTable{"ExtraCell",
                 R"({"batch_sizes": [1], "verify_tokens": [1], "seconds": [[0.1, 0.2]]})",
                 "seconds[0] has 2 cells, the token grid has 1"},
        BadTable{"EmptyGrid", R"({"batch_sizes": [], "verify_tokens": [1], "seconds": []})",
                 "batch_sizes is empty"},
        BadTable{"NoSeconds", R"({"batch_sizes": [1], "verify_tokens": [1]})",
                 "'seconds' is missing"},
        BadTable{"ZeroTp",
                 R"({"tp": 0, "batch_sizes": [1], "verify_tokens": [1], "seconds": [[0.1]]})",
                 "'tp' must be a positive integer, got 0"},
        BadTable{"FractionalTp",
                 R"({"tp": 1.5, "batch_sizes": [1], "verify_tokens": [1], "seconds": [[0.1]]})",
                 "'tp' must be a positive integer, got 1.5"},
        // Counts beyond int32, and integers stored as unsigned 64-bit (a
        // negative int64 when read as one) in the tp field.
        BadTable{"HugeBatchSize",
                 R"({"batch_sizes": [1, 1099511627776], "verify_tokens": [1],
                  "seconds": [[0.1], [0.2]]})",
                 "batch_sizes[1] = 1.09951e+12 is above 2.14748e+09"},
        BadTable{"HugeVerifyTokens",
                 R"({"batch_sizes": [1], "verify_tokens": [1, 4294967297],
                  "seconds": [[0.1, 0.2]]})",
                 "verify_tokens[1] = 4.29497e+09 is above 2.14748e+09"},
        BadTable{"WrappingTp",
                 R"({"tp": 18446744073709551615, "batch_sizes": [1], "verify_tokens": [1],
                  "seconds": [[0.1]]})",
                 "'tp' must be a positive integer, got 18446744073709551615 (the range is [1, "
                 "65536])"},
        BadTable{"HugeTp",
                 R"({"tp": 4294967297, "batch_sizes": [1], "verify_tokens": [1],
                  "seconds": [[0.1]]})",
                 "'tp' must be a positive integer, got 4294967297 (the range is [1, 65536])"},
        BadTable{"BooleanTp",
                 R"({"tp": true, "batch_sizes": [1], "verify_tokens": [1], "seconds": [[0.1]]})",
                 "'tp' must be a positive integer, got true"},
        BadTable{"BooleanTime",
                 R"({"batch_sizes": [1], "verify_tokens": [1], "seconds": [[true]]})",
                 "seconds[0][0] (batch 1, tokens 1) is not a number"},
        BadTable{"OriginNotObject",
                 R"({"measured_on": "H200", "batch_sizes": [1], "verify_tokens": [1],
                  "seconds": [[0.1]]})",
                 "'measured_on' is not an object, got \"H200\""},
        BadTable{"OriginWithoutDraft",
                 R"({"measured_on": {"device": "H200", "target": "llama"}, "batch_sizes": [1],
                  "verify_tokens": [1], "seconds": [[0.1]]})",
                 "'measured_on' needs 'draft', a non-empty string of at most 256 bytes"},
        BadTable{"OriginEmptyDevice",
                 R"({"measured_on": {"device": "", "target": "a", "draft": "b"},
                  "batch_sizes": [1], "verify_tokens": [1], "seconds": [[0.1]]})",
                 "'measured_on' needs 'device', a non-empty string of at most 256 bytes, got"},
        BadTable{"OriginNumericTarget",
                 R"({"measured_on": {"device": "H200", "target": 7, "draft": "b"},
                  "batch_sizes": [1], "verify_tokens": [1], "seconds": [[0.1]]})",
                 "'measured_on' needs 'target', a non-empty string of at most 256 bytes, got 7"},
        BadTable{"NotJson", R"({"batch_sizes": [1], )", "not valid JSON"},
        BadTable{"NotObject", R"([1, 2])", "not an object"}),
    [](const ::testing::TestParamInfo<BadTable>& info) { return std::string(info.param.name); });

TEST(CostTableTest, AcceptsTheLargestGridValue) {
  const absl::StatusOr<CostTable> t = CostTable::FromJson(
      R"({"batch_sizes": [1, 2147483647], "verify_tokens": [1, 2147483647],
          "seconds": [[0.1, 0.2], [0.3, 0.4]], "tp": 65536})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->measured_tp(), 65536);
}

TEST(CostTableTest, CreateRefusesSizeMismatch) {
  EXPECT_FALSE(CostTable::Create({1, 2}, {1, 2}, {0.1, 0.2, 0.3}).ok());
}

}  // namespace
}  // namespace verdict
