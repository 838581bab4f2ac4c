// A progress bar with rate and ETA on stderr, drawn only when stderr is a terminal (and not
// disabled), at most ten times a second. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace qf {

class Progress {
 public:
  // `total` is in `unit`s (for example bytes); `enabled` false silences it entirely.
  Progress(std::string label, uint64_t total, bool enabled);
  ~Progress();

  void advance(uint64_t amount);
  // Clears the bar line; called by the destructor too.
  void finish();

  // True when stderr is a terminal.
  static bool stderr_is_terminal();

 private:
  void draw(bool force);

  std::string label_;
  uint64_t total_;
  uint64_t done_ = 0;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  std::mutex mu_;
};

// Peak resident set size of this process so far, in bytes (Linux VmHWM).
uint64_t peak_rss_bytes();

// "1.23 GB"-style size with decimal units.
std::string human_bytes(double bytes);

}  // namespace qf
