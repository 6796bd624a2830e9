// The outputs of `verdict bench`: one JSON document (configuration, every
// point's summary and its requests) for scripts such as tools/bench/sweep.py
// and tools/bench/plot.py, a CSV with one row a point, and a Markdown table
// a person reads (seed 002's speed tables are the model).
#ifndef VERDICT_RUNTIME_BENCH_BENCH_REPORT_H_
#define VERDICT_RUNTIME_BENCH_BENCH_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "runtime/bench/bench_stats.h"

namespace verdict {

// How the sweep was run.
struct BenchConfig {
  std::string label;  // the configuration's name ("static-tp1")
  std::string url;
  std::string model;    // as /v1/models names it
  std::string prompts;  // "builtin" or the JSONL path
  int num_prompts = 0;
  int max_tokens = 0;
  double temperature = 1.0;
  double top_p = 1.0;
  double min_p = 0.0;
  int top_k = 0;
  uint64_t seed = 0;
  int warmup_requests = 0;  // per point; -1: one per client
  int warmup_max_tokens = 0;
};

struct BenchPoint {
  PointSummary summary;
  std::vector<RequestRecord> requests;
};

struct BenchReport {
  BenchConfig config;
  std::vector<BenchPoint> points;
};

// Report format version, for the scripts that read the JSON.
inline constexpr int kBenchReportVersion = 1;

// NaN and infinite numbers become null.
nlohmann::json ReportJson(const BenchReport& report);
// A header line, then one row per point.
std::string ReportCsv(const BenchReport& report);
// A title, a line on the configuration and definitions, and the table.
std::string ReportMarkdown(const BenchReport& report);
// Writes PREFIX.json, PREFIX.csv and PREFIX.md, creating PREFIX's folder.
absl::Status WriteReport(const BenchReport& report, const std::string& prefix);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_BENCH_BENCH_REPORT_H_
