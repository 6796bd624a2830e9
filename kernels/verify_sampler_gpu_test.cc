// Parity of the CUDA verify sampler with its CPU twin on random steps.
//
// Both backends share their arithmetic (kernels/sampling_math.h), so every
// decision is expected to agree bit for bit. A row whose decision differs is
// still accepted if, recomputed in double precision, the decision sits within
// float rounding of its threshold (the accept test u * p = q, the two best
// keys of an exponential race, or a top-p boundary mass): then either answer
// is a correct rounding. Every such row is checked and counted.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/philox.h"
#include "kernels/verify_sampler.h"
#include "kernels/verify_sampler_internal.h"
#include "kernels/verify_sampler_launch.h"
#include "kernels/verify_step.h"
#include "kernels/verify_step_device.h"

namespace verdict {
namespace {

// Relative distance to a threshold that float rounding can explain.
constexpr double kRoundingTolerance = 1e-5;

struct StepShape {
  std::string name;
  int32_t vocab = 1000;
  int32_t requests = 8;
  int32_t nextn = 5;
  bool sparse = false;
  bool bf16 = false;
  bool features = true;  // greedy rows, top-k/top-p, masks, golden ids, cutoffs, stops
  float simulated_acceptance = -1.0f;  // SamplerConfig::simulated_acceptance
  float logit_sigma = 3.0f;  // logits normal(0, logit_sigma)
  uint64_t salt = 1;
};

std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
  double m = -1e300;
  for (const float x : logits) m = std::max(m, static_cast<double>(x));
  std::vector<double> q(logits.size());
  double sum = 0;
  for (size_t i = 0; i < q.size(); ++i) sum += q[i] = std::exp((logits[i] - m) / temperature);
  for (double& x : q) x /= sum;
  return q;
}

HostVerifyStep RandomStep(const StepShape& shape) {
  std::mt19937_64 gen(shape.salt);
  std::normal_distribution<float> normal(0.0f, shape.logit_sigma);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int32_t v = shape.vocab;
  SamplerConfig config{.nextn = shape.nextn};
  config.simulated_acceptance = shape.simulated_acceptance;
  HostVerifyStep step(v, config, shape.sparse);
  for (int32_t i = 0; i < shape.requests; ++i) {
    VerifyRequest r;
    const int32_t drafts = 1 + static_cast<int32_t>(gen() % shape.nextn);
    r.seed = gen();
    r.position = static_cast<int64_t>(gen() % 100000);
    if (shape.features) {
      const int kind = static_cast<int>(gen() % 6);
      r.temperature = kind == 0 ? 0.0f : kind == 1 ? 0.6f : 1.0f;
      r.top_k = gen() % 4 == 0 ? 1 + static_cast<int32_t>(gen() % 50) : 0;
      r.top_p = gen() % 4 == 0 ? 0.5f + 0.4f * static_cast<float>(unit(gen)) : 1.0f;
      r.min_p = gen() % 4 == 0 ? 0.01f + 0.3f * static_cast<float>(unit(gen)) : 0.0f;
      r.verify_len = gen() % 4 == 0 ? static_cast<int32_t>(gen() % (drafts + 1)) : -1;
    }
    for (int k = 0; k <= drafts; ++k) {
      std::vector<float> row(v);
      for (float& x : row) x = normal(gen);
      r.logits.push_back(row);
    }
    for (int k = 0; k < drafts; ++k) {
      // The draft distribution: the target's, perturbed (so that many drafts
      // pass), or independent (so that many are rejected).
      std::vector<double> p = Softmax(r.logits[k], 1.0);
      if (gen() % 2 == 0) {
        std::vector<float> noisy(v);
        for (float& x : noisy) x = normal(gen);
        p = Softmax(noisy, 1.0);
      } else {
        for (double& x : p) x *= std::exp(0.3 * normal(gen) / 3.0);
        double sum = 0;
        for (const double x : p) sum += x;
        for (double& x : p) x /= sum;
      }
      std::discrete_distribution<int32_t> draw(p.begin(), p.end());
      r.draft_token_ids.push_back(draw(gen));
      if (shape.sparse) {
        // The 32 largest entries of p.
        std::vector<int32_t> ids(v);
        for (int32_t id = 0; id < v; ++id) ids[id] = id;
        std::partial_sort(ids.begin(), ids.begin() + std::min(32, v), ids.end(),
                          [&](int32_t a, int32_t b) { return p[a] > p[b]; });
        std::vector<std::pair<int32_t, float>> list;
        for (int t = 0; t < std::min(32, v); ++t) {
          list.push_back({ids[t], static_cast<float>(p[ids[t]])});
        }
        r.draft_topk.push_back(list);
      } else {
        r.draft_probs.push_back(std::vector<float>(p.begin(), p.end()));
      }
    }
    if (shape.features) {
      if (gen() % 5 == 0) {
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < v; ++id) {
          if (gen() % 3 == 0) allowed.push_back(id);
        }
        allowed.push_back(r.draft_token_ids[0]);
        r.bitmasks.push_back({0, BitmaskAllowing(v, allowed)});
      }
      if (gen() % 6 == 0) {
        r.golden_token_ids.assign(drafts + 1, -1);
        r.golden_token_ids[gen() % (drafts + 1)] = static_cast<int32_t>(gen() % v);
      }
      if (gen() % 3 == 0) r.stop_token_ids = {static_cast<int32_t>(gen() % v), r.draft_token_ids[0]};
    }
    step.Add(r);
  }
  if (shape.bf16) step.UseBFloat16Logits();
  return step;
}

struct RunResult {
  HostVerifyOutputs out;
  absl::Status status;
};

RunResult RunOnCpu(const HostVerifyStep& step, int32_t stride) {
  const VerifyInputs in = step.Inputs();
  RunResult result{HostVerifyOutputs(in, stride), absl::OkStatus()};
  VerifyOutputs view = result.out.View();
  result.status = VerifySampleCpu(in, &view);
  return result;
}

RunResult RunOnGpu(const HostVerifyStep& step, int32_t stride) {
  const VerifyInputs host_in = step.Inputs();
  RunResult result{HostVerifyOutputs(host_in, stride), absl::OkStatus()};
  auto device_step = DeviceVerifyStep::Create(step);
  EXPECT_TRUE(device_step.ok()) << device_step.status();
  auto device_out = DeviceVerifyOutputs::Create((*device_step)->Inputs(), stride);
  EXPECT_TRUE(device_out.ok()) << device_out.status();
  const absl::Status launch =
      InvokeVerifySample((*device_step)->Inputs(), (*device_out)->View(), nullptr);
  EXPECT_TRUE(launch.ok()) << launch;
  result.status = ReadVerifyError(*(*device_out)->View(), nullptr);
  const absl::Status copy = (*device_out)->CopyTo(&result.out);
  EXPECT_TRUE(copy.ok()) << copy;
  return result;
}

// ---------------------------------------------------------------- margins

// The logits of a row as the sampler sees them (bitmask applied), in double.
struct RowView {
  std::vector<double> z;
  double max = -INFINITY;
};

RowView ViewRow(HostVerifyStep& step, const VerifyInputs& in, int32_t row, int32_t r, int32_t k) {
  RowView view;
  const float t = in.temperatures[r];
  const float inv_t = t > 0 ? 1.0f / t : 1.0f;
  int32_t mask = -1;
  for (int32_t m = 0; m < in.num_bitmasks; ++m) {
    if (in.bitmask_request_indices[m] == r && in.bitmask_steps[m] == k) mask = m;
  }
  view.z.resize(in.vocab_size);
  for (int32_t v = 0; v < in.vocab_size; ++v) {
    const size_t index = static_cast<size_t>(row) * in.vocab_size + v;
    float logit = step.logits()[index];
    if (in.logits_dtype == LogitsDtype::kBFloat16) {
      const uint32_t bits = static_cast<uint32_t>(step.logits_bf16()[index]) << 16;
      std::memcpy(&logit, &bits, sizeof(logit));
    }
    double z = static_cast<double>(logit) * inv_t;
    if (mask >= 0 && !((in.bitmask_bits[static_cast<size_t>(mask) * in.bitmask_words + (v >> 5)] >>
                        (v & 31)) & 1u)) {
      z = -INFINITY;
    }
    view.z[v] = z;
    view.max = std::max(view.max, z);
  }
  return view;
}

double RelGap(double a, double b) {
  const double scale = std::max({std::fabs(a), std::fabs(b), 1e-300});
  return std::fabs(a - b) / scale;
}

// The smallest relative distance of any of the row's decisions to its
// threshold, recomputed in double.
double DecisionMargin(HostVerifyStep& step, int32_t row) {
  const VerifyInputs in = step.Inputs();
  int32_t r = 0;
  while (r + 1 < in.num_requests && in.first_token_positions[r + 1] <= row) ++r;
  const int32_t k = row - in.first_token_positions[r];
  const RowView view = ViewRow(step, in, row, r, k);
  const int32_t v_size = in.vocab_size;
  double margin = INFINITY;

  if (in.temperatures[r] == 0.0f) {  // greedy: the two largest logits
    std::vector<double> z = view.z;
    std::partial_sort(z.begin(), z.begin() + 2, z.end(), std::greater<double>());
    return RelGap(z[0], z[1]);
  }
  // The kept set: top-k (exact float order), then top-p; margins of top-p.
  std::vector<double> e(v_size, 0.0);
  std::vector<int32_t> order(v_size);
  for (int32_t v = 0; v < v_size; ++v) order[v] = v;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return view.z[a] > view.z[b]; });
  int32_t kept = 0;
  for (int32_t v = 0; v < v_size; ++v) kept += view.z[v] > -INFINITY;
  const int32_t top_k = in.top_ks[r];
  int32_t allowed = kept;
  if (top_k > 0 && top_k < kept) {
    const double t = view.z[order[top_k - 1]];
    kept = 0;
    while (kept < v_size && view.z[order[kept]] >= t) ++kept;
  }
  if (in.min_ps != nullptr && in.min_ps[r] > 0.0f) {
    // Min-p: z - max >= log(min_p); the nearest id on either side sets the margin.
    const double log_min_p = std::log(static_cast<double>(in.min_ps[r]));
    int32_t n = 0;
    while (n < allowed && view.z[order[n]] - view.max >= log_min_p) ++n;
    for (const int32_t i : {n - 1, n}) {
      if (i >= 0 && i < allowed) {
        margin = std::min(margin, RelGap(view.z[order[i]] - view.max, log_min_p));
      }
    }
    kept = std::min(kept, n);
  }
  double total = 0;
  for (int32_t i = 0; i < kept; ++i) total += std::exp(view.z[order[i]] - view.max);
  if (in.top_ps[r] < 1.0f) {
    const double limit = static_cast<double>(in.top_ps[r]) * total;
    double above = 0;
    int32_t i = 0;
    while (i < kept) {
      int32_t j = i;
      double group = 0;
      while (j < kept && view.z[order[j]] == view.z[order[i]]) {
        group += std::exp(view.z[order[j]] - view.max);
        ++j;
      }
      margin = std::min(margin, RelGap(above, limit));
      if (!(above < limit)) break;
      above += group;
      i = j;
    }
    kept = i;
    total = above;
  }
  for (int32_t i = 0; i < kept; ++i) e[order[i]] = std::exp(view.z[order[i]] - view.max) / total;

  const uint64_t seed = in.seeds[r];
  const int64_t position = in.positions[r] + k;
  const int32_t verify_len =
      in.verify_lens[r] < 0 ? in.seqlen_q[r] - 1 : std::min(in.verify_lens[r], in.seqlen_q[r] - 1);
  const auto race = [&](const std::vector<double>& w, RandomStream stream) {
    double best = 0, second = 0;
    for (int32_t v = 0; v < v_size; ++v) {
      if (w[v] <= 0) continue;
      const uint32_t bits = PhiloxDraw(seed, position, 0, stream, v >> 2).v[v & 3];
      const double key = w[v] / -std::log(static_cast<double>(UniformOpen01(bits)));
      if (key > best) {
        second = best;
        best = key;
      } else if (key > second) {
        second = key;
      }
    }
    return best > 0 ? RelGap(best, second) : INFINITY;
  };
  // A sample races the tiles by their weights, then the winning tile's ids
  // (verify_internal::kTileRaceRow).
  const auto tile_race = [&](const std::vector<double>& w, RandomStream stream) {
    const int32_t tile_ids = verify_internal::kMassTileIds;
    double best = 0, second = 0;
    int32_t winner = -1;
    for (int32_t t = 0; t < verify_internal::NumMassTiles(v_size); ++t) {
      double mass = 0;
      for (int32_t v = t * tile_ids; v < std::min(v_size, (t + 1) * tile_ids); ++v) mass += w[v];
      if (mass <= 0) continue;
      const uint32_t bits =
          PhiloxDraw(seed, position, verify_internal::kTileRaceRow, stream, t >> 2).v[t & 3];
      const double key = mass / -std::log(static_cast<double>(UniformOpen01(bits)));
      if (key > best) {
        second = best;
        best = key;
        winner = t;
      } else if (key > second) {
        second = key;
      }
    }
    if (winner < 0) return static_cast<double>(INFINITY);
    std::vector<double> in_tile(v_size, 0.0);
    for (int32_t v = winner * tile_ids; v < std::min(v_size, (winner + 1) * tile_ids); ++v) {
      in_tile[v] = w[v];
    }
    return std::min(RelGap(best, second), race(in_tile, stream));
  };
  if (k < verify_len) {
    const int32_t j = in.first_token_positions[r] - r + k;
    const int32_t d = in.draft_token_ids[j];
    std::vector<double> p(v_size, 0.0);
    if (in.draft_probs) {
      for (int32_t v = 0; v < v_size; ++v) p[v] = in.draft_probs[static_cast<size_t>(j) * v_size + v];
    } else {
      for (int32_t i = 0; i < in.draft_topk; ++i) {
        p[in.draft_topk_ids[j * in.draft_topk + i]] += in.draft_topk_probs[j * in.draft_topk + i];
      }
    }
    const bool golden = in.golden_token_ids != nullptr && in.golden_token_ids[row] >= 0;
    if (in.config.simulated_acceptance >= 0.0f && !golden) {
      // u < rate compares two exact floats: only equality is a tie.
      const double u =
          UniformOpen01(PhiloxDraw(seed, position, 0, RandomStream::kSimulatedAcceptance, 0).v[0]);
      margin = std::min(margin, RelGap(u, in.config.simulated_acceptance));
    } else {
      const double u = UniformOpen01(PhiloxDraw(seed, position, 0, RandomStream::kAccept, 0).v[0]);
      margin = std::min(margin, RelGap(u * p[d], e[d]));
    }
    const double alpha = std::exp(-static_cast<double>(in.config.penalty));
    std::vector<double> w(v_size);
    for (int32_t v = 0; v < v_size; ++v) w[v] = std::max(e[v] - alpha * p[v], 0.0);
    margin = std::min(margin, tile_race(w, RandomStream::kResidual));
  } else {
    margin = std::min(margin, tile_race(e, RandomStream::kBonus));
  }
  return margin;
}

// ---------------------------------------------------------------- parity

// Two launches of one step give the same bytes in every output.
void ExpectSameOutputs(const HostVerifyOutputs& a, const HostVerifyOutputs& b) {
  EXPECT_EQ(a.row_to_req, b.row_to_req);
  EXPECT_EQ(a.local_step, b.local_step);
  EXPECT_EQ(a.is_verify, b.is_verify);
  EXPECT_EQ(a.raw_accept, b.raw_accept);
  EXPECT_EQ(a.accept, b.accept);
  EXPECT_EQ(a.is_final, b.is_final);
  EXPECT_EQ(a.verified_token_ids, b.verified_token_ids);
  EXPECT_EQ(a.candidate_token_ids, b.candidate_token_ids);
  EXPECT_EQ(a.token_logprobs.size(), b.token_logprobs.size());
  EXPECT_EQ(std::memcmp(a.token_logprobs.data(), b.token_logprobs.data(),
                        sizeof(float) * std::min(a.token_logprobs.size(), b.token_logprobs.size())),
            0);
  EXPECT_EQ(a.last_valid_offset, b.last_valid_offset);
  EXPECT_EQ(a.sampled_token_ids, b.sampled_token_ids);
  EXPECT_EQ(a.emitted_stop_token, b.emitted_stop_token);
  EXPECT_EQ(a.num_generated_tokens, b.num_generated_tokens);
  EXPECT_EQ(a.num_verified_tokens, b.num_verified_tokens);
  EXPECT_EQ(a.next_draft_confidences, b.next_draft_confidences);
  EXPECT_EQ(std::memcmp(&a.error, &b.error, sizeof(a.error)), 0);
}

// The step on the GPU against the CPU twin; and launched again without the
// small steps' stash of z (verify_internal::SetSliceStash), which must give
// the same bytes (a step too large for the stash gives them trivially).
void ExpectStepParity(HostVerifyStep& step, const std::string& name) {
  SCOPED_TRACE(name);
  const int32_t stride = 3;
  const RunResult cpu = RunOnCpu(step, stride);
  ASSERT_TRUE(cpu.status.ok()) << cpu.status;
  const RunResult gpu = RunOnGpu(step, stride);
  ASSERT_TRUE(gpu.status.ok()) << gpu.status;
  verify_internal::SetSliceStash(false);
  const RunResult unstashed = RunOnGpu(step, stride);
  verify_internal::SetSliceStash(true);
  ASSERT_TRUE(unstashed.status.ok()) << unstashed.status;
  {
    SCOPED_TRACE("without the stash");
    ExpectSameOutputs(unstashed.out, gpu.out);
  }
  const VerifyInputs in = step.Inputs();

  std::vector<bool> request_clean(in.num_requests, true);
  int mismatches = 0;
  for (int32_t row = 0; row < in.total_q; ++row) {
    EXPECT_EQ(gpu.out.row_to_req[row], cpu.out.row_to_req[row]) << "row " << row;
    EXPECT_EQ(gpu.out.local_step[row], cpu.out.local_step[row]) << "row " << row;
    EXPECT_EQ(gpu.out.is_verify[row], cpu.out.is_verify[row]) << "row " << row;
    // After a row that was a rounding tie, whether a later row of the request
    // draws at all follows that tie; its own accept decision does not.
    const int32_t req = cpu.out.row_to_req[row];
    const bool after_tie = req >= 0 && !request_clean[req];
    const bool same = gpu.out.raw_accept[row] == cpu.out.raw_accept[row] &&
                      (after_tie ||
                       gpu.out.candidate_token_ids[row] == cpu.out.candidate_token_ids[row]);
    if (same && after_tie) continue;
    if (!same) {
      ++mismatches;
      if (req >= 0) request_clean[req] = false;
      const double margin = DecisionMargin(step, row);
      EXPECT_LT(margin, kRoundingTolerance)
          << "row " << row << ": gpu (" << int{gpu.out.raw_accept[row]} << ", "
          << gpu.out.candidate_token_ids[row] << ") cpu (" << int{cpu.out.raw_accept[row]}
          << ", " << cpu.out.candidate_token_ids[row] << ") is not a rounding tie";
      continue;
    }
    const float a = gpu.out.token_logprobs[row], b = cpu.out.token_logprobs[row];
    EXPECT_TRUE(std::memcmp(&a, &b, sizeof(float)) == 0 || std::fabs(a - b) <= 1e-6f * std::fabs(b))
        << "row " << row << " logprob gpu " << a << " cpu " << b;
  }
  // Rows decided alike give requests decided alike.
  bool all_clean = true;
  for (int32_t r = 0; r < in.num_requests; ++r) {
    if (!request_clean[r]) {
      all_clean = false;
      continue;
    }
    EXPECT_EQ(gpu.out.last_valid_offset[r], cpu.out.last_valid_offset[r]) << "request " << r;
    EXPECT_EQ(gpu.out.sampled_token_ids[r], cpu.out.sampled_token_ids[r]) << "request " << r;
    EXPECT_EQ(gpu.out.emitted_stop_token[r], cpu.out.emitted_stop_token[r]) << "request " << r;
    for (int32_t k = 0; k < in.seqlen_q[r]; ++k) {
      const int32_t row = in.first_token_positions[r] + k;
      EXPECT_EQ(gpu.out.accept[row], cpu.out.accept[row]) << "row " << row;
      EXPECT_EQ(gpu.out.is_final[row], cpu.out.is_final[row]) << "row " << row;
      EXPECT_EQ(gpu.out.verified_token_ids[row], cpu.out.verified_token_ids[row]) << "row " << row;
    }
    for (int32_t c = 0; c < stride; ++c) {
      EXPECT_EQ(gpu.out.next_draft_confidences[r * stride + c],
                cpu.out.next_draft_confidences[r * stride + c]);
    }
  }
  if (all_clean) {
    EXPECT_EQ(gpu.out.num_generated_tokens, cpu.out.num_generated_tokens);
    EXPECT_EQ(gpu.out.num_verified_tokens, cpu.out.num_verified_tokens);
  }
  // Rounding ties are rare: a handful at most.
  EXPECT_LE(mismatches, std::max(2, in.total_q / 200));
  std::printf("%s: %d rows, %d decisions differ (all within rounding)\n", name.c_str(),
              in.total_q, mismatches);
}

void ExpectParity(const StepShape& shape) {
  HostVerifyStep step = RandomStep(shape);
  ExpectStepParity(step, shape.name);
}

TEST(VerifySamplerGpuTest, ParityOnRandomSteps) {
  ExpectParity({.name = "small vocab, every feature", .vocab = 1000, .requests = 64, .salt = 1});
  ExpectParity({.name = "odd vocab", .vocab = 1003, .requests = 16, .salt = 2});
  ExpectParity({.name = "tiny vocab", .vocab = 7, .requests = 40, .nextn = 3, .salt = 3});
  ExpectParity({.name = "sparse drafts", .vocab = 4096, .requests = 24, .sparse = true, .salt = 4});
  ExpectParity({.name = "bfloat16 logits", .vocab = 2048, .requests = 24, .bf16 = true, .salt = 5});
  ExpectParity({.name = "32000 plain", .vocab = 32000, .requests = 40, .features = false, .salt = 6});
  ExpectParity({.name = "32000 features", .vocab = 32000, .requests = 24, .salt = 7});
  ExpectParity({.name = "151936 one request", .vocab = 151936, .requests = 1, .salt = 8});
  ExpectParity({.name = "151936 batch", .vocab = 151936, .requests = 12, .salt = 9});
  ExpectParity({.name = "many rows", .vocab = 512, .requests = 400, .salt = 10});
  // Logits so spread that about half of the residual's batches lie wholly
  // more than 29 below the row maximum (the kernel skips those).
  ExpectParity({.name = "spread logits", .vocab = 32000, .requests = 12, .features = false,
                .logit_sigma = 30.0f, .salt = 11});
  // Steps of at most one CTA per SM (the small-step build, whose CTAs keep
  // their slices of z in shared memory when they fit).
  for (uint64_t salt = 31; salt < 39; ++salt) {
    ExpectParity({.name = absl::StrCat("small step ", salt), .vocab = 151936, .requests = 1,
                  .salt = salt});
    ExpectParity({.name = absl::StrCat("small step, 2 requests ", salt), .vocab = 128256,
                  .requests = 2, .nextn = 3, .salt = salt});
    ExpectParity({.name = absl::StrCat("small step, 32000 ", salt), .vocab = 32000,
                  .requests = 2, .nextn = 2, .salt = salt});
  }
  ExpectParity({.name = "small step, sparse", .vocab = 151936, .requests = 1, .sparse = true,
                .salt = 40});
  ExpectParity({.name = "small step, bfloat16", .vocab = 151936, .requests = 1, .bf16 = true,
                .salt = 41});
  ExpectParity({.name = "small step, odd vocab", .vocab = 100003, .requests = 1, .salt = 42});
  ExpectParity({.name = "small step, spread logits", .vocab = 151936, .requests = 1,
                .features = false, .logit_sigma = 30.0f, .salt = 43});
}

// Top-p's kept set on rows of every shape the selection meets: spread
// (N(0, 3^2), its threshold bins fit the lists), flat (N(0, 1) and constant
// rows, whose candidates do not fit and take the selection over the row),
// ties at the threshold (values on a grid of 1/4), Zipf-like rows as
// language models give, one dominant id (a kept set of one), each alone and
// with temperature, min-p, top-k and a bitmask, at vocabularies that are and
// are not whole tiles. Every request is one row: plain decode rows (a
// sample from q races the kept tiles' masses) and golden rows at the ids
// around the boundary of the kept set (their logprob is log q of that id:
// -inf outside the set, and the kept mass inside).
TEST(VerifySamplerGpuTest, TopPKeptSetsOnRowsOfEveryShape) {
  struct RowShape {
    const char* name;
    std::function<float(std::mt19937_64&, int32_t)> logit;
  };
  const std::vector<RowShape> shapes = {
      {"normal 3", [](std::mt19937_64& g, int32_t) { return std::normal_distribution<float>(0, 3)(g); }},
      {"normal 1", [](std::mt19937_64& g, int32_t) { return std::normal_distribution<float>(0, 1)(g); }},
      {"grid 1/4",
       [](std::mt19937_64& g, int32_t) {
         return std::round(4.0f * std::normal_distribution<float>(0, 3)(g)) / 4.0f;
       }},
      {"zipf",
       [](std::mt19937_64& g, int32_t id) {
         return -1.1f * std::log(1.0f + static_cast<float>((id * 7919) % 100003)) +
                std::normal_distribution<float>(0, 0.1f)(g);
       }},
      {"one dominant", [](std::mt19937_64& g, int32_t id) {
         return id == 77 ? 40.0f : std::normal_distribution<float>(0, 2)(g);
       }},
      {"constant", [](std::mt19937_64&, int32_t) { return 1.5f; }},
  };
  struct Filters {
    const char* name;
    float temperature, top_p, min_p;
    int32_t top_k;
    bool mask;
  };
  const std::vector<Filters> filters = {
      {"top_p 0.9", 1.0f, 0.9f, 0.0f, 0, false},
      {"top_p 0.95", 1.0f, 0.95f, 0.0f, 0, false},
      {"top_p 0.5, T 0.7", 0.7f, 0.5f, 0.0f, 0, false},
      {"top_p 0.999", 1.0f, 0.999f, 0.0f, 0, false},
      {"top_p 0.001", 1.0f, 0.001f, 0.0f, 0, false},
      {"top_p 0.95, min_p 0.05", 1.0f, 0.95f, 0.05f, 0, false},
      {"top_p 0.95, top_k 50", 1.0f, 0.95f, 0.0f, 50, false},
      {"top_p 0.8, top_k 20000", 1.0f, 0.8f, 0.0f, 20000, false},
      {"top_p 0.9, bitmask", 1.0f, 0.9f, 0.0f, 0, true},
  };
  for (const int32_t vocab : {151936, 32000, 5003}) {
    for (size_t f = 0; f < filters.size(); ++f) {
      HostVerifyStep step(vocab, SamplerConfig{.nextn = 1});
      std::mt19937_64 gen(1000 + vocab + f);
      for (size_t s = 0; s < shapes.size(); ++s) {
        // The shape's rows also alone: a step of 8 rows takes at most one
        // CTA per SM (the small-step build, with its stash of z).
        HostVerifyStep small_step(vocab, SamplerConfig{.nextn = 1});
        std::vector<float> row(vocab);
        for (int32_t id = 0; id < vocab; ++id) row[id] = shapes[s].logit(gen, id);
        VerifyRequest r;
        r.logits = {row};
        r.temperature = filters[f].temperature;
        r.top_p = filters[f].top_p;
        r.min_p = filters[f].min_p;
        r.top_k = filters[f].top_k;
        std::vector<int32_t> allowed;
        if (filters[f].mask) {
          for (int32_t id = 0; id < vocab; ++id) {
            if (gen() % 3 == 0) allowed.push_back(id);
          }
          r.bitmasks.push_back({0, BitmaskAllowing(vocab, allowed)});
        }
        // Plain decode rows, each drawing its own numbers.
        for (int copy = 0; copy < 4; ++copy) {
          r.seed = gen();
          r.position = static_cast<int64_t>(gen() % 100000);
          step.Add(r);
          small_step.Add(r);
        }
        // Golden rows at the ids ranked around the kept set's size, found
        // in double precision (ties ranked by id).
        std::vector<int32_t> order(vocab);
        for (int32_t id = 0; id < vocab; ++id) order[id] = id;
        const auto allowed_id = [&](int32_t id) {
          return !filters[f].mask || std::binary_search(allowed.begin(), allowed.end(), id);
        };
        std::stable_sort(order.begin(), order.end(),
                         [&](int32_t a, int32_t b) { return row[a] > row[b]; });
        std::vector<int32_t> ranked;
        for (const int32_t id : order) {
          if (allowed_id(id)) ranked.push_back(id);
        }
        const double m = row[ranked[0]] / filters[f].temperature;
        double total = 0;
        for (const int32_t id : ranked) total += std::exp(row[id] / filters[f].temperature - m);
        double above = 0;
        size_t kept = 0;
        while (kept < ranked.size() && above < filters[f].top_p * total) {
          above += std::exp(row[ranked[kept]] / filters[f].temperature - m);
          ++kept;
        }
        for (const size_t at : {kept - 1, kept, kept + 1, size_t{0}}) {
          if (at >= ranked.size()) continue;
          r.golden_token_ids = {ranked[at]};
          r.seed = gen();
          step.Add(r);
          small_step.Add(r);
        }
        r.golden_token_ids.clear();
        ExpectStepParity(small_step,
                         absl::StrCat("V ", vocab, ", ", filters[f].name, ", ", shapes[s].name));
      }
      ExpectStepParity(step, absl::StrCat("V ", vocab, ", ", filters[f].name));
    }
  }
}

// Simulated acceptance (--simulate-acceptance): the same decisions as the CPU
// twin, with greedy and sampled rows, golden ids, cutoffs and stops, at the
// edge rates and between them.
TEST(VerifySamplerGpuTest, ParityWithSimulatedAcceptance) {
  ExpectParity({.name = "simulated 0.7, every feature", .vocab = 1000, .requests = 64,
                .simulated_acceptance = 0.7f, .salt = 21});
  ExpectParity({.name = "simulated 0.3, sparse", .vocab = 4096, .requests = 24, .sparse = true,
                .simulated_acceptance = 0.3f, .salt = 22});
  ExpectParity({.name = "simulated 0", .vocab = 2048, .requests = 32,
                .simulated_acceptance = 0.0f, .salt = 23});
  ExpectParity({.name = "simulated 1, 32000", .vocab = 32000, .requests = 24,
                .simulated_acceptance = 1.0f, .salt = 24});
  ExpectParity({.name = "simulated 0.9, many rows", .vocab = 512, .requests = 400,
                .simulated_acceptance = 0.9f, .salt = 25});
}

TEST(VerifySamplerGpuTest, SameTokensInAnyBatch) {
  // Alone, a request's row is split over up to 16 CTAs; in a batch of 300,
  // over fewer. Fixed-point sums and order-free races make that invisible.
  HostVerifyStep batch = RandomStep({.vocab = 32000, .requests = 300, .features = false, .salt = 11});
  const RunResult all = RunOnGpu(batch, 0);
  ASSERT_TRUE(all.status.ok());
  for (const int32_t pick : {0, 137, 299}) {
    // Rebuild request `pick` alone from the batch's arrays.
    const VerifyInputs in = batch.Inputs();
    VerifyRequest r;
    const int32_t ftp = in.first_token_positions[pick];
    const int32_t v = in.vocab_size;
    for (int32_t k = 0; k < in.seqlen_q[pick]; ++k) {
      r.logits.push_back(std::vector<float>(batch.logits().begin() + static_cast<size_t>(ftp + k) * v,
                                            batch.logits().begin() + static_cast<size_t>(ftp + k + 1) * v));
    }
    for (int32_t k = 0; k + 1 < in.seqlen_q[pick]; ++k) {
      const int32_t j = ftp - pick + k;
      r.draft_token_ids.push_back(in.draft_token_ids[j]);
      r.draft_probs.push_back(std::vector<float>(batch.draft_probs().begin() + static_cast<size_t>(j) * v,
                                                 batch.draft_probs().begin() + static_cast<size_t>(j + 1) * v));
    }
    r.seed = in.seeds[pick];
    r.position = in.positions[pick];
    HostVerifyStep single(v, SamplerConfig{.nextn = 5});
    single.Add(r);
    const RunResult one = RunOnGpu(single, 0);
    ASSERT_TRUE(one.status.ok());
    for (int32_t k = 0; k < in.seqlen_q[pick]; ++k) {
      EXPECT_EQ(one.out.candidate_token_ids[k], all.out.candidate_token_ids[ftp + k]);
      EXPECT_EQ(one.out.raw_accept[k], all.out.raw_accept[ftp + k]);
      EXPECT_EQ(one.out.token_logprobs[k], all.out.token_logprobs[ftp + k]);
    }
    EXPECT_EQ(one.out.sampled_token_ids[0], all.out.sampled_token_ids[pick]);
  }
}

TEST(VerifySamplerGpuTest, ErrorsMatchTheCpuTwin) {
  const StepShape shape{.vocab = 300, .requests = 6, .features = false, .salt = 12};
  const auto check = [&](const std::string& what, auto corrupt) {
    HostVerifyStep step = RandomStep(shape);
    corrupt(step);
    const RunResult cpu = RunOnCpu(step, 0);
    const RunResult gpu = RunOnGpu(step, 0);
    ASSERT_FALSE(cpu.status.ok()) << what;
    EXPECT_EQ(gpu.status, cpu.status) << what;
  };
  check("nan logit", [](HostVerifyStep& s) { s.logits()[3 * 300 + 17] = NAN; });
  check("inf logit", [](HostVerifyStep& s) { s.logits()[5 * 300 + 299] = INFINITY; });
  check("two errors", [](HostVerifyStep& s) {
    s.logits()[7 * 300 + 1] = NAN;
    s.draft_token_ids()[2] = 300;
  });
  check("golden", [](HostVerifyStep& s) { s.golden_token_ids()[4] = 1000; });
  check("empty request", [](HostVerifyStep& s) { s.seqlen_q()[2] = 0; });
  check("layout", [](HostVerifyStep& s) { s.first_token_positions()[3] += 1; });
  check("temperature", [](HostVerifyStep& s) { s.temperatures()[1] = NAN; });
  check("draft prob", [](HostVerifyStep& s) {
    for (float& p : s.draft_probs()) p = -1.0f;  // every residual reads a bad p
  });
}

// Rows after a rejected row draw nothing and read no p, on the device as on
// the CPU: a NaN in such a row's p passes; in the final row's p it fails.
TEST(VerifySamplerGpuTest, RowsAfterARejectionReadNoDraftProbabilities) {
  HostVerifyStep step = RandomStep({.vocab = 2000, .requests = 40, .features = false, .salt = 14});
  const RunResult clean = RunOnCpu(step, 0);
  ASSERT_TRUE(clean.status.ok());
  const VerifyInputs in = step.Inputs();
  int dead = 0, alive = 0;
  for (int32_t r = 0; r < in.num_requests; ++r) {
    const int32_t ftp = in.first_token_positions[r];
    const int32_t final_k = clean.out.last_valid_offset[r];
    if (final_k + 1 >= in.seqlen_q[r] - 1) continue;  // no verify row after the final one
    // The row after the final row: never emitted, its p never read.
    const int32_t j = ftp - r + final_k + 1;
    step.draft_probs()[static_cast<size_t>(j) * in.vocab_size + 5] = NAN;
    EXPECT_EQ(clean.out.candidate_token_ids[ftp + final_k + 1] < 0,
              !clean.out.raw_accept[ftp + final_k + 1]);
    ++dead;
  }
  ASSERT_GT(dead, 10);
  const RunResult cpu = RunOnCpu(step, 0);
  const RunResult gpu = RunOnGpu(step, 0);
  ASSERT_TRUE(cpu.status.ok()) << cpu.status;
  ASSERT_TRUE(gpu.status.ok()) << gpu.status;
  EXPECT_EQ(gpu.out.candidate_token_ids, cpu.out.candidate_token_ids);
  EXPECT_EQ(gpu.out.sampled_token_ids, cpu.out.sampled_token_ids);
  // Bad values in a final rejected row's p are read, and the smallest bad
  // id reported, by both: ids in different lanes and groups of one tile
  // (the whole tile's batch is scanned again for it) and one past it.
  for (int32_t r = 0; r < in.num_requests && alive == 0; ++r) {
    const int32_t k = clean.out.last_valid_offset[r];
    const int32_t row = in.first_token_positions[r] + k;
    if (!clean.out.is_verify[row]) continue;
    float* p = step.draft_probs().data() + static_cast<size_t>(row - r) * in.vocab_size;
    p[5] = NAN;
    p[900] = INFINITY;
    p[2] = -1.0f;
    p[1500] = -2.0f;
    ++alive;
  }
  ASSERT_EQ(alive, 1);
  const RunResult cpu_bad = RunOnCpu(step, 0);
  const RunResult gpu_bad = RunOnGpu(step, 0);
  ASSERT_FALSE(cpu_bad.status.ok());
  EXPECT_EQ(gpu_bad.status, cpu_bad.status);
}

TEST(VerifySamplerGpuTest, WorkspaceIsReadyAgainAfterEveryLaunch) {
  HostVerifyStep good = RandomStep({.vocab = 500, .requests = 10, .salt = 13});
  HostVerifyStep bad = RandomStep({.vocab = 500, .requests = 10, .salt = 13});
  bad.logits()[10] = NAN;
  auto d_good = DeviceVerifyStep::Create(good);
  auto d_bad = DeviceVerifyStep::Create(bad);
  ASSERT_TRUE(d_good.ok() && d_bad.ok());
  auto out = DeviceVerifyOutputs::Create((*d_good)->Inputs());
  ASSERT_TRUE(out.ok());
  const RunResult cpu = RunOnCpu(good, 0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(InvokeVerifySample((*d_bad)->Inputs(), (*out)->View(), nullptr).ok());
    EXPECT_FALSE(ReadVerifyError(*(*out)->View(), nullptr).ok());
    ASSERT_TRUE(InvokeVerifySample((*d_good)->Inputs(), (*out)->View(), nullptr).ok());
    EXPECT_TRUE(ReadVerifyError(*(*out)->View(), nullptr).ok());
    HostVerifyOutputs host(good.Inputs());
    ASSERT_TRUE((*out)->CopyTo(&host).ok());
    EXPECT_EQ(host.candidate_token_ids, cpu.out.candidate_token_ids);
    EXPECT_EQ(host.num_generated_tokens, cpu.out.num_generated_tokens);
  }
}

}  // namespace
}  // namespace verdict
