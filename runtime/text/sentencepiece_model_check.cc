#include "runtime/text/sentencepiece_model_check.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"

namespace verdict {
namespace {

// One field of protobuf wire format.
struct Field {
  uint64_t number = 0;
  int wire_type = 0;
  std::string_view bytes;  // the payload of a length-delimited field
};

// Reads fields one at a time; an error ends the walk.
class WireReader {
 public:
  explicit WireReader(std::string_view data) : data_(data) {}

  bool done() const { return pos_ == data_.size(); }

  absl::Status Next(Field* field) {
    uint64_t tag = 0;
    if (!Varint(&tag)) return Malformed("a field tag");
    field->number = tag >> 3;
    field->wire_type = static_cast<int>(tag & 7);
    if (field->number == 0) return Malformed("a field numbered 0");
    field->bytes = {};
    switch (field->wire_type) {
      case 0: {
        uint64_t v = 0;
        if (!Varint(&v)) return Malformed("a varint");
        return absl::OkStatus();
      }
      case 1:
        return Skip(8);
      case 5:
        return Skip(4);
      case 2: {
        uint64_t n = 0;
        if (!Varint(&n)) return Malformed("a length");
        if (n > data_.size() - pos_) {
          return absl::InvalidArgumentError(absl::StrCat(
              "field ", field->number, " claims ", n, " bytes, ",
              data_.size() - pos_, " are left"));
        }
        field->bytes = data_.substr(pos_, static_cast<size_t>(n));
        pos_ += static_cast<size_t>(n);
        return absl::OkStatus();
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "field ", field->number, " has wire type ", field->wire_type,
            ", which a SentencePiece model does not use"));
    }
  }

 private:
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ == data_.size()) return false;
      const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  absl::Status Skip(size_t n) {
    if (n > data_.size() - pos_) return Malformed("a fixed-size value");
    pos_ += n;
    return absl::OkStatus();
  }
  absl::Status Malformed(const char* what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("not protobuf: ", what, " is cut off at byte ", pos_));
  }

  std::string_view data_;
  size_t pos_ = 0;
};

// ModelProto's fields: its pieces, and those that hold a NormalizerSpec;
// a piece's string; NormalizerSpec's precompiled_charsmap.
constexpr uint64_t kPieces = 1;
constexpr uint64_t kPieceString = 1;
constexpr uint64_t kNormalizerSpec = 3;
constexpr uint64_t kDenormalizerSpec = 5;
constexpr uint64_t kPrecompiledCharsMap = 2;

// A double-array unit, as darts-clone (which SentencePiece embeds) reads it.
uint32_t Label(uint32_t unit) { return unit & ((1u << 31) | 0xffu); }
bool HasLeaf(uint32_t unit) { return ((unit >> 8) & 1u) == 1u; }
uint32_t Offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }
uint32_t Value(uint32_t unit) { return unit & ((1u << 31) - 1); }

}  // namespace

absl::Status CheckPrecompiledCharsMap(std::string_view charsmap) {
  if (charsmap.empty()) return absl::OkStatus();
  // The library's own size check: a trie size, then a trie shorter than the
  // rest.
  if (charsmap.size() <= 4) {
    return absl::InvalidArgumentError("precompiled charsmap is too short");
  }
  const auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(charsmap[i])); };
  const uint32_t trie_size = byte(0) | byte(1) << 8 | byte(2) << 16 | byte(3) << 24;
  const std::string_view rest = charsmap.substr(4);
  if (trie_size >= rest.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "precompiled charsmap's trie size ", trie_size, " leaves no strings (",
        rest.size(), " bytes follow)"));
  }
  const size_t n = trie_size / 4;
  const std::string_view strings = rest.substr(trie_size);
  if (strings.back() != '\0') {
    return absl::InvalidArgumentError(
        "precompiled charsmap's strings do not end in NUL");
  }
  std::vector<uint32_t> units(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t at = 4 + 4 * i;
    units[i] = byte(at) | byte(at + 1) << 8 | byte(at + 2) << 16 | byte(at + 3) << 24;
  }
  const auto broken = [&](size_t node, const char* why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "precompiled charsmap's trie (", n, " units) is broken at unit ", node,
        ": ", why));
  };
  if (n == 0) return broken(0, "there is no root");
  // From each node the search reads units[base ^ c] for any byte c (0 to
  // 255, the same 256-unit block) and, below a leaf, units[base]'s value.
  std::vector<bool> seen(n, false);
  std::vector<size_t> todo = {0};
  seen[0] = true;
  while (!todo.empty()) {
    const size_t node = todo.back();
    todo.pop_back();
    const uint32_t unit = units[node];
    const size_t base = node ^ Offset(unit);
    if ((base | 0xffu) >= n) return broken(node, "its children lie past the end");
    if (HasLeaf(unit) && Value(units[base]) >= strings.size()) {
      return broken(node, "its value points past the strings");
    }
    for (uint32_t c = 0; c < 256; ++c) {
      const size_t child = base ^ c;
      if (Label(units[child]) != c || seen[child]) continue;
      seen[child] = true;
      todo.push_back(child);
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSentencePieceModel(std::string_view model) {
  // A singular field given twice keeps its last value, and a message given
  // twice is merged, so the charsmap the library sees is the last one.
  std::optional<std::string_view> charsmap[2];
  WireReader top(model);
  size_t piece_index = 0;
  while (!top.done()) {
    Field field;
    if (absl::Status s = top.Next(&field); !s.ok()) return s;
    if (field.wire_type != 2) continue;
    if (field.number == kPieces) {
      // The library builds its tries from the pieces as NUL-terminated
      // strings: a NUL inside one cuts the key, and a NUL first makes an
      // empty key, on which darts-clone throws (uncaught: the process
      // ends).
      WireReader inner(field.bytes);
      while (!inner.done()) {
        Field f;
        if (absl::Status s = inner.Next(&f); !s.ok()) return s;
        if (f.number == kPieceString && f.wire_type == 2 &&
            f.bytes.find('\0') != std::string_view::npos) {
          return absl::InvalidArgumentError(
              absl::StrCat("piece ", piece_index, " holds a NUL byte"));
        }
      }
      ++piece_index;
      continue;
    }
    // Every length-delimited field of a ModelProto is a message or a string
    // (pieces, the specs): walk each as a message only where it must be one.
    const int spec = field.number == kNormalizerSpec     ? 0
                     : field.number == kDenormalizerSpec ? 1
                                                         : -1;
    if (spec < 0) continue;
    WireReader inner(field.bytes);
    while (!inner.done()) {
      Field f;
      if (absl::Status s = inner.Next(&f); !s.ok()) return s;
      if (f.number == kPrecompiledCharsMap && f.wire_type == 2) charsmap[spec] = f.bytes;
    }
  }
  for (int spec = 0; spec < 2; ++spec) {
    if (!charsmap[spec].has_value()) continue;
    if (absl::Status s = CheckPrecompiledCharsMap(*charsmap[spec]); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          spec == 0 ? "normalizer_spec: " : "denormalizer_spec: ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace verdict
