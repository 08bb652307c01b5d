#include "runtime/executor/executable.h"

#include <algorithm>
#include <fmt/format.h>
#include <set>

#include "ir/diagnostic.h"
#include "ir/float_storage.h"
#include "runtime/executor/host_executor.h"

namespace kiln::runtime {
namespace {

class HostBacked final : public Executable {
 public:
  HostBacked(codegen::Program program, const std::vector<ir::Tensor>& parameters,
             const ExecutableOptions& options)
      : Executable(std::move(program)),
        module_(host::HostModule::compile(program_.source, program_.graph_name, options.cache,
                                          options.verbose)),
        executable_(program_, module_, parameters, options.host) {}

  std::vector<ir::Tensor> run(const std::vector<ir::Tensor>& inputs, RunProfile* profile) override {
    return executable_.run(inputs, profile);
  }
  std::vector<ir::Tensor> run_views(const std::vector<ir::TensorView>& inputs) override {
    return executable_.run_views(inputs);
  }
  ir::Tensor parameter(int index) override { return executable_.parameter(index); }
  void set_parameter(int index, const ir::Tensor& value) override {
    executable_.set_parameter(index, value);
  }

 private:
  host::HostModule module_;
  host::HostExecutable executable_;
};

class CudaBacked final : public Executable {
 public:
  CudaBacked(codegen::Program program, const std::vector<ir::Tensor>& parameters,
             const ExecutableOptions& options, const CudaBinary* binary)
      : Executable(std::move(program)) {
    executable_ = cuda::CudaExecutable::create(program_, *binary, parameters, options.cuda);
  }

  std::vector<ir::Tensor> run(const std::vector<ir::Tensor>& inputs, RunProfile* profile) override {
    return executable_->run(inputs, profile);
  }
  std::vector<ir::Tensor> run_views(const std::vector<ir::TensorView>& inputs) override {
    return executable_->run_views(inputs);
  }
  void submit(const std::vector<ir::Tensor>& inputs) override { executable_->submit(inputs); }
  std::vector<ir::Tensor> collect() override { return executable_->collect(); }
  size_t pending() const override { return executable_->pending(); }
  ir::Tensor parameter(int index) override { return executable_->parameter(index); }
  void set_parameter(int index, const ir::Tensor& value) override {
    executable_->set_parameter(index, value);
  }

 private:
  std::unique_ptr<cuda::CudaExecutable> executable_;
};

}  // namespace

std::unique_ptr<Executable> Executable::load(codegen::Program program,
                                             const std::vector<ir::Tensor>& parameters,
                                             const ExecutableOptions& options,
                                             const CudaBinary* binary) {
  KILN_CHECK(options.backend != Backend::Cuda || binary != nullptr)
      << "the CUDA backend loads compiled code; Executable::create compiles it";
  if (options.backend == Backend::Cuda)
    return std::make_unique<CudaBacked>(std::move(program), parameters, options, binary);
  return std::make_unique<HostBacked>(std::move(program), parameters, options);
}

void Executable::submit(const std::vector<ir::Tensor>& inputs) {
  KILN_CHECK(submitted_.size() < 2) << "submit() with two runs not collected";
  submitted_.push_back(run(inputs));
}

std::vector<ir::Tensor> Executable::collect() {
  KILN_CHECK(!submitted_.empty()) << "collect() without a submitted run";
  std::vector<ir::Tensor> outputs = std::move(submitted_.front());
  submitted_.pop_front();
  return outputs;
}

std::vector<std::string> Executable::parameter_names() const {
  std::vector<std::string> names;
  for (const codegen::Buffer& buffer : program_.buffers) {
    if (buffer.role != codegen::BufferRole::Parameter) continue;
    if (names.size() <= static_cast<size_t>(buffer.index)) names.resize(buffer.index + 1);
    names[buffer.index] = buffer.name;
  }
  return names;
}

int Executable::parameter_index(const std::string& name) const {
  for (const codegen::Buffer& buffer : program_.buffers)
    if (buffer.role == codegen::BufferRole::Parameter && buffer.name == name) return buffer.index;
  return -1;
}

TrainingExecutable::TrainingExecutable(std::unique_ptr<Executable> step,
                                       std::unique_ptr<Executable> eval)
    : step_(std::move(step)), eval_(std::move(eval)) {
  std::set<std::string> state;
  const codegen::Program& program = step_->program();
  for (const codegen::Program::StateUpdate& update : program.state_updates)
    state.insert(program.buffers[update.parameter].name);
  if (eval_) {
    const std::vector<std::string> names = eval_->parameter_names();
    for (size_t e = 0; e < names.size(); ++e) {
      if (names[e].empty()) continue;
      const int s = step_->parameter_index(names[e]);
      if (s < 0)
        throw Error("", fmt::format("the inference graph's parameter '{}' is not a parameter of "
                                    "the training step",
                                    names[e]));
      shared_.emplace_back(s, static_cast<int>(e));
      state.insert(names[e]);
    }
  }
  state_names_.assign(state.begin(), state.end());
}

TrainingExecutable::StepResult TrainingExecutable::train_step(const std::vector<ir::Tensor>& inputs) {
  submit_step(inputs);
  return collect_step();
}

void TrainingExecutable::submit_step(const std::vector<ir::Tensor>& inputs) {
  step_->submit(inputs);
  eval_stale_ = true;
}

TrainingExecutable::StepResult TrainingExecutable::collect_step() {
  std::vector<ir::Tensor> outputs = step_->collect();
  KILN_CHECK(!outputs.empty() && outputs[0].num_elements() == 1)
      << "a training step's first output is its scalar loss";
  StepResult result;
  result.loss = static_cast<float>(outputs[0].get(0));
  if (outputs.size() > 1) result.logits = std::move(outputs[1]);
  return result;
}

void TrainingExecutable::sync_eval_parameters() {
  if (!eval_stale_) return;
  for (auto [s, e] : shared_) eval_->set_parameter(e, step_->parameter(s));
  eval_stale_ = false;
}

std::vector<ir::Tensor> TrainingExecutable::evaluate(const std::vector<ir::Tensor>& inputs) {
  KILN_CHECK(eval_ != nullptr) << "this training executable has no inference program";
  KILN_CHECK(step_->pending() == 0) << "evaluate() with a training step not collected";
  sync_eval_parameters();
  return eval_->run(inputs);
}

std::map<std::string, ir::Tensor> TrainingExecutable::state() {
  KILN_CHECK(step_->pending() == 0) << "state() with a training step not collected";
  std::map<std::string, ir::Tensor> state;
  for (const std::string& name : state_names_)
    state.emplace(name, step_->parameter(step_->parameter_index(name)));
  return state;
}

void TrainingExecutable::load_state(const std::map<std::string, ir::Tensor>& given) {
  KILN_CHECK(step_->pending() == 0) << "load_state() with a training step not collected";
  // Check everything first, so a bad checkpoint changes nothing. Weights stored in bf16 or f16
  // (kiln train --weights-dtype) widen exactly to the f32 the step takes.
  std::map<std::string, ir::Tensor> state = given;
  for (const std::string& name : state_names_) {
    auto it = state.find(name);
    if (it == state.end())
      throw Error("", fmt::format("the checkpoint has no tensor '{}'", name));
    const codegen::Buffer* buffer = nullptr;
    for (const codegen::Buffer& b : step_->program().buffers)
      if (b.role == codegen::BufferRole::Parameter && b.name == name) buffer = &b;
    KILN_CHECK(buffer != nullptr) << name;
    it->second = ir::widened_from_storage(std::move(it->second), buffer->type);
    if (it->second.type() != buffer->type)
      throw Error("", fmt::format("checkpoint tensor '{}' is {}, the model's is {}", name,
                                  it->second.type().to_string(), buffer->type.to_string()));
  }
  for (const auto& [name, tensor] : state)
    if (!std::binary_search(state_names_.begin(), state_names_.end(), name))
      throw Error("", fmt::format("the checkpoint's tensor '{}' is not part of this model's "
                                  "training state (another model or optimizer?)",
                                  name));
  for (const std::string& name : state_names_)
    step_->set_parameter(step_->parameter_index(name), state.at(name));
  eval_stale_ = true;
}

int64_t TrainingExecutable::step_count() {
  const int index = step_->parameter_index("train.step");
  if (index < 0) return 0;
  return static_cast<int64_t>(step_->parameter(index).get(0));
}

}  // namespace kiln::runtime
