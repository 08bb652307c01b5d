// lower_batch_norm_for_training (passes/batch_norm_training.h): the rewritten graph, its
// numbers on the reference interpreter against PyTorch, autodiff through it, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "codegen/emit.h"
#include "compiler/parameters.h"
#include "ir/diagnostic.h"
#include "ir/eval/interpreter.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "passes/batch_norm_training.h"
#include "passes/pass.h"
#include "passes/pass_manager.h"
#include "runtime/executor/executable.h"

namespace kiln {
namespace {

// x [2, 2, 1, 3]; per channel 6 values. momentum 0.2 (not the default), so the test sees it.
constexpr std::string_view kGraph = R"(
graph @bn(%x: f32[2,2,1,3])
    params(%scale: f32[2] = dense<[1.5, -0.5]>, %bias: f32[2] = dense<[0.25, 1]>,
           %rmean: f32[2] = dense<[0.5, -1]>, %rvar: f32[2] = dense<[2, 0.5]>)
    -> (f32[2,2,1,3]) {
  %y = batch_norm(%x, %scale, %bias, %rmean, %rvar) {momentum = 0.2} : f32[2,2,1,3] loc("bn")
  return %y
}
)";

ir::Graph parse(std::string_view text) {
  ir::Graph graph = ir::parse_graph(text, "batch_norm_training_test.ir");
  for (ir::Value* param : graph.parameters)
    param->data = std::make_shared<const ir::Tensor>(ir::Tensor::from_doubles(
        param->type, std::get<ir::InlineData>(*param->source).values));
  return graph;
}

ir::Tensor input_x() {
  return ir::Tensor::from_doubles(ir::TensorType{ir::DType::F32, {2, 2, 1, 3}},
                                  {1, 2, 4, -1, 0.5, 3, 0, -2, 1, 2, 2.5, -0.5});
}

void expect_values(const ir::Tensor& got, const std::vector<double>& want) {
  ASSERT_EQ(got.num_elements(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got.get(static_cast<int64_t>(i)), want[i], 2e-6) << "element " << i;
}

TEST(BatchNormTraining, RewritesIntoBatchNormTrainAndRunningUpdates) {
  ir::Graph graph = parse(kGraph);
  passes::lower_batch_norm_for_training(graph);
  EXPECT_EQ(graph.output_names, (std::vector<std::string>{"y", "next.rmean", "next.rvar"}));
  EXPECT_EQ(graph.outputs[0]->name, "y");
  ASSERT_NE(graph.outputs[0]->producer, nullptr);
  EXPECT_EQ(graph.outputs[0]->producer->op, ir::OpId::BatchNormTrain);
  EXPECT_EQ(graph.outputs[0]->producer->name, "bn");
  for (const auto& node : graph.nodes()) EXPECT_NE(node->op, ir::OpId::BatchNorm);
}

// The expected values are PyTorch's: F.batch_norm(x, rm, rv, scale, bias, training=True,
// momentum=0.2) in float64, which also updates rm and rv in place (unbiased variance).
TEST(BatchNormTraining, MatchesPyTorchOnTheReferenceInterpreter) {
  ir::Graph graph = parse(kGraph);
  passes::lower_batch_norm_for_training(graph);
  const std::vector<ir::Tensor> out = eval::run_reference(graph, {{"x", input_x()}});
  ASSERT_EQ(out.size(), 3u);
  expect_values(out[0], {0.25, 1.0715826038847676, 2.714747811654303, 1.6891457998655934,
                         1.1929608239623661, 0.36598586412365414, -0.5715826038847676,
                         -2.214747811654303, 0.25, 0.696775848059139, 0.5313808560913965,
                         1.523750807897851});
  expect_values(out[1], {0.6, -0.5833333333333334});
  expect_values(out[2], {2.4, 0.9483333333333334});
}

// Autodiff after the rewrite: scale and bias get gradients; the running statistics, which
// only feed next.*, get none (the loss does not depend on them).
TEST(BatchNormTraining, AutodiffDifferentiatesScaleAndBiasOnly) {
  ir::Graph graph = parse(R"(
graph @train(%x: f32[2,2,1,3])
    params(%scale: f32[2] = dense<[1.5, -0.5]>, %bias: f32[2] = dense<[0.25, 1]>,
           %rmean: f32[2] = dense<[0.5, -1]>, %rvar: f32[2] = dense<[2, 0.5]>)
    -> (f32[]) {
  %y = batch_norm(%x, %scale, %bias, %rmean, %rvar) : f32[2,2,1,3] loc("bn")
  %sq = mul(%y, %y) : f32[2,2,1,3]
  %loss = reduce_sum(%sq) : f32[]
  return %loss
}
)");
  passes::lower_batch_norm_for_training(graph);
  passes::PassContext context;
  ASSERT_TRUE(passes::Autodiff::run(graph, context));
  std::vector<std::string> names = graph.output_names;
  std::sort(names.begin() + 1, names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"loss", "grad.bias", "grad.scale", "next.rmean",
                                             "next.rvar"}));
  // loss = sum(y^2) with y = scale * xhat + bias: dbias[c] = 2 sum(y) = 2 * 6 * bias[c] (xhat
  // sums to 0) and dscale[c] = 2 sum(y * xhat) = 2 * 6 * scale[c] (xhat^2 sums to 6 / (1 + eps
  // / var)).
  const std::vector<ir::Tensor> out = eval::run_reference(graph, {{"x", input_x()}});
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    if (graph.output_names[i] == "grad.bias") expect_values(out[i], {3.0, 12.0});
    if (graph.output_names[i] == "grad.scale") {
      EXPECT_NEAR(out[i].get(0), 18.0, 1e-3);
      EXPECT_NEAR(out[i].get(1), -6.0, 1e-3);
    }
  }
}

TEST(BatchNormTraining, RunningStatisticMustBeAParameter) {
  ir::Graph graph = parse(R"(
graph @input_stats(%x: f32[2,2,1,3], %rmean: f32[2])
    params(%scale: f32[2] = dense<[1, 1]>, %bias: f32[2] = dense<[0, 0]>,
           %rvar: f32[2] = dense<[1, 1]>)
    -> (f32[2,2,1,3]) {
  %y = batch_norm(%x, %scale, %bias, %rmean, %rvar) : f32[2,2,1,3] loc("bn")
  return %y
}
)");
  try {
    passes::lower_batch_norm_for_training(graph);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("batch_norm 'bn': the running mean %rmean must be "
                                             "a parameter"),
              std::string::npos)
        << error.what();
  }
}

TEST(BatchNormTraining, SharedRunningStatisticsAreRejected) {
  ir::Graph graph = parse(R"(
graph @shared(%x: f32[2,2,1,3])
    params(%scale: f32[2] = dense<[1, 1]>, %bias: f32[2] = dense<[0, 0]>,
           %rmean: f32[2] = dense<[0, 0]>, %rvar: f32[2] = dense<[1, 1]>)
    -> (f32[2,2,1,3]) {
  %a = batch_norm(%x, %scale, %bias, %rmean, %rvar) : f32[2,2,1,3] loc("bn1")
  %b = batch_norm(%a, %scale, %bias, %rmean, %rvar) : f32[2,2,1,3] loc("bn2")
  return %b
}
)");
  try {
    passes::lower_batch_norm_for_training(graph);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("batch_norm 'bn2': the running mean parameter "
                                             "'rmean' is shared"),
              std::string::npos)
        << error.what();
  }
}

TEST(BatchNormTraining, OneValuePerChannelIsRejected) {
  ir::Graph graph = parse(R"(
graph @single(%x: f32[1,2])
    params(%scale: f32[2] = dense<[1, 1]>, %bias: f32[2] = dense<[0, 0]>,
           %rmean: f32[2] = dense<[0, 0]>, %rvar: f32[2] = dense<[1, 1]>)
    -> (f32[1,2]) {
  %y = batch_norm(%x, %scale, %bias, %rmean, %rvar) : f32[1,2] loc("bn")
  return %y
}
)");
  EXPECT_THROW(passes::lower_batch_norm_for_training(graph), Error);
}

// batch_norm_train's rule when the loss also reads the statistics (gradient_check_test weighs
// result 0 only): loss = sum(w0 * y) + sum(w1 * mean) + sum(w2 * var), analytic gradient of x
// against central finite differences of the reference interpreter (f32 values, double sums).
TEST(BatchNormTraining, StatisticGradientsAgreeWithFiniteDifferences) {
  const ir::Shape xs = {3, 2, 4};
  std::mt19937 rng(5);
  std::normal_distribution<double> normal;
  auto random = [&](const ir::Shape& shape) {
    ir::Tensor t(ir::TensorType{ir::DType::F32, shape});
    for (int64_t i = 0; i < t.num_elements(); ++i) t.set(i, normal(rng));
    return t;
  };
  const ir::Tensor x = random(xs), scale = random({2}), bias = random({2});
  const std::vector<ir::Tensor> weights = {random(xs), random({2}), random({2})};

  // The op alone: its three results, weighted and summed in double.
  auto loss_of = [&](const ir::Tensor& at) {
    ir::Graph alone;
    std::vector<ir::Value*> in = {alone.add_input("x", at.type()),
                                  alone.add_input("scale", scale.type()),
                                  alone.add_input("bias", bias.type())};
    ir::AttrMap attrs;
    const auto types = ir::infer_op(*ir::OpRegistry::instance().find("batch_norm_train"),
                                    {at.type(), scale.type(), bias.type()}, attrs);
    alone.outputs = alone.add_node(ir::OpId::BatchNormTrain, "bn", in, attrs,
                                   {{"y", types[0]}, {"mean", types[1]}, {"var", types[2]}})
                        ->results;
    const auto out =
        eval::run_reference(alone, {{"x", at}, {"scale", scale}, {"bias", bias}});
    double loss = 0;
    for (size_t r = 0; r < 3; ++r)
      for (int64_t i = 0; i < out[r].num_elements(); ++i) loss += out[r].get(i) * weights[r].get(i);
    return loss;
  };

  // The same loss in a graph with x as a parameter, differentiated by autodiff.
  ir::Graph graph;
  ir::Value* px = graph.add_parameter("x", x.type(), ir::InlineData{x.to_doubles()});
  px->data = std::make_shared<const ir::Tensor>(x);
  std::vector<ir::Value*> operands = {px, graph.add_input("scale", scale.type()),
                                      graph.add_input("bias", bias.type())};
  std::vector<ir::Value*> w;
  for (size_t r = 0; r < 3; ++r)
    w.push_back(graph.add_input("w" + std::to_string(r), weights[r].type()));
  auto add = [&](const std::string& op, std::vector<ir::Value*> in, ir::AttrMap attrs = {}) {
    std::vector<ir::TensorType> types;
    for (const ir::Value* v : in) types.push_back(v->type);
    const auto results = ir::infer_op(*ir::OpRegistry::instance().find(op), types, attrs);
    std::vector<std::pair<std::string, ir::TensorType>> named;
    for (const ir::TensorType& type : results) named.emplace_back(graph.unique_name(op), type);
    return graph.add_node(*ir::find_op_id(op), graph.unique_name(op), in, attrs, named)->results;
  };
  const std::vector<ir::Value*> bn = add("batch_norm_train", operands);
  ir::Value* loss = nullptr;
  for (size_t r = 0; r < 3; ++r) {
    ir::Value* term = add("reduce_sum", {add("mul", {bn[r], w[r]})[0]})[0];
    loss = loss == nullptr ? term : add("add", {loss, term})[0];
  }
  graph.outputs = {loss};
  passes::PassContext context;
  ASSERT_TRUE(passes::Autodiff::run(graph, context));
  std::map<std::string, ir::Tensor> feed = {{"scale", scale}, {"bias", bias}};
  for (size_t r = 0; r < 3; ++r) feed.emplace("w" + std::to_string(r), weights[r]);
  const std::vector<ir::Tensor> out = eval::run_reference(graph, feed);
  ASSERT_EQ(graph.output_name(1), "grad.x");

  for (int64_t k = 0; k < x.num_elements(); ++k) {
    ir::Tensor plus = x, minus = x;
    plus.set(k, x.get(k) + 1e-3);
    minus.set(k, x.get(k) - 1e-3);
    const double numeric = (loss_of(plus) - loss_of(minus)) / (plus.get(k) - minus.get(k));
    EXPECT_NEAR(out[1].get(k), numeric, 2e-3 * std::max(1.0, std::abs(numeric))) << "x[" << k << "]";
  }
}

// A training step of dense -> batch_norm -> relu -> dense -> mse_loss, lowered and then put
// through the training pipeline (autodiff, SGD, fusion, memory planning): the generated kernels
// on the host backend agree with the reference interpreter over three steps, running
// statistics included (both runtimes copy every next.P output into P after a step).
TEST(BatchNormTraining, HostTrainingStepsMatchTheReference) {
  constexpr std::string_view kModel = R"(
graph @mlp_bn(%x: f32[8,6], %t: f32[8,3])
    params(%w1: f32[5,6] = uniform(seed = 1), %b1: f32[5] = uniform(seed = 2),
           %scale: f32[5] = uniform(seed = 3), %bias: f32[5] = uniform(seed = 4),
           %rmean: f32[5] = uniform(seed = 5), %rvar: f32[5] = ones(),
           %w2: f32[3,5] = uniform(seed = 6))
    -> (f32[]) {
  %h = dense(%x, %w1, %b1) : f32[8,5]
  %n = batch_norm(%h, %scale, %bias, %rmean, %rvar) : f32[8,5] loc("bn")
  %a = relu(%n) : f32[8,5]
  %o = dense(%a, %w2) : f32[8,3]
  %loss = mse_loss(%o, %t) : f32[]
  return %loss
}
)";
  auto build = [&](const std::vector<std::string>& pipeline) {
    ir::Graph graph = ir::parse_graph(kModel, "mlp_bn.ir");
    compiler::load_parameter_data(graph);
    passes::lower_batch_norm_for_training(graph);
    passes::PassManager manager(passes::PassManagerOptions{}, std::cerr);
    manager.add_all(pipeline);
    manager.run(graph);
    return graph;
  };
  const std::string sgd = "optimizer=sgd lr=0.1";
  ir::Graph reference = build({"autodiff", "append-optimizer{" + sgd + "}"});
  ir::Graph fused = build(passes::training_pipeline(sgd));
  int norm_kernels = 0;
  for (const auto& node : fused.nodes())
    norm_kernels += node->op == ir::OpId::BatchNormTrain || node->op == ir::OpId::BatchNormTrainGrad;
  EXPECT_EQ(norm_kernels, 2) << "the forward and backward batch norm run as their own kernels";

  std::vector<ir::Tensor> parameters;
  for (const ir::Value* param : fused.parameters) parameters.push_back(*param->data);
  runtime::KernelCache cache(std::string(KILN_BINARY_DIR) + "/tests/host_module_cache");
  runtime::ExecutableOptions options;
  options.cache = &cache;
  options.host.workers = 2;
  std::unique_ptr<runtime::Executable> host =
      runtime::Executable::create(codegen::emit_program(fused), parameters, options);

  std::mt19937 rng(9);
  std::normal_distribution<double> normal;
  for (int step = 0; step < 3; ++step) {
    std::vector<ir::Tensor> batch;
    for (const ir::Value* input : reference.inputs) {
      ir::Tensor t(input->type);
      for (int64_t i = 0; i < t.num_elements(); ++i) t.set(i, normal(rng) + 0.5);
      batch.push_back(t);
    }
    const std::vector<ir::Tensor> expected =
        eval::run_reference(reference, {{"x", batch[0]}, {"t", batch[1]}});
    for (size_t i = 0; i < expected.size(); ++i) {
      const std::string& name = reference.output_name(i);
      if (name.rfind("next.", 0) == 0)
        reference.find_value(name.substr(5))->data = std::make_shared<const ir::Tensor>(expected[i]);
    }
    const std::vector<ir::Tensor> got = host->run(batch);
    EXPECT_NEAR(got[0].get(0), expected[0].get(0), 1e-4 * (1 + std::abs(expected[0].get(0))))
        << "loss of step " << step + 1;
  }
  for (const char* name : {"w1", "b1", "scale", "bias", "rmean", "rvar", "w2"}) {
    const ir::Tensor& want = *reference.find_value(name)->data;
    const ir::Tensor got = host->parameter(host->parameter_index(name));
    for (int64_t i = 0; i < want.num_elements(); ++i)
      EXPECT_NEAR(got.get(i), want.get(i), 1e-5 * (1 + std::abs(want.get(i)))) << name << "[" << i << "]";
  }
  // The running statistics did move: the lowering's updates are part of the step.
  EXPECT_NE(reference.find_value("rvar")->data->get(0), 1.0);
}

}  // namespace
}  // namespace kiln
