#include "kernels/draft_sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace verdict {
namespace {

struct Rows {
  std::vector<float> logits, temperatures, top_ps, min_ps;
  std::vector<int32_t> top_ks;
  std::vector<uint64_t> seeds;
  std::vector<int64_t> positions;
  std::vector<int32_t> tokens;
  std::vector<float> probs, signals;

  absl::Status Run(int vocab) {
    const int n = static_cast<int>(temperatures.size());
    tokens.assign(n, -1);
    probs.assign(static_cast<size_t>(n) * vocab, -1.0f);
    signals.assign(n, -1.0f);
    DraftSampleInputs in{n,           vocab,         logits.data(),    temperatures.data(),
                         top_ks.data(), top_ps.data(), seeds.data(), positions.data(),
                         min_ps.data()};
    DraftSampleOutputs out{tokens.data(), probs.data(), signals.data()};
    return DraftSampleCpu(in, &out);
  }
  void Add(const std::vector<float>& row, float t, int k, float p, uint64_t seed, int64_t pos,
           float min_p = 0.0f) {
    logits.insert(logits.end(), row.begin(), row.end());
    temperatures.push_back(t);
    top_ks.push_back(k);
    top_ps.push_back(p);
    min_ps.push_back(min_p);
    seeds.push_back(seed);
    positions.push_back(pos);
  }
};

TEST(DraftSamplerTest, GreedyProposesArgmaxWithTemperatureOneSignal) {
  Rows rows;
  rows.Add({0.0f, 2.0f, 2.0f, 1.0f}, 0.0f, 0, 1.0f, 1, 0);
  ASSERT_TRUE(rows.Run(4).ok());
  EXPECT_EQ(rows.tokens[0], 1);  // ties go to the lowest id
  EXPECT_EQ(rows.probs[1], 1.0f);
  EXPECT_EQ(rows.probs[2], 0.0f);
  const double z = 1 + 2 * std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(rows.signals[0], std::exp(2.0) / z, 1e-6);
}

TEST(DraftSamplerTest, TopKAndTopPShapeTheDistribution) {
  Rows rows;
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                     std::log(0.05f)};
  rows.Add(logits, 1.0f, 2, 1.0f, 1, 0);   // top-k 2: {0.5, 0.3} renormalised
  rows.Add(logits, 1.0f, 0, 0.75f, 1, 0);  // top-p 0.75: {0.5, 0.3} reach 0.8
  rows.Add(logits, 1.0f, 0, 0.5f, 1, 0);   // top-p 0.5: {0.5} alone
  ASSERT_TRUE(rows.Run(4).ok());
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(rows.probs[r * 4 + 0], 0.625, 1e-6);
    EXPECT_NEAR(rows.probs[r * 4 + 1], 0.375, 1e-6);
    EXPECT_EQ(rows.probs[r * 4 + 2], 0.0f);
    EXPECT_EQ(rows.probs[r * 4 + 3], 0.0f);
    EXPECT_NEAR(rows.signals[r], 0.625, 1e-6);
  }
  EXPECT_EQ(rows.probs[8], 1.0f);
  EXPECT_EQ(rows.tokens[2], 0);
}

// Min-p keeps p >= min_p * p_max and comes before top-p (vLLM's order): over
// q = [0.4, 0.25, 0.2, 0.1, 0.05], min_p 0.3 keeps {0.4, 0.25, 0.2}; top-p
// 0.7 over that set (limit 0.595) then drops 0.2 (mass above it 0.65),
// where top-p over the whole row (limit 0.7) would have kept it.
TEST(DraftSamplerTest, MinPKeepsTheIdsNearTheMaximumBeforeTopP) {
  Rows rows;
  std::vector<float> logits;
  for (const double q : {0.4, 0.25, 0.2, 0.1, 0.05}) logits.push_back(std::log(q));
  rows.Add(logits, 1.0f, 0, 1.0f, 1, 0, 0.3f);
  rows.Add(logits, 1.0f, 0, 0.7f, 1, 0, 0.3f);
  rows.Add(logits, 1.0f, 2, 1.0f, 1, 0, 0.3f);  // top-k 2 is the smaller set
  rows.Add(logits, 1.0f, 0, 1.0f, 1, 0, 1.0f);  // the maximum alone
  ASSERT_TRUE(rows.Run(5).ok());
  const std::vector<std::vector<double>> expected = {{0.4 / 0.85, 0.25 / 0.85, 0.2 / 0.85, 0, 0},
                                                     {0.4 / 0.65, 0.25 / 0.65, 0, 0, 0},
                                                     {0.4 / 0.65, 0.25 / 0.65, 0, 0, 0},
                                                     {1, 0, 0, 0, 0}};
  for (int r = 0; r < 4; ++r) {
    for (int i = 0; i < 5; ++i) {
      if (expected[r][i] == 0) {
        EXPECT_EQ(rows.probs[r * 5 + i], 0.0f) << "row " << r << " id " << i;
      } else {
        EXPECT_NEAR(rows.probs[r * 5 + i], expected[r][i], 1e-6) << "row " << r << " id " << i;
      }
    }
    EXPECT_GT(expected[r][rows.tokens[r]], 0.0) << "row " << r;
  }
}

// The proposal follows p: chi-square over 20,000 positions of one row at
// temperature 0.8, against the 99.9% quantile of chi-square with 7 degrees
// of freedom (24.32).
TEST(DraftSamplerTest, ProposalsFollowTheReturnedDistribution) {
  const int vocab = 8, trials = 20000;
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> logits(vocab);
  for (float& x : logits) x = normal(gen);
  Rows rows;
  for (int t = 0; t < trials; ++t) rows.Add(logits, 0.8f, 0, 1.0f, 1234, t);
  ASSERT_TRUE(rows.Run(vocab).ok());
  std::vector<int> counts(vocab, 0);
  for (int t = 0; t < trials; ++t) ++counts[rows.tokens[t]];
  double chi2 = 0;
  for (int v = 0; v < vocab; ++v) {
    const double expected = rows.probs[v] * trials;
    chi2 += (counts[v] - expected) * (counts[v] - expected) / expected;
    EXPECT_EQ(rows.probs[v], rows.probs[static_cast<size_t>(trials - 1) * vocab + v]);
  }
  EXPECT_LT(chi2, 24.32);
}

TEST(DraftSamplerTest, SameSeedAndPositionSameToken) {
  Rows a, b;
  const std::vector<float> logits = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
  for (int t = 0; t < 50; ++t) {
    a.Add(logits, 1.0f, 0, 1.0f, 99, t);
    b.Add(logits, 1.0f, 0, 1.0f, 99, t);
  }
  ASSERT_TRUE(a.Run(5).ok());
  ASSERT_TRUE(b.Run(5).ok());
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_GT(std::set<int32_t>(a.tokens.begin(), a.tokens.end()).size(), 1u);
}

TEST(DraftSamplerTest, BadInputNamesTheRow) {
  Rows rows;
  rows.Add({0.0f, 1.0f}, 1.0f, 0, 1.0f, 1, 0);
  rows.Add({0.0f, NAN}, 1.0f, 0, 1.0f, 1, 0);
  absl::Status s = rows.Run(2);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("row 1"), std::string::npos) << s;
  Rows bad;
  bad.Add({0.0f, 1.0f}, 1.0f, 0, 0.0f, 1, 0);
  EXPECT_FALSE(bad.Run(2).ok());
}

TEST(DraftSamplerTest, TiesAtTheThresholdsAreKeptTogether) {
  Rows rows;
  rows.Add({3.0f, 2.0f, 2.0f, 2.0f, 1.0f}, 1.0f, 2, 1.0f, 1, 0);  // the 2nd value is tied
  const float third = std::log(0.2f);
  rows.Add({std::log(0.4f), third, third, third, -20.0f}, 1.0f, 0, 0.5f, 1, 0);
  ASSERT_TRUE(rows.Run(5).ok());
  for (int id = 0; id < 4; ++id) EXPECT_GT(rows.probs[id], 0.0f) << id;
  EXPECT_EQ(rows.probs[4], 0.0f);
  EXPECT_EQ(rows.probs[1], rows.probs[3]);
  // Top-p: 0.4 alone is short of 0.5, so the tied group at 0.2 joins whole.
  for (int id = 0; id < 4; ++id) EXPECT_GT(rows.probs[5 + id], 0.0f) << id;
  EXPECT_EQ(rows.probs[9], 0.0f);
}

TEST(DraftSamplerTest, SignalIsTheLargestP) {
  std::mt19937 gen(9);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int vocab = 300;
  Rows rows;
  const float ts[] = {0.5f, 1.0f, 1.7f};
  const int ks[] = {0, 1, 7};
  const float ps[] = {1.0f, 0.3f, 0.9f};
  for (const float t : ts) {
    for (const int k : ks) {
      for (const float p : ps) {
        std::vector<float> logits(vocab);
        for (float& x : logits) x = normal(gen);
        rows.Add(logits, t, k, p, 3, 17);
      }
    }
  }
  ASSERT_TRUE(rows.Run(vocab).ok());
  for (size_t r = 0; r < rows.signals.size(); ++r) {
    const float* p = rows.probs.data() + r * vocab;
    EXPECT_EQ(rows.signals[r], *std::max_element(p, p + vocab)) << r;
    EXPECT_GT(p[rows.tokens[r]], 0.0f) << r;  // the proposal is in p's support
  }
}

TEST(DraftSamplerTest, OverflowAtTheTemperatureIsRefused) {
  Rows rows;
  rows.Add({0.0f, 1.0f}, 1.0f, 0, 1.0f, 1, 0);
  rows.Add({3e38f, 1.0f}, 0.25f, 0, 1.0f, 1, 0);  // 3e38 * 4 is infinite
  const absl::Status s = rows.Run(2);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("row 1: logit of vocabulary id 0"), std::string::npos) << s;
}

TEST(DraftSamplerTest, BadParameterIsNamed) {
  Rows rows;
  rows.Add({0.0f, 1.0f}, 1.0f, 0, 1.0f, 1, 0);
  rows.Add({0.0f, 1.0f}, 1.0f, 0, 1.0f, 1, 0);
  rows.Add({0.0f, NAN}, 1.0f, -2, 1.0f, 1, 0);  // parameters are checked first
  DraftErrorRecord record;
  const int n = 3;
  rows.tokens.assign(n, -1);
  rows.probs.assign(2 * n, -1.0f);
  rows.signals.assign(n, -1.0f);
  DraftSampleInputs in{n, 2, rows.logits.data(), rows.temperatures.data(), rows.top_ks.data(),
                       rows.top_ps.data(), rows.seeds.data(), rows.positions.data()};
  DraftSampleOutputs out{rows.tokens.data(), rows.probs.data(), rows.signals.data(), &record};
  const absl::Status s = DraftSampleCpu(in, &out);
  EXPECT_EQ(s.message(), "draft sampler: row 2: bad sampling parameter: top_k (must be >= 0)");
  EXPECT_EQ(DraftErrorStatus(record), s);

  for (const float min_p : {-0.1f, 1.5f, NAN}) {
    Rows bad;
    bad.Add({0.0f, 1.0f}, 1.0f, 0, 1.0f, 1, 0, min_p);
    EXPECT_EQ(bad.Run(2).message(),
              "draft sampler: row 0: bad sampling parameter: min_p (must be in [0, 1])")
        << min_p;
  }
}

}  // namespace
}  // namespace verdict
