// The planner runs on every rank every step; once its buffers have grown to
// the batch it plans, a step must not touch the heap. This binary counts
// calls to the global operator new around Plan.
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/cost_table.h"
#include "scheduler/verify_planner.h"

namespace {
long g_allocations = 0;
}  // namespace

void* operator new(std::size_t size) {
  ++g_allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace verdict {
namespace {

TEST(VerifyPlannerAllocTest, PlanningAllocatesNothingOnceWarm) {
  constexpr int kGamma = 7;
  const CostTable table = *CostTable::Create({1, 64, 512}, {1, 64, 512, 4096},
                                             {0.010, 0.012, 0.020, 0.080,  //
                                              0.012, 0.014, 0.024, 0.090,  //
                                              0.020, 0.020, 0.030, 0.120});
  for (const VerifyMode mode :
       {VerifyMode::kCompact, VerifyMode::kCapAccept, VerifyMode::kStatic}) {
    PlannerOptions options;
    options.mode = mode;
    options.gamma = kGamma;
    VerifyPlanner planner = *VerifyPlanner::Create(options, table);
    std::mt19937_64 rng(1);
    std::vector<double> confidences(512 * kGamma);
    std::vector<int32_t> caps(512, kGamma + 1);
    VerifyPlan plan;
    auto plan_batch = [&](int batch) {
      for (int t = 0; t < batch * kGamma; ++t)
        confidences[t] = static_cast<double>(rng() >> 11) * 0x1.0p-53;
      const PlannerInput input{absl::MakeConstSpan(confidences).first(batch * kGamma),
                               absl::MakeConstSpan(caps).first(batch),
                               {},
                               true};
      return planner.Plan(input, &plan).ok();
    };
    ASSERT_TRUE(plan_batch(512));  // grows every buffer to the largest batch
    const long before = g_allocations;
    for (int step = 0; step < 200; ++step) {
      ASSERT_TRUE(plan_batch(1 + (step * 37) % 512));
    }
    EXPECT_EQ(g_allocations - before, 0) << VerifyModeName(mode);
    if (mode == VerifyMode::kCompact) {
      EXPECT_EQ(plan.reason, PlanReason::kPlanned);
    }
  }
}

}  // namespace
}  // namespace verdict
