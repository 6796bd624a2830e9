#include "scheduler/cost_table_catalog.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace verdict {
namespace {

constexpr std::uintmax_t kMaxTableBytes = std::uintmax_t{16} << 20;

// Everything of the key but the GPU: the same models, TP degree and gamma.
bool MatchesOnAnyDevice(const CostTable& table, const CostTableKey& key) {
  return table.origin().has_value() && table.origin()->target == key.origin.target &&
         table.origin()->draft == key.origin.draft && table.measured_tp() == key.tp &&
         table.has_draft_split() && table.draft_passes() == key.gamma;
}

bool Matches(const CostTable& table, const CostTableKey& key) {
  return MatchesOnAnyDevice(table, key) && table.origin()->device == key.origin.device;
}

// Lower-case letters and digits of `text`, other runs as one '-'.
std::string Slug(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (absl::ascii_isalnum(c)) {
      out.push_back(absl::ascii_tolower(c));
    } else if (!out.empty() && out.back() != '-') {
      out.push_back('-');
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "x" : out;
}

}  // namespace

std::string DescribeCostTableKey(const CostTableKey& key) {
  return absl::StrCat(key.origin.device, ", target ", key.origin.target, ", draft ",
                      key.origin.draft, ", TP ", key.tp, ", ", key.gamma, " draft tokens");
}

std::string CostTableFileName(const CostTableKey& key) {
  return absl::StrCat(Slug(key.origin.device), "_", Slug(key.origin.target), "_draft_",
                      Slug(key.origin.draft), "_tp", key.tp, "_gamma", key.gamma, ".json");
}

CostTableSearch FindCostTable(absl::Span<const std::string> dirs, const CostTableKey& key) {
  namespace fs = std::filesystem;
  CostTableSearch search;
  for (const std::string& dir : dirs) {
    std::error_code error;
    if (dir.empty() || !fs::is_directory(dir, error)) continue;
    std::vector<fs::path> files;
    for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
      std::error_code e;
      if (it->path().extension() == ".json" && it->is_regular_file(e)) files.push_back(it->path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) {
      std::error_code e;
      const std::uintmax_t size = fs::file_size(file, e);
      if (e || size > kMaxTableBytes) {
        search.refused.push_back(absl::StrCat(file.string(), ": ",
                                              e ? e.message() : "larger than 16 MiB"));
        continue;
      }
      absl::StatusOr<CostTable> table = CostTable::Load(file.string());
      if (!table.ok()) {
        search.refused.push_back(std::string(table.status().message()));
        continue;
      }
      ++search.tables_seen;
      if (Matches(*table, key)) {
        search.path = file.string();
        search.table = *std::move(table);
        search.other_device = false;
        return search;
      }
      if (!search.table.has_value() && MatchesOnAnyDevice(*table, key)) {
        // Kept in case no table of this GPU follows.
        search.path = file.string();
        search.table = *std::move(table);
        search.other_device = true;
      }
    }
  }
  return search;
}

}  // namespace verdict
