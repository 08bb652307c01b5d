// A training step on a real GPU: the MLP's fused step (forward, backward, Adam, dropout) for
// three steps on the CUDA backend against the same program on the host backend. Without a
// driver or device the test is skipped with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "codegen/emit.h"
#include "compiler/model_loader.h"
#include "compiler/parameters.h"
#include "compiler/training_graph.h"
#include "passes/pass_manager.h"
#include "runtime/executor/executable.h"

namespace kiln {
namespace {

TEST(CudaTrainStep, ThreeAdamStepsMatchTheHostBackend) {
  std::string why;
  if (!runtime::cuda::cuda_available(&why)) GTEST_SKIP() << "no GPU: " << why;
  constexpr int64_t kBatch = 16;
  ir::Graph graph = compiler::load_model(std::string(KILN_SOURCE_DIR) + "/tests/lit/Inputs/mnist_mlp.json");
  compiler::load_parameter_data(graph);
  compiler::make_training_graph(graph, {kBatch, 1});
  passes::PassManager manager(passes::PassManagerOptions{}, std::cerr);
  manager.add_all(passes::training_pipeline("optimizer=adam lr=0.001"));
  manager.run(graph);
  std::vector<ir::Tensor> parameters;
  for (const ir::Value* param : graph.parameters) parameters.push_back(*param->data);
  const codegen::Program program = codegen::emit_program(graph);

  runtime::ExecutableOptions host_options;
  runtime::ExecutableOptions cuda_options;
  cuda_options.backend = runtime::Backend::Cuda;
  auto host = runtime::Executable::create(program, parameters, host_options);
  auto gpu = runtime::Executable::create(program, parameters, cuda_options);

  std::mt19937 engine(3);
  std::uniform_real_distribution<double> pixel(0, 1);
  for (int step = 0; step < 3; ++step) {
    std::vector<double> images(kBatch * 784), labels(kBatch);
    for (double& p : images) p = pixel(engine);
    for (double& l : labels) l = static_cast<double>(engine() % 10);
    const std::vector<ir::Tensor> inputs = {
        ir::Tensor::from_doubles(graph.inputs[0]->type, images),
        ir::Tensor::from_doubles(ir::TensorType{ir::DType::I32, {kBatch}}, labels)};
    const double host_loss = host->run(inputs)[0].get(0);
    const double gpu_loss = gpu->run(inputs)[0].get(0);
    EXPECT_NEAR(gpu_loss, host_loss, 1e-4 * (1 + std::fabs(host_loss))) << "step " << step + 1;
  }
  for (const std::string& name : host->parameter_names()) {
    const ir::Tensor expected = host->parameter(host->parameter_index(name));
    const ir::Tensor actual = gpu->parameter(gpu->parameter_index(name));
    double worst = 0;
    for (int64_t i = 0; i < expected.num_elements(); ++i)
      worst = std::max(worst, std::fabs(actual.get(i) - expected.get(i)));
    EXPECT_LE(worst, 1e-4) << name;
  }
}

}  // namespace
}  // namespace kiln
