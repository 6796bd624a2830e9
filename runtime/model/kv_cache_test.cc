#include "runtime/model/kv_cache.h"

#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict {
namespace {

KvCacheConfig FullConfig(int num_blocks, int max_requests) {
  KvCacheConfig c;
  c.num_layers = 2;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.block_size = 16;
  c.num_blocks = num_blocks;
  c.max_requests = max_requests;
  c.speculative_slots = 6;
  return c;
}

TEST(KvCacheTest, BlocksNeededRoundsUp) {
  KvCache cache = *KvCache::Create(FullConfig(10, 4));
  EXPECT_EQ(cache.BlocksNeeded(1), 1);
  EXPECT_EQ(cache.BlocksNeeded(16), 1);
  EXPECT_EQ(cache.BlocksNeeded(17), 2);
  EXPECT_EQ(cache.BlocksNeeded(160), 10);
}

TEST(KvCacheTest, AdmissionNeverOverCommits) {
  KvCache cache = *KvCache::Create(FullConfig(10, 8));
  EXPECT_TRUE(cache.CanAdmit(160));
  EXPECT_FALSE(cache.CanAdmit(161));
  absl::StatusOr<int> a = cache.Allocate(100);  // 7 blocks
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(cache.free_blocks(), 3);
  EXPECT_TRUE(cache.CanAdmit(48));
  EXPECT_FALSE(cache.CanAdmit(49));
  absl::StatusOr<int> b = cache.Allocate(49);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache.free_blocks(), 3);  // a refused request takes nothing
  EXPECT_TRUE(cache.Allocate(48).ok());
  EXPECT_EQ(cache.free_blocks(), 0);
  EXPECT_FALSE(cache.CanAdmit(1));
}

TEST(KvCacheTest, RandomAdmitAndFreeKeepsBlocksExclusive) {
  KvCache cache = *KvCache::Create(FullConfig(64, 16));
  std::mt19937 rng(3);
  std::vector<int> live;
  for (int step = 0; step < 2000; ++step) {
    if (!live.empty() && rng() % 2 == 0) {
      const size_t i = rng() % live.size();
      ASSERT_TRUE(cache.Free(live[i]).ok());
      live.erase(live.begin() + i);
    } else {
      const int64_t positions = 1 + rng() % 200;
      const bool can = cache.CanAdmit(positions);
      absl::StatusOr<int> h = cache.Allocate(positions);
      ASSERT_EQ(h.ok(), can);
      if (h.ok()) {
        live.push_back(*h);
        EXPECT_EQ(cache.capacity(*h), positions);
        EXPECT_EQ(static_cast<int>(cache.block_table(*h).size()), cache.BlocksNeeded(positions));
      }
    }
    // Every block is owned by at most one request, and free + owned = all.
    std::set<int32_t> owned;
    int total = 0;
    for (int h : live) {
      for (int32_t b : cache.block_table(h)) {
        EXPECT_TRUE(owned.insert(b).second) << "block " << b << " owned twice";
        ++total;
      }
    }
    ASSERT_EQ(total + cache.free_blocks(), 64);
    ASSERT_EQ(cache.num_active(), static_cast<int>(live.size()));
  }
}

TEST(KvCacheTest, FreeReturnsBlocks) {
  KvCache cache = *KvCache::Create(FullConfig(4, 4));
  int h = *cache.Allocate(64);
  EXPECT_EQ(cache.free_blocks(), 0);
  EXPECT_TRUE(cache.is_active(h));
  ASSERT_TRUE(cache.Free(h).ok());
  EXPECT_FALSE(cache.is_active(h));
  EXPECT_EQ(cache.free_blocks(), 4);
  EXPECT_FALSE(cache.Free(h).ok());  // double free is refused
  EXPECT_FALSE(cache.Free(99).ok());
  EXPECT_TRUE(cache.CanAdmit(64));
}

TEST(KvCacheTest, RequestSlotsBoundAdmission) {
  KvCache cache = *KvCache::Create(FullConfig(100, 2));
  ASSERT_TRUE(cache.Allocate(1).ok());
  ASSERT_TRUE(cache.Allocate(1).ok());
  EXPECT_FALSE(cache.CanAdmit(1));
  EXPECT_FALSE(cache.Allocate(1).ok());
}

TEST(KvCacheTest, PagedSlotsFollowTheBlockTable) {
  KvCache cache = *KvCache::Create(FullConfig(8, 4));
  int a = *cache.Allocate(20);
  int b = *cache.Allocate(40);
  std::set<int64_t> seen;
  for (int h : {a, b}) {
    for (int64_t p = 0; p < cache.capacity(h); ++p) {
      const int64_t slot = cache.Slot(0, h, p);
      EXPECT_EQ(slot / 16, cache.block_table(h)[p / 16]);
      EXPECT_EQ(slot % 16, p % 16);
      EXPECT_TRUE(seen.insert(slot).second);
      EXPECT_LT(slot, cache.slots_in_layer(0));
    }
  }
}

TEST(KvCacheTest, ConfigValidation) {
  KvCacheConfig c = FullConfig(4, 4);
  c.layer_uses_sliding_window = {true, false};
  EXPECT_FALSE(KvCache::Create(c).ok());  // sliding layers need a window
  c.sliding_window = 8;
  EXPECT_TRUE(KvCache::Create(c).ok());
  c.layer_uses_sliding_window = {true};
  EXPECT_FALSE(KvCache::Create(c).ok());
  c = FullConfig(4, 0);
  EXPECT_FALSE(KvCache::Create(c).ok());
}

// The seed-000 geometry: a 128-token window, nextn 5, so 6 positions per
// step and a ring of 134.
KvCacheConfig RingConfig() {
  KvCacheConfig c = FullConfig(/*num_blocks=*/0, /*max_requests=*/2);
  c.num_layers = 1;
  c.num_kv_heads = 1;
  c.head_dim = 2;
  c.sliding_window = 128;
  c.speculative_slots = 6;
  c.layer_uses_sliding_window = {true};
  return c;
}

TEST(KvCacheRingTest, RingHoldsWindowPlusSpeculativeSlots) {
  KvCache cache = *KvCache::Create(RingConfig());
  EXPECT_EQ(cache.ring_size(), 134);
  EXPECT_EQ(cache.BlocksNeeded(100000), 0);  // sliding layers use no blocks
  int a = *cache.Allocate(100000);
  int b = *cache.Allocate(100000);
  EXPECT_FALSE(cache.CanAdmit(1));  // one ring per request
  EXPECT_NE(cache.ring(a), cache.ring(b));
  EXPECT_EQ(cache.Slot(0, a, 5), cache.Slot(0, a, 5 + 134));
  EXPECT_NE(cache.Slot(0, a, 5), cache.Slot(0, b, 5));
  EXPECT_EQ(cache.slots_in_layer(0), 2 * 134);
}

// Writes one step the way the model does: every query position first,
// then each query reads the window ending at its own position.
struct RingSimulator {
  KvCache& cache;
  HostKvStorage storage;
  int handle;

  // K row = (position, tag): which position and which step wrote it.
  void Write(int64_t position, float tag) {
    float* k = storage.key(0, cache.Slot(0, handle, position));
    k[0] = static_cast<float>(position);
    k[1] = tag;
  }
  std::pair<int64_t, float> Read(int64_t position) const {
    const float* k = storage.key(0, cache.Slot(0, handle, position));
    return {static_cast<int64_t>(k[0]), k[1]};
  }
};

TEST(KvCacheRingTest, RejectedEntriesAreOverwrittenAndNeverRead) {
  KvCache cache = *KvCache::Create(RingConfig());
  RingSimulator sim{cache, HostKvStorage(cache), *cache.Allocate(1 << 20)};
  const int window = 128;
  // tag_of[p]: the tag of the accepted write of position p.
  std::vector<float> tag_of;
  // Prefill 300 positions (accepted).
  for (int64_t p = 0; p < 300; ++p) {
    sim.Write(p, 0.0f);
    tag_of.push_back(0.0f);
  }
  int64_t position = 300;  // the next position to write
  std::mt19937 rng(5);
  for (int step = 1; step <= 200; ++step) {
    const float tag = static_cast<float>(step);
    // A verify step writes 6 positions before anything reads them.
    for (int64_t p = position; p < position + 6; ++p) sim.Write(p, tag);
    // Every query of the step reads its window: each key must be the
    // position asked for, and for positions before this step the accepted
    // write, never a rejected one.
    for (int64_t q = position; q < position + 6; ++q) {
      for (int64_t p = std::max<int64_t>(0, q - window + 1); p <= q; ++p) {
        const auto [stored_position, stored_tag] = sim.Read(p);
        ASSERT_EQ(stored_position, p) << "step " << step << " query " << q;
        ASSERT_EQ(stored_tag, p < position ? tag_of[p] : tag) << "step " << step << " key " << p;
      }
    }
    // Accept 0..5 drafts plus the bonus token: positions advance by 1..6.
    // The rejected positions keep this step's (wrong) entries until the
    // next step writes them again.
    const int64_t accepted = 1 + rng() % 6;
    for (int64_t p = position; p < position + accepted; ++p) tag_of.push_back(tag);
    position += accepted;
  }
}

TEST(KvCacheRingTest, RingWithoutSpeculativeSlotsLosesKeys) {
  // The same walk with a ring of only the window: a step's writes evict
  // keys its first query still needs. This is why the ring has 134 slots.
  KvCacheConfig config = RingConfig();
  config.speculative_slots = 0;
  KvCache cache = *KvCache::Create(config);
  RingSimulator sim{cache, HostKvStorage(cache), *cache.Allocate(1 << 20)};
  for (int64_t p = 0; p < 300; ++p) sim.Write(p, 0.0f);
  for (int64_t p = 300; p < 306; ++p) sim.Write(p, 1.0f);
  // Query 300 needs keys 173..300; 173..177 were overwritten by 301..305.
  EXPECT_NE(sim.Read(173).first, 173);
}

TEST(KvCacheRingTest, MixedLayersUseBlocksAndRings) {
  KvCacheConfig c = RingConfig();
  c.num_layers = 2;
  c.layer_uses_sliding_window = {true, false};
  c.num_blocks = 10;
  KvCache cache = *KvCache::Create(c);
  EXPECT_TRUE(cache.is_sliding(0));
  EXPECT_FALSE(cache.is_sliding(1));
  int h = *cache.Allocate(100);
  EXPECT_EQ(cache.free_blocks(), 3);
  EXPECT_EQ(cache.Slot(0, h, 140), cache.Slot(0, h, 6));
  EXPECT_NE(cache.Slot(1, h, 99), cache.Slot(1, h, 99 - 16));
  EXPECT_EQ(cache.slots_in_layer(1), 160);
}

TEST(KvCacheTest, ReservationAndBytes) {
  KvCacheConfig c = FullConfig(10, 4);  // 2 layers, 2 kv heads, head_dim 4
  KvCache cache = *KvCache::Create(c);
  EXPECT_EQ(cache.PositionsToReserve(100, 50), 156);  // + 6 speculative slots
  EXPECT_EQ(KvCacheBytes(c, 4), 2 * 2 * 160 * 2 * 4 * 4);
  c.layer_uses_sliding_window = {true, false};
  c.sliding_window = 128;
  // Layer 0: 4 rings of 134; layer 1: 160 paged slots.
  EXPECT_EQ(KvCacheBytes(c, 2), 2 * (4 * 134 + 160) * 2 * 4 * 2);
}

TEST(KvCacheTest, MakeKvCacheConfigSplitsKvHeads) {
  ModelConfig m;
  m.num_layers = 3;
  m.num_kv_heads = 8;
  m.head_dim = 128;
  m.sliding_window = 128;
  m.layer_uses_sliding_window = {false, true, false};
  KvCacheConfig c = MakeKvCacheConfig(m, /*tp=*/4, /*num_blocks=*/100, /*max_requests=*/8,
                                      /*speculative_slots=*/6);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_EQ(c.layer_uses_sliding_window, m.layer_uses_sliding_window);
  KvCache cache = *KvCache::Create(c);
  EXPECT_EQ(cache.ring_size(), 134);
}

}  // namespace
}  // namespace verdict
