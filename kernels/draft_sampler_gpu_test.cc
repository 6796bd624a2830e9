// Parity of the CUDA draft sampler with its CPU twin on random rows.
//
// Both backends share their arithmetic (kernels/sampling_math.h,
// kernels/draft_sampler_internal.h) and take every sum in fixed point, so the
// tokens, p and the signals must agree bit for bit, on every row, for every
// parameter combination, and on both of the kernel's threshold paths (the
// near-the-top set in shared memory, and the whole row when that set is too
// large).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/draft_sampler.h"

namespace verdict {
namespace {

// ---------------------------------------------------------------- inputs

enum class LogitShape {
  kPeaked,  // normal(0, 3): a few ids carry most of the mass
  kFlat,    // normal(0, 0.05): every id within a few hundredths of the max
  kTied,    // multiples of 0.5: many equal values at every threshold
};

struct RowParams {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p = 0.0f;
};

struct Batch {
  int32_t vocab = 0;
  std::vector<float> logits;
  std::vector<float> temperatures;
  std::vector<int32_t> top_ks;
  std::vector<float> top_ps;
  std::vector<uint64_t> seeds;
  std::vector<int64_t> positions;
  std::vector<float> min_ps;

  int32_t rows() const { return static_cast<int32_t>(temperatures.size()); }
  float& logit(int32_t row, int32_t id) { return logits[static_cast<size_t>(row) * vocab + id]; }

  DraftSampleInputs HostInputs() const {
    return DraftSampleInputs{rows(),         vocab,          logits.data(), temperatures.data(),
                             top_ks.data(), top_ps.data(), seeds.data(),  positions.data(),
                             min_ps.data()};
  }
};

// Every combination the sampler distinguishes: greedy; temperature alone;
// top-k (1, small, large, at and past the vocabulary: off); top-p (tight to
// nearly off); both.
std::vector<RowParams> ParameterCombinations(int32_t vocab) {
  const std::vector<float> temperatures = {0.5f, 0.8f, 1.0f, 1.3f};
  const std::vector<int32_t> top_ks = {1, 2, 20, 50, 1000, vocab - 1, vocab, vocab + 7};
  const std::vector<float> top_ps = {0.3f, 0.8f, 0.9f, 0.95f, 0.999f};
  std::vector<RowParams> all;
  all.push_back({0.0f, 0, 1.0f});
  all.push_back({0.0f, 20, 0.9f});  // greedy ignores top-k and top-p
  for (const float t : temperatures) {
    all.push_back({t, 0, 1.0f});
    for (const int32_t k : top_ks) all.push_back({t, k, 1.0f});
    for (const float p : top_ps) all.push_back({t, 0, p});
    for (const int32_t k : top_ks) {
      for (const float p : top_ps) all.push_back({t, k, p});
    }
    // Min-p alone, with top-k (either set the smaller) and with top-p.
    for (const float m : {0.01f, 0.05f, 0.3f, 1.0f}) {
      all.push_back({t, 0, 1.0f, m});
      all.push_back({t, 20, 1.0f, m});
      all.push_back({t, 1000, 1.0f, m});
      all.push_back({t, 0, 0.9f, m});
      all.push_back({t, 50, 0.95f, m});
    }
  }
  return all;
}

Batch RandomBatch(int32_t vocab, int32_t rows, LogitShape shape, uint64_t salt,
                  const std::vector<RowParams>& params) {
  std::mt19937_64 gen(salt);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Batch b;
  b.vocab = vocab;
  b.logits.resize(static_cast<size_t>(rows) * vocab);
  for (float& x : b.logits) {
    const float n = normal(gen);
    switch (shape) {
      case LogitShape::kPeaked:
        x = 3.0f * n;
        break;
      case LogitShape::kFlat:
        x = 0.05f * n;
        break;
      case LogitShape::kTied:
        x = 0.5f * std::round(4.0f * n);
        break;
    }
  }
  // Start the combinations at a different place in every batch, so that
  // small batches still see all of them across the test.
  const size_t start = static_cast<size_t>(gen() % params.size());
  for (int32_t r = 0; r < rows; ++r) {
    const RowParams& p = params[(start + r) % params.size()];
    b.temperatures.push_back(p.temperature);
    b.top_ks.push_back(p.top_k);
    b.top_ps.push_back(p.top_p);
    b.min_ps.push_back(p.min_p);
    b.seeds.push_back(gen());
    b.positions.push_back(static_cast<int64_t>(gen() % 1000000));
  }
  return b;
}

// ---------------------------------------------------------------- device

void CheckCuda(cudaError_t err, const char* what) {
  ASSERT_EQ(err, cudaSuccess) << what << ": " << cudaGetErrorString(err);
}

// An owning device allocation of `count` T, `offset` elements into a larger
// one (so that a nonzero offset gives a row start that is not 16-byte aligned).
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count, size_t offset = 0) : count_(count), offset_(offset) {
    CheckCuda(cudaMalloc(&base_, (count + offset + 1) * sizeof(T)), "cudaMalloc");
  }
  DeviceArray(const std::vector<T>& host, size_t offset = 0) : DeviceArray(host.size(), offset) {
    CheckCuda(cudaMemcpy(get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              "upload");
  }
  ~DeviceArray() { cudaFree(base_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return static_cast<T*>(base_) + offset_; }
  std::vector<T> Download() const {
    std::vector<T> host(count_);
    CheckCuda(cudaMemcpy(host.data(), get(), count_ * sizeof(T), cudaMemcpyDeviceToHost),
              "download");
    return host;
  }
  // All bits set (NaN in float): an element the kernel does not write shows.
  void Poison() { CheckCuda(cudaMemset(get(), 0xFF, count_ * sizeof(T)), "poison"); }

 private:
  void* base_ = nullptr;
  size_t count_;
  size_t offset_;
};

// The workspace of one stream, zeroed once.
class Workspace {
 public:
  Workspace() {
    CheckCuda(cudaMalloc(&ptr_, kDraftSampleWorkspaceBytes), "cudaMalloc");
    CheckCuda(cudaMemset(ptr_, 0, kDraftSampleWorkspaceBytes), "cudaMemset");
  }
  ~Workspace() { cudaFree(ptr_); }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

// ---------------------------------------------------------------- runs

struct Result {
  absl::Status status;
  std::vector<int32_t> tokens;
  std::vector<float> probs;
  std::vector<float> signals;
};

Result RunOnCpu(const Batch& b) {
  Result r;
  r.tokens.assign(b.rows(), -1);
  r.probs.assign(static_cast<size_t>(b.rows()) * b.vocab, -1.0f);
  r.signals.assign(b.rows(), -1.0f);
  DraftSampleOutputs out{r.tokens.data(), r.probs.data(), r.signals.data()};
  r.status = DraftSampleCpu(b.HostInputs(), &out);
  return r;
}

// `offset` shifts the device logits and p by that many floats;
// `max_ctas_per_row` and `gates` are the launcher's (1: one CTA per row).
Result RunOnGpu(const Batch& b, Workspace& workspace, size_t offset = 0,
                int max_ctas_per_row = kDraftMaxCtasPerRow, DraftTopPGates gates = {}) {
  const size_t cells = static_cast<size_t>(b.rows()) * b.vocab;
  DeviceArray<float> logits(b.logits, offset);
  DeviceArray<float> temperatures(b.temperatures);
  DeviceArray<int32_t> top_ks(b.top_ks);
  DeviceArray<float> top_ps(b.top_ps);
  DeviceArray<float> min_ps(b.min_ps);
  DeviceArray<uint64_t> seeds(b.seeds);
  DeviceArray<int64_t> positions(b.positions);
  DeviceArray<int32_t> tokens(b.rows());
  DeviceArray<float> probs(cells, offset);
  DeviceArray<float> signals(b.rows());
  DeviceArray<DraftErrorRecord> error(1);
  tokens.Poison();
  probs.Poison();
  signals.Poison();
  error.Poison();  // the launch must overwrite it, also when every row is fine

  const DraftSampleInputs in{b.rows(),      b.vocab,      logits.get(), temperatures.get(),
                             top_ks.get(), top_ps.get(), seeds.get(),  positions.get(),
                             min_ps.get()};
  DraftSampleOutputs out{tokens.get(), probs.get(), signals.get(), error.get()};
  Result r;
  r.status = DraftSampleCuda(in, &out, workspace.get(), nullptr, max_ctas_per_row, gates);
  if (r.status.ok()) r.status = ReadDraftSampleError(out, nullptr);
  CheckCuda(cudaDeviceSynchronize(), "kernel");
  r.tokens = tokens.Download();
  r.probs = probs.Download();
  r.signals = signals.Download();
  return r;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

std::string Describe(const Batch& b, int32_t row) {
  char text[192];
  std::snprintf(text, sizeof(text), "row %d (temperature %g, top_k %d, top_p %g, min_p %g)", row,
                b.temperatures[row], b.top_ks[row], b.top_ps[row], b.min_ps[row]);
  return text;
}

// Tokens, p and signals bit for bit; at most one failure message per row.
void ExpectParity(const Batch& b, const std::string& name, size_t offset = 0,
                  int max_ctas_per_row = kDraftMaxCtasPerRow, DraftTopPGates gates = {}) {
  SCOPED_TRACE(name);
  const Result cpu = RunOnCpu(b);
  ASSERT_TRUE(cpu.status.ok()) << cpu.status;
  Workspace workspace;
  const Result gpu = RunOnGpu(b, workspace, offset, max_ctas_per_row, gates);
  ASSERT_TRUE(gpu.status.ok()) << gpu.status;
  int bad_rows = 0;
  for (int32_t row = 0; row < b.rows(); ++row) {
    EXPECT_EQ(gpu.tokens[row], cpu.tokens[row]) << Describe(b, row);
    EXPECT_TRUE(SameBits(gpu.signals[row], cpu.signals[row]))
        << Describe(b, row) << ": signal gpu " << gpu.signals[row] << " cpu " << cpu.signals[row];
    for (int32_t id = 0; id < b.vocab; ++id) {
      const size_t i = static_cast<size_t>(row) * b.vocab + id;
      if (!SameBits(gpu.probs[i], cpu.probs[i])) {
        ADD_FAILURE() << Describe(b, row) << ": p of id " << id << " gpu " << gpu.probs[i]
                      << " cpu " << cpu.probs[i];
        ++bad_rows;
        break;
      }
    }
  }
  EXPECT_EQ(bad_rows, 0);
  std::printf("%s: %d rows of %d ids agree\n", name.c_str(), b.rows(), b.vocab);
}

const char* ShapeName(LogitShape shape) {
  return shape == LogitShape::kPeaked ? "peaked" : shape == LogitShape::kFlat ? "flat" : "tied";
}

void ExpectParityForShapes(int32_t vocab, int32_t rows, uint64_t salt) {
  const std::vector<RowParams> params = ParameterCombinations(vocab);
  for (const LogitShape shape : {LogitShape::kPeaked, LogitShape::kFlat, LogitShape::kTied}) {
    const Batch b = RandomBatch(vocab, rows, shape, salt++, params);
    ExpectParity(b, std::to_string(vocab) + " " + ShapeName(shape));
  }
}

// ---------------------------------------------------------------- tests

TEST(DraftSamplerGpuTest, SmallAndOddVocabularies) {
  // One row per combination.
  uint64_t salt = 1;
  for (const int32_t vocab : {1, 2, 3, 7, 1000, 1003, 4097}) {
    ExpectParityForShapes(vocab, static_cast<int32_t>(ParameterCombinations(vocab).size()), salt);
    salt += 10;
  }
}

TEST(DraftSamplerGpuTest, LargeVocabularies) {
  uint64_t salt = 100;
  for (const int32_t vocab : {32000, 151936, 152063}) {
    ExpectParityForShapes(vocab, 64, salt);
    salt += 10;
  }
}

// The cluster sizes the H200 holds one of per row at once, largest first.
std::vector<int> ClusterSizes() {
  std::vector<int> sizes;
  for (const int ctas : {8, 4, 2}) {
    if (DraftSampleClusters(ctas) > 0) sizes.push_back(ctas);
  }
  return sizes;
}

// The launcher takes the largest cluster of which every row gets one at
// once, within the caller's limit, and one CTA per row past clusters of 2.
TEST(DraftSamplerGpuTest, ClusterSizeFollowsTheRows) {
  const int eights = DraftSampleClusters(8);
  const int fours = DraftSampleClusters(4);
  const int twos = DraftSampleClusters(2);
  ASSERT_GE(eights, 8) << "an H200 holds at least 8 clusters of 8 CTAs of the split kernel";
  // Smaller clusters pack more rows (a cluster of 8 needs 8 SMs of one GPC).
  EXPECT_GT(fours, eights);
  EXPECT_GT(twos, fours);
  EXPECT_EQ(DraftSampleClusters(1), 0);
  EXPECT_EQ(DraftSampleClusters(3), 0);
  EXPECT_EQ(DraftSampleClusters(16), 0);
  EXPECT_EQ(DraftSampleCtasPerRow(0), 8);
  EXPECT_EQ(DraftSampleCtasPerRow(1), 8);
  EXPECT_EQ(DraftSampleCtasPerRow(eights), 8);
  EXPECT_EQ(DraftSampleCtasPerRow(eights + 1), 4);
  EXPECT_EQ(DraftSampleCtasPerRow(fours), 4);
  EXPECT_EQ(DraftSampleCtasPerRow(fours + 1), 2);
  EXPECT_EQ(DraftSampleCtasPerRow(twos), 2);
  EXPECT_EQ(DraftSampleCtasPerRow(twos + 1), 1);
  EXPECT_EQ(DraftSampleCtasPerRow(1, 1), 1);
  EXPECT_EQ(DraftSampleCtasPerRow(1, 4), 4);
  EXPECT_EQ(DraftSampleCtasPerRow(1, 3), 2);
  EXPECT_EQ(DraftSampleCtasPerRow(fours, 8), 4);
}

// Launches of few rows spread each row over a cluster of every size.
// Vocabularies smaller than a cluster leave some CTAs an empty slice. Each
// batch also runs with one CTA per row, and the row counts straddle each
// size's limit (one row more takes the next smaller size).
TEST(DraftSamplerGpuTest, FewRowsSplitOverClusters) {
  const std::vector<RowParams> params = {
      {0.0f, 0, 1.0f},  {0.5f, 0, 1.0f}, {1.0f, 0, 1.0f},  {1.3f, 0, 1.0f},
      {0.0f, 20, 0.9f}, {0.8f, 0, 1.0f}, {1.0f, 50, 1.0f}, {0.7f, 0, 0.9f},
  };
  uint64_t salt = 800;
  ASSERT_EQ(ClusterSizes().size(), 3u);
  for (const int ctas : ClusterSizes()) {
    const int clusters = DraftSampleClusters(ctas);
    for (const int32_t vocab : {1, 7, 33, 1003, 32000, 128256, 151936}) {
      for (const int32_t rows : {1, 4, clusters, clusters + 1}) {
        if (rows <= clusters) {
          ASSERT_EQ(DraftSampleCtasPerRow(rows, ctas), ctas);
        } else {
          ASSERT_LT(DraftSampleCtasPerRow(rows, ctas), ctas);
        }
        for (const LogitShape shape :
             {LogitShape::kPeaked, LogitShape::kFlat, LogitShape::kTied}) {
          const Batch b = RandomBatch(vocab, rows, shape, salt++, params);
          const std::string name = std::to_string(rows) + " rows, clusters of " +
                                   std::to_string(ctas) + ", " + std::to_string(vocab) + " " +
                                   ShapeName(shape);
          ExpectParity(b, name, 0, ctas);
          if (ctas == 8) ExpectParity(b, name + ", one CTA per row", 0, 1);
        }
      }
    }
    // Row starts off the 16-byte grid: scalar loads and stores.
    ExpectParity(RandomBatch(128256, 3, LogitShape::kPeaked, salt++, params),
                 "3 offset rows, clusters of " + std::to_string(ctas), 1, ctas);
    ExpectParity(RandomBatch(4097, 5, LogitShape::kTied, salt++, params),
                 "5 offset tied rows, clusters of " + std::to_string(ctas), 3, ctas);
  }
}

// Every parameter combination on split rows of every cluster size: top-k,
// top-p and min-p thresholds from the slices' candidates and the cluster's
// histograms.
TEST(DraftSamplerGpuTest, FilteredRowsSplitOverClusters) {
  ASSERT_EQ(ClusterSizes().size(), 3u);
  uint64_t salt = 1000;
  for (const int ctas : ClusterSizes()) {
    const size_t batch_rows = static_cast<size_t>(DraftSampleClusters(ctas));
    for (const int32_t vocab : {1003, 32000, 128256, 151936}) {
      const std::vector<RowParams> all = ParameterCombinations(vocab);
      for (const LogitShape shape :
           {LogitShape::kPeaked, LogitShape::kFlat, LogitShape::kTied}) {
        for (size_t first = 0; first < all.size(); first += batch_rows) {
          const size_t last = std::min(all.size(), first + batch_rows);
          const std::vector<RowParams> params(all.begin() + first, all.begin() + last);
          const int32_t rows = static_cast<int32_t>(params.size());
          ASSERT_EQ(DraftSampleCtasPerRow(rows, ctas), ctas);
          const Batch b = RandomBatch(vocab, rows, shape, salt++, params);
          ExpectParity(b,
                       std::to_string(rows) + " rows in clusters of " + std::to_string(ctas) +
                           " from combination " + std::to_string(first) + ", " +
                           std::to_string(vocab) + " " + ShapeName(shape),
                       0, ctas);
        }
      }
    }
  }
}

TEST(DraftSamplerGpuTest, ManyRows) {
  const Batch b = RandomBatch(4096, 400, LogitShape::kPeaked, 200, ParameterCombinations(4096));
  ExpectParity(b, "400 rows");
}

TEST(DraftSamplerGpuTest, RowsThatAreNotAligned) {
  // Row starts off the 16-byte grid: scalar loads and stores.
  const std::vector<RowParams> params = ParameterCombinations(4096);
  ExpectParity(RandomBatch(4096, 60, LogitShape::kPeaked, 300, params), "offset rows", 1);
  ExpectParity(RandomBatch(4096, 60, LogitShape::kTied, 301, params), "offset tied rows", 3);
}

TEST(DraftSamplerGpuTest, ThresholdsOnTheWholeRow) {
  // Flat rows put every id near the top, so the kept set does not fit shared
  // memory: top-k and top-p search the whole row, or top-k does and top-p
  // then searches its (small enough) kept set.
  const std::vector<RowParams> params = {
      {1.0f, 0, 0.95f},    {0.7f, 0, 0.5f},      {1.0f, 10000, 1.0f}, {1.0f, 10000, 0.9f},
      {1.0f, 5000, 0.9f},  {1.0f, 20000, 0.99f}, {1.0f, 24576, 0.9f}, {1.0f, 24577, 0.9f},
      {1.2f, 30000, 1.0f}, {1.0f, 3, 0.95f},
  };
  for (const int32_t vocab : {32000, 151936}) {
    ExpectParity(RandomBatch(vocab, 20, LogitShape::kFlat, 400 + vocab, params),
                 std::to_string(vocab) + " flat, whole-row thresholds");
    ExpectParity(RandomBatch(vocab, 20, LogitShape::kTied, 500 + vocab, params),
                 std::to_string(vocab) + " tied, whole-row thresholds");
    // As many rows as there are parameter sets: split over clusters of each size.
    const int32_t rows = static_cast<int32_t>(params.size());
    for (const int ctas : ClusterSizes()) {
      ASSERT_EQ(DraftSampleCtasPerRow(rows, ctas), ctas);
      const std::string split = " on rows split over clusters of " + std::to_string(ctas);
      ExpectParity(RandomBatch(vocab, rows, LogitShape::kFlat, 600 + vocab + ctas, params),
                   std::to_string(vocab) + " flat, whole-row thresholds" + split, 0, ctas);
      ExpectParity(RandomBatch(vocab, rows, LogitShape::kTied, 700 + vocab + ctas, params),
                   std::to_string(vocab) + " tied, whole-row thresholds" + split, 0, ctas);
    }
  }
}

// Top-p without top-k finds its threshold's candidate bins from a
// histogram of counts by distance to the maximum and selects among their
// ids only. Rows from tight to nearly off, with min-p's floor, at
// temperatures that leave most ids weighing nothing (they sit in the
// histogram's open last bin) or spread the mass wide; a row whose maximum
// dominates (a kept set of one id) and one whose two largest ids tie at
// the top; on one CTA and on clusters of every size. Each batch runs with
// the launcher's gates and with both at 0, so that every top-p row counts
// and takes the histogram's candidates wherever they fit.
TEST(DraftSamplerGpuTest, TopPFromHistogramsOfCounts) {
  const DraftTopPGates always{0, 0};
  std::vector<RowParams> params;
  for (const float t : {0.05f, 0.3f, 1.0f, 2.0f}) {
    for (const float p : {0.1f, 0.5f, 0.9f, 0.99f, 0.999f, 0.99999f}) {
      params.push_back({t, 0, p});
      params.push_back({t, 0, p, 0.001f});
    }
  }
  uint64_t salt = 900;
  for (const int32_t vocab : {5003, 32000, 151936}) {
    for (const LogitShape shape : {LogitShape::kPeaked, LogitShape::kTied}) {
      Batch b = RandomBatch(vocab, static_cast<int32_t>(params.size()), shape, salt++, params);
      b.logit(0, vocab / 2) = 80.0f;  // dominates its row
      b.logit(1, 3) = 40.0f;          // two ids tie at the top
      b.logit(1, vocab - 1) = 40.0f;
      const std::string name = std::to_string(vocab) + " " + ShapeName(shape) + ", top-p rows";
      ExpectParity(b, name + ", one CTA per row", 0, 1);
      ExpectParity(b, name + ", one CTA per row, histogram always", 0, 1, always);
      for (const int ctas : ClusterSizes()) {
        const int32_t rows = std::min<int32_t>(b.rows(), DraftSampleClusters(ctas));
        Batch part = b;
        part.logits.resize(static_cast<size_t>(rows) * vocab);
        part.temperatures.resize(rows);
        part.top_ks.resize(rows);
        part.top_ps.resize(rows);
        part.min_ps.resize(rows);
        part.seeds.resize(rows);
        part.positions.resize(rows);
        ExpectParity(part, name + ", clusters of " + std::to_string(ctas), 0, ctas);
        ExpectParity(part, name + ", clusters of " + std::to_string(ctas) + ", histogram always",
                     0, ctas, always);
      }
    }
  }
}

TEST(DraftSamplerGpuTest, ErrorsMatchTheCpuTwin) {
  const std::vector<RowParams> params = ParameterCombinations(300);
  const auto check = [&](const std::string& what, int32_t expected_row, auto corrupt) {
    // 8 rows split over clusters of 8, 40 over clusters of 2 or 4 (see
    // ClusterSizeFollowsTheRows), 200 one CTA per row.
    for (const int32_t rows : {8, 40, 200}) {
      Batch b = RandomBatch(300, rows, LogitShape::kPeaked, 600, params);
      corrupt(b);
      const Result cpu = RunOnCpu(b);
      Workspace workspace;
      const Result gpu = RunOnGpu(b, workspace);
      ASSERT_FALSE(cpu.status.ok()) << what;
      EXPECT_EQ(gpu.status, cpu.status) << what << ", " << rows << " rows";
      EXPECT_NE(gpu.status.message().find("row " + std::to_string(expected_row) + ":"),
                std::string::npos)
          << what << ", " << rows << " rows: " << gpu.status;
    }
  };
  check("nan logit", 3, [](Batch& b) { b.logit(3, 17) = NAN; });
  check("inf logit", 5, [](Batch& b) { b.logit(5, 299) = -INFINITY; });
  check("lowest bad id", 2, [](Batch& b) {
    b.logit(2, 250) = NAN;
    b.logit(2, 40) = INFINITY;
  });
  check("first row wins", 2, [](Batch& b) {
    b.logit(6, 1) = NAN;
    b.logit(2, 100) = NAN;
  });
  check("overflow at the temperature", 1, [](Batch& b) {
    b.temperatures[1] = 0.25f;
    b.logit(1, 9) = 3e38f;
  });
  check("temperature", 4, [](Batch& b) { b.temperatures[4] = -1.0f; });
  check("nan temperature", 0, [](Batch& b) { b.temperatures[0] = NAN; });
  check("top_k", 7, [](Batch& b) { b.top_ks[7] = -3; });
  check("top_p zero", 2, [](Batch& b) { b.top_ps[2] = 0.0f; });
  check("top_p above one", 2, [](Batch& b) { b.top_ps[2] = 1.5f; });
  check("min_p above one", 6, [](Batch& b) { b.min_ps[6] = 2.0f; });
  check("parameters before logits", 3, [](Batch& b) {
    b.logit(3, 0) = NAN;
    b.top_ps[3] = -1.0f;
    b.logit(5, 0) = NAN;
  });
}

TEST(DraftSamplerGpuTest, WorkspaceIsReadyAgainAfterEveryLaunch) {
  const std::vector<RowParams> params = ParameterCombinations(500);
  const Batch good = RandomBatch(500, 12, LogitShape::kPeaked, 700, params);
  Batch bad = good;
  bad.logit(9, 33) = NAN;
  const Result cpu_good = RunOnCpu(good);
  const Result cpu_bad = RunOnCpu(bad);
  ASSERT_TRUE(cpu_good.status.ok());
  Workspace workspace;  // one for all launches, as one stream would have
  for (int i = 0; i < 3; ++i) {
    const Result gpu_bad = RunOnGpu(bad, workspace);
    EXPECT_EQ(gpu_bad.status, cpu_bad.status);
    const Result gpu_good = RunOnGpu(good, workspace);
    EXPECT_TRUE(gpu_good.status.ok()) << gpu_good.status;
    EXPECT_EQ(gpu_good.tokens, cpu_good.tokens);
  }
}

TEST(DraftSamplerGpuTest, NoRows) {
  Batch b;
  b.vocab = 10;
  b.logits.resize(1);
  Workspace workspace;
  const Result gpu = RunOnGpu(b, workspace);
  EXPECT_TRUE(gpu.status.ok()) << gpu.status;
}

}  // namespace
}  // namespace verdict
