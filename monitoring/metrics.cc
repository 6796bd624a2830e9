#include "monitoring/metrics.h"

#include <sstream>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace verdict {
namespace {

// Latency buckets from 1 ms to about 1 min, roughly x2 apart.
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

prometheus::Counter& Counter(prometheus::Registry& registry, const std::string& name,
                             const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Gauge& Gauge(prometheus::Registry& registry, const std::string& name,
                         const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Histogram& Histogram(prometheus::Registry& registry, const std::string& name,
                                 const std::string& help) {
  return prometheus::BuildHistogram()
      .Name(name)
      .Help(help)
      .Register(registry)
      .Add({}, LatencyBuckets());
}

}  // namespace

const char* RequestOutcomeName(RequestOutcome outcome) {
  switch (outcome) {
    case RequestOutcome::kStop:
      return "stop";
    case RequestOutcome::kLength:
      return "length";
    case RequestOutcome::kCancelled:
      return "cancelled";
    case RequestOutcome::kRejected:
      return "rejected";
    case RequestOutcome::kError:
      return "error";
  }
  return "unknown";
}

ServingMetrics::ServingMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)),
      requests_(prometheus::BuildCounter()
                    .Name("verdict_requests_total")
                    .Help("Finished requests by outcome")
                    .Register(*registry_)),
      prompt_tokens_(Counter(*registry_, "verdict_prompt_tokens_total",
                             "Prompt tokens of finished requests")),
      generated_tokens_(Counter(*registry_, "verdict_generated_tokens_total",
                                "Tokens generated for finished requests")),
      e2e_latency_(Histogram(*registry_, "verdict_request_latency_seconds",
                             "Time from arrival to the last token")),
      ttft_(Histogram(*registry_, "verdict_time_to_first_token_seconds",
                      "Time from arrival to the first generated token")),
      itl_(Histogram(*registry_, "verdict_inter_token_latency_seconds",
                     "Time between consecutive streamed tokens of a request")),
      running_(Gauge(*registry_, "verdict_running_requests", "Requests in the running batch")),
      waiting_(Gauge(*registry_, "verdict_waiting_requests", "Requests waiting for admission")),
      kv_usage_(Gauge(*registry_, "verdict_kv_cache_usage_ratio",
                      "Share of KV cache blocks in use, 0 to 1")),
      drafts_proposed_(Counter(*registry_, "verdict_draft_tokens_proposed_total",
                               "Draft tokens proposed by the draft model")),
      drafts_verified_(Counter(*registry_, "verdict_draft_tokens_verified_total",
                               "Draft tokens verified by the target model")),
      drafts_accepted_(Counter(*registry_, "verdict_draft_tokens_accepted_total",
                               "Draft tokens accepted by verification")) {
  // Every outcome exists from the start, so a rate() over it is defined
  // before the first request of that kind.
  for (RequestOutcome o : {RequestOutcome::kStop, RequestOutcome::kLength,
                           RequestOutcome::kCancelled, RequestOutcome::kRejected,
                           RequestOutcome::kError}) {
    requests_.Add({{"outcome", RequestOutcomeName(o)}});
  }
}

void ServingMetrics::RecordRequestFinished(RequestOutcome outcome, int prompt_tokens,
                                           int generated_tokens, double end_to_end_seconds) {
  requests_.Add({{"outcome", RequestOutcomeName(outcome)}}).Increment();
  prompt_tokens_.Increment(prompt_tokens);
  generated_tokens_.Increment(generated_tokens);
  e2e_latency_.Observe(end_to_end_seconds);
}

void ServingMetrics::RecordTimeToFirstToken(double seconds) { ttft_.Observe(seconds); }

void ServingMetrics::RecordInterTokenLatency(double seconds) { itl_.Observe(seconds); }

void ServingMetrics::SetQueueDepth(int running, int waiting) {
  running_.Set(running);
  waiting_.Set(waiting);
}

void ServingMetrics::SetKvCacheUsage(double fraction) { kv_usage_.Set(fraction); }

void ServingMetrics::RecordSpeculativeStep(int proposed, int verified, int accepted) {
  drafts_proposed_.Increment(proposed);
  drafts_verified_.Increment(verified);
  drafts_accepted_.Increment(accepted);
}

std::string SerializeMetrics(const prometheus::Registry& registry) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  return out.str();
}

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsExposer(
    const std::string& bind_address, std::shared_ptr<prometheus::Registry> registry) {
  // prometheus-cpp reports a failed bind by throwing; keep that inside.
  try {
    auto exposer = std::make_unique<prometheus::Exposer>(bind_address);
    exposer->RegisterCollectable(registry);
    return exposer;
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", bind_address, ": ", e.what()));
  }
}

}  // namespace verdict
