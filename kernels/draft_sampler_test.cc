#include "kernels/draft_sampler.h"

#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace verdict {
namespace {

struct Rows {
  std::vector<float> logits, temperatures, top_ps;
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
    DraftSampleInputs in{n, vocab, logits.data(), temperatures.data(), top_ks.data(),
                         top_ps.data(), seeds.data(), positions.data()};
    DraftSampleOutputs out{tokens.data(), probs.data(), signals.data()};
    return DraftSampleCpu(in, &out);
  }
  void Add(const std::vector<float>& row, float t, int k, float p, uint64_t seed, int64_t pos) {
    logits.insert(logits.end(), row.begin(), row.end());
    temperatures.push_back(t);
    top_ks.push_back(k);
    top_ps.push_back(p);
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

}  // namespace
}  // namespace verdict
