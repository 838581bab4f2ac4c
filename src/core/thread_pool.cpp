#include "core/thread_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
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

namespace {

// How long an idle thread polls before it blocks: longer than the serial gaps between a decode
// step's loops (norms, routing, a head's attention: microseconds), short enough that a pool
// between jobs costs no noticeable CPU.
constexpr auto kSpin = std::chrono::microseconds(100);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls ready() for up to kSpin; true as soon as it holds. Between short bursts of polling it
// yields the core, so that on a machine with more runnable threads than cores (a build next to
// a benchmark) the spinning steals no time from the others.
template <class Ready>
bool spin_until(const Ready& ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
    std::this_thread::yield();
  }
}

}  // namespace

void ThreadPool::run_tasks(const std::function<void(int64_t)>& fn, int64_t n) {
  for (;;) {
    const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n) return;
    try {
      fn(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    finished_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    spin_until([&] {
      return stop_.load(std::memory_order_relaxed) ||
             generation_.load(std::memory_order_acquire) != seen;
    });
    const std::function<void(int64_t)>* fn;
    int64_t n;
    {
      // Joining under the lock: the caller does not finish a loop while a joined worker may
      // still read fn_, and a worker that wakes after the loop ended sees n_ == 0.
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++busy_workers_;
      fn = fn_;
      n = n_;
    }
    if (n > 0) run_tasks(*fn, n);
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
  run_tasks(fn, n);
  auto all_done = [&] {
    return finished_.load(std::memory_order_acquire) == n &&
           busy_workers_.load(std::memory_order_acquire) == 0;
  };
  spin_until(all_done);
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Every task done and every worker out of run_tasks, so fn_ can be reset.
    done_.wait(lock, all_done);
    fn_ = nullptr;
    n_ = 0;
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace qf
