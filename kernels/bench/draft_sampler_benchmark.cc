// Benchmark of the CUDA draft sampler (kernels/draft_sampler.h) on the GPU.
//
// Batches of R rows (one per request drafting a token) over vocabularies
// 32000 and 151936, with logits normal(0, 3) (a few ids carry most of the
// mass, as a trained draft model's do), for each parameter setting the
// kernel treats differently: greedy, temperature alone, top-k, top-p, and
// both. Each size is timed with CUDA events over back-to-back launches; the
// median of several batches is reported, with the bandwidth of the bytes a
// row must move at least (its logits read once, p written once). Prints a
// table and writes the same numbers as JSON (--json_out).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "kernels/bench/bench_util.h"
#include "kernels/cuda_check.h"
#include "kernels/draft_sampler.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, json_out, "draft_sampler_benchmark.json", "where to write the JSON");
ABSL_FLAG(std::string, vocab_sizes, "32000,151936", "comma-separated vocabulary sizes");
ABSL_FLAG(std::string, rows, "1,8,32,128,256", "comma-separated row counts");
ABSL_FLAG(int, launches, 20, "launches per timed batch");
ABSL_FLAG(int, repeats, 7, "timed batches per size (the median is reported)");

namespace verdict {
namespace {


struct Setting {
  const char* name;
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p = 0.0f;
};

constexpr Setting kSettings[] = {
    {"greedy", 0.0f, 0, 1.0f},
    {"temperature", 1.0f, 0, 1.0f},
    {"top_k 50", 1.0f, 50, 1.0f},
    {"top_p 0.95", 1.0f, 0, 0.95f},
    {"top_k 20 + top_p 0.95", 0.8f, 20, 0.95f},
    {"min_p 0.05", 1.0f, 0, 1.0f, 0.05f},
    {"top_p 0.9", 1.0f, 0, 0.9f},
};

template <typename T>
T* Allocate(size_t count) {
  void* device = nullptr;
  BENCH_CUDA(cudaMalloc(&device, count * sizeof(T)));
  return static_cast<T*>(device);
}

template <typename T>
T* Upload(const std::vector<T>& host) {
  T* device = Allocate<T>(host.size());
  BENCH_CUDA(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return device;
}

// Median microseconds per launch of `rows` rows.
double TimeLaunches(const DraftSampleInputs& in, DraftSampleOutputs out, void* workspace,
                    cudaStream_t stream, int max_ctas_per_row) {
  const int launches = absl::GetFlag(FLAGS_launches);
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) {
    BENCH_CHECK(DraftSampleCuda(in, &out, workspace, stream, max_ctas_per_row));
  }
  BENCH_CHECK(ReadDraftSampleError(out, stream));  // the inputs are valid
  std::vector<double> us;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    BENCH_CUDA(cudaEventRecord(start, stream));
    for (int i = 0; i < launches; ++i)
      BENCH_CHECK(DraftSampleCuda(in, &out, workspace, stream, max_ctas_per_row));
    BENCH_CUDA(cudaEventRecord(stop, stream));
    BENCH_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(1000.0 * ms / launches);
  }
  BENCH_CUDA(cudaEventDestroy(start));
  BENCH_CUDA(cudaEventDestroy(stop));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

void Run() {
  const std::vector<int> vocabs = ParseSizeList(absl::GetFlag(FLAGS_vocab_sizes), 1);
  const std::vector<int> row_counts = ParseSizeList(absl::GetFlag(FLAGS_rows), 1);
  if (vocabs.empty() || row_counts.empty()) BENCH_CHECK(absl::InvalidArgumentError("empty sizes"));
  const int max_rows = *std::max_element(row_counts.begin(), row_counts.end());
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreate(&stream));
  cudaDeviceProp prop;
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  void* workspace = nullptr;
  BENCH_CUDA(cudaMalloc(&workspace, kDraftSampleWorkspaceBytes));
  BENCH_CUDA(cudaMemset(workspace, 0, kDraftSampleWorkspaceBytes));
  DraftErrorRecord* error = Allocate<DraftErrorRecord>(1);

  nlohmann::json results = nlohmann::json::array();
  // Each size twice in one run: one CTA per row, and the launcher's choice
  // (rows split over clusters of 8, 4 or 2 CTAs while they are few).
  std::printf("%-8s %-6s %-24s %14s %14s %5s %10s\n", "vocab", "rows", "setting", "us one-CTA",
              "us launcher", "ctas", "GB/s");
  for (const int vocab : vocabs) {
    std::mt19937_64 gen(vocab);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> logits(static_cast<size_t>(max_rows) * vocab);
    for (float& x : logits) x = normal(gen);
    float* d_logits = Upload(logits);
    float* d_probs = Allocate<float>(logits.size());
    int32_t* d_tokens = Allocate<int32_t>(max_rows);
    float* d_signals = Allocate<float>(max_rows);
    std::vector<uint64_t> seeds(max_rows);
    std::vector<int64_t> positions(max_rows);
    for (int r = 0; r < max_rows; ++r) {
      seeds[r] = gen();
      positions[r] = 1000 + r;
    }
    uint64_t* d_seeds = Upload(seeds);
    int64_t* d_positions = Upload(positions);
    for (const Setting& setting : kSettings) {
      float* d_t = Upload(std::vector<float>(max_rows, setting.temperature));
      int32_t* d_k = Upload(std::vector<int32_t>(max_rows, setting.top_k));
      float* d_p = Upload(std::vector<float>(max_rows, setting.top_p));
      float* d_m = Upload(std::vector<float>(max_rows, setting.min_p));
      for (const int rows : row_counts) {
        const DraftSampleInputs in{rows, vocab, d_logits, d_t, d_k, d_p, d_seeds, d_positions, d_m};
        const DraftSampleOutputs out{d_tokens, d_probs, d_signals, error};
        const double one_cta_us = TimeLaunches(in, out, workspace, stream, 1);
        const double us = TimeLaunches(in, out, workspace, stream, kDraftMaxCtasPerRow);
        const int ctas = DraftSampleCtasPerRow(rows);
        const double bytes = 8.0 * rows * vocab;
        const double gbps = bytes / (us * 1e3);
        std::printf("%-8d %-6d %-24s %14.1f %14.1f %5d %10.0f\n", vocab, rows, setting.name,
                    one_cta_us, us, ctas, gbps);
        results.push_back({{"vocab", vocab},
                           {"rows", rows},
                           {"setting", setting.name},
                           {"temperature", setting.temperature},
                           {"top_k", setting.top_k},
                           {"top_p", setting.top_p},
                           {"us_per_launch", us},
                           {"one_cta_per_row_us", one_cta_us},
                           {"ctas_per_row", ctas},
                           {"min_bytes", bytes},
                           {"gbps", gbps}});
      }
      BENCH_CUDA(cudaFree(d_t));
      BENCH_CUDA(cudaFree(d_k));
      BENCH_CUDA(cudaFree(d_p));
      BENCH_CUDA(cudaFree(d_m));
    }
    for (void* p : {static_cast<void*>(d_logits), static_cast<void*>(d_probs),
                    static_cast<void*>(d_tokens), static_cast<void*>(d_signals),
                    static_cast<void*>(d_seeds), static_cast<void*>(d_positions)}) {
      BENCH_CUDA(cudaFree(p));
    }
  }
  nlohmann::json report = {{"device", prop.name},
                           {"sms", prop.multiProcessorCount},
                           {"launches", absl::GetFlag(FLAGS_launches)},
                           {"repeats", absl::GetFlag(FLAGS_repeats)},
                           {"results", results}};
  std::ofstream(absl::GetFlag(FLAGS_json_out)) << report.dump(2) << "\n";
  std::printf("wrote %s\n", absl::GetFlag(FLAGS_json_out).c_str());
  BENCH_CUDA(cudaFree(workspace));
  BENCH_CUDA(cudaFree(error));
  BENCH_CUDA(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace verdict

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  verdict::Run();
  return 0;
}
