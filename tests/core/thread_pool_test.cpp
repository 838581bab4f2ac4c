#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace qf {
namespace {

TEST(ThreadPool, RunsEveryTaskOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 50; ++round) {
      std::vector<std::atomic<int>> hits(1000);
      pool.parallel_for(1000, [&](int64_t i) { hits[size_t(i)]++; });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
  }
}

TEST(ThreadPool, RethrowsTaskErrors) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100, [](int64_t i) { if (i == 37) throw std::runtime_error("x"); }),
               std::runtime_error);
  std::atomic<int> n{0};
  pool.parallel_for(10, [&](int64_t) { n++; });  // still usable
  EXPECT_EQ(n.load(), 10);
}

}  // namespace
}  // namespace qf
