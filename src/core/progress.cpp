#include "core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace qf {

Progress::Progress(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled && stderr_is_terminal()) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

Progress::~Progress() { finish(); }

bool Progress::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

void Progress::advance(uint64_t amount) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  done_ += amount;
  draw(false);
}

void Progress::finish() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (drawn_) std::fputs("\r\033[2K", stderr);
  std::fflush(stderr);
  drawn_ = false;
  enabled_ = false;
}

void Progress::draw(bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double frac = total_ ? std::min(1.0, double(done_) / double(total_)) : 1.0;
  const int width = 30;
  const int filled = int(frac * width);
  std::string bar(size_t(filled), '#');
  bar.resize(width, '.');
  const double rate = elapsed > 0 ? double(done_) / elapsed : 0;
  const double eta = rate > 0 ? double(total_ - std::min(done_, total_)) / rate : 0;
  fmt::print(stderr, "\r\033[2K{} [{}] {:5.1f}%  {}/s  ETA {:.0f}s", label_, bar, frac * 100,
             human_bytes(rate), eta);
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
