// kiln::Model from a package: the inference program (and the training step, when the package
// has one) on a backend, inputs bound by name. Loading from a file, which may mean compiling a
// model, is load.cpp: a program that only embeds a package links none of the compiler.
#include <fmt/format.h>

#include <algorithm>

#include "compiler/api/api_internal.h"
#include "compiler/output_file.h"
#include "compiler/tensor_file_util.h"
#include "ir/diagnostic.h"
#include "runtime/cuda/cuda_executable.h"

namespace kiln {

struct Model::Impl {
  std::string name;
  std::string path;         // "" for a package in memory
  Options options;
  runtime::Package package;  // as loaded: the programs, binaries and initial parameters
  std::vector<TensorInfo> inputs, outputs;
  std::string backend;
  std::unique_ptr<runtime::KernelCache> cache;
  std::unique_ptr<runtime::Executable> inference;         // without a training step
  std::unique_ptr<runtime::TrainingExecutable> training;  // with one (owns both programs)
  int64_t train_batch = 0;
  std::map<std::string, Tensor> bound;
  std::map<std::string, Tensor> results;
};

namespace {

std::vector<TensorInfo> infos(const codegen::Program& program, codegen::BufferRole role,
                              const std::vector<std::string>* names = nullptr) {
  std::vector<TensorInfo> list;
  const std::vector<int> ids = role == codegen::BufferRole::Output ? program.outputs : program.buffer_ids(role);
  for (size_t i = 0; i < ids.size(); ++i) {
    const codegen::Buffer& buffer = program.buffers[static_cast<size_t>(ids[i])];
    TensorInfo& info = list.emplace_back(TensorInfo{names ? (*names)[i] : buffer.name,
                                                    api::from_ir(buffer.type.dtype), buffer.type.shape, {}});
    const std::vector<ir::DimMap>& maps = role == codegen::BufferRole::Output ? program.output_dims : program.input_dims;
    if (i < maps.size() && ir::has_dynamic_dims(maps[i]))
      for (const ir::DynamicDim& dim : maps[i])
        info.dynamic_dims.push_back(dim.is_dynamic() ? program.symbols[static_cast<size_t>(dim.symbol)].name : "");
  }
  return list;
}

// kiln::Error naming `info`'s input unless a tensor of `dtype` and `shape` fits it: its type, or
// within the bounds of its dynamic dims (the run checks their sizes, ir/dynamic_binding.h).
void check_input(const TensorInfo& info, DType dtype, const std::vector<int64_t>& shape) {
  const bool dynamic = !info.dynamic_dims.empty() && dtype == info.dtype && shape.size() == info.shape.size();
  if (!dynamic && (dtype != info.dtype || shape != info.shape))
    throw Error("input '" + info.name + "'",
                fmt::format("expected {}, got {}", Tensor(info.dtype, info.shape).type_string(),
                            ir::TensorType{api::to_ir(dtype), shape}.to_string()));
}

runtime::Backend choose_backend(Backend backend) {
  if (backend == Backend::Host) return runtime::Backend::Host;
  std::string why;
  const bool gpu = runtime::cuda::cuda_available(&why);
  if (backend == Backend::Cuda && !gpu)
    throw Error("kiln::Backend::Cuda", why + "; use kiln::Backend::Host to run on the CPU");
  return gpu ? runtime::Backend::Cuda : runtime::Backend::Host;
}

}  // namespace

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Model Model::load_package(std::string_view bytes, const std::string& name, const Options& options) {
  Model model = api::ModelFactory::from_package(runtime::parse_package(bytes, name), name, options);
  model.impl_->path.clear();
  return model;
}

const runtime::Package& api::ModelFactory::package(const Model& model) { return model.impl_->package; }
const Options& api::ModelFactory::options(const Model& model) { return model.impl_->options; }

Model api::ModelFactory::from_package(runtime::Package package, const std::string& name,
                                      const Options& options) {
  const runtime::PackageProgram* inference = package.find(runtime::kInferenceProgram);
  if (!inference) throw Error(name, "the package has no inference program");
  const runtime::PackageProgram* step = package.find(runtime::kTrainStepProgram);

  auto impl = std::make_unique<Model::Impl>();
  impl->name = inference->program.graph_name;
  impl->path = name;
  impl->options = options;
  impl->inputs = infos(inference->program, codegen::BufferRole::Input);
  impl->outputs = infos(inference->program, codegen::BufferRole::Output, &inference->program.output_names);
  if (options.use_cache)
    impl->cache = std::make_unique<runtime::KernelCache>(runtime::KernelCache::default_directory());
  runtime::ExecutableOptions exe;
  exe.backend = choose_backend(options.backend);
  exe.cache = impl->cache.get();
  impl->backend = exe.backend == runtime::Backend::Cuda ? "cuda" : "host";
  auto create = [&](const runtime::PackageProgram& p) {
    if (exe.backend == runtime::Backend::Cuda)
      runtime::require_code_for(p.binary, runtime::cuda::cuda_device_info(0).sm, name);
    return runtime::Executable::load(p.program, package.parameters(p.program, name), exe, &p.binary);
  };
  if (step) {
    impl->train_batch = step->program.buffers.at(step->program.buffer_ids(codegen::BufferRole::Input).at(0))
                            .type.shape.at(0);
    impl->training = std::make_unique<runtime::TrainingExecutable>(create(*step), create(*inference));
  } else {
    impl->inference = create(*inference);
  }
  impl->package = std::move(package);
  return Model(std::move(impl));
}

const std::string& Model::name() const { return impl_->name; }
const std::string& Model::path() const { return impl_->path; }
const std::vector<TensorInfo>& Model::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Model::outputs() const { return impl_->outputs; }
std::string Model::backend() const { return impl_->backend; }
bool Model::can_train() const { return impl_->training != nullptr; }
int64_t Model::train_batch_size() const { return impl_->train_batch; }

void Model::set_input(const std::string& name, Tensor value) {
  for (const TensorInfo& input : impl_->inputs) {
    if (input.name != name) continue;
    // NumPy's default float64 data rounds to an f32 (f16, bf16) input.
    if (value.dtype() == DType::F64)
      value = api::from_ir(compiler::conform_input(api::to_ir(value),
                                                   {api::to_ir(input.dtype), input.shape},
                                                   "input '" + name + "'"));
    check_input(input, value.dtype(), value.shape());
    impl_->bound[name] = std::move(value);
    return;
  }
  throw Error("input '" + name + "'", "the model has no such input");
}

void Model::run() {
  std::vector<ir::Tensor> inputs;
  for (const TensorInfo& input : impl_->inputs) {
    auto it = impl_->bound.find(input.name);
    if (it == impl_->bound.end()) throw Error("input '" + input.name + "'", "not set (Model::set_input)");
    inputs.push_back(api::to_ir(it->second));
  }
  const std::vector<ir::Tensor> outputs =
      impl_->training ? impl_->training->evaluate(inputs) : impl_->inference->run(inputs);
  impl_->results.clear();
  for (size_t i = 0; i < impl_->outputs.size() && i < outputs.size(); ++i)
    impl_->results[impl_->outputs[i].name] = api::from_ir(outputs[i]);
}

const Tensor& Model::output(const std::string& name) const {
  auto it = impl_->results.find(name);
  if (it != impl_->results.end()) return it->second;
  for (const TensorInfo& output : impl_->outputs)
    if (output.name == name) throw Error("output '" + name + "'", "no run yet (Model::run)");
  throw Error("output '" + name + "'", "the model has no such output");
}

std::map<std::string, Tensor> Model::run(const std::map<std::string, Tensor>& inputs) {
  for (const auto& [name, value] : inputs) set_input(name, value);
  run();
  return impl_->results;
}

std::map<std::string, Tensor> Model::run_views(const std::map<std::string, TensorRef>& inputs) {
  for (const auto& given : inputs)
    if (std::none_of(impl_->inputs.begin(), impl_->inputs.end(),
                     [&](const TensorInfo& input) { return input.name == given.first; }))
      throw Error("input '" + given.first + "'", "the model has no such input");
  std::vector<ir::TensorView> views;
  for (const TensorInfo& input : impl_->inputs) {
    auto it = inputs.find(input.name);
    if (it == inputs.end()) throw Error("input '" + input.name + "'", "not given");
    check_input(input, it->second.dtype, it->second.shape);
    views.push_back({{api::to_ir(it->second.dtype), it->second.shape},
                     static_cast<const std::byte*>(it->second.data)});
  }
  const std::vector<ir::Tensor> outputs = impl_->training ? impl_->training->evaluate(ir::copies_of(views))
                                                          : impl_->inference->run_views(views);
  impl_->results.clear();
  for (size_t i = 0; i < impl_->outputs.size() && i < outputs.size(); ++i)
    impl_->results[impl_->outputs[i].name] = api::from_ir(outputs[i]);
  return impl_->results;
}

std::map<std::string, Tensor> Model::parameters() const {
  std::map<std::string, Tensor> values;
  if (impl_->training) {
    // The inference program's parameters: the training state holds the optimizer's too.
    const codegen::Program& program = impl_->package.find(runtime::kInferenceProgram)->program;
    std::map<std::string, ir::Tensor> state = impl_->training->state();
    for (int id : program.buffer_ids(codegen::BufferRole::Parameter)) {
      if (id < 0) continue;
      auto it = state.find(program.buffers[static_cast<size_t>(id)].name);
      if (it != state.end()) values[it->first] = api::from_ir(it->second);
    }
    return values;
  }
  const std::vector<std::string> names = impl_->inference->parameter_names();
  for (size_t i = 0; i < names.size(); ++i)
    if (!names[i].empty()) values[names[i]] = api::from_ir(impl_->inference->parameter(static_cast<int>(i)));
  return values;
}

void Model::set_parameters(const std::map<std::string, Tensor>& values) {
  const std::map<std::string, Tensor> current = parameters();
  for (const auto& [name, value] : values) {
    auto it = current.find(name);
    if (it == current.end()) throw Error("parameter '" + name + "'", "the model has no such parameter");
    if (value.dtype() != it->second.dtype() || value.shape() != it->second.shape())
      throw Error("parameter '" + name + "'",
                  fmt::format("expected {}, got {}", it->second.type_string(), value.type_string()));
  }
  if (impl_->training) {
    std::map<std::string, ir::Tensor> state = impl_->training->state();
    for (const auto& [name, value] : values) state[name] = api::to_ir(value);
    impl_->training->load_state(state);
    return;
  }
  for (const auto& [name, value] : values)
    impl_->inference->set_parameter(impl_->inference->parameter_index(name), api::to_ir(value));
}

void Model::save(const std::string& path) const {
  runtime::Package package = impl_->package;
  if (impl_->training) {
    for (auto& [name, value] : impl_->training->state()) package.weights[name] = std::move(value);
  } else {
    for (const auto& [name, value] : parameters()) package.weights[name] = api::to_ir(value);
  }
  compiler::write_file_atomically(path, runtime::serialize_package(package));
}

float Model::train_step(const Tensor& batch, const Tensor& labels) {
  if (!impl_->training)
    throw Error(impl_->name, "no training step: compile with `kiln compile --train` or set "
                             "Options::train_batch_size");
  return impl_->training->train_step({api::to_ir(batch), api::to_ir(labels)}).loss;
}

}  // namespace kiln
