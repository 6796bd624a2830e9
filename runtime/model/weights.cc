#include "runtime/model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kernels/bf16.h"

namespace verdict {
namespace {

// Full tensors as [rows, cols]: 1-D tensors are one column.
int64_t Rows(const WeightSpec& spec) { return spec.shape.empty() ? 1 : spec.shape[0]; }
int64_t Cols(const WeightSpec& spec) {
  int64_t c = 1;
  for (size_t i = 1; i < spec.shape.size(); ++i) c *= spec.shape[i];
  return c;
}

}  // namespace

void ForEachLlamaWeight(const ModelConfig& c, LlamaWeights* w,
                        const std::function<void(WeightSpec, HostTensor*)>& fn) {
  const int64_t hidden = c.hidden_size;
  const int64_t q = c.q_size();
  const int64_t kv = c.kv_size();
  const int64_t inter = c.intermediate_size;
  auto spec = [](std::string name, std::vector<int64_t> shape, ShardKind kind,
                 DummyInit init = DummyInit::kUniform) {
    return WeightSpec{std::move(name), std::move(shape), kind, init};
  };
  w->layers.resize(c.num_layers);
  fn(spec("model.embed_tokens.weight", {c.vocab_size, hidden}, ShardKind::kVocabRows),
     &w->embed_tokens);
  for (int i = 0; i < c.num_layers; ++i) {
    LlamaLayerWeights& l = w->layers[i];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    fn(spec(p + "input_layernorm.weight", {hidden}, ShardKind::kReplicated,
            DummyInit::kOnePlusNoise),
       &l.input_norm);
    fn(spec(p + "self_attn.q_proj.weight", {q, hidden}, ShardKind::kRows), &l.q_proj);
    fn(spec(p + "self_attn.k_proj.weight", {kv, hidden}, ShardKind::kRows), &l.k_proj);
    fn(spec(p + "self_attn.v_proj.weight", {kv, hidden}, ShardKind::kRows), &l.v_proj);
    if (c.qkv_bias) {
      fn(spec(p + "self_attn.q_proj.bias", {q}, ShardKind::kRows), &l.q_bias);
      fn(spec(p + "self_attn.k_proj.bias", {kv}, ShardKind::kRows), &l.k_bias);
      fn(spec(p + "self_attn.v_proj.bias", {kv}, ShardKind::kRows), &l.v_bias);
    }
    if (c.qk_norm) {
      fn(spec(p + "self_attn.q_norm.weight", {c.head_dim}, ShardKind::kReplicated,
              DummyInit::kOnePlusNoise),
         &l.q_norm);
      fn(spec(p + "self_attn.k_norm.weight", {c.head_dim}, ShardKind::kReplicated,
              DummyInit::kOnePlusNoise),
         &l.k_norm);
    }
    fn(spec(p + "self_attn.o_proj.weight", {hidden, q}, ShardKind::kColumns), &l.o_proj);
    if (c.o_bias) {
      fn(spec(p + "self_attn.o_proj.bias", {hidden}, ShardKind::kReplicated), &l.o_bias);
    }
    fn(spec(p + "post_attention_layernorm.weight", {hidden}, ShardKind::kReplicated,
            DummyInit::kOnePlusNoise),
       &l.post_attention_norm);
    fn(spec(p + "mlp.gate_proj.weight", {inter, hidden}, ShardKind::kRows), &l.gate_proj);
    fn(spec(p + "mlp.up_proj.weight", {inter, hidden}, ShardKind::kRows), &l.up_proj);
    fn(spec(p + "mlp.down_proj.weight", {hidden, inter}, ShardKind::kColumns), &l.down_proj);
  }
  fn(spec("model.norm.weight", {hidden}, ShardKind::kReplicated, DummyInit::kOnePlusNoise),
     &w->final_norm);
  if (!c.tie_word_embeddings) {
    fn(spec("lm_head.weight", {c.vocab_size, hidden}, ShardKind::kVocabRows), &w->lm_head);
  }
}

namespace {

class CheckpointWeights : public WeightSource {
 public:
  explicit CheckpointWeights(std::unique_ptr<SafetensorsCheckpoint> checkpoint)
      : checkpoint_(std::move(checkpoint)) {}

  absl::Status Check(const WeightSpec& spec) const override {
    absl::StatusOr<SafetensorsCheckpoint::Entry> entry = checkpoint_->Find(spec.name);
    if (!entry.ok()) return entry.status();
    const TensorInfo& t = *entry->tensor;
    if (t.shape != spec.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(entry->file->path(), ": tensor '", spec.name, "': shape ",
                       ShapeString(t.shape), " but the config expects ", ShapeString(spec.shape)));
    }
    if (t.dtype != TensorDType::kF32 && t.dtype != TensorDType::kF16 &&
        t.dtype != TensorDType::kBF16) {
      return absl::InvalidArgumentError(
          absl::StrCat(entry->file->path(), ": tensor '", spec.name, "': dtype ",
                       TensorDTypeName(t.dtype), " is not a weight dtype (BF16, F16, F32)"));
    }
    return absl::OkStatus();
  }

 protected:
  absl::Status ReadElements(const WeightSpec& spec, int64_t flat_begin, int64_t count,
                            float* out) const override {
    absl::StatusOr<SafetensorsCheckpoint::Entry> entry = checkpoint_->Find(spec.name);
    if (!entry.ok()) return entry.status();
    absl::Span<const uint8_t> bytes = entry->file->Data(*entry->tensor);
    const size_t element_size = TensorDTypeSize(entry->tensor->dtype);
    if (flat_begin < 0 || count < 0 ||
        static_cast<size_t>(flat_begin + count) * element_size > bytes.size()) {
      return absl::OutOfRangeError(absl::StrCat(entry->file->path(), ": tensor '", spec.name,
                                                "': read past the tensor's bytes"));
    }
    absl::Status converted = ConvertToFloat32(
        entry->tensor->dtype, bytes.data() + flat_begin * element_size, static_cast<size_t>(count),
        out);
    if (!converted.ok()) return converted;
    // A NaN or infinity in the weights makes every logit non-finite at the
    // first request; refuse the checkpoint now, naming where it is. Every
    // backend reads its shards through here, so this pass over the values
    // just converted covers them all.
    for (int64_t i = 0; i < count; ++i) {
      if (!std::isfinite(out[i])) {
        return absl::InvalidArgumentError(absl::StrCat(
            entry->file->path(), ": tensor '", spec.name, "': element ", flat_begin + i, " is ",
            out[i], "; the checkpoint's weights must be finite"));
      }
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<SafetensorsCheckpoint> checkpoint_;
};

class DummyWeights : public WeightSource {
 public:
  DummyWeights(uint64_t seed, float stddev) : seed_(seed), stddev_(stddev) {}

  absl::Status Check(const WeightSpec&) const override { return absl::OkStatus(); }

 protected:
  absl::Status ReadElements(const WeightSpec& spec, int64_t flat_begin, int64_t count,
                            float* out) const override {
    const uint64_t key = DummyTensorKey(spec.name);
    auto fill = [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        out[i] = DummyWeightValue(seed_, key, static_cast<uint64_t>(flat_begin + i),
                                  spec.dummy_init, stddev_);
      }
    };
    // Real-shape dummy models (an 8B target) have billions of elements:
    // spread large tensors over the cores.
    const int64_t kMinPerThread = 1 << 20;
    const int threads = static_cast<int>(std::min<int64_t>(
        std::max(1u, std::thread::hardware_concurrency()), count / kMinPerThread));
    if (threads <= 1) {
      fill(0, count);
      return absl::OkStatus();
    }
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back(fill, count * t / threads, count * (t + 1) / threads);
    }
    for (std::thread& th : pool) th.join();
    return absl::OkStatus();
  }

 private:
  uint64_t seed_;
  float stddev_;
};

}  // namespace

std::vector<int64_t> ShardShape(const WeightSpec& spec, TensorParallel tp) {
  std::vector<int64_t> shape = spec.shape;
  if (shape.empty()) return shape;
  switch (spec.shard) {
    case ShardKind::kReplicated:
      break;
    case ShardKind::kRows:
      shape[0] /= tp.size;
      break;
    case ShardKind::kColumns:
      if (shape.size() >= 2) shape[1] /= tp.size;
      break;
    case ShardKind::kVocabRows:
      shape[0] = PaddedVocabSize(static_cast<int>(shape[0]), tp.size) / tp.size;
      break;
  }
  return shape;
}

int64_t ShardElements(const WeightSpec& spec, TensorParallel tp) {
  int64_t n = 1;
  for (int64_t d : ShardShape(spec, tp)) n *= d;
  return n;
}

std::vector<WeightSpec> LlamaWeightSpecs(const ModelConfig& config) {
  std::vector<WeightSpec> specs;
  LlamaWeights scratch;
  ForEachLlamaWeight(config, &scratch, [&](WeightSpec spec, HostTensor*) { specs.push_back(spec); });
  return specs;
}

absl::Status WeightSource::ReadShard(const WeightSpec& spec, TensorParallel tp,
                                     TensorDType out_dtype, void* out) const {
  if (out_dtype != TensorDType::kF32 && out_dtype != TensorDType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReadShard: output dtype ", TensorDTypeName(out_dtype), " not supported"));
  }
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReadShard: rank ", tp.rank, " of ", tp.size, " is not a valid rank"));
  }
  const int64_t rows = Rows(spec);
  const int64_t cols = Cols(spec);
  const int64_t shard_elements = ShardElements(spec, tp);
  std::vector<float> staging;
  float* dst = static_cast<float*>(out);
  if (out_dtype == TensorDType::kBF16) {
    staging.resize(static_cast<size_t>(shard_elements));
    dst = staging.data();
  }
  absl::Status status;
  switch (spec.shard) {
    case ShardKind::kReplicated:
      status = ReadElements(spec, 0, rows * cols, dst);
      break;
    case ShardKind::kRows: {
      if (rows % tp.size != 0) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name, "': ", rows,
                                                       " rows do not split over ", tp.size,
                                                       " ranks"));
      }
      const int64_t per_rank = rows / tp.size;
      status = ReadElements(spec, tp.rank * per_rank * cols, per_rank * cols, dst);
      break;
    }
    case ShardKind::kColumns: {
      if (cols % tp.size != 0) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name, "': ", cols,
                                                       " columns do not split over ", tp.size,
                                                       " ranks"));
      }
      const int64_t per_rank = cols / tp.size;
      for (int64_t r = 0; r < rows && status.ok(); ++r) {
        status = ReadElements(spec, r * cols + tp.rank * per_rank, per_rank, dst + r * per_rank);
      }
      break;
    }
    case ShardKind::kVocabRows: {
      const int64_t per_rank = PaddedVocabSize(static_cast<int>(rows), tp.size) / tp.size;
      const int64_t first = tp.rank * per_rank;
      const int64_t present = std::clamp<int64_t>(rows - first, 0, per_rank);
      status = ReadElements(spec, first * cols, present * cols, dst);
      std::fill(dst + present * cols, dst + per_rank * cols, 0.0f);
      break;
    }
  }
  if (!status.ok()) return status;
  if (out_dtype == TensorDType::kBF16) {
    uint16_t* bf16 = static_cast<uint16_t*>(out);
    for (int64_t i = 0; i < shard_elements; ++i) bf16[i] = FloatToBf16(staging[i]);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WeightSource>> OpenCheckpointWeights(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> checkpoint =
      SafetensorsCheckpoint::Open(dir);
  if (!checkpoint.ok()) return checkpoint.status();
  return std::unique_ptr<WeightSource>(new CheckpointWeights(*std::move(checkpoint)));
}

std::unique_ptr<WeightSource> MakeDummyWeights(uint64_t seed, float stddev) {
  return std::make_unique<DummyWeights>(seed, stddev);
}

absl::StatusOr<LlamaWeights> LoadLlamaWeights(const ModelConfig& config,
                                              const WeightSource& source, TensorParallel tp) {
  if (absl::Status s = ValidateTensorParallel(config, tp.size); !s.ok()) return s;
  if (tp.rank < 0 || tp.rank >= tp.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", tp.rank, " is outside tensor parallel degree ", tp.size));
  }
  LlamaWeights weights;
  weights.tp = tp;
  weights.padded_vocab = PaddedVocabSize(config.vocab_size, tp.size);
  std::vector<std::pair<WeightSpec, HostTensor*>> targets;
  ForEachLlamaWeight(config, &weights,
                [&](WeightSpec spec, HostTensor* dst) { targets.emplace_back(spec, dst); });
  for (const auto& [spec, dst] : targets) {
    if (absl::Status s = source.Check(spec); !s.ok()) return s;
  }
  for (const auto& [spec, dst] : targets) {
    dst->shape = ShardShape(spec, tp);
    dst->data.resize(static_cast<size_t>(ShardElements(spec, tp)));
    if (absl::Status s = source.ReadShard(spec, tp, TensorDType::kF32, dst->data.data());
        !s.ok()) {
      return s;
    }
  }
  return weights;
}

}  // namespace verdict
