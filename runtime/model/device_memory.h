// Growing device and page-locked host buffers for the CUDA backend's
// per-step data: sized to the largest step seen, never shrunk, so a steady
// stream of steps allocates nothing.
#ifndef VERDICT_RUNTIME_MODEL_DEVICE_MEMORY_H_
#define VERDICT_RUNTIME_MODEL_DEVICE_MEMORY_H_

#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"
#include "kernels/cuda_check.h"

namespace verdict {

// One cudaMalloc, freed with its owner.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }

  // Exactly `bytes` (none for 0); the contents are not kept.
  absl::Status Allocate(size_t bytes) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    if (bytes == 0) return absl::OkStatus();
    VERDICT_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, bytes));
    bytes_ = bytes;
    return absl::OkStatus();
  }
  // Grows (never shrinks) to at least `bytes`, with a quarter to spare; the
  // contents are not kept. Counts the reallocations in *moved (a captured
  // CUDA graph holds addresses).
  absl::Status Reserve(size_t bytes, int* moved = nullptr) {
    if (bytes <= bytes_) return absl::OkStatus();
    if (moved != nullptr) ++*moved;
    return Allocate(bytes + bytes / 4);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory, so that copies to and from the device are
// asynchronous.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
  }
  // As DeviceBuffer::Reserve.
  absl::Status Reserve(size_t bytes, int* moved = nullptr) {
    if (bytes <= bytes_) return absl::OkStatus();
    if (moved != nullptr) ++*moved;
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    VERDICT_CUDA_RETURN_IF_ERROR(cudaMallocHost(&ptr_, bytes + bytes / 4));
    bytes_ = bytes + bytes / 4;
    return absl::OkStatus();
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_MODEL_DEVICE_MEMORY_H_
