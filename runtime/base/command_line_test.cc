#include "runtime/base/command_line.h"

#include "gtest/gtest.h"

namespace verdict {
namespace {

TEST(NormalizeFlagNamesTest, RewritesDashesInNamesOnly) {
  const char* argv[] = {"verdict", "plan", "--cost-table=a-b.json", "--verify-mode",
                        "cap-accept", "-num-draft-tokens=5", "--", "--keep-me"};
  std::vector<std::string> out = NormalizeFlagNames(8, const_cast<char**>(argv));
  ASSERT_EQ(out.size(), 8u);
  EXPECT_EQ(out[0], "verdict");
  EXPECT_EQ(out[1], "plan");
  EXPECT_EQ(out[2], "--cost_table=a-b.json");
  EXPECT_EQ(out[3], "--verify_mode");
  EXPECT_EQ(out[4], "cap-accept");
  EXPECT_EQ(out[5], "-num_draft_tokens=5");
  EXPECT_EQ(out[6], "--");
  EXPECT_EQ(out[7], "--keep-me");
}

}  // namespace
}  // namespace verdict
