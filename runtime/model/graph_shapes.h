// The launch shapes CUDA graphs are captured for (the CUDA backend,
// cuda_llama_model.cc), kept apart so that the host can reason about them
// without a GPU: which shape a pass runs at, and which shapes a server
// captures at start-up.
//
// A graphable pass runs padded to a shape that repeats from step to step,
// so that ragged steps (compact packing, per-request draft depths) find a
// captured graph instead of running eagerly: its requests are padded to a
// request bucket and its tokens to a token tier, with phantom requests that
// hold the pad tokens. The block table and the attention's context bound are
// the same for every pass that fits the graphs' context
// (CudaModelOptions::graph_max_context), so a graph is keyed by (requests,
// tokens, longest query) alone and can be captured before any request
// exists.
#ifndef VERDICT_RUNTIME_MODEL_GRAPH_SHAPES_H_
#define VERDICT_RUNTIME_MODEL_GRAPH_SHAPES_H_

#include <cstdint>
#include <vector>

namespace verdict {

// Requests rounded up: exact to 8, then steps of 8 to 64, of 16 to 256 and
// of 32 beyond.
int RequestBucket(int requests);

// The launch shape of a pass: its real requests and tokens plus the phantom
// requests that pad it. Phantoms come after the real requests and hold
// `pad_tokens` tokens between them (each at most the longest query). A
// padded pass of bucket B always launches B + max(1, ceil(B / 8)) requests,
// with or without pad tokens, so the launched request count is the
// bucket's alone; that is enough phantoms for any token padding (it stays
// below max(max_query, tokens / 8) and tokens <= B * max_query).
//
// Token tiers are multiples of max_query x 2^k, the largest such step
// within an eighth of the tokens: eight tiers an octave, at most 12.5%
// padding (a block of max_query tokens per request lands on a tier in the
// exact buckets, up to 8 requests; beyond, it may be padded too).
struct LaunchShape {
  int requests = 0;  // real + phantom
  int tokens = 0;    // real + pad_tokens
  int phantoms = 0;
  int pad_tokens = 0;
  int max_query = 0;
};
LaunchShape PaddedShape(int requests, int tokens, int max_query);

// PaddedShape's tokens: the rows a padded pass launches (the verify
// planner's PlannerOptions::launch_tokens).
int64_t LaunchedTokens(int64_t requests, int64_t tokens, int max_query);

// A captured graph's key: the launched requests (phantoms included), the
// launched tokens and the longest query.
struct GraphShape {
  int requests = 0;
  int tokens = 0;
  int max_query = 0;
  friend bool operator==(const GraphShape&, const GraphShape&) = default;
  friend auto operator<=>(const GraphShape&, const GraphShape&) = default;
};

// Which padded shapes a server captures before it serves, for passes of up
// to `max_requests` requests whose longest query is one of `max_queries`.
enum class GraphTiers {
  // A block of max_query tokens per request (plain decode steps, full
  // verify steps, the draft's passes): a shape or two a bucket and query
  // length.
  kBlocks,
  // Every tier a ragged pass of the bucket can reach (compact packing,
  // per-request depths): tokens from one request holding max_query tokens
  // and the rest one each, up to max_query each.
  kAll,
};
std::vector<GraphShape> StartupGraphShapes(int max_requests, const std::vector<int>& max_queries,
                                           GraphTiers tiers);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_MODEL_GRAPH_SHAPES_H_
