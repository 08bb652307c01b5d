// Memory-plan report: for each model, the arena plan-memory computes, against every
// intermediate in a buffer of its own (naive) and against the lower bound (the most bytes live
// at one step of the schedule). Once on the graph as written (-O0, then plan-memory), once
// after the default pipeline (-O1, which ends with plan-memory).
// A program, not a test: it prints figures and asserts nothing.
//
//   build/kiln_plan_memory_report examples/mnist_cnn.json examples/resnet_block.json examples/resnet50.json
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <sstream>

#include "compiler/model_loader.h"
#include "compiler/parameters.h"
#include "ir/memory_plan.h"
#include "passes/pass_manager.h"

namespace {

void report(const std::string& model, const std::string& level, const kiln::ir::Graph& graph) {
  const kiln::ir::MemoryPlan& plan = *graph.memory_plan;
  std::cout << fmt::format("{:<14} {:<3} {:>6} {:>7} {:>8} {:>12} {:>12} {:>12} {:>8} {:>10}\n",
                           model, level, graph.nodes().size(), plan.slices.size(),
                           plan.in_place.size(), plan.naive_bytes, plan.arena_bytes,
                           plan.lower_bound_bytes,
                           fmt::format("{:.4f}", plan.ratio()),
                           fmt::format("{:.2f}x", plan.arena_bytes
                                                      ? static_cast<double>(plan.naive_bytes) /
                                                            static_cast<double>(plan.arena_bytes)
                                                      : 1.0));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models;
  for (int i = 1; i < argc; ++i) models.push_back(argv[i]);
  if (models.empty()) {
    std::cerr << "usage: kiln_plan_memory_report MODEL.json...\n";
    return 2;
  }
  std::cout << fmt::format("{:<14} {:<3} {:>6} {:>7} {:>8} {:>12} {:>12} {:>12} {:>8} {:>10}\n",
                           "model", "", "nodes", "planned", "in place", "naive B",
                           "planned B", "bound B", "plan/lb", "naive/plan");
  int status = 0;
  for (const std::string& model : models) {
    const std::string name = std::filesystem::path(model).stem().string();
    try {
      for (int level : {0, 1}) {
        kiln::ir::Graph graph = kiln::compiler::load_model(model);
        std::vector<std::string> pipeline = kiln::passes::inference_pipeline(level);
        if (level == 0) pipeline = {"plan-memory"};
        // Folding passes compute with parameter values.
        if (level > 0) kiln::compiler::load_parameter_data(graph);
        std::ostringstream log;
        kiln::passes::PassManagerOptions options;
        options.verify_each = false;
        kiln::passes::PassManager manager(options, log);
        manager.add_all(pipeline);
        manager.run(graph);
        report(name, "-O" + std::to_string(level), graph);
      }
    } catch (const std::exception& error) {
      std::cerr << model << ": " << error.what() << "\n";
      status = 1;
    }
  }
  return status;
}
