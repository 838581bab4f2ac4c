#include "core/thread_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <system_error>

namespace qf {

ThreadPool::ThreadPool(int threads) {
  // Far beyond any machine's cores; a larger request is a typo, not a reason to fail.
  constexpr int kMaxThreads = 4096;
  if (threads > kMaxThreads) {
    start_failure_ = fmt::format("{} threads asked, {} used", threads, kMaxThreads);
    threads = kMaxThreads;
  }
  workers_.reserve(size_t(std::max(threads - 1, 0)));
  for (int i = 1; i < threads; ++i) {
    try {
      workers_.emplace_back([this] { worker_loop(); });
    } catch (const std::system_error& e) {
      // Workers already started wait on wake_ and are joined by the destructor as usual.
      start_failure_ = fmt::format("started {} of {} threads: {}", i, threads, e.what());
      break;
    }
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

void ThreadPool::run_tasks() {
  for (;;) {
    int64_t i;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (next_ >= n_) return;
      i = next_++;
    }
    try {
      (*fn_)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (++finished_ == n_) done_.notify_all();
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++busy_workers_;
    }
    run_tasks();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--busy_workers_ == 0) done_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    next_ = 0;
    finished_ = 0;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_tasks();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Wait for all tasks and for every worker to have left run_tasks, so fn_ can be reset.
    done_.wait(lock, [&] { return finished_ == n_ && busy_workers_ == 0; });
    fn_ = nullptr;
    n_ = 0;
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace qf
