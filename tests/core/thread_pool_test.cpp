#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

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

// A pool that cannot start all its threads (here: a 400 MB address-space limit against 8 MB
// thread stacks) once deadlocked or terminated in its failure path; it must run with the
// threads it got. Forked, with a time limit, since the old failure was a hang.
TEST(ThreadPool, StartsWithFewerThreadsWhenTheSystemRefuses) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves more address space than the limit allows";
#else
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(30);
    const rlimit limit{400u << 20, 400u << 20};
    ::setrlimit(RLIMIT_AS, &limit);
    int code = 1;
    {
      qf::ThreadPool pool(300);
      std::vector<int> hit(1000, 0);
      pool.parallel_for(1000, [&](int64_t i) { hit[size_t(i)] = 1; });
      bool all = true;
      for (int h : hit) all = all && h == 1;
      if (all && pool.size() < 300 && !pool.start_failure().empty()) code = 0;
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
#endif
}

}  // namespace
}  // namespace qf
