// Schedules of the host backend: parsing (KILN_HOST_SCHEDULE), and the thread and block orders
// they produce (permutations, reproducible, different per phase).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>

#include "ir/diagnostic.h"
#include "runtime/host/host_module.h"
#include "runtime/host/schedule_order.h"

namespace kiln::runtime::host {
namespace {

// Sets KILN_HOST_SCHEDULE for one scope and restores the previous value.
class ScopedScheduleVariable {
 public:
  explicit ScopedScheduleVariable(const char* value) {
    if (const char* old = std::getenv(kName)) previous_ = old;
    if (value != nullptr) {
      setenv(kName, value, 1);
    } else {
      unsetenv(kName);
    }
  }
  ~ScopedScheduleVariable() {
    if (previous_) {
      setenv(kName, previous_->c_str(), 1);
    } else {
      unsetenv(kName);
    }
  }

 private:
  static constexpr const char* kName = "KILN_HOST_SCHEDULE";
  std::optional<std::string> previous_;
};

TEST(HostSchedule, ParsesEveryKind) {
  EXPECT_EQ(Schedule::parse("order", "x"), (Schedule{Schedule::Kind::InOrder, 0}));
  EXPECT_EQ(Schedule::parse("reverse", "x"), (Schedule{Schedule::Kind::Reverse, 0}));
  EXPECT_EQ(Schedule::parse("random:42", "x"), (Schedule{Schedule::Kind::Random, 42}));
  EXPECT_EQ(Schedule::parse("random:18446744073709551615", "x").seed, 18446744073709551615ull);
  for (const char* text : {"order", "reverse", "random:0", "random:7"})
    EXPECT_EQ(Schedule::parse(text, "x").describe(), text);
}

TEST(HostSchedule, RejectsBadText) {
  for (const char* text : {"", "random", "random:", "random:x", "random:-1", "random:1x",
                           "random: 1", "Order", "shuffle", "random:18446744073709551616"}) {
    try {
      Schedule::parse(text, "--host-schedule");
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const Error& error) {
      EXPECT_EQ(std::string(error.what()),
                std::string("--host-schedule: error: bad host schedule '") + text +
                    "': expected 'order', 'reverse' or 'random:SEED' (SEED a decimal number)");
    }
  }
}

TEST(HostSchedule, FromEnvironment) {
  {
    ScopedScheduleVariable unset(nullptr);
    EXPECT_EQ(Schedule::from_environment(), Schedule{});
  }
  {
    ScopedScheduleVariable empty("");
    EXPECT_EQ(Schedule::from_environment(), Schedule{});
  }
  {
    ScopedScheduleVariable reverse("reverse");
    EXPECT_EQ(Schedule::from_environment().kind, Schedule::Kind::Reverse);
  }
  {
    ScopedScheduleVariable random("random:1234");
    EXPECT_EQ(Schedule::from_environment(), (Schedule{Schedule::Kind::Random, 1234}));
  }
  {
    ScopedScheduleVariable bad("backwards");
    try {
      Schedule::from_environment();
      ADD_FAILURE() << "accepted 'backwards'";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what())
                    .find("KILN_HOST_SCHEDULE: error: bad host schedule "
                          "'backwards'"),
                std::string::npos)
          << error.what();
    }
  }
}

TEST(HostSchedule, ThreadOrders) {
  std::vector<uint32_t> order;
  detail::thread_order(Schedule{}, 5, 0, 0, order);
  EXPECT_EQ(order, (std::vector<uint32_t>{0, 1, 2, 3, 4}));
  detail::thread_order(Schedule{Schedule::Kind::Reverse, 0}, 5, 3, 9, order);
  EXPECT_EQ(order, (std::vector<uint32_t>{4, 3, 2, 1, 0}));

  const Schedule random{Schedule::Kind::Random, 77};
  std::vector<uint32_t> first, again, next_phase, other_block, other_seed;
  detail::thread_order(random, 256, 4, 1, first);
  detail::thread_order(random, 256, 4, 1, again);
  detail::thread_order(random, 256, 4, 2, next_phase);
  detail::thread_order(random, 256, 5, 1, other_block);
  detail::thread_order(Schedule{Schedule::Kind::Random, 78}, 256, 4, 1, other_seed);
  EXPECT_EQ(first, again);  // reproducible
  EXPECT_NE(first, next_phase);
  EXPECT_NE(first, other_block);
  EXPECT_NE(first, other_seed);
  std::vector<uint32_t> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t i = 0; i < 256; ++i) ASSERT_EQ(sorted[i], i);  // a permutation
}

TEST(HostSchedule, BlockOrdersArePermutations) {
  for (const Schedule& schedule :
       {Schedule{}, Schedule{Schedule::Kind::Reverse, 0}, Schedule{Schedule::Kind::Random, 3},
        Schedule{Schedule::Kind::Random, 12345}}) {
    for (uint64_t count : {1ull, 2ull, 7ull, 64ull, 1000ull, 4096ull}) {
      const detail::BlockOrder order(schedule, count);
      std::set<uint64_t> seen;
      for (uint64_t i = 0; i < count; ++i) seen.insert(order.at(i));
      EXPECT_EQ(seen.size(), count) << schedule.describe() << " " << count;
      EXPECT_EQ(*seen.rbegin(), count - 1);
    }
  }
  EXPECT_EQ(detail::BlockOrder(Schedule{Schedule::Kind::Reverse, 0}, 10).at(0), 9u);
}

}  // namespace
}  // namespace kiln::runtime::host
