#include "runtime/cli/bench_command.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "runtime/bench/bench_http_client.h"
#include "runtime/bench/bench_load.h"
#include "runtime/bench/bench_prompts.h"
#include "runtime/bench/bench_report.h"
#include "runtime/bench/bench_stats.h"

ABSL_FLAG(std::string, bench_url, "http://127.0.0.1:8000",
          "bench: the server's root URL (requests go to /v1/completions)");
ABSL_FLAG(std::string, bench_model, "",
          "bench: the `model` each request names; empty: left out (the served model)");
ABSL_FLAG(std::string, bench_api_key, "", "bench: sent as `Authorization: Bearer KEY`");
ABSL_FLAG(std::string, bench_concurrency, "1,4,8,16,32,64,128,512",
          "bench: the concurrency sweep, comma-separated (clients with one request in flight "
          "each)");
ABSL_FLAG(int, bench_num_requests, 0,
          "bench: measured requests per concurrency; 0: four per client, at least 16");
ABSL_FLAG(int, bench_max_tokens, 128,
          "bench: output tokens of every request (sent with ignore_eos, so each request "
          "generates exactly this many)");
ABSL_FLAG(std::string, bench_prompts, "builtin",
          "bench: `builtin` (32 openings of the bundled corpus's books) or a JSONL file with one "
          "{\"prompt\": text or token ids} a line");
ABSL_FLAG(double, bench_temperature, 1.0, "bench: sampling temperature (0: greedy)");
ABSL_FLAG(double, bench_top_p, 1.0, "bench: nucleus sampling mass");
ABSL_FLAG(double, bench_min_p, 0.0, "bench: min-p (0 = off)");
ABSL_FLAG(int, bench_top_k, 0, "bench: top-k filter (0: off)");
ABSL_FLAG(uint64_t, bench_seed, 1,
          "bench: request i of every point is seeded bench_seed + i, so reruns and other server "
          "configurations get the same requests");
ABSL_FLAG(int, bench_warmup_requests, -1,
          "bench: requests sent at each point's concurrency before it is measured, not counted "
          "(-1: one per client; 0: none)");
ABSL_FLAG(int, bench_warmup_max_tokens, 16, "bench: output tokens of each warm-up request");
ABSL_FLAG(std::string, bench_metrics_url, "",
          "bench: the server's Prometheus endpoint (http://HOST:PORT/metrics); with it, verify "
          "tokens come from the server's verified-draft counter and its generated-token counter "
          "is checked against the streamed tokens (the server must serve nothing else meanwhile)");
ABSL_FLAG(std::string, bench_out, "bench",
          "bench: output path prefix: writes PREFIX.json, PREFIX.csv and PREFIX.md");
ABSL_FLAG(std::string, bench_label, "",
          "bench: the configuration's name in the reports (for example static-tp1)");
ABSL_FLAG(bool, bench_progress, true, "bench: show progress on stderr");
ABSL_FLAG(double, bench_request_timeout, 600,
          "bench: seconds a request may wait for its next bytes before it counts as failed");

namespace verdict {
namespace {

using json = nlohmann::json;

// The server's counters that a point's numbers are checked against.
struct ServerCounters {
  int64_t verified_drafts = 0;
  int64_t generated_tokens = 0;
};

absl::StatusOr<ServerCounters> ScrapeCounters(const HttpTarget& target) {
  HttpRequestSpec spec;
  spec.path = "";  // the URL names the metrics path itself
  spec.timeout = absl::Seconds(10);
  absl::StatusOr<HttpResponse> response = FetchHttp(target, spec);
  if (!response.ok()) return response.status();
  if (response->status != 200) {
    return absl::UnavailableError(absl::StrCat("metrics: HTTP ", response->status));
  }
  absl::StatusOr<double> verified =
      PrometheusValue(response->body, "verdict_draft_tokens_verified_total");
  if (!verified.ok()) return verified.status();
  absl::StatusOr<double> generated =
      PrometheusValue(response->body, "verdict_generated_tokens_total");
  if (!generated.ok()) return generated.status();
  return ServerCounters{static_cast<int64_t>(std::llround(*verified)),
                        static_cast<int64_t>(std::llround(*generated))};
}

// The served model's name, from /v1/models; also shows the server answers.
absl::StatusOr<std::string> ServedModelName(const HttpTarget& target, const std::string& key) {
  HttpRequestSpec spec;
  spec.path = "/v1/models";
  spec.timeout = absl::Seconds(30);
  if (!key.empty()) spec.headers.push_back({"Authorization", "Bearer " + key});
  absl::StatusOr<HttpResponse> response = FetchHttp(target, spec);
  if (!response.ok()) return response.status();
  if (response->status != 200) {
    return absl::UnavailableError(absl::StrCat("/v1/models answered HTTP ", response->status));
  }
  const json doc = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_object() && doc.contains("data") && doc["data"].is_array() && !doc["data"].empty() &&
      doc["data"][0].contains("id") && doc["data"][0]["id"].is_string()) {
    return doc["data"][0]["id"].get<std::string>();
  }
  return absl::DataLossError("/v1/models names no model");
}

// Progress on stderr: one line rewritten in place on a terminal, a line per
// quarter of the point elsewhere (logs of the sweep driver and CI).
class ProgressLine {
 public:
  ProgressLine(std::string what, bool enabled)
      : what_(std::move(what)), enabled_(enabled), tty_(isatty(STDERR_FILENO) == 1) {}

  void Update(const LoadProgress& p) {
    if (!enabled_ || p.total == 0) return;
    const int quarter = 4 * p.done / p.total;
    const bool finished = p.done == p.total;
    if (!tty_ && quarter == last_quarter_ && !finished) return;
    last_quarter_ = quarter;
    const std::string line =
        absl::StrFormat("%s: %d/%d requests%s, %.1f s, %.0f tok/s", what_, p.done, p.total,
                        p.failed > 0 ? absl::StrCat(" (", p.failed, " failed)") : "", p.elapsed_s,
                        p.elapsed_s > 0 ? p.tokens / p.elapsed_s : 0.0);
    if (tty_) {
      std::fprintf(stderr, "\r%-79s%s", line.c_str(), finished ? "\n" : "");
    } else if (!(finished && printed_final_)) {
      std::fprintf(stderr, "%s\n", line.c_str());
      printed_final_ = finished;
    }
    std::fflush(stderr);
  }

 private:
  const std::string what_;
  const bool enabled_;
  const bool tty_;
  int last_quarter_ = 0;  // a line at 25%, 50%, 75% and the end
  bool printed_final_ = false;
};

}  // namespace

absl::StatusOr<std::vector<int>> ParseConcurrencyList(absl::string_view list) {
  std::vector<int> out;
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    int c = 0;
    if (!absl::SimpleAtoi(item, &c) || c <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("concurrency '", item, "' is not a positive integer"));
    }
    out.push_back(c);
  }
  if (out.empty()) return absl::InvalidArgumentError("the concurrency list is empty");
  return out;
}

int RunBenchCommand(absl::Span<char* const> positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "verdict bench: unexpected argument '%s'\n", positional[0]);
    return 2;
  }
  auto usage_error = [](const absl::Status& s) {
    std::fprintf(stderr, "verdict bench: %s\n", std::string(s.message()).c_str());
    return 2;
  };
  absl::StatusOr<std::vector<int>> sweep =
      ParseConcurrencyList(absl::GetFlag(FLAGS_bench_concurrency));
  if (!sweep.ok()) return usage_error(sweep.status());
  absl::StatusOr<HttpTarget> target = ParseHttpUrl(absl::GetFlag(FLAGS_bench_url));
  if (!target.ok()) return usage_error(target.status());
  std::optional<HttpTarget> metrics;
  if (!absl::GetFlag(FLAGS_bench_metrics_url).empty()) {
    absl::StatusOr<HttpTarget> m = ParseHttpUrl(absl::GetFlag(FLAGS_bench_metrics_url));
    if (!m.ok()) return usage_error(m.status());
    metrics = *m;
    if (metrics->base_path.empty()) metrics->base_path = "/metrics";
  }
  absl::StatusOr<std::vector<BenchPrompt>> prompts =
      LoadPrompts(absl::GetFlag(FLAGS_bench_prompts));
  if (!prompts.ok()) return usage_error(prompts.status());
  const int max_tokens = absl::GetFlag(FLAGS_bench_max_tokens);
  const int warmup_max_tokens = absl::GetFlag(FLAGS_bench_warmup_max_tokens);
  if (max_tokens < 1 || warmup_max_tokens < 1) {
    return usage_error(absl::InvalidArgumentError(
        "--bench-max-tokens and --bench-warmup-max-tokens must be at least 1"));
  }

  LoadOptions load;
  load.target = *target;
  load.model = absl::GetFlag(FLAGS_bench_model);
  load.api_key = absl::GetFlag(FLAGS_bench_api_key);
  load.max_tokens = max_tokens;
  load.temperature = absl::GetFlag(FLAGS_bench_temperature);
  load.top_p = absl::GetFlag(FLAGS_bench_top_p);
  load.min_p = absl::GetFlag(FLAGS_bench_min_p);
  load.top_k = absl::GetFlag(FLAGS_bench_top_k);
  load.seed = absl::GetFlag(FLAGS_bench_seed);
  load.request_timeout = absl::Seconds(absl::GetFlag(FLAGS_bench_request_timeout));

  absl::StatusOr<std::string> model = ServedModelName(load.target, load.api_key);
  if (!model.ok()) {
    std::fprintf(stderr, "verdict bench: the server at %s does not answer: %s\n",
                 absl::GetFlag(FLAGS_bench_url).c_str(), model.status().ToString().c_str());
    return 1;
  }

  BenchReport report;
  BenchConfig& config = report.config;
  config.label = absl::GetFlag(FLAGS_bench_label);
  config.url = absl::GetFlag(FLAGS_bench_url);
  config.model = load.model.empty() ? *model : load.model;
  config.prompts = absl::GetFlag(FLAGS_bench_prompts);
  config.num_prompts = static_cast<int>(prompts->size());
  config.max_tokens = max_tokens;
  config.temperature = load.temperature;
  config.top_p = load.top_p;
  config.min_p = load.min_p;
  config.top_k = load.top_k;
  config.seed = load.seed;
  config.warmup_requests = absl::GetFlag(FLAGS_bench_warmup_requests);
  config.warmup_max_tokens = warmup_max_tokens;
  const bool progress = absl::GetFlag(FLAGS_bench_progress);
  const std::string name = config.label.empty() ? "bench" : config.label;

  bool all_ok = true;
  for (int concurrency : *sweep) {
    int num_requests = absl::GetFlag(FLAGS_bench_num_requests);
    if (num_requests <= 0) num_requests = std::max(16, 4 * concurrency);
    const int warmup = config.warmup_requests < 0 ? concurrency : config.warmup_requests;
    if (warmup > 0) {
      // Separate seeds, so warm-up requests never match measured ones.
      LoadOptions warm = load;
      warm.max_tokens = warmup_max_tokens;
      warm.seed = load.seed + (uint64_t{1} << 32);
      ProgressLine line(absl::StrCat(name, " c", concurrency, " warm-up"), progress);
      LoadResult w = RunLoad(warm, *prompts, concurrency, warmup,
                             [&](const LoadProgress& p) { line.Update(p); });
      const int warm_failed = static_cast<int>(std::count_if(
          w.records.begin(), w.records.end(), [](const RequestRecord& r) { return !r.ok; }));
      if (warm_failed > 0) {
        std::fprintf(stderr, "verdict bench: %d of %d warm-up requests failed, first: %s\n",
                     warm_failed, warmup,
                     std::find_if(w.records.begin(), w.records.end(), [](const RequestRecord& r) {
                       return !r.ok;
                     })->error.c_str());
      }
    }
    std::optional<ServerCounters> before;
    if (metrics) {
      absl::StatusOr<ServerCounters> c = ScrapeCounters(*metrics);
      if (c.ok()) {
        before = *c;
      } else {
        std::fprintf(stderr, "verdict bench: cannot read the server's counters: %s\n",
                     c.status().ToString().c_str());
      }
    }
    ProgressLine line(absl::StrCat(name, " c", concurrency), progress);
    LoadResult result = RunLoad(load, *prompts, concurrency, num_requests,
                                [&](const LoadProgress& p) { line.Update(p); });
    std::optional<int64_t> verified, generated;
    if (before) {
      absl::StatusOr<ServerCounters> after = ScrapeCounters(*metrics);
      if (after.ok()) {
        verified = after->verified_drafts - before->verified_drafts;
        generated = after->generated_tokens - before->generated_tokens;
      }
    }
    BenchPoint point;
    point.summary = Summarize(concurrency, result.records, result.duration_s, verified, generated);
    point.requests = std::move(result.records);
    PointSummary& s = point.summary;
    if (s.streamed_tokens != s.completion_tokens) {
      s.errors.push_back(absl::StrCat("streamed ", s.streamed_tokens,
                                      " tokens in all, usage counts ", s.completion_tokens));
    }
    // The server counts failed requests' tokens too, so compare only when
    // every request completed.
    if (generated && s.failed == 0 && *generated != s.completion_tokens) {
      s.errors.push_back(absl::StrCat("the server counted ", *generated,
                                      " generated tokens, the clients ", s.completion_tokens));
    }
    all_ok &= s.failed == 0 && s.errors.empty();
    std::fprintf(stderr,
                 "%s c%d: %d/%d completed, decode %.0f tok/s, %.2f req/s, TTFT p50 %.1f ms, "
                 "ITL p50 %.2f ms, acceptance length %s\n",
                 name.c_str(), concurrency, s.completed, s.num_requests, s.decode_tokens_per_s,
                 s.requests_per_s, s.ttft_p50_ms, s.itl_p50_ms,
                 std::isfinite(s.acceptance_length)
                     ? absl::StrFormat("%.2f", s.acceptance_length).c_str()
                     : "-");
    for (const std::string& e : s.errors) std::fprintf(stderr, "  %s\n", e.c_str());
    report.points.push_back(std::move(point));
  }

  const std::string prefix = absl::GetFlag(FLAGS_bench_out);
  if (absl::Status s = WriteReport(report, prefix); !s.ok()) {
    std::fprintf(stderr, "verdict bench: %s\n", s.ToString().c_str());
    return 1;
  }
  std::fputs(ReportMarkdown(report).c_str(), stdout);
  std::fprintf(stderr, "verdict bench: wrote %s.json, %s.csv and %s.md\n", prefix.c_str(),
               prefix.c_str(), prefix.c_str());
  return all_ok ? 0 : 1;
}

}  // namespace verdict
