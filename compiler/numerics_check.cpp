#include "compiler/numerics_check.h"

#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <memory>

#include "compiler/model_loader.h"
#include "compiler/parameters.h"
#include "compiler/training_graph.h"
#include "ir/dtype.h"
#include "ir/eval/interpreter.h"
#include "passes/pass_manager.h"

namespace kiln::compiler {
namespace {

struct NonFiniteCount {
  int64_t nan = 0, positive_inf = 0, negative_inf = 0;
  int64_t total() const { return nan + positive_inf + negative_inf; }
};

NonFiniteCount count_non_finite(const ir::Tensor& tensor) {
  NonFiniteCount count;
  if (!ir::is_floating(tensor.dtype())) return count;
  for (double value : tensor.to_doubles()) {
    if (std::isnan(value)) ++count.nan;
    else if (std::isinf(value)) ++(value > 0 ? count.positive_inf : count.negative_inf);
  }
  return count;
}

// "3 of 16 elements are not finite (2 NaN, 1 +inf)".
std::string describe_count(const NonFiniteCount& count, int64_t elements) {
  std::string kinds;
  const auto add = [&](int64_t n, const char* what) {
    if (n > 0) kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", n, what);
  };
  add(count.nan, "NaN");
  add(count.positive_inf, "+inf");
  add(count.negative_inf, "-inf");
  return fmt::format("{} of {} elements are not finite ({})", count.total(), elements, kinds);
}

}  // namespace

bool NumericsReplay::all_finite(const ir::Tensor& tensor) {
  return count_non_finite(tensor).total() == 0;
}

NumericsReplay::NumericsReplay(const std::string& model, int64_t batch_size, uint64_t seed,
                               const std::string& optimizer) {
  ImportOptions import;
  import.symbolic_dim_size = 1;
  step_ = load_model(model, import);
  load_parameter_data(step_);
  make_training_graph(step_, TrainingGraphOptions{batch_size, seed});
  passes::PassManager manager(passes::PassManagerOptions{}, std::cerr);
  std::vector<std::string> pipeline = {"canonicalize"};
  for (std::string& pass : passes::backward_and_update(optimizer)) pipeline.push_back(std::move(pass));
  manager.add_all(pipeline);
  manager.run(step_);
}

std::string NumericsReplay::explain(const std::map<std::string, ir::Tensor>& state,
                                    const std::map<std::string, ir::Tensor>& inputs) {
  // Parameters that are training state take their values from before the step; the others
  // (constants of the model) never change.
  for (ir::Value* param : step_.parameters) {
    auto it = state.find(param->name);
    if (it == state.end()) continue;
    if (!all_finite(it->second))
      return fmt::format("the state before the step is already not finite: '{}': {}", param->name,
                         describe_count(count_non_finite(it->second), it->second.num_elements()));
    param->data = std::make_shared<const ir::Tensor>(it->second);
  }
  std::map<const ir::Value*, bool> finite;  // operands' finiteness, for the message
  for (const ir::Value* value : step_.parameters) finite[value] = all_finite(*value->data);
  for (const ir::Value* value : step_.inputs) finite[value] = all_finite(inputs.at(value->name));
  int index = 0;
  std::string found;
  eval::run_reference(step_, inputs, [&](const ir::Node& node,
                                         const std::vector<const ir::Tensor*>& results) {
    for (size_t i = 0; i < results.size(); ++i) {
      const NonFiniteCount count = count_non_finite(*results[i]);
      finite[node.results[i]] = count.total() == 0;
      if (count.total() == 0) continue;
      std::string operands;
      for (const ir::Value* operand : node.inputs)
        if (auto it = finite.find(operand); it != finite.end() && !it->second)
          operands += (operands.empty() ? "" : ", ") + ("'" + operand->name + "'");
      found = fmt::format("the output {}of {} (op {} of the unfused training step) is the first "
                          "that is not finite: {}; {}",
                          results.size() > 1 ? fmt::format("{} ", i) : "", node.describe(), index,
                          describe_count(count, results[i]->num_elements()),
                          operands.empty() ? "its operands are all finite"
                                           : "operands not finite: " + operands);
      return false;
    }
    ++index;
    return true;
  });
  if (!found.empty()) return found;
  return "every op of the step is finite on the reference evaluator from the same state and "
         "batch: the backend's kernels and the reference disagree (please report this)";
}

}  // namespace kiln::compiler
