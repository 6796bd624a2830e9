#include "runtime/cli/commands.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "kernels/verify_case.h"
#include "runtime/cli/bench_command.h"
#include "runtime/cli/generate_command.h"
#include "runtime/cli/profile_command.h"
#include "runtime/cli/serve_command.h"
#include "runtime/cli/tokenize_command.h"
#include "scheduler/plan_command.h"

namespace verdict {
namespace {

constexpr char kEngineFlags[] = "runtime/cli/engine_flags.cc";

constexpr char kServeInput[] =
    R"(HTTP on --host:--port (rank 0; the other ranks run the engine only):
  POST /v1/completions, /v1/chat/completions   OpenAI request bodies (JSON)
  POST /tokenize, /detokenize                  vLLM's request bodies (JSON)
  GET  /v1/models, /health, /ready
  GET  /metrics on --metrics-port (Prometheus text format))";

constexpr char kBenchInput[] =
    R"(--bench-prompts FILE: JSON Lines, one {"prompt": ...} a line, where the
prompt is a non-empty string or a non-empty list of token ids; blank lines
are skipped, other fields ignored. Writes PREFIX.json, PREFIX.csv and
PREFIX.md (--bench-out).)";

constexpr char kProfileInput[] =
    R"(The engine's flags choose the models and the mode, as for `verdict serve`.
Writes the cost table (JSON, scheduler/cost_table.h) to --profile-out.)";

int RunHelp(absl::Span<char* const>) {
  std::fputs(CommandList().c_str(), stdout);
  return 0;
}

// `--cost_table` as the documented spelling `--cost-table`.
std::string Dashed(absl::string_view name) { return absl::StrReplaceAll(name, {{"_", "-"}}); }

std::string DescribeFlag(const absl::CommandLineFlag& flag) {
  std::string out = absl::StrCat("  --", Dashed(flag.Name()));
  const std::string def = flag.DefaultValue();
  absl::StrAppend(&out, def.empty() ? "  (default: empty)" : absl::StrCat("  (default: ", def, ")"),
                  "\n");
  for (absl::string_view line : absl::StrSplit(flag.Help(), '\n')) {
    absl::StrAppend(&out, "      ", line, "\n");
  }
  return out;
}

bool EndsWithAny(absl::string_view file, const std::vector<std::string>& suffixes) {
  for (const std::string& s : suffixes) {
    if (absl::EndsWith(file, s)) return true;
  }
  return false;
}

// The command's flags, sorted by name.
std::vector<const absl::CommandLineFlag*> FlagsOf(const Command& command) {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    const bool extra = std::find(command.extra_flags.begin(), command.extra_flags.end(),
                                 std::string(name)) != command.extra_flags.end();
    if (extra || EndsWithAny(flag->Filename(), command.flag_files)) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  return flags;
}

}  // namespace

const std::vector<Command>& Commands() {
  static const std::vector<Command>* commands = new std::vector<Command>{
      {"help", "list the commands", &RunHelp, {}, {}, ""},
      {"serve", "serve the OpenAI-compatible API (rank 0) on the engine (every rank)",
       &RunServeCommand, {"runtime/cli/serve_command.cc", kEngineFlags}, {}, kServeInput},
      {"generate", "run the engine offline on one prompt (--prompt, --max-tokens)",
       &RunGenerateCommand, {"runtime/cli/generate_command.cc", kEngineFlags}, {}, ""},
      {"sample", "replay one sampler step from a JSON case (--case, --trials)", &RunSampleCommand,
       {"kernels/verify_case.cc"}, {}, kSampleCaseFormat},
      {"plan", "print the verify plan for one step (--cost-table, --input, --mode)",
       &RunPlanCommand, {"scheduler/plan_command.cc"}, {"cost_table", "verify_mode"},
       kPlanInputFormat},
      {"tokenize", "print the token ids of JSON lines of text or messages (--model, --input)",
       &RunTokenizeCommand, {"runtime/cli/tokenize_command.cc"}, {"model", "tokenizer", "input"},
       kTokenizeInputFormat},
      {"bench", "load-test a running server over a concurrency sweep (--bench-url)",
       &RunBenchCommand, {"runtime/cli/bench_command.cc"}, {}, kBenchInput},
      {"profile", "measure the cost table on the engine (--profile-batch-sizes, --profile-out)",
       &RunProfileCommand, {"runtime/cli/profile_command.cc", kEngineFlags}, {}, kProfileInput},
  };
  return *commands;
}

const Command* FindCommand(const std::string& name) {
  for (const Command& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string CommandHelp(const Command& command) {
  std::string out =
      absl::StrCat("verdict ", command.name, ": ", command.summary, "\n\nusage: verdict ",
                   command.name, " [--flag=value ...]\n");
  const std::vector<const absl::CommandLineFlag*> flags = FlagsOf(command);
  if (!flags.empty()) {
    absl::StrAppend(&out, "\nflags (dashes or underscores):\n");
    for (const auto* flag : flags) absl::StrAppend(&out, DescribeFlag(*flag));
  }
  if (!command.input_format.empty()) {
    absl::StrAppend(&out, "\ninput:\n", command.input_format, "\n");
  }
  return out;
}

std::string FullHelp() {
  // Each flag under the commands that take it, e.g. the engine's flags under
  // "serve, generate, profile".
  std::map<std::string, std::vector<std::string>> users;
  std::map<std::string, const absl::CommandLineFlag*> by_name;
  for (const Command& c : Commands()) {
    for (const auto* flag : FlagsOf(c)) {
      users[std::string(flag->Name())].push_back(c.name);
      by_name[std::string(flag->Name())] = flag;
    }
  }
  std::map<std::string, std::string> groups;  // "serve, generate" -> flags
  for (const auto& [name, flag] : by_name) {
    absl::StrAppend(&groups[absl::StrJoin(users[name], ", ")], DescribeFlag(*flag));
  }
  std::string out = CommandList();
  for (const auto& [commands, text] : groups) {
    absl::StrAppend(&out, "\nflags of ", commands, ":\n", text);
  }
  absl::StrAppend(&out, "\n`verdict COMMAND --help` prints one command's flags and input.\n");
  return out;
}

std::string CommandList() {
  std::string out =
      "verdict: speculative decoding serving runtime.\n"
      "usage: verdict <command> [--flag=value ...]\n\ncommands:\n";
  for (const Command& c : Commands()) {
    absl::StrAppend(&out, "  ", c.name, std::string(std::max<size_t>(1, 11 - strlen(c.name)), ' '),
                    c.summary, "\n");
  }
  absl::StrAppend(&out, "\n`verdict --help` lists every flag; `verdict COMMAND --help` one "
                        "command's.\n");
  return out;
}

bool AsksForHelp(absl::Span<char* const> args) {
  static const std::set<std::string> kHelp = {"--help", "-help", "-h", "--helpfull",
                                              "--helpshort", "-helpfull", "-helpshort"};
  for (const char* arg : args) {
    const std::string a = arg;
    if (a == "--") break;
    if (kHelp.count(a) > 0) return true;
  }
  return false;
}

}  // namespace verdict
