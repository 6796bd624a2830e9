#include "runtime/model/graph_shapes.h"

#include <algorithm>
#include <set>

namespace verdict {
namespace {

int RoundUp(int n, int to) { return (n + to - 1) / to * to; }

// The largest request count below `bucket`'s that falls in another bucket.
int PreviousBucket(int bucket) {
  int below = bucket - 1;
  while (below > 0 && RequestBucket(below) == bucket) --below;
  return below;
}

}  // namespace

int RequestBucket(int requests) {
  if (requests <= 8) return requests;
  if (requests <= 64) return RoundUp(requests, 8);
  if (requests <= 256) return RoundUp(requests, 16);
  return RoundUp(requests, 32);
}

LaunchShape PaddedShape(int requests, int tokens, int max_query) {
  LaunchShape shape;
  const int bucket = RequestBucket(requests);
  int step = std::max(1, max_query);
  while (2 * step <= tokens / 8) step *= 2;
  const int padded_tokens = RoundUp(tokens, step);
  shape.pad_tokens = padded_tokens - tokens;
  shape.requests = bucket + std::max(1, (bucket + 7) / 8);
  shape.phantoms = shape.requests - requests;
  shape.tokens = padded_tokens;
  shape.max_query = max_query;
  return shape;
}

int64_t LaunchedTokens(int64_t requests, int64_t tokens, int max_query) {
  return PaddedShape(static_cast<int>(requests), static_cast<int>(tokens), max_query).tokens;
}

std::vector<GraphShape> StartupGraphShapes(int max_requests, const std::vector<int>& max_queries,
                                           GraphTiers tiers) {
  std::set<GraphShape> shapes;
  for (int bucket = 1; bucket <= RequestBucket(std::max(0, max_requests));
       bucket = RequestBucket(bucket + 1)) {
    const int below = PreviousBucket(bucket);
    // The last bucket only up to max_requests.
    const int most = std::min(bucket, max_requests);
    for (const int q : max_queries) {
      if (q < 1) continue;
      const auto add = [&](int tokens) {
        const LaunchShape s = PaddedShape(bucket, tokens, q);
        shapes.insert(GraphShape{s.requests, s.tokens, q});
      };
      if (tiers == GraphTiers::kBlocks) {
        for (int requests = below + 1; requests <= most; ++requests) add(requests * q);
      } else {
        // At least one request of q tokens and the others one each, up to
        // q each.
        for (int tokens = below + q; tokens <= most * q; ++tokens) add(tokens);
      }
    }
  }
  return {shapes.begin(), shapes.end()};
}

}  // namespace verdict
