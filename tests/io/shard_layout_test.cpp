// Shard planning and naming as Hugging Face's save_pretrained does it.
#include "io/shard_layout.h"

#include <gtest/gtest.h>

namespace qf {
namespace {

TEST(ShardLayout, CutsInOrderAndGivesOversizedItemsTheirOwnShard) {
  EXPECT_EQ(plan_shards({}, 10), (std::vector<std::vector<size_t>>{{}}));
  EXPECT_EQ(plan_shards({4, 4, 4}, 10), (std::vector<std::vector<size_t>>{{0, 1}, {2}}));
  EXPECT_EQ(plan_shards({4, 30, 4, 6}, 10),
            (std::vector<std::vector<size_t>>{{0}, {1}, {2, 3}}));
  EXPECT_EQ(plan_shards({5, 5}, 10), (std::vector<std::vector<size_t>>{{0, 1}}));
  EXPECT_EQ(shard_file_name(0, 1), "model.safetensors");
  EXPECT_EQ(shard_file_name(1, 3), "model-00002-of-00003.safetensors");
}

}  // namespace
}  // namespace qf
