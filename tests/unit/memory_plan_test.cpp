// Memory planning: the planner (ir::plan_memory, what the plan-memory pass runs) and
// check_memory_plan. Hand-computed plans, the checker catching broken ones, and a property test
// over random graphs. The pass itself (fuel, --debug-only, idempotence) is tested in
// tests/lit/passes/plan-memory.ir.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <unordered_map>

#include "compiler/model_loader.h"
#include "ir/diagnostic.h"
#include "ir/memory_plan.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace kiln::ir {
namespace {

Graph planned(std::string_view text) {
  Graph graph = parse_graph(text, "test.ir");
  verify(graph);
  graph.memory_plan = plan_memory(graph);
  return graph;
}

int64_t offset_of(const Graph& graph, std::string_view name) {
  const MemorySlice* slice = graph.memory_plan->find(graph.find_value(name));
  EXPECT_NE(slice, nullptr) << "%" << name << " is not planned";
  return slice ? slice->offset : -1;
}

// Five intermediates whose lifetimes make best fit and first fit differ (sizes in 256 B units):
//   T 4 [n0..n1]   W2 1 [n1..n5]   W1 1 [n2..n7]   V 1 [n3..n4]   S 2 [n6..n7]
// T goes to 0; S (no overlap with T) to 0; W2 above T at 1024; W1 between S and W2 at 512.
// V then sees the free gaps [0:512) and [768:1024) and takes the exact fit, 768.
constexpr const char* kBestFit = R"(graph @best_fit(%x: f32[1,64])
    params(%wt: f32[256,64] = zeros(), %wd: f32[64,256] = zeros(),
           %w64: f32[64,64] = zeros(), %w128: f32[128,64] = zeros())
    -> (f32[1,64], f32[1,64], f32[1,192]) {
  %T = dense(%x, %wt) : f32[1,256]
  %W2 = dense(%T, %wd) : f32[1,64]
  %W1 = dense(%x, %w64) : f32[1,64]
  %V = dense(%x, %w64) : f32[1,64]
  %o1 = add(%V, %x) : f32[1,64]
  %o2 = add(%W2, %x) : f32[1,64]
  %S = dense(%x, %w128) : f32[1,128]
  %o3 = concat(%W1, %S) {axis = 1} : f32[1,192]
  return %o1, %o2, %o3
}
)";

TEST(MemoryPlan, BestFitTakesTheTightestGap) {
  const Graph graph = planned(kBestFit);
  EXPECT_EQ(offset_of(graph, "T"), 0);
  EXPECT_EQ(offset_of(graph, "S"), 0);
  EXPECT_EQ(offset_of(graph, "W2"), 1024);
  EXPECT_EQ(offset_of(graph, "W1"), 512);
  EXPECT_EQ(offset_of(graph, "V"), 768);  // first fit would say 0
  const MemoryPlan& plan = *graph.memory_plan;
  EXPECT_EQ(plan.arena_bytes, 1280);
  EXPECT_EQ(plan.lower_bound_bytes, 1280);  // %T and %W2 at node 1
  EXPECT_EQ(plan.naive_bytes, 1024 + 3 * 256 + 512);
  EXPECT_TRUE(plan.in_place.empty());
  EXPECT_NO_THROW(check_memory_plan(graph));
}

TEST(MemoryPlan, InPlaceChainSharesOneSlice) {
  const Graph graph = planned(R"(graph @g(%x: f32[4,64]) params(%w: f32[64,64] = zeros())
      -> (f32[4,64]) {
    %a = dense(%x, %w) : f32[4,64]
    %b = relu(%a) : f32[4,64]
    %c = sigmoid(%b) : f32[4,64]
    %d = dense(%c, %w) : f32[4,64]
    return %d
  })");
  const MemoryPlan& plan = *graph.memory_plan;
  EXPECT_EQ(plan.in_place.size(), 2u);
  EXPECT_EQ(offset_of(graph, "a"), 0);
  EXPECT_EQ(offset_of(graph, "b"), 0);
  EXPECT_EQ(offset_of(graph, "c"), 0);
  EXPECT_EQ(plan.arena_bytes, 1024);
  EXPECT_EQ(plan.lower_bound_bytes, 1024);
  EXPECT_EQ(plan.naive_bytes, 3 * 1024);
  EXPECT_DOUBLE_EQ(plan.ratio(), 1.0);
}

TEST(MemoryPlan, SmallValuesTakeAlignedSlices) {
  // Two live 4-byte scalars: 256 B each, and the arena is a multiple of 256.
  const Graph graph = planned(R"(graph @g(%x: f32[8]) -> (f32[]) {
    %s = reduce_sum(%x) : f32[]
    %m = reduce_max(%x) : f32[]
    %r = add(%s, %m) : f32[]
    return %r
  })");
  EXPECT_EQ(offset_of(graph, "s"), 0);
  EXPECT_EQ(offset_of(graph, "m"), 256);
  EXPECT_EQ(graph.memory_plan->find(graph.find_value("m"))->bytes, 4);
  EXPECT_EQ(graph.memory_plan->arena_bytes, 512);
  EXPECT_EQ(graph.memory_plan->lower_bound_bytes, 512);
}

TEST(MemoryPlan, NothingToPlan) {
  const Graph graph = planned("graph @g(%x: f32[8]) -> (f32[8]) {\n  %y = relu(%x) : f32[8]\n  return %y\n}\n");
  EXPECT_TRUE(graph.memory_plan->slices.empty());
  EXPECT_EQ(graph.memory_plan->arena_bytes, 0);
  EXPECT_DOUBLE_EQ(graph.memory_plan->ratio(), 1.0);
}

TEST(MemoryPlan, PlanningAgainGivesTheSamePlan) {
  const Graph graph = planned(kBestFit);
  EXPECT_EQ(plan_memory(graph), *graph.memory_plan);
}

TEST(MemoryPlan, PrintsSlicesAsComments) {
  const Graph graph = planned(R"(graph @g(%x: f32[1,64]) params(%w: f32[64,64] = zeros())
      -> (f32[1,64]) {
    %a = dense(%x, %w) : f32[1,64]
    %y = relu(%a) : f32[1,64] loc("act")
    %z = dense(%y, %w) : f32[1,64]
    return %z
  })");
  const std::string text = print_graph(graph);
  EXPECT_EQ(text.rfind("// memory plan: arena 256 B, naive 512 B, lower bound 256 B, "
                       "planned/lower bound 1.00\ngraph @g(",
                       0),
            0u)
      << text;
  EXPECT_NE(text.find("  %y = relu(%a) : f32[1,64] loc(\"act\")  // arena[0:+256]\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  %z = dense(%y, %w) : f32[1,64]\n"), std::string::npos) << text;
  // The comments vanish on parsing, and the plan comes back by running the pass again.
  EXPECT_EQ(print_graph(planned(text)), text);
}

// --- the checker -------------------------------------------------------------------------------

class MemoryPlanChecker : public ::testing::Test {
 protected:
  Graph graph = planned(kBestFit);
  MemorySlice& slice(std::string_view name) {
    return graph.memory_plan->slices.at(graph.find_value(name));
  }
  // check_memory_plan fails, saying `what`.
  void expect_failure(std::string_view what) {
    try {
      check_memory_plan(graph);
      ADD_FAILURE() << "the checker accepted the plan";
    } catch (const InternalError& error) {
      EXPECT_NE(std::string(error.what()).find(what), std::string::npos) << error.what();
    }
  }
};

TEST_F(MemoryPlanChecker, CatchesOverlap) {
  slice("V").offset = slice("W1").offset;  // live together at node 4
  expect_failure("overlaps %");
}

TEST_F(MemoryPlanChecker, CatchesPartialOverlap) {
  slice("W2").offset = 768;  // [768:+256) meets %T [0:+1024) at node 1
  expect_failure("overlaps %");
}

TEST_F(MemoryPlanChecker, CatchesUnalignedSlice) {
  slice("S").offset = 128;
  expect_failure("is not aligned");
}

TEST_F(MemoryPlanChecker, CatchesSliceOutsideTheArena) {
  graph.memory_plan->arena_bytes = 1024;
  expect_failure("lies outside the arena");
}

TEST_F(MemoryPlanChecker, CatchesPlannedOutput) {
  graph.memory_plan->slices[graph.find_value("o1")] = MemorySlice{2048, 256};
  expect_failure("planned values");
}

TEST_F(MemoryPlanChecker, CatchesBogusInPlace) {
  // dense is not elementwise, and %W1 is read long after %V is made.
  graph.memory_plan->in_place[graph.find_value("V")] = graph.find_value("W1");
  expect_failure("may not overwrite it");
}

TEST_F(MemoryPlanChecker, CatchesWrongFigures) {
  graph.memory_plan->lower_bound_bytes -= 256;
  expect_failure("the plan reports");
}

// --- property test over random graphs ----------------------------------------------------------

// Random DAGs of elementwise, binary, reduce, reshape and matmul-like (dense) ops with random
// shapes. Every node's type comes from infer_op, so the graphs verify.
class RandomGraph {
 public:
  RandomGraph(std::mt19937& rng) : rng_(rng) {}

  Graph build() {
    graph_ = Graph();
    graph_.name = "random";
    pool_.clear();
    const int inputs = pick(1, 3);
    for (int i = 0; i < inputs; ++i)
      pool_.push_back(graph_.add_input("in" + std::to_string(i), TensorType{DType::F32, shape()}));
    const int nodes = pick(1, 40);
    for (int i = 0; i < nodes; ++i) add_random_node();
    // The last value, and now and then a few others, are outputs.
    std::vector<Value*> results;
    for (const auto& value : graph_.values())
      if (value->role == ValueRole::NodeResult) results.push_back(value.get());
    graph_.outputs.push_back(results.back());
    for (int extra = pick(0, 2); extra > 0; --extra) {
      Value* value = results[static_cast<size_t>(pick(0, static_cast<int>(results.size()) - 1))];
      if (!graph_.is_output(value)) graph_.outputs.push_back(value);
    }
    return std::move(graph_);
  }

 private:
  int pick(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }

  Shape shape() {
    static const int64_t dims[] = {1, 2, 3, 4, 7, 8, 16, 31, 64, 100, 128};
    Shape out(static_cast<size_t>(pick(1, 3)));
    for (int64_t& dim : out) dim = dims[pick(0, 10)];
    return out;
  }

  // Recent values are picked more often, so graphs have long chains as well as branches.
  Value* operand() {
    const int n = static_cast<int>(pool_.size());
    const int back = std::min(n - 1, pick(0, 1) ? pick(0, 2) : pick(0, n - 1));
    return pool_[static_cast<size_t>(n - 1 - back)];
  }

  Value* add(const std::string& op, std::vector<Value*> inputs, AttrMap attrs = {}) {
    const OpDef* def = OpRegistry::instance().find(op);
    std::vector<TensorType> types;
    for (const Value* input : inputs) types.push_back(input->type);
    std::vector<TensorType> results;
    try {
      results = infer_op(*def, types, attrs);
    } catch (const OpError&) {
      return nullptr;
    }
    Node* node = graph_.add_node(*ir::find_op_id(op), "", std::move(inputs), std::move(attrs),
                                 {{"v" + std::to_string(counter_++), results[0]}});
    node->def = def;
    pool_.push_back(node->results[0]);
    return node->results[0];
  }

  void add_random_node() {
    static const char* unary[] = {"relu", "exp", "tanh", "sigmoid", "neg"};
    static const char* binary[] = {"add", "mul", "sub"};
    static const char* reduce[] = {"reduce_sum", "reduce_mean", "reduce_max"};
    Value* x = operand();
    switch (pick(0, 6)) {
      case 0:
      case 1:
        if (add(unary[pick(0, 4)], {x})) return;
        break;
      case 2: {  // same shape, or broadcast against an earlier value
        Value* y = pool_[static_cast<size_t>(pick(0, static_cast<int>(pool_.size()) - 1))];
        if (add(binary[pick(0, 2)], {x, y})) return;
        if (add(binary[pick(0, 2)], {x, x})) return;
        break;
      }
      case 3: {
        if (x->type.rank() == 0) break;
        AttrMap attrs{{"axes", std::vector<int64_t>{pick(0, x->type.rank() - 1)}},
                      {"keepdims", static_cast<bool>(pick(0, 1))}};
        if (add(reduce[pick(0, 2)], {x}, std::move(attrs))) return;
        break;
      }
      case 4: {
        const int64_t n = num_elements(x->type.shape);
        std::vector<int64_t> to = pick(0, 1) ? std::vector<int64_t>{n} : std::vector<int64_t>{1, n};
        if (add("reshape", {x}, {{"shape", to}})) return;
        break;
      }
      case 5: {
        if (x->type.rank() == 0) break;
        const int64_t in = x->type.shape.back();
        const int64_t out = std::vector<int64_t>{1, 8, 16, 64, 256}[static_cast<size_t>(pick(0, 4))];
        Value* weight = graph_.add_parameter("w" + std::to_string(counter_++),
                                             TensorType{DType::F32, {out, in}},
                                             InitializerSpec{"zeros", {}});
        if (add("dense", {x, weight})) return;
        break;
      }
      case 6:
        if (add("cast", {x}, {{"to", std::string(pick(0, 1) ? "f16" : "f32")}})) return;
        break;
    }
    add("relu", {x});  // always valid: every value is floating point
  }

  std::mt19937& rng_;
  Graph graph_;
  std::vector<Value*> pool_;
  int counter_ = 0;
};

// An independent pairwise check: values whose node ranges intersect have disjoint slices, except
// a result written in place over its operand.
void expect_no_overlap(const Graph& graph) {
  const MemoryPlan& plan = *graph.memory_plan;
  const auto ranges = planned_live_ranges(graph, plan.in_place);
  std::vector<std::pair<const Value*, HalfStepRange>> all(ranges.begin(), ranges.end());
  for (size_t i = 0; i < all.size(); ++i) {
    for (size_t j = i + 1; j < all.size(); ++j) {
      const auto& [a, ra] = all[i];
      const auto& [b, rb] = all[j];
      if (ra.last < rb.first || rb.last < ra.first) continue;
      const MemorySlice& sa = *plan.find(a);
      const MemorySlice& sb = *plan.find(b);
      EXPECT_TRUE(sa.offset + sa.bytes <= sb.offset || sb.offset + sb.bytes <= sa.offset)
          << "%" << a->name << " and %" << b->name << " overlap\n" << print_graph(graph);
    }
  }
}

// The offsets the planner must choose, by the plain quadratic method its interval index
// replaced: buffers (a value with the results written in place over it) placed largest first,
// schedule order on ties, each at the tightest gap among all placed buffers live at the same time.
std::unordered_map<const Value*, int64_t> exhaustive_best_fit(const Graph& graph,
                                                             const MemoryPlan& plan) {
  struct Block {
    std::vector<const Value*> values;
    int64_t bytes = 0;
    HalfStepRange live;
    int64_t offset = -1;
  };
  const auto ranges = planned_live_ranges(graph, plan.in_place);
  std::vector<Block> blocks;
  std::unordered_map<const Value*, size_t> block_of;
  for (const auto& node : graph.nodes()) {
    for (const Value* value : node->results) {
      if (!ranges.count(value)) continue;
      if (auto over = plan.in_place.find(value); over != plan.in_place.end()) {
        Block& block = blocks[block_of.at(over->second)];
        block.values.push_back(value);
        block.live.last = std::max(block.live.last, ranges.at(value).last);
        block_of[value] = block_of.at(over->second);
        continue;
      }
      const int64_t bytes = tensor_bytes(value->type);
      block_of[value] = blocks.size();
      blocks.push_back({{value}, (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment,
                        ranges.at(value)});
    }
  }
  std::vector<size_t> order(blocks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return blocks[a].bytes > blocks[b].bytes; });
  std::vector<const Block*> placed;
  for (size_t i : order) {
    Block& block = blocks[i];
    std::vector<const Block*> live;
    for (const Block* other : placed)
      if (other->live.first <= block.live.last && block.live.first <= other->live.last)
        live.push_back(other);
    std::sort(live.begin(), live.end(),
              [](const Block* a, const Block* b) { return a->offset < b->offset; });
    int64_t best = -1, best_waste = INT64_MAX, free_from = 0;
    for (const Block* other : live) {
      const int64_t gap = other->offset - free_from;
      if (gap >= block.bytes && gap - block.bytes < best_waste) {
        best = free_from;
        best_waste = gap - block.bytes;
      }
      free_from = std::max(free_from, other->offset + other->bytes);
    }
    block.offset = best >= 0 ? best : free_from;
    placed.push_back(&block);
  }
  std::unordered_map<const Value*, int64_t> offsets;
  for (const Block& block : blocks)
    for (const Value* value : block.values) offsets[value] = block.offset;
  return offsets;
}

TEST(MemoryPlan, RandomGraphsGetValidPlans) {
  std::mt19937 rng(20240611);
  RandomGraph generator(rng);
  constexpr int kGraphs = 1500;
  double ratio_sum = 0, worst = 1.0;
  int with_intermediates = 0, in_place_total = 0;
  for (int i = 0; i < kGraphs; ++i) {
    Graph graph = generator.build();
    ASSERT_NO_THROW(verify(graph)) << print_graph(graph);
    graph.memory_plan = plan_memory(graph);
    ASSERT_NO_THROW(check_memory_plan(graph)) << print_graph(graph);
    const MemoryPlan& plan = *graph.memory_plan;
    EXPECT_GE(plan.arena_bytes, plan.lower_bound_bytes) << print_graph(graph);
    EXPECT_LE(plan.arena_bytes, plan.naive_bytes) << print_graph(graph);
    expect_no_overlap(graph);
    for (const auto& [value, offset] : exhaustive_best_fit(graph, plan))
      EXPECT_EQ(plan.find(value)->offset, offset) << "%" << value->name << "\n" << print_graph(graph);
    EXPECT_EQ(plan_memory(graph), plan) << "not deterministic";
    if (plan.slices.empty()) continue;
    ++with_intermediates;
    in_place_total += static_cast<int>(plan.in_place.size());
    ratio_sum += plan.ratio();
    worst = std::max(worst, plan.ratio());
  }
  ASSERT_GT(with_intermediates, kGraphs / 2);
  // Reported, not asserted: best fit is a heuristic.
  std::printf("[ MemoryPlan ] %d random graphs (%d with intermediates, %d in-place results): "
              "planned/lower bound mean %.4f, worst %.4f\n",
              kGraphs, with_intermediates, in_place_total, ratio_sum / with_intermediates, worst);
}

TEST(MemoryPlan, PlansTheExamples) {
  for (const char* name : {"mnist_cnn", "mlp", "resnet_block", "resnet50"}) {
    Graph graph = compiler::load_model(std::string(KILN_SOURCE_DIR) + "/examples/" + name + ".json");
    graph.memory_plan = plan_memory(graph);
    ASSERT_NO_THROW(check_memory_plan(graph)) << name;
    const MemoryPlan& plan = *graph.memory_plan;
    EXPECT_LE(plan.arena_bytes, plan.naive_bytes) << name;
    std::printf("[ MemoryPlan ] %-12s naive %10lld B, planned %10lld B, lower bound %10lld B, "
                "planned/lower bound %.3f\n",
                name, static_cast<long long>(plan.naive_bytes),
                static_cast<long long>(plan.arena_bytes),
                static_cast<long long>(plan.lower_bound_bytes), plan.ratio());
  }
}

}  // namespace
}  // namespace kiln::ir
