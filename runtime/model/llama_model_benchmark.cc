// CPU forward benchmark with dummy weights at a chosen shape: load time,
// prefill throughput, and the latency of a decode step (1 token per
// request) and a verify step (nextn + 1 tokens per request) over a batch.
// Prints a table and writes the same numbers as JSON (--json_out).
//
//   llama_model_benchmark --model=llama-3.2-1b --num_layers=2 --batch=4
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "nlohmann/json.hpp"
#include "runtime/base/command_line.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/llama_model.h"
#include "runtime/model/model_config.h"
#include "runtime/model/weights.h"

ABSL_FLAG(std::string, model, "llama-3.2-1b", "built-in shape name or a config.json path");
ABSL_FLAG(int, num_layers, 2, "override the layer count (0 keeps the model's)");
ABSL_FLAG(int, batch, 4, "requests per step");
ABSL_FLAG(int, prompt_len, 64, "prefill tokens per request");
ABSL_FLAG(int, nextn, 5, "drafts per verify step (verify rows = nextn + 1)");
ABSL_FLAG(int, steps, 3, "timed decode and verify steps");
ABSL_FLAG(int, threads, 0, "CPU threads (0 = all cores)");
ABSL_FLAG(std::string, json_out, "", "write the results as JSON here");

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("CPU forward benchmark with dummy weights");
  std::vector<std::string> storage = verdict::NormalizeFlagNames(argc, argv);
  std::vector<char*> args;
  for (std::string& s : storage) args.push_back(s.data());
  absl::ParseCommandLine(static_cast<int>(args.size()), args.data());

  const std::string name = absl::GetFlag(FLAGS_model);
  absl::StatusOr<verdict::ModelConfig> config = verdict::BuiltinModelConfig(name);
  if (!config.ok()) config = verdict::LoadModelConfig(name);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", std::string(config.status().message()).c_str());
    return 1;
  }
  if (absl::GetFlag(FLAGS_num_layers) > 0) {
    config->num_layers = absl::GetFlag(FLAGS_num_layers);
    config->layer_uses_sliding_window.resize(config->num_layers, false);
  }
  const int batch = absl::GetFlag(FLAGS_batch);
  const int prompt = absl::GetFlag(FLAGS_prompt_len);
  const int verify_rows = absl::GetFlag(FLAGS_nextn) + 1;
  const int steps = absl::GetFlag(FLAGS_steps);
  const int64_t positions = prompt + steps * (1 + verify_rows) + verify_rows;

  absl::StatusOr<verdict::KvCache> cache = verdict::KvCache::Create(verdict::MakeKvCacheConfig(
      *config, 1, batch * static_cast<int>((positions + 15) / 16), batch, verify_rows));
  if (!cache.ok()) {
    std::fprintf(stderr, "%s\n", std::string(cache.status().message()).c_str());
    return 1;
  }
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<verdict::ModelRunner>> model = verdict::CreateCpuLlamaModel(
      *config, *verdict::MakeDummyWeights(0), &*cache, nullptr,
      verdict::CpuModelOptions{absl::GetFlag(FLAGS_threads)});
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  const double load_s = Seconds(start);

  std::vector<int> handles;
  for (int r = 0; r < batch; ++r) handles.push_back(*cache->Allocate(positions));
  std::vector<std::vector<int32_t>> tokens(batch);
  for (int r = 0; r < batch; ++r) {
    for (int i = 0; i < prompt; ++i) tokens[r].push_back((r * 7919 + i * 104729) % config->vocab_size);
  }
  std::vector<float> logits;
  auto run = [&](int64_t position, int per_request, int num_logits) {
    verdict::ForwardBatch b;
    for (int r = 0; r < batch; ++r) {
      b.requests.push_back(verdict::ForwardRequest{
          handles[r], position, absl::MakeConstSpan(tokens[r]).subspan(0, per_request),
          num_logits});
    }
    logits.resize(b.num_logit_rows() * config->vocab_size);
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = (*model)->Forward(b, logits.data());
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      std::exit(1);
    }
    return Seconds(t0);
  };
  const double prefill_s = run(0, prompt, 1);
  int64_t position = prompt;
  double decode_s = 0, verify_s = 0;
  for (int s = 0; s < steps; ++s) {
    decode_s += run(position, 1, -1);
    position += 1;
    verify_s += run(position, verify_rows, -1);
    position += verify_rows;
  }
  decode_s /= steps;
  verify_s /= steps;

  std::printf("model %s, %d layers, batch %d, prompt %d, verify rows %d\n", name.c_str(),
              config->num_layers, batch, prompt, verify_rows);
  std::printf("%-22s %12s\n", "measure", "value");
  std::printf("%-22s %12.3f\n", "load (s)", load_s);
  std::printf("%-22s %12.1f\n", "prefill (tokens/s)", batch * prompt / prefill_s);
  std::printf("%-22s %12.2f\n", "decode step (ms)", decode_s * 1e3);
  std::printf("%-22s %12.2f\n", "verify step (ms)", verify_s * 1e3);
  const std::string json_out = absl::GetFlag(FLAGS_json_out);
  if (!json_out.empty()) {
    nlohmann::json j = {{"model", name},
                        {"num_layers", config->num_layers},
                        {"batch", batch},
                        {"prompt_len", prompt},
                        {"verify_rows", verify_rows},
                        {"load_s", load_s},
                        {"prefill_tokens_per_s", batch * prompt / prefill_s},
                        {"decode_step_ms", decode_s * 1e3},
                        {"verify_step_ms", verify_s * 1e3}};
    std::ofstream(json_out) << j.dump(2) << "\n";
  }
  return 0;
}
