// Turns a failed MPI call into a Status that names the rank and the call.
#ifndef VERDICT_COMM_INTERNAL_MPI_ERROR_H_
#define VERDICT_COMM_INTERNAL_MPI_ERROR_H_

#include <mpi.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "comm/internal/collective_util.h"

namespace verdict {
namespace comm_internal {

inline absl::Status MpiCallError(int rc, int rank, absl::string_view call) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
  return RankError(absl::StatusCode::kInternal, rank,
                   absl::StrCat(call, " failed: ", absl::string_view(text, length)));
}

}  // namespace comm_internal
}  // namespace verdict

#endif  // VERDICT_COMM_INTERNAL_MPI_ERROR_H_
