// An owning device allocation for tests and benchmarks: upload, download,
// and a poison fill (all bits set: NaN in float32 and in bf16) so that an
// element a kernel forgot to write shows up as NaN.
#ifndef VERDICT_KERNELS_MODEL_INTERNAL_DEVICE_BUFFER_H_
#define VERDICT_KERNELS_MODEL_INTERNAL_DEVICE_BUFFER_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/model/paged_kv.h"

namespace verdict {
namespace test_util {

inline void CheckCuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s failed: %s\n", what, cudaGetErrorString(err));
    std::abort();
  }
}

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count > 0)
      CheckCuda(cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)), "cudaMalloc");
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { Upload(host); }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(other.ptr_), count_(other.count_) {
    other.ptr_ = nullptr;
    other.count_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      if (ptr_ != nullptr) cudaFree(ptr_);
      ptr_ = other.ptr_;
      count_ = other.count_;
      other.ptr_ = nullptr;
      other.count_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return count_; }

  void Upload(const std::vector<T>& host) {
    if (host.size() != count_) std::abort();
    if (count_ > 0)
      CheckCuda(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice),
                "upload");
  }
  std::vector<T> Download() const {
    std::vector<T> host(count_);
    if (count_ > 0)
      CheckCuda(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost),
                "download");
    return host;
  }
  void Poison() {
    if (count_ > 0) CheckCuda(cudaMemset(ptr_, 0xff, count_ * sizeof(T)), "poison");
  }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// Device copies of a host paged batch's arrays (test_util::HostPagedBatch,
// attention_test_case.h) and the PagedBatch that points at them.
template <typename HostBatch>
struct DevicePagedBatch {
  DeviceBuffer<int32_t> q_start, kv_len, positions, block_tables;
  explicit DevicePagedBatch(const HostBatch& h)
      : q_start(h.q_start),
        kv_len(h.kv_len),
        positions(h.positions),
        block_tables(h.block_tables) {}
  PagedBatch Get(const HostBatch& h) const {
    PagedBatch b = h.Batch();
    b.q_start = q_start.get();
    b.kv_len = kv_len.get();
    b.positions = positions.get();
    b.block_tables = block_tables.get();
    return b;
  }
};

}  // namespace test_util
}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_INTERNAL_DEVICE_BUFFER_H_
