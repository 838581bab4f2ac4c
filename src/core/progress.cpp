#include "core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

namespace qf {

std::string_view progress_unit_name(ProgressUnit unit) {
  switch (unit) {
    case ProgressUnit::bytes: return "bytes";
    case ProgressUnit::tokens: return "tokens";
    case ProgressUnit::modules: return "modules";
    case ProgressUnit::layers: return "layers";
    case ProgressUnit::runs: return "runs";
    case ProgressUnit::steps: return "steps";
  }
  return "items";
}

std::string format_rate(double per_second, ProgressUnit unit) {
  if (!(per_second > 0)) per_second = 0;
  if (unit == ProgressUnit::bytes) return human_bytes(per_second) + "/s";
  // Slow phases (a GPTQ module every few seconds) need decimals to say anything.
  const std::string n = per_second >= 100  ? fmt::format("{:.0f}", per_second)
                        : per_second >= 10 ? fmt::format("{:.1f}", per_second)
                                           : fmt::format("{:.2f}", per_second);
  return fmt::format("{} {}/s", n, progress_unit_name(unit));
}

std::string format_duration(double seconds) {
  if (!(seconds > 0)) return "0s";
  const auto s = int64_t(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

std::string format_eta(const ProgressState& s) {
  if (s.total > 0 && s.done >= s.total) return "done";
  if (!(s.done > 0) || !(s.seconds > 0)) return "ETA --";
  const double rate = s.done / s.seconds;
  return "ETA " + format_duration((s.total - s.done) / rate);
}

std::string format_progress_line(const ProgressState& s, int bar_width) {
  const double frac = s.total > 0 ? std::clamp(s.done / s.total, 0.0, 1.0) : 1.0;
  std::string bar(size_t(frac * bar_width), '#');
  bar.resize(size_t(bar_width), '.');
  std::string line = fmt::format("{} [{}] {:5.1f}%", s.phase, bar, frac * 100);
  if (!s.detail.empty()) line += "  " + s.detail;
  // Whole things (modules, layers, runs, steps) read best as a count; bytes and tokens as a rate.
  if (s.unit == ProgressUnit::modules || s.unit == ProgressUnit::layers ||
      s.unit == ProgressUnit::runs || s.unit == ProgressUnit::steps)
    line += fmt::format("  {:.0f}/{:.0f} {}", std::floor(s.done), s.total,
                        progress_unit_name(s.unit));
  line += "  " + format_rate(s.seconds > 0 ? s.done / s.seconds : 0, s.unit);
  line += "  " + format_eta(s);
  return line;
}

namespace {
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Progress::Progress(std::string phase, ProgressUnit unit, double total, bool enabled, Clock clock)
    : clock_(clock ? std::move(clock) : Clock(steady_seconds)),
      enabled_(enabled && stderr_is_terminal()) {
  s_.phase = std::move(phase);
  s_.unit = unit;
  s_.total = total;
  run_start_ = clock_();
}

Progress::~Progress() { finish(); }

bool Progress::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

double Progress::elapsed_locked() const {
  return run_before_ + (running_ ? clock_() - run_start_ : 0.0);
}

void Progress::advance(double amount) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.done += amount;
  draw_locked(false);
}

void Progress::set_detail(std::string detail) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.detail = std::move(detail);
}

void Progress::pause() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!running_) return;
  run_before_ += clock_() - run_start_;
  running_ = false;
}

void Progress::resume() {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_) return;
  run_start_ = clock_();
  running_ = true;
  draw_locked(true);
}

ProgressState Progress::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  ProgressState s = s_;
  s.seconds = elapsed_locked();
  return s;
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  if (drawn_) std::fputs("\r\033[2K", stderr);
  std::fflush(stderr);
  drawn_ = false;
  enabled_ = false;
}

void Progress::draw_locked(bool force) {
  if (!enabled_) return;
  const double now = clock_();
  if (!force && now - last_draw_ < 0.1) return;
  last_draw_ = now;
  ProgressState s = s_;
  s.seconds = elapsed_locked();
  fmt::print(stderr, "\r\033[2K{}", format_progress_line(s));
  std::fflush(stderr);
  drawn_ = true;
}

uint64_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) {
    bytes /= 1000;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, units[u]);
}

}  // namespace qf
