// plan-memory: place every intermediate value in one arena, on the final schedule (the node
// order), and attach the plan to the graph. The planner itself (in-place reuse, greedy by size,
// best fit, 256-byte alignment) and its checker live with the plan, in ir/memory_plan.cpp, so
// that codegen and tests can use them without the pass manager.
//
// Every in-place merge takes fuel, so --pass-fuel bisects a wrong one; the placement itself is
// not optional (codegen needs a plan) and takes none. Decisions, refusals and placements are
// logged under --debug-only=plan-memory. The pass reports a change only when the plan differs
// from the one the graph already carries, so running it twice changes nothing the second time.
#include <fmt/format.h>

#include "ir/memory_plan.h"
#include "passes/pass.h"

namespace kiln::passes {

namespace {
constexpr std::string_view kPass = "plan-memory";
}  // namespace

bool PlanMemory::run(ir::Graph& graph, PassContext& context) {
  ir::PlanMemoryHooks hooks;
  hooks.allow_in_place = [&](const std::string& what) { return context.take_fuel(kPass, what); };
  if (context.debugging(kPass))
    hooks.log = [&](const std::string& message) { context.debug(kPass, message); };
  ir::MemoryPlan plan = ir::plan_memory(graph, hooks);
  context.debug(kPass, fmt::format("arena {} B, naive {} B, lower bound {} B, planned/lower "
                                   "bound {:.2f}",
                                   plan.arena_bytes, plan.naive_bytes, plan.lower_bound_bytes,
                                   plan.ratio()));
  const bool changed = !graph.memory_plan || *graph.memory_plan != plan;
  graph.memory_plan = std::move(plan);
  ir::check_memory_plan(graph);
  return changed;
}

}  // namespace kiln::passes
