#include "comm/communicator.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace verdict {

size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return 4;
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
      return 4;
    case DataType::kInt64:
      return 8;
    case DataType::kUInt8:
      return 1;
  }
  return 0;
}

absl::Status BroadcastBytes(Communicator& comm, std::string* bytes, int root) {
  if (comm.world_size() == 1) return absl::OkStatus();
  int64_t size = comm.rank() == root ? static_cast<int64_t>(bytes->size()) : 0;
  if (absl::Status s = comm.Broadcast(&size, 1, DataType::kInt64, root); !s.ok()) return s;
  bytes->resize(static_cast<size_t>(size));
  return comm.Broadcast(bytes->data(), bytes->size(), DataType::kUInt8, root);
}

int AbortExitCode(const absl::Status& status) {
  return status.ok() ? 1 : static_cast<int>(status.code());
}

absl::Status Communicator::Barrier() {
  if (world_size() == 1) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat("rank ", rank(), ": Barrier is not implemented by this communicator"));
}

absl::Status Communicator::Synchronize(void* /*stream*/) { return absl::OkStatus(); }

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Duplicate() {
  return absl::UnimplementedError(
      absl::StrCat("rank ", rank(), ": Duplicate is not implemented by this communicator"));
}

void Communicator::Abort(const absl::Status& status) {
  std::fprintf(stderr, "rank %d: aborting: %s\n", rank(), std::string(status.ToString()).c_str());
  std::fflush(nullptr);
  std::_Exit(AbortExitCode(status));
}

}  // namespace verdict
