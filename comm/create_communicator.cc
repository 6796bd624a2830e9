#include "comm/create_communicator.h"

#include <utility>

#include "comm/local_communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"

namespace verdict {
namespace {

// Widens StatusOr<unique_ptr<Derived>> to StatusOr<unique_ptr<Communicator>>.
template <typename T>
absl::StatusOr<std::unique_ptr<Communicator>> Widen(absl::StatusOr<std::unique_ptr<T>> comm) {
  if (!comm.ok()) return comm.status();
  return std::unique_ptr<Communicator>(*std::move(comm));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(Backend kind,
                                                                 const CommOptions& options) {
  switch (kind) {
    case Backend::kLocal:
      return std::unique_ptr<Communicator>(std::make_unique<LocalCommunicator>());
    case Backend::kMpi:
      return Widen(MpiCommunicator::Create(options));
    case Backend::kNccl:
      return Widen(NcclCommunicator::Create(options));
  }
  return absl::InvalidArgumentError("unknown communicator backend");
}

}  // namespace verdict
