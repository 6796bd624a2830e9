#include "scheduler/cost_table.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "runtime/base/json_number.h"

namespace verdict {
namespace {

using json = nlohmann::json;

// The segment used for x: the largest s with knots[s] <= x, clamped to
// [0, n - 2]. Prediction and the planner's sweep both go through this
// definition, so a query on a knot always uses the same segment (the two
// neighbouring segments need not agree there to the last bit).
int FindSegment(absl::Span<const double> knots, double x) {
  const int n = static_cast<int>(knots.size());
  if (n < 2) return 0;
  const int s =
      static_cast<int>(std::upper_bound(knots.begin(), knots.end(), x) - knots.begin()) - 1;
  return std::clamp(s, 0, n - 2);
}

// The slope of segment s of the curve through (knots, y(i)); 0 for a single
// knot. Predict and CostCurve both interpolate as y(s) + slope * (x - x_s)
// with the slope computed exactly this way, so they agree bit for bit (and
// the curve can keep the slope from one query to the next).
template <typename Y>
double SegmentSlope(absl::Span<const double> knots, int s, Y y) {
  if (knots.size() < 2) return 0.0;
  return (y(s + 1) - y(s)) / (knots[s + 1] - knots[s]);
}

// Value at x on segment s (linear beyond the end knots too).
template <typename Y>
double OnSegment(absl::Span<const double> knots, int s, double x, Y y) {
  return y(s) + SegmentSlope(knots, s, y) * (x - knots[s]);
}

std::string FormatNumber(double v) { return absl::StrFormat("%g", v); }

// Batch sizes and verify tokens count requests and rows, which the engine
// and the verify sampler hold as int32; a grid value beyond is a corrupt
// table, not a measurement.
constexpr double kMaxGridValue = std::numeric_limits<int32_t>::max();

// The range of the tensor-parallel degree a table may record.
constexpr int64_t kMaxTp = 65536;

absl::Status CheckGrid(const char* name, const std::vector<double>& grid) {
  if (grid.empty())
    return absl::InvalidArgumentError(absl::StrCat("cost table: ", name, " is empty"));
  for (size_t i = 0; i < grid.size(); ++i) {
    if (!std::isfinite(grid[i]) || grid[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("cost table: ", name, "[", i,
                                                     "] = ", FormatNumber(grid[i]),
                                                     " is not a positive number"));
    }
    if (grid[i] > kMaxGridValue) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cost table: ", name, "[", i, "] = ", FormatNumber(grid[i]), " is above ",
          FormatNumber(kMaxGridValue), " (the grid counts requests and rows in int32)"));
    }
    if (i > 0 && !(grid[i] > grid[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cost table: ", name, "[", i, "] = ", FormatNumber(grid[i]), " is not above ", name, "[",
          i - 1, "] = ", FormatNumber(grid[i - 1]), " (the grid must be strictly increasing)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> ParseGrid(const json& doc, const char* name) {
  auto it = doc.find(name);
  if (it == doc.end())
    return absl::InvalidArgumentError(absl::StrCat("cost table: '", name, "' is missing"));
  if (!it->is_array())
    return absl::InvalidArgumentError(absl::StrCat("cost table: '", name, "' is not an array"));
  std::vector<double> grid;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    if (!v.is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cost table: ", name, "[", i, "] is not a number"));
    }
    absl::StatusOr<double> value = JsonFiniteNumber(v, absl::StrCat(name, "[", i, "]"));
    if (!value.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("cost table: ", value.status().message()));
    }
    grid.push_back(*value);
  }
  return grid;
}

std::string CellName(const std::vector<double>& batch_sizes,
                     const std::vector<double>& verify_tokens, size_t b, size_t m) {
  return absl::StrCat("seconds[", b, "][", m, "] (batch ", FormatNumber(batch_sizes[b]),
                      ", tokens ", FormatNumber(verify_tokens[m]), ")");
}

json GridToJson(const std::vector<double>& grid) {
  json out = json::array();
  for (double v : grid) {
    // Counts are written as integers so the file reads like the grid it is.
    if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {
      out.push_back(static_cast<int64_t>(v));
    } else {
      out.push_back(v);
    }
  }
  return out;
}

// "measured_on": an object of three non-empty strings.
absl::StatusOr<CostTableOrigin> ParseOrigin(const json& on) {
  if (!on.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost table: 'measured_on' is not an object, got ", JsonForMessage(on)));
  }
  CostTableOrigin origin;
  for (auto [key, field] : {std::pair<const char*, std::string*>{"device", &origin.device},
                            {"target", &origin.target},
                            {"draft", &origin.draft}}) {
    auto it = on.find(key);
    if (it == on.end() || !it->is_string() || it->get_ref<const std::string&>().empty() ||
        it->get_ref<const std::string&>().size() > kMaxOriginLength) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cost table: 'measured_on' needs '", key, "', a non-empty string of at most ",
          kMaxOriginLength, " bytes", it == on.end() ? "" : ", got ",
          it == on.end() ? "" : JsonForMessage(*it)));
    }
    *field = it->get<std::string>();
  }
  return origin;
}

// A per-batch-size array of times (the draft split's keys): numbers, each
// finite; their ranges are checked where they are set.
absl::StatusOr<std::vector<double>> PerBatchTimes(const json& array, absl::string_view key) {
  if (!array.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("cost table: '", key, "' is not an array"));
  }
  std::vector<double> times;
  for (size_t b = 0; b < array.size(); ++b) {
    const json& v = array[b];
    absl::StatusOr<double> t =
        v.is_number() ? JsonFiniteNumber(v, "")
                      : absl::StatusOr<double>(absl::InvalidArgumentError("is not a number"));
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cost table: ", key, "[", b, "]: ", t.status().message()));
    }
    times.push_back(*t);
  }
  return times;
}

}  // namespace

double CostCurve::At(double verify_tokens) const {
  int segment = FindSegment(knots_, verify_tokens);
  return AtNondecreasing(verify_tokens, &segment);
}

absl::StatusOr<CostTable> CostTable::Create(std::vector<double> batch_sizes,
                                            std::vector<double> verify_tokens,
                                            std::vector<double> seconds) {
  if (absl::Status s = CheckGrid("batch_sizes", batch_sizes); !s.ok()) return s;
  if (absl::Status s = CheckGrid("verify_tokens", verify_tokens); !s.ok()) return s;
  if (seconds.size() != batch_sizes.size() * verify_tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("cost table: ", seconds.size(), " cells for a ",
                                                   batch_sizes.size(), " x ", verify_tokens.size(),
                                                   " grid"));
  }
  for (size_t b = 0; b < batch_sizes.size(); ++b) {
    for (size_t m = 0; m < verify_tokens.size(); ++m) {
      const double t = seconds[b * verify_tokens.size() + m];
      if (!std::isfinite(t) || t <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("cost table: ", CellName(batch_sizes, verify_tokens, b, m), " = ",
                         FormatNumber(t), " is not a positive time"));
      }
    }
  }
  CostTable table;
  table.batch_sizes_ = std::move(batch_sizes);
  table.verify_tokens_ = std::move(verify_tokens);
  table.seconds_ = std::move(seconds);
  return table;
}

absl::StatusOr<CostTable> CostTable::FromJson(std::string_view text) {
  const json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError("cost table: not valid JSON");
  if (!doc.is_object())
    return absl::InvalidArgumentError("cost table: the top level is not an object");
  absl::StatusOr<std::vector<double>> batch_sizes = ParseGrid(doc, "batch_sizes");
  if (!batch_sizes.ok()) return batch_sizes.status();
  absl::StatusOr<std::vector<double>> verify_tokens = ParseGrid(doc, "verify_tokens");
  if (!verify_tokens.ok()) return verify_tokens.status();
  // Grid errors first: a cell's name quotes its grid values.
  if (absl::Status s = CheckGrid("batch_sizes", *batch_sizes); !s.ok()) return s;
  if (absl::Status s = CheckGrid("verify_tokens", *verify_tokens); !s.ok()) return s;

  auto rows = doc.find("seconds");
  if (rows == doc.end()) return absl::InvalidArgumentError("cost table: 'seconds' is missing");
  if (!rows->is_array()) return absl::InvalidArgumentError("cost table: 'seconds' is not an array");
  if (rows->size() > batch_sizes->size()) {
    return absl::InvalidArgumentError(absl::StrCat("cost table: 'seconds' has ", rows->size(),
                                                   " rows, the batch grid has ",
                                                   batch_sizes->size()));
  }
  std::vector<double> seconds;
  seconds.reserve(batch_sizes->size() * verify_tokens->size());
  for (size_t b = 0; b < batch_sizes->size(); ++b) {
    if (b >= rows->size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cost table: ", CellName(*batch_sizes, *verify_tokens, b, 0), " is missing"));
    }
    const json& row = (*rows)[b];
    if (!row.is_array()) {
      return absl::InvalidArgumentError(absl::StrCat("cost table: seconds[", b, "] (batch ",
                                                     FormatNumber((*batch_sizes)[b]),
                                                     ") is not an array"));
    }
    if (row.size() > verify_tokens->size()) {
      return absl::InvalidArgumentError(absl::StrCat("cost table: seconds[", b, "] has ",
                                                     row.size(), " cells, the token grid has ",
                                                     verify_tokens->size()));
    }
    for (size_t m = 0; m < verify_tokens->size(); ++m) {
      if (m >= row.size() || row[m].is_null()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cost table: ", CellName(*batch_sizes, *verify_tokens, b, m), " is missing"));
      }
      if (!row[m].is_number()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cost table: ", CellName(*batch_sizes, *verify_tokens, b, m), " is not a number"));
      }
      absl::StatusOr<double> t = JsonFiniteNumber(row[m], "");
      if (!t.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("cost table: ", CellName(*batch_sizes, *verify_tokens, b, m), ": ",
                         t.status().message()));
      }
      seconds.push_back(*t);
    }
  }
  int measured_tp = 0;
  if (auto tp = doc.find("tp"); tp != doc.end()) {
    absl::StatusOr<int64_t> value = JsonInteger(*tp, "", 1, kMaxTp);
    if (!value.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cost table: 'tp' must be a positive integer, got ", JsonForMessage(*tp),
                       " (the range is [1, ", kMaxTp, "])"));
    }
    measured_tp = static_cast<int>(*value);
  }
  std::optional<CostTableOrigin> origin;
  if (auto on = doc.find("measured_on"); on != doc.end()) {
    absl::StatusOr<CostTableOrigin> parsed = ParseOrigin(*on);
    if (!parsed.ok()) return parsed.status();
    origin = *std::move(parsed);
  }
  auto passes = doc.find("draft_passes");
  auto pass_seconds = doc.find("draft_pass_seconds");
  if ((passes == doc.end()) != (pass_seconds == doc.end())) {
    return absl::InvalidArgumentError(
        "cost table: 'draft_passes' and 'draft_pass_seconds' come together or not at all");
  }
  int draft_passes = 0;
  std::vector<double> draft_pass_seconds;
  if (passes != doc.end()) {
    absl::StatusOr<int64_t> value = JsonInteger(*passes, "", 1, 255);
    if (!value.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cost table: 'draft_passes' must be an integer in [1, 255], got ",
                       JsonForMessage(*passes)));
    }
    draft_passes = static_cast<int>(*value);
    absl::StatusOr<std::vector<double>> times = PerBatchTimes(*pass_seconds, "draft_pass_seconds");
    if (!times.ok()) return times.status();
    draft_pass_seconds = *std::move(times);
  }
  std::vector<double> one_pass_draft_seconds;
  if (auto one_pass = doc.find("one_pass_draft_seconds"); one_pass != doc.end()) {
    if (draft_passes == 0) {
      return absl::InvalidArgumentError(
          "cost table: 'one_pass_draft_seconds' needs the draft split ('draft_passes' and "
          "'draft_pass_seconds')");
    }
    absl::StatusOr<std::vector<double>> times = PerBatchTimes(*one_pass, "one_pass_draft_seconds");
    if (!times.ok()) return times.status();
    one_pass_draft_seconds = *std::move(times);
  }
  absl::StatusOr<CostTable> table =
      Create(*std::move(batch_sizes), *std::move(verify_tokens), std::move(seconds));
  if (!table.ok()) return table;
  table->set_measured_tp(measured_tp);
  table->set_origin(std::move(origin));
  if (draft_passes > 0) {
    if (absl::Status s = table->SetDraftSplit(std::move(draft_pass_seconds), draft_passes);
        !s.ok()) {
      return s;
    }
  }
  if (!one_pass_draft_seconds.empty()) {
    if (absl::Status s = table->SetOnePassDraft(std::move(one_pass_draft_seconds)); !s.ok()) {
      return s;
    }
  }
  return table;
}

absl::StatusOr<CostTable> CostTable::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cost table: cannot open ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  absl::StatusOr<CostTable> table = FromJson(buffer.str());
  if (!table.ok()) {
    return absl::Status(table.status().code(), absl::StrCat(path, ": ", table.status().message()));
  }
  return table;
}

std::string CostTable::ToJson() const {
  json doc = json::object();
  doc["batch_sizes"] = GridToJson(batch_sizes_);
  doc["verify_tokens"] = GridToJson(verify_tokens_);
  json rows = json::array();
  for (size_t b = 0; b < batch_sizes_.size(); ++b) {
    json row = json::array();
    for (size_t m = 0; m < verify_tokens_.size(); ++m) row.push_back(seconds(b, m));
    rows.push_back(std::move(row));
  }
  doc["seconds"] = std::move(rows);
  if (measured_tp_ > 0) doc["tp"] = measured_tp_;
  if (origin_.has_value()) {
    doc["measured_on"] = {
        {"device", origin_->device}, {"target", origin_->target}, {"draft", origin_->draft}};
  }
  if (has_draft_split()) {
    doc["draft_passes"] = draft_passes_;
    json pass_seconds = json::array();
    for (double v : draft_pass_seconds_) pass_seconds.push_back(v);
    doc["draft_pass_seconds"] = std::move(pass_seconds);
  }
  if (has_one_pass_draft()) {
    json one_pass = json::array();
    for (double v : one_pass_draft_seconds_) one_pass.push_back(v);
    doc["one_pass_draft_seconds"] = std::move(one_pass);
  }
  return doc.dump(1) + "\n";
}

absl::Status CostTable::Save(const std::string& path) const {
  // Written beside the target and renamed, so a reader never sees half a table.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat("cost table: cannot write ", tmp));
    out << ToJson();
    out.flush();
    if (!out) return absl::DataLossError(absl::StrCat("cost table: writing ", tmp, " failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::PermissionDeniedError(
        absl::StrCat("cost table: cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::Status CostTable::SetDraftSplit(std::vector<double> draft_pass_seconds, int draft_passes) {
  if (draft_passes < 1 || draft_passes > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost table: draft_passes = ", draft_passes, " is outside [1, 255]"));
  }
  if (draft_pass_seconds.size() != batch_sizes_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost table: 'draft_pass_seconds' has ", draft_pass_seconds.size(),
                     " values, the batch grid has ", batch_sizes_.size()));
  }
  for (size_t b = 0; b < batch_sizes_.size(); ++b) {
    const double t = draft_pass_seconds[b];
    if (!std::isfinite(t) || t <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("cost table: draft_pass_seconds[", b,
                                                     "] = ", FormatNumber(t),
                                                     " is not a positive time"));
    }
    for (size_t m = 0; m < verify_tokens_.size(); ++m) {
      if (draft_passes * t >= seconds(b, m)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cost table: ", draft_passes, " draft passes of ", FormatNumber(t),
            " s take all of ", CellName(batch_sizes_, verify_tokens_, b, m), " = ",
            FormatNumber(seconds(b, m)), " s, leaving no time for the verify"));
      }
    }
  }
  draft_pass_seconds_ = std::move(draft_pass_seconds);
  draft_passes_ = draft_passes;
  one_pass_draft_seconds_.clear();  // measured against the old split, if any
  return absl::OkStatus();
}

absl::Status CostTable::SetOnePassDraft(std::vector<double> one_pass_draft_seconds) {
  if (!has_draft_split()) {
    return absl::FailedPreconditionError(
        "cost table: the one-pass draft phase needs the draft split first");
  }
  if (draft_passes_ == 1) {
    return absl::InvalidArgumentError(
        "cost table: 'one_pass_draft_seconds' with draft_passes 1 (the measured steps ran one "
        "pass already)");
  }
  if (one_pass_draft_seconds.size() != batch_sizes_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost table: 'one_pass_draft_seconds' has ", one_pass_draft_seconds.size(),
                     " values, the batch grid has ", batch_sizes_.size()));
  }
  for (size_t b = 0; b < batch_sizes_.size(); ++b) {
    const double t = one_pass_draft_seconds[b];
    if (!std::isfinite(t) || t <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("cost table: one_pass_draft_seconds[", b,
                                                     "] = ", FormatNumber(t),
                                                     " is not a positive time"));
    }
    const double all = draft_passes_ * draft_pass_seconds_[b];
    if (t > all) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cost table: one_pass_draft_seconds[", b, "] = ", FormatNumber(t),
          " s is more than the ", draft_passes_, " passes of the split (", FormatNumber(all),
          " s)"));
    }
  }
  one_pass_draft_seconds_ = std::move(one_pass_draft_seconds);
  return absl::OkStatus();
}

double CostTable::PredictDraftPass(double batch_size) const {
  if (!has_draft_split()) return 0;
  const absl::Span<const double> b_knots(batch_sizes_);
  const int sb = FindSegment(b_knots, batch_size);
  const double v =
      OnSegment(b_knots, sb, batch_size, [&](int b) { return draft_pass_seconds_[b]; });
  return v > 0 ? v : 0;
}

CostTable::PassCosts CostTable::DraftPassCosts(double batch_size) const {
  const double pass = PredictDraftPass(batch_size);
  if (!has_one_pass_draft()) return {pass, pass};
  const absl::Span<const double> b_knots(batch_sizes_);
  const int sb = FindSegment(b_knots, batch_size);
  double one =
      OnSegment(b_knots, sb, batch_size, [&](int b) { return one_pass_draft_seconds_[b]; });
  const double all = draft_passes_ * pass;
  // Extrapolated past the grid, the two lines may cross; one pass then
  // costs what the measured ones do, and the rest nothing.
  one = std::clamp(one, 0.0, all);
  return {one, (all - one) / (draft_passes_ - 1)};
}

double CostTable::PredictDraftPhase(double batch_size, int passes) const {
  if (!has_draft_split() || passes <= 0) return 0;
  const PassCosts c = DraftPassCosts(batch_size);
  return c.first + (passes - 1) * c.later;
}

double CostTable::PredictDraftPassAt(double rows, bool first) const {
  if (!has_draft_split() || !(rows > 0)) return 0;
  const PassCosts c = DraftPassCosts(rows);
  return first ? c.first : c.later;
}

double CostTable::PredictDraftPhaseAt(absl::Span<const int64_t> rows_per_pass) const {
  double phase = 0;
  for (size_t p = 0; p < rows_per_pass.size(); ++p) {
    phase += PredictDraftPassAt(static_cast<double>(rows_per_pass[p]), p == 0);
  }
  return phase;
}

double CostTable::StepFromParts(double batch_size, double whole, double phase) const {
  return StepFromPhases(whole, PredictDraftPhase(batch_size, draft_passes_), phase);
}

double CostTable::PredictStepAt(double batch_size, double verify_tokens,
                                absl::Span<const int64_t> rows_per_pass) const {
  return StepFromParts(batch_size, Predict(batch_size, verify_tokens),
                       PredictDraftPhaseAt(rows_per_pass));
}

void DraftRowsPerPass(absl::Span<const int32_t> depths, std::vector<int64_t>* rows) {
  rows->clear();
  for (int32_t d : depths) {
    if (d > static_cast<int32_t>(rows->size())) rows->resize(d, 0);
    for (int32_t p = 0; p < d; ++p) ++(*rows)[p];
  }
}

double CostTable::PassesNotRunSeconds(double batch_size, int passes) const {
  if (!has_draft_split()) return 0;
  return PredictDraftPhase(batch_size, draft_passes_) - PredictDraftPhase(batch_size, passes);
}

double CostTable::PredictStep(double batch_size, double verify_tokens, int passes) const {
  const double whole = Predict(batch_size, verify_tokens);
  if (!has_draft_split()) return whole;
  const double v = whole - PassesNotRunSeconds(batch_size, passes);
  return v > kMinStepSeconds ? v : kMinStepSeconds;
}

double CostTable::Predict(double batch_size, double verify_tokens) const {
  // The same arithmetic as CurveAt followed by CostCurve::At, for the two
  // token knots around verify_tokens only.
  const absl::Span<const double> b_knots(batch_sizes_);
  const absl::Span<const double> m_knots(verify_tokens_);
  const int sb = FindSegment(b_knots, batch_size);
  const int sm = FindSegment(m_knots, verify_tokens);
  auto at_knot = [&](int m) {
    return OnSegment(b_knots, sb, batch_size, [&](int b) { return seconds(b, m); });
  };
  const double v = OnSegment(m_knots, sm, verify_tokens, at_knot);
  return v > kMinStepSeconds ? v : kMinStepSeconds;  // as CostCurve does, NaN included
}

void CostTable::CurveAt(double batch_size, CostCurve* curve) const {
  const absl::Span<const double> b_knots(batch_sizes_);
  const int sb = FindSegment(b_knots, batch_size);
  curve->knots_ = absl::MakeConstSpan(verify_tokens_);
  const int n = static_cast<int>(verify_tokens_.size());
  curve->seconds_.resize(n);
  for (int m = 0; m < n; ++m) {
    curve->seconds_[m] = OnSegment(b_knots, sb, batch_size, [&](int b) { return seconds(b, m); });
  }
  curve->slopes_.resize(std::max(n - 1, 1));
  const std::vector<double>& ys = curve->seconds_;
  for (int s = 0; s < static_cast<int>(curve->slopes_.size()); ++s) {
    curve->slopes_[s] = SegmentSlope(curve->knots_, s, [&ys](int i) { return ys[i]; });
  }
}

}  // namespace verdict
