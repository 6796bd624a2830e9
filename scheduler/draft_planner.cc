#include "scheduler/draft_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "scheduler/determinism.h"

namespace verdict {
namespace {

constexpr int64_t kMaxRequests = (int64_t{1} << 24) - 1;

double Clamp(double c) {
  if (!(c > 0)) return 0;  // NaN included
  return c < 1 ? c : 1;
}

}  // namespace

std::string_view DraftReasonName(DraftReason reason) {
  switch (reason) {
    case DraftReason::kPlanned: return "planned";
    case DraftReason::kNoDraftSplit: return "no-draft-split";
    case DraftReason::kConfidencePrior: return "confidence-prior";
    case DraftReason::kOperatorLimit: return "operator-limit";
    case DraftReason::kEmptyBatch: return "empty-batch";
    case DraftReason::kPinnedDepth: return "pinned-depth";
  }
  return "unknown";
}

uint64_t DraftPlanHash(const DraftPlan& plan) {
  Fnv1a64 h;
  h.AddI64(static_cast<int64_t>(plan.reason));
  h.AddI64(static_cast<int64_t>(plan.depths.size()));
  for (int32_t d : plan.depths) h.AddI64(d);
  h.AddI64(plan.passes);
  h.AddI64(plan.drafting_requests);
  h.AddI64(plan.total_depth);
  h.AddDouble(plan.predicted_step_seconds);
  h.AddDouble(plan.predicted_committed_tokens);
  return h.digest();
}

absl::StatusOr<DraftPlanner> DraftPlanner::Create(DraftPlannerOptions options,
                                                  std::optional<CostTable> cost_table) {
  if (options.gamma < 1 || options.gamma > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft planner: gamma = ", options.gamma, " is outside [1, 255]"));
  }
  if (!(options.min_survival >= 1e-12 && options.min_survival <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("draft planner: min_survival = ",
                                                   options.min_survival,
                                                   " is outside [1e-12, 1]"));
  }
  return DraftPlanner(options, std::move(cost_table));
}

absl::Status DraftPlanner::SetPinnedDepth(std::optional<int> depth) {
  if (depth.has_value() && (*depth < 0 || *depth > options_.gamma)) {
    return absl::InvalidArgumentError(absl::StrCat("draft planner: pinned depth ", *depth,
                                                   " is outside [0, ", options_.gamma, "]"));
  }
  pinned_depth_ = depth;
  return absl::OkStatus();
}

void DraftPlanner::Finish(int64_t batch, absl::Span<const double> confidences,
                          DraftPlan* plan) const {
  const int gamma = options_.gamma;
  plan->passes = 0;
  plan->drafting_requests = 0;
  plan->total_depth = 0;
  double committed = static_cast<double>(batch);
  for (int64_t i = 0; i < batch; ++i) {
    const int32_t d = plan->depths[i];
    plan->passes = std::max(plan->passes, static_cast<int>(d));
    plan->drafting_requests += d > 0 ? 1 : 0;
    plan->total_depth += d;
    double survival = 1.0;
    for (int j = 0; j < d; ++j) {
      survival *= Clamp(confidences[i * gamma + j]);
      committed += survival;
    }
  }
  plan->predicted_committed_tokens = committed;
  plan->predicted_step_seconds =
      cost_table_.has_value()
          ? cost_table_->PredictStep(static_cast<double>(batch),
                                     static_cast<double>(batch + plan->total_depth), plan->passes)
          : std::numeric_limits<double>::quiet_NaN();
}

absl::Status DraftPlanner::Plan(const DraftPlannerInput& input, DraftPlan* plan) {
  const int gamma = options_.gamma;
  const int64_t batch = static_cast<int64_t>(input.max_verify_lens.size());
  if (batch > kMaxRequests) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft planner: ", batch, " requests, at most ", kMaxRequests));
  }
  if (static_cast<int64_t>(input.confidences.size()) != batch * gamma) {
    return absl::InvalidArgumentError(absl::StrCat("draft planner: ", input.confidences.size(),
                                                   " confidences for ", batch,
                                                   " requests of gamma ", gamma));
  }
  if (!input.flags.empty() && static_cast<int64_t>(input.flags.size()) != batch) {
    return absl::InvalidArgumentError(absl::StrCat("draft planner: ", input.flags.size(),
                                                   " flags for ", batch, " requests"));
  }
  caps_.resize(batch);
  for (int64_t i = 0; i < batch; ++i) {
    const int32_t max_len = input.max_verify_lens[i];
    if (max_len < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "draft planner: request ", i, " has a maximum verify length of ", max_len));
    }
    const uint8_t f = input.flags.empty() ? 0 : input.flags[i];
    caps_[i] = (f & (kSpeculationDisabled | kStopEmitted)) != 0
                   ? 0
                   : std::min<int32_t>(gamma, max_len - 1);
  }

  plan->depths.assign(batch, 0);
  if (batch == 0) {
    plan->reason = DraftReason::kEmptyBatch;
  } else if (!input.drafts_allowed) {
    plan->reason = DraftReason::kOperatorLimit;
  } else if (pinned_depth_.has_value()) {
    plan->reason = DraftReason::kPinnedDepth;
    for (int64_t i = 0; i < batch; ++i) plan->depths[i] = std::min(caps_[i], *pinned_depth_);
  } else if (!cost_table_.has_value() || !cost_table_->has_draft_split()) {
    plan->reason = DraftReason::kNoDraftSplit;
    std::copy(caps_.begin(), caps_.end(), plan->depths.begin());
  } else if (!input.confidence_ready) {
    plan->reason = DraftReason::kConfidencePrior;
    std::copy(caps_.begin(), caps_.end(), plan->depths.begin());
  } else {
    plan->reason = DraftReason::kPlanned;
    candidates_.clear();
    for (int64_t i = 0; i < batch; ++i) {
      double survival = 1.0;
      for (int j = 0; j < caps_[i]; ++j) {
        survival *= Clamp(input.confidences[i * gamma + j]);
        if (survival < options_.min_survival) break;
        candidates_.push_back({survival, static_cast<int32_t>(i), j});
      }
    }
    // A total order, so every rank picks the same top k.
    std::sort(candidates_.begin(), candidates_.end(), [](const Candidate& a, const Candidate& b) {
      if (a.survival != b.survival) return a.survival > b.survival;
      if (a.position != b.position) return a.position < b.position;
      return a.request < b.request;
    });
    const double b = static_cast<double>(batch);
    double best = b / cost_table_->PredictStep(b, b, 0);
    int best_limit = 0;
    int64_t best_k = 0;
    int max_position = 0;
    for (const Candidate& c : candidates_) max_position = std::max(max_position, c.position + 1);
    for (int limit = 1; limit <= max_position; ++limit) {
      double gain = b;
      int64_t k = 0;
      int depth = 0;
      for (const Candidate& c : candidates_) {
        if (c.position >= limit) continue;
        gain += c.survival;
        ++k;
        depth = std::max(depth, c.position + 1);
        const double objective =
            gain / cost_table_->PredictStep(b, b + static_cast<double>(k), depth);
        if (objective > best) {
          best = objective;
          best_limit = limit;
          best_k = k;
        }
      }
    }
    int64_t taken = 0;
    for (const Candidate& c : candidates_) {
      if (taken == best_k) break;
      if (c.position >= best_limit) continue;
      plan->depths[c.request] = std::max(plan->depths[c.request], c.position + 1);
      ++taken;
    }
  }
  Finish(batch, input.confidences, plan);
  return absl::OkStatus();
}

}  // namespace verdict
