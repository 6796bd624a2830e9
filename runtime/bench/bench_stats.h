// What one `verdict bench` request saw, and the numbers of one sweep point
// computed from those records (the definitions are in PointSummary).
#ifndef VERDICT_RUNTIME_BENCH_BENCH_STATS_H_
#define VERDICT_RUNTIME_BENCH_BENCH_STATS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace verdict {

struct RequestRecord {
  int index = 0;  // within the point: picks the prompt and the seed
  int prompt_index = 0;
  bool ok = false;    // completed with exactly the tokens asked for
  std::string error;  // why not ok
  std::string finish_reason;
  double start_s = 0;  // when it was sent, since the point started
  double end_s = 0;    // when its stream ended
  // The stream's chunks that carried tokens: arrival, in seconds since the
  // request was sent, and token count. A speculative step commits several
  // tokens at once, so one chunk often carries several.
  std::vector<double> chunk_times_s;
  std::vector<int> chunk_tokens;
  // The final usage (verdict's "speculative" extension included).
  bool has_usage = false;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int draft_tokens = 0;
  int accepted_tokens = 0;
  int verify_steps = 0;
  int plain_steps = 0;  // steps without drafts (the draft plan's depth 0)

  int streamed_tokens() const;
  // Seconds from sending to the first token; -1 without tokens.
  double ttft_s() const;
  // Tokens after the first chunk over the time from the first to the last
  // chunk (seed 002's per-request decode rate); -1 when undefined (one
  // chunk only).
  double decode_rate() const;
};

struct PointSummary {
  int concurrency = 0;
  int num_requests = 0;
  int completed = 0;
  int failed = 0;
  double duration_s = 0;  // first send to last stream end
  // Seed 002's decode tok/s: the mean per-request decode rate times the
  // concurrency (capped at the request count). Counts only decoding, not
  // prefill or queueing, so it reads higher than output_tokens_per_s.
  double decode_tokens_per_s = 0;
  double mean_request_decode_rate = 0;
  double output_tokens_per_s = 0;  // completion tokens / duration
  double requests_per_s = 0;       // completed requests / duration
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  // Inter-token latency: each chunk's gap to the previous chunk, spread
  // evenly over its tokens (as the server's histogram counts it), one
  // sample a token.
  double itl_p50_ms = 0, itl_p99_ms = 0;
  double e2e_p50_ms = 0, e2e_p99_ms = 0;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // from the usage of completed requests
  int64_t streamed_tokens = 0;    // counted chunk by chunk
  int64_t draft_tokens = 0;
  int64_t accepted_tokens = 0;
  int64_t verify_steps = 0;  // request-steps: one per request per step
  // Tokens committed per verify step: (accepted + steps) / steps over all
  // completed requests; NaN without speculative steps.
  double acceptance_length = 0;
  // Target rows per request and step: 1 + drafts verified / steps. From
  // the server's verified-draft counter when given ("server"), else from
  // the drafts proposed ("drafts": an upper bound, as the server verifies
  // fewer in compact mode and in steps near a request's length limit).
  // NaN without speculative steps.
  double verify_tokens_per_step = 0;
  std::string verify_tokens_source;
  // The server's generated-token counter over the point, when scraped.
  std::optional<int64_t> server_generated_tokens;
  std::vector<std::string> errors;  // distinct failure reasons, first few
};

// The p-th percentile (0..100) with linear interpolation between order
// statistics (numpy's default); NaN for no values.
double Percentile(std::vector<double> values, double p);

// `verified_drafts` and `server_generated_tokens`: the server's counters'
// increase over the point, when known.
PointSummary Summarize(int concurrency, absl::Span<const RequestRecord> records, double duration_s,
                       std::optional<int64_t> verified_drafts = std::nullopt,
                       std::optional<int64_t> server_generated_tokens = std::nullopt);

// The value of an unlabelled sample `name` in Prometheus text format.
absl::StatusOr<double> PrometheusValue(absl::string_view text, absl::string_view name);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_BENCH_BENCH_STATS_H_
