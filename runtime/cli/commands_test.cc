#include "runtime/cli/commands.h"

#include <string>
#include <vector>

#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "kernels/verify_case.h"
#include "runtime/cli/tokenize_command.h"
#include "scheduler/plan_command.h"

namespace verdict {
namespace {

std::string HelpOf(const std::string& name) {
  const Command* command = FindCommand(name);
  EXPECT_NE(command, nullptr) << name;
  return command == nullptr ? "" : CommandHelp(*command);
}

// A flag as the help lists it: dashed, at the start of its line.
bool Lists(const std::string& help, const std::string& dashed) {
  return absl::StrContains(help, absl::StrCat("\n  --", dashed, "  "));
}

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(CommandsTest, ServeHelpListsItsOwnAndTheEngineFlagsOnly) {
  const std::string help = HelpOf("serve");
  EXPECT_TRUE(absl::StartsWith(help, "verdict serve: ")) << help;
  EXPECT_TRUE(Lists(help, "port"));
  EXPECT_TRUE(Lists(help, "metrics-port"));
  EXPECT_TRUE(Lists(help, "model"));
  EXPECT_TRUE(Lists(help, "num-draft-tokens"));
  EXPECT_FALSE(Lists(help, "bench-url"));
  EXPECT_FALSE(Lists(help, "profile-out"));
  EXPECT_FALSE(Lists(help, "case"));
  // Abseil's own flags are not verdict's.
  EXPECT_FALSE(Lists(help, "flagfile"));
  EXPECT_TRUE(absl::StrContains(help, "/v1/chat/completions"));
}

TEST(CommandsTest, BenchHelpHasNoEngineFlags) {
  const std::string help = HelpOf("bench");
  EXPECT_TRUE(Lists(help, "bench-url"));
  EXPECT_TRUE(Lists(help, "bench-concurrency"));
  EXPECT_FALSE(Lists(help, "model"));
  EXPECT_FALSE(Lists(help, "port"));
  EXPECT_TRUE(absl::StrContains(help, "JSON Lines"));
}

TEST(CommandsTest, PlanAndSampleHelpCarryTheirInputFormats) {
  const std::string plan = HelpOf("plan");
  EXPECT_TRUE(Lists(plan, "input"));
  EXPECT_TRUE(Lists(plan, "mode"));
  // Read by name from the engine's flags.
  EXPECT_TRUE(Lists(plan, "cost-table"));
  EXPECT_TRUE(Lists(plan, "verify-mode"));
  EXPECT_FALSE(Lists(plan, "model"));
  EXPECT_TRUE(absl::StrContains(plan, kPlanInputFormat));

  const std::string sample = HelpOf("sample");
  EXPECT_TRUE(Lists(sample, "case"));
  EXPECT_TRUE(Lists(sample, "trials"));
  EXPECT_TRUE(absl::StrContains(sample, kSampleCaseFormat));
}

TEST(CommandsTest, TokenizeIsListedAndItsHelpCarriesTheLineFormat) {
  EXPECT_TRUE(absl::StrContains(CommandList(), "\n  tokenize "));
  const std::string help = HelpOf("tokenize");
  EXPECT_TRUE(Lists(help, "model"));
  EXPECT_TRUE(Lists(help, "tokenizer"));
  EXPECT_TRUE(Lists(help, "input"));
  EXPECT_FALSE(Lists(help, "port"));
  EXPECT_FALSE(Lists(help, "num-draft-tokens"));
  EXPECT_TRUE(absl::StrContains(help, kTokenizeInputFormat));
  EXPECT_TRUE(absl::StrContains(HelpOf("serve"), "/tokenize"));
}

TEST(CommandsTest, HelpShowsDefaults) {
  EXPECT_TRUE(absl::StrContains(HelpOf("serve"), "--port  (default: 8000)"));
  EXPECT_TRUE(absl::StrContains(HelpOf("serve"), "--api-key  (default: empty)"));
}

TEST(CommandsTest, FullHelpListsEveryCommandsFlagsOnce) {
  const std::string full = FullHelp();
  for (const Command& c : Commands()) {
    EXPECT_TRUE(absl::StrContains(full, absl::StrCat("\n  ", c.name, " "))) << c.name;
    const std::string help = CommandHelp(c);
    for (const auto& [name, flag] : absl::GetAllFlags()) {
      const std::string dashed = absl::StrCat("\n  --", absl::StrReplaceAll(name, {{"_", "-"}}), "  ");
      if (absl::StrContains(help, dashed)) {
        EXPECT_EQ(Count(full, dashed), 1) << name << " in " << c.name;
      }
    }
  }
  // The engine's flags are grouped under the commands that take them.
  EXPECT_TRUE(absl::StrContains(full, "flags of serve, generate, profile:\n"));
}

TEST(CommandsTest, AsksForHelp) {
  auto asks = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return AsksForHelp(argv);
  };
  EXPECT_TRUE(asks({"--help"}));
  EXPECT_TRUE(asks({"--port=1", "-h"}));
  EXPECT_TRUE(asks({"--helpfull"}));
  EXPECT_FALSE(asks({"--port=1"}));
  EXPECT_FALSE(asks({"--prompt=--help"}));
  // After a bare `--` nothing is a flag.
  EXPECT_FALSE(asks({"--", "--help"}));
}

TEST(CommandsTest, UnknownCommandIsNotFound) {
  EXPECT_EQ(FindCommand("serv"), nullptr);
  ASSERT_NE(FindCommand("help"), nullptr);
}

}  // namespace
}  // namespace verdict
