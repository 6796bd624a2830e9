// Every TP rank must end with the same estimator state and plan the same
// verify lengths, bit for bit (docs/architecture.md, invariant 3;
// seeds/002_d567d7ab3f14fa00.txt, "TP"). Each rank runs the same random stream of steps through the
// online acceptance estimator and the verify planner: draft signals, confidences, a planned step, a
// simulated verify, observations. The ranks list each step's observations in a different
// (rank-seeded) order, since the estimator must fold by request id, not by listing order. At the
// end the ranks all-gather the estimator's state hash and a running hash of every plan, and fail
// unless all agree.
//
// Exit status: 0 when every rank agrees and the estimator learned the
// stream's acceptance model; 3 when the ranks disagree; 4 when the
// estimator did not learn (the comparison would then be of priors); 2 on a
// setup error. --diverge_rank=R changes one request's accepted count on rank
// R halfway through, which the comparison must catch.
#include <mpi.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "scheduler/acceptance_estimator.h"
#include "scheduler/cost_table.h"
#include "scheduler/determinism.h"
#include "scheduler/verify_planner.h"

ABSL_FLAG(int, steps, 10000, "verify steps to run on every rank");
ABSL_FLAG(int, diverge_rank, -1, "rank whose stream is nudged halfway (-1: none)");

namespace verdict {
namespace {

constexpr int kGamma = 5;
constexpr int kBatch = 24;
// The stream's true acceptance model, per draft position:
// P(accept) = sigmoid(slope * logit(q_max) + intercept).
constexpr double kTrueSlope[kGamma] = {1.3, 1.1, 0.9, 0.8, 0.7};
constexpr double kTrueIntercept[kGamma] = {0.6, 0.3, 0.1, 0.0, -0.1};

double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// A cost table with a fixed cost and a per-token cost, so that low-survival
// drafts get trimmed and the planner's lengths feed back into what the
// estimator observes.
CostTable Table() {
  return *CostTable::Create({1, 32, 256}, {1, 32, 256, 2048},
                            {0.010, 0.012, 0.030, 0.150,  //
                             0.011, 0.013, 0.032, 0.160,  //
                             0.014, 0.016, 0.036, 0.180});
}

struct Result {
  uint64_t estimator_hash = 0;
  uint64_t plans_hash = 0;
  bool learned = false;
};

int Run(int rank, int size) {
  const int steps = absl::GetFlag(FLAGS_steps);
  const int diverge_rank = absl::GetFlag(FLAGS_diverge_rank);

  AcceptanceEstimatorOptions est_options;
  est_options.gamma = kGamma;
  absl::StatusOr<OnlineAcceptanceEstimator> estimator =
      OnlineAcceptanceEstimator::Create(est_options);
  PlannerOptions plan_options;
  plan_options.mode = VerifyMode::kCompact;
  plan_options.gamma = kGamma;
  absl::StatusOr<VerifyPlanner> planner = VerifyPlanner::Create(plan_options, Table());
  if (!estimator.ok() || !planner.ok()) {
    std::fprintf(stderr, "rank %d: setup failed\n", rank);
    return 2;
  }

  // The same stream on every rank; only the listing order is rank-seeded.
  std::mt19937_64 stream(20240917);
  std::mt19937_64 listing(1000 + static_cast<uint64_t>(rank));
  std::vector<int64_t> ids(kBatch);
  int64_t next_id = 0;
  for (int64_t& id : ids) id = next_id++;
  std::vector<float> signals(kBatch * kGamma);
  std::vector<double> confidences(kBatch * kGamma);
  const std::vector<int32_t> max_lens(kBatch, kGamma + 1);
  std::vector<VerifyObservation> observations(kBatch);
  VerifyPlan plan;
  Fnv1a64 plans;
  int planned_steps = 0;

  for (int step = 0; step < steps; ++step) {
    // Continuous batching: a finished request's slot takes a new id.
    for (int64_t& id : ids) {
      if (stream() % 16 == 0) id = next_id++;
    }
    for (float& q : signals) q = static_cast<float>(0.02 + 0.97 * Uniform(stream));

    if (!estimator->Score(signals, absl::MakeSpan(confidences)).ok()) return 2;
    const PlannerInput input{confidences, max_lens, {}, estimator->ready()};
    if (!planner->Plan(input, &plan).ok()) return 2;
    plans.AddU64(PlanHash(plan));
    planned_steps += plan.reason == PlanReason::kPlanned;

    // The target verifies drafts 0..L-2 and accepts a prefix of them.
    for (int i = 0; i < kBatch; ++i) {
      const float* q = signals.data() + i * kGamma;
      const int verified = plan.verify_lens[i] - 1;
      int accepted = 0;
      while (accepted < verified) {
        const double x = DeterministicLogit(q[accepted], est_options.q_floor);
        const double p = DeterministicSigmoid(kTrueSlope[accepted] * x + kTrueIntercept[accepted]);
        if (Uniform(stream) >= p) break;
        ++accepted;
      }
      observations[i] =
          VerifyObservation{ids[i], absl::MakeConstSpan(q, kGamma), verified, accepted};
    }
    if (rank == diverge_rank && step == steps / 2) {
      // One rank sees one different acceptance, as if it had missed the
      // broadcast outcome of one request.
      for (VerifyObservation& o : observations) {
        if (o.num_verified_drafts == 0) continue;
        o.accepted_drafts += o.accepted_drafts < o.num_verified_drafts ? 1 : -1;
        break;
      }
    }
    std::shuffle(observations.begin(), observations.end(), listing);
    if (!estimator->Observe(observations).ok()) return 2;
  }

  Result result;
  result.estimator_hash = estimator->StateHash();
  result.plans_hash = plans.digest();
  // Learned: every position fitted, refit many times, with coefficients near
  // the stream's model (not the prior, which the ranks would share
  // trivially), and the planner trimmed most steps.
  result.learned = estimator->ready() && planned_steps > steps / 2;
  for (int k = 0; k < kGamma; ++k) {
    const auto& p = estimator->position(k);
    if (rank == 0) {
      std::printf(
          "position %d: slope %.4f (true %.2f) intercept %.4f (true %.2f) observations %" PRId64
          " refits %" PRId64 " rejected %" PRId64 "\n",
          k, p.slope, kTrueSlope[k], p.intercept, kTrueIntercept[k], p.observations, p.refits,
          p.rejected_refits);
    }
    // Loose bounds: the last position sees about 1,500 observations in this
    // stream (standard errors near 0.1), the first ones a full window of 4096.
    result.learned = result.learned && p.refits > 100 &&
                     std::fabs(p.slope - kTrueSlope[k]) < 0.35 &&
                     std::fabs(p.intercept - kTrueIntercept[k]) < 0.5;
  }

  uint64_t mine[2] = {result.estimator_hash, result.plans_hash};
  std::vector<uint64_t> all(2 * static_cast<size_t>(size));
  if (MPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, MPI_COMM_WORLD) !=
      MPI_SUCCESS) {
    std::fprintf(stderr, "rank %d: MPI_Allgather failed\n", rank);
    return 2;
  }
  bool agree = true;
  for (int r = 0; r < size; ++r) {
    agree = agree && all[2 * r] == all[0] && all[2 * r + 1] == all[1];
  }
  if (rank == 0) {
    for (int r = 0; r < size; ++r) {
      std::printf("rank %d: estimator hash %016" PRIx64 ", plans hash %016" PRIx64 "\n", r,
                  all[2 * r], all[2 * r + 1]);
    }
    std::printf("%d steps, %d planned (the rest verified everything)\n", steps, planned_steps);
  }
  if (!agree) {
    if (rank == 0) std::printf("estimator consistency: ranks disagree\n");
    return 3;
  }
  if (!result.learned) {
    if (rank == 0) std::printf("estimator consistency: the estimator did not learn the stream\n");
    return 4;
  }
  if (rank == 0) std::printf("estimator consistency: %d ranks agree\n", size);
  return 0;
}

}  // namespace
}  // namespace verdict

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) return 2;
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int status = verdict::Run(rank, size);
  std::fflush(stdout);
  MPI_Finalize();
  return status;
}
