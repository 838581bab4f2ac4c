// A fixed pool of worker threads for data-parallel loops. Work is split into tasks by index, so
// results never depend on the number of threads.
//
// Decode runs hundreds of short loops per token (a mixture-of-experts layer: one matrix-vector
// product of under a megabyte per expert projection), so the hand-off must cost far less than a
// futex wake-up: idle workers and the waiting caller spin for a short while (kSpin) before they
// block, and tasks are claimed with an atomic counter.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace qf {

class ThreadPool {
 public:
  // `threads` >= 1 counts the calling thread, which takes part in every parallel_for. If the
  // system refuses to start some of the worker threads (thread or memory limits), the pool runs
  // with those that started (size() says how many; at worst the calling thread alone) and
  // start_failure() says why: results do not depend on the thread count.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  // Empty, or the system's reason for starting fewer threads than asked.
  const std::string& start_failure() const { return start_failure_; }

  // Runs fn(i) once for every i in [0, n) and returns when all calls are done. Tasks are taken
  // dynamically; the first exception thrown by any task is rethrown here after the rest finish.
  // Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

  // Number of hardware threads (at least 1).
  static int hardware_threads();

 private:
  void worker_loop();
  // Claims and runs tasks of the current loop (fn, n) until none is left.
  void run_tasks(const std::function<void(int64_t)>& fn, int64_t n);

  std::vector<std::thread> workers_;
  // mu_ guards fn_, n_, error_ and every change of generation_, busy_workers_ and stop_ (so the
  // condition variables never miss a wake-up); the atomics may be read without it while spinning.
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int64_t> finished_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> busy_workers_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
  std::string start_failure_;
};

}  // namespace qf
