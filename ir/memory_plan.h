// The memory plan: where each intermediate value lives in the executable's one arena.
//
// Computed by the plan-memory pass (passes/plan_memory.cpp) on the final schedule, which is the
// graph's node order, and attached to the graph (Graph::memory_plan). Only intermediates are
// planned: node results that are not graph outputs. Inputs, parameters and outputs have regions
// of their own.
//
// Lifetimes are counted in half-steps of the schedule: node i reads its operands at step 2i and
// writes its results at 2i+1. A value produced by node p and last read by node u is live on
// [2p, 2u+1] (a kernel reads and writes at the same time, so a node's operands and results may
// not share memory), except for the one case the plan allows: an elementwise node that overwrites
// its single operand in place (MemoryPlan::in_place). There the operand is live up to 2u only and
// the result from 2u+1 on, so the two never overlap and may have the same slice.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

namespace kiln::ir {

class Graph;
class Value;
struct TensorType;

// Every slice starts at a multiple of this (cudaMalloc's alignment, enough for vector loads).
inline constexpr int64_t kArenaAlignment = 256;

inline int64_t align_up(int64_t bytes, int64_t alignment = kArenaAlignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

// Bytes of one tensor of this type.
int64_t tensor_bytes(const TensorType& type);

struct MemorySlice {
  int64_t offset = 0;  // from the start of the arena, a multiple of kArenaAlignment
  int64_t bytes = 0;   // the value's size (its slice is that, rounded up to the alignment)
  friend bool operator==(const MemorySlice&, const MemorySlice&) = default;
};

struct HalfStepRange {
  int64_t first = 0;  // inclusive, in half-steps (see the note at the top)
  int64_t last = 0;   // inclusive
};

struct MemoryPlan {
  // One entry per planned value: every node result that is not a graph output.
  std::unordered_map<const Value*, MemorySlice> slices;
  // Result -> the operand whose slice it overwrites (an elementwise node working in place).
  std::unordered_map<const Value*, const Value*> in_place;
  // Training state written in place: graph output next.P -> parameter P, whose storage the
  // node computing next.P writes (choose_state_in_place): no next.P buffer, no copy after the
  // step.
  std::unordered_map<const Value*, const Value*> state_in_place;
  int64_t arena_bytes = 0;  // a multiple of kArenaAlignment

  // Report figures. Each counts a value at its slice size (bytes rounded up to the alignment),
  // so lower_bound <= arena <= naive holds exactly and the ratio measures packing, not padding.
  int64_t naive_bytes = 0;        // every intermediate in a buffer of its own
  int64_t lower_bound_bytes = 0;  // the most bytes simultaneously live at any step

  // arena_bytes / lower_bound_bytes; 1 when nothing is planned.
  double ratio() const;
  // The slice of `value`, or nullptr when it is not planned.
  const MemorySlice* find(const Value* value) const;

  friend bool operator==(const MemoryPlan&, const MemoryPlan&) = default;
};

// Whether `value` belongs in the arena: a node result that is not a graph output.
bool is_planned(const Graph& graph, const Value* value);

// The live range of every planned value on the graph's node order, given the in-place pairs.
std::unordered_map<const Value*, HalfStepRange> planned_live_ranges(
    const Graph& graph, const std::unordered_map<const Value*, const Value*>& in_place);

// How plan_memory reports its decisions and asks leave for each in-place rewrite (the
// plan-memory pass binds these to its fuel and --debug-only log).
struct PlanMemoryHooks {
  // Asked before each in-place merge, with a description; false refuses it. Unset: allowed.
  std::function<bool(const std::string& what)> allow_in_place;
  // Told every decision, refusals and placements included. Unset: silent.
  std::function<void(const std::string& message)> log;
};

// The parameter P whose next value graph output `output_index` is, when that output is named
// "next.P" (a training step's state, passes/append_optimizer.cpp); else nullptr.
const Value* state_parameter(const Graph& graph, size_t output_index);

// The state outputs next.P that may be written over their parameter P (ir/state_in_place.cpp
// says when). Each is asked of hooks.allow_in_place and logged like an in-place merge.
std::unordered_map<const Value*, const Value*> choose_state_in_place(const Graph& graph,
                                                                     const PlanMemoryHooks& hooks);

// Plans the arena for `graph` on its node order (see memory_plan.cpp for the algorithm). The
// same graph always gets the same plan.
MemoryPlan plan_memory(const Graph& graph, const PlanMemoryHooks& hooks = {});

// Sets plan.naive_bytes and plan.lower_bound_bytes from the graph and plan.in_place.
void compute_plan_figures(const Graph& graph, MemoryPlan& plan);

// Checks graph.memory_plan (which must be set): every planned value has an aligned slice of its
// size inside the arena, no two values live at the same time overlap, each in-place pair is an
// elementwise node overwriting its last-read single operand of the same size, and the figures
// are right. Throws kiln::InternalError (KILN_CHECK) on the first violation.
void check_memory_plan(const Graph& graph);

}  // namespace kiln::ir
