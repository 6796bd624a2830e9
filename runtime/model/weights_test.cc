#include "runtime/model/weights.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/bf16.h"
#include "runtime/model/random_model.h"
#include "runtime/model/safetensors.h"

namespace verdict {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

std::string TestDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/weights_test_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<std::string> Names(const ModelConfig& c) {
  std::vector<std::string> names;
  for (const WeightSpec& s : LlamaWeightSpecs(c)) names.push_back(s.name);
  return names;
}

// The full tensor, assembled from every rank's shard.
std::vector<float> Assemble(const WeightSource& source, const WeightSpec& spec, int tp) {
  const int64_t rows = spec.shape[0];
  const int64_t cols = spec.shape.size() > 1 ? spec.shape[1] : 1;
  std::vector<float> full(rows * cols, -1.0f);
  for (int r = 0; r < tp; ++r) {
    std::vector<float> shard(ShardElements(spec, TensorParallel{r, tp}));
    EXPECT_TRUE(source.ReadShard(spec, TensorParallel{r, tp}, TensorDType::kF32, shard.data()).ok());
    const std::vector<int64_t> shape = ShardShape(spec, TensorParallel{r, tp});
    const int64_t srows = shape[0];
    const int64_t scols = shape.size() > 1 ? shape[1] : 1;
    for (int64_t i = 0; i < srows; ++i) {
      for (int64_t j = 0; j < scols; ++j) {
        int64_t gi = i, gj = j;
        switch (spec.shard) {
          case ShardKind::kReplicated:
            break;
          case ShardKind::kRows:
          case ShardKind::kVocabRows:
            gi = r * srows + i;
            break;
          case ShardKind::kColumns:
            gj = r * scols + j;
            break;
        }
        const float v = shard[i * scols + j];
        if (gi >= rows) {
          EXPECT_EQ(v, 0.0f) << spec.name << " padding row " << gi;
          continue;
        }
        if (spec.shard == ShardKind::kReplicated && r > 0) {
          EXPECT_EQ(full[gi * cols + gj], v) << spec.name;
        }
        full[gi * cols + gj] = v;
      }
    }
  }
  return full;
}

TEST(WeightSpecsTest, FamiliesListTheirTensors) {
  ModelConfig llama = TinyModelConfig(ModelFamily::kLlama);
  std::vector<std::string> names = Names(llama);
  EXPECT_THAT(names, Contains("model.embed_tokens.weight"));
  EXPECT_THAT(names, Contains("model.layers.1.self_attn.o_proj.weight"));
  EXPECT_THAT(names, Contains("model.layers.0.mlp.down_proj.weight"));
  EXPECT_THAT(names, Contains("model.norm.weight"));
  EXPECT_THAT(names, Contains("lm_head.weight"));
  EXPECT_THAT(names, Not(Contains("model.layers.0.self_attn.q_proj.bias")));
  EXPECT_EQ(names.size(), 1u + 2 * 9 + 2);

  llama.tie_word_embeddings = true;
  EXPECT_THAT(Names(llama), Not(Contains("lm_head.weight")));

  std::vector<std::string> qwen2 = Names(TinyModelConfig(ModelFamily::kQwen2));
  EXPECT_THAT(qwen2, Contains("model.layers.0.self_attn.k_proj.bias"));
  EXPECT_THAT(qwen2, Not(Contains("model.layers.0.self_attn.o_proj.bias")));

  std::vector<std::string> qwen3 = Names(TinyModelConfig(ModelFamily::kQwen3));
  EXPECT_THAT(qwen3, Contains("model.layers.1.self_attn.q_norm.weight"));
  EXPECT_THAT(qwen3, Contains("model.layers.1.self_attn.k_norm.weight"));
}

TEST(WeightSpecsTest, ShardShapes) {
  ModelConfig c = TinyModelConfig();
  c.vocab_size = 102;
  for (const WeightSpec& s : LlamaWeightSpecs(c)) {
    const std::vector<int64_t> shape = ShardShape(s, TensorParallel{1, 2});
    if (s.name == "model.layers.0.self_attn.q_proj.weight") {
      EXPECT_EQ(shape, (std::vector<int64_t>{32, 64}));
    } else if (s.name == "model.layers.0.self_attn.o_proj.weight") {
      EXPECT_EQ(shape, (std::vector<int64_t>{64, 32}));
    } else if (s.name == "model.layers.0.mlp.down_proj.weight") {
      EXPECT_EQ(shape, (std::vector<int64_t>{64, 64}));
    } else if (s.name == "lm_head.weight") {
      EXPECT_EQ(ShardShape(s, TensorParallel{3, 4}), (std::vector<int64_t>{26, 64}));  // 104 / 4
    } else if (s.name == "model.norm.weight") {
      EXPECT_EQ(shape, (std::vector<int64_t>{64}));
    }
  }
}

TEST(DummyWeightsTest, SameFullTensorAtAnyTensorParallelDegree) {
  ModelConfig c = TinyModelConfig(ModelFamily::kQwen2);
  c.vocab_size = 102;  // padded to 104 at tp 4
  std::unique_ptr<WeightSource> source = MakeDummyWeights(7);
  for (const WeightSpec& spec : LlamaWeightSpecs(c)) {
    const std::vector<float> tp1 = Assemble(*source, spec, 1);
    EXPECT_EQ(Assemble(*source, spec, 2), tp1) << spec.name;
    EXPECT_EQ(Assemble(*source, spec, 4), tp1) << spec.name;
  }
}

TEST(DummyWeightsTest, SeededAndScaled) {
  WeightSpec spec{"w", {256, 256}, ShardKind::kRows, DummyInit::kUniform};
  std::unique_ptr<WeightSource> a = MakeDummyWeights(1, 0.02f);
  std::unique_ptr<WeightSource> b = MakeDummyWeights(2, 0.02f);
  std::vector<float> va = Assemble(*a, spec, 1), va2 = Assemble(*a, spec, 1),
                     vb = Assemble(*b, spec, 1);
  EXPECT_EQ(va, va2);
  EXPECT_NE(va, vb);
  double sum = 0, sum_sq = 0;
  for (float v : va) {
    sum += v;
    sum_sq += v * v;
    EXPECT_LT(std::abs(v), 0.0347f);  // uniform on (-0.02 sqrt 3, 0.02 sqrt 3)
  }
  const double mean = sum / va.size();
  EXPECT_NEAR(mean, 0.0, 1e-3);
  EXPECT_NEAR(std::sqrt(sum_sq / va.size() - mean * mean), 0.02, 1e-3);

  WeightSpec norm{"n", {1024}, ShardKind::kReplicated, DummyInit::kOnePlusNoise};
  for (float v : Assemble(*a, norm, 1)) EXPECT_NEAR(v, 1.0f, 0.035f);
}

// Counts the elements a rank asks the source for.
class CountingSource : public WeightSource {
 public:
  absl::Status Check(const WeightSpec&) const override { return absl::OkStatus(); }
  mutable int64_t elements_read = 0;

 protected:
  absl::Status ReadElements(const WeightSpec&, int64_t, int64_t count, float* out) const override {
    elements_read += count;
    std::fill(out, out + count, 1.0f);
    return absl::OkStatus();
  }
};

TEST(WeightSourceTest, RankReadsOnlyItsShard) {
  ModelConfig c = TinyModelConfig();
  c.vocab_size = 102;
  for (const WeightSpec& spec : LlamaWeightSpecs(c)) {
    for (int tp : {1, 2, 4}) {
      CountingSource source;
      const TensorParallel last{tp - 1, tp};
      std::vector<float> out(ShardElements(spec, last));
      ASSERT_TRUE(source.ReadShard(spec, last, TensorDType::kF32, out.data()).ok());
      int64_t expected = ShardElements(spec, last);
      if (spec.shard == ShardKind::kVocabRows) expected -= (PaddedVocabSize(102, tp) - 102) * 64;
      EXPECT_EQ(source.elements_read, expected) << spec.name << " tp " << tp;
    }
  }
}

TEST(WeightSourceTest, ReadsBFloat16) {
  WeightSpec spec{"w", {8, 4}, ShardKind::kColumns, DummyInit::kUniform};
  std::unique_ptr<WeightSource> source = MakeDummyWeights(3, 1.0f);
  std::vector<float> f32(16);
  std::vector<uint16_t> bf16(16);
  ASSERT_TRUE(source->ReadShard(spec, TensorParallel{1, 2}, TensorDType::kF32, f32.data()).ok());
  ASSERT_TRUE(source->ReadShard(spec, TensorParallel{1, 2}, TensorDType::kBF16, bf16.data()).ok());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(bf16[i], FloatToBf16(f32[i]));
  EXPECT_FALSE(source->ReadShard(spec, TensorParallel{2, 2}, TensorDType::kF32, f32.data()).ok());
  EXPECT_FALSE(source->ReadShard(spec, TensorParallel{1, 2}, TensorDType::kI32, f32.data()).ok());
}

void ExpectSameWeights(const LlamaWeights& a, const LlamaWeights& b) {
  EXPECT_EQ(a.embed_tokens.data, b.embed_tokens.data);
  EXPECT_EQ(a.lm_head.data, b.lm_head.data);
  EXPECT_EQ(a.final_norm.data, b.final_norm.data);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    EXPECT_EQ(a.layers[l].q_proj.data, b.layers[l].q_proj.data);
    EXPECT_EQ(a.layers[l].o_proj.data, b.layers[l].o_proj.data);
    EXPECT_EQ(a.layers[l].down_proj.data, b.layers[l].down_proj.data);
    EXPECT_EQ(a.layers[l].q_bias.data, b.layers[l].q_bias.data);
    EXPECT_EQ(a.layers[l].k_norm.data, b.layers[l].k_norm.data);
  }
}

TEST(LoadLlamaWeightsTest, CheckpointEqualsDummyOfSameSeed) {
  for (ModelFamily family : {ModelFamily::kLlama, ModelFamily::kQwen2, ModelFamily::kQwen3}) {
    const std::string dir = TestDir(absl::StrCat("same_seed_", static_cast<int>(family)));
    ModelConfig c = TinyModelConfig(family);
    ASSERT_TRUE(WriteRandomModel(dir, c, RandomModelOptions{.seed = 11}).ok());
    absl::StatusOr<ModelConfig> read_config = LoadModelConfig(dir);
    ASSERT_TRUE(read_config.ok()) << read_config.status();
    absl::StatusOr<std::unique_ptr<WeightSource>> checkpoint = OpenCheckpointWeights(dir);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    std::unique_ptr<WeightSource> dummy = MakeDummyWeights(11);
    for (int tp : {1, 2}) {
      for (int rank = 0; rank < tp; ++rank) {
        absl::StatusOr<LlamaWeights> from_file =
            LoadLlamaWeights(*read_config, **checkpoint, TensorParallel{rank, tp});
        ASSERT_TRUE(from_file.ok()) << from_file.status();
        absl::StatusOr<LlamaWeights> from_dummy =
            LoadLlamaWeights(*read_config, *dummy, TensorParallel{rank, tp});
        ASSERT_TRUE(from_dummy.ok());
        ExpectSameWeights(*from_file, *from_dummy);
      }
    }
  }
}

TEST(LoadLlamaWeightsTest, ShardedBFloat16Checkpoint) {
  const std::string dir = TestDir("sharded_bf16");
  ModelConfig c = TinyModelConfig(ModelFamily::kQwen3);
  ASSERT_TRUE(WriteRandomModel(dir, c,
                               RandomModelOptions{.seed = 5, .dtype = TensorDType::kBF16,
                                                  .num_files = 3})
                  .ok());
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(dir + "/model-00003-of-00003.safetensors"));
  absl::StatusOr<std::unique_ptr<WeightSource>> checkpoint = OpenCheckpointWeights(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  absl::StatusOr<LlamaWeights> w = LoadLlamaWeights(c, **checkpoint, TensorParallel{1, 2});
  ASSERT_TRUE(w.ok()) << w.status();
  absl::StatusOr<LlamaWeights> d = LoadLlamaWeights(c, *MakeDummyWeights(5), TensorParallel{1, 2});
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(w->layers[1].gate_proj.data.size(), d->layers[1].gate_proj.data.size());
  for (size_t i = 0; i < d->layers[1].gate_proj.data.size(); ++i) {
    EXPECT_EQ(w->layers[1].gate_proj.data[i], RoundToBf16(d->layers[1].gate_proj.data[i]));
  }
}

// Writes the tiny model's tensors, letting `edit` drop or change one and
// `edit_values` change float32 values.
void WriteEdited(const std::string& dir, const ModelConfig& c,
                 const std::function<bool(WeightSpec&, TensorDType&)>& edit,
                 const std::function<void(const WeightSpec&, std::vector<float>&)>& edit_values =
                     nullptr) {
  SafetensorsWriter w;
  std::unique_ptr<WeightSource> dummy = MakeDummyWeights(1);
  for (WeightSpec spec : LlamaWeightSpecs(c)) {
    std::vector<float> values(ShardElements(spec, TensorParallel{}));
    ASSERT_TRUE(dummy->ReadShard(spec, TensorParallel{}, TensorDType::kF32, values.data()).ok());
    TensorDType dtype = TensorDType::kF32;
    if (!edit(spec, dtype)) continue;
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    values.resize(n);
    if (edit_values) edit_values(spec, values);
    if (dtype == TensorDType::kF32) {
      w.AddFloat32(spec.name, spec.shape, values);
    } else {
      w.Add(spec.name, dtype, spec.shape, std::vector<uint8_t>(n * TensorDTypeSize(dtype)));
    }
  }
  ASSERT_TRUE(w.Write(dir + "/model.safetensors").ok());
}

std::string LoadError(const std::string& dir, const ModelConfig& c) {
  absl::StatusOr<std::unique_ptr<WeightSource>> checkpoint = OpenCheckpointWeights(dir);
  if (!checkpoint.ok()) return std::string(checkpoint.status().message());
  absl::StatusOr<LlamaWeights> w = LoadLlamaWeights(c, **checkpoint, TensorParallel{});
  EXPECT_FALSE(w.ok());
  return w.ok() ? "" : std::string(w.status().message());
}

TEST(LoadLlamaWeightsTest, MissingTensorNamesFileAndTensor) {
  const std::string dir = TestDir("missing");
  ModelConfig c = TinyModelConfig();
  WriteEdited(dir, c, [](WeightSpec& s, TensorDType&) {
    return s.name != "model.layers.1.mlp.up_proj.weight";
  });
  const std::string error = LoadError(dir, c);
  EXPECT_THAT(error, HasSubstr(dir + "/model.safetensors"));
  EXPECT_THAT(error, HasSubstr("tensor 'model.layers.1.mlp.up_proj.weight'"));
  EXPECT_THAT(error, HasSubstr("missing"));
}

TEST(LoadLlamaWeightsTest, UntiedHeadMissing) {
  const std::string dir = TestDir("nohead");
  ModelConfig c = TinyModelConfig();
  WriteEdited(dir, c, [](WeightSpec& s, TensorDType&) { return s.name != "lm_head.weight"; });
  EXPECT_THAT(LoadError(dir, c), HasSubstr("tensor 'lm_head.weight'"));
  // The same file is a complete tied model.
  c.tie_word_embeddings = true;
  absl::StatusOr<std::unique_ptr<WeightSource>> checkpoint = OpenCheckpointWeights(dir);
  ASSERT_TRUE(checkpoint.ok());
  absl::StatusOr<LlamaWeights> w = LoadLlamaWeights(c, **checkpoint, TensorParallel{});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(w->lm_head.empty());
  EXPECT_EQ(&w->output_embedding(), &w->embed_tokens);
}

TEST(LoadLlamaWeightsTest, WrongShapeNamesBothShapes) {
  const std::string dir = TestDir("shape");
  ModelConfig c = TinyModelConfig();
  WriteEdited(dir, c, [](WeightSpec& s, TensorDType&) {
    if (s.name == "model.layers.0.self_attn.k_proj.weight") s.shape = {64, 64};
    return true;
  });
  const std::string error = LoadError(dir, c);
  EXPECT_THAT(error, HasSubstr(dir + "/model.safetensors"));
  EXPECT_THAT(error, HasSubstr("tensor 'model.layers.0.self_attn.k_proj.weight'"));
  EXPECT_THAT(error, HasSubstr("shape [64, 64] but the config expects [32, 64]"));
}

TEST(LoadLlamaWeightsTest, WrongDType) {
  const std::string dir = TestDir("dtype");
  ModelConfig c = TinyModelConfig();
  WriteEdited(dir, c, [](WeightSpec& s, TensorDType& dtype) {
    if (s.name == "model.norm.weight") dtype = TensorDType::kI32;
    return true;
  });
  const std::string error = LoadError(dir, c);
  EXPECT_THAT(error, HasSubstr("tensor 'model.norm.weight'"));
  EXPECT_THAT(error, HasSubstr("dtype I32 is not a weight dtype"));
}

TEST(LoadLlamaWeightsTest, NonFiniteWeightsNameFileTensorAndElement) {
  const std::string dir = TestDir("nonfinite");
  ModelConfig c = TinyModelConfig();
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    WriteEdited(
        dir, c, [](WeightSpec&, TensorDType&) { return true; },
        [bad](const WeightSpec& s, std::vector<float>& values) {
          if (s.name == "model.layers.1.mlp.down_proj.weight") values[37] = bad;
        });
    const std::string error = LoadError(dir, c);
    EXPECT_THAT(error, HasSubstr(dir + "/model.safetensors"));
    EXPECT_THAT(error, HasSubstr("tensor 'model.layers.1.mlp.down_proj.weight'"));
    EXPECT_THAT(error, HasSubstr("element 37"));
    EXPECT_THAT(error, HasSubstr("must be finite"));
  }
  // Rank 1 of 2 reads a replicated tensor whole, so it finds the bad value
  // too.
  WriteEdited(
      dir, c, [](WeightSpec&, TensorDType&) { return true; },
      [](const WeightSpec& s, std::vector<float>& values) {
        if (s.name == "model.norm.weight") values.back() = std::numeric_limits<float>::infinity();
      });
  absl::StatusOr<std::unique_ptr<WeightSource>> checkpoint = OpenCheckpointWeights(dir);
  ASSERT_TRUE(checkpoint.ok());
  absl::StatusOr<LlamaWeights> w = LoadLlamaWeights(c, **checkpoint, TensorParallel{1, 2});
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("tensor 'model.norm.weight'"));
}

TEST(LoadLlamaWeightsTest, TruncatedCheckpoint) {
  const std::string dir = TestDir("truncated");
  ModelConfig c = TinyModelConfig();
  ASSERT_TRUE(WriteRandomModel(dir, c).ok());
  const std::string file = dir + "/model.safetensors";
  fs::resize_file(file, fs::file_size(file) - 100);
  const std::string error = LoadError(dir, c);
  EXPECT_THAT(error, HasSubstr(file));
  EXPECT_THAT(error, HasSubstr("tensor 'lm_head.weight'"));  // the last tensor written
  EXPECT_THAT(error, HasSubstr("truncated"));
}

TEST(LoadLlamaWeightsTest, TensorParallelMustDivideHeads) {
  ModelConfig c = TinyModelConfig();  // 4 heads, 2 KV heads
  absl::StatusOr<LlamaWeights> w = LoadLlamaWeights(c, *MakeDummyWeights(1), TensorParallel{0, 4});
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("num_key_value_heads"));
  w = LoadLlamaWeights(c, *MakeDummyWeights(1), TensorParallel{0, 3});
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("num_attention_heads"));
}

}  // namespace
}  // namespace verdict
