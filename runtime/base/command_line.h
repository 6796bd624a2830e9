// Command-line helpers shared by the verdict binary's commands.
#ifndef VERDICT_RUNTIME_BASE_COMMAND_LINE_H_
#define VERDICT_RUNTIME_BASE_COMMAND_LINE_H_

#include <string>
#include <vector>

namespace verdict {

// Copies argv, rewriting dashes in flag names to underscores
// (`--cost-table=x` becomes `--cost_table=x`), so that the documented
// dashed spellings reach absl's flag parser. Values are left untouched, and
// everything after a bare `--` is passed through as is.
std::vector<std::string> NormalizeFlagNames(int argc, char** argv);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_BASE_COMMAND_LINE_H_
