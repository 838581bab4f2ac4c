// Progress bars on stderr, one per phase of a job (calibration, an algorithm, writing, ...),
// each with its own unit, rate and ETA. Drawn only when stderr is a terminal (and not
// disabled), at most ten times a second. Thread-safe.
//
// Phases of one job may interleave (calibrate a layer, run the algorithm on it, calibrate the
// next): each bar's clock runs only while it is resumed, so its rate and ETA are that phase's
// own, not diluted by the time the other phases take.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace qf {

// What a bar counts; the rate is printed per second in it.
enum class ProgressUnit { bytes, tokens, modules, layers, runs, steps };
std::string_view progress_unit_name(ProgressUnit unit);  // "bytes", "tokens", "modules", ...

// A bar's state at one moment; the pure input of the formatting below.
struct ProgressState {
  std::string phase;   // "calibrate", "gptq", "write", ...
  ProgressUnit unit = ProgressUnit::bytes;
  double done = 0;
  double total = 0;
  double seconds = 0;  // time this phase has been running (paused time excluded)
  std::string detail;  // e.g. "layer 3/16"; may be empty
};

// "12.35 MB/s" (bytes, decimal units), "1234 tokens/s", "2.50 modules/s".
std::string format_rate(double per_second, ProgressUnit unit);
// "42s", "8m05s", "2h07m"; "0s" for non-positive values.
std::string format_duration(double seconds);
// "ETA 8m05s" from the phase's own rate; "ETA --" until the phase has done something;
// "done" once done reaches total.
std::string format_eta(const ProgressState& s);
// The whole line, e.g. "gptq [#########.....................]  30.0%  12/40 modules
// 0.42 modules/s  ETA 1m07s".
std::string format_progress_line(const ProgressState& s, int bar_width = 30);

class Progress {
 public:
  // Seconds on a monotonic clock; tests pass a fake one.
  using Clock = std::function<double()>;

  // `total` in `unit`s. `enabled` false silences the bar (its counts are still kept). The
  // phase's clock starts running at construction.
  Progress(std::string phase, ProgressUnit unit, double total, bool enabled, Clock clock = {});
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(double amount);
  void set_detail(std::string detail);
  // Stops / restarts this phase's clock while another phase runs. resume() redraws at once,
  // since the line on screen may belong to the other phase.
  void pause();
  void resume();
  // Clears the bar line; called by the destructor too.
  void finish();

  ProgressState state() const;

  // True when stderr is a terminal.
  static bool stderr_is_terminal();

 private:
  double elapsed_locked() const;
  void draw_locked(bool force);

  ProgressState s_;
  Clock clock_;
  bool enabled_;
  bool drawn_ = false;
  bool running_ = true;
  double run_start_ = 0;     // clock value when the phase last resumed
  double run_before_ = 0;    // seconds run before that
  double last_draw_ = -1e9;  // clock value of the last draw
  mutable std::mutex mu_;
};

// Peak resident set size of this process so far, in bytes (Linux VmHWM).
uint64_t peak_rss_bytes();

// "1.23 GB"-style size with decimal units.
std::string human_bytes(double bytes);

}  // namespace qf
