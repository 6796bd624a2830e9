#include "runtime/model/graph_shapes.h"

#include <algorithm>
#include <ostream>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace verdict {
namespace {

void PrintTo(const GraphShape& s, std::ostream* os) {
  *os << "{" << s.requests << " requests, " << s.tokens << " tokens, query " << s.max_query << "}";
}

std::set<GraphShape> AsSet(const std::vector<GraphShape>& shapes) {
  return {shapes.begin(), shapes.end()};
}

TEST(GraphShapesTest, PaddingHoldsEveryPassAndRepeats) {
  for (int q = 1; q <= 9; ++q) {
    for (int requests = 1; requests <= 600; ++requests) {
      const int bucket = RequestBucket(requests);
      ASSERT_GE(bucket, requests);
      for (int tokens = requests; tokens <= requests * q; tokens += 1 + tokens / 64) {
        const LaunchShape s = PaddedShape(requests, tokens, q);
        ASSERT_EQ(s.requests, bucket + std::max(1, (bucket + 7) / 8)) << requests;
        ASSERT_EQ(s.phantoms, s.requests - requests);
        ASSERT_EQ(s.tokens, tokens + s.pad_tokens);
        // At most an eighth more tokens (or less than one query's worth),
        // and the phantoms can hold the padding at q tokens each.
        ASSERT_LE(s.pad_tokens, std::max(q - 1, tokens / 8)) << requests << " " << tokens;
        ASSERT_LE(s.pad_tokens, s.phantoms * q) << requests << " " << tokens;
        ASSERT_EQ(s.tokens % q, 0);
      }
      // A block of q tokens a request is never padded within its first
      // eight requests' exact buckets.
      if (requests <= 8) EXPECT_EQ(PaddedShape(requests, requests * q, q).pad_tokens, 0);
    }
  }
}

// Every pass of up to max_requests requests whose longest query is q finds
// its padded shape among the start-up shapes (a brute force over request
// counts and token counts).
TEST(GraphShapesTest, StartupShapesCoverEveryRaggedPass) {
  for (const int max_requests : {1, 7, 8, 9, 63, 64, 65, 200, 256, 300, 512}) {
    const std::vector<int> queries = {1, 3, 5};
    const std::set<GraphShape> all =
        AsSet(StartupGraphShapes(max_requests, queries, GraphTiers::kAll));
    const std::set<GraphShape> blocks =
        AsSet(StartupGraphShapes(max_requests, queries, GraphTiers::kBlocks));
    EXPECT_TRUE(std::includes(all.begin(), all.end(), blocks.begin(), blocks.end()));
    std::set<GraphShape> reached;
    for (const int q : queries) {
      for (int requests = 1; requests <= max_requests; ++requests) {
        // One request holds q tokens, the others 1 to q.
        for (int tokens = requests - 1 + q; tokens <= requests * q; ++tokens) {
          const LaunchShape s = PaddedShape(requests, tokens, q);
          const GraphShape key{s.requests, s.tokens, q};
          ASSERT_TRUE(all.count(key)) << max_requests << ": " << requests << " requests, "
                                      << tokens << " tokens, query " << q;
          reached.insert(key);
        }
        const LaunchShape block = PaddedShape(requests, requests * q, q);
        ASSERT_TRUE(blocks.count(GraphShape{block.requests, block.tokens, q}))
            << max_requests << ": a block of " << requests << " x " << q;
      }
    }
    // Nothing captured that no pass reaches.
    EXPECT_EQ(reached, all) << max_requests;
  }
}

TEST(GraphShapesTest, CountsStayModest) {
  // What a server of 256 requests and four drafts captures for its target.
  const auto blocks = StartupGraphShapes(256, {1, 5}, GraphTiers::kBlocks);
  const auto all = StartupGraphShapes(256, {1, 5}, GraphTiers::kAll);
  EXPECT_LE(blocks.size(), 120u);
  EXPECT_GT(all.size(), blocks.size());
  EXPECT_TRUE(StartupGraphShapes(0, {1, 5}, GraphTiers::kAll).empty());
  EXPECT_TRUE(StartupGraphShapes(64, {}, GraphTiers::kAll).empty());
}

}  // namespace
}  // namespace verdict
