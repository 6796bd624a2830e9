// Device copies of a HostVerifyStep and device output arrays, for the GPU
// parity test and the benchmark (the engine keeps its own device buffers).
#ifndef VERDICT_KERNELS_VERIFY_STEP_DEVICE_H_
#define VERDICT_KERNELS_VERIFY_STEP_DEVICE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/verify_sampler.h"
#include "kernels/verify_step.h"

namespace verdict {

// Owns device allocations; frees them on destruction.
class DeviceBuffers {
 public:
  DeviceBuffers() = default;
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  ~DeviceBuffers();

  // Copies `bytes` from host (or zero-fills when host is null) to a new
  // allocation; returns nullptr for 0 bytes.
  absl::StatusOr<void*> Upload(const void* host, size_t bytes);

  template <typename T>
  absl::StatusOr<T*> Upload(const std::vector<T>& host) {
    absl::StatusOr<void*> p = Upload(host.data(), host.size() * sizeof(T));
    if (!p.ok()) return p.status();
    return static_cast<T*>(*p);
  }

 private:
  std::vector<void*> allocations_;
};

// The step's inputs in device memory.
class DeviceVerifyStep {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceVerifyStep>> Create(const HostVerifyStep& host);
  const VerifyInputs& Inputs() const { return inputs_; }

 private:
  DeviceBuffers buffers_;
  VerifyInputs inputs_;
};

// Device output arrays sized for a step, with a zeroed workspace.
class DeviceVerifyOutputs {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceVerifyOutputs>> Create(
      const VerifyInputs& inputs, int32_t confidence_stride = 0);
  VerifyOutputs* View() { return &outputs_; }
  // Copies every output array (and the error record) into `host`, which
  // must have been sized for the same step.
  absl::Status CopyTo(HostVerifyOutputs* host) const;

 private:
  DeviceBuffers buffers_;
  VerifyOutputs outputs_;
};

}  // namespace verdict

#endif  // VERDICT_KERNELS_VERIFY_STEP_DEVICE_H_
