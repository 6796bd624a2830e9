#include "runtime/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/bf16.h"
#include "nlohmann/json.hpp"
#include "runtime/base/json_number.h"
#include "runtime/model/float16.h"

namespace verdict {
namespace {

using json = nlohmann::json;

struct DTypeEntry {
  TensorDType dtype;
  absl::string_view name;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {TensorDType::kF64, "F64", 8},       {TensorDType::kF32, "F32", 4},
    {TensorDType::kF16, "F16", 2},       {TensorDType::kBF16, "BF16", 2},
    {TensorDType::kI64, "I64", 8},       {TensorDType::kI32, "I32", 4},
    {TensorDType::kI16, "I16", 2},       {TensorDType::kI8, "I8", 1},
    {TensorDType::kU8, "U8", 1},         {TensorDType::kBool, "BOOL", 1},
    {TensorDType::kF8E4M3, "F8_E4M3", 1}, {TensorDType::kF8E5M2, "F8_E5M2", 1},
};

absl::Status FileError(absl::string_view path, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", reason));
}

absl::Status TensorError(absl::string_view path, absl::string_view tensor, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", tensor, "': ", reason));
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

absl::string_view TensorDTypeName(TensorDType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e.name;
  }
  return "?";
}

absl::StatusOr<TensorDType> ParseTensorDType(absl::string_view name) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.name == name) return e.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", name, "'"));
}

size_t TensorDTypeSize(TensorDType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e.size;
  }
  return 0;
}

int64_t TensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) munmap(const_cast<uint8_t*>(mapping_), mapping_size_);
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return FileError(path, absl::StrCat("cannot stat: ", std::strerror(err)));
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    return FileError(path, absl::StrCat("truncated: ", file_size,
                                        " bytes, too short for the 8-byte header length"));
  }
  void* mapped = mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (mapped == MAP_FAILED) {
    return FileError(path, absl::StrCat("mmap failed: ", std::strerror(map_errno)));
  }
  file->mapping_ = static_cast<const uint8_t*>(mapped);
  file->mapping_size_ = file_size;

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file->mapping_[i];
  if (header_len > file_size - 8) {
    return FileError(path, absl::StrCat("header length ", header_len, " exceeds the ",
                                        file_size - 8, " bytes after the length field"
                                        " (truncated file or not a safetensors file)"));
  }
  const char* header_text = reinterpret_cast<const char*>(file->mapping_ + 8);
  json header = json::parse(header_text, header_text + header_len, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return FileError(path, "header is not a JSON object");
  }
  file->data_ = file->mapping_ + 8 + header_len;
  const uint64_t data_size = file_size - 8 - header_len;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) return FileError(path, "__metadata__ is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) {
          return FileError(path, absl::StrCat("__metadata__ value '", m.key(), "' is not a string"));
        }
        file->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) return TensorError(path, name, "header entry is not an object");
    TensorInfo info;
    info.name = name;
    auto dtype_it = entry.find("dtype");
    if (dtype_it == entry.end() || !dtype_it->is_string()) {
      return TensorError(path, name, "missing or non-string dtype");
    }
    absl::StatusOr<TensorDType> dtype = ParseTensorDType(dtype_it->get<std::string>());
    if (!dtype.ok()) return TensorError(path, name, dtype.status().message());
    info.dtype = *dtype;
    auto shape_it = entry.find("shape");
    if (shape_it == entry.end() || !shape_it->is_array()) {
      return TensorError(path, name, "missing or non-list shape");
    }
    // The format writes dimensions and offsets as unsigned 64-bit, but
    // TensorInfo's shape is int64 and no file reaches 2^63 bytes: a value of
    // 2^63 or above is refused, as a negative one is.
    constexpr int64_t kMaxHeaderInteger = std::numeric_limits<int64_t>::max();
    // Element count with an overflow guard: a corrupt shape must not wrap.
    unsigned __int128 elements = 1;
    for (size_t i = 0; i < shape_it->size(); ++i) {
      absl::StatusOr<int64_t> d =
          JsonInteger((*shape_it)[i], absl::StrCat("shape[", i, "]"), 0, kMaxHeaderInteger);
      if (!d.ok()) {
        return TensorError(path, name, absl::StrCat("bad shape dimension: ", d.status().message()));
      }
      info.shape.push_back(*d);
      elements *= static_cast<uint64_t>(*d);
      if (elements > (static_cast<unsigned __int128>(1) << 62)) {
        return TensorError(path, name, "shape too large");
      }
    }
    auto off_it = entry.find("data_offsets");
    if (off_it == entry.end() || !off_it->is_array() || off_it->size() != 2) {
      return TensorError(path, name, "data_offsets must be two non-negative integers");
    }
    uint64_t offsets[2];
    for (size_t i = 0; i < 2; ++i) {
      absl::StatusOr<int64_t> offset =
          JsonInteger((*off_it)[i], absl::StrCat("data_offsets[", i, "]"), 0, kMaxHeaderInteger);
      if (!offset.ok()) {
        return TensorError(path, name,
                           absl::StrCat("data_offsets must be two non-negative integers: ",
                                        offset.status().message()));
      }
      offsets[i] = static_cast<uint64_t>(*offset);
    }
    info.data_begin = offsets[0];
    info.data_end = offsets[1];
    if (info.data_end < info.data_begin) {
      return TensorError(path, name, absl::StrCat("data_offsets [", info.data_begin, ", ",
                                                  info.data_end, "] end before they begin"));
    }
    const unsigned __int128 expected = elements * TensorDTypeSize(info.dtype);
    if (expected != info.data_end - info.data_begin) {
      return TensorError(
          path, name,
          absl::StrCat("data_offsets [", info.data_begin, ", ", info.data_end, "] hold ",
                       info.data_end - info.data_begin, " bytes but ",
                       TensorDTypeName(info.dtype), " ", ShapeString(info.shape), " needs ",
                       static_cast<uint64_t>(expected)));
    }
    if (info.data_end > data_size) {
      return TensorError(path, name,
                         absl::StrCat("truncated file: the tensor ends at data byte ",
                                      info.data_end, " but the file holds only ", data_size,
                                      " data bytes"));
    }
    file->tensors_.push_back(std::move(info));
  }

  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : file->tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->data_begin != b->data_begin ? a->data_begin < b->data_begin
                                          : a->data_end < b->data_end;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->data_begin < by_offset[i - 1]->data_end) {
      return TensorError(path, by_offset[i]->name,
                         absl::StrCat("bytes overlap tensor '", by_offset[i - 1]->name, "'"));
    }
  }
  for (size_t i = 0; i < file->tensors_.size(); ++i) file->index_[file->tensors_[i].name] = i;
  return file;
}

const TensorInfo* SafetensorsFile::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::Span<const uint8_t> SafetensorsFile::Data(const TensorInfo& tensor) const {
  return absl::Span<const uint8_t>(data_ + tensor.data_begin, tensor.data_end - tensor.data_begin);
}

absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(
    const std::string& dir) {
  namespace fs = std::filesystem;
  auto checkpoint = std::make_unique<SafetensorsCheckpoint>();
  checkpoint->dir_ = dir;
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    checkpoint->description_ = index_path.string();
    absl::StatusOr<std::string> text = ReadWholeFile(index_path.string());
    if (!text.ok()) return text.status();
    json index = json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded() || !index.is_object()) {
      return FileError(index_path.string(), "not a JSON object");
    }
    auto map_it = index.find("weight_map");
    if (map_it == index.end() || !map_it->is_object()) {
      return FileError(index_path.string(), "missing weight_map object");
    }
    std::map<std::string, size_t> file_ids;
    for (auto it = map_it->begin(); it != map_it->end(); ++it) {
      if (!it.value().is_string()) {
        return FileError(index_path.string(),
                         absl::StrCat("weight_map entry '", it.key(), "' is not a file name"));
      }
      const std::string file_name = it.value().get<std::string>();
      if (file_name.empty() || file_name.find('/') != std::string::npos) {
        return FileError(index_path.string(),
                         absl::StrCat("weight_map entry '", it.key(), "' names file '", file_name,
                                      "' outside the checkpoint directory"));
      }
      auto [fit, inserted] = file_ids.emplace(file_name, checkpoint->files_.size());
      if (inserted) {
        absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
            SafetensorsFile::Open((fs::path(dir) / file_name).string());
        if (!file.ok()) return file.status();
        checkpoint->files_.push_back(*std::move(file));
      }
      const SafetensorsFile& file = *checkpoint->files_[fit->second];
      if (file.Find(it.key()) == nullptr) {
        return TensorError(file.path(), it.key(),
                           absl::StrCat("listed in ", index_path.filename().string(),
                                        " but not present in the file"));
      }
      checkpoint->file_of_tensor_[it.key()] = fit->second;
    }
  } else if (fs::exists(single_path, ec)) {
    checkpoint->description_ = single_path.string();
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
        SafetensorsFile::Open(single_path.string());
    if (!file.ok()) return file.status();
    checkpoint->files_.push_back(*std::move(file));
    for (const TensorInfo& t : checkpoint->files_[0]->tensors()) {
      checkpoint->file_of_tensor_[t.name] = 0;
    }
  } else {
    return absl::NotFoundError(absl::StrCat(
        dir, ": neither model.safetensors nor model.safetensors.index.json exists"));
  }
  return checkpoint;
}

absl::StatusOr<SafetensorsCheckpoint::Entry> SafetensorsCheckpoint::Find(
    absl::string_view name) const {
  auto it = file_of_tensor_.find(name);
  if (it == file_of_tensor_.end()) {
    return absl::NotFoundError(
        absl::StrCat(description_, ": tensor '", name, "': missing from the checkpoint"));
  }
  const SafetensorsFile* file = files_[it->second].get();
  return Entry{file, file->Find(name)};
}

std::vector<std::string> SafetensorsCheckpoint::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, id] : file_of_tensor_) names.push_back(name);
  return names;
}

void SafetensorsWriter::Add(std::string name, TensorDType dtype, std::vector<int64_t> shape,
                            std::vector<uint8_t> bytes) {
  tensors_.push_back(Pending{std::move(name), dtype, std::move(shape), std::move(bytes)});
}

void SafetensorsWriter::AddFloat32(std::string name, std::vector<int64_t> shape,
                                   absl::Span<const float> values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  Add(std::move(name), TensorDType::kF32, std::move(shape), std::move(bytes));
}

void SafetensorsWriter::AddBFloat16(std::string name, std::vector<int64_t> shape,
                                    absl::Span<const float> values) {
  std::vector<uint8_t> bytes(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t h = FloatToBf16(values[i]);
    std::memcpy(&bytes[2 * i], &h, 2);
  }
  Add(std::move(name), TensorDType::kBF16, std::move(shape), std::move(bytes));
}

void SafetensorsWriter::AddFloat16(std::string name, std::vector<int64_t> shape,
                                   absl::Span<const float> values) {
  std::vector<uint8_t> bytes(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t h = FloatToFloat16(values[i]);
    std::memcpy(&bytes[2 * i], &h, 2);
  }
  Add(std::move(name), TensorDType::kF16, std::move(shape), std::move(bytes));
}

uint64_t SafetensorsWriter::data_bytes() const {
  uint64_t total = 0;
  for (const Pending& t : tensors_) total += t.bytes.size();
  return total;
}

absl::Status SafetensorsWriter::Write(const std::string& path) const {
  json header = json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Pending& t : tensors_) {
    header[t.name] = {{"dtype", std::string(TensorDTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned.
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create"));
  uint8_t len_bytes[8];
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(len >> (8 * i));
  out.write(reinterpret_cast<const char*>(len_bytes), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const Pending& t : tensors_) {
    out.write(reinterpret_cast<const char*>(t.bytes.data()),
              static_cast<std::streamsize>(t.bytes.size()));
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

absl::Status WriteSafetensorsIndex(const std::string& dir,
                                   const std::map<std::string, std::string>& weight_map,
                                   uint64_t total_size) {
  json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  const std::string path = (std::filesystem::path(dir) / "model.safetensors.index.json").string();
  std::ofstream out(path, std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create"));
  out << index.dump(2) << "\n";
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

absl::Status ConvertToFloat32(TensorDType dtype, const uint8_t* src, size_t count, float* dst) {
  switch (dtype) {
    case TensorDType::kF32:
      std::memcpy(dst, src, count * 4);
      return absl::OkStatus();
    case TensorDType::kBF16:
      for (size_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = Bf16ToFloat(h);
      }
      return absl::OkStatus();
    case TensorDType::kF16:
      for (size_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = Float16ToFloat(h);
      }
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "dtype ", TensorDTypeName(dtype), " is not a supported weight dtype (BF16, F16, F32)"));
  }
}

}  // namespace verdict
