#include "scheduler/cost_table_catalog.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A split table of 5 passes measured on `origin` at `tp`; `scale` tells
// tables apart.
CostTable Table(std::optional<CostTableOrigin> origin, int tp, double scale = 1.0,
                int passes = 5) {
  CostTable t = *CostTable::Create({1, 8}, {1, 48}, {scale * 0.010, scale * 0.012,
                                                     scale * 0.020, scale * 0.030});
  EXPECT_TRUE(t.SetDraftSplit({scale * 0.001, scale * 0.002}, passes).ok());
  t.set_measured_tp(tp);
  t.set_origin(std::move(origin));
  return t;
}

const CostTableOrigin kH200{"NVIDIA H200", "llama h4096", "llama h2048"};

CostTableKey Key(CostTableOrigin origin = kH200, int tp = 1, int gamma = 5) {
  CostTableKey key;
  key.origin = std::move(origin);
  key.tp = tp;
  key.gamma = gamma;
  return key;
}

class CostTableCatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(std::getenv("TEST_TMPDIR")) /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(root_ / "cache");
    fs::create_directories(root_ / "bundled");
  }

  std::string Dir(const char* name) const { return (root_ / name).string(); }

  void Write(const char* dir, const char* file, const std::string& text) const {
    std::ofstream(root_ / dir / file) << text;
  }

  fs::path root_;
};

TEST_F(CostTableCatalogTest, PicksTheFirstTableMeasuredOnTheKey) {
  // Sorted by name within a directory: a.json (another GPU) comes before
  // b.json and c.json (both this key's); the cache comes before the bundle.
  Write("cache", "c.json", Table(kH200, 1, 3.0).ToJson());
  Write("cache", "b.json", Table(kH200, 1, 2.0).ToJson());
  Write("cache", "a.json", Table(CostTableOrigin{"NVIDIA A100", kH200.target, kH200.draft}, 1).ToJson());
  Write("bundled", "a.json", Table(kH200, 1, 4.0).ToJson());
  const std::vector<std::string> dirs = {Dir("missing"), Dir("cache"), Dir("bundled")};
  const CostTableSearch search = FindCostTable(dirs, Key());
  ASSERT_TRUE(search.table.has_value());
  EXPECT_EQ(*search.path, (root_ / "cache" / "b.json").string());
  EXPECT_EQ(search.table->Predict(1, 1), 2.0 * 0.010);
  EXPECT_EQ(search.tables_seen, 2);
  EXPECT_TRUE(search.refused.empty());

  // The bundle's table when the cache has none of this key.
  const std::vector<std::string> bundled_only = {Dir("bundled")};
  const CostTableSearch bundled = FindCostTable(bundled_only, Key());
  ASSERT_TRUE(bundled.table.has_value());
  EXPECT_EQ(bundled.table->Predict(1, 1), 4.0 * 0.010);
}

TEST_F(CostTableCatalogTest, EveryPartOfTheKeyMustMatch) {
  Write("cache", "a-tp2.json", Table(kH200, 2).ToJson());
  Write("cache", "b-gamma4.json", Table(kH200, 1, 1.0, 4).ToJson());
  Write("cache", "c-no-origin.json", Table(std::nullopt, 1).ToJson());
  Write("cache", "d-other-draft.json",
        Table(CostTableOrigin{kH200.device, kH200.target, "llama h1024"}, 1).ToJson());
  CostTable whole = *CostTable::Create({1, 8}, {1, 48}, {0.01, 0.012, 0.02, 0.03});
  whole.set_measured_tp(1);
  whole.set_origin(kH200);
  Write("cache", "e-no-split.json", whole.ToJson());
  const std::vector<std::string> dirs = {Dir("cache")};
  const CostTableSearch search = FindCostTable(dirs, Key());
  EXPECT_FALSE(search.table.has_value());
  EXPECT_EQ(search.tables_seen, 5);

  EXPECT_EQ(*FindCostTable(dirs, Key(kH200, 2)).path, (root_ / "cache" / "a-tp2.json").string());
  EXPECT_EQ(*FindCostTable(dirs, Key(kH200, 1, 4)).path,
            (root_ / "cache" / "b-gamma4.json").string());
}

// No table of this GPU: the first of the same models, TP degree and gamma
// measured on another GPU, said to be from there; a table of this GPU
// anywhere in the list still comes first, and nothing else of the key is
// relaxed.
TEST_F(CostTableCatalogTest, AnotherGpusTableOfTheSameModelsWhenThisGpuHasNone) {
  const CostTableOrigin h100{"NVIDIA H100 80GB HBM3", kH200.target, kH200.draft};
  Write("cache", "a-other-draft.json",
        Table(CostTableOrigin{"NVIDIA A100", kH200.target, "llama h1024"}, 1, 5.0).ToJson());
  Write("cache", "b-tp2.json", Table(CostTableOrigin{"NVIDIA A100", kH200.target, kH200.draft}, 2, 6.0).ToJson());
  Write("cache", "c-a100.json",
        Table(CostTableOrigin{"NVIDIA A100", kH200.target, kH200.draft}, 1, 7.0).ToJson());
  Write("bundled", "h200.json", Table(kH200, 1, 8.0).ToJson());
  const std::vector<std::string> dirs = {Dir("cache"), Dir("bundled")};

  const CostTableSearch search = FindCostTable(dirs, Key(h100));
  ASSERT_TRUE(search.table.has_value());
  EXPECT_TRUE(search.other_device);
  EXPECT_EQ(*search.path, (root_ / "cache" / "c-a100.json").string());
  EXPECT_EQ(search.table->Predict(1, 1), 7.0 * 0.010);
  EXPECT_EQ(search.tables_seen, 4);

  // This GPU's table, though it comes after another GPU's.
  const CostTableSearch own = FindCostTable(dirs, Key());
  ASSERT_TRUE(own.table.has_value());
  EXPECT_FALSE(own.other_device);
  EXPECT_EQ(*own.path, (root_ / "bundled" / "h200.json").string());

  // Other models, TP degree or gamma: nothing.
  EXPECT_FALSE(FindCostTable(dirs, Key(h100, 4)).table.has_value());
  EXPECT_FALSE(FindCostTable(dirs, Key(h100, 1, 4)).table.has_value());
  EXPECT_FALSE(
      FindCostTable(dirs, Key(CostTableOrigin{h100.device, "llama h8192", kH200.draft})).table.has_value());
}

TEST_F(CostTableCatalogTest, ACorruptFileIsSkippedWithItsReason) {
  Write("cache", "a.json", "{\"batch_sizes\": [1], ");
  Write("cache", "b.txt", Table(kH200, 1, 9.0).ToJson());  // not *.json: not read
  Write("cache", "c.json", Table(kH200, 1, 2.0).ToJson());
  fs::create_directories(root_ / "cache" / "d.json");  // a directory: not read
  const std::vector<std::string> dirs = {Dir("cache")};
  const CostTableSearch search = FindCostTable(dirs, Key());
  ASSERT_TRUE(search.table.has_value());
  EXPECT_EQ(search.table->Predict(1, 1), 2.0 * 0.010);
  ASSERT_EQ(search.refused.size(), 1u);
  EXPECT_THAT(search.refused[0], HasSubstr((root_ / "cache" / "a.json").string()));
  EXPECT_THAT(search.refused[0], HasSubstr("not valid JSON"));
}

TEST(CostTableCatalogNames, FileNamesAreSafeAndTellKeysApart) {
  const std::string name = CostTableFileName(Key());
  EXPECT_EQ(name, "nvidia-h200_llama-h4096_draft_llama-h2048_tp1_gamma5.json");
  EXPECT_NE(CostTableFileName(Key(kH200, 2)), name);
  const CostTableOrigin hostile{"../../etc/passwd", "a/b", "\n"};
  const std::string safe = CostTableFileName(Key(hostile));
  EXPECT_EQ(safe.find('/'), std::string::npos) << safe;
  EXPECT_EQ(safe.find('\n'), std::string::npos) << safe;
  EXPECT_THAT(DescribeCostTableKey(Key()),
              HasSubstr("NVIDIA H200, target llama h4096, draft llama h2048, TP 1, 5 draft tokens"));
}

}  // namespace
}  // namespace verdict
