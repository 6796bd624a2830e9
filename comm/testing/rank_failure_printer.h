// Test support for gtest binaries that run on every rank under mpirun.
#ifndef VERDICT_COMM_TESTING_RANK_FAILURE_PRINTER_H_
#define VERDICT_COMM_TESTING_RANK_FAILURE_PRINTER_H_

#include <cstdio>

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

}  // namespace verdict

#endif  // VERDICT_COMM_TESTING_RANK_FAILURE_PRINTER_H_
