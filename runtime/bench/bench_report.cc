#include "runtime/bench/bench_report.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace verdict {
namespace {

using json = nlohmann::json;

json Number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// Fixed decimals, "-" for NaN.
std::string Fixed(double v, int decimals) {
  return std::isfinite(v) ? absl::StrFormat("%.*f", decimals, v) : "-";
}

// A CSV number: empty for NaN.
std::string CsvNumber(double v) { return std::isfinite(v) ? absl::StrFormat("%.6g", v) : ""; }

// Quotes a CSV field when it needs it.
std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

json SummaryJson(const PointSummary& s) {
  json j = {
      {"concurrency", s.concurrency},
      {"num_requests", s.num_requests},
      {"completed", s.completed},
      {"failed", s.failed},
      {"duration_s", Number(s.duration_s)},
      {"decode_tokens_per_s", Number(s.decode_tokens_per_s)},
      {"mean_request_decode_rate", Number(s.mean_request_decode_rate)},
      {"output_tokens_per_s", Number(s.output_tokens_per_s)},
      {"requests_per_s", Number(s.requests_per_s)},
      {"ttft_p50_ms", Number(s.ttft_p50_ms)},
      {"ttft_p99_ms", Number(s.ttft_p99_ms)},
      {"itl_p50_ms", Number(s.itl_p50_ms)},
      {"itl_p99_ms", Number(s.itl_p99_ms)},
      {"e2e_p50_ms", Number(s.e2e_p50_ms)},
      {"e2e_p99_ms", Number(s.e2e_p99_ms)},
      {"prompt_tokens", s.prompt_tokens},
      {"completion_tokens", s.completion_tokens},
      {"streamed_tokens", s.streamed_tokens},
      {"draft_tokens", s.draft_tokens},
      {"accepted_tokens", s.accepted_tokens},
      {"verify_steps", s.verify_steps},
      {"acceptance_length", Number(s.acceptance_length)},
      {"verify_tokens_per_step", Number(s.verify_tokens_per_step)},
      {"verify_tokens_source", s.verify_tokens_source},
      {"server_generated_tokens",
       s.server_generated_tokens ? json(*s.server_generated_tokens) : json(nullptr)},
      {"errors", s.errors},
  };
  return j;
}

json RequestJson(const RequestRecord& r) {
  return {
      {"index", r.index},
      {"prompt_index", r.prompt_index},
      {"ok", r.ok},
      {"error", r.error},
      {"finish_reason", r.finish_reason},
      {"start_s", Number(r.start_s)},
      {"ttft_ms", r.ttft_s() >= 0 ? json(r.ttft_s() * 1e3) : json(nullptr)},
      {"latency_ms", Number((r.end_s - r.start_s) * 1e3)},
      {"decode_tokens_per_s", r.decode_rate() > 0 ? json(r.decode_rate()) : json(nullptr)},
      {"chunks", r.chunk_tokens.size()},
      {"streamed_tokens", r.streamed_tokens()},
      {"prompt_tokens", r.prompt_tokens},
      {"completion_tokens", r.completion_tokens},
      {"draft_tokens", r.draft_tokens},
      {"accepted_tokens", r.accepted_tokens},
      {"verify_steps", r.verify_steps},
      {"plain_steps", r.plain_steps},
  };
}

constexpr const char* kCsvColumns[] = {
    "label",
    "concurrency",
    "num_requests",
    "completed",
    "failed",
    "duration_s",
    "decode_tokens_per_s",
    "output_tokens_per_s",
    "requests_per_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "acceptance_length",
    "verify_tokens_per_step",
    "verify_tokens_source",
    "prompt_tokens",
    "completion_tokens",
    "draft_tokens",
    "accepted_tokens",
    "verify_steps",
};

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

json ReportJson(const BenchReport& report) {
  const BenchConfig& c = report.config;
  json points = json::array();
  for (const BenchPoint& p : report.points) {
    json point = SummaryJson(p.summary);
    json requests = json::array();
    for (const RequestRecord& r : p.requests) requests.push_back(RequestJson(r));
    point["requests"] = std::move(requests);
    points.push_back(std::move(point));
  }
  return {
      {"version", kBenchReportVersion},
      {"label", c.label},
      {"config",
       {{"url", c.url},
        {"model", c.model},
        {"prompts", c.prompts},
        {"num_prompts", c.num_prompts},
        {"max_tokens", c.max_tokens},
        {"temperature", c.temperature},
        {"top_p", c.top_p},
        {"min_p", c.min_p},
        {"top_k", c.top_k},
        {"seed", c.seed},
        {"warmup_requests", c.warmup_requests},
        {"warmup_max_tokens", c.warmup_max_tokens}}},
      {"points", std::move(points)},
  };
}

std::string ReportCsv(const BenchReport& report) {
  std::string out = absl::StrCat(absl::StrJoin(kCsvColumns, ","), "\n");
  for (const BenchPoint& p : report.points) {
    const PointSummary& s = p.summary;
    std::vector<std::string> row = {
        CsvField(report.config.label),
        absl::StrCat(s.concurrency),
        absl::StrCat(s.num_requests),
        absl::StrCat(s.completed),
        absl::StrCat(s.failed),
        CsvNumber(s.duration_s),
        CsvNumber(s.decode_tokens_per_s),
        CsvNumber(s.output_tokens_per_s),
        CsvNumber(s.requests_per_s),
        CsvNumber(s.ttft_p50_ms),
        CsvNumber(s.ttft_p99_ms),
        CsvNumber(s.itl_p50_ms),
        CsvNumber(s.itl_p99_ms),
        CsvNumber(s.e2e_p50_ms),
        CsvNumber(s.e2e_p99_ms),
        CsvNumber(s.acceptance_length),
        CsvNumber(s.verify_tokens_per_step),
        s.verify_tokens_source,
        absl::StrCat(s.prompt_tokens),
        absl::StrCat(s.completion_tokens),
        absl::StrCat(s.draft_tokens),
        absl::StrCat(s.accepted_tokens),
        absl::StrCat(s.verify_steps),
    };
    absl::StrAppend(&out, absl::StrJoin(row, ","), "\n");
  }
  return out;
}

std::string ReportMarkdown(const BenchReport& report) {
  const BenchConfig& c = report.config;
  std::string out = absl::StrCat("## verdict bench", c.label.empty() ? "" : ": ", c.label, "\n\n");
  absl::StrAppend(
      &out, "Model `", c.model, "` at ", c.url, "; ", c.max_tokens,
      " output tokens per request (ignore_eos), temperature ", absl::StrFormat("%g", c.temperature),
      ", top_p ", absl::StrFormat("%g", c.top_p),
      c.top_k > 0 ? absl::StrCat(", top_k ", c.top_k) : "",
      c.min_p > 0 ? absl::StrCat(", min_p ", absl::StrFormat("%g", c.min_p)) : "", "; prompts: ", c.prompts, " (",
      c.num_prompts, "), request i seeded ", c.seed, " + i; ",
      c.warmup_requests == 0
          ? std::string("no warm-up")
          : absl::StrCat("warm-up: ",
                         c.warmup_requests < 0 ? std::string("one request per client")
                                               : absl::StrCat(c.warmup_requests, " requests"),
                         " of ", c.warmup_max_tokens, " tokens before each point"),
      ".\n\n");
  absl::StrAppend(
      &out,
      "Decode tok/s = per-request decode rate (output tokens after the first chunk / time after "
      "the first chunk), mean over requests, times concurrency; output tok/s = completion tokens "
      "/ wall time. ITL: each chunk's gap spread over its tokens. Acceptance length = tokens "
      "committed per verify step; verify tokens = target rows per request and step.\n\n");
  out +=
      "| concurrency | requests | decode tok/s | output tok/s | req/s | TTFT p50 (ms) | TTFT p99 "
      "(ms) | ITL p50 (ms) | ITL p99 (ms) | acceptance length | verify tokens |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  bool any_failed = false;
  for (const BenchPoint& p : report.points) {
    const PointSummary& s = p.summary;
    any_failed |= s.failed > 0 || !s.errors.empty();
    absl::StrAppend(&out, "| ", s.concurrency, " | ", s.completed,
                    s.failed > 0 ? absl::StrCat(" (", s.failed, " failed)") : "", " | ",
                    Fixed(s.decode_tokens_per_s, 0), " | ", Fixed(s.output_tokens_per_s, 0), " | ",
                    Fixed(s.requests_per_s, 2), " | ", Fixed(s.ttft_p50_ms, 1), " | ",
                    Fixed(s.ttft_p99_ms, 1), " | ", Fixed(s.itl_p50_ms, 2), " | ",
                    Fixed(s.itl_p99_ms, 2), " | ", Fixed(s.acceptance_length, 2), " | ",
                    Fixed(s.verify_tokens_per_step, 2),
                    s.verify_tokens_source == "drafts" ? "*" : "", " |\n");
  }
  bool from_drafts = false;
  for (const BenchPoint& p : report.points)
    from_drafts |= p.summary.verify_tokens_source == "drafts";
  if (from_drafts) {
    out +=
        "\n\\* from the drafts proposed (no --bench-metrics-url): an upper bound, as the "
        "server may verify fewer (compact mode; steps near the length limit).\n";
  }
  if (any_failed) {
    out += "\nFailures:\n";
    for (const BenchPoint& p : report.points) {
      for (const std::string& e : p.summary.errors) {
        absl::StrAppend(&out, "- c", p.summary.concurrency, ": ", e, "\n");
      }
    }
  }
  return out;
}

absl::Status WriteReport(const BenchReport& report, const std::string& prefix) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(prefix).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", parent.string()));
  if (absl::Status s = WriteFile(prefix + ".json", ReportJson(report).dump(1) + "\n"); !s.ok()) {
    return s;
  }
  if (absl::Status s = WriteFile(prefix + ".csv", ReportCsv(report)); !s.ok()) return s;
  return WriteFile(prefix + ".md", ReportMarkdown(report));
}

}  // namespace verdict
