// Schedules: the order in which a block's threads run between two barriers, and the order in
// which blocks are handed to workers. Fibers only switch at barriers and collectives, so code
// between them runs as if atomic; changing the order is what makes a missing __syncthreads or a
// race on shared memory show up as a wrong result (see docs in HOST_BACKEND.md).
//
// Random orders come from splitmix64 keyed by (seed, block, phase), not from <random>, so the
// same KILN_HOST_SCHEDULE reproduces the same interleaving on every machine and worker count.
#include <charconv>
#include <cstdlib>
#include <numeric>

#include "ir/diagnostic.h"
#include "runtime/host/host_module.h"
#include "runtime/host/schedule_order.h"

namespace kiln::runtime::host {

Schedule Schedule::parse(std::string_view text, std::string_view origin) {
  if (text == "order") return Schedule{Kind::InOrder, 0};
  if (text == "reverse") return Schedule{Kind::Reverse, 0};
  constexpr std::string_view kRandom = "random:";
  if (text.substr(0, kRandom.size()) == kRandom) {
    const std::string_view digits = text.substr(kRandom.size());
    uint64_t seed = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), seed);
    if (!digits.empty() && ec == std::errc() && end == digits.data() + digits.size())
      return Schedule{Kind::Random, seed};
  }
  throw Error(std::string(origin),
              "bad host schedule '" + std::string(text) +
                  "': expected 'order', 'reverse' or 'random:SEED' (SEED a decimal number)");
}

Schedule Schedule::from_environment() {
  const char* value = std::getenv("KILN_HOST_SCHEDULE");
  if (value == nullptr || *value == '\0') return Schedule{};
  return parse(value, "KILN_HOST_SCHEDULE");
}

HostOptions host_options_from_environment() {
  HostOptions options;
  options.schedule = Schedule::from_environment();
  const char* bodies = std::getenv("KILN_HOST_CUDA_BODIES");
  const std::string_view value = bodies == nullptr ? "" : bodies;
  if (value == "1") {
    options.cuda_variants = true;
  } else if (!value.empty() && value != "0") {
    throw Error("KILN_HOST_CUDA_BODIES", "bad value '" + std::string(value) +
                                             "': expected 1 (run the CUDA bodies of kernels "
                                             "that have a host-specific one) or 0");
  }
  return options;
}

std::string Schedule::describe() const {
  switch (kind) {
    case Kind::InOrder: return "order";
    case Kind::Reverse: return "reverse";
    case Kind::Random: return "random:" + std::to_string(seed);
  }
  return "?";
}

namespace detail {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t state = a ^ (b * 0xd6e8feb86659fd93ull);
  return splitmix64(state);
}

}  // namespace

void thread_order(const Schedule& schedule, uint32_t count, uint64_t block, uint64_t phase,
                  std::vector<uint32_t>& order) {
  order.resize(count);
  std::iota(order.begin(), order.end(), 0u);
  if (schedule.kind == Schedule::Kind::Reverse) {
    std::reverse(order.begin(), order.end());
  } else if (schedule.kind == Schedule::Kind::Random) {
    uint64_t state = mix(mix(schedule.seed, block), phase);
    for (uint32_t i = count; i > 1; --i) std::swap(order[i - 1], order[splitmix64(state) % i]);
  }
}

BlockOrder::BlockOrder(const Schedule& schedule, uint64_t count)
    : kind_(schedule.kind), count_(count) {
  if (kind_ != Schedule::Kind::Random || count_ < 2) return;
  // i -> (stride * i + offset) mod count is a bijection when stride is coprime to count: a
  // shuffled order with no table, whatever the grid size.
  uint64_t state = mix(schedule.seed, count);
  offset_ = splitmix64(state) % count_;
  stride_ = splitmix64(state) % count_;
  while (std::gcd(stride_, count_) != 1) stride_ = (stride_ + 1) % count_;
}

uint64_t BlockOrder::at(uint64_t i) const {
  switch (kind_) {
    case Schedule::Kind::InOrder: return i;
    case Schedule::Kind::Reverse: return count_ - 1 - i;
    case Schedule::Kind::Random:
      if (count_ < 2) return i;
      return static_cast<uint64_t>((static_cast<unsigned __int128>(stride_) * i + offset_) %
                                   count_);
  }
  return i;
}

}  // namespace detail
}  // namespace kiln::runtime::host
