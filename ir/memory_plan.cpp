// Memory planning: the plan, the planner and its checker (see memory_plan.h).
//
// The planner is "greedy by size" offset calculation (Pisarchyk & Lee, "Efficient Memory
// Management for Deep Neural Net Inference", arXiv:2001.03288, 2020; the same heuristic as
// TensorFlow Lite GPU's memory_management/greedy_by_size_assignment.cc):
//  1. In place: an elementwise node whose single operand dies at it, with a result of the same
//     size, writes its result over the operand. The two values become one buffer whose lifetime
//     is the union of theirs (a chain of such nodes makes one buffer).
//  2. Buffers are placed largest first. Each goes into the gap, among the already placed buffers
//     whose lifetimes intersect its own, that it fills best (fewest bytes left over, lowest
//     offset on a tie); when no gap is large enough, right above the highest of them. Offsets
//     and sizes are multiples of 256 bytes.
// Big tensors get first pick and small ones fill the holes they leave. The result is checked
// against the lower bound (the most bytes live at one step), which no plan can beat.
#include "ir/memory_plan.h"

#include "ir/kernel_region.h"

#include <algorithm>
#include <fmt/format.h>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <unordered_set>
#include <vector>

#include "ir/diagnostic.h"
#include "ir/graph.h"
#include "ir/op_registry.h"

namespace kiln::ir {

namespace {

// The index of the last node reading each value (values nothing reads are absent).
std::unordered_map<const Value*, int64_t> last_readers(const Graph& graph) {
  std::unordered_map<const Value*, int64_t> last;
  for (size_t i = 0; i < graph.nodes().size(); ++i)
    for (const Value* input : graph.nodes()[i]->inputs) last[input] = static_cast<int64_t>(i);
  return last;
}

std::unordered_map<const Node*, int64_t> node_indices(const Graph& graph) {
  std::unordered_map<const Node*, int64_t> index;
  for (size_t i = 0; i < graph.nodes().size(); ++i)
    index[graph.nodes()[i].get()] = static_cast<int64_t>(i);
  return index;
}

std::string slice_text(const MemorySlice& slice) {
  return fmt::format("arena[{}:+{}]", slice.offset, slice.bytes);
}

using InPlace = std::unordered_map<const Value*, const Value*>;

std::string ref(const Value* value) { return "%" + value->name; }

void log_decision(const PlanMemoryHooks& hooks, const std::string& message) {
  if (hooks.log) hooks.log(message);
}

// The operands `node` may overwrite: the single operand of an op the table marks in place
// (OpDef::in_place: the elementwise ops), or the operands of a fused loop kernel with the
// result's shape and dtype. A loop reads all its operands at element i before it stores
// element i, and an operand of the result's shape is read at i only (broadcast operands are
// read elsewhere, so they never qualify).
std::vector<const Value*> in_place_candidates(const Node& node) {
  if (node.results.size() != 1) return {};
  if (node.def && node.def->in_place && node.inputs.size() == 1) return {node.inputs[0]};
  if (!node.is_kernel() || kernel_kind(node) != kLoopKernel) return {};
  std::vector<const Value*> candidates;
  for (const Value* operand : node.inputs)
    if (operand->type == node.results[0]->type) candidates.push_back(operand);
  return candidates;
}

// Why `node` (at `index`) may not write its result over `operand`; nullopt if it may.
std::optional<std::string> in_place_refusal(const Graph& graph, const Node& node, size_t index,
                                            const Value* operand,
                                            const std::unordered_map<const Value*, int64_t>& last_read) {
  const Value* result = node.results[0];
  if (graph.is_output(result)) return "its result is a graph output, which has a buffer of its own";
  if (operand->role == ValueRole::Input) return ref(operand) + " is a graph input";
  if (operand->role == ValueRole::Parameter) return ref(operand) + " is a parameter";
  if (graph.is_output(operand)) return ref(operand) + " is a graph output";
  const int64_t last = last_read.at(operand);
  if (last != static_cast<int64_t>(index))
    return fmt::format("{} is still read later, by {}", ref(operand),
                       graph.nodes()[static_cast<size_t>(last)]->describe());
  const int64_t result_bytes = tensor_bytes(result->type);
  const int64_t operand_bytes = tensor_bytes(operand->type);
  if (result_bytes != operand_bytes)
    return fmt::format("the result has {} B, {} has {} B", result_bytes, ref(operand), operand_bytes);
  return std::nullopt;
}

// Step 1: which elementwise results overwrite an operand.
InPlace choose_in_place(const Graph& graph, const PlanMemoryHooks& hooks) {
  const auto& nodes = graph.nodes();
  const auto last_read = last_readers(graph);
  InPlace in_place;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& node = *nodes[i];
    for (const Value* operand : in_place_candidates(node)) {
      const Value* result = node.results[0];
      if (auto reason = in_place_refusal(graph, node, i, operand, last_read)) {
        log_decision(hooks, fmt::format("not in place: {} ({}): {}", node.describe(), ref(result),
                                        *reason));
        continue;
      }
      const std::string what = fmt::format("in place: {} writes {} over {} ({} B)",
                                           node.describe(), ref(result), ref(operand),
                                           tensor_bytes(result->type));
      if (hooks.allow_in_place && !hooks.allow_in_place(what)) continue;
      if (!hooks.allow_in_place) log_decision(hooks, what);
      in_place[result] = operand;
      break;
    }
  }
  return in_place;
}

// What gets one slice: a value, or a chain of values that overwrite each other in place.
struct Buffer {
  std::vector<const Value*> values;  // in schedule order
  int64_t bytes = 0;                 // slice size, aligned
  HalfStepRange live;
  int64_t offset = -1;

  bool overlaps_in_time(const Buffer& other) const {
    return live.first <= other.live.last && other.live.first <= live.last;
  }
};

std::vector<Buffer> make_buffers(const Graph& graph, const InPlace& in_place) {
  const auto ranges = planned_live_ranges(graph, in_place);
  std::vector<Buffer> buffers;
  std::unordered_map<const Value*, size_t> buffer_of;
  for (const auto& node : graph.nodes()) {
    for (const Value* value : node->results) {
      auto range = ranges.find(value);
      if (range == ranges.end()) continue;  // a graph output
      auto over = in_place.find(value);
      if (over != in_place.end()) {
        const size_t index = buffer_of.at(over->second);
        buffers[index].values.push_back(value);
        buffers[index].live.last = std::max(buffers[index].live.last, range->second.last);
        buffer_of[value] = index;
        continue;
      }
      buffer_of[value] = buffers.size();
      buffers.push_back(Buffer{{value}, align_up(tensor_bytes(value->type)), range->second});
    }
  }
  return buffers;
}

// The placed buffers, found by live range without a scan of all of them (which made planning
// quadratic). A max-tree over every buffer, sorted by first half-step, holds the last half-step
// of each placed one (-1 while unplaced). The buffers live at some point of [first, last] are
// the placed ones that start at or before `last` and end at or after `first`: a prefix of the
// sorted order, searched only under subtrees whose maximum reaches `first`. A query costs
// O((k + 1) log n) for k buffers found.
class PlacedBuffers {
 public:
  explicit PlacedBuffers(const std::vector<Buffer>& buffers) : buffers_(buffers) {
    order_.resize(buffers.size());
    for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
    std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) {
      return buffers[a].live.first < buffers[b].live.first;
    });
    position_.resize(buffers.size());
    for (size_t i = 0; i < order_.size(); ++i) position_[order_[i]] = i;
    while (leaves_ < order_.size()) leaves_ *= 2;
    max_last_.assign(2 * leaves_, -1);
  }

  void place(const Buffer& buffer) {
    size_t node = leaves_ + position_[index_of(buffer)];
    max_last_[node] = buffer.live.last;
    for (node /= 2; node >= 1; node /= 2)
      max_last_[node] = std::max(max_last_[2 * node], max_last_[2 * node + 1]);
  }

  // The placed buffers whose lifetimes intersect `range`, in no particular order.
  std::vector<const Buffer*> live_during(const HalfStepRange& range) const {
    // Buffers [0, end) of the sorted order start at or before range.last.
    const auto starts_after = std::upper_bound(
        order_.begin(), order_.end(), range.last,
        [&](int64_t last, size_t index) { return last < buffers_[index].live.first; });
    const auto end = static_cast<size_t>(starts_after - order_.begin());
    std::vector<const Buffer*> found;
    collect(1, 0, leaves_, end, range.first, found);
    return found;
  }

 private:
  size_t index_of(const Buffer& buffer) const {
    return static_cast<size_t>(&buffer - buffers_.data());
  }

  // Depth-first over the tree (depth log n), pruning subtrees that end before `first`.
  void collect(size_t node, size_t lo, size_t hi, size_t end, int64_t first,
               std::vector<const Buffer*>& found) const {
    if (lo >= end || max_last_[node] < first) return;
    if (hi - lo == 1) {
      found.push_back(&buffers_[order_[lo]]);
      return;
    }
    const size_t mid = lo + (hi - lo) / 2;
    collect(2 * node, lo, mid, end, first, found);
    collect(2 * node + 1, mid, hi, end, first, found);
  }

  const std::vector<Buffer>& buffers_;
  std::vector<size_t> order_;     // buffer indices by first half-step
  std::vector<size_t> position_;  // buffer index -> its place in order_
  size_t leaves_ = 1;
  std::vector<int64_t> max_last_;  // the tree, 1-based, leaves at [leaves_, 2 * leaves_)
};

// Step 2: best fit among the gaps left by the placed buffers live at the same time.
int64_t best_fit_offset(const Buffer& buffer, std::vector<const Buffer*> neighbours) {
  // The walk below gives the same answer for any order among equal offsets.
  std::sort(neighbours.begin(), neighbours.end(),
            [](const Buffer* a, const Buffer* b) { return a->offset < b->offset; });
  int64_t best = -1;
  int64_t best_waste = std::numeric_limits<int64_t>::max();
  int64_t free_from = 0;  // end of the highest neighbour so far (they may overlap each other)
  for (const Buffer* other : neighbours) {
    const int64_t gap = other->offset - free_from;
    if (gap >= buffer.bytes && gap - buffer.bytes < best_waste) {
      best = free_from;
      best_waste = gap - buffer.bytes;
    }
    free_from = std::max(free_from, other->offset + other->bytes);
  }
  return best >= 0 ? best : free_from;
}

// "%c: 1024 B at 0, live at nodes 2..3, reusing the bytes of %a"
std::string placement_note(const Buffer& buffer, const std::vector<const Buffer*>& placed) {
  std::string names;
  for (const Value* value : buffer.values) names += (names.empty() ? "" : " = ") + ref(value);
  std::string note = fmt::format("{}: {} B at {}, live at nodes {}..{}", names, buffer.bytes,
                                 buffer.offset, buffer.live.first / 2, buffer.live.last / 2);
  for (const Buffer* other : placed) {
    if (other == &buffer || other->overlaps_in_time(buffer)) continue;
    if (other->offset < buffer.offset + buffer.bytes && buffer.offset < other->offset + other->bytes)
      return note + ", reusing the bytes of " + ref(other->values.front());
  }
  return note;
}

}  // namespace

int64_t tensor_bytes(const TensorType& type) {
  return num_elements(type.shape) * static_cast<int64_t>(dtype_size(type.dtype));
}

double MemoryPlan::ratio() const {
  if (lower_bound_bytes == 0) return 1.0;
  return static_cast<double>(arena_bytes) / static_cast<double>(lower_bound_bytes);
}

const MemorySlice* MemoryPlan::find(const Value* value) const {
  auto it = slices.find(value);
  return it == slices.end() ? nullptr : &it->second;
}

bool is_planned(const Graph& graph, const Value* value) {
  return value->role == ValueRole::NodeResult && !graph.is_output(value);
}

std::unordered_map<const Value*, HalfStepRange> planned_live_ranges(
    const Graph& graph, const std::unordered_map<const Value*, const Value*>& in_place) {
  const std::unordered_set<const Value*> outputs(graph.outputs.begin(), graph.outputs.end());
  const auto last_read = last_readers(graph);
  std::unordered_map<const Value*, HalfStepRange> ranges;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const auto step = static_cast<int64_t>(i);
    for (const Value* result : graph.nodes()[i]->results) {
      if (outputs.count(result)) continue;
      auto read = last_read.find(result);
      const int64_t last_node = read == last_read.end() ? step : std::max(step, read->second);
      ranges[result] = HalfStepRange{2 * step, 2 * last_node + 1};
    }
  }
  // An in-place pair hands the slice over in the middle of the node: the operand is read at
  // its first half-step, the result written at its second.
  for (const auto& [result, operand] : in_place) {
    auto result_range = ranges.find(result);
    auto operand_range = ranges.find(operand);
    KILN_CHECK(result_range != ranges.end() && operand_range != ranges.end())
        << "in-place pair of values that are not both planned";
    operand_range->second.last = result_range->second.first;
    result_range->second.first += 1;
  }
  return ranges;
}

MemoryPlan plan_memory(const Graph& graph, const PlanMemoryHooks& hooks) {
  MemoryPlan plan;
  plan.in_place = choose_in_place(graph, hooks);
  plan.state_in_place = choose_state_in_place(graph, hooks);
  std::vector<Buffer> buffers = make_buffers(graph, plan.in_place);

  std::vector<Buffer*> by_size;
  for (Buffer& buffer : buffers) by_size.push_back(&buffer);
  // Stable: equal sizes keep schedule order, so the plan is deterministic.
  std::stable_sort(by_size.begin(), by_size.end(),
                   [](const Buffer* a, const Buffer* b) { return a->bytes > b->bytes; });
  PlacedBuffers index(buffers);
  std::vector<const Buffer*> placed;  // for the log's notes only
  for (Buffer* buffer : by_size) {
    buffer->offset = best_fit_offset(*buffer, index.live_during(buffer->live));
    index.place(*buffer);
    if (hooks.log) placed.push_back(buffer);
    plan.arena_bytes = std::max(plan.arena_bytes, buffer->offset + buffer->bytes);
    if (hooks.log) hooks.log(placement_note(*buffer, placed));
  }
  for (const Buffer& buffer : buffers)
    for (const Value* value : buffer.values)
      plan.slices[value] = MemorySlice{buffer.offset, tensor_bytes(value->type)};
  compute_plan_figures(graph, plan);
  return plan;
}

void compute_plan_figures(const Graph& graph, MemoryPlan& plan) {
  const auto ranges = planned_live_ranges(graph, plan.in_place);
  // live[t] - live[t-1], over the half-steps 0 .. 2 * nodes.
  std::vector<int64_t> delta(2 * graph.nodes().size() + 2, 0);
  plan.naive_bytes = 0;
  for (const auto& [value, range] : ranges) {
    const int64_t bytes = align_up(tensor_bytes(value->type));
    plan.naive_bytes += bytes;
    delta[static_cast<size_t>(range.first)] += bytes;
    delta[static_cast<size_t>(range.last) + 1] -= bytes;
  }
  plan.lower_bound_bytes = 0;
  int64_t live = 0;
  for (int64_t change : delta) {
    live += change;
    plan.lower_bound_bytes = std::max(plan.lower_bound_bytes, live);
  }
}

void check_memory_plan(const Graph& graph) {
  KILN_CHECK(graph.memory_plan.has_value()) << "the graph has no memory plan";
  const MemoryPlan& plan = *graph.memory_plan;
  KILN_CHECK(plan.arena_bytes >= 0 && plan.arena_bytes % kArenaAlignment == 0)
      << "arena of " << plan.arena_bytes << " B is not a multiple of " << kArenaAlignment;

  // Every planned value has a slice of its size, aligned, inside the arena. Counting them also
  // proves the plan holds no other key (and never dereferences one that is not in the graph).
  std::unordered_set<const Value*> planned;
  for (const auto& node : graph.nodes()) {
    for (const Value* value : node->results) {
      if (!is_planned(graph, value)) continue;
      planned.insert(value);
      const MemorySlice* slice = plan.find(value);
      KILN_CHECK(slice != nullptr) << "%" << value->name << " has no slice";
      KILN_CHECK(slice->bytes == tensor_bytes(value->type))
          << "%" << value->name << " is " << tensor_bytes(value->type) << " B, its slice "
          << slice_text(*slice) << " says " << slice->bytes;
      KILN_CHECK(slice->offset >= 0 && slice->offset % kArenaAlignment == 0)
          << "%" << value->name << " at " << slice_text(*slice) << " is not aligned to "
          << kArenaAlignment << " B";
      KILN_CHECK(slice->offset + slice->bytes <= plan.arena_bytes)
          << "%" << value->name << " at " << slice_text(*slice) << " lies outside the arena of "
          << plan.arena_bytes << " B";
    }
  }
  KILN_CHECK(plan.slices.size() == planned.size())
      << "the plan has " << plan.slices.size() << " slices for " << planned.size()
      << " planned values (a graph output, input, parameter or stale value has one)";

  // In-place pairs: an elementwise node or loop kernel overwriting an operand it reads last.
  const auto last_read = last_readers(graph);
  const auto index_of = node_indices(graph);
  for (const auto& [result, operand] : plan.in_place) {
    KILN_CHECK(planned.count(result) && planned.count(operand))
        << "an in-place pair names a value that is not planned";
    const Node* node = result->producer;
    const auto candidates = in_place_candidates(*node);
    KILN_CHECK(std::find(candidates.begin(), candidates.end(), operand) != candidates.end())
        << "%" << result->name << " is in place over %" << operand->name << ", but "
        << node->describe() << " may not overwrite it";
    const auto read = last_read.find(operand);
    KILN_CHECK(read != last_read.end() && read->second == index_of.at(node))
        << "%" << result->name << " overwrites %" << operand->name << ", which is read later";
    KILN_CHECK(*plan.find(result) == *plan.find(operand))
        << "%" << result->name << " is in place over %" << operand->name
        << " but their slices differ: " << slice_text(*plan.find(result)) << " vs "
        << slice_text(*plan.find(operand));
  }

  // No two values live at the same time overlap: sweep the values in order of birth, keeping
  // the live ones by offset (they are disjoint, so checking the neighbours is enough).
  const auto ranges = planned_live_ranges(graph, plan.in_place);
  std::vector<const Value*> by_birth;
  for (const auto& [value, range] : ranges) by_birth.push_back(value);
  std::sort(by_birth.begin(), by_birth.end(), [&](const Value* a, const Value* b) {
    return ranges.at(a).first < ranges.at(b).first;
  });
  using Death = std::pair<int64_t, const Value*>;
  std::priority_queue<Death, std::vector<Death>, std::greater<>> deaths;
  std::map<int64_t, const Value*> live_by_offset;
  for (const Value* value : by_birth) {
    const HalfStepRange range = ranges.at(value);
    while (!deaths.empty() && deaths.top().first < range.first) {
      live_by_offset.erase(plan.find(deaths.top().second)->offset);
      deaths.pop();
    }
    const MemorySlice& slice = *plan.find(value);
    auto clash = [&](const Value* other) {
      KILN_CHECK(false) << "%" << value->name << " at " << slice_text(slice) << " overlaps %"
                        << other->name << " at " << slice_text(*plan.find(other))
                        << ", and both are live at node " << range.first / 2;
    };
    auto next = live_by_offset.lower_bound(slice.offset);
    if (next != live_by_offset.end() && next->first < slice.offset + slice.bytes)
      clash(next->second);
    if (next != live_by_offset.begin()) {
      const Value* before = std::prev(next)->second;
      if (plan.find(before)->offset + plan.find(before)->bytes > slice.offset) clash(before);
    }
    live_by_offset[slice.offset] = value;
    deaths.push({range.last, value});
  }

  MemoryPlan figures = plan;
  compute_plan_figures(graph, figures);
  KILN_CHECK(figures.naive_bytes == plan.naive_bytes &&
             figures.lower_bound_bytes == plan.lower_bound_bytes)
      << "the plan reports naive " << plan.naive_bytes << " B and lower bound "
      << plan.lower_bound_bytes << " B; the graph gives " << figures.naive_bytes << " B and "
      << figures.lower_bound_bytes << " B";
  KILN_CHECK(plan.arena_bytes >= plan.lower_bound_bytes)
      << "arena of " << plan.arena_bytes << " B is below the lower bound "
      << plan.lower_bound_bytes << " B";
}

}  // namespace kiln::ir
