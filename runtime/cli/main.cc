// The verdict binary: `verdict <command> [flags]`. One flag set for the whole
// binary (absl flags); `verdict help` lists the commands, `verdict --help`
// every flag, `verdict COMMAND --help` one command's flags and input (each
// exits 0). Flag names accept dashes or underscores (`--cost-table` and
// `--cost_table` are the same flag).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/types/span.h"
#include "runtime/base/command_line.h"
#include "runtime/cli/commands.h"

int main(int argc, char** argv) {
  std::vector<std::string> storage = verdict::NormalizeFlagNames(argc, argv);
  std::vector<char*> args;
  for (std::string& s : storage) args.push_back(s.data());

  // The command is the first argument that is not a flag.
  std::string command_name;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i][0] != '-') {
      command_name = args[i];
      args.erase(args.begin() + static_cast<long>(i));
      break;
    }
  }
  const verdict::Command* command =
      verdict::FindCommand(command_name.empty() ? "help" : command_name);
  if (command == nullptr) {
    std::fprintf(stderr, "verdict: unknown command '%s' (try `verdict help`)\n",
                 command_name.c_str());
    return 2;
  }
  // Help is answered here, before absl's parser (whose --help lists every
  // flag of the binary and exits 1).
  if (verdict::AsksForHelp(absl::MakeConstSpan(args).subspan(1))) {
    const std::string help = command_name.empty() || command_name == "help"
                                 ? verdict::FullHelp()
                                 : verdict::CommandHelp(*command);
    std::fputs(help.c_str(), stdout);
    return 0;
  }
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  return command->run(absl::MakeConstSpan(positional).subspan(1));
}
