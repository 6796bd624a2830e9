#include "runtime/model/model_config.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Llama 3.1 8B's config.json, abridged to the fields a loader reads.
constexpr char kLlama31[] = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "hidden_act": "silu",
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "vocab_size": 128256
})";

constexpr char kQwen2[] = R"({
  "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
  "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
  "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 32768, "use_sliding_window": false, "max_window_layers": 21,
  "tie_word_embeddings": true, "vocab_size": 151936, "bos_token_id": 151643,
  "eos_token_id": 151643, "torch_dtype": "bfloat16", "hidden_act": "silu"
})";

constexpr char kQwen3[] = R"({
  "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072,
  "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
  "head_dim": 128, "attention_bias": false, "max_position_embeddings": 40960,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
  "sliding_window": null, "use_sliding_window": false, "tie_word_embeddings": true,
  "vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": 151645
})";

TEST(ModelConfigTest, ParsesLlama31) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(kLlama31);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, ModelFamily::kLlama);
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->intermediate_size, 14336);
  EXPECT_EQ(c->num_layers, 32);
  EXPECT_EQ(c->num_heads, 32);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->vocab_size, 128256);
  EXPECT_EQ(c->max_position_embeddings, 131072);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-5f);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_FALSE(c->HasSlidingLayers());
  EXPECT_THAT(c->bos_token_ids, ElementsAre(128000));
  EXPECT_THAT(c->eos_token_ids, ElementsAre(128001, 128008, 128009));
  EXPECT_EQ(c->torch_dtype, "bfloat16");
}

TEST(ModelConfigTest, ParsesQwen2WithBiasAndTiedHead) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(kQwen2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, ModelFamily::kQwen2);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_TRUE(c->tie_word_embeddings);
  // use_sliding_window is false: no layer uses the window.
  EXPECT_FALSE(c->HasSlidingLayers());
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kNone);
}

TEST(ModelConfigTest, ParsesQwen3WithExplicitHeadDim) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(kQwen3);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, ModelFamily::kQwen3);
  EXPECT_EQ(c->head_dim, 128);  // not hidden / heads = 64
  EXPECT_EQ(c->q_size(), 2048);
  EXPECT_EQ(c->kv_size(), 1024);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_THAT(c->eos_token_ids, ElementsAre(151645));
}

TEST(ModelConfigTest, Qwen2SlidingWindowFromMaxWindowLayers) {
  std::string text = absl::StrReplaceAll(
      kQwen2, {{"\"use_sliding_window\": false", "\"use_sliding_window\": true"},
               {"\"sliding_window\": 32768", "\"sliding_window\": 128"}});
  absl::StatusOr<ModelConfig> c = ParseModelConfig(text);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 128);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(c->layer_uses_sliding_window[i], i >= 21) << i;
  EXPECT_TRUE(c->HasSlidingLayers());
  EXPECT_TRUE(c->HasFullLayers());
}

TEST(ModelConfigTest, LayerTypesSelectSlidingLayers) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(R"({
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 3, "num_attention_heads": 4, "vocab_size": 100,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 4);  // defaults to the attention heads
  EXPECT_EQ(c->sliding_window, 128);
  EXPECT_THAT(c->layer_uses_sliding_window, ElementsAre(true, false, true));
}

TEST(ModelConfigTest, LlamaIgnoresSlidingWindowWithoutLayerTypes) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(R"({
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
    "sliding_window": 128})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->HasSlidingLayers());
}

TEST(ModelConfigTest, NewerRopeParametersBlock) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(R"({
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 32.0);
}

TEST(ModelConfigTest, LlamaAttentionBiasCoversOutputProjection) {
  std::string text =
      absl::StrReplaceAll(kLlama31, {{"\"attention_bias\": false", "\"attention_bias\": true"}});
  absl::StatusOr<ModelConfig> c = ParseModelConfig(text);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_TRUE(c->o_bias);
}

struct BadCase {
  const char* name;
  std::string from;
  std::string to;
  std::string expected_error;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class ModelConfigBadTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ModelConfigBadTest, RefusedWithFieldAndReason) {
  const BadCase& bad = GetParam();
  std::string text = absl::StrReplaceAll(kLlama31, {{bad.from, bad.to}});
  ASSERT_NE(text, kLlama31) << "replacement did not apply";
  absl::StatusOr<ModelConfig> c = ParseModelConfig(text, "/models/x/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("/models/x/config.json"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(bad.expected_error));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ModelConfigBadTest,
    ::testing::Values(
        BadCase{"NotJson", "\"architectures\"", "architectures", "not valid JSON"},
        BadCase{"UnknownModelType", "\"model_type\": \"llama\"", "\"model_type\": \"gpt2\"",
                "field 'model_type': 'gpt2' is not supported"},
        BadCase{"MissingHidden", "\"hidden_size\": 4096,", "",
                "field 'hidden_size': missing"},
        BadCase{"StringHidden", "\"hidden_size\": 4096", "\"hidden_size\": \"4096\"",
                "field 'hidden_size': expected an integer"},
        BadCase{"FloatLayers", "\"num_hidden_layers\": 32", "\"num_hidden_layers\": 32.5",
                "field 'num_hidden_layers': expected an integer"},
        BadCase{"ZeroHeads", "\"num_attention_heads\": 32", "\"num_attention_heads\": 0",
                "field 'num_attention_heads': must be at least 1"},
        BadCase{"KvHeadsDoNotDivide", "\"num_key_value_heads\": 8",
                "\"num_key_value_heads\": 5",
                "field 'num_key_value_heads': 5 does not divide num_attention_heads"},
        BadCase{"HeadsDoNotDivideHidden", "\"num_attention_heads\": 32,",
                "\"num_attention_heads\": 24,",
                "field 'num_attention_heads': 24 does not divide hidden_size (4096)"},
        BadCase{"NegativeEps", "\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": -1",
                "field 'rms_norm_eps': must be a positive finite number"},
        BadCase{"UnknownRope", "\"rope_type\": \"llama3\"", "\"rope_type\": \"yarn\"",
                "field 'rope_scaling.rope_type': 'yarn' is not supported"},
        BadCase{"Llama3MissingFactor", "\"factor\": 8.0,", "",
                "field 'rope_scaling.factor': missing"},
        BadCase{"Llama3BadFreqFactors", "\"high_freq_factor\": 4.0", "\"high_freq_factor\": 0.5",
                "high_freq_factor': must be greater than low_freq_factor"},
        BadCase{"Activation", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"",
                "field 'hidden_act': 'gelu' is not supported"},
        BadCase{"MlpBias", "\"mlp_bias\": false", "\"mlp_bias\": true",
                "field 'mlp_bias': true is not supported"},
        BadCase{"BoolAsString", "\"tie_word_embeddings\": false",
                "\"tie_word_embeddings\": \"no\"", "field 'tie_word_embeddings': expected true"},
        BadCase{"EosOutsideVocab", "128009]", "128257]",
                "field 'eos_token_id': 128257 is outside the vocabulary"},
        BadCase{"EosNotInteger", "128009]", "\"x\"]",
                "field 'eos_token_id[2]': expected a non-negative integer"},
        // Integers past the field's type are refused, not truncated
        // (4294967297 as an int is 1, 2^32 + 4096 is 4096).
        BadCase{"VocabPastInt", "\"vocab_size\": 128256", "\"vocab_size\": 4294967297",
                "field 'vocab_size': must be at least 1 and at most 2147483647, got 4294967297"},
        BadCase{"HiddenPastInt", "\"hidden_size\": 4096", "\"hidden_size\": 4294971392",
                "field 'hidden_size': must be at least 1 and at most 2147483647, got 4294971392"},
        BadCase{"LayersPastInt", "\"num_hidden_layers\": 32",
                "\"num_hidden_layers\": 4294967328",
                "field 'num_hidden_layers': must be at least 1 and at most 2147483647"},
        BadCase{"HeadsPastInt", "\"num_attention_heads\": 32",
                "\"num_attention_heads\": 4294967328",
                "field 'num_attention_heads': must be at least 1 and at most 2147483647"},
        BadCase{"KvHeadsPastInt", "\"num_key_value_heads\": 8",
                "\"num_key_value_heads\": 4294967304",
                "field 'num_key_value_heads': must be at least 1 and at most 2147483647"},
        BadCase{"IntermediatePastInt", "\"intermediate_size\": 14336",
                "\"intermediate_size\": 18446744073709551615",
                "field 'intermediate_size': must be at least 1 and at most 2147483647, got "
                "18446744073709551615"},
        BadCase{"MaxPositionPastInt64", "\"max_position_embeddings\": 131072",
                "\"max_position_embeddings\": 9223372036854775808",
                "field 'max_position_embeddings': must be at least 1 and at most "
                "9223372036854775807, got 9223372036854775808"},
        BadCase{"RopeOriginalPastInt64", "\"original_max_position_embeddings\": 8192",
                "\"original_max_position_embeddings\": 18446744073709551615",
                "field 'rope_scaling.original_max_position_embeddings': must be at least 1 and "
                "at most 9223372036854775807, got 18446744073709551615"},
        BadCase{"FloatVocab", "\"vocab_size\": 128256", "\"vocab_size\": 128256.0",
                "field 'vocab_size': expected an integer, got 128256.0"},
        BadCase{"BoolVocab", "\"vocab_size\": 128256", "\"vocab_size\": true",
                "field 'vocab_size': expected an integer, got true"},
        BadCase{"EosPastInt", "128009]", "4294967297]",
                "field 'eos_token_id[2]': expected a non-negative integer token id (at most "
                "2147483647), got 4294967297"},
        BadCase{"EosNegative", "128009]", "-1]",
                "field 'eos_token_id[2]': expected a non-negative"},
        BadCase{"BosPastInt", "\"bos_token_id\": 128000", "\"bos_token_id\": 4294967297",
                "field 'bos_token_id': expected a non-negative integer token id (at most "
                "2147483647), got 4294967297"},
        BadCase{"BosFloat", "\"bos_token_id\": 128000", "\"bos_token_id\": 1.0",
                "field 'bos_token_id': expected a non-negative integer"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

TEST(ModelConfigTest, SlidingWindowPastIntIsRefused) {
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"sliding_window\": 32768", "\"sliding_window\": 4294967424"},
           {"\"max_window_layers\": 21", "\"max_window_layers\": 4294967317"}}) {
    const std::string text = absl::StrReplaceAll(
        kQwen2, {{"\"use_sliding_window\": false", "\"use_sliding_window\": true"}, {from, to}});
    absl::StatusOr<ModelConfig> c = ParseModelConfig(text, "config.json");
    ASSERT_FALSE(c.ok()) << to;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("and at most 2147483647")) << to;
  }
}

TEST(ModelConfigTest, HeadDimMustDivideWhenAbsent) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(R"({
    "model_type": "llama", "hidden_size": 100, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 3, "vocab_size": 100})");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("3 does not divide hidden_size (100) and head_dim is not given"));
}

TEST(ModelConfigTest, LayerTypesMustMatchLayerCount) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(R"({
    "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 3, "num_attention_heads": 4, "vocab_size": 100,
    "sliding_window": 8, "layer_types": ["sliding_attention"]})");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("field 'layer_types'"));
}

TEST(ModelConfigTest, TopLevelMustBeObject) {
  EXPECT_FALSE(ParseModelConfig("[1, 2]").ok());
  EXPECT_FALSE(ParseModelConfig("").ok());
}

TEST(ModelConfigTest, TensorParallelMustDivideHeads) {
  ModelConfig c = *ParseModelConfig(kLlama31);  // 32 heads, 8 KV heads
  EXPECT_TRUE(ValidateTensorParallel(c, 1).ok());
  EXPECT_TRUE(ValidateTensorParallel(c, 2).ok());
  EXPECT_TRUE(ValidateTensorParallel(c, 8).ok());
  absl::Status s3 = ValidateTensorParallel(c, 3);
  EXPECT_EQ(s3.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s3.message()), HasSubstr("does not divide num_attention_heads (32)"));
  absl::Status s16 = ValidateTensorParallel(c, 16);  // divides 32 heads, not 8 KV heads
  EXPECT_THAT(std::string(s16.message()), HasSubstr("does not divide num_key_value_heads (8)"));
  EXPECT_THAT(std::string(s16.message()), HasSubstr("not supported"));
  EXPECT_FALSE(ValidateTensorParallel(c, 0).ok());
}

TEST(ModelConfigTest, PaddedVocab) {
  EXPECT_EQ(PaddedVocabSize(100, 1), 100);
  EXPECT_EQ(PaddedVocabSize(100, 4), 100);
  EXPECT_EQ(PaddedVocabSize(101, 4), 104);
  EXPECT_EQ(PaddedVocabSize(151936, 8), 151936);
}

TEST(ModelConfigTest, JsonRoundTrip) {
  ModelConfig c = *ParseModelConfig(kLlama31);
  c.sliding_window = 128;
  c.layer_uses_sliding_window.assign(c.num_layers, false);
  c.layer_uses_sliding_window[3] = true;
  absl::StatusOr<ModelConfig> back = ParseModelConfig(ModelConfigToJson(c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->hidden_size, c.hidden_size);
  EXPECT_EQ(back->num_kv_heads, c.num_kv_heads);
  EXPECT_EQ(back->head_dim, c.head_dim);
  EXPECT_EQ(back->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(back->rope_scaling.factor, 8.0);
  EXPECT_EQ(back->layer_uses_sliding_window, c.layer_uses_sliding_window);
  EXPECT_EQ(back->sliding_window, 128);
  EXPECT_EQ(back->eos_token_ids, c.eos_token_ids);
  EXPECT_FLOAT_EQ(back->rms_norm_eps, c.rms_norm_eps);
}

TEST(ModelConfigTest, BuiltinShapes) {
  absl::StatusOr<ModelConfig> llama8b = BuiltinModelConfig("llama-3.1-8b");
  ASSERT_TRUE(llama8b.ok()) << llama8b.status();
  EXPECT_EQ(llama8b->hidden_size, 4096);
  EXPECT_EQ(llama8b->num_kv_heads, 8);
  EXPECT_EQ(llama8b->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_TRUE(ValidateTensorParallel(*llama8b, 8).ok());
  absl::StatusOr<ModelConfig> llama1b = BuiltinModelConfig("llama-3.2-1b");
  ASSERT_TRUE(llama1b.ok()) << llama1b.status();
  EXPECT_TRUE(llama1b->tie_word_embeddings);
  absl::StatusOr<ModelConfig> qwen = BuiltinModelConfig("qwen3-0.6b");
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_TRUE(qwen->qk_norm);
  EXPECT_EQ(qwen->head_dim, 128);
  absl::StatusOr<ModelConfig> unknown = BuiltinModelConfig("gpt-5");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("known: llama-3.1-8b"));
}

TEST(ModelConfigTest, LoadReadsDirectory) {
  const std::string missing = ::testing::TempDir() + "/no_such_model";
  absl::StatusOr<ModelConfig> c = LoadModelConfig(missing);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace verdict
