#include "runtime/bench/bench_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace verdict {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr size_t kMaxErrorsKept = 5;

}  // namespace

int RequestRecord::streamed_tokens() const {
  return std::accumulate(chunk_tokens.begin(), chunk_tokens.end(), 0);
}

double RequestRecord::ttft_s() const { return chunk_times_s.empty() ? -1 : chunk_times_s[0]; }

double RequestRecord::decode_rate() const {
  if (chunk_times_s.size() < 2) return -1;
  const double seconds = chunk_times_s.back() - chunk_times_s.front();
  const int tokens = streamed_tokens() - chunk_tokens.front();
  if (seconds <= 0 || tokens <= 0) return -1;
  return tokens / seconds;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * (values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (rank - lo) * (values[hi] - values[lo]);
}

PointSummary Summarize(int concurrency, absl::Span<const RequestRecord> records, double duration_s,
                       std::optional<int64_t> verified_drafts,
                       std::optional<int64_t> server_generated_tokens) {
  PointSummary s;
  s.concurrency = concurrency;
  s.num_requests = static_cast<int>(records.size());
  s.duration_s = duration_s;
  s.server_generated_tokens = server_generated_tokens;
  std::vector<double> ttft, itl, e2e, rates;
  for (const RequestRecord& r : records) {
    if (!r.ok) {
      ++s.failed;
      if (s.errors.size() < kMaxErrorsKept &&
          std::find(s.errors.begin(), s.errors.end(), r.error) == s.errors.end()) {
        s.errors.push_back(r.error);
      }
      continue;
    }
    ++s.completed;
    s.prompt_tokens += r.prompt_tokens;
    s.completion_tokens += r.completion_tokens;
    s.streamed_tokens += r.streamed_tokens();
    s.draft_tokens += r.draft_tokens;
    s.accepted_tokens += r.accepted_tokens;
    s.verify_steps += r.verify_steps;
    if (r.ttft_s() >= 0) ttft.push_back(r.ttft_s() * 1e3);
    e2e.push_back((r.end_s - r.start_s) * 1e3);
    for (size_t k = 1; k < r.chunk_times_s.size(); ++k) {
      const double gap_ms = (r.chunk_times_s[k] - r.chunk_times_s[k - 1]) * 1e3;
      for (int t = 0; t < r.chunk_tokens[k]; ++t) itl.push_back(gap_ms / r.chunk_tokens[k]);
    }
    if (r.decode_rate() > 0) rates.push_back(r.decode_rate());
  }
  if (!rates.empty()) {
    s.mean_request_decode_rate =
        std::accumulate(rates.begin(), rates.end(), 0.0) / static_cast<double>(rates.size());
  }
  const int effective_concurrency = std::min(concurrency, std::max(s.num_requests, 1));
  s.decode_tokens_per_s = s.mean_request_decode_rate * effective_concurrency;
  if (duration_s > 0) {
    s.output_tokens_per_s = static_cast<double>(s.completion_tokens) / duration_s;
    s.requests_per_s = s.completed / duration_s;
  }
  s.ttft_p50_ms = Percentile(ttft, 50);
  s.ttft_p99_ms = Percentile(ttft, 99);
  s.itl_p50_ms = Percentile(itl, 50);
  s.itl_p99_ms = Percentile(itl, 99);
  s.e2e_p50_ms = Percentile(e2e, 50);
  s.e2e_p99_ms = Percentile(e2e, 99);
  if (s.verify_steps > 0) {
    const double steps = static_cast<double>(s.verify_steps);
    s.acceptance_length = (s.accepted_tokens + steps) / steps;
    if (verified_drafts.has_value()) {
      s.verify_tokens_per_step = 1 + *verified_drafts / steps;
      s.verify_tokens_source = "server";
    } else {
      s.verify_tokens_per_step = 1 + s.draft_tokens / steps;
      s.verify_tokens_source = "drafts";
    }
  } else {
    s.acceptance_length = kNaN;
    s.verify_tokens_per_step = kNaN;
  }
  return s;
}

absl::StatusOr<double> PrometheusValue(absl::string_view text, absl::string_view name) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() < 2 || fields[0] != name) continue;
    double value;
    if (!absl::SimpleAtod(fields[1], &value)) {
      return absl::DataLossError(absl::StrCat("metric ", name, " has value '", fields[1], "'"));
    }
    return value;
  }
  return absl::NotFoundError(absl::StrCat("no metric ", name));
}

}  // namespace verdict
