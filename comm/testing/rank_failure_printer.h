// Test support for gtest binaries that run on every rank under mpirun.
#ifndef VERDICT_COMM_TESTING_RANK_FAILURE_PRINTER_H_
#define VERDICT_COMM_TESTING_RANK_FAILURE_PRINTER_H_

#include <cstdio>

#include "comm/communicator.h"
#include "gtest/gtest.h"

namespace verdict {

// Prints each failure with the rank that saw it.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed()) {
      std::fprintf(stderr, "rank %d: %s:%d: %s\n", rank_,
                   result.file_name() ? result.file_name() : "?", result.line_number(),
                   result.summary());
    }
  }

 private:
  int rank_;
};

// Keeps gtest's usual summary on rank 0 only, so mpirun's merged output
// reads once, and reports every rank's failures with its rank.
inline void ReportFailuresByRank(int rank) {
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankFailurePrinter(rank));
}

// Runs every test on every rank of `comm` with failures reported by rank;
// the job passes only if every rank passed. Returns main()'s exit code.
inline int RunAllTestsOnEveryRank(Communicator& comm, const char* label) {
  ReportFailuresByRank(comm.rank());
  int32_t any_failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  if (!comm.AllReduceSum(&any_failed, &any_failed, 1, DataType::kInt32).ok()) return 3;
  if (comm.rank() == 0) {
    std::printf("%s: %d ranks, %s\n", label, comm.world_size(),
                any_failed == 0 ? "all passed" : "FAILED");
  }
  return any_failed == 0 ? 0 : 1;
}

}  // namespace verdict

#endif  // VERDICT_COMM_TESTING_RANK_FAILURE_PRINTER_H_
