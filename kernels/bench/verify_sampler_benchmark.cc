// Benchmark of the fused verify sampler (kernels/verify_sampler.h) on the GPU.
//
// Steps of R requests x (nextn + 1) rows (nextn 5: 6 .. 2046 rows; R = 0
// means one row with no drafts), vocabularies 32000 and 151936, dense draft
// distributions, temperature 1 and no top-p (--temperature and --top_p change
// them for every request). Inputs are random, drafts random tokens, so
// most requests reject their first draft, whose row then reads its whole p. Each size is timed with CUDA events over
// back-to-back launches and over CUDA-graph replays (launch gaps shrink),
// rotating among input copies so that small steps are not served from L2.
//
// The floor: the fewest bytes the step must move (every logit once, and p of
// each request's final row where that row rejected its draft) over the device-to-device copy bandwidth measured
// in the same run (bytes read plus bytes written). Prints a table and writes
// the same numbers as JSON (--json_out) for kernels/bench/verify_sample_peers.py.
// --tiles_per_cta times every size again at other splits of a row over a
// cluster (the JSON's "tiles_sweep"), for tuning the launcher's default.
// --compare_stash times every size twice in a row, with and without the
// small steps' stash of z in shared memory (SetSliceStash; a step that
// keeps none runs the same launch twice).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
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
#include "kernels/bench/verify_bench_inputs.h"
#include "kernels/cuda_check.h"
#include "kernels/verify_sampler.h"
#include "kernels/verify_sampler_launch.h"
#include "kernels/verify_step.h"
#include "kernels/verify_step_device.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, json_out, "verify_sampler_benchmark.json", "where to write the JSON");
ABSL_FLAG(std::string, vocab_sizes, "32000,151936", "comma-separated vocabulary sizes");
ABSL_FLAG(std::string, requests, "0,1,2,4,8,16,32,64,128,256,341",
          "comma-separated request counts (0 = one row, no drafts)");
ABSL_FLAG(int, nextn, 5, "drafts per request");
ABSL_FLAG(int, launches, 20, "launches per timed batch");
ABSL_FLAG(int, repeats, 9, "timed batches per size (the median is reported)");
ABSL_FLAG(float, temperature, 1.0f,
          "every request's temperature (0 = greedy; verify_sample_peers.py's peers stay at 1)");
ABSL_FLAG(float, top_p, 1.0f,
          "every request's top-p (1 = off; below 1 runs the selection passes; the peers stay "
          "at 1)");
ABSL_FLAG(int, top_k, 0, "every request's top-k (0 = off)");
ABSL_FLAG(float, min_p, 0.0f, "every request's min-p (0 = off)");
ABSL_FLAG(std::string, tiles_per_cta, "",
          "comma-separated mass tiles a CTA aims for, each timed after the default "
          "(kernels/verify_sampler_launch.h: SetTargetTilesPerCta); empty: the default only");
ABSL_FLAG(bool, compare_stash, false,
          "time every size with and then without the small steps' stash of z "
          "(kernels/verify_sampler_launch.h: SetSliceStash)");

namespace verdict {
namespace {


double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device-to-device copy bandwidth, counting bytes read plus bytes written.
double CopyBandwidthGBps(cudaStream_t stream) {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  BENCH_CUDA(cudaMalloc(&a, bytes));
  BENCH_CUDA(cudaMalloc(&b, bytes));
  BENCH_CUDA(cudaMemsetAsync(a, 1, bytes, stream));
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  std::vector<double> times;
  for (int i = 0; i < 12; ++i) {
    BENCH_CUDA(cudaEventRecord(start, stream));
    BENCH_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
    BENCH_CUDA(cudaEventRecord(stop, stream));
    BENCH_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (i >= 2) times.push_back(ms);
  }
  BENCH_CUDA(cudaFree(a));
  BENCH_CUDA(cudaFree(b));
  return 2.0 * bytes / (Median(times) * 1e-3) / 1e9;
}

struct Result {
  int vocab, requests, rows, verify_rows, rejected_rows, residual_rows;
  double us_stream, us_graph, bytes_min, bytes_all;
};

Result RunCase(int vocab, int requests, int nextn, cudaStream_t stream, double copy_gbps) {
  const int num_requests = std::max(requests, 1);
  const int seqlen = requests == 0 ? 1 : nextn + 1;
  const int rows = num_requests * seqlen;
  const int drafts = rows - num_requests;
  std::mt19937_64 gen(1234 + vocab + requests);

  // The layout: packed requests, random seeds and positions, random drafts.
  std::vector<int32_t> ftp, seqlens, verify_lens, top_ks, draft_ids;
  std::vector<int64_t> positions;
  std::vector<float> temperatures, top_ps, min_ps;
  std::vector<uint64_t> seeds;
  for (int r = 0; r < num_requests; ++r) {
    ftp.push_back(r * seqlen);
    seqlens.push_back(seqlen);
    verify_lens.push_back(-1);
    top_ks.push_back(absl::GetFlag(FLAGS_top_k));
    top_ps.push_back(absl::GetFlag(FLAGS_top_p));
    min_ps.push_back(absl::GetFlag(FLAGS_min_p));
    temperatures.push_back(absl::GetFlag(FLAGS_temperature));
    seeds.push_back(gen());
    positions.push_back(static_cast<int64_t>(gen() % 100000));
    for (int k = 0; k + 1 < seqlen; ++k) draft_ids.push_back(static_cast<int32_t>(gen() % vocab));
  }
  DeviceBuffers buffers;
  const auto upload = [&](const auto& v) {
    auto p = buffers.Upload(v);
    BENCH_CHECK(p.status());
    return *p;
  };
  VerifyInputs in;
  in.num_requests = num_requests;
  in.total_q = rows;
  in.vocab_size = vocab;
  in.logits_dtype = LogitsDtype::kFloat32;
  in.first_token_positions = upload(ftp);
  in.seqlen_q = upload(seqlens);
  in.positions = upload(positions);
  in.verify_lens = upload(verify_lens);
  in.draft_token_ids = drafts > 0 ? upload(draft_ids) : nullptr;
  in.temperatures = upload(temperatures);
  in.top_ks = upload(top_ks);
  in.top_ps = upload(top_ps);
  in.min_ps = upload(min_ps);
  in.seeds = upload(seeds);
  in.config.nextn = nextn;
  // Sizes of the host copy of the outputs.
  VerifyInputs host_in;
  host_in.num_requests = num_requests;
  host_in.total_q = rows;
  host_in.config.nextn = nextn;

  // Input copies: enough that a rotation over them outgrows the L2.
  const double set_bytes = (static_cast<double>(rows) + drafts) * vocab * 4.0;
  const int copies = static_cast<int>(std::clamp(std::ceil(512e6 / set_bytes), 1.0, 16.0));
  std::vector<VerifyInputs> sets;
  for (int c = 0; c < copies; ++c) {
    VerifyInputs s = in;
    auto logits = buffers.Upload(nullptr, static_cast<size_t>(rows) * vocab * 4);
    BENCH_CHECK(logits.status());
    BENCH_CHECK(FillBenchLogits(static_cast<float*>(*logits), rows, vocab, 77 + c, 2.0f, stream));
    s.logits = *logits;
    if (drafts > 0) {
      auto probs = buffers.Upload(nullptr, static_cast<size_t>(drafts) * vocab * 4);
      BENCH_CHECK(probs.status());
      BENCH_CHECK(FillBenchDraftProbs(static_cast<float*>(*probs), drafts, vocab, 99 + c, stream));
      s.draft_probs = static_cast<const float*>(*probs);
      s.draft_vocab_size = vocab;
    } else {
      s.draft_probs = nullptr;
      s.draft_vocab_size = 0;
    }
    sets.push_back(s);
  }
  auto outputs = DeviceVerifyOutputs::Create(in);
  BENCH_CHECK(outputs.status());
  VerifyOutputs* out = (*outputs)->View();

  // Warm up on every copy and check that the step is accepted.
  for (const VerifyInputs& s : sets) BENCH_CHECK(InvokeVerifySample(s, out, stream));
  BENCH_CHECK(ReadVerifyError(*out, stream));
  HostVerifyOutputs host(host_in);
  BENCH_CHECK(InvokeVerifySample(sets[0], out, stream));
  BENCH_CUDA(cudaStreamSynchronize(stream));
  BENCH_CHECK((*outputs)->CopyTo(&host));
  int verify_rows = 0, rejected = 0, residual = 0;
  for (int row = 0; row < rows; ++row) {
    verify_rows += host.is_verify[row];
    rejected += host.is_verify[row] && !host.raw_accept[row];
    residual += host.is_verify[row] && host.is_final[row];
  }

  const int launches = absl::GetFlag(FLAGS_launches);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  std::vector<double> stream_us;
  for (int rep = 0; rep < repeats; ++rep) {
    BENCH_CUDA(cudaEventRecord(start, stream));
    for (int l = 0; l < launches; ++l) {
      BENCH_CHECK(InvokeVerifySample(sets[(rep * launches + l) % copies], out, stream));
    }
    BENCH_CUDA(cudaEventRecord(stop, stream));
    BENCH_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
    stream_us.push_back(ms * 1e3 / launches);
  }
  BENCH_CHECK(ReadVerifyError(*out, stream));

  // The same launches from a CUDA graph.
  double graph_us = -1;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool captured = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  for (int l = 0; captured && l < launches; ++l) {
    captured = InvokeVerifySample(sets[l % copies], out, stream).ok();
  }
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (captured && end == cudaSuccess &&
      cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
    BENCH_CUDA(cudaGraphLaunch(exec, stream));  // warm-up
    std::vector<double> us;
    for (int rep = 0; rep < repeats; ++rep) {
      BENCH_CUDA(cudaEventRecord(start, stream));
      BENCH_CUDA(cudaGraphLaunch(exec, stream));
      BENCH_CUDA(cudaEventRecord(stop, stream));
      BENCH_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
      us.push_back(ms * 1e3 / launches);
    }
    graph_us = Median(us);
    BENCH_CHECK(ReadVerifyError(*out, stream));
  } else {
    std::fprintf(stderr, "graph capture failed for V=%d requests=%d; stream timings only\n",
                 vocab, requests);
    (void)cudaGetLastError();
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  (void)copy_gbps;

  Result r;
  r.vocab = vocab;
  r.requests = requests;
  r.rows = rows;
  r.verify_rows = verify_rows;
  r.rejected_rows = rejected;
  r.residual_rows = residual;
  r.us_stream = Median(stream_us);
  r.us_graph = graph_us;
  r.bytes_min = (static_cast<double>(rows) + residual) * vocab * 4.0;
  r.bytes_all = set_bytes;
  return r;
}

int Main() {
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int device = 0;
  BENCH_CUDA(cudaGetDevice(&device));
  cudaDeviceProp prop;
  BENCH_CUDA(cudaGetDeviceProperties(&prop, device));
  const double copy_gbps = CopyBandwidthGBps(stream);
  std::printf("device: %s, %d SMs; copy bandwidth %.0f GB/s (read + write)\n", prop.name,
              prop.multiProcessorCount, copy_gbps);
  // One pass over every size: the launcher's default split, then each
  // --tiles_per_cta value.
  const auto run_sizes = [&](int tiles_per_cta) {
    verify_internal::SetTargetTilesPerCta(tiles_per_cta);
    std::printf("%s\n", tiles_per_cta > 0
                            ? ("tiles per CTA: " + std::to_string(tiles_per_cta)).c_str()
                            : "tiles per CTA: the launcher's default");
    std::printf("%7s %5s %6s %9s %9s %9s %8s %7s %5s\n", "vocab", "reqs", "rows", "rejected",
                "us", "us_graph", "GB/s", "%copy", "stash");
    nlohmann::json results = nlohmann::json::array();
    const std::vector<bool> stash_settings =
        absl::GetFlag(FLAGS_compare_stash) ? std::vector<bool>{true, false}
                                            : std::vector<bool>{true};
    for (const int vocab : ParseSizeList(absl::GetFlag(FLAGS_vocab_sizes), 1)) {
      for (const int requests : ParseSizeList(absl::GetFlag(FLAGS_requests), 0)) {
        for (const bool stash : stash_settings) {
          verify_internal::SetSliceStash(stash);
          const Result r = RunCase(vocab, requests, absl::GetFlag(FLAGS_nextn), stream, copy_gbps);
          verify_internal::SetSliceStash(true);
          const double best = r.us_graph > 0 ? std::min(r.us_graph, r.us_stream) : r.us_stream;
          const double gbps = r.bytes_min / (best * 1e-6) / 1e9;
          std::printf("%7d %5d %6d %9d %9.1f %9.1f %8.0f %6.1f%% %5s\n", r.vocab, r.requests,
                      r.rows, r.rejected_rows, r.us_stream, r.us_graph, gbps,
                      100.0 * gbps / copy_gbps, stash ? "on" : "off");
          std::fflush(stdout);
          results.push_back({{"vocab", r.vocab},
                             {"stash", stash},
                             {"requests", r.requests},
                             {"rows", r.rows},
                             {"verify_rows", r.verify_rows},
                             {"rejected_rows", r.rejected_rows},
                             {"residual_rows", r.residual_rows},
                             {"us_stream", r.us_stream},
                             {"us_graph", r.us_graph},
                             {"us", best},
                             {"bytes_min", r.bytes_min},
                             {"bytes_all_inputs", r.bytes_all},
                             {"gbps", gbps},
                             {"fraction_of_copy", gbps / copy_gbps},
                             {"tiles_per_cta", tiles_per_cta}});
        }
      }
    }
    verify_internal::SetTargetTilesPerCta(0);
    return results;
  };
  const nlohmann::json results = run_sizes(0);
  nlohmann::json sweep = nlohmann::json::array();
  for (const int tiles : ParseSizeList(absl::GetFlag(FLAGS_tiles_per_cta), 1)) {
    for (const nlohmann::json& r : run_sizes(tiles)) sweep.push_back(r);
  }
  nlohmann::json report = {{"device", prop.name},
                           {"sms", prop.multiProcessorCount},
                           {"copy_bandwidth_gbps", copy_gbps},
                           {"nextn", absl::GetFlag(FLAGS_nextn)},
                           {"temperature", absl::GetFlag(FLAGS_temperature)},
                           {"top_p", absl::GetFlag(FLAGS_top_p)},
                           {"top_k", absl::GetFlag(FLAGS_top_k)},
                           {"min_p", absl::GetFlag(FLAGS_min_p)},
                           {"results", results},
                           {"tiles_sweep", sweep}};
  std::ofstream(absl::GetFlag(FLAGS_json_out)) << report.dump(2) << "\n";
  std::printf("wrote %s\n", absl::GetFlag(FLAGS_json_out).c_str());
  return 0;
}

}  // namespace
}  // namespace verdict

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return verdict::Main();
}
