// The verdict_* metric families and the Prometheus pull exposer.
//
// Names follow Prometheus conventions: base units (seconds, tokens),
// `_total` for counters, `_seconds` for latency histograms. Metrics are
// observational only: nothing in the step's data flow reads them back.
#ifndef VERDICT_MONITORING_METRICS_H_
#define VERDICT_MONITORING_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace verdict {

// How a request ended; the label value of verdict_requests_total.
enum class RequestOutcome { kStop, kLength, kCancelled, kRejected, kError };

const char* RequestOutcomeName(RequestOutcome outcome);

class ServingMetrics {
 public:
  explicit ServingMetrics(std::shared_ptr<prometheus::Registry> registry);

  void RecordRequestFinished(RequestOutcome outcome, int prompt_tokens, int generated_tokens,
                             double end_to_end_seconds);
  void RecordTimeToFirstToken(double seconds);
  void RecordInterTokenLatency(double seconds);
  void SetQueueDepth(int running, int waiting);
  void SetKvCacheUsage(double fraction);

  // One speculative step: how many drafts were proposed, verified and
  // accepted over the whole batch.
  void RecordSpeculativeStep(int proposed, int verified, int accepted);

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Counter& generated_tokens_;
  prometheus::Histogram& e2e_latency_;
  prometheus::Histogram& ttft_;
  prometheus::Histogram& itl_;
  prometheus::Gauge& running_;
  prometheus::Gauge& waiting_;
  prometheus::Gauge& kv_usage_;
  prometheus::Counter& drafts_proposed_;
  prometheus::Counter& drafts_verified_;
  prometheus::Counter& drafts_accepted_;
};

// The registry in Prometheus text exposition format (what /metrics serves).
std::string SerializeMetrics(const prometheus::Registry& registry);

// Serves `registry` at http://bind_address/metrics until destroyed.
// bind_address is "host:port", e.g. "127.0.0.1:9400".
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsExposer(
    const std::string& bind_address, std::shared_ptr<prometheus::Registry> registry);

}  // namespace verdict

#endif  // VERDICT_MONITORING_METRICS_H_
