// Learning-rate schedules (codistill/optim/schedule.cpp): values at the steps where each
// schedule's shape is known exactly — warm-up ends, decay boundaries, cycle peaks and
// troughs, restart boundaries — and the validation of their keys.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string>

#include "codistill/config/config_loader.hpp"
#include "codistill/optim/optimizer.hpp"

using namespace codistill;
using Catch::Matchers::Contains;

namespace {

// Within a few double ulps: the schedules compute in double from exact integer positions.
Approx near(double v) { return Approx(v).epsilon(1e-12).margin(1e-15); }

double cosine_value(double lr, double min_lr, double progress) {
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace

TEST_CASE("learning-rate schedules", "[optim][schedule]") {
  OptimizerConfig c;
  c.lr = 0.1;
  SECTION("constant with linear warm-up") {
    c.schedule.kind = "constant";
    c.schedule.warmup_steps = 10;
    CHECK(learning_rate(c, 0, 1000) == Approx(0.01));
    CHECK(learning_rate(c, 4, 1000) == Approx(0.05));
    CHECK(learning_rate(c, 9, 1000) == Approx(0.1));
    CHECK(learning_rate(c, 10, 1000) == Approx(0.1));
    CHECK(learning_rate(c, 999, 1000) == Approx(0.1));
  }
  SECTION("step decay, counted from the end of the warm-up") {
    c.schedule.kind = "step";
    c.schedule.step_size = 100;
    c.schedule.gamma = 0.5;
    CHECK(learning_rate(c, 0, 1000) == Approx(0.1));
    CHECK(learning_rate(c, 99, 1000) == Approx(0.1));
    CHECK(learning_rate(c, 100, 1000) == Approx(0.05));
    CHECK(learning_rate(c, 250, 1000) == Approx(0.025));
    c.schedule.warmup_steps = 10;
    CHECK(learning_rate(c, 4, 1000) == Approx(0.05));
    CHECK(learning_rate(c, 109, 1000) == Approx(0.1));
    CHECK(learning_rate(c, 110, 1000) == Approx(0.05));
    c.schedule.step_size = 0;
    CHECK_THROWS_AS(learning_rate(c, 110, 1000), std::invalid_argument);
  }
  SECTION("cosine from lr to min_lr after the warm-up") {
    c.schedule.kind = "cosine";
    c.schedule.warmup_steps = 10;
    c.schedule.min_lr = 0.001;
    CHECK(learning_rate(c, 0, 110) == Approx(0.01));
    CHECK(learning_rate(c, 10, 110) == Approx(0.1));
    CHECK(learning_rate(c, 60, 110) == Approx(0.001 + 0.099 * 0.5));  // midpoint
    CHECK(learning_rate(c, 35, 110) == Approx(0.001 + 0.099 * 0.5 * (1 + std::cos(std::numbers::pi / 4))));
    CHECK(learning_rate(c, 110, 110) == Approx(0.001));
    CHECK(learning_rate(c, 500, 110) == Approx(0.001));
    CHECK(learning_rate(c, 109, 110) > 0.001);
  }
  SECTION("exponential: gamma per step_size steps, continuously, floored at min_lr") {
    c.schedule.kind = "exponential";
    c.schedule.step_size = 100;
    c.schedule.gamma = 0.5;
    c.schedule.min_lr = 0.01;
    CHECK(learning_rate(c, 0, 1000) == 0.1);
    CHECK(learning_rate(c, 50, 1000) == near(0.1 * std::sqrt(0.5)));  // between step's stairs
    CHECK(learning_rate(c, 100, 1000) == near(0.05));
    CHECK(learning_rate(c, 150, 1000) == near(0.05 * std::sqrt(0.5)));
    CHECK(learning_rate(c, 300, 1000) == near(0.0125));
    // 0.1 * 0.5^4 = 0.00625 is below the floor; the floor is returned as given.
    CHECK(learning_rate(c, 400, 1000) == 0.01);
    CHECK(learning_rate(c, 100000, 1000) == 0.01);
    // Strictly decreasing above the floor: it is not the staircase of `step`.
    CHECK(learning_rate(c, 101, 1000) < learning_rate(c, 100, 1000));
    c.schedule.warmup_steps = 10;
    CHECK(learning_rate(c, 4, 1000) == Approx(0.05));
    CHECK(learning_rate(c, 10, 1000) == 0.1);
    CHECK(learning_rate(c, 110, 1000) == near(0.05));
  }
}

TEST_CASE("cyclical learning-rate schedules", "[optim][schedule]") {
  OptimizerConfig c;
  c.lr = 0.1;
  SECTION("cyclical triangular: min_lr at each cycle's start, lr half a cycle later") {
    c.schedule.kind = "cyclical";
    c.schedule.half_cycle_steps = 10;
    c.schedule.min_lr = 0.02;
    CHECK(learning_rate(c, 0, 1000) == 0.02);  // trough
    CHECK(learning_rate(c, 5, 1000) == near(0.06));
    CHECK(learning_rate(c, 10, 1000) == near(0.1));  // peak
    CHECK(learning_rate(c, 12, 1000) == near(0.02 + 0.08 * 0.8));
    CHECK(learning_rate(c, 15, 1000) == near(0.06));
    CHECK(learning_rate(c, 20, 1000) == 0.02);  // trough: the second cycle starts
    CHECK(learning_rate(c, 30, 1000) == near(0.1));
    CHECK(learning_rate(c, 1010, 1000) == near(0.1));  // cycles never end
    CHECK(learning_rate(c, 1020, 1000) == 0.02);
    // A warm-up up to lr, then the first cycle starts at its trough.
    c.schedule.warmup_steps = 10;
    CHECK(learning_rate(c, 9, 1000) == Approx(0.1));
    CHECK(learning_rate(c, 10, 1000) == 0.02);
    CHECK(learning_rate(c, 20, 1000) == near(0.1));
    CHECK(learning_rate(c, 30, 1000) == 0.02);
  }
  SECTION("cyclical triangular2: the height halves each cycle") {
    c.schedule.kind = "cyclical";
    c.schedule.cycle_mode = "triangular2";
    c.schedule.half_cycle_steps = 10;
    c.schedule.min_lr = 0.02;
    CHECK(learning_rate(c, 0, 1000) == 0.02);
    CHECK(learning_rate(c, 10, 1000) == near(0.1));
    CHECK(learning_rate(c, 20, 1000) == 0.02);
    CHECK(learning_rate(c, 30, 1000) == near(0.06));   // second peak: half the height
    CHECK(learning_rate(c, 35, 1000) == near(0.04));   // on the way down
    CHECK(learning_rate(c, 50, 1000) == near(0.04));   // third peak: a quarter
    CHECK(learning_rate(c, 70, 1000) == near(0.03));   // fourth: an eighth
    CHECK(learning_rate(c, 10 + 20 * 5000, 1000) == 0.02);  // the height has underflowed
  }
}

TEST_CASE("the sgdr learning-rate schedule", "[optim][schedule]") {
  OptimizerConfig c;
  c.lr = 0.1;
  SECTION("sgdr: cosine periods of restart_steps * restart_mult^k, each restarting at lr") {
    c.schedule.kind = "sgdr";
    c.schedule.restart_steps = 10;
    c.schedule.restart_mult = 2;
    c.schedule.min_lr = 0.001;
    // Periods [0, 10), [10, 30), [30, 70), [70, 150).
    CHECK(learning_rate(c, 0, 1000) == near(0.1));
    CHECK(learning_rate(c, 5, 1000) == near(cosine_value(0.1, 0.001, 0.5)));
    CHECK(learning_rate(c, 9, 1000) == near(cosine_value(0.1, 0.001, 0.9)));
    CHECK(learning_rate(c, 10, 1000) == near(0.1));  // restart
    CHECK(learning_rate(c, 20, 1000) == near(cosine_value(0.1, 0.001, 0.5)));
    CHECK(learning_rate(c, 29, 1000) == near(cosine_value(0.1, 0.001, 19.0 / 20.0)));
    CHECK(learning_rate(c, 30, 1000) == near(0.1));  // restart
    CHECK(learning_rate(c, 69, 1000) == near(cosine_value(0.1, 0.001, 39.0 / 40.0)));
    CHECK(learning_rate(c, 70, 1000) == near(0.1));  // restart
    CHECK(learning_rate(c, 110, 1000) == near(cosine_value(0.1, 0.001, 0.5)));
    for (std::int64_t s = 0; s < 150; ++s) {  // never below the floor, never above lr
      CHECK(learning_rate(c, s, 1000) > 0.001);
      CHECK(learning_rate(c, s, 1000) <= 0.1);
    }
    SECTION("restart_mult 1: equal periods") {
      c.schedule.restart_mult = 1;
      CHECK(learning_rate(c, 1000, 1000) == near(0.1));
      CHECK(learning_rate(c, 1005, 1000) == near(cosine_value(0.1, 0.001, 0.5)));
      CHECK(learning_rate(c, 1009, 1000) == near(cosine_value(0.1, 0.001, 0.9)));
    }
    SECTION("after a warm-up, periods count from its end") {
      c.schedule.warmup_steps = 5;
      CHECK(learning_rate(c, 0, 1000) == Approx(0.02));
      CHECK(learning_rate(c, 5, 1000) == near(0.1));
      CHECK(learning_rate(c, 15, 1000) == near(0.1));
      CHECK(learning_rate(c, 25, 1000) == near(cosine_value(0.1, 0.001, 0.5)));
    }
    SECTION("periods too long for an int64 do not overflow") {
      c.schedule.restart_steps = std::int64_t{1} << 40;
      c.schedule.restart_mult = std::int64_t{1} << 40;  // the second period is 2^80 steps
      const std::int64_t second = std::int64_t{1} << 40;
      CHECK(learning_rate(c, second, 1000) == near(0.1));
      CHECK(learning_rate(c, second + (std::int64_t{1} << 62), 1000) == near(cosine_value(0.1, 0.001, 0x1p62 / 0x1p80)));
      CHECK(learning_rate(c, std::numeric_limits<std::int64_t>::max(), 1000) < 0.1);
    }
  }
}

TEST_CASE("schedule keys are validated by name", "[optim][schedule]") {
  OptimizerConfig c;
  c.schedule.kind = "linear";
  CHECK_THROWS_WITH(learning_rate(c, 0, 10),
                    "unknown schedule kind 'linear' (valid: constant, cosine, cyclical, exponential, sgdr, step)");
  c.schedule.kind = "constant";
  CHECK_THROWS_AS(learning_rate(c, -1, 10), std::invalid_argument);
  c.schedule.warmup_steps = -1;
  CHECK_THROWS_WITH(learning_rate(c, 0, 10), "schedule.warmup_steps must be >= 0, got -1");
  c.schedule.warmup_steps = 0;
  c.schedule.kind = "exponential";
  c.schedule.step_size = 0;
  CHECK_THROWS_WITH(learning_rate(c, 0, 10), Contains("schedule.step_size must be >= 1"));
  c.schedule.kind = "cyclical";
  c.schedule.half_cycle_steps = 0;
  CHECK_THROWS_WITH(learning_rate(c, 0, 10), "schedule.half_cycle_steps must be >= 1, got 0");
  c.schedule.half_cycle_steps = 5;
  c.schedule.cycle_mode = "exp_range";
  CHECK_THROWS_WITH(learning_rate(c, 0, 10), Contains("schedule.cycle_mode must be one of triangular, triangular2"));
  c.schedule.kind = "sgdr";
  c.schedule.restart_steps = 0;
  CHECK_THROWS_WITH(learning_rate(c, 0, 10), "schedule.restart_steps must be >= 1, got 0");
  c.schedule.restart_steps = 10;
  c.schedule.restart_mult = 0;
  CHECK_THROWS_WITH(learning_rate(c, 0, 10), "schedule.restart_mult must be >= 1, got 0");
}

TEST_CASE("the config accepts exactly the schedule kinds learning_rate knows", "[optim][schedule][config]") {
  for (const auto& kind : schedule_kinds()) {
    INFO(kind);
    const Config c = parse_config("optimizer:\n  schedule:\n    kind: " + kind + "\n", "test.yaml");
    CHECK(c.optimizer.schedule.kind == kind);
    CHECK_NOTHROW(learning_rate(c.optimizer, 0, 10));
  }
  try {
    parse_config("optimizer:\n  schedule:\n    kind: bogus\n", "test.yaml");
    FAIL("no error for an unknown schedule kind");
  } catch (const ConfigError& e) {
    CHECK(e.key_path() == "optimizer.schedule.kind");
    // As many names as schedule_kinds(): commas between them.
    const std::string detail = e.detail();
    CHECK(std::count(detail.begin(), detail.end(), ',') == static_cast<long>(schedule_kinds().size()));
  }
}
