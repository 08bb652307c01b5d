// append-optimizer: turns the gradient outputs of autodiff into one optimizer step.
//
// Input: a graph whose outputs include grad.P for parameters P (the autodiff pass's product).
// Output: for each such P, an update node (sgd_update, adam_update or adamw_update) reading P,
// grad.P and P's optimizer state, and graph outputs "next.P", "next.optimizer.m.P", ... holding
// the values P and its state take after the step. The gradient outputs go (the update consumes
// them); the other outputs (the loss first) stay in front.
//
// State is ordinary parameters, named after what they hold ("optimizer.m.conv1.weight"), zeros
// before the first step, plus one step counter "train.step" (i32[1], 1 on the first step, as
// Adam's bias correction counts; dropout draws from it too, so it may already exist). The
// runtime copies every output next.X into parameter X after a step: that naming is the whole
// contract between this pass and train_step (docs/training.md).
//
// The updates of one op, attribute set and dtype are grouped into one kernel of kind
// multi_update, which codegen emits as a single multi-tensor launch (apex/PyTorch's
// multi_tensor_apply), instead of one launch per parameter.
//
// Options (MLIR style: `append-optimizer{optimizer=adam lr=0.001}`): optimizer = sgd | adam |
// adamw (default adam), lr, momentum, dampening, nesterov (0/1), weight_decay, beta1, beta2, eps;
// and two per-step scalars every update then reads (ir/optimizer_operands.h):
//   lr_schedule = cosine | linear | constant, with warmup_steps, total_steps, min_lr_scale:
//     an lr_schedule node of train.step whose factor multiplies lr (torch's LambdaLR);
//   clip_grad_norm = N > 0: a grad_norm_clip node over every gradient whose factor multiplies
//     them all (torch.nn.utils.clip_grad_norm_(parameters, N) before optimizer.step()).
// Dynamic loss scaling, when the graph has the parameter "train.loss_scale" (autodiff seeded
// the backward pass with it): a loss_scale_update node over every gradient gives the factor
// (1 / scale, or 0 to skip a step with an inf or NaN gradient) and the scaler's next state,
// with counters "train.loss_scale.good_steps" and "train.loss_scale.skipped" (i32[1], zeros)
// and options loss_scale_growth_factor (2), loss_scale_backoff_factor (0.5) and
// loss_scale_growth_interval (2000), torch.amp.GradScaler's defaults. Adam's bias correction
// then counts the steps taken, train.step - skipped, as torch's Adam does under a GradScaler;
// train.step itself counts every step (the batches read, the schedule, dropout).
#include <fmt/format.h>

#include <map>

#include "ir/diagnostic.h"
#include "ir/kernel_region.h"
#include "ir/op_registry.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "append-optimizer";
constexpr std::string_view kGradPrefix = "grad.";
constexpr std::string_view kNextPrefix = "next.";
constexpr std::string_view kStepName = "train.step";
constexpr std::string_view kLossScaleName = "train.loss_scale";
// Kernel parameter bytes per multi-tensor update kernel: the 4096 every CUDA version and
// driver accepts (ir::kMaxKernelParameterBytes needs CUDA 12.1), 73 Adam updates of 7 pointers.
constexpr size_t kParameterBytesPerKernel = 4096;

bool starts_with(const std::string& text, std::string_view prefix) {
  return text.rfind(prefix, 0) == 0;
}

struct OptimizerSpec {
  ir::OpId op{};  // sgd_update, adam_update, adamw_update
  std::string kernel_name;  // of the multi-tensor update kernel: sgd_multi, adam_multi, adamw_multi
  ir::AttrMap attrs;
  std::vector<std::string> state;  // state tensors per parameter: "momentum", or "m", "v"
  bool reads_step = false;
  ir::AttrMap schedule;   // lr_schedule's attributes; empty: a constant learning rate
  double clip_grad_norm = 0;  // 0: no clipping
  ir::AttrMap loss_scaling;   // loss_scale_update's attributes
};

// The lr_schedule and clip_grad_norm options.
void add_step_scalars(const PassContext& context, OptimizerSpec& spec) {
  std::string schedule = context.option("lr_schedule", "");
  if (schedule == "none") schedule.clear();
  if (!schedule.empty() && schedule != "cosine" && schedule != "linear" && schedule != "constant")
    throw Error("--passes", fmt::format("pass '{}': lr_schedule '{}' is not one of cosine, "
                                        "linear, constant, none",
                                        kPass, schedule));
  auto integer = [&](const char* key, double fallback = 0) {
    const double value = context.number_option(kPass, key, fallback);
    if (value < 0 || value != static_cast<double>(static_cast<int64_t>(value)))
      throw Error("--passes", fmt::format("pass '{}': option '{}' must be a whole number >= 0, "
                                          "got {}",
                                          kPass, key, value));
    return static_cast<int64_t>(value);
  };
  if (!schedule.empty())
    spec.schedule = {{"decay", schedule},
                     {"warmup_steps", integer("warmup_steps")},
                     {"total_steps", integer("total_steps")},
                     {"min_scale", context.number_option(kPass, "min_lr_scale", 0.0)}};
  else
    for (const char* key : {"warmup_steps", "total_steps", "min_lr_scale"})
      if (!context.option(key, "").empty())
        throw Error("--passes", fmt::format("pass '{}': option '{}' needs lr_schedule=cosine, "
                                            "linear or constant",
                                            kPass, key));
  spec.loss_scaling = {
      {"growth_factor", context.number_option(kPass, "loss_scale_growth_factor", 2.0)},
      {"backoff_factor", context.number_option(kPass, "loss_scale_backoff_factor", 0.5)},
      {"growth_interval", integer("loss_scale_growth_interval", 2000)}};
  spec.clip_grad_norm = context.number_option(kPass, "clip_grad_norm", 0.0);
  if (!(spec.clip_grad_norm >= 0))
    throw Error("--passes", fmt::format("pass '{}': option 'clip_grad_norm' must be > 0 (0: no "
                                        "clipping), got {}",
                                        kPass, spec.clip_grad_norm));
}

OptimizerSpec optimizer_spec(const PassContext& context) {
  context.check_options(kPass, {"optimizer", "lr", "momentum", "dampening", "nesterov",
                                "weight_decay", "beta1", "beta2", "eps", "lr_schedule",
                                "warmup_steps", "total_steps", "min_lr_scale", "clip_grad_norm",
                                "loss_scale_growth_factor", "loss_scale_backoff_factor",
                                "loss_scale_growth_interval"});
  const std::string name = context.option("optimizer", "adam");
  auto number = [&](const char* key, double fallback) {
    return context.number_option(kPass, key, fallback);
  };
  OptimizerSpec spec;
  if (name == "sgd") {
    spec.op = ir::OpId::SgdUpdate;
    spec.kernel_name = "sgd_multi";
    const double momentum = number("momentum", 0.0);
    spec.attrs = {{"lr", number("lr", 0.01)},
                  {"momentum", momentum},
                  {"dampening", number("dampening", 0.0)},
                  {"weight_decay", number("weight_decay", 0.0)},
                  {"nesterov", number("nesterov", 0.0) != 0.0}};
    if (momentum != 0.0) spec.state = {"momentum"};
    add_step_scalars(context, spec);
    return spec;
  }
  if (name == "adam" || name == "adamw") {
    spec.op = name == "adam" ? ir::OpId::AdamUpdate : ir::OpId::AdamwUpdate;
    spec.kernel_name = name + "_multi";
    spec.attrs = {{"lr", number("lr", 1e-3)},
                  {"beta1", number("beta1", 0.9)},
                  {"beta2", number("beta2", 0.999)},
                  {"eps", number("eps", 1e-8)},
                  {"weight_decay", number("weight_decay", name == "adam" ? 0.0 : 0.01)}};
    spec.state = {"m", "v"};
    spec.reads_step = true;
    add_step_scalars(context, spec);
    return spec;
  }
  throw Error("--passes", fmt::format("pass '{}': optimizer '{}' is not one of sgd, adam, adamw",
                                      kPass, name));
}

ir::Value* zeros_parameter(ir::Graph& graph, const std::string& name, const ir::TensorType& type) {
  ir::Value* value = graph.add_parameter(graph.unique_name(name), type,
                                         ir::InitializerSpec{"zeros", {}});
  value->data = std::make_shared<const ir::Tensor>(ir::Tensor(type));
  return value;
}

ir::Value* constant_parameter(ir::Graph& graph, const std::string& name,
                              const ir::TensorType& type, double value) {
  ir::Value* param = graph.add_parameter(graph.unique_name(name), type, ir::InlineData{{value}});
  param->data = std::make_shared<const ir::Tensor>(ir::Tensor::from_doubles(type, {value}));
  return param;
}

// An i32[1] counter of the step's state (`what` it counts): the graph's parameter `name`, or a
// new one starting at `initial`.
ir::Value* counter_parameter(ir::Graph& graph, const std::string& name, double initial,
                             std::string_view what) {
  const ir::TensorType type{ir::DType::I32, {1}};
  ir::Value* counter = graph.find_value(name);
  if (counter == nullptr) return constant_parameter(graph, name, type, initial);
  if (counter->role != ir::ValueRole::Parameter || counter->type != type)
    throw Error(counter->loc.render(), fmt::format("pass '{}': %{} must be an i32[1] parameter, "
                                                   "{}",
                                                   kPass, name, what));
  return counter;
}

ir::Node* add_op(ir::Graph& graph, ir::OpId op, const std::string& name,
                 std::vector<ir::Value*> inputs, ir::AttrMap attrs,
                 const std::vector<std::string>& result_names) {
  std::vector<ir::TensorType> results;
  try {
    results = ir::infer_op(op, inputs, attrs);
  } catch (const ir::OpError& error) {
    throw Error("--passes", fmt::format("pass '{}': {} '{}': {}", kPass, op, name, error.message));
  }
  KILN_CHECK(results.size() == result_names.size()) << op << " has " << results.size() << " results";
  std::vector<std::pair<std::string, ir::TensorType>> named;
  for (size_t i = 0; i < results.size(); ++i)
    named.emplace_back(graph.unique_name(result_names[i]), results[i]);
  return graph.add_node(op, name, std::move(inputs), std::move(attrs), named);
}

}  // namespace

bool AppendOptimizer::run(ir::Graph& graph, PassContext& context) {
  const OptimizerSpec spec = optimizer_spec(context);
  for (size_t i = 0; i < graph.outputs.size(); ++i)
    if (starts_with(graph.output_name(i), kNextPrefix) &&
        graph.output_name(i) != std::string(kNextPrefix) + std::string(kStepName) &&
        graph.outputs[i]->producer != nullptr && graph.outputs[i]->producer->is_kernel()) {
      context.debug(kPass, "graph already has an optimizer step; nothing to do");
      return false;
    }

  // (parameter, gradient) for every output grad.P naming a parameter.
  std::vector<std::pair<ir::Value*, ir::Value*>> updates;
  std::vector<ir::Value*> kept_outputs;
  std::vector<std::string> kept_names;
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    const std::string name = graph.output_name(i);
    ir::Value* param = starts_with(name, kGradPrefix)
                           ? graph.find_value(name.substr(kGradPrefix.size()))
                           : nullptr;
    if (param != nullptr && param->role == ir::ValueRole::Parameter) {
      updates.emplace_back(param, graph.outputs[i]);
    } else {
      kept_outputs.push_back(graph.outputs[i]);
      kept_names.push_back(name);
    }
  }
  if (updates.empty())
    throw Error("--passes", fmt::format("pass '{}': the graph has no gradient outputs "
                                        "grad.<parameter>; run autodiff first",
                                        kPass));
  if (!context.take_fuel(kPass, fmt::format("{} for {} parameter(s)", spec.op, updates.size())))
    return false;

  const ir::TensorType step_type{ir::DType::I32, {1}};
  ir::Value* step = counter_parameter(graph, std::string(kStepName), 1, "the step counter");

  // The step's scalars, read by every update: lr_scale, then grad_scale (positional, so a clip
  // without a schedule reads a constant lr_scale of 1).
  const ir::TensorType scalar_type{ir::DType::F32, {1}};
  std::vector<ir::Value*> scalars;
  if (!spec.schedule.empty())
    scalars.push_back(add_op(graph, ir::OpId::LrSchedule, "train.lr_schedule", {step},
                             spec.schedule, {"train.lr_scale"})
                          ->results[0]);
  ir::Value* loss_scale = graph.find_value(std::string(kLossScaleName));
  ir::Value* skipped = nullptr;  // steps skipped so far, with loss scaling
  if (loss_scale != nullptr) {
    if (scalars.empty())
      scalars.push_back(constant_parameter(graph, "train.lr_scale", scalar_type, 1));
    const std::string base(kLossScaleName);
    constexpr std::string_view kScalerCounter = "a counter of the loss scaler";
    ir::Value* good = counter_parameter(graph, base + ".good_steps", 0, kScalerCounter);
    skipped = counter_parameter(graph, base + ".skipped", 0, kScalerCounter);
    std::vector<ir::Value*> inputs = {loss_scale, good, skipped};
    for (auto [param, grad] : updates) inputs.push_back(grad);
    ir::Node* verdict = add_op(graph, ir::OpId::LossScaleUpdate, base + ".update",
                               std::move(inputs), spec.loss_scaling,
                               {"train.unscale", "next." + base, "next." + base + ".good_steps",
                                "next." + base + ".skipped"});
    scalars.push_back(verdict->results[0]);
    const std::vector<ir::Value*> state = {loss_scale, good, skipped};
    for (size_t r = 1; r < verdict->results.size(); ++r) {
      kept_outputs.push_back(verdict->results[r]);
      kept_names.push_back(std::string(kNextPrefix) + state[r - 1]->name);
    }
    context.debug(kPass, fmt::format("dynamic loss scaling: loss_scale_update over {} gradient(s)",
                                     updates.size()));
  }
  if (spec.clip_grad_norm > 0) {
    if (scalars.empty())
      scalars.push_back(constant_parameter(graph, "train.lr_scale", scalar_type, 1));
    // With loss scaling the clip reads the scaled gradients and loss_scale_update's factor,
    // whose place it takes: the norm is the unscaled gradients', as after GradScaler.unscale_.
    std::vector<ir::Value*> grads;
    ir::AttrMap attrs = {{"max_norm", spec.clip_grad_norm}};
    if (loss_scale != nullptr) {
      grads.push_back(scalars.back());
      scalars.pop_back();
      attrs["unscale"] = true;
    }
    for (auto [param, grad] : updates) grads.push_back(grad);
    scalars.push_back(add_op(graph, ir::OpId::GradNormClip, "train.clip_grad_norm",
                             std::move(grads), std::move(attrs),
                             {"train.grad_scale", "train.grad_norm"})
                          ->results[0]);
  }

  // Adam's step count: the steps taken, without those loss scaling skipped.
  ir::Value* optimizer_step = step;
  if (skipped != nullptr && spec.reads_step)
    optimizer_step = add_op(graph, ir::OpId::Sub, "train.optimizer_step", {step, skipped}, {},
                            {"train.optimizer_step"})
                         ->results[0];

  std::vector<ir::Value*> next_values;
  std::vector<std::string> next_names;
  // Updates grouped by (op, attributes, dtype): each group becomes one multi_update kernel.
  std::map<ir::DType, std::vector<ir::Node*>> groups;
  for (auto [param, grad] : updates) {
    std::vector<ir::Value*> inputs = {param, grad};
    std::vector<std::string> result_names = {std::string(kNextPrefix) + param->name};
    for (const std::string& state : spec.state) {
      const std::string state_name = "optimizer." + state + "." + param->name;
      inputs.push_back(zeros_parameter(graph, state_name, param->type));
      result_names.push_back(std::string(kNextPrefix) + inputs.back()->name);
    }
    if (spec.reads_step) inputs.push_back(optimizer_step);
    inputs.insert(inputs.end(), scalars.begin(), scalars.end());
    ir::Node* node = add_op(graph, spec.op, "update." + param->name, std::move(inputs), spec.attrs,
                            result_names);
    for (size_t r = 0; r < node->results.size(); ++r) {
      next_values.push_back(node->results[r]);
      next_names.push_back(result_names[r]);
    }
    groups[param->type.dtype].push_back(node);
    context.debug(kPass, fmt::format("{} of %{}", spec.op, param->name));
  }
  ir::Value* one = constant_parameter(graph, "train.one", step_type, 1);
  ir::Node* increment = add_op(graph, ir::OpId::Add, "train.step.next", {step, one}, {},
                               {std::string(kNextPrefix) + std::string(kStepName)});

  graph.outputs = std::move(kept_outputs);
  graph.output_names = std::move(kept_names);
  for (size_t i = 0; i < next_values.size(); ++i) {
    graph.outputs.push_back(next_values[i]);
    graph.output_names.push_back(next_names[i]);
  }
  graph.outputs.push_back(increment->results[0]);
  graph.output_names.push_back(std::string(kNextPrefix) + std::string(kStepName));

  // One kernel per dtype, in chunks whose pointers fit kParameterBytesPerKernel: a model of
  // hundreds of tensors (600 Adam updates are 4200 pointers) would overflow CUDA's parameter
  // space in one kernel.
  std::vector<ir::KernelGroup> kernels;
  for (auto& [dtype, members] : groups) {
    const size_t pointers = members.front()->inputs.size() + members.front()->results.size();
    const size_t per_kernel = std::max<size_t>(1, kParameterBytesPerKernel / (8 * pointers));
    for (size_t begin = 0; begin < members.size(); begin += per_kernel) {
      const size_t end = std::min(members.size(), begin + per_kernel);
      kernels.push_back({{members.begin() + static_cast<std::ptrdiff_t>(begin),
                          members.begin() + static_cast<std::ptrdiff_t>(end)},
                         spec.kernel_name, ir::kMultiUpdateKernel});
    }
    context.debug(kPass, fmt::format("{} {} kernel(s) for {} {} parameter(s), at most {} each",
                                     (members.size() + per_kernel - 1) / per_kernel,
                                     spec.kernel_name, members.size(), ir::dtype_name(dtype),
                                     per_kernel));
  }
  ir::make_kernels(graph, kernels);
  return true;
}

}  // namespace kiln::passes
