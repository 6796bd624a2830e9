// The verdict binary's commands: what each one runs, which flags are its own,
// and the help text that `verdict COMMAND --help` and `verdict --help` print.
#ifndef VERDICT_RUNTIME_CLI_COMMANDS_H_
#define VERDICT_RUNTIME_CLI_COMMANDS_H_

#include <string>
#include <vector>

#include "absl/types/span.h"

namespace verdict {

using CommandFn = int (*)(absl::Span<char* const> positional);

struct Command {
  const char* name;
  const char* summary;
  CommandFn run;
  // The source files whose ABSL_FLAGs belong to this command (the binary has
  // one flag set; a flag's file says which command defined it).
  std::vector<std::string> flag_files;
  // Flags defined elsewhere that this command reads too (by name).
  std::vector<std::string> extra_flags;
  // What the command reads besides its flags; empty: nothing.
  std::string input_format;
};

// Every command, in the order `verdict help` lists them.
const std::vector<Command>& Commands();

// nullptr when there is no such command.
const Command* FindCommand(const std::string& name);

// `verdict COMMAND --help`: the usage line, the command's flags (dashed, with
// their defaults and help) and its input format.
std::string CommandHelp(const Command& command);

// `verdict --help`: the commands and every flag of every command, each flag
// once, grouped by the command (or set of commands) it belongs to.
std::string FullHelp();

// `verdict help`: the commands, one line each.
std::string CommandList();

// True when argv (after the program name) asks for help: --help, -h,
// --helpfull, --helpshort (and their underscore forms).
bool AsksForHelp(absl::Span<char* const> args);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_CLI_COMMANDS_H_
