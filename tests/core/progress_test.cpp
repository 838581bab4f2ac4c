// Progress bars: units, rates and ETA text as pure formatting, and each phase's clock (paused
// while other phases run) on a fake clock. No test sleeps.
#include "core/progress.h"

#include <gtest/gtest.h>

namespace qf {
namespace {

TEST(ProgressFormat, RatesCarryTheirUnit) {
  EXPECT_EQ(format_rate(12'345'678, ProgressUnit::bytes), "12.35 MB/s");
  EXPECT_EQ(format_rate(1234.4, ProgressUnit::tokens), "1234 tokens/s");
  EXPECT_EQ(format_rate(42.3, ProgressUnit::tokens), "42.3 tokens/s");
  EXPECT_EQ(format_rate(0.5, ProgressUnit::modules), "0.50 modules/s");
  EXPECT_EQ(format_rate(3, ProgressUnit::layers), "3.00 layers/s");
  EXPECT_EQ(format_rate(0.126, ProgressUnit::runs), "0.13 runs/s");
  EXPECT_EQ(format_rate(0, ProgressUnit::tokens), "0.00 tokens/s");
}

TEST(ProgressFormat, DurationsReadAsMinutesAndHours) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(-3), "0s");
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(492), "8m12s");
  EXPECT_EQ(format_duration(3600 + 5 * 60 + 59), "1h05m");
}

TEST(ProgressFormat, EtaComesFromThePhasesOwnRate) {
  ProgressState s;
  s.unit = ProgressUnit::modules;
  s.total = 100;
  EXPECT_EQ(format_eta(s), "ETA --");  // nothing done yet: no rate to go by
  s.done = 25;
  s.seconds = 50;  // 0.5 modules/s: 75 left take 150 s
  EXPECT_EQ(format_eta(s), "ETA 2m30s");
  s.done = 100;
  EXPECT_EQ(format_eta(s), "done");
}

TEST(ProgressFormat, LineNamesPhaseCountRateAndEta) {
  ProgressState s{"gptq", ProgressUnit::modules, 12, 40, 24, "layer 3/10"};
  EXPECT_EQ(format_progress_line(s, 10),
            "gptq [###.......]  30.0%  layer 3/10  12/40 modules  0.50 modules/s  ETA 56s");
  ProgressState w{"write", ProgressUnit::bytes, 2e9, 4e9, 10, ""};
  EXPECT_EQ(format_progress_line(w, 4), "write [##..]  50.0%  200.00 MB/s  ETA 10s");
  ProgressState c{"calibrate", ProgressUnit::tokens, 512, 2048, 2, ""};
  EXPECT_EQ(format_progress_line(c, 4), "calibrate [#...]  25.0%  256 tokens/s  ETA 6s");
}

TEST(Progress, PausedTimeDoesNotCountTowardsThePhase) {
  double now = 100;
  Progress p("gptq", ProgressUnit::modules, 10, /*enabled=*/false, [&] { return now; });
  now = 104;
  p.advance(2);
  p.pause();
  now = 200;  // another phase ran for 96 s
  p.resume();
  now = 206;
  p.advance(3);
  const ProgressState s = p.state();
  EXPECT_DOUBLE_EQ(s.seconds, 10.0);
  EXPECT_DOUBLE_EQ(s.done, 5.0);
  EXPECT_EQ(s.phase, "gptq");
  EXPECT_EQ(format_eta(s), "ETA 10s");  // 0.5 modules/s, 5 left
}

TEST(Progress, PauseAndResumeAreIdempotent) {
  double now = 0;
  Progress p("calibrate", ProgressUnit::tokens, 100, false, [&] { return now; });
  p.pause();
  p.pause();
  now = 50;
  p.resume();
  p.resume();
  now = 60;
  EXPECT_DOUBLE_EQ(p.state().seconds, 10.0);
}

}  // namespace
}  // namespace qf
