// `--cost-table auto`: the cost table a server plans with when the operator
// names none. Tables live as JSON files in a list of directories (the
// operator's cache of `verdict profile` output first, then the tables the
// project ships in deploy/cost_tables); the first file, directories in
// order and file names sorted within each, that was measured on this
// server's key is used: the same GPU, the same target and draft shapes, the
// same TP degree, and draft_passes equal to the server's gamma (a table of
// another gamma measured other steps). A table without "measured_on" is
// never picked: it could be from any machine.
//
// Where no table was measured on this GPU, the first one of the same
// models, TP degree and gamma measured on another GPU is taken instead, and
// said to be: the planners choose by comparing a step's costs with each
// other (expected tokens per second of each choice), so a table scaled by a
// constant gives the same plans, and another GPU's relative costs of a
// draft pass, a verify row and a request are a far closer guess than no
// table at all, which drafts every request at every batch size.
#ifndef VERDICT_SCHEDULER_COST_TABLE_CATALOG_H_
#define VERDICT_SCHEDULER_COST_TABLE_CATALOG_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "scheduler/cost_table.h"

namespace verdict {

struct CostTableKey {
  CostTableOrigin origin;
  int tp = 1;
  int gamma = 5;
};

// "NVIDIA H200, target <shape>, draft <shape>, TP 1, 5 draft tokens".
std::string DescribeCostTableKey(const CostTableKey& key);

// A file name for a table of `key` (letters, digits, '-', '.' and '_'
// only), for `verdict profile` to write into a catalog directory.
std::string CostTableFileName(const CostTableKey& key);

struct CostTableSearch {
  std::optional<std::string> path;  // the table picked, if any
  std::optional<CostTable> table;
  // The table picked was measured on another GPU (no table of this one).
  bool other_device = false;
  int tables_seen = 0;  // JSON files that loaded, picked or not
  // Files that did not load: "path: reason", for the log.
  std::vector<std::string> refused;
};

// Looks through `dirs` (a missing directory is skipped) for the first table
// of `key`. Reads regular files named *.json of at most 16 MiB.
CostTableSearch FindCostTable(absl::Span<const std::string> dirs, const CostTableKey& key);

}  // namespace verdict

#endif  // VERDICT_SCHEDULER_COST_TABLE_CATALOG_H_
