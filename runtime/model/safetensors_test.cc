#include "runtime/model/safetensors.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/bf16.h"
#include "runtime/model/float16.h"

namespace verdict {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string TestDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/safetensors_test_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A file with an arbitrary header and data section, for malformed cases.
void WriteRaw(const std::string& path, const std::string& header, size_t data_bytes,
              uint64_t declared_header_len = UINT64_MAX) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  uint64_t len = declared_header_len == UINT64_MAX ? header.size() : declared_header_len;
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(len >> (8 * i)));
  out << header;
  out << std::string(data_bytes, '\0');
}

std::string ErrorOf(const std::string& path) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(path);
  EXPECT_FALSE(f.ok());
  return f.ok() ? "" : std::string(f.status().message());
}

TEST(Float16Test, HalfRoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Float16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToFloat16(f), h) << std::hex << h;
  }
}

TEST(Float16Test, HalfRounding) {
  EXPECT_EQ(Float16ToFloat(FloatToFloat16(65519.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(Float16ToFloat(FloatToFloat16(65520.0f))));
  EXPECT_EQ(Float16ToFloat(FloatToFloat16(std::ldexp(1.0f, -24))), std::ldexp(1.0f, -24));
  EXPECT_EQ(FloatToFloat16(std::ldexp(1.0f, -25)), 0);  // tie to even: 0
  EXPECT_EQ(FloatToFloat16(3 * std::ldexp(1.0f, -26)), 1);  // 0.75 ulp rounds up
  EXPECT_EQ(FloatToFloat16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even: 1.0
  EXPECT_EQ(FloatToFloat16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie to even: up
  EXPECT_EQ(Float16ToFloat(FloatToFloat16(-2.5f)), -2.5f);
}

TEST(SafetensorsTest, RoundTripsEachDType) {
  const std::string dir = TestDir("roundtrip");
  const std::vector<float> values = {1.5f, -2.25f, 0.0f, 1.0f / 3.0f, 1e-3f, -7.0f};
  SafetensorsWriter w;
  w.AddFloat32("a.f32", {2, 3}, values);
  w.AddBFloat16("b.bf16", {3, 2}, values);
  w.AddFloat16("c.f16", {6}, values);
  w.Add("d.i32", TensorDType::kI32, {2}, {1, 0, 0, 0, 2, 0, 0, 0});
  w.Add("e.empty", TensorDType::kF32, {0, 4}, {});
  w.SetMetadata("format", "pt");
  const std::string path = dir + "/m.safetensors";
  ASSERT_TRUE(w.Write(path).ok());

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 5u);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");

  const TensorInfo* a = (*f)->Find("a.f32");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, TensorDType::kF32);
  EXPECT_THAT(a->shape, ElementsAre(2, 3));
  std::vector<float> back(6);
  ASSERT_TRUE(ConvertToFloat32(a->dtype, (*f)->Data(*a).data(), 6, back.data()).ok());
  EXPECT_EQ(back, values);

  const TensorInfo* b = (*f)->Find("b.bf16");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, TensorDType::kBF16);
  EXPECT_EQ((*f)->Data(*b).size(), 12u);
  ASSERT_TRUE(ConvertToFloat32(b->dtype, (*f)->Data(*b).data(), 6, back.data()).ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(back[i], RoundToBf16(values[i]));
  EXPECT_EQ(back[0], 1.5f);
  EXPECT_EQ(back[5], -7.0f);

  const TensorInfo* c = (*f)->Find("c.f16");
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(ConvertToFloat32(c->dtype, (*f)->Data(*c).data(), 6, back.data()).ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(back[i], Float16ToFloat(FloatToFloat16(values[i])));
  EXPECT_NEAR(back[3], 1.0f / 3.0f, 1e-3);

  const TensorInfo* d = (*f)->Find("d.i32");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->dtype, TensorDType::kI32);
  EXPECT_FALSE(ConvertToFloat32(d->dtype, (*f)->Data(*d).data(), 2, back.data()).ok());

  const TensorInfo* e = (*f)->Find("e.empty");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->num_elements(), 0);
  EXPECT_EQ((*f)->Find("missing"), nullptr);
}

TEST(SafetensorsTest, DataSectionIsEightByteAligned) {
  const std::string dir = TestDir("align");
  SafetensorsWriter w;
  w.AddFloat32("x", {1}, std::vector<float>{1.0f});
  ASSERT_TRUE(w.Write(dir + "/m.safetensors").ok());
  std::ifstream in(dir + "/m.safetensors", std::ios::binary);
  uint8_t len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
  EXPECT_EQ((8 + len) % 8, 0u);
}

TEST(SafetensorsTest, TruncatedFileNamesFileAndTensor) {
  const std::string dir = TestDir("truncated");
  SafetensorsWriter w;
  w.AddFloat32("first", {4}, std::vector<float>(4, 1.0f));
  w.AddFloat32("last", {8}, std::vector<float>(8, 2.0f));
  const std::string path = dir + "/m.safetensors";
  ASSERT_TRUE(w.Write(path).ok());
  fs::resize_file(path, fs::file_size(path) - 5);
  const std::string error = ErrorOf(path);
  EXPECT_THAT(error, HasSubstr(path));
  EXPECT_THAT(error, HasSubstr("tensor 'last'"));
  EXPECT_THAT(error, HasSubstr("truncated"));
}

TEST(SafetensorsTest, TooShortForHeaderLength) {
  const std::string dir = TestDir("short");
  const std::string path = dir + "/m.safetensors";
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_THAT(ErrorOf(path), HasSubstr("too short for the 8-byte header length"));
}

TEST(SafetensorsTest, HeaderLengthBeyondFile) {
  const std::string dir = TestDir("headerlen");
  const std::string path = dir + "/m.safetensors";
  WriteRaw(path, "{}", 0, /*declared_header_len=*/1000);
  EXPECT_THAT(ErrorOf(path), HasSubstr("header length 1000 exceeds"));
}

TEST(SafetensorsTest, HeaderNotJson) {
  const std::string dir = TestDir("badjson");
  const std::string path = dir + "/m.safetensors";
  WriteRaw(path, "{\"a\": [1, 2", 0);
  EXPECT_THAT(ErrorOf(path), HasSubstr("header is not a JSON object"));
}

TEST(SafetensorsTest, UnknownDType) {
  const std::string dir = TestDir("dtype");
  const std::string path = dir + "/m.safetensors";
  WriteRaw(path, R"({"w": {"dtype": "F128", "shape": [2], "data_offsets": [0, 32]}})", 32);
  const std::string error = ErrorOf(path);
  EXPECT_THAT(error, HasSubstr("tensor 'w'"));
  EXPECT_THAT(error, HasSubstr("unknown dtype 'F128'"));
}

TEST(SafetensorsTest, ShapeDisagreesWithByteLength) {
  const std::string dir = TestDir("shape");
  const std::string path = dir + "/m.safetensors";
  // BF16 [2, 3] needs 12 bytes; the offsets give 24 (as if it were F32).
  WriteRaw(path, R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 24]}})", 24);
  const std::string error = ErrorOf(path);
  EXPECT_THAT(error, HasSubstr("tensor 'w'"));
  EXPECT_THAT(error, HasSubstr("hold 24 bytes but BF16 [2, 3] needs 12"));
}

TEST(SafetensorsTest, OverlappingTensors) {
  const std::string dir = TestDir("overlap");
  const std::string path = dir + "/m.safetensors";
  WriteRaw(path,
           R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
               "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
           16);
  EXPECT_THAT(ErrorOf(path), HasSubstr("overlap"));
}

TEST(SafetensorsTest, OffsetsBackwards) {
  const std::string dir = TestDir("backwards");
  const std::string path = dir + "/m.safetensors";
  WriteRaw(path, R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 16);
  EXPECT_THAT(ErrorOf(path), HasSubstr("end before they begin"));
}

TEST(SafetensorsTest, MissingFields) {
  const std::string dir = TestDir("fields");
  const std::string path = dir + "/m.safetensors";
  WriteRaw(path, R"({"a": {"dtype": "F32", "data_offsets": [0, 4]}})", 4);
  EXPECT_THAT(ErrorOf(path), HasSubstr("missing or non-list shape"));
  WriteRaw(path, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4);
  EXPECT_THAT(ErrorOf(path), HasSubstr("data_offsets must be two"));
  WriteRaw(path, R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4);
  EXPECT_THAT(ErrorOf(path), HasSubstr("bad shape dimension"));
}

// Offsets and dimensions are read as int64 (no file reaches 2^63 bytes):
// 2^63 and above, negative values and floats are refused, naming the entry
// and the range.
TEST(SafetensorsTest, RefusesIntegersPastInt64) {
  const std::string dir = TestDir("ranges");
  const std::string path = dir + "/m.safetensors";
  const struct {
    const char* header;
    const char* message;
  } cases[] = {
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 9223372036854775808]}})",
       "tensor 'a': data_offsets must be two non-negative integers: data_offsets[1]: expected an "
       "integer in [0, 9223372036854775807], got 9223372036854775808"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [18446744073709551615, 4]}})",
       "data_offsets[0]: expected an integer in [0, 9223372036854775807], got "
       "18446744073709551615"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})",
       "data_offsets[0]: expected an integer in [0, 9223372036854775807], got -4"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4.0]}})",
       "data_offsets[1]: expected an integer in [0, 9223372036854775807], got 4.0"},
      {R"({"a": {"dtype": "F32", "shape": [1, 9223372036854775808], "data_offsets": [0, 4]}})",
       "tensor 'a': bad shape dimension: shape[1]: expected an integer in [0, "
       "9223372036854775807], got 9223372036854775808"},
      {R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
       "bad shape dimension: shape[0]: expected an integer in [0, 9223372036854775807], got -1"},
      {R"({"a": {"dtype": "F32", "shape": [true], "data_offsets": [0, 4]}})",
       "bad shape dimension: shape[0]: expected an integer in [0, 9223372036854775807], got true"},
  };
  for (const auto& c : cases) {
    WriteRaw(path, c.header, 4);
    const std::string error = ErrorOf(path);
    EXPECT_THAT(error, HasSubstr(path)) << c.header;
    EXPECT_THAT(error, HasSubstr(c.message)) << c.header;
  }
}

TEST(SafetensorsTest, MissingFile) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f =
      SafetensorsFile::Open(::testing::TempDir() + "/nope.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
}

TEST(SafetensorsCheckpointTest, SingleFile) {
  const std::string dir = TestDir("ckpt_single");
  SafetensorsWriter w;
  w.AddFloat32("x", {2}, std::vector<float>{1, 2});
  ASSERT_TRUE(w.Write(dir + "/model.safetensors").ok());
  absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> c = SafetensorsCheckpoint::Open(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->Find("x").ok());
  absl::StatusOr<SafetensorsCheckpoint::Entry> missing = (*c)->Find("y");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(dir + "/model.safetensors"));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("tensor 'y'"));
}

TEST(SafetensorsCheckpointTest, ShardedIndex) {
  const std::string dir = TestDir("ckpt_sharded");
  SafetensorsWriter w1, w2;
  w1.AddFloat32("a", {2}, std::vector<float>{1, 2});
  w2.AddBFloat16("b", {1}, std::vector<float>{3});
  ASSERT_TRUE(w1.Write(dir + "/model-00001-of-00002.safetensors").ok());
  ASSERT_TRUE(w2.Write(dir + "/model-00002-of-00002.safetensors").ok());
  ASSERT_TRUE(WriteSafetensorsIndex(dir,
                                    {{"a", "model-00001-of-00002.safetensors"},
                                     {"b", "model-00002-of-00002.safetensors"}},
                                    10)
                  .ok());
  absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> c = SafetensorsCheckpoint::Open(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<SafetensorsCheckpoint::Entry> b = (*c)->Find("b");
  ASSERT_TRUE(b.ok());
  EXPECT_THAT(b->file->path(), HasSubstr("model-00002-of-00002"));
  float value = 0;
  ASSERT_TRUE(ConvertToFloat32(b->tensor->dtype, b->file->Data(*b->tensor).data(), 1, &value).ok());
  EXPECT_EQ(value, 3.0f);
  EXPECT_THAT((*c)->TensorNames(), ElementsAre("a", "b"));
}

TEST(SafetensorsCheckpointTest, IndexNamesTensorAbsentFromFile) {
  const std::string dir = TestDir("ckpt_badindex");
  SafetensorsWriter w;
  w.AddFloat32("a", {2}, std::vector<float>{1, 2});
  ASSERT_TRUE(w.Write(dir + "/part1.safetensors").ok());
  ASSERT_TRUE(
      WriteSafetensorsIndex(dir, {{"a", "part1.safetensors"}, {"b", "part1.safetensors"}}, 8)
          .ok());
  absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> c = SafetensorsCheckpoint::Open(dir);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("part1.safetensors: tensor 'b'"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("not present in the file"));
}

TEST(SafetensorsCheckpointTest, IndexNamesMissingFile) {
  const std::string dir = TestDir("ckpt_missingfile");
  ASSERT_TRUE(WriteSafetensorsIndex(dir, {{"a", "gone.safetensors"}}, 8).ok());
  absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> c = SafetensorsCheckpoint::Open(dir);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("gone.safetensors"));
}

TEST(SafetensorsCheckpointTest, TruncatedShardIsRefused) {
  const std::string dir = TestDir("ckpt_truncshard");
  SafetensorsWriter w;
  w.AddFloat32("a", {64}, std::vector<float>(64, 1.0f));
  ASSERT_TRUE(w.Write(dir + "/p.safetensors").ok());
  fs::resize_file(dir + "/p.safetensors", fs::file_size(dir + "/p.safetensors") - 1);
  ASSERT_TRUE(WriteSafetensorsIndex(dir, {{"a", "p.safetensors"}}, 256).ok());
  absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> c = SafetensorsCheckpoint::Open(dir);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("p.safetensors: tensor 'a'"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("truncated"));
}

TEST(SafetensorsCheckpointTest, EmptyDirectory) {
  const std::string dir = TestDir("ckpt_empty");
  absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> c = SafetensorsCheckpoint::Open(dir);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("neither model.safetensors"));
}

}  // namespace
}  // namespace verdict
