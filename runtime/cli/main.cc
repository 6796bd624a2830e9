// The verdict binary: `verdict <command> [flags]`. One flag set for the whole
// binary (absl flags); `verdict --help` lists every flag, `verdict help`
// lists the commands. Flag names accept dashes or underscores
// (`--cost-table` and `--cost_table` are the same flag).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/verify_case.h"
#include "runtime/cli/bench_command.h"
#include "runtime/base/command_line.h"
#include "runtime/cli/generate_command.h"
#include "runtime/cli/profile_command.h"
#include "runtime/cli/serve_command.h"
#include "scheduler/plan_command.h"

namespace verdict {
namespace {

using CommandFn = int (*)(absl::Span<char* const> positional);

struct Command {
  const char* name;
  const char* summary;
  CommandFn run;
};

int RunHelp(absl::Span<char* const> positional);

// Every command of the binary, in the order `verdict help` lists them.
const Command kCommands[] = {
    {"help", "list the commands", &RunHelp},
    {"serve", "serve the OpenAI-compatible API (rank 0) on the engine (every rank)",
     &RunServeCommand},
    {"generate", "run the engine offline on one prompt (--prompt, --max-tokens)",
     &RunGenerateCommand},
    {"sample", "replay one sampler step from a JSON case (--case, --trials)", &RunSampleCommand},
    {"plan", "print the verify plan for one step (--cost-table, --input, --mode)", &RunPlanCommand},
    {"bench", "load-test a running server over a concurrency sweep (--bench-url)",
     &RunBenchCommand},
    {"profile", "measure the cost table on the engine (--profile-batch-sizes, --profile-out)",
     &RunProfileCommand},
};

int RunHelp(absl::Span<char* const>) {
  std::printf("%s\n\ncommands:\n", absl::ProgramUsageMessage().data());
  for (const Command& c : kCommands) std::printf("  %-10s %s\n", c.name, c.summary);
  std::printf("\n`verdict --help` lists every flag.\n");
  return 0;
}

}  // namespace
}  // namespace verdict

int main(int argc, char** argv) {
  // --help lists verdict's own flags (from every command), not Abseil's.
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return !absl::StrContains(file, "absl/");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "verdict: speculative decoding serving runtime.\n"
      "usage: verdict <command> [--flag=value ...]");
  std::vector<std::string> storage = verdict::NormalizeFlagNames(argc, argv);
  std::vector<char*> args;
  for (std::string& s : storage) args.push_back(s.data());

  // The command is the first argument that is not a flag.
  std::string command = "help";
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i][0] != '-') {
      command = args[i];
      args.erase(args.begin() + static_cast<long>(i));
      break;
    }
  }
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  for (const verdict::Command& c : verdict::kCommands) {
    if (command == c.name) {
      return c.run(absl::MakeConstSpan(positional).subspan(1));
    }
  }
  std::fprintf(stderr, "verdict: unknown command '%s' (try `verdict help`)\n", command.c_str());
  return 2;
}
